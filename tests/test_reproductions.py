"""configs/reproductions/: the loader's checks, a synthetic reproduction end to end, figures, the
migrated AttAcc set (same numbers as the old configs/validation/attacc.yaml path) and every built-in
folder loading."""

import json
import re
from pathlib import Path

import pytest
import yaml

from attnsim.cli import main
from attnsim.core.config import ConfigError, get_dotted
from attnsim.studies import reproduce, validate

EXPERIMENT = {
    "name": "toy_repro",
    "systems": ["dgx_a100", "dgx_h100"],
    "models": ["llama2-7b"],
    "scenarios": {
        "s1": {"batch_size": 1, "prompt_len": 64, "output_len": 4},
        "s4": {"batch_size": 4, "prompt_len": 64, "output_len": 4},
    },
    "baseline": "dgx_a100",
}
ROWS = [
    {
        "name": "h100/a100 decode throughput, batch 1",
        "experiment": "e",
        "select": {"system": "dgx_h100", "batch_size": 1},
        "metric": "vs_baseline.decode_throughput_ratio",
        "reference": 1.5,
        "tolerance": 0.6,
        "role": "calibration",
    },
    {
        "name": "h100 TPOT, batch 4 [ms]",
        "experiment": "e",
        "select": {"system": "dgx_h100", "scenario": "s4"},
        "metric": "metrics.tpot_s",
        "scale": 1000.0,
        "reference": 5.0,
        "tolerance": 0.95,
        "role": "validation",
        "source": "hand-written",
    },
]
REFERENCE = {
    "system": "toy",
    "title": "Toy reproduction",
    "source": "tests/test_reproductions.py",
    "paper": [{"claim": "H100 decodes faster", "value": 2.0, "note": "a made-up headline"}],
    "experiments": {"e": "exp.yaml"},
    "figure": {"recipe": "reproduction", "out": "toy.pdf"},
    "rows": ROWS,
}


def _write(root: Path, ref: dict, exp: dict = EXPERIMENT, name: str = "toy") -> Path:
    folder = root / "reproductions" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exp.yaml").write_text(yaml.safe_dump(exp))
    (folder / "reference.yaml").write_text(yaml.safe_dump(ref, sort_keys=False))
    return folder


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    return _write(tmp_path, REFERENCE)


