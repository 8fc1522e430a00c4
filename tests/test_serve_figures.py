"""Serving figures through the CLI: latency CDFs from a serve results file, SLO attainment vs load."""
import h5py
import numpy as np

from attnsim.cli import main

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
