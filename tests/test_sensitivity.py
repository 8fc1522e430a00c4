"""attnsim sensitivity: ranges: blocks in hardware configs, OAT / Morris over them, the table, the
flip summary, the tornado figure and the CLI's refusals."""

from __future__ import annotations

import json

import pytest
import yaml

from attnsim.cli import main
from attnsim.core.config import CONFIG_ROOT, ConfigError, available, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.studies import sensitivity

GPU = "a100_80gb_sxm"
RANGES = (
    f"hardware.{GPU}.ranges={{idle_power_w: {{low: 40, high: 90, source: 'assumption: test'}}, "
    "hbm_bandwidth_gbps: {low: 1500, high: 2500, source: 'assumption: test'}}"
)
SETS = [
    "experiment.systems=[dgx_a100, dgx_h100]",
    "experiment.baseline=dgx_a100",
    "experiment.models=[llama2-7b]",
    "experiment.scenarios={s: {batch_size: 2, prompt_len: 64, output_len: 6}}",
    "experiment.generation={mode: sampled, samples: 3}",
    "models.llama2-7b.num_layers=2",
    RANGES,
]
IDLE, BW = f"{GPU}.idle_power_w", f"{GPU}.hbm_bandwidth_gbps"
A100 = "dgx_a100/llama2-7b/s"


def _gpu() -> dict:
    return load_yaml(find_config("hardware", GPU))


@pytest.mark.parametrize(
    "ranges,key,msg",
    [
        ({"bogus_w": {"low": 1, "high": 2, "source": "x"}}, "ranges.bogus_w", "expected a number field of kind gpu ("),
        ({"software_stack": {"low": 1, "high": 2, "source": "x"}}, "ranges.software_stack", "expected a number field"),
        (
            {"idle_power_w": {"low": 500, "high": 600, "source": "x"}},
            "ranges.idle_power_w",
            "expected low <= idle_power_w (",
        ),
        ({"idle_power_w": {"low": 40, "high": 90}}, "ranges.idle_power_w.source", "missing required key"),
        ({"idle_power_w": {"low": 40, "high": 90, "source": ""}}, "ranges.idle_power_w.source", ""),
        ({"idle_power_w": {"low": 90, "high": 40, "source": "x"}}, "ranges.idle_power_w", "expected low <= high"),
        ({"idle_power_w": {"low": 40, "high": 90, "source": "x", "mid": 3}}, "ranges.idle_power_w.mid", "unknown key"),
        (
            {"mem_eta_max": {"low": 0.5, "high": 1.5, "source": "x"}},
            "ranges.mem_eta_max.high",
            "expected a legal value",
        ),
        ({"idle_power_w": {"low": 40, "high": float("inf"), "source": "x"}}, "ranges.idle_power_w.high", "finite"),
        ([1, 2], "ranges", "expected a mapping"),
    ],
)
def test_ranges_refused_one_line(ranges, key, msg):
    with pytest.raises(ConfigError) as e:
        registry.check_ranges({**_gpu(), "ranges": ranges}, "x.yaml")
    s = str(e.value)
    assert "\n" not in s and e.value.file == "x.yaml" and e.value.key == key and msg in s, s


def test_ranges_accepted_and_set_aside():
    hw = {**_gpu(), "ranges": {"idle_power_w": {"low": 40, "high": 90, "source": "assumption: x"}}}
    r = registry.check_ranges(hw, "x.yaml")
    assert (r["idle_power_w"].low, r["idle_power_w"].high) == (40.0, 90.0)
    # the model built with a ranges block is the model built without it
    assert registry.build(hw).spec == registry.build(_gpu()).spec


def test_builtin_ranges_hold_their_values():
    """Every bundled hardware config's ranges: block names real number fields and holds the file's value."""
    n = 0
    for name in available("hardware"):
        hw = load_yaml(CONFIG_ROOT / "hardware" / f"{name}.yaml")
        n += len(registry.check_ranges(hw, f"hardware/{name}.yaml"))
    assert n >= 10


