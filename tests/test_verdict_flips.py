"""Verdict flips (attnsim.studies.verdict, issue 27 section 3): evidence tags in hardware configs, which assumed
parameters move a run's throughput ratio against its baseline across 1.0 or by more than 10 % within their
ranges (each end checked against a plain run with that value set via --set), the verdict line of attnsim
run, its JSON section, the sweep store column, the Python API and the tornado recipe."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

import attnsim
from attnsim.cli import main
from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.studies import verdict
from attnsim.studies.sensitivity import Param

# A case built to flip: DGX H100 against the DGX A100 baseline on a 2-layer Llama-2-7B (fast). The H100's
# throughput ratio is ~1.4 by default (at the time of writing 1.399; not asserted: other defaults may move it).
# Over the ranges set below (the other hardware's ranges emptied, so exactly these four are checked):
# - hbm_bandwidth_gbps down to 500 GB/s, under the A100's 2039: the H100 node becomes slower (ratio ~0.48): flips;
# - kernel_overhead_us up to 3 us (file 1 us): the 2-layer model's per-kernel cost grows, ratio ~1.19
#   (-15 %): moves by more than 10 %, stays above 1;
# - mem_eta_max down to 0.7 (file 0.862): ratio ~1.30 (-7 %): robust;
# - idle_power_w 60-150 W: static power enters energy, not time: the throughput ratio does not move at all.
EXP = {
    "name": "flip",
    "systems": ["dgx_a100", "dgx_h100"],
    "baseline": "dgx_a100",
    "models": ["llama2-7b"],
    "scenarios": {"s": {"batch_size": 2, "prompt_len": 64, "output_len": 6}},
    "generation": {"mode": "sampled", "samples": 3},
}
H100_RANGES = {
    "hbm_bandwidth_gbps": {"low": 500, "high": 3350, "source": "assumption: test"},
    "kernel_overhead_us": {"low": 1, "high": 3, "source": "assumption: test"},
    "mem_eta_max": {"low": 0.7, "high": 0.862, "source": "assumption: test"},
    "idle_power_w": {"low": 60, "high": 150, "source": "assumption: test"},
}
SETS = {
    "models.llama2-7b.num_layers": 2,
    "hardware.h100_sxm.ranges": H100_RANGES,
    "hardware.a100_80gb_sxm.ranges": {},
    "hardware.nvlink3.ranges": {},
    "hardware.nvlink4.ranges": {},
    "hardware.nvlink3.choices": {},
    "hardware.nvlink4.choices": {},
}
BW, KERNEL, ETA, IDLE = (f"hardware.h100_sxm.{k}" for k in H100_RANGES)


def _cli_sets() -> list[str]:
    return [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in SETS.items()]


@pytest.fixture(scope="module")
def flipped():
    return attnsim.run(EXP, SETS, flips=True)


def _section(res, system="dgx_h100"):
    return next(d for d in res if d["system"] == system)["verdict_flips"]


def _row(sec, name):
    return next(r for r in sec["parameters"] if r["parameter"] == name)


# ---------------------------------------------------------------- evidence tags


def _gpu() -> dict:
    return load_yaml(find_config("hardware", "h100_sxm"))


@pytest.mark.parametrize(
    "evidence,key,msg",
    [
        (
            {"tdp_w": {"tag": "guessed", "source": "x"}},
            "evidence.tdp_w.tag",
            "expected one of measured, datasheet, artefact, assumed, got 'guessed'",
        ),
        ({"bogus_w": {"tag": "measured", "source": "x"}}, "evidence.bogus_w", "expected a field of kind gpu ("),
        ({"tdp_w": {"tag": "datasheet"}}, "evidence.tdp_w.source", "missing required key"),
        ({"tdp_w": {"tag": "assumed", "source": "x"}}, "evidence.tdp_w", "expected a ranges: entry for an assumed"),
        ({"tdp_w": {"tag": "datasheet", "source": "x", "low": 1}}, "evidence.tdp_w.low", "unknown key"),
        (["tdp_w"], "evidence", "expected a mapping of field -> {tag, source}"),
    ],
)
def test_bad_evidence_refused_one_line(evidence, key, msg):
    with pytest.raises(ConfigError) as e:
        registry.validate_hardware({**_gpu(), "evidence": evidence}, "x.yaml")
    s = str(e.value)
    assert "\n" not in s and e.value.file == "x.yaml" and e.value.key == key and msg in s, s


def test_validate_hardware_memo_by_content():
    """validate_hardware is memoised by content (issue 30): an equal dict (another object) gets the same frozen
    spec, a changed value or another file name a new one, and a refused config is refused again (not memoised)."""
    gpu = _gpu()
    spec = registry.validate_hardware(gpu, "h100_sxm.yaml")
    assert registry.validate_hardware(dict(gpu), "h100_sxm.yaml") is spec  # same content, another dict
    assert registry.validate_hardware(gpu, "other.yaml") is not spec  # the file is part of the key (messages)
    moved = registry.validate_hardware({**gpu, "tdp_w": gpu["tdp_w"] * 2}, "h100_sxm.yaml")
    assert moved is not spec and moved.tdp_w == 2 * spec.tdp_w  # a moved parameter is validated anew
    bad = {**gpu, "tdp_w": -1}
    for _ in range(2):  # a failure is not remembered as a value: both calls raise
        with pytest.raises(ConfigError) as e:
            registry.validate_hardware(bad, "x.yaml")
        assert e.value.key == "tdp_w"


def test_bad_evidence_refused_by_attnsim_run(tmp_path, capsys):
    """A bad tag given on the command line: one line, exit 2, nothing written."""
    assert main(["run", "--no-write", "--set", "hardware.h100_sxm.evidence={tdp_w: {tag: wild, source: x}}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "evidence.tdp_w.tag: expected one of measured" in err and "\n" not in err


def test_evidence_tags_ranges_are_assumed_and_retagging_excludes():
    hw = {
        **_gpu(),
        "evidence": {
            "tdp_w": {"tag": "datasheet", "source": "NVIDIA H100 datasheet"},
            "attn_call_us": {"tag": "measured", "source": "calibration/README.md"},
        },
    }
    tags = registry.evidence_tags(hw, "x.yaml")
    ranged = set(_gpu()["ranges"])
    assert {k for k, t in tags.items() if t.tag == "assumed"} == ranged - {"attn_call_us"}
    assert tags["tdp_w"].tag == "datasheet" and tags["attn_call_us"].tag == "measured"
    # the evidence block is set aside like ranges: the model is the model without it
    assert registry.build(hw).spec == registry.build(_gpu()).spec
    # a ranged parameter tagged measured is not varied by the verdict flips
    from attnsim.sim.experiment import load_experiment

    exp = load_experiment("default", ["hardware.h100_sxm.evidence={attn_call_us: {tag: measured, source: x}}"])
    names = {p.name for p in verdict.assumed_params(exp.tree, ["h100_sxm"])}
    assert names == {f"h100_sxm.{k}" for k in ranged - {"attn_call_us"}}
    # an assumed tag's source is the one the verdict_flips rows carry (else the range's)
    exp = load_experiment("default", ["hardware.h100_sxm.evidence={attn_call_us: {tag: assumed, source: my note}}"])
    src = {p.key: p.source for p in verdict.assumed_params(exp.tree, ["h100_sxm"])}
    assert src["attn_call_us"] == "my note"
    assert src["attn_mem_eta_fused"] == _gpu()["ranges"]["attn_mem_eta_fused"]["source"]


# ---------------------------------------------------------------- the rule (no simulation)


def test_flip_and_ten_percent_rule_by_hand():
    """pair_flips on memoised values: point 110 tok/s over baseline 100 tok/s = ratio 1.1 by default."""
    runs = verdict.Runs()
    a = Param("gpu", "a", 1.0, 2.0, 3.0, "assumption: t", "g.yaml", False)  # the compared system's hardware
    b = Param("link", "b", 1.0, 2.0, 3.0, "assumption: t", "l.yaml", True)  # the baseline's hardware
    c = Param("both", "c", 1.0, 2.0, 3.0, "assumption: t", "c.yaml", False)  # used by both
    P, B = ("P",), ("B",)
    runs.memo.update(
        {
            (P, None): 110.0,
            (B, None): 100.0,
            (P, a.override(1.0)): 100.0,  # 100/100 = 1.0: on 1.0 (no side), 9.1 % off 1.1: neither
            (P, a.override(3.0)): 122.0,  # 1.22 = 1.1 x 1.109: moves 10.9 % > 10 %, no flip
            (B, b.override(1)): 112.0,  # 110/112 = 0.982: flips (and moves 10.7 %)
            (B, b.override(3)): 100.0,
            (P, c.override(1.0)): 90.0,
            (B, c.override(1.0)): 90.0,  # 1.0 again: neither
            (P, c.override(3.0)): None,
            (B, c.override(3.0)): 100.0,
        }
    )  # the point fails at high
    runs.errors[(P, c.override(3.0))] = "does_not_fit"
    from attnsim.core.config import ConfigTree

    base_tree = ConfigTree(experiment={}, systems={"base": {}})  # names the baseline system (the memo holds its values)
    sec = verdict.pair_flips(runs, (P, None), (B, base_tree), [a, b, c], {"gpu", "both"}, {"link", "both"})
    assert sec["ratio_base"] == pytest.approx(1.1) and sec["parameters_checked"] == 3 and sec["baseline"] == "base"
    ra, rb, rc = sec["parameters"]
    assert (ra["ratio_low"], ra["ratio_high"]) == (1.0, 1.22) and not ra["flips"] and ra["moves_over_10pct"]
    assert rb["ratio_low"] == pytest.approx(110 / 112) and rb["ratio_high"] == 1.1
    assert rb["flips"] and rb["moves_over_10pct"] and rb["low"] == 1 and rb["parameter"] == "hardware.link.b"
    assert rc["ratio_low"] == 1.0 and rc["ratio_high"] is None and not rc["flips"] and not rc["moves_over_10pct"]
    assert rc["errors"] == {"high": "does_not_fit"}
    assert runs.reruns == 0  # every value came from the memo
    from attnsim.core.report import verdict_line

    line = verdict_line({"system": "p", "verdict_flips": sec})
    assert line == (
        "verdict: p 1.100x faster than base (throughput ratio 1.100x); robust to 1 of 3 assumed "
        "parameters; flips with hardware.link.b in [1, 3] (0.9821x-1.100x); moves >10 % with hardware.gpu.a in [1, 3] "
        "(1.000x-1.220x); does not complete with hardware.both.c at high"
    )


# ---------------------------------------------------------------- categorical choices


def _nvlink4() -> dict:
    return load_yaml(find_config("hardware", "nvlink4"))


@pytest.mark.parametrize(
    "choices,key,msg",
    [
        ({"bogus": {"values": [1], "source": "x"}}, "choices.bogus", "expected a field of kind link ("),
        (
            {"allreduce": {"values": ["nccl"], "source": "x"}},
            "choices.allreduce.values.0",
            "expected a value other than the file's own ('nccl'), got 'nccl'",
        ),
        (
            {"allreduce": {"values": ["ring", "bogus"], "source": "x"}},
            "choices.allreduce.values.1",
            "expected a legal value of allreduce, got 'bogus'",
        ),
        ({"allreduce": {"values": [], "source": "x"}}, "choices.allreduce.values", ""),
        ({"allreduce": {"values": ["ring"]}}, "choices.allreduce.source", "missing required key"),
        (["allreduce"], "choices", "expected a mapping of field -> {values, source}"),
    ],
)
def test_bad_choices_refused_one_line(choices, key, msg):
    with pytest.raises(ConfigError) as e:
        registry.split_choices({**_nvlink4(), "choices": choices}, "x.yaml")
    s = str(e.value)
    assert "\n" not in s and e.value.file == "x.yaml" and e.value.key == key and msg in s, s


def test_shipped_choices_are_legal_alternatives():
    """Every built-in choices: block names legal values other than the file's own (checked at load too)."""
    from pathlib import Path

    n = 0
    for f in sorted(Path(find_config("hardware", "nvlink4")).parent.glob("*.yaml")):
        n += len(registry.split_choices(load_yaml(f), f.name))
    assert n >= 8  # 6 AttAcc PIM presets (channels_per_item) + NVLink 3 and 4 (allreduce)


