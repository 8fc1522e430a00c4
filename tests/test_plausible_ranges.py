"""Plausible ranges (issue 31): every number field of every config schema has a cited range; a value outside it
is refused with one line naming the file, key and range unless the file lists the key under
``allow_out_of_range:`` (noted in the run documents); runs whose headline metrics leave plausible bounds are
flagged ``implausible``; the unchecked arithmetic of issue 31 is a one-line error. Each example of the issue is
accepted (or crashes) on the main branch before this change."""

from __future__ import annotations

import copy

import pytest

from attnsim.core.config import (
    CONFIG_ROOT,
    ConfigError,
    Plausible,
    Schema,
    _number_kind,
    load_yaml,
    plausible_range,
    validate,
)
from attnsim.hwmodels import registry


def _hw(name: str) -> dict:
    return load_yaml(CONFIG_ROOT / "hardware" / f"{name}.yaml")


def _refused(fn, *words):
    with pytest.raises(ConfigError) as ei:
        fn()
    msg = str(ei.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


# ---------------------------------------------------------------- the issue's examples, each refused


@pytest.mark.parametrize(
    "name, path, value, words",
    [
        # a link of 1e-300 GB/s gave TTFT 1.8e303 ms on main; _gbps range [1e-3, 1e6] (a 1 MB/s link to 1 PB/s)
        (
            "nvlink3",
            ["bandwidth_gbps"],
            1e-300,
            ["nvlink3.yaml: bandwidth_gbps: expected a number in [0.001, 1e+06]", "GB/s"],
        ),
        # NAND page of 1e-300 KiB; _kb range [0.5, 1024] (a 512 B sector to 1 MiB, ONFI pages are 2-16 KiB)
        ("nand_tlc_ssd", ["page_kb"], 1e-300, ["page_kb: expected a number in [0.5, 1024]", "ONFI"]),
        # retention of 1e12 days (RBER clipped to 0.5, TPOT x3.6 on main); _days range [0, 3650] (JESD218)
        ("nand_tlc_ssd", ["retention_days"], 1e12, ["retention_days: expected a number in [0, 3650]", "JESD218"]),
        # P/E cycles of 1e15 overflowed 10 ** (pe / rated) on main; FlashSpec range [0, 1e6] (SLC ~1e5 rated)
        ("nand_tlc_ssd", ["pe_cycles"], 1e15, ["pe_cycles: expected a number in [0, 1e+06]"]),
        # a systolic array of 2^53 rows (TTFT 560 years on main); array side <= 2^16 (TPUs: 128-256)
        ("sangam_chiplet", ["systolic", "rows"], 2**53, ["systolic.rows: expected a number in [1, 65536]", "TPU"]),
        # sram_mb 1e-300 had no effect on main; _mb range [1e-3, 1e6]
        ("sangam_chiplet", ["systolic", "sram_mb"], 1e-300, ["systolic.sram_mb: expected a number in [0.001, 1e+06]"]),
        # a compression ratio of 1e-300 stored 13 GB of weights in ~0 bytes; CompressionSpec range [0.01, 64]
        ("cxl_ndp_lpddr5x", ["compression", "ratio"], 1e-300, ["compression.ratio: expected a number in [0.01, 64]"]),
        # split-K of 1.6e10 asked numpy for 119 GiB on main; GPUSpec range [1, 1024]
        ("a100_80gb_sxm", ["max_split_k"], 16_000_000_000, ["max_split_k: expected a number in [1, 1024]"]),
    ],
)
def test_issue_examples_refused_with_the_range(name, path, value, words):
    hw = _hw(name)
    node = hw
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    msg = _refused(lambda: registry.build(hw, f"hardware/{name}.yaml"), *words)
    assert "allow_out_of_range" in msg and msg.startswith(f"hardware/{name}.yaml: ")


def test_a_billion_replicas_refused():
    from attnsim.hwmodels.system import SystemSpec

    d = load_yaml(CONFIG_ROOT / "systems" / "dgx_a100.yaml")
    d["parallelism"] = {"tp": 8, "replicas": 10**9}
    # ParallelismSpec range [1, 2^20]: bounded by the devices of a system (the largest clusters ~2e5 GPUs)
    _refused(
        lambda: validate(SystemSpec, d, file="systems/dgx_a100.yaml"),
        "systems/dgx_a100.yaml: parallelism.replicas: expected a number in [1, 1048576]",
        "got 1000000000",
    )


def test_gamma_cv_and_rate_refused():
    from attnsim.studies.serve.requests import TraceSpec

    # cv 1e-300 divided by zero on main (shape k = 1 / cv^2 = inf); range [0.01, 100]
    _refused(
        lambda: validate(
            TraceSpec, {"rate_per_s": 2.0, "arrival": "gamma", "cv": 1e-300}, file="e.yaml", prefix="serving.trace"
        ),
        "e.yaml: serving.trace.cv: expected a number in [0.01, 100]",
    )
    # rate_per_s is a rate, not seconds: its own range [1e-6, 1e7] requests/s
    _refused(lambda: validate(TraceSpec, {"rate_per_s": 1e12}), "rate_per_s: expected a number in [1e-06, 1e+07]")
    assert validate(TraceSpec, {"rate_per_s": 1e5}).rate_per_s == 1e5


def test_nan_in_a_plan_calibration_file_refused(tmp_path):
    import yaml

    from attnsim.hwmodels.reliability.perplexity import calibration_path, load_calibration

    doc = load_yaml(calibration_path())
    for key, value, words in [
        ("s_bit", float("nan"), "fit.s_bit: expected a finite number, got nan"),
        ("s_quant", -1.0, "fit.s_quant: expected a number in [0, 10000], got -1.0"),
        ("s_quant_upper", None, "fit.s_quant_upper: expected a number, got None"),
    ]:
        bad = copy.deepcopy(doc)
        bad["fit"][key] = value
        p = tmp_path / f"{key}.yaml"
        p.write_text(yaml.safe_dump(bad))
        _refused(lambda: load_calibration(p), f"{key}.yaml: {words}")
    assert load_calibration(calibration_path())["fit"]["s_bit"] > 0  # the shipped calibration loads


# ---------------------------------------------------------------- the opt-out


def test_allow_out_of_range_accepts_the_named_key_only():
    hw = _hw("nvlink3")
    hw["bandwidth_gbps"] = 1e-4
    hw["latency_us"] = 1e7  # also outside (_us range <= 1e6 us)
    hw["allow_out_of_range"] = ["bandwidth_gbps"]
    _refused(lambda: registry.build(hw, "n.yaml"), "n.yaml: latency_us: expected a number in [0, 1e+06]")
    hw["allow_out_of_range"] = ["bandwidth_gbps", "latency_us"]
    assert registry.build(hw, "n.yaml").spec.bandwidth_gbps == 1e-4


@pytest.mark.parametrize(
    "value, words",
    [
        (["bandwidth"], "n.yaml: allow_out_of_range: expected a number field of this file (bandwidth_gbps"),
        ("bandwidth_gbps", "n.yaml: allow_out_of_range: expected a list of dotted keys, got 'bandwidth_gbps'"),
        ([1], "allow_out_of_range: expected a list of dotted keys, got [1]"),
    ],
)
def test_allow_out_of_range_refuses_unknown_keys(value, words):
    hw = _hw("nvlink3")
    hw["allow_out_of_range"] = value
    _refused(lambda: registry.build(hw, "n.yaml"), words)


TINY = """name: tiny
systems: [dgx_a100]
models: [llama3-8b]
scenarios:
  s: {batch_size: 1, prompt_len: 64, output_len: 4}
"""


def _run(tmp_path, *sets):
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = tmp_path / "tiny.yaml"
    exp.write_text(TINY)
    return run_experiment(load_experiment(exp, list(sets)))


def test_opt_out_noted_in_the_run_document_and_implausible_flagged(tmp_path):
    with pytest.raises(ConfigError, match="nvlink3.yaml: bandwidth_gbps: expected a number in"):
        _run(tmp_path, "hardware.nvlink3.bandwidth_gbps=1e-9")
    (doc,) = _run(
        tmp_path, "hardware.nvlink3.bandwidth_gbps=1e-9", "hardware.nvlink3.allow_out_of_range=[bandwidth_gbps]"
    )
    assert any(n.startswith("hardware/nvlink3.yaml: allow_out_of_range: [bandwidth_gbps]") for n in doc["notes"])
    # 1 GB/s of tensor-parallel all-reduce traffic at 1e-9 GB/s is ~1e9 s: far beyond a day per token
    assert doc["status"] == "implausible"
    assert "metrics.ttft_s" in doc["error"] and "a token slower than a day" in doc["error"]
    assert doc["metrics"]["ttft_s"] > 86400  # kept for inspection
    (ok,) = _run(tmp_path)
    assert ok["status"] == "ok" and "notes" not in ok and ok["metrics"]["ttft_s"] < 86400


def test_experiment_file_opt_out(tmp_path):
    from attnsim.sim.experiment import load_experiment

    exp = tmp_path / "tiny.yaml"
    exp.write_text(TINY + "allow_out_of_range: [scenarios.s.nope]\n")
    _refused(
        lambda: load_experiment(exp),
        "tiny.yaml: allow_out_of_range: expected a number field of this file",
        "'scenarios.s.nope'",
    )
    exp.write_text(TINY + "allow_out_of_range: [scenarios.s.output_len]\n")
    assert load_experiment(exp).scenarios["s"].output_len == 4


def test_implausible_reasons_hand_made_metrics():
    from attnsim.sim.results import finalize_doc, implausible_reasons

    ok = {
        "ttft_s": 0.1,
        "tpot_s": 0.02,
        "energy_per_token_j": 1.5,
        "fits": True,
        "memory": {"gpu": {"used_fraction": 0.5}},
        "bandwidth": {"gpu:hbm": {"utilization": 0.8}},
    }
    assert implausible_reasons(ok) == []
    assert implausible_reasons({**ok, "tpot_s": 86401.0})  # a token slower than a day (86,400 s)
    assert implausible_reasons({**ok, "energy_per_token_j": -1.0})  # negative energy
    assert implausible_reasons({**ok, "memory": {"gpu": {"used_fraction": 1.5}}})  # over capacity, fits checked
    assert implausible_reasons({**ok, "memory": {"gpu": {"used_fraction": 1.5}}, "fits": None}) == []
    assert implausible_reasons({**ok, "bandwidth": {"x": {"utilization": 2.0}}})  # above peak
    doc = finalize_doc({"status": "ok", "metrics": {**ok, "ttft_s": 1e9}})
    assert doc["status"] == "implausible" and doc["error"].startswith("implausible result: metrics.ttft_s = 1e+09 s")


# ---------------------------------------------------------------- coverage and the built-in configs


def _schemas():
    import importlib
    import pkgutil

    import attnsim
    import attnsim.hwmodels
    import attnsim.mapper
    import attnsim.workloads

    registry.kinds()
    for pkg in (attnsim, attnsim.hwmodels, attnsim.workloads, attnsim.mapper):
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not any(x in m.name for x in ("cli", "plots", "__main__")):
                importlib.import_module(m.name)
    out, todo = set(), [Schema]
    while todo:
        for s in todo.pop().__subclasses__():
            out.add(s)
            todo.append(s)
    return sorted(out, key=lambda c: (c.__module__, c.__name__))


def test_every_number_field_has_a_plausible_range_with_a_reason():
    missing, fields = [], 0
    for cls in _schemas():
        for name, f in cls.model_fields.items():
            if _number_kind(f.annotation):
                fields += 1
                p = plausible_range(cls, name)
                if not isinstance(p, Plausible) or len(p.reason) < 10 or not p.low <= p.high:
                    missing.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert fields > 300  # 335 number fields when this test was written
    assert missing == []


def test_built_in_configs_load_within_their_ranges():
    from attnsim.hwmodels.system import SystemSpec
    from attnsim.sim.experiment import load_experiment
    from attnsim.workloads.model import ModelSpec

    n = 0
    for p in sorted((CONFIG_ROOT / "hardware").glob("*.yaml")):
        hw = load_yaml(p)
        registry.check_ranges(hw, str(p))  # sensitivity ranges lie inside the plausible ranges
        registry.build(hw, str(p))
        n += 1
    for p in sorted((CONFIG_ROOT / "models").glob("*.yaml")):
        validate(ModelSpec, load_yaml(p), str(p))
    for p in sorted((CONFIG_ROOT / "systems").glob("*.yaml")):
        # a choices: block is set aside, as a hardware file's (experiment._system_spec; its alternatives are checked
        # by tests/test_verdict_flips.py test_shipped_system_choices_are_legal)
        validate(SystemSpec, {k: v for k, v in load_yaml(p).items() if k != registry.CHOICES_KEY}, str(p))
    for p in sorted((CONFIG_ROOT / "experiments").glob("*.yaml")):
        load_experiment(p)
    assert n > 30


def test_a_sensitivity_range_beyond_the_plausible_range_is_refused():
    hw = _hw("sangam_chiplet")
    hw["ranges"]["systolic.sram_mb"] = {"low": 1e-9, "high": 256, "source": "assumption: test"}
    _refused(
        lambda: registry.check_ranges(hw, "s.yaml"),
        "s.yaml: ranges.systolic.sram_mb.low: expected a legal "
        "value of systolic.sram_mb, got 1e-09 (expected a number in [0.001, 1e+06]",
    )


# ---------------------------------------------------------------- unchecked arithmetic


def test_cxl_pnm_without_a_peak_is_refused():
    hw = _hw("cxl_pnm_lpddr5x")
    hw["pu"] = {}  # divided by zero on main: fl / self.peak_flops with peak 0
    _refused(
        lambda: registry.build(hw, "hardware/cxl_pnm_lpddr5x.yaml"),
        "hardware/cxl_pnm_lpddr5x.yaml: pu.tflops: expected a number > 0",
    )


def test_nand_rber_does_not_overflow():
    from attnsim.hwmodels.flash import PE_RATED, RBER_FRESH, nand_rber

    assert nand_rber(1e15, 0.0) == 0.5  # OverflowError on main (10 ** (1e15 / 3000))
    assert nand_rber(1e15, 1e12) == 0.5
    # below the clamp, the closed form: RBER_FRESH x 10^(pe / rated) x (1 + days / 365)
    assert nand_rber(PE_RATED, 365.0) == pytest.approx(RBER_FRESH * 10.0 * 2.0, rel=1e-12)


def test_a_deeply_nested_config_json_is_one_line(tmp_path):
    from attnsim.workloads.hf import model_from_hf_config

    p = tmp_path / "config.json"
    p.write_text("[" * 100_000 + "]" * 100_000)  # RecursionError on main
    _refused(lambda: model_from_hf_config(p), "config.json: invalid JSON (nested too deeply)")


def test_the_ranges_page_is_current():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "ranges_table.py"
    spec = importlib.util.spec_from_file_location("ranges_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.PAGE.read_text() == mod.page(), "docs/reference/ranges.md is stale: run python bench/ranges_table.py"
    assert "| `bandwidth_gbps` | 0.001 | 1e+06 |" in mod.page()  # the _gbps unit range (attnsim.core.config)
