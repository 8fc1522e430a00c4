"""Chrome/Perfetto timeline (JSON trace event format) of a serving run (``attnsim serve --trace``).

Per run: one process per pool instance (a colocated system's data-parallel replicas; a disaggregated
pair's prefill and decode pools) with an ``iterations`` track (one "X" event per scheduler
iteration, args: batch size, prefill / decode tokens, KV blocks used, requests running / waiting,
energy; "idle" events fill the gaps from the run's first arrival, so the last pool's track spans the
makespan) and counters (running requests, waiting requests, KV occupancy, tokens/s); and one
``requests`` process with a nestable async ("b"/"e") slice per request (``queued`` -> ``prefill``
-> [``kv transfer`` -> ``decode queued``] -> ``decode``, TTFT / TPOT / latency in its args).

Recording: :func:`recording` puts a recorder in scope; ``scheduler.simulate_pool`` then logs each
iteration and hands its result to it (no cost when nothing records).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

DEFAULT_TRACE_REQUESTS = 1000  # requests drawn per run (the first by arrival): ``--trace-requests``
MAX_TRACE_REQUESTS = 1 << 20  # workloads.limits.MAX_REQUESTS
MAX_ITERATION_EVENTS = 20000  # per pool; above it consecutive iterations are merged into one event

#: one scheduler iteration: (start s, duration s, decodes, prefill chunks, prefill tokens, decode tokens,
#: KV blocks used, requests running, requests waiting, energy J)
LOG_FIELDS = (
    "start_s",
    "dur_s",
    "decodes",
    "prefills",
    "prefill_tokens",
    "decode_tokens",
    "kv_blocks_used",
    "running",
    "waiting",
    "energy_j",
)

_RECORDER: ContextVar = ContextVar("attnsim_serve_recorder", default=None)


@contextmanager
def recording():
    """Collect what every ``simulate_pool`` call in this context served: a list of dicts (pool name,
    mode, request labels, entry times, iteration log, PoolResult, KV blocks)."""
    rec: list = []
    token = _RECORDER.set(rec)
    try:
        yield rec
    finally:
        _RECORDER.reset(token)


def active_recorder():
    """The recorder in scope (a list) or None."""
    return _RECORDER.get()


def _meta(pid: int, name: str, tracks: dict) -> list[dict]:
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}]
    return ev + [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": n}} for n, t in tracks.items()
    ]


def _merged(log: np.ndarray, cap: int) -> list[tuple[int, int]]:
    """(first, last) iteration index of each event: single iterations, or runs of ceil(n / cap)."""
    n = len(log)
    k = max(1, -(-n // cap))
    return [(i, min(n, i + k) - 1) for i in range(0, n, k)]


def pool_events(entry: dict, pid: int, name: str, start_s: float) -> list[dict]:
    """The process of one pool instance: its iterations (and idle gaps from ``start_s``) and counters."""
    log = np.asarray(entry["log"], dtype=np.float64).reshape(-1, len(LOG_FIELDS))
    blocks = max(1, int(entry["kv_blocks"]))
    static_w = float(entry["static_w"])  # idle: static power only (the scheduler's idle energy)
    ev = _meta(pid, name, {"iterations": 1})
    counters: dict = {"running requests": [], "waiting requests": [], "KV occupancy (fraction)": [], "tokens/s": []}
    t = start_s
    for a, b in _merged(log, MAX_ITERATION_EVENTS):
        rows = log[a : b + 1]
        t0, t1 = rows[0, 0], rows[-1, 0] + rows[-1, 1]
        if t0 > t:
            ev.append(
                {
                    "ph": "X",
                    "name": "idle",
                    "pid": pid,
                    "tid": 1,
                    "ts": t * 1e6,
                    "dur": (t0 - t) * 1e6,
                    "args": {"cls": "idle", "energy_j": static_w * (t0 - t)},
                }
            )
            for c in counters.values():
                c.append((t, 0.0))
        dur = float(rows[:, 1].sum())  # busy time (merged iterations: idle between them is inside)
        tok = float(rows[:, 4].sum() + rows[:, 5].sum())
        args = {
            "iterations": int(b - a + 1),
            "batch": int(rows[-1, 2] + rows[-1, 3]),
            "decodes": int(rows[:, 2].sum()),
            "prefill_chunks": int(rows[:, 3].sum()),
            "prefill_tokens": int(rows[:, 4].sum()),
            "decode_tokens": int(rows[:, 5].sum()),
            "kv_blocks_used": int(rows[-1, 6]),
            "kv_blocks": blocks,
            "running": int(rows[-1, 7]),
            "waiting": int(rows[-1, 8]),
            "busy_s": dur,
            "energy_j": float(rows[:, 9].sum()) + static_w * (t1 - t0 - dur),
        }  # + idle inside a merged event
        label = f"iteration {a}" if a == b else f"iterations {a}..{b}"
        ev.append(
            {"ph": "X", "name": label, "pid": pid, "tid": 1, "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "args": args}
        )
        counters["running requests"].append((t0, float(rows[:, 7].mean())))
        counters["waiting requests"].append((t0, float(rows[:, 8].mean())))
        counters["KV occupancy (fraction)"].append((t0, float(rows[:, 6].mean()) / blocks))
        counters["tokens/s"].append((t0, tok / (t1 - t0) if t1 > t0 else 0.0))
        t = t1
    for cname, pts in counters.items():
        pts.append((t, 0.0))
        ev += [{"ph": "C", "name": cname, "pid": pid, "ts": ts * 1e6, "args": {"value": v}} for ts, v in pts]
    return ev


def _request_slices(i: int, phases: list, args: dict, pid: int, uid: int) -> list[dict]:
    """Nestable async slices of one request: the whole request and its phases (name, start s, end s)."""
    common = {"cat": "request", "id": uid, "pid": pid, "tid": 1}
    t0, t1 = phases[0][1], phases[-1][2]
    ev = [{**common, "ph": "b", "name": f"request {i}", "ts": t0 * 1e6, "args": args}]
    for name, a, b in phases:
        if b >= a:
            ev += [
                {**common, "ph": "b", "name": name, "ts": a * 1e6},
                {**common, "ph": "e", "name": name, "ts": b * 1e6},
            ]
    return ev + [{**common, "ph": "e", "name": f"request {i}", "ts": t1 * 1e6}]


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def serve_events(doc: dict, rec: list, pid: int, max_requests: int = DEFAULT_TRACE_REQUESTS) -> list[dict]:
    """Timeline of one serving run document (status ok) from what :func:`recording` collected."""
    req = doc["_requests"]
    arrival = np.asarray(req["arrival_s"], dtype=np.float64)
    start = float(arrival.min()) if len(arrival) else 0.0
    label = f"{doc['system']} ({doc['model']}, {doc['scenario']['name']})"
    events: list = []
    last = {}  # a pool served again (e.g. fixed-point passes over a shared KV pool): its last pass counts
    for entry in rec:
        labels = entry["labels"]
        last.pop(key := (entry["mode"], entry["pool"], int(labels[0]) if len(labels) else -1, len(labels)), None)
        last[key] = entry
    rec = list(last.values())
    colocated = [e for e in rec if e["mode"] == "colocated"]
    for k, entry in enumerate(rec):
        what = (
            f"replica {k}"
            if entry["mode"] == "colocated" and len(colocated) > 1
            else f"{entry['mode']} pool"
            if entry["mode"] != "colocated"
            else ""
        )
        events += pool_events(entry, pid + k, f"{label}: {entry['pool']}" + (f" {what}" if what else ""), start)
    rpid = pid + len(rec)
    events += _meta(rpid, f"{label}: requests", {"requests": 1})
    first_token = arrival + np.asarray(req["ttft_s"])
    finish = arrival + np.asarray(req["latency_s"])
    admit = arrival + np.asarray(req["queue_s"])
    decode_in = {}  # disaggregation: request -> (KV arrival, decode admission)
    for entry in rec:
        if entry["mode"] == "decode":
            for j, lab in enumerate(entry["labels"]):
                decode_in[int(lab)] = (float(entry["arrival_s"][j]), float(entry["result"].admit_s[j]))
    if decode_in:  # disaggregation: KV transfers in flight over time
        edges = sorted([(first_token[i], 1) for i in decode_in] + [(kv, -1) for kv, _ in decode_in.values()])
        pts, n = [(start, 0)], 0
        for ts, d in edges:
            n += d
            pts.append((ts, n))
        events += [
            {"ph": "C", "name": "KV transfers in flight", "pid": rpid, "ts": ts * 1e6, "args": {"value": v}}
            for ts, v in pts
        ]
    for i in np.argsort(arrival, kind="stable")[:max_requests]:
        i = int(i)
        args = {
            "prompt_tokens": int(req["prompt_tokens"][i]),
            "output_tokens": int(req["output_tokens"][i]),
            "ttft_s": _finite(req["ttft_s"][i]),
            "tpot_s": _finite(req["tpot_s"][i]),
            "latency_s": _finite(req["latency_s"][i]),
            "queue_s": _finite(req["queue_s"][i]),
            "energy_j": _finite(req["energy_j"][i]),
            "preemptions": int(req["preemptions"][i]),
        }
        phases = [("queued", arrival[i], admit[i]), ("prefill", admit[i], first_token[i])]
        if i in decode_in:
            kv_at, dec_admit = decode_in[i]
            phases += [
                ("kv transfer", first_token[i], kv_at),
                ("decode queued", kv_at, dec_admit),
                ("decode", dec_admit, finish[i]),
            ]
        elif finish[i] > first_token[i]:
            phases.append(("decode", first_token[i], finish[i]))
        events += _request_slices(i, phases, args, rpid, uid=rpid * MAX_TRACE_REQUESTS + i)
    return events
