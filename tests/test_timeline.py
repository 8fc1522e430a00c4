"""`attnsim run --trace`: every decode step on one time axis; per-event bytes, energy, bandwidth and bound
that add up to the run document's numbers; counters; the file's validity; --trace-steps."""

import json
import re

import pytest

from attnsim.cli import main
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.sim.timeline import check_events, drawn_steps

BASE = [
    "experiment.systems=[h100_x1]",
    "experiment.models=[llama2-7b]",
    "experiment.baseline=null",
    "models.llama2-7b.num_layers=2",
]


def _run(output_len, mode="sampled", samples=9, trace_steps=None, system="h100_x1"):
    sets = BASE + [
        f"experiment.systems=[{system}]",
        f"experiment.scenarios={{s: {{batch_size: 4, prompt_len: 512, output_len: {output_len}}}}}",
        f"experiment.generation={{mode: {mode}" + (f", samples: {samples}}}" if mode == "sampled" else "}"),
    ]
    events: list = []
    doc = run_experiment(load_experiment(None, sets), timeline=events, trace_steps=trace_steps)[0]
    assert doc["status"] == "ok", doc.get("error")
    check_events(events)
    json.dumps(events, allow_nan=False)
    return doc, events


def _covered(step_events):
    """Decode steps named by the steps track's events, in order."""
    out = []
    for e in step_events[1:]:
        m = re.fullmatch(r"decode step (\d+)|decode steps (\d+)\.\.(\d+) \((.*)\)", e["name"])
        assert m, e["name"]
        out += [int(m[1])] if m[1] else list(range(int(m[2]), int(m[3]) + 1))
    return out