def test_file_range_checked_when_loaded(tmp_path, monkeypatch, capsys):
    """A hardware file whose range does not hold its value is refused by any command that loads it."""
    (tmp_path / "hardware").mkdir()
    hw = {**_gpu(), "ranges": {"idle_power_w": {"low": 500, "high": 600, "source": "assumption: x"}}}
    (tmp_path / "hardware" / f"{GPU}.yaml").write_text(yaml.safe_dump(hw))
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    assert main(["run", "default", "--no-write"] + [f"--set={s}" for s in SETS[:-1]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"error: {tmp_path / 'hardware' / GPU}.yaml: ranges.idle_power_w: expected low <= idle_power_w ("
    )
    assert "\n" not in err


@pytest.fixture(scope="module")
def oat_doc():
    return sensitivity.run("default", SETS, [IDLE, BW])


def _row(doc, param, out):
    return next(r for r in doc["rows"] if r["parameter"] == param and r["output"] == out)


def test_oat_swings(oat_doc):
    assert oat_doc["evaluations"] == 5  # base + low/high of two parameters
    assert [p["name"] for p in oat_doc["parameters"]] == [IDLE, BW]
    # idle power cannot change a time; it must raise the energy per token (static power x time)
    for m in ("tpot_s", "ttft_s", "tokens_per_s"):
        assert _row(oat_doc, IDLE, f"{A100}:{m}")["swing"] == 0.0
    e = _row(oat_doc, IDLE, f"{A100}:energy_per_token_j")
    assert e["swing"] > 0 and e["low"] < e["base"] < e["high"]
    # the A100 power does not touch the H100 system's metrics
    assert _row(oat_doc, IDLE, "dgx_h100/llama2-7b/s:energy_per_token_j")["swing"] == 0.0
    # more HBM bandwidth: a shorter memory-bound decode step on the A100 system
    t = _row(oat_doc, BW, f"{A100}:tpot_s")
    assert t["swing"] < 0 and t["low"] > t["base"] > t["high"]
    assert t["relative_swing"] == pytest.approx(t["swing"] / t["base"])
    # ... so the H100's speed-up over the A100 baseline shrinks
    assert _row(oat_doc, BW, "dgx_h100/llama2-7b/s:vs_baseline.tpot_speedup")["swing"] < 0


def test_flip_detection_constructed():
    assert sensitivity.flips(1.1, [0.9, 1.2, None]) == [0.9]
    assert sensitivity.flips(0.8, [0.9, 1.3]) == [1.3]
    assert sensitivity.flips(1.0, [0.5, 2.0]) == []  # a tie is no verdict to flip
    doc = {
        "method": "oat",
        "parameters": [{"name": "p", "low": 1, "base": 2, "high": 3}, {"name": "q", "low": 1, "base": 2, "high": 3}],
        "rows": [
            {
                "parameter": "p",
                "output": "r:vs_baseline.energy_efficiency_ratio",
                "low": 0.9,
                "base": 1.05,
                "high": 1.2,
            },
            {
                "parameter": "q",
                "output": "r:vs_baseline.energy_efficiency_ratio",
                "low": 1.01,
                "base": 1.05,
                "high": 1.2,
            },
            {"parameter": "p", "output": "r:energy_per_token_j", "low": 0.5, "base": 1.5, "high": 2.0},
        ],
    }
    lines = sensitivity.flip_lines(doc)
    assert lines == ["p could flip r:vs_baseline.energy_efficiency_ratio across 1.0: 0.9 at 1, 1.05 at 2, 1.2 at 3"]


def test_oat_table_and_flip_summary(oat_doc):
    text = sensitivity.table(oat_doc)
    assert f"{A100}:tpot_s" in text and BW in text
    crossing = [
        r
        for r in oat_doc["rows"]
        if "vs_baseline" in r["output"] and sensitivity.flips(r["base"], [r["low"], r["high"]])
    ]
    assert len(oat_doc["flips"]) == len(crossing)
    for line in oat_doc["flips"]:
        assert line in text and "across 1.0" in line


def test_morris_small_sample():
    doc = sensitivity.run("default", SETS, [BW, IDLE], method="morris", samples=2)
    assert doc["evaluations"] == 1 + 2 * 3  # base + trajectories x (parameters + 1)
    r = next(r for r in doc["rows"] if r["parameter"] == IDLE and r["output"] == f"{A100}:tpot_s")
    assert r["mu_star"] == 0.0
    r = next(r for r in doc["rows"] if r["parameter"] == BW and r["output"] == f"{A100}:tpot_s")
    assert r["mu_star"] > 0 and r["mu"] < 0  # elementary effect of bandwidth on TPOT: negative
    assert "mu_star" in sensitivity.table(doc)
    doc = sensitivity.run("default", SETS, [IDLE], method="sobol", samples=2)
    assert doc["evaluations"] == 1 + 2 * (1 + 2)  # base + N x (parameters + 2), first-order and total only
    r = next(r for r in doc["rows"] if r["output"] == f"{A100}:tpot_s")
    assert r["ST"] == 0.0 and r["S1"] == 0.0 and r["sample_min"] == r["sample_max"]  # idle power moves no time


def test_cli_writes_json_and_tornado(tmp_path, capsys):
    out = tmp_path / "res"
    args = ["sensitivity", "default", "--params", BW, "--out", str(out)] + [f"--set={s}" for s in SETS]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "tornado.pdf" in text
    doc = json.loads((out / "sensitivity.json").read_text())
    assert doc["method"] == "oat" and [p["name"] for p in doc["parameters"]] == [BW]
    assert doc["parameters"][0]["source"] == "assumption: test"
    assert (out / "tornado.pdf").stat().st_size > 1000 and (out / "tornado.png").stat().st_size > 1000


def test_tornado_recipe(oat_doc):
    from attnsim.plots.recipes import tornado
    from attnsim.plots.style import paper_style

    with paper_style():
        fig = tornado(oat_doc, "dgx_h100/llama2-7b/s:vs_baseline.energy_efficiency_ratio")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == sorted([IDLE, BW])
    assert "ratio = 1 (verdict flips)" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ConfigError, match="--figure-output"):
        tornado(oat_doc, "nope:tpot_s")
    # a run that did not complete at the base point (no base value) still draws
    doc = {
        "method": "oat",
        "base": {"r:tpot_s": None},
        "rows": [
            {
                "parameter": "p",
                "output": "r:tpot_s",
                "low": None,
                "base": None,
                "high": 2.0,
                "swing": None,
                "relative_swing": None,
            }
        ],
    }
    with paper_style():
        assert "base -" in tornado(doc, "r:tpot_s").axes[0].get_xlabel()


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--params", "bogus.x"], "error: --params: unknown parameter 'bogus.x' (known: "),
        (["--params", ","], "error: --params: expected comma-separated parameter names"),
        (["--samples", "4"], "error: --samples: not used with --method oat"),
        (["--samples", "0"], "error: attnsim sensitivity: argument --samples"),
        (["--method", "fast"], "error: attnsim sensitivity: argument --method: invalid choice"),
        (["--method", "sobol", "--samples", "3"], "error: --samples: expected a power of 2 for sobol, got 3"),
        (["--no-write", "--out", "x"], "error: --out: --no-write writes no results folder"),
        (["--figure-output", "nope"], "error: --figure-output: expected one of"),
    ],
)
def test_bad_flags_refused(extra, msg, tmp_path, capsys):
    out = tmp_path / "o"
    args = ["sensitivity", "default"] + [f"--set={s}" for s in SETS] + extra
    if "--out" not in extra and "--no-write" not in extra:
        args += ["--out", str(out)]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse usage errors (OneLineParser: one line, exit 2)
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(msg) and "\n" not in err, err
    if "unknown parameter" in msg:  # the known names are listed
        assert IDLE in err and BW in err and f"{GPU}.attn_mem_eta_fused" not in err  # --set replaced the file's ranges
    assert not out.exists() or not any(out.iterdir())


def test_no_ranges_refused():
    with pytest.raises(ConfigError, match="--params: expected hardware with a ranges: block"):
        sensitivity.select([], None)


def test_serving_experiment_refused():
    """attnsim sensitivity runs static batches: a serving section would be ignored, so it is refused."""
    with pytest.raises(ConfigError) as e:
        sensitivity.run("serve_paging", [])
    assert e.value.key == "serving" and "serve_paging.yaml" in str(e.value)
