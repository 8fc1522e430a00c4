"""`attnsim serve --trace`: iteration tracks that span the makespan and add up to the run's tokens and
energy, per-request async slices with the run's TTFT, disaggregation's two pools and KV transfers, CLI."""

import json

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.sim.timeline import check_events

EXP = """
name: serve_timeline_test
systems: [h100_x1]
models: [llama3-8b]
scenarios:
  chat: {prompt_len: 256, output_len: 12}
serving:
  trace: {num_requests: 24, rate_per_s: 20, seed: 3, arrival: poisson}
  disaggregation:
    - {prefill: h100_x1, decode: h100_x1, link: nvlink4}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from attnsim.studies.serve.run import _systems, load_serving_experiment, serve_experiment

    p = tmp_path_factory.mktemp("st") / "exp.yaml"
    p.write_text(EXP)
    exp, serving = load_serving_experiment(str(p), [])
    events: list = []
    docs = serve_experiment(exp, serving, timeline=events)
    assert [d["status"] for d in docs] == ["ok", "ok"]
    check_events(events)
    json.dumps(events, allow_nan=False)
    static_w = _systems(exp, serving)["h100_x1"].static_power_w()
    return p, docs, events, static_w


def _procs(events):
    return {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def _x(events, pid):
    return [e for e in events if e["ph"] == "X" and e["pid"] == pid]


def test_colocated_iterations_span_makespan_and_add_up(served):
    _, docs, ev, static_w = served
    doc = docs[0]
    procs = _procs(ev)
    (pid,) = [p for p, n in procs.items() if n == "h100_x1 (llama3-8b, chat): h100_x1"]
    xs = _x(ev, pid)
    m, req = doc["metrics"], doc["_requests"]
    assert sum(e["dur"] for e in xs) * 1e-6 == pytest.approx(m["makespan_s"], rel=1e-9)
    its = [e for e in xs if e["name"] != "idle"]
    assert len(its) == doc["serving"]["iterations"]
    assert m["preemptions"] == 0 and doc["serving"]["prefix_hits"] == 0  # every prompt token prefilled once:
    assert sum(e["args"]["prefill_tokens"] for e in its) == int(np.sum(req["prompt_tokens"]))
    assert sum(e["args"]["decode_tokens"] for e in its) == int(np.sum(req["output_tokens"] - 1))  # token 1: prefill
    assert max(e["args"]["kv_blocks_used"] for e in its) == doc["serving"]["peak_kv_blocks"]
    assert max(e["args"]["batch"] for e in its) == doc["serving"]["max_batch"]
    # energy: iterations + idle (static power) + the idle before the first arrival = the run's energy
    start = float(np.min(req["arrival_s"]))
    assert sum(e["args"]["energy_j"] for e in xs) + static_w * start == pytest.approx(m["energy_j"], rel=1e-9)
    occ = [e["args"]["value"] for e in ev if e["ph"] == "C" and e["pid"] == pid and e["name"].startswith("KV occ")]
    assert 0 < max(occ) <= 1
    tps = [e for e in ev if e["ph"] == "C" and e["pid"] == pid and e["name"] == "tokens/s"]
    area = sum(a["args"]["value"] * (b["ts"] - a["ts"]) * 1e-6 for a, b in zip(tps, tps[1:]))
    assert area == pytest.approx(np.sum(req["prompt_tokens"]) + np.sum(req["output_tokens"] - 1), rel=1e-9)


def test_requests_are_async_slices_with_the_run_latencies(served):
    _, docs, ev, _ = served
    req = docs[0]["_requests"]
    (rpid,) = [p for p, n in _procs(ev).items() if n == "h100_x1 (llama3-8b, chat): requests"]
    mine = [e for e in ev if e["pid"] == rpid and e["ph"] in ("b", "e")]
    outer = {e["name"]: e for e in mine if e["ph"] == "b" and e["name"].startswith("request ")}
    assert len(outer) == len(req["arrival_s"])
    for i in range(len(req["arrival_s"])):
        b = outer[f"request {i}"]
        assert b["ts"] * 1e-6 == pytest.approx(req["arrival_s"][i], rel=1e-12)
        assert b["args"]["ttft_s"] == pytest.approx(req["ttft_s"][i], rel=1e-12)
        assert b["args"]["tpot_s"] == pytest.approx(req["tpot_s"][i], rel=1e-12)
        pre_end = next(e for e in mine if e["id"] == b["id"] and e["ph"] == "e" and e["name"] == "prefill")
        assert (pre_end["ts"] - b["ts"]) * 1e-6 == pytest.approx(req["ttft_s"][i], rel=1e-9, abs=1e-12)


def test_disaggregation_has_both_pools_and_kv_transfers(served):
    _, docs, ev, _ = served
    doc = docs[1]
    procs = {n.split(": ", 1)[1]: p for p, n in _procs(ev).items() if n.startswith("h100_x1->h100_x1")}
    assert set(procs) == {"h100_x1 prefill pool", "h100_x1 decode pool", "requests"}
    dec = _x(ev, procs["h100_x1 decode pool"])
    assert sum(e["dur"] for e in dec) * 1e-6 == pytest.approx(doc["metrics"]["makespan_s"], rel=1e-9)
    pre = [e for e in _x(ev, procs["h100_x1 prefill pool"]) if e["name"] != "idle"]
    assert sum(e["args"]["decode_tokens"] for e in pre) == 0  # the prefill pool only prefills
    kv = [e for e in ev if e["pid"] == procs["requests"] and e.get("name") == "kv transfer"]
    n = len(doc["_requests"]["arrival_s"])
    assert len(kv) == 2 * n  # begin + end per request (every output is longer than one token)
    spans = [(b["ts"], e["ts"]) for b, e in zip(kv[::2], kv[1::2])]
    assert all(e >= b for b, e in spans)
    mean = np.mean([(e - b) * 1e-6 for b, e in spans])
    assert mean == pytest.approx(doc["metrics"]["kv_transfer_s_mean"], rel=1e-9)
    flight = [
        e["args"]["value"] for e in ev if e["pid"] == procs["requests"] and e.get("name") == "KV transfers in flight"
    ]
    assert flight[-1] == 0 and min(flight) >= 0 and max(flight) >= 1


def test_cli_trace_requests_and_errors(served, tmp_path, capsys):
    p = served[0]
    tr = tmp_path / "t.json"
    assert main(["serve", str(p), "--no-write", "--trace", str(tr), "--trace-requests", "5"]) == 0
    ev = json.loads(tr.read_text())["traceEvents"]
    check_events(ev)
    outer = [e for e in ev if e["ph"] == "b" and e["name"].startswith("request ")]
    assert len(outer) == 2 * 5  # two runs, the first 5 requests of each
    capsys.readouterr()
    for extra, msg in (
        (["--trace-requests", "5"], "error: --trace-requests: only applies with --trace"),
        (
            ["--trace", str(tmp_path / "u.json"), "--trace-requests", "-2"],
            "error: --trace-requests: expected an integer in [0, 1048576], got -2",
        ),
        (["--trace", str(tmp_path)], f"error: {tmp_path}: --trace: expected a file path, got a directory"),
        (
            ["--trace", str(tmp_path / "u.json"), "--slo-vs-load", "1,2"],
            "error: --slo-vs-load: --slo-vs-load draws one figure and writes no results; drop --trace",
        ),
    ):
        assert main(["serve", str(p), "--no-write", *extra]) == 2
        assert capsys.readouterr().err.strip() == msg
        assert not (tmp_path / "u.json").exists()