def test_sampled_run_every_step_on_one_time_axis_and_sums():
    doc, ev = _run(40, samples=9, trace_steps=3)
    m, bd = doc["metrics"], doc["breakdown"]
    n = 39
    steps = [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
    assert steps[0]["name"] == "prefill" and steps[0]["dur"] * 1e-6 == pytest.approx(m["ttft_s"], rel=1e-12)
    assert _covered(steps) == list(range(1, n + 1))  # every decode step once, in order
    assert sum(e["dur"] for e in steps) * 1e-6 == pytest.approx(m["total_time_s"], rel=1e-12)
    assert max(e["ts"] + e["dur"] for e in ev if e["ph"] == "X") * 1e-6 == pytest.approx(m["total_time_s"], rel=1e-9)
    kinds = {re.search(r"\((.*)\)", e["name"])[1] for e in steps if "steps" in e["name"]}
    assert kinds == {"costed + interpolated"}  # 9 costed steps, 3 drawn: the rest in two spans
    assert sum(e["args"]["costed_steps"] for e in steps if "steps" in e["name"]) == 9 - 3
    # energy: op events (dynamic + static share) and spans add up to the document's step energies
    ops = [e for e in ev if e["ph"] == "X" and e["tid"] != 1]
    t_pre = steps[0]["dur"]
    pre = [e for e in ops if e["ts"] < t_pre - 1e-9]
    assert sum(e["args"]["energy_j"] + e["args"]["static_energy_j"] for e in pre) == pytest.approx(
        bd["prefill"]["energy_j"], rel=1e-9
    )
    dec_ops = [e for e in ops if e["ts"] >= t_pre - 1e-9]
    spans = [e for e in steps if "steps" in e["name"]]
    e_dec = sum(e["args"]["energy_j"] + e["args"]["static_energy_j"] for e in dec_ops) + sum(
        e["args"]["energy_j"] for e in spans
    )
    assert e_dec == pytest.approx(bd["decode_step"]["energy_j"] * n, rel=1e-9)
    # bytes: the mean decode step's achieved bandwidth x TPOT x steps
    b_dec = sum(e["args"].get("memory_bytes", {}).get("hbm", 0.0) for e in dec_ops) + sum(
        e["args"]["bytes_by_device"]["gpu:hbm"] for e in spans
    )
    bw = m["bandwidth"]["gpu:hbm"]
    assert b_dec == pytest.approx(bw["achieved_gbps"] * 1e9 * m["tpot_s"] * n, rel=1e-9)
    # every op event: a bound, and an achieved bandwidth within the device's peak (physical limit)
    gpu = [e for e in ops if e["args"]["cls"] != "host"]
    assert all(e["args"]["bound"] in ("compute", "memory", "overhead") for e in gpu)
    assert {"compute", "memory"} <= {e["args"]["bound"] for e in gpu}  # the prefill's GEMMs, decode's reads
    rates = [e["args"]["achieved_gbps"]["hbm"] for e in gpu if "achieved_gbps" in e["args"]]
    assert rates and max(rates) <= bw["peak_gbps"] * (1 + 1e-9)

    # counters: the power tracks integrate to the run's energy, the bandwidth track to its bytes
    def integral(name):
        c = sorted((e["ts"], e["args"]["value"]) for e in ev if e["ph"] == "C" and e["name"] == name)
        return sum((b[0] - a[0]) * 1e-6 * a[1] for a, b in zip(c, c[1:]))

    power = {e["name"] for e in ev if e["ph"] == "C" and e["name"].endswith("power (W)")}
    assert "gpu power (W)" in power
    assert sum(integral(p) for p in power) == pytest.approx(bd["prefill"]["energy_j"] + e_dec, rel=1e-9)
    assert integral("gpu hbm bandwidth (GB/s)") * 1e9 == pytest.approx(
        b_dec + sum(e["args"].get("memory_bytes", {}).get("hbm", 0.0) for e in pre), rel=1e-9
    )


def test_interpolated_spans_follow_the_sampled_steps():
    """trace_steps >= samples: every costed step drawn, each gap one '(interpolated)' event whose time is the
    linear interpolation of its two neighbours (hand sum: steps lo+1..hi-1 at (1-f) T_lo + f T_hi)."""
    doc, ev = _run(20, samples=4)
    steps = [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
    drawn = {int(e["name"].split()[-1]): e["dur"] for e in steps if e["name"].startswith("decode step ")}
    assert sorted(drawn) == [1, 7, 13, 19]  # engine.decode_step_weights: linspace(1, 19, 4)
    for e in steps:
        if "interpolated" in e["name"]:
            lo, hi = (int(x) for x in re.search(r"(\d+)\.\.(\d+)", e["name"]).groups())
            lo, hi = lo - 1, hi + 1
            want = sum(
                (1 - (j - lo) / (hi - lo)) * drawn[lo] + (j - lo) / (hi - lo) * drawn[hi] for j in range(lo + 1, hi)
            )
            assert e["dur"] == pytest.approx(want, rel=1e-9) and e["args"]["interpolated_steps"] == hi - lo - 1


def test_exact_mode_cap_draws_first_and_last_step():
    doc, ev = _run(12, mode="exact", trace_steps=2)
    names = [e["name"] for e in ev if e["ph"] == "X" and e["tid"] == 1]
    assert names == ["prefill", "decode step 1", "decode steps 2..10 (costed, not drawn)", "decode step 11"]
    assert sum(1 for e in ev if e["ph"] == "X" and e["name"] == "qkv_proj") == 2 * 3  # 2 layers x 3 drawn steps
    assert drawn_steps(100, 5) == {0, 25, 50, 74, 99} and drawn_steps(3, 16) == {0, 1, 2} and drawn_steps(5, 0) == set()


def test_check_events_catches_broken_timelines():
    ok = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2.0, "dur": 3.0},
    ]  # nested
    check_events(ok)
    for bad, msg in (
        (ok + [{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 8.0, "dur": 5.0}], "overlaps"),
        ([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0.0, "dur": -1.0}], "negative"),
        ([{"ph": "C", "name": "w", "pid": 1, "ts": 0.0, "args": {"value": float("nan")}}], "non-finite"),
        ([{"ph": "b", "name": "r", "cat": "q", "id": 1, "ts": 0.0}], "never ends"),
    ):
        with pytest.raises(ValueError, match=msg):
            check_events(bad)


def test_cli_trace_steps(tmp_path, capsys):
    tr = tmp_path / "t.json"
    args = [
        "run",
        "--no-write",
        "--no-figures",
        *sum((["--set", s] for s in BASE), []),
        "--set",
        "experiment.scenarios={s: {batch_size: 1, prompt_len: 64, output_len: 6}}",
        "--set",
        "experiment.generation={mode: exact}",
    ]
    assert main(args + ["--trace", str(tr), "--trace-steps", "1"]) == 0
    ev = json.loads(tr.read_text())["traceEvents"]
    check_events(ev)
    assert [e["name"] for e in ev if e["ph"] == "X" and e["tid"] == 1] == [
        "prefill",
        "decode step 1",
        "decode steps 2..5 (costed, not drawn)",
    ]
    capsys.readouterr()
    for extra, msg in (
        (["--trace-steps", "3"], "error: --trace-steps: only applies with --trace"),
        (
            ["--trace", str(tmp_path / "u.json"), "--trace-steps", "-1"],
            "error: --trace-steps: expected an integer in [0, 4096], got -1",
        ),
    ):
        assert main(args + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err == msg and not (tmp_path / "u.json").exists()
