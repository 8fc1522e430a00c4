"""Sweeps of serving experiments run the serving model; replications give bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from attnsim.cli import main
from attnsim.studies.serve.replicate import CI_METRICS, mean_ci
from attnsim.studies.serve.run import load_serving_experiment, serve_experiment
from attnsim.studies.sweep.table import load_table, unit_name

SMALL = ["experiment.serving.trace.num_requests=40"]


def _serve(sets):
    (doc,) = serve_experiment(*load_serving_experiment("serve_prefix", SMALL + sets))
    return doc


def test_mean_ci_brackets_the_mean_and_is_degenerate_for_equal_samples():
    v = np.array([1.0, 2.0, 4.0, 3.5, 2.5])
    lo, hi = mean_ci(v, 0.95, seed=0)
    assert v.min() <= lo < v.mean() < hi <= v.max()
    lo90, hi90 = mean_ci(v, 0.5, seed=0)
    assert hi90 - lo90 < hi - lo  # a lower confidence level gives a narrower interval
    assert mean_ci(np.array([3.0, 3.0, 3.0]), 0.95, seed=0) == (3.0, 3.0)


def test_replications_are_means_of_independently_seeded_runs():
    seed = 3  # serve_prefix's trace seed
    singles = [_serve([f"experiment.serving.trace.seed={seed + r}"]) for r in range(3)]
    rep = _serve(["experiment.serving.replications=3"])
    assert rep["serving"]["replications"] == 3 and rep["serving"]["seeds"] == [3, 4, 5]
    for k in ("ttft_p99", "tpot_p50", "slo_attainment", "energy_per_request_j"):
        vals = [d["metrics"][k] for d in singles]
        assert rep["metrics"][k] == pytest.approx(np.mean(vals), rel=1e-12)
        eps = 1e-12 * max(vals)
        assert (
            min(vals) - eps
            <= rep["metrics"][f"{k}_ci_low"]
            <= rep["metrics"][k]
            <= rep["metrics"][f"{k}_ci_high"]
            <= max(vals) + eps
        )
    assert set(f"{k}_ci_low" for k in CI_METRICS) <= set(rep["metrics"])
    assert len(rep["_requests"]["replication"]) == 120
    assert _serve(["experiment.serving.replications=1"])["metrics"] == singles[0]["metrics"]


def _write(tmp_path, data):
    p = tmp_path / "sw.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_sweep_of_a_serving_experiment_runs_the_serving_model(tmp_path, capsys):
    sw = _write(
        tmp_path,
        {
            "name": "serve_rates",
            "base": "serve_prefix",
            "replications": 2,
            "set": {"experiment.serving.trace.num_requests": 40},
            "parameters": [{"grid": {"experiment.serving.trace.rate_per_s": [4, 12]}}],
        },
    )
    out = tmp_path / "s.h5"
    assert main(["sweep", str(sw), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    t = load_table(out)
    assert list(t.col("status")) == ["ok", "ok"]
    rates = t.col("experiment.serving.trace.rate_per_s").astype(float)
    for r in (4, 12):
        ref = _serve([f"experiment.serving.trace.rate_per_s={r}", "experiment.serving.replications=2"])
        i = int(np.nonzero(rates == r)[0][0])
        for k in ("ttft_p99", "ttft_p99_ci_high", "throughput_rps", "goodput_rps"):  # by their unit-suffixed names
            assert t.col(unit_name(k))[i] == pytest.approx(ref["metrics"][k], rel=1e-12)
    assert t.col("throughput_rps")[rates == 12][0] > 2 * t.col("throughput_rps")[rates == 4][0]
    fig_path = tmp_path / "f.png"
    assert (
        main(
            [
                "plot",
                str(out),
                "--recipe",
                "line",
                "--x",
                "experiment.serving.trace.rate_per_s",
                "--y",
                "ttft_p99_s",
                "-o",
                str(fig_path),
            ]
        )
        == 0
    )
    assert fig_path.stat().st_size > 0
    # the name attnsim show and export print; the stored one without its unit is refused (issue 28)
    assert (
        main(
            [
                "plot",
                str(out),
                "--recipe",
                "line",
                "--x",
                "experiment.serving.trace.rate_per_s",
                "--y",
                "ttft_p99",
                "-o",
                str(tmp_path / "g.png"),
            ]
        )
        == 2
    )
    from attnsim.plots import figure

    ax = figure(t, "line", x="experiment.serving.trace.rate_per_s", y="ttft_p99_s").axes[0]
    assert ax.get_xlabel() == "Arrival rate (requests/s)" and ax.get_ylabel().startswith("TTFT p99 (")


def test_line_recipe_draws_error_bars_from_intervals(tmp_path):
    from matplotlib.container import ErrorbarContainer

    from attnsim.plots.recipes import line
    from attnsim.studies.sweep.table import Table

    cols = {
        "status": np.array(["ok"] * 3),
        "system": np.array(["a"] * 3),
        "x": np.array([1.0, 2.0, 3.0]),
        "y": np.array([1.0, 2.0, 3.0]),
        "y_ci_low": np.array([0.5, 1.5, 2.5]),
        "y_ci_high": np.array([1.5, 2.5, 3.5]),
    }
    fig = line(Table(tmp_path / "t.h5", "sweep", {}, cols, {}, ["x"]), x="x", y="y")
    assert any(isinstance(c, ErrorbarContainer) for c in fig.axes[0].containers)


def test_replications_need_a_serving_experiment(tmp_path, capsys):
    sw = _write(tmp_path, {"name": "x", "base": "default", "replications": 3})
    assert main(["sweep", str(sw), "--out", str(tmp_path / "s.h5")]) == 2
    err = capsys.readouterr().err
    assert "replications" in err and "serving" in err and not (tmp_path / "s.h5").exists()


def test_disaggregated_serving_sweep_is_refused(tmp_path, capsys):
    sw = _write(tmp_path, {"name": "x", "base": "serve_disagg"})
    assert main(["sweep", str(sw), "--out", str(tmp_path / "s.h5")]) == 2
    assert "disaggregat" in capsys.readouterr().err


def test_confidence_needs_replications():
    from attnsim.core.config import ConfigError, validate
    from attnsim.studies.serve.spec import ServingSpec

    with pytest.raises(ConfigError, match="confidence: not used with replications: 1"):
        validate(ServingSpec, {"confidence": 0.9}, prefix="serving")
    assert validate(ServingSpec, {"replications": 3, "confidence": 0.9}).confidence == 0.9
