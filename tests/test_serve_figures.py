"""Serving figures through the CLI: latency CDFs from a serve results file, SLO attainment vs load."""

import h5py
import numpy as np
import pytest

from attnsim.cli import main
from attnsim.plots.labels import display
from attnsim.plots.style import paper_style


def _labels(tmp_path):
    p = tmp_path / "labels.yaml"
    p.write_text("h100_x1: One H100\n")
    return p


SMALL = ["--set", "experiment.serving.trace.num_requests=30"]


def test_latency_cdf_from_serve_results(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["serve", "serve_prefix", "--out", str(out), *SMALL]) == 0
    with h5py.File(out / "results.h5") as f:
        req = f["requests"][()]
    assert len(req) == 30 * len(np.unique(req["run"])) and np.all(np.isfinite(req["ttft_s"]))
    capsys.readouterr()
    assert main(["plot", str(out / "results.h5"), "--recipe", "latency_cdf", "-o", str(tmp_path / "cdf.pdf")]) == 0
    assert (tmp_path / "cdf.pdf").read_bytes()[:4] == b"%PDF" and (tmp_path / "cdf.png").stat().st_size > 1000
    assert (
        main(
            [
                "plot",
                str(out / "results.h5"),
                "--recipe",
                "latency_ccdf",
                "--labels",
                str(_labels(tmp_path)),
                "-o",
                str(tmp_path / "ccdf.png"),
            ]
        )
        == 0
    )
    # the CCDF's content: P(X > x) steps down to 1/n on log y (log x), the SLOs of the run as vertical lines
    from test_figure_quality import assert_contrast, assert_font, assert_ticks_apart

    from attnsim.plots.serve import cdf_figure, read_slos
    from attnsim.studies.sweep.store import read_results

    slos = read_slos(out / "results.h5")
    m = read_results(out / "results.h5")[1][0]["metrics"]
    assert slos == {"ttft_s": [m["slo_ttft_s"]], "tpot_s": [m["slo_tpot_s"]]}
    with paper_style():
        fig = cdf_figure(req, ccdf=True, slos=slos)
    axes = fig.axes
    assert [a.get_xlabel() for a in axes] == ["TTFT (s)", "TPOT (ms)", "End-to-end latency (s)"]
    assert axes[0].get_ylabel() == "Fraction of requests > x" and axes[0].get_yscale() == "log"
    assert all(a.get_xscale() == "log" for a in axes)
    system = req["system"][0].decode() if isinstance(req["system"][0], bytes) else str(req["system"][0])
    ttft = [ln for ln in axes[0].get_lines() if ln.get_label() == display(system)][0]
    n = int(np.sum(req["run"] == req["run"][0]))
    np.testing.assert_allclose(ttft.get_ydata(), 1 - np.arange(1, n) / n)
    np.testing.assert_allclose(ttft.get_xdata(), np.sort(req["ttft_s"][req["run"] == req["run"][0]])[:-1])
    slo_x = [ln.get_xdata()[0] for a in axes for ln in a.get_lines() if ln.get_gid() == "slo"]
    assert slo_x == pytest.approx([m["slo_ttft_s"], m["slo_tpot_s"] * 1e3])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [display(system), "SLO"]
    assert_ticks_apart(fig)
    assert_contrast(fig)
    assert_font(fig)


def test_slo_vs_load_one_line_per_system(tmp_path, capsys):
    fig = tmp_path / "slo.pdf"
    assert main(["serve", "serve_prefix", "--slo-vs-load", "2,40", "--figure", str(fig), *SMALL]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "/s:" in ln]
    assert len(lines) == 1 and "2/s:" in lines[0] and "40/s:" in lines[0]
    slo = [float(part.split(":")[1].split("%")[0]) for part in lines[0].split(", ") if "% SLO" in part]
    assert slo[0] >= slo[1]  # attainment never rises with load
    assert fig.read_bytes()[:4] == b"%PDF"


def test_bad_rates_are_rejected(capsys):
    assert main(["serve", "serve_prefix", "--slo-vs-load", "fast"]) == 2
    assert "--slo-vs-load: expected comma-separated numbers" in capsys.readouterr().err


def test_serve_results_plot_draws_the_same_cdf_as_the_results_file(tmp_path, capsys):
    """``ServeResults.plot("latency_cdf" | "latency_ccdf")`` (Python API) draws the per-request rows the CLI draws
    from the written file: same lines, same SLO marks; a table option it does not read is refused."""
    import attnsim
    from attnsim.core.config import ConfigError
    from attnsim.plots.serve import cdf_figure, read_slos

    res = attnsim.serve("serve_prefix", sets=["experiment.serving.trace.num_requests=30"])
    path = res.save(tmp_path / "serve.h5")
    with h5py.File(path) as f:
        req = f["requests"][()]
    for recipe, ccdf in (("latency_cdf", False), ("latency_ccdf", True)):
        fig = res.plot(recipe)
        with paper_style():
            ref = cdf_figure(req, ccdf=ccdf, slos=read_slos(path) if ccdf else None)
        for a, b in zip(fig.axes, ref.axes, strict=True):
            got = [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in a.get_lines()]
            want = [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in b.get_lines()]
            assert got == want and len(got) >= 1
    slo_lines = [ln for a in res.plot("latency_ccdf").axes for ln in a.get_lines() if ln.get_gid() == "slo"]
    assert len(slo_lines) == 2  # TTFT and TPOT SLOs of the run
    paths = res.plot("latency_cdf", tmp_path / "cdf.pdf", labels={"h100_x1": "One H100"})
    assert paths[0].read_bytes()[:4] == b"%PDF"
    with pytest.raises(ConfigError, match="does not use x"):
        res.plot("latency_cdf", x="batch_size")
    with pytest.raises(ConfigError, match="labels"):  # a name the figure never draws (the CLI refuses it too)
        res.plot("latency_cdf", labels={"no_such_system_xyz": "X"})