def _docs():
    """The toy experiment run directly (not through the reproduction loader)."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    return {
        (d["system"], d["scenario"]["name"]): d
        for d in run_experiment(load_experiment(str(reproduce.find("toy") / "exp.yaml")))
    }


def test_synthetic_reproduction_end_to_end(toy, capsys):
    assert main(["validate", "--set", "reproductions/toy"]) == 0
    out = capsys.readouterr().out
    cal, val = out.index("calibration rows (in-sample"), out.index("validation rows (held out")
    assert (
        cal
        < out.index("1 of 1 calibration rows within tolerance")
        < val
        < out.index("1 of 1 validation rows within tolerance")
        < out.index("paper headlines")
    )
    assert "H100 decodes faster" in out and "a made-up headline" in out and "Toy reproduction" in out
    # the calibration row is printed in its section only
    assert out[cal:val].count("h100/a100 decode throughput") == 1 and "h100 TPOT" not in out[cal:val]
    assert main(["validate", "--set", "reproductions/toy", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    docs = _docs()  # the rows read the selected run; scale multiplies the attnsim value
    a, b = rows[ROWS[0]["name"]], rows[ROWS[1]["name"]]
    assert a["measured"] == docs["dgx_h100", "s1"]["vs_baseline"]["decode_throughput_ratio"]
    assert b["measured"] == pytest.approx(1000.0 * docs["dgx_h100", "s4"]["metrics"]["tpot_s"], rel=1e-12)
    assert (a["role"], b["role"], a["set"], a["system"], b["source"]) == (
        "calibration",
        "validation",
        "reproductions/toy",
        "toy",
        "hand-written",
    )
    assert b["error"] == pytest.approx(b["measured"] / 5.0 - 1)


@pytest.mark.parametrize("role", ["validation", "calibration"])
def test_a_row_outside_tolerance_fails(tmp_path, monkeypatch, capsys, role):
    """Any row outside its tolerance makes the exit status 1 (validate's semantics), held out or not."""
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    other = "calibration" if role == "validation" else "validation"
    rows = [dict(ROWS[0], role=role, reference=1e3, tolerance=0.01), dict(ROWS[1], role=other)]
    _write(tmp_path, dict(REFERENCE, rows=rows))
    assert main(["validate", "--set", "reproductions/toy"]) == 1
    out = capsys.readouterr().out
    assert f"0 of 1 {role} rows within tolerance; 1 outside" in out and "FAIL" in out
    assert f"1 of 1 {other} rows within tolerance\n" in out


def _bad(tmp_path, **changes):
    ref = json.loads(json.dumps(REFERENCE))
    for path, value in changes.items():
        keys = path.split("__")
        node = ref
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return _write(tmp_path, ref)


BAD = [  # changes, key named, words in the message
    ({"rows__0__experiment": "nope"}, "rows.0.experiment", "expected one of the experiments (e)"),
    ({"rows__0__select": {"batch_size": 1}}, "rows.0.select", "got 2 runs"),
    ({"rows__0__select": {"system": "dgx_h100", "batch_size": 3}}, "rows.0.select", "got no run"),
    ({"rows__0__select": {"system": "dgx_h100", "colour": "red"}}, "rows.0.select.colour", "a scenario key"),
    ({"rows__1__tolerance": 0}, "rows.1.tolerance", "positive"),
    ({"rows__1__tolerance": -0.1}, "rows.1.tolerance", "positive"),
    ({"rows__1__scale": 0}, "rows.1.scale", "positive"),
    ({"rows__0__role": "fit"}, "rows.0.role", "calibration"),
    ({"rows__0__reference": 0}, "rows.0.reference", "non-zero"),
    ({"rows__0__reference": "many"}, "rows.0.reference", "number"),
    ({"rows__0__colour": "red"}, "rows.0.colour", ""),
    ({"colour": "red"}, "colour", ""),
    ({"rows__1__name": ROWS[0]["name"]}, "rows.1.name", "once"),
    ({"system": "other"}, "system", "folder's name"),
    ({"experiments": {"e": "missing.yaml"}}, "experiments.e", "not found"),
    ({"experiments": {"e": "../toy/exp.yaml"}}, "experiments.e", "'..'"),
    ({"experiments": {"e": "no_such_experiment"}}, "experiments.e", "built-in"),
    ({"figure": {"recipe": "pie", "out": "x.pdf"}}, "figure.recipe", "reproduction"),
    ({"figure": {"recipe": "reproduction", "out": "/tmp/x.pdf"}}, "figure.out", "relative"),
    ({"rows": []}, "rows", ""),
    ({"source": KeyError}, "source", ""),
    (
        {"assumptions": [{"name": "a", "title": "t", "source": "s", "set": {"experiment.baseline": None}}]},
        "assumptions.0.set",
        "section one of models, systems, hardware, scenarios",
    ),
    (
        {"assumptions": [{"name": "a", "title": "t", "source": "s", "set": {"hardware.h100_sxm": 1}}]},
        "assumptions.0.set",
        "<section>.<name>.<key>",
    ),
    ({"assumptions": [{"name": "a", "title": "t", "source": "s", "set": {}}]}, "assumptions.0.set", ""),
    (
        {"assumptions": [{"name": "a", "title": "t", "set": {"hardware.h100_sxm.tdp_w": 600}}]},
        "assumptions.0.source",
        "",
    ),
    (
        {
            "assumptions": [
                {"name": "a", "title": "t", "source": "s", "set": {"hardware.h100_sxm.tdp_w": 600}},
                {"name": "a", "title": "t", "source": "s", "set": {"hardware.h100_sxm.tdp_w": 700}},
            ]
        },
        "assumptions.1.name",
        "once",
    ),
    (
        {"assumptions": [{"name": "a", "title": "t", "source": "s", "set": {"hardware.h900.tdp_w": 600}}]},
        "assumptions.0.set.hardware.h900",
        "not part of this experiment",
    ),
    (
        {"assumptions": [{"name": "a", "title": "t", "source": "s", "set": {"hardware.h100_sxm.tdp_w": -5}}]},
        "assumptions.0.set.hardware.h100_sxm.tdp_w",
        "expected a positive number, got -5",
    ),
    (
        {
            "assumptions": [
                {
                    "name": "a",
                    "title": "t",
                    "source": "s",
                    "set": {"hardware.h100_sxm.tdp_w": 600},
                    "experiments": ["nope"],
                }
            ]
        },
        "assumptions.0.experiments.0",
        "one of the experiments (e)",
    ),
    (
        {
            "assumptions": [
                {
                    "name": "a",
                    "title": "t",
                    "source": "s",
                    "set": {"hardware.h100_sxm.tdp_w": 600},
                    "experiments": ["e", "e"],
                }
            ]
        },
        "assumptions.0.experiments.1",
        "each label once",
    ),
]


# two assumptions on the toy experiment, in removal order: a slower H100 link-free GPU (bandwidth) and its TDP
ASSUMPTIONS = [
    {
        "name": "slow_hbm",
        "title": "the artefact's H100 streams HBM at 2 TB/s",
        "source": "made up",
        "set": {"hardware.h100_sxm.hbm_bandwidth_gbps": 2000},
    },
    {
        "name": "a100_fast",
        "title": "the artefact's A100 at 2 TB/s",
        "source": "made up",
        "set": {"hardware.a100_80gb_sxm.hbm_bandwidth_gbps": 2000, "scenarios.s4.output_len": 8},
    },
]


def test_waterfall_steps_are_plain_runs_with_the_remaining_assumptions(tmp_path, monkeypatch, capsys):
    """First bar after the artefact = every assumption = what validate compares; each later bar = a plain run of
    the experiment with the assumptions not yet removed given as --set; the last bar = the plain experiment."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    folder = _write(tmp_path, dict(REFERENCE, assumptions=ASSUMPTIONS))
    wf = reproduce.waterfall(folder)
    assert wf.labels == ["artefact", "all assumptions", "- slow_hbm", "defaults"]
    sets = [
        [
            "hardware.h100_sxm.hbm_bandwidth_gbps=2000",
            "hardware.a100_80gb_sxm.hbm_bandwidth_gbps=2000",
            "scenarios.s4.output_len=8",
        ],
        ["hardware.a100_80gb_sxm.hbm_bandwidth_gbps=2000", "scenarios.s4.output_len=8"],
        [],
    ]
    for step, pin in zip(wf.steps, sets):
        docs = {
            (d["system"], d["scenario"]["name"]): d
            for d in run_experiment(load_experiment(str(folder / "exp.yaml"), pin))
        }
        want = [
            docs[("dgx_h100", "s1")]["vs_baseline"]["decode_throughput_ratio"],
            docs[("dgx_h100", "s4")]["metrics"]["tpot_s"] * 1000.0,
        ]
        assert step["values"] == pytest.approx(want, rel=1e-12)
    assert [wf.bars(i)[0] for i in range(2)] == [1.5, 5.0]  # the artefact's numbers (REFERENCE rows)
    # validate compares the all-assumptions step
    rows = reproduce.run_rows(reproduce.load(folder))
    assert [r.measured for r in rows] == pytest.approx(wf.steps[0]["values"], rel=1e-12)
    # each assumption moves what it should: a slower H100 lowers its ratio over the A100, the A100's own
    # slowdown raises it again; the defaults differ from every assumed step
    r = [s["values"][0] for s in wf.steps]
    assert r[1] < r[0] or r[1] > r[0]
    assert r[0] != r[2] and r[1] != r[2]
    assert main(["validate", "--explain", "toy"]) == 0
    out = capsys.readouterr().out
    assert "all assumptions" in out and "- slow_hbm" in out and "defaults" in out and "made up" in out
    # the paper's headlines (not compared) are printed under the waterfall, with their notes
    assert (
        out.index("- slow_hbm")
        < out.index("paper headlines (printed, not compared")
        < out.index("H100 decodes faster: 2.000\n    a made-up headline")
    )
    assert main(["validate", "--explain", "toy", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)[0]
    assert [a["name"] for a in doc["assumptions"]] == ["slow_hbm", "a100_fast"]
    assert doc["paper"] == [{"claim": "H100 decodes faster", "value": 2.0, "note": "a made-up headline"}]
    assert doc["rows"][0]["waterfall"]["defaults"] == pytest.approx(wf.steps[-1]["values"][0], rel=1e-12)


def test_assumption_applies_to_its_experiment_labels_only(tmp_path, monkeypatch):
    """Two labels of one experiment file: an assumption scoped to one (experiments: [slow]) moves that label's row
    only, as a plain run with its --set does; the waterfall step that removes it re-simulates that label alone
    (the other's runs are reused: their sets did not change) and gives the same numbers as plain runs."""
    from attnsim.sim import runner
    from attnsim.sim.experiment import load_experiment

    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    rows = [dict(ROWS[1], name="TPOT as is [ms]"), dict(ROWS[1], name="TPOT, slow H100 [ms]", experiment="slow")]
    scoped = [dict(ASSUMPTIONS[0], experiments=["slow"])]
    folder = _write(
        tmp_path, dict(REFERENCE, experiments={"e": "exp.yaml", "slow": "exp.yaml"}, rows=rows, assumptions=scoped)
    )
    plain = {}
    for pin in ([], ["hardware.h100_sxm.hbm_bandwidth_gbps=2000"]):
        (d,) = [
            d
            for d in runner.run_experiment(load_experiment(str(folder / "exp.yaml"), pin))
            if (d["system"], d["scenario"]["name"]) == ("dgx_h100", "s4")
        ]
        plain[bool(pin)] = d["metrics"]["tpot_s"] * 1000.0
    assert plain[True] > plain[False]  # 2 TB/s instead of the H100's 3.35 TB/s: a slower decode step
    got = [r.measured for r in reproduce.run_rows(reproduce.load(folder))]
    assert got == pytest.approx([plain[False], plain[True]], rel=1e-12)
    calls = []
    real = runner.run_experiment
    monkeypatch.setattr(
        runner, "run_experiment", lambda exp, *a, **k: calls.append(exp.spec.name) or real(exp, *a, **k)
    )
    wf = reproduce.waterfall(folder)
    assert [s["values"] for s in wf.steps] == [
        pytest.approx([plain[False], plain[True]], rel=1e-12),
        pytest.approx([plain[False], plain[False]], rel=1e-12),
    ]
    assert len(calls) == 3  # step 1: labels e and slow; step 2 (defaults): slow only, e's sets are unchanged


def test_explain_prints_an_assumptions_labels_and_a_long_list_by_its_length(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    scoped = [dict(ASSUMPTIONS[0], experiments=["slow"])]
    _write(
        tmp_path,
        dict(
            REFERENCE,
            experiments={"e": "exp.yaml", "slow": "exp.yaml"},
            rows=[ROWS[1], dict(ROWS[1], name="slow", experiment="slow")],
            assumptions=scoped,
        ),
    )
    assert main(["validate", "--explain", "toy"]) == 0
    assert "    experiments: slow\n" in capsys.readouterr().out
    from attnsim.cli.validate import _fmt_set

    assert _fmt_set(list(range(512))) == "[0, 1, 2, 3, ... (512 values)]" and _fmt_set([1, 2]) == "[1, 2]"


def test_no_builtin_reproduction_copies_a_config():
    """A reproduction is the built-in configs plus named assumptions: a built-in folder holds reference.yaml and
    experiment files only (no kind:, no devices:, no model keys), and those experiments name built-in systems and
    models, not files beside them."""
    from attnsim.core.config import CONFIG_ROOT, load_yaml

    folders = [p for p in (CONFIG_ROOT / "reproductions").iterdir() if (p / "reference.yaml").is_file()]
    assert {"attacc", "cent", "neupims"} <= {p.name for p in folders}
    for folder in folders:
        for f in sorted(folder.iterdir()):
            assert f.suffix in (".yaml", ".yml") and f.is_file(), f
            if f.name == "reference.yaml":
                continue
            doc = load_yaml(f)
            assert "kind" not in doc and "devices" not in doc and "num_layers" not in doc, f
            assert {"systems", "models", "scenarios"} <= set(doc), f
            for ref in doc["systems"] + doc["models"]:
                assert not ref.endswith((".yaml", ".yml", ".json")), (f, ref)
        for a in reproduce.read_spec(folder).assumptions:  # each names its artefact source
            assert a.source.strip() and a.set, (folder.name, a.name)


def test_cent_and_neupims_assumptions():
    """What the copied files used to pin is now named: NeuPIMs' single-row-buffer rows run the built-in
    neupims_naive with exactly the npu+pim branch's issue port (npu_issue_per_ns, comp_instructions) and the
    artefact's clb-0 placement; CENT's per-block split runs the built-in cxl_aim on one device."""
    neupims = reproduce.read_spec(reproduce.find("neupims"))
    by = {a.name: a for a in neupims.assumptions}
    rb = [r for r in neupims.rows if r.name.startswith("single row buffer (npu+pim baseline)")]
    assert len(rb) == 4 and {r.select["system"] for r in rb} == {"neupims_naive"}
    applied = {a.name for a in neupims.assumptions if not a.experiments or rb[0].experiment in a.experiments}
    assert applied == {"npu_issue_port", "trace_placement_clb0", "one_layer", "tp4_rank_no_allreduce"}
    assert by["npu_issue_port"].set == {
        "hardware.neupims_hbm2_pim.npu_issue_per_ns": 1.0,
        "hardware.neupims_hbm2_pim.comp_instructions": "per_comp",
    }
    # the artefact's n_tp 4 (gpt3-7B.json): each built-in NeuPIMs system as one rank of 4 NPU + PIM pairs
    assert by["tp4_rank_no_allreduce"].set == {
        f"systems.{s}.{k}": 4
        for s in ("neupims", "neupims_sb_off", "neupims_naive")
        for k in ("parallelism.tp", "devices.npu.count", "devices.pim.count")
    } | {f"systems.neupims_npu_only.{k}": 4 for k in ("parallelism.tp", "devices.npu.count")}
    # the NPU-only rows: the built-in neupims_npu_only with the npu-only branch's serial attention tiles only
    npu = [r for r in neupims.rows if r.experiment == "clb_npu_only"]
    assert npu and {r.select["system"] for r in npu} == {"neupims_npu_only"}
    applied = {a.name for a in neupims.assumptions if not a.experiments or "clb_npu_only" in a.experiments}
    assert applied == {"npu_serial_attention", "one_layer", "tp4_rank_no_allreduce"}
    assert by["npu_serial_attention"].set == {"hardware.neupims_npu.attention_issue": "serial"}
    cent = reproduce.read_spec(reproduce.find("cent"))
    (one,) = cent.assumptions
    assert one.experiments == ["blocks"] and one.set == {
        "systems.cxl_aim.devices.pnm.count": 1,
        "systems.cxl_aim.devices.ctrl.count": 1,
        "systems.cxl_aim.parallelism.tp": 1,
    }
    assert cent.experiments["paper"] == "cent_llama2_7b"


def test_neupims_npu_only_rows_within_tolerance():
    """The NPU-only baseline's rows (casys-kaist/NeuPIMs npu-only 57617ee run here, tests/data/neupims/
    npu_only_clb0.json): the built-in neupims_npu_only under the branch's serial attention tiles is within each
    row's tolerance; with attnsim's default (tiles spread over the 8 arrays) the MHA is several times faster."""
    from dataclasses import replace

    rep = reproduce.load(reproduce.find("neupims"))
    keep = [i for i, r in enumerate(rep.spec.rows) if r.experiment == "clb_npu_only"]
    sub = replace(
        rep,
        spec=rep.spec.model_copy(update={"rows": [rep.spec.rows[i] for i in keep]}),
        runs=[rep.runs[i] for i in keep],
    )
    rows = reproduce.run_rows(sub)
    golden = json.loads((Path(__file__).parent / "data" / "neupims" / "npu_only_clb0.json").read_text())
    assert len(rows) == 3
    for row, spec in zip(rows, sub.spec.rows):
        assert spec.reference in golden["cycles"].values(), spec.name  # every reference is a recorded number
        assert abs(row.measured / row.published - 1) <= row.tolerance, (row.name, row.measured, row.published)


def test_waterfall_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    _write(tmp_path, dict(REFERENCE, assumptions=ASSUMPTIONS))
    figs = tmp_path / "figs"
    assert main(["validate", "--explain", "toy", "--figures", str(figs)]) == 0
    assert (figs / "toy_waterfall.pdf").stat().st_size > 0 and (figs / "toy_waterfall.png").stat().st_size > 0
    from attnsim.plots.recipes import waterfall

    wf = reproduce.waterfall(reproduce.find("toy"))
    fig = waterfall(wf, rows=[ROWS[1]["name"]])
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx(wf.bars(1), rel=1e-12)  # artefact, all assumptions, - slow_hbm, defaults
    with pytest.raises(ConfigError, match="row names or indices"):
        waterfall(wf, rows=["no such row"])


def test_explain_refuses_an_unknown_folder(capsys):
    assert main(["validate", "--explain", "atacc"]) == 2
    err = capsys.readouterr().err
    assert "atacc" in err and "attacc" in err


@pytest.mark.parametrize("changes,key,words", BAD, ids=[b[1] + ":" + str(i) for i, b in enumerate(BAD)])
def test_loader_errors_name_file_and_key(tmp_path, changes, key, words):
    folder = _bad(tmp_path, **changes)
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    msg = str(e.value)
    assert "\n" not in msg and e.value.file.endswith("toy/reference.yaml") and e.value.key == key, msg
    assert msg.startswith(f"{e.value.file}: {key}: ") and words in msg, msg


@pytest.mark.parametrize(
    "metric,words",
    [
        ("metrics.nope", "dotted path"),
        ("metrics.memory", "finite number"),
        ("system", "finite number"),
        ("vs_baseline.baseline", "finite number"),
    ],
)
def test_metric_path_must_hold_a_number(tmp_path, metric, words):
    rep = reproduce.load(_bad(tmp_path, rows__1__metric=metric))
    with pytest.raises(ConfigError) as e:
        reproduce.run_rows(rep)
    assert e.value.key == "rows.1.metric" and words in str(e.value) and "\n" not in str(e.value)


def test_cli_errors_exit_2_one_line(toy, tmp_path, capsys):
    assert main(["validate", "--set", "reproductions/nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reproductions/nope" in err and "toy" in err
    _bad(tmp_path, rows__0__role="fit")
    assert main(["validate", "--set", "reproductions/toy"]) == 2
    assert "rows.0.role" in capsys.readouterr().err


def test_figure_written_and_bad_paths_refused(toy, tmp_path, capsys):
    figs = tmp_path / "figs"
    assert main(["validate", "--set", "reproductions/toy", "--figures", str(figs)]) == 0
    assert (figs / "toy.pdf").read_bytes()[:5] == b"%PDF-"
    assert (figs / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for bad in (blocker, blocker / "sub"):  # a file, and a folder under a file: refused before any run
        assert main(["validate", "--set", "reproductions/toy", "--figures", str(bad)]) == 2
        captured = capsys.readouterr()
        assert "--figures" in captured.err and captured.out == ""
    assert main(["validate", "--set", "limits", "--figures", str(figs)]) == 2  # nothing to draw: refused
    assert "--figures" in capsys.readouterr().err
    (figs / "toy.png").unlink()
    (figs / "toy.png").mkdir()  # the PNG sibling cannot be written
    assert main(["validate", "--set", "reproductions/toy", "--figures", str(figs)]) == 2
    assert "toy.png" in capsys.readouterr().err


def test_figure_recipe_draws_each_row_on_its_band():
    import matplotlib.pyplot as plt

    from attnsim.plots.recipes import reproduction

    rows = [
        validate.Row("s", "a", 1.2, 1.0, 0.25, role="calibration"),
        validate.Row("s", "b", 3.0, 2.0, 0.1, role="validation"),
    ]
    fig = reproduction(rows)
    ax = fig.axes[0]
    bands = [(p.get_x(), p.get_width()) for p in ax.patches]
    assert bands[0] == pytest.approx((0.75, 0.5)) and bands[1] == pytest.approx((0.9, 0.2))
    dots = {c.get_label(): c.get_offsets() for c in ax.collections}
    assert dots["calibration"][0][0] == pytest.approx(1.2) and dots["validation"][0][0] == pytest.approx(1.5)
    assert dots["outside tolerance"][0][0] == pytest.approx(1.5)  # b: +50 % > 10 %
    plt.close(fig)


def test_attacc_rows_read_the_builtin_experiment_under_the_named_assumptions():
    """--set attacc (the old name) reads the built-in attacc_gpt3_175b experiment with the folder's assumptions
    (AttAcc's NVLink fit, per-access GPU energy, one head per channel, no capacity check) applied as plain --set
    overrides: every row equals that run's metric (x scale), and the folder holds no copied hardware or system file."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    folder = next(p for p in reproduce.folders() if p.name == "attacc")
    spec = reproduce.read_spec(folder)
    assert [a.name for a in spec.assumptions] == [
        "nvlink_allreduce_fit",
        "gpu_energy_per_access",
        "one_head_per_channel",
        "capacity_unchecked",
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["reference.yaml"]
    pin = [
        "hardware.nvlink3.allreduce=ring",
        "hardware.nvlink3.latency_us=3.03",  # get_nvlink_time: 6.06 us / 2
        "hardware.nvlink3.efficiency=0.74074074",  # 2 / 0.009 ns/B = 222.2 GB/s = 300 GB/s x 0.7407
        "hardware.a100_hbm3.sm_active_power_w=0",
        "hardware.a100_hbm3.compute_pj_per_flop=0.16",  # 0.32 pJ/MAC
        "hardware.a100_hbm3.hbm_capacity_gb=1000",
        "hardware.attacc_hbm3_pim_5stack.channels_per_item=1",
    ]  # the artefact's trace generator: a head per channel
    assert sorted(reproduce.assumption_sets(spec)) == sorted(
        s.replace("=ring", '="ring"') for s in pin
    )  # values as JSON (YAML) text
    docs = run_experiment(load_experiment("attacc_gpt3_175b", pin))
    rows = {r.name: r for r in validate.run(["attacc"])}
    checked = 0
    for row in spec.rows:
        sel = dict(row.select)
        (d,) = [d for d in docs if d["system"] == sel["system"] and d["scenario"]["batch_size"] == sel["batch_size"]]
        r = rows[row.name]
        assert (r.set, r.system, r.published, r.tolerance) == ("attacc", "attacc", row.reference, row.tolerance)
        assert r.measured == pytest.approx(float(get_dotted(d, row.metric.split("."))) * (row.scale or 1.0), rel=1e-12)
        checked += 1
    assert checked == len(spec.rows) == 12


def test_every_builtin_reproduction_loads():
    """Each folder of configs/reproductions/ reads, loads its experiments and selects one run per row."""
    names = [p.name for p in reproduce.folders()]
    assert "attacc" in names
    for p in reproduce.folders():
        rep = reproduce.load(p)
        assert len(rep.runs) == len(rep.spec.rows) and rep.spec.system == p.name
        if rep.spec.figure is not None:  # a figure name per folder, so figures never overwrite each other
            assert re.fullmatch(r"[\w.+-]+\.(pdf|png|svg)", rep.spec.figure.out)
    outs = [reproduce.read_spec(p).figure.out for p in reproduce.folders() if reproduce.read_spec(p).figure]
    assert len(outs) == len(set(outs))


# attacc is run by tests/test_validate.py and test_attacc_rows_read_the_builtin_experiment; one test per other
# folder, so the folders run in parallel under xdist
RUN_FOLDERS = [p for p in reproduce.folders() if p.name != "attacc"]


def test_some_builtin_reproduction_is_run():
    assert {"cent", "neupims"} <= {p.name for p in RUN_FOLDERS}


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=[p.name for p in RUN_FOLDERS])
def test_every_builtin_reproduction_runs(folder):
    """Each folder's rows read a number from a completed run (metric paths, selected runs that fit); whether
    they are within tolerance is each reproduction's own test (tests/test_validate.py for AttAcc)."""
    import math

    rep = reproduce.load(folder)
    rows = reproduce.run_rows(rep)
    assert [r.name for r in rows] == [r.name for r in rep.spec.rows]
    assert all(math.isfinite(r.measured) and r.role in reproduce.ROLES for r in rows)


@pytest.mark.parametrize("escape", ['"\\U00110000"', '"\\UFFFFFFFF"', "2001-13-01", "!!int 12x"])
def test_bad_yaml_scalar_is_a_clean_error(tmp_path, escape):
    """Found by the reproduction fuzz harness: PyYAML raised ValueError / OverflowError for a "\\U" escape
    beyond U+10FFFF, an impossible date, a bad !!int (every YAML reader shares attnsim.core.config.parse_yaml)."""
    folder = _write(tmp_path, REFERENCE)
    text = (folder / "reference.yaml").read_text().replace("title: Toy reproduction", f"title: {escape}")
    (folder / "reference.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    assert str(e.value).startswith(f"{e.value.file}: invalid YAML value (") and e.value.file.endswith("reference.yaml")


def test_serving_experiment_refused(tmp_path):
    """Rows read static-batch runs: an experiment's serving section would be ignored, so it is refused."""
    from attnsim.core.config import find_config, load_yaml

    serving = load_yaml(find_config("experiments", "serve_paging"))["serving"]
    folder = _write(tmp_path, REFERENCE, exp=dict(EXPERIMENT, serving=serving))
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    assert e.value.key == "experiments.e" and "serving" in str(e.value)


NOOP = {  # every reference.yaml field, changed to another legal value, changes what validate prints or writes
    "system": None,  # must equal the folder name (tests above); a renamed folder is another reproduction
    "title": "Another title",
    "source": "another source",
    "paper__0__claim": "another claim",
    "paper__0__value": "3x",
    "paper__0__note": "another note",
    "experiments": {"e": "exp2.yaml"},
    "figure__recipe": None,  # one recipe so far
    "figure__out": "other.pdf",
    "rows__0__name": "renamed",
    "rows__0__experiment": None,  # one experiment label
    "rows__0__select": {"system": "dgx_h100", "batch_size": 4},
    "rows__1__metric": "metrics.ttft_s",
    "rows__1__scale": 1.0,
    "rows__1__reference": 6.0,
    "rows__1__tolerance": 0.5,
    "rows__0__role": "validation",
    "rows__1__source": "another row source",
    "rows__1__note": "another row note",
    # an assumption changes the rows validate compares (its own fields: the --explain test above prints name,
    # title and source, and each step's values follow its set)
    "assumptions": [
        {"name": "slow_hbm", "title": "t", "source": "s", "set": {"hardware.h100_sxm.hbm_bandwidth_gbps": 2000}}
    ],
}


def _outputs(tmp_path, path, capsys):
    """What validate prints (text, a row's note under its section; JSON for a row's source, only there) and the
    figure files it writes (for figure.out; figures take the longest)."""
    figs = tmp_path / f"figs_{len(list(tmp_path.iterdir()))}"
    args = (
        ["--json"]
        if path in ("rows__1__source", "rows__1__note")
        else ["--figures", str(figs)]
        if path == "figure__out"
        else []
    )
    main(["validate", "--set", "reproductions/toy", *args])
    return capsys.readouterr().out, sorted(p.name for p in figs.iterdir()) if figs.is_dir() else []


@pytest.mark.parametrize("path", [k for k, v in NOOP.items() if v is not None])
def test_every_reference_field_takes_effect(tmp_path, monkeypatch, capsys, path):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    folder = _write(tmp_path, REFERENCE)
    (folder / "exp2.yaml").write_text(yaml.safe_dump(dict(EXPERIMENT, models=["llama2-13b"])))
    base = _outputs(tmp_path, path, capsys)
    _bad(tmp_path, **{path: NOOP[path]})
    assert _outputs(tmp_path, path, capsys) != base


def test_noop_table_covers_every_field():
    fields = set()
    for prefix, cls in (
        ("", reproduce.ReferenceSpec),
        ("paper__0__", reproduce.PaperClaim),
        ("figure__", reproduce.FigureSpec),
        ("rows__0__", reproduce.RowSpec),
    ):
        fields |= {prefix + f for f in cls.model_fields if not (prefix == "" and f in ("paper", "figure", "rows"))}
    covered = {k if not k.startswith("rows__1__") else "rows__0__" + k[len("rows__1__") :] for k in NOOP}
    assert fields == covered


# ------------------------------------------------------------------------------------------------
# attnsim run of a built-in experiment that a reproduction folder names prints the two ends of its waterfall


def _run_json(capsys, name, *sets):
    args = ["run", name, "--no-write", "--no-figures", "--json"] + [x for s in sets for x in ("--set", s)]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _doc_value(runs, row):
    """The row's metric x scale in the one run document its select matches (the rows' own rule)."""
    hits = [
        d
        for d in runs
        if reproduce._matches((d["system"], d["model"], d["scenario"]["name"], d["scenario"]), row.select)
    ]
    assert len(hits) == 1
    return reproduce._number(hits[0], row.metric, "test", "metric") * row.scale


def test_run_prints_the_attacc_waterfall_ends(capsys):
    """attnsim run attacc_gpt3_175b (narrowed to attacc_opt and its baseline: every run it then holds is a run of
    the defaults) lists each attacc row whose run it made, with the artefact's number and the value read from the
    run documents it just produced; rows of systems it did not run are left out."""
    sets = ["experiment.systems=[attacc_opt,a100_hbm3_x16_tp16]"]
    doc = _run_json(capsys, "attacc_gpt3_175b", *sets)
    spec = reproduce.read_spec(reproduce.find("attacc"))
    want = [r for r in spec.rows if r.select["system"] in ("attacc_opt", "a100_hbm3_x16_tp16")]
    assert len(want) == 6  # 2 throughput, step, all-reduce, ff1 (attacc_opt) + the TP16 step
    got = {e["row"]: e for e in doc["reproductions"] if e["reproduction"] == "attacc"}
    assert sorted(got) == sorted(r.name for r in want)
    for r in want:
        e = got[r.name]
        assert (e["reference"], e["metric"], e["defaults"]) == (r.reference, r.metric, True)
        assert e["value"] == pytest.approx(_doc_value(doc["runs"], r), rel=1e-12)
        assert e["explain"] == "attnsim validate --explain attacc"
    assert main(["run", "attacc_gpt3_175b", "--no-write", "--no-figures", "--set", sets[0]]) == 0
    out = capsys.readouterr().out
    e = got["dgx-attacc/TP16 decode throughput, batch 16"]
    line = (
        f"dgx-attacc/TP16 decode throughput, batch 16: artefact 1.400; attnsim defaults "
        f"{validate_fmt(e['value'])} (attnsim validate --explain attacc explains the gap)"
    )
    assert line in out and out.index("reproductions of this experiment") < out.index("what differs and why")
    assert "attacc paper (not compared): performance vs a same-capacity GPU system" in out


def validate_fmt(v):
    from attnsim.core.report import fmt_num

    return fmt_num(v)


def test_run_ends_label_a_set_and_a_status(capsys):
    """A --set outside experiment.systems/models is no longer attnsim's defaults (said so, in JSON too); a row
    whose run did not complete shows the run's status; an experiment no folder names prints no section."""
    from attnsim.core.config import find_config
    from attnsim.core.report import reproduction_lines

    doc = _run_json(capsys, "samsung_cxl_pnm", "hardware.samsung_cxl_pnm.units=8")
    bw = next(e for e in doc["reproductions"] if e["row"] == "CXL-PNM device memory bandwidth [GB/s]")
    assert bw["defaults"] is False and bw["value"] == pytest.approx(8 * 68.2666, rel=1e-4)  # 8 x64 LPDDR5X-8533
    assert "attnsim with --set 546.1" in reproduction_lines([bw], defaults=False)[0]
    runs = [dict(d, status="does_not_fit") for d in doc["runs"]]
    ends = reproduce.run_ends(find_config("experiments", "samsung_cxl_pnm"), runs)
    assert [e["value"] for e in ends] == ["does_not_fit"] * 3  # capacity, bandwidth, the paper's throughput
    assert "attnsim defaults does_not_fit (" in reproduction_lines(ends)[0]
    assert "reproductions" not in _run_json(capsys, "samsung_cxl_pnm", "experiment.systems=[dgx_a100]")
    # the plain run (attnsim's defaults) of a paper folder's experiment: its rows, then its paper headlines
    assert main(["run", "samsung_cxl_pnm", "--no-write", "--no-figures"]) == 0
    out = capsys.readouterr().out
    # 16 x64 LPDDR5X-8533 packages x 68.27 GB/s = 1092 GB/s (samsung_cxl_pnm.yaml) vs the abstract's 1.1 TB/s
    assert (
        "CXL-PNM device memory bandwidth [GB/s]: artefact 1100; attnsim defaults 1092 (attnsim validate "
        "--explain samsung_cxl_pnm explains the gap)"
    ) in out
    assert (
        "samsung_cxl_pnm paper (not compared): performance gain (Samsung's 2024 summary" in out and "over 4.4x" in out
    )
    assert reproduce.run_ends(find_config("experiments", "default"), doc["runs"]) == []


# The folders of the papers' built-in experiments (attacc, cent and neupims are tested above and in
# tests/test_validate.py): rows pass, and the waterfall's last step is a plain run of the built-in experiment
PAPER_FOLDERS = {
    "ianus": "ianus_gpt2",
    "specpim": "specpim",
    "sangam": "sangam_vs_h100",
    "samsung_cxl_pnm": "samsung_cxl_pnm",
    "cxl_ndp": "cxl_ndp",
}


# Published headlines compared under the conditions the paper states that attnsim's folder could read, and not
# reached there (the row's note names the stated conditions attnsim cannot express): they are outside their
# tolerance at the first step, so `attnsim validate --set reproductions/<name>` reports them as FAIL. A change
# that reaches one must move it out of this list (and rewrite its note).
UNREACHED = {
    "ianus": ["headline: end-to-end speed-up over the A100, GPT-2 XL 128+128 (paper: 6.2x on average)"],
    "specpim": ["headline: speed-up vs speculative inference on the A100, gamma 4, alpha 0.8 (paper: 1.52x geomean)"],
}


@pytest.mark.parametrize("name", sorted(PAPER_FOLDERS))
def test_paper_folder_rows_pass_and_waterfall_ends_at_a_plain_run(name, capsys):
    """The first step (every assumption) is what validate compares and is within each row's tolerance (but the
    UNREACHED headlines, which are outside it and carry a note that --explain prints) and equals a plain run of the
    built-in experiment with the assumptions' --set values; the last step (no assumption) equals a plain run of the
    built-in experiment. Both are read as attnsim run reads them (reproduce.run_ends), narrowed to the rows'
    systems and models with experiment.* sets."""
    from attnsim.cli.validate import print_waterfall
    from attnsim.core.config import find_config
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    folder = reproduce.find(name)
    spec = reproduce.read_spec(folder)
    assert list(spec.experiments.values()) == [PAPER_FOLDERS[name]]  # the built-in paper-named experiment
    assert sorted(p.name for p in folder.iterdir()) == ["reference.yaml"]  # no copied hardware/system file
    assert all("system" in r.select for r in spec.rows)  # the plain run below keeps the rows' systems
    wf = reproduce.waterfall(folder)
    unreached = UNREACHED.get(name, [])
    assert set(unreached) <= {r.name for r in spec.rows}
    for r, v in zip(spec.rows, wf.steps[0]["values"]):
        if r.name in unreached:
            assert abs(v / r.reference - 1) > r.tolerance and r.note.startswith("not reached"), (r.name, v)
        else:
            assert abs(v / r.reference - 1) <= r.tolerance, (r.name, v, r.reference)
    print_waterfall(wf)
    out = " ".join(capsys.readouterr().out.split())
    assert all(" ".join(r.note.split()) in out for r in spec.rows if r.note)
    exp = load_experiment(PAPER_FOLDERS[name])
    systems = sorted({r.select.get("system") for r in spec.rows} | {exp.spec.baseline})
    models = sorted({m for _, m, _ in reproduce.load(folder).runs})
    narrow = [f"experiment.systems=[{','.join(systems)}]", f"experiment.models=[{','.join(models)}]"]
    source = find_config("experiments", PAPER_FOLDERS[name])
    ends = reproduce.run_ends(source, run_experiment(load_experiment(PAPER_FOLDERS[name], narrow)))
    assert [e["row"] for e in ends] == [r.name for r in spec.rows]
    assert wf.steps[-1]["label"] == "defaults"
    assert wf.steps[-1]["values"] == pytest.approx([e["value"] for e in ends], rel=1e-12)
    assert len(wf.steps) == len(spec.assumptions) + 1
    if spec.assumptions:  # the first step: a plain run with every assumption's --set (attnsim run --set ...)
        sets = narrow + reproduce.assumption_sets(spec)
        first = reproduce.run_ends(source, run_experiment(load_experiment(PAPER_FOLDERS[name], sets)))
        assert wf.steps[0]["label"] == "all assumptions"
        assert wf.steps[0]["values"] == pytest.approx([e["value"] for e in first], rel=1e-12)


@pytest.mark.parametrize("name", sorted(UNREACHED))
def test_headline_rows_read_the_end_to_end_latency_speed_up(name):
    """The IANUS and SpecPIM headline rows read vs_baseline.throughput_ratio as the papers' speed-up: at equal
    prompt and output tokens it is the baseline's end-to-end time over the system's (latency speed-up), and the
    row's select picks the run whose ratio that is."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    spec = reproduce.read_spec(reproduce.find(name))
    exp = spec.experiments[spec.rows[-1].experiment]
    for r in spec.rows:
        if r.name not in UNREACHED[name]:
            continue
        assert r.metric == "vs_baseline.throughput_ratio" and r.role == "headline"
        base = load_experiment(exp).spec.baseline
        docs = run_experiment(load_experiment(exp, [f"experiment.systems=[{r.select['system']},{base}]"]))
        (d,) = [
            d
            for d in docs
            if reproduce._matches((d["system"], d["model"], d["scenario"]["name"], d["scenario"]), r.select)
        ]
        (b,) = [
            b
            for b in docs
            if b["system"] == base and (b["model"], b["scenario"]["name"]) == (d["model"], d["scenario"]["name"])
        ]
        want = b["metrics"]["total_time_s"] / d["metrics"]["total_time_s"]
        assert d["vs_baseline"]["throughput_ratio"] == pytest.approx(want, rel=1e-9)


def test_headline_rows_are_reported_with_their_note_and_not_counted(tmp_path, monkeypatch, capsys):
    """A ``headline`` row (a paper's number under the conditions attnsim can express) is printed in its own section
    with its note and 'not reached', and does not make validate exit 1; the same row as a validation row does. A
    headline row without a note is refused at load (it must name what attnsim cannot express)."""
    import shutil

    from attnsim.cli import main
    from attnsim.core.config import ConfigError

    for name in UNREACHED:
        spec = reproduce.read_spec(reproduce.find(name))
        assert {r.role for r in spec.rows if r.name in UNREACHED[name]} == {"headline"}
    assert main(["validate", "--set", "reproductions/specpim"]) == 0
    out = capsys.readouterr().out
    assert "headline rows (" in out and "0 of 1 headline rows reached; 1 not" in out
    assert "2 of 2 rows within tolerance" in out  # the two compared workload rows; the headline is not counted
    copy = tmp_path / "reproductions" / "specpim"  # a user's folder of the same name comes first on the config path
    shutil.copytree(reproduce.find("specpim"), copy)
    text = (copy / "reference.yaml").read_text()
    headline = "reference: 1.52, tolerance: 0.25, role: headline,"
    assert text.count(headline) == 1
    (copy / "reference.yaml").write_text(text.replace(headline, headline.replace("headline,", "validation,")))
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    assert reproduce.find("specpim") == copy
    assert main(["validate", "--set", "reproductions/specpim"]) == 1  # counted as a validation row, outside
    capsys.readouterr()
    i = text.index("note:", text.index(headline))
    j = text.index('"}', i) + 1  # the note's closing quote (the row's mapping closes after it)
    (copy / "reference.yaml").write_text(text[:i].rstrip().rstrip(",") + text[j:])
    with pytest.raises(ConfigError, match="headline row needs a note"):
        reproduce.read_spec(copy)