CHOICES = {
    **SETS,
    "hardware.h100_sxm.ranges": {},
    "hardware.nvlink4.choices": {"allreduce": {"values": ["ring", "custom"], "source": "assumption: test"}},
}


def test_choice_alternatives_match_plain_runs():
    """A categorical choice is re-run at each alternative: its ratios equal plain runs with the value set by
    --set; low / high are the alternatives with the lowest / highest ratio; the A100 baseline (NVLink 3) is
    not re-run with NVLink 4's values."""
    from attnsim.core.report import _span

    res = attnsim.run(EXP, CHOICES, flips=True)
    sec = _section(res)
    assert sec["parameters_checked"] == 1
    row = _row(sec, "hardware.nvlink4.allreduce")
    assert row["choice"] and row["value"] == "nccl" and row["alternatives"] == ["ring", "custom"]
    for alt, r in zip(row["alternatives"], row["ratio_alternatives"]):
        plain = attnsim.run(EXP, {**CHOICES, "hardware.nvlink4.allreduce": alt})
        assert r == pytest.approx(plain[1]["vs_baseline"]["throughput_ratio"], rel=1e-12), alt
    lo, hi = min(row["ratio_alternatives"]), max(row["ratio_alternatives"])
    assert (row["ratio_low"], row["ratio_high"]) == (lo, hi)
    assert row["low"] == row["alternatives"][row["ratio_alternatives"].index(lo)]
    r0 = sec["ratio_base"]
    assert row["flips"] == any((e - 1) * (r0 - 1) < 0 for e in row["ratio_alternatives"])
    assert row["moves_over_10pct"] == any(abs(e / r0 - 1) > 0.10 for e in row["ratio_alternatives"])
    assert _span(row).startswith("hardware.nvlink4.allreduce = ring (") and ", custom (" in _span(row)
    # the tornado draws a choice as one labelled mark per alternative at its ratio (no low / high bars)
    from attnsim.plots import figure

    fig = figure(res.table(), "tornado")
    ax = fig.axes[0]
    assert ax.patches == [] or all(b.get_width() == 0 for b in ax.patches)  # the only row is a choice
    marks = [ln for ln in ax.get_lines() if ln.get_gid() == "choice" and ln.get_marker() == "D"]
    assert sorted(m.get_xdata()[0] for m in marks) == pytest.approx(sorted(row["ratio_alternatives"]))
    assert sorted(t.get_text() for t in ax.texts if t.get_gid() == "choice") == ["custom", "ring"]
    assert "alternative (choices:)" in [t.get_text() for t in ax.get_legend().get_texts()]
    import matplotlib.pyplot as plt

    plt.close(fig)
    # an alternative the run already uses is left out (here: --set to ring leaves custom only)
    res2 = attnsim.run(EXP, {**CHOICES, "hardware.nvlink4.allreduce": "ring"}, flips=True)
    assert _row(_section(res2), "hardware.nvlink4.allreduce")["alternatives"] == ["custom"]


