"""``attnsim serve``: summary, --json, HDF5 /requests table, CSV export, errors."""

import json

import h5py
import numpy as np
import pytest

from attnsim.cli import main

EXP = """
name: serve_cli_test
systems: [h100_x1]
models: [llama3-8b]
scenarios:
  chat: {prompt_len: 256, output_len: 16}
serving:
  trace: {%s}
  disaggregation:
    - {prefill: h100_x1, decode: h100_x1, link: nvlink4}
"""


def _write(tmp_path, extra="num_requests: 40, rate_per_s: 20, seed: 2, arrival: poisson"):
    p = tmp_path / "exp.yaml"
    p.write_text(EXP % extra)
    return p


def test_serve_json_h5_csv(tmp_path, capsys):
    p = _write(tmp_path)
    rc = main(["serve", str(p), "--json", "--out", str(tmp_path / "out"), "--csv", str(tmp_path / "req.csv")])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    runs = doc["runs"]
    assert [r["system"] for r in runs] == ["h100_x1", "h100_x1->h100_x1"]
    assert all(r["status"] == "ok" and r["metrics"]["requests"] == 40 for r in runs)
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        req = f["requests"][()]
        assert len(req) == 80 and set(req["run"]) == {0, 1}
        assert np.all(req["latency_s"] >= req["ttft_s"])
        ttft0 = req["ttft_s"][req["run"] == 0]
        assert np.mean(ttft0) == pytest.approx(runs[0]["metrics"]["ttft_mean"], rel=1e-12)
    lines = (tmp_path / "req.csv").read_text().splitlines()
    assert len(lines) == 81 and lines[0].startswith("run,system,model,scenario,request,arrival_s")


def test_serve_summary_and_show_compat(tmp_path, capsys):
    p = _write(tmp_path)
    assert main(["serve", str(p), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "TTFT p50/p99 ms" in out and "h100_x1->h100_x1" in out


def test_bad_trace_file_line(tmp_path, capsys):
    f = tmp_path / "reqs.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n0.5,-3,2\n")
    p = _write(tmp_path, f"file: {f}")
    assert main(["serve", str(p), "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "reqs.csv: line 3: prompt_tokens: expected an integer >= 1" in err


def test_bad_serving_key(tmp_path, capsys):
    p = _write(tmp_path)
    assert main(["serve", str(p), "--no-write", "--set", "experiment.serving.scheduler.max_batch=0"]) == 2
    assert "serving.scheduler.max_batch: expected a positive integer" in capsys.readouterr().err


def test_unservable_run_reports_why(tmp_path, capsys):
    p = _write(
        tmp_path, "num_requests: 40, rate_per_s: 20, seed: 2, prompt: {dist: fixed, mean: 600000}"
    )  # beyond llama3-8b's 8192 positions: allowed here
    assert main(["serve", str(p), "--json", "--no-write", "--set", "scenarios.chat.beyond_max_position=allow"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs[0]["status"] == "cannot_serve" and "cannot be served" in runs[0]["error"]