# ---------------------------------------------------------------- system and controller choices


def _only(exp: dict, keep: set = frozenset()) -> dict:
    """SETS for ``exp`` with the 2-layer model and every ranges: / choices: block of its hardware and systems
    emptied except the ``keep`` ones ("hardware.NAME.choices", "systems.NAME.choices"): exactly those checked."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.studies.sweep.spec import hardware_refs

    tree = load_experiment(exp).tree
    out = {"models.llama2-7b.num_layers": 2}
    for s in tree.systems:
        if "choices" in tree.systems[s] and f"systems.{s}.choices" not in keep:
            out[f"systems.{s}.choices"] = {}
        for h in hardware_refs(tree, s):
            for k in ("ranges", "choices"):
                if k in tree.hardware[h] and f"hardware.{h}.{k}" not in keep:
                    out[f"hardware.{h}.{k}"] = {}
    return out


def _exp(systems: list, baseline: str) -> dict:
    return {**EXP, "systems": systems, "baseline": baseline}


# (compared system, baseline, the choices: block kept, its parameter, the shipped alternatives)
SYSTEM_CHOICES = [
    (
        "cxl_pnm",
        "dgx_a100",
        "systems.cxl_pnm.choices",
        "systems.cxl_pnm.mapper",
        [{"policy": "gpu_only", "attention_on": "pnm"}, {"policy": "gpu_only"}],
    ),
    ("h100_x8_cxl_pnm_attn", "dgx_h100", "systems.h100_x8_cxl_pnm_attn.choices", None, [None]),
    ("cxl_aim", "dgx_h100", "systems.cxl_aim.choices", "systems.cxl_aim.mapper.options.tp_vector_ops", ["replicated"]),
    ("attacc_h100", "dgx_h100", "hardware.hbm3_5200_pim.choices", "hardware.hbm3_5200_pim.controller", None),
]


@pytest.mark.parametrize("system,baseline,keep,param,alts", SYSTEM_CHOICES, ids=[c[0] for c in SYSTEM_CHOICES])
def test_system_and_controller_choices_match_plain_runs(system, baseline, keep, param, alts):
    """Each system alternative (placement, mapper, tp_vector_ops) and DRAM controller rule set is one re-run of
    that system alone: its ratio equals a plain run with the value set by --set; the shipped alternatives are the
    ones the files list; the flip / 10 % rule holds on the plain values."""
    from attnsim.hwmodels.dram.rules import CONTROLLERS, DEFAULT_CONTROLLER

    param = param or f"systems.{system}.mapper.attention_on"
    if alts is None:  # every rule set but the default (hbm3_5200_pim keeps ramulator2: hwmodels/dram/rules.py)
        alts = [c for c in CONTROLLERS if c != DEFAULT_CONTROLLER]
    exp = _exp([baseline, system], baseline)
    sets = _only(exp, {keep})
    res = attnsim.run(exp, sets, flips=True)
    sec = _section(res, system)
    assert sec["parameters_checked"] == 1 and sec["baseline"] == baseline
    row = _row(sec, param)
    assert row["choice"] and row["alternatives"] == alts and row["source"]
    r0 = sec["ratio_base"]
    for alt, r in zip(alts, row["ratio_alternatives"]):
        plain = attnsim.run(exp, {**sets, param: alt})
        want = next(d for d in plain if d["system"] == system)["vs_baseline"]["throughput_ratio"]
        assert r == pytest.approx(want, rel=1e-12), alt
    assert row["flips"] == any((e - 1) * (r0 - 1) < 0 for e in row["ratio_alternatives"])
    assert row["moves_over_10pct"] == any(abs(e / r0 - 1) > 0.10 for e in row["ratio_alternatives"])


def test_placement_flip_case(tmp_path, capsys):
    """A case built to flip: cxl_pnm against 8 x A100 with its PNM accelerators cut to 0.25 TFLOPS (file 16; its
    range 4-32): the whole decode on the PNMs is compute-bound and loses (ratio ~0.37 at the time of writing), while
    attention alone on the PNMs with the GEMMs on the H100s, or everything on the H100s, wins (~1.47x, ~1.40x):
    the placement reverses the verdict, and the verdict line says so."""
    exp = _exp(["dgx_a100", "cxl_pnm"], "dgx_a100")
    sets = {**_only(exp, {"systems.cxl_pnm.choices"}), "hardware.cxl_pnm_lpddr5x.pu.tflops": 0.25}
    res = attnsim.run(exp, sets, flips=True)
    sec = _section(res, "cxl_pnm")
    row = _row(sec, "systems.cxl_pnm.mapper")
    assert sec["ratio_base"] < 1 and all(r > 1 for r in row["ratio_alternatives"]) and row["flips"]
    for alt, r in zip(row["alternatives"], row["ratio_alternatives"]):
        plain = attnsim.run(exp, {**sets, "systems.cxl_pnm.mapper": alt})
        assert r == pytest.approx(plain[1]["vs_baseline"]["throughput_ratio"], rel=1e-12)
    from attnsim.core.report import verdict_line

    line = verdict_line(next(d for d in res if d["system"] == "cxl_pnm"))
    assert "; flips with systems.cxl_pnm.mapper = {policy: gpu_only, attention_on: pnm} (" in line, line
    assert ", {policy: gpu_only} (" in line, line
    # the same through attnsim run: the override text is what --set takes
    exp_file = tmp_path / "flip_placement.yaml"
    exp_file.write_text(yaml.safe_dump(exp))
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}")]
    assert main(["run", str(exp_file), "--no-write"] + args) == 0
    assert line in capsys.readouterr().out


def _system_file(tmp_path, name: str, choices) -> str:
    d = load_yaml(find_config("systems", name))
    d["choices"] = choices
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


@pytest.mark.parametrize(
    "system,choices,key,msg",
    [
        (
            "h100_x8_cxl_pnm_attn",
            {"mapper.attention_on": {"values": ["gpu"], "source": "x"}},
            "choices.mapper.attention_on.values.0",
            "expected a legal value of mapper.attention_on, got 'gpu' (expected a device that can run attention",
        ),
        (
            "h100_x8_cxl_pnm_attn",
            {"mapper.attention_on": {"values": [None, "pnm"], "source": "x"}},
            "choices.mapper.attention_on.values.1",
            "expected a value other than the file's own ('pnm'), got 'pnm'",
        ),
        (
            "h100_x8_cxl_pnm_attn",
            {"mapper.attention_on": {"values": ["nope"], "source": "x"}},
            "choices.mapper.attention_on.values.0",
            "expected a device role of the system (gpu, pnm), got 'nope'",
        ),
        (
            "cxl_aim",
            {"mapper.options.tp_vector_ops": {"values": ["all"], "source": "x"}},
            "choices.mapper.options.tp_vector_ops.values.0",
            "expected one of split, replicated, got 'all'",
        ),
        (
            "cxl_aim",
            {"mapper.options.nope": {"values": [1], "source": "x"}},
            "choices.mapper.options.nope.values.0",
            "unknown option(s) nope for policy cxl_pnm",
        ),
        (
            "cxl_pnm",
            {"mapper": {"values": [{"policy": "cxl_pnm", "attention_on": "pnm"}], "source": "x"}},
            "choices.mapper.values.0",
            "not used by policy cxl_pnm",
        ),
        ("cxl_pnm", {"bogus": {"values": [1], "source": "x"}}, "choices.bogus", "expected a key of a system ("),
        (
            "cxl_pnm",
            {"mapper.policy": {"values": ["gpu_only"]}},
            "choices.mapper.policy.source",
            "missing required key",
        ),
    ],
)
def test_bad_system_choices_refused_at_load(tmp_path, system, choices, key, msg):
    from attnsim.sim.experiment import load_experiment

    f = _system_file(tmp_path, system, choices)
    with pytest.raises(ConfigError) as e:
        load_experiment({**EXP, "systems": [f], "baseline": None})
    s = str(e.value)
    assert "\n" not in s and e.value.file.endswith(f"{system}.yaml") and e.value.key == key and msg in s, s


def test_bad_system_choice_refused_by_attnsim_run(tmp_path, capsys):
    """One line naming the file and choices.KEY.values.N, exit 2, nothing written."""
    f = _system_file(tmp_path, "cxl_aim", {"mapper.options.tp_vector_ops": {"values": ["all"], "source": "x"}})
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({**EXP, "systems": [f], "baseline": None}))
    assert main(["run", str(exp), "--out", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("error: ")
        and "\n" not in err
        and "cxl_aim.yaml: choices.mapper.options.tp_vector_ops.values.0" in err
    )
    assert not (tmp_path / "res").exists()
    # a choices: block given by --set is checked the same way (when the verdict flips are computed)
    sets = ["--set", "systems.cxl_aim.choices={mapper.options.tp_vector_ops: {values: [all], source: x}}"]
    sets += [a for s in _cli_sets()[:1] for a in ("--set", s)]  # the 2-layer model
    exp.write_text(yaml.safe_dump({**EXP, "systems": ["dgx_h100", "cxl_aim"], "baseline": "dgx_h100"}))
    assert main(["run", str(exp), "--out", str(tmp_path / "res")] + sets) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        "error: systems/cxl_aim.yaml: choices.mapper.options.tp_vector_ops.values.0"
    )
    assert not (tmp_path / "res").exists()


def test_bad_controller_choice_refused():
    with pytest.raises(ConfigError) as e:
        registry.split_choices(
            {
                **load_yaml(find_config("hardware", "hbm3_5200_pim")),
                "choices": {"controller": {"values": ["ideal", "attnsim"], "source": "x"}},
            },
            "x.yaml",
        )
    # "attnsim" is the old name of "ideal" (rules.py RENAMED): refused with the new one
    assert e.value.key == "choices.controller.values.1" and "expected a legal value of controller" in str(e.value)


def test_shipped_system_choices_are_legal():
    """Every built-in system with a choices: block loads (its alternatives legal, other than its own)."""
    from pathlib import Path

    from attnsim.sim.experiment import load_experiment

    n = 0
    for f in sorted(Path(find_config("systems", "cxl_pnm")).parent.glob("*.yaml")):
        if "choices" in load_yaml(f):
            tree = load_experiment({**EXP, "systems": [f.stem], "baseline": None, "models": ["llama2-70b"]}).tree
            n += len(verdict.system_choice_params(tree, [f.stem]))
    assert n >= 3  # cxl_pnm (mapper), h100_x8_cxl_pnm_attn (attention_on), cxl_aim (tp_vector_ops)


# ---------------------------------------------------------------- a case built to flip


def test_flip_case_matches_plain_runs(flipped):
    sec = _section(flipped)
    r0 = sec["ratio_base"]
    assert r0 == next(d for d in flipped if d["system"] == "dgx_h100")["vs_baseline"]["throughput_ratio"]
    assert sec["ratio"] == "throughput_ratio" and sec["parameters_checked"] == 4 and sec["baseline"] == "dgx_a100"
    assert {r["parameter"] for r in sec["parameters"]} == {BW, KERNEL, ETA, IDLE}
    assert "verdict_flips" not in next(d for d in flipped if d["system"] == "dgx_a100")  # the baseline itself
    for r in sec["parameters"]:
        for end in ("low", "high"):
            plain = attnsim.run(EXP, {**SETS, r["parameter"]: r[end]})
            assert r[f"ratio_{end}"] == pytest.approx(plain[1]["vs_baseline"]["throughput_ratio"], rel=1e-12), (
                r["parameter"],
                end,
            )
        # the rule, from the plain values: across 1.0, or more than 10 % from the default ratio
        ends = (r["ratio_low"], r["ratio_high"])
        assert r["flips"] == any((e - 1) * (r0 - 1) < 0 for e in ends)
        assert r["moves_over_10pct"] == any(abs(e / r0 - 1) > 0.10 for e in ends)
    bw, kernel, eta, idle = (_row(sec, n) for n in (BW, KERNEL, ETA, IDLE))
    assert r0 > 1 and bw["flips"] and bw["ratio_low"] < 1  # 500 GB/s H100s lose to the A100s
    assert bw["ratio_high"] == r0  # 3350 is the file's value
    assert kernel["moves_over_10pct"] and not kernel["flips"]
    assert not eta["flips"] and not eta["moves_over_10pct"]
    assert idle["ratio_low"] == idle["ratio_high"] == r0 and not idle["flips"] and not idle["moves_over_10pct"]


def test_api_table(flipped):
    df = flipped.verdict_flips.set_index("parameter").loc[[BW, KERNEL, ETA, IDLE]]
    assert len(flipped.verdict_flips) == 4 and set(df["system"]) == {"dgx_h100"}
    assert set(df["baseline"]) == {"dgx_a100"} and list(df["flips"]) == [True, False, False, False]
    assert df["low"].tolist() == [500, 1, 0.7, 60] and df["high"].tolist() == [3350, 3, 0.862, 150]
    assert df["ratio_low"].tolist() == [_row(_section(flipped), n)["ratio_low"] for n in (BW, KERNEL, ETA, IDLE)]
    assert attnsim.run(EXP, SETS).verdict_flips.empty  # not computed unless asked
    with pytest.raises(ConfigError, match="expected an experiment with a baseline"):
        attnsim.run(EXP, {**SETS, "experiment.baseline": None}, flips=True)


def test_run_prints_verdict_line_and_json(tmp_path, capsys, flipped):
    exp = tmp_path / "flip.yaml"
    exp.write_text(yaml.safe_dump(EXP))
    sets = [a for s in _cli_sets() for a in ("--set", s)]
    assert main(["run", str(exp), "--out", str(tmp_path / "res")] + sets) == 0
    out = capsys.readouterr().out
    sec = _section(flipped)
    line = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("verdict:"))
    bw = _row(sec, BW)
    assert line.startswith("verdict: dgx_h100 ") and " faster than dgx_a100 (throughput ratio " in line
    assert (
        "; robust to 2 of 4 assumed parameters; flips with hardware.h100_sxm.hbm_bandwidth_gbps in [500, 3350] ("
        in line
        and "; moves >10 % with hardware.h100_sxm.kernel_overhead_us in [1, 3] (" in line
    )
    assert f"({bw['ratio_low']:.4f}x-" in line
    cost = next(ln for ln in out.splitlines() if ln.startswith("verdict flips: "))
    assert cost.startswith("verdict flips: 4 assumed parameters") and "re-runs" in cost
    # results.h5 keeps the sections: attnsim show prints the same line
    assert main(["show", str(tmp_path / "res" / "results.h5")]) == 0
    assert line in capsys.readouterr().out
    # --no-flips: no verdict, no re-run
    assert main(["run", str(exp), "--no-write", "--no-flips"] + sets) == 0
    assert "verdict" not in capsys.readouterr().out
    # the JSON document: a section per compared run, the count of parameters checked, and the cost
    assert main(["run", str(exp), "--no-write", "--json"] + sets) == 0
    doc = json.loads(capsys.readouterr().out)
    h100 = next(r for r in doc["runs"] if r["system"] == "dgx_h100")
    got = h100["verdict_flips"]
    assert got["parameters_checked"] == 4 and {r["parameter"] for r in got["parameters"]} == {BW, KERNEL, ETA, IDLE}
    for r in got["parameters"]:
        assert {"parameter", "low", "high", "ratio_low", "ratio_high", "flips", "moves_over_10pct"} <= set(r)
    assert got == json.loads(json.dumps(sec))  # the same as the API's
    assert doc["verdict_flips_cost"]["parameters"] == 4 and set(doc["verdict_flips_cost"]) == {"parameters", "reruns"}
    # 4 parameters x 2 ends, each on the H100 system only (its hardware): at most 8 re-runs
    assert 0 < doc["verdict_flips_cost"]["reruns"] <= 8


def test_default_experiment_prints_verdicts(capsys):
    """attnsim run of the default experiment: one verdict line per compared system, every parameter checked
    is an assumed (ranged) one or a choices: entry of the hardware its system or the baseline uses."""
    assert main(["run", "--no-write", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    from attnsim.sim.experiment import load_experiment
    from attnsim.studies.sweep.spec import hardware_refs

    tree = load_experiment("default").tree
    for r in doc["runs"]:
        if r["system"] == "dgx_h100":
            assert "verdict_flips" not in r
            continue
        hw = list(dict.fromkeys(hardware_refs(tree, r["system"]) + hardware_refs(tree, "dgx_h100")))
        want = [f"hardware.{p.name}" for p in verdict.assumed_params(tree, hw) + verdict.choice_params(tree, hw)]
        want += [f"systems.{p.name}" for p in verdict.system_choice_params(tree, [r["system"], "dgx_h100"])]
        sec = r["verdict_flips"]
        assert [x["parameter"] for x in sec["parameters"]] == want and sec["parameters_checked"] == len(want) > 0
        assert sec["ratio_base"] == r["vs_baseline"]["throughput_ratio"]


# ---------------------------------------------------------------- sweeps


def test_sweep_store_column(tmp_path, flipped):
    from sweep_helpers import write_sweep

    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import load_sweep
    from attnsim.studies.sweep.store import open_store

    base = {k: v for k, v in EXP.items() if k != "baseline"}
    p = write_sweep(
        tmp_path, [{"grid": {"system": ["dgx_a100", "dgx_h100"]}}], base=base, baseline="dgx_a100", set=SETS
    )
    kw = dict(workers=1, progress=False, log=lambda s: None)
    run_sweep(load_sweep(p), tmp_path / "f.h5", flips=True, **kw)
    c = open_store(tmp_path / "f.h5").columns()
    col = dict(zip(c["system"].tolist(), c["verdict_flips"].tolist()))
    assert col == {"dgx_a100": "", "dgx_h100": BW}
    docs = {d["system"]: d for d in open_store(tmp_path / "f.h5").iter_docs()}
    got, want = docs["dgx_h100"]["verdict_flips"], _section(flipped)
    for n in (BW, KERNEL, ETA, IDLE):  # the same numbers as attnsim run's
        for k in ("ratio_low", "ratio_high"):
            assert _row(got, n)[k] == pytest.approx(_row(want, n)[k], rel=1e-12)
    res = attnsim.load(tmp_path / "f.h5")
    assert sorted(res.verdict_flips["parameter"]) == sorted([BW, KERNEL, ETA, IDLE])
    # without --flips: no column (the cost is only paid when asked)
    run_sweep(load_sweep(p), tmp_path / "n.h5", **kw)
    assert "verdict_flips" not in open_store(tmp_path / "n.h5").columns()
    # refused without a baseline
    q = write_sweep(tmp_path / "nb", [{"grid": {"system": ["dgx_a100", "dgx_h100"]}}], base=base, set=SETS)
    with pytest.raises(ConfigError) as e:
        run_sweep(load_sweep(q), tmp_path / "x.h5", flips=True, **kw)
    assert e.value.file == "--flips" and "expected a sweep with a baseline" in str(e.value)
    assert not (tmp_path / "x.h5").exists()


# ---------------------------------------------------------------- tornado


def test_tornado_recipe(flipped, tmp_path):
    from attnsim.plots import figure, render

    t = flipped.table()
    fig = figure(t, "tornado")
    ax = fig.axes[0]
    sec = _section(flipped)
    r0 = sec["ratio_base"]
    bars = ax.patches
    assert len(bars) == 2 * 4  # a low and a high bar per parameter
    ends = sorted(round(b.get_x() + b.get_width(), 9) for b in bars)
    want = sorted(round(r[f"ratio_{e}"], 9) for r in sec["parameters"] for e in ("low", "high"))
    assert ends == pytest.approx(want)
    assert all(b.get_x() == pytest.approx(r0) for b in bars)  # bars start at the default ratio
    vlines = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_gid() != "choice")
    assert vlines == pytest.approx(sorted([1.0, r0]))
    labels = [x.get_text() for x in ax.get_yticklabels()]
    assert "h100_sxm.hbm_bandwidth_gbps *" in labels and labels[-1] == "h100_sxm.hbm_bandwidth_gbps *"  # widest on top
    assert ax.get_xlabel() == "Throughput vs DGX A100 (\u00d7)"
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert render(t, "tornado", tmp_path / "t.pdf")[0].stat().st_size > 0
    with pytest.raises(ConfigError, match="expected one run with verdict flips"):
        figure(attnsim.run(EXP, SETS).table(), "tornado")


def test_content_key_is_exact_on_plain_data():
    """ContentMemo's key (attnsim.core.config.content_key): equal only for equal plain data, types and order kept."""
    from attnsim.core.config import content_key

    assert content_key({"a": [1, 2.5]}) == content_key({"a": [1, 2.5]})
    distinct = [1, 1.0, True, "1", None, 0.0, -0.0, [1], (1,), {"a": 1}, {"a": 1.0}]
    keys = [content_key(x) for x in distinct]
    assert len(set(keys)) == len(distinct)  # 1 == 1.0 == True and 0.0 == -0.0 in Python, not here
    assert content_key({"a": 1, "b": 2}) != content_key({"b": 2, "a": 1})  # order kept: a miss, never a wrong hit
    assert content_key({"a": object()}) is None and content_key([np.float64(1.0)]) is None  # not plain: no memo
