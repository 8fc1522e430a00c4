"""Chrome/Perfetto timeline (JSON trace event format) of simulated steps (``attnsim run --trace``).

One track (thread) per device role, one event per op instance (each layer of a row's ``count`` is
its own event), so overlap and stalls can be inspected in chrome://tracing or ui.perfetto.dev.
Format: the Trace Event Format's complete events (``"ph": "X"``, times in microseconds), counters
(``"ph": "C"``) and metadata (``"ph": "M"``). :func:`generation_events` lays a whole generation on
one time axis (prefill, then every decode step: drawn op by op up to a cap, else one event per
stretch of steps); every op event carries its bytes, energy, achieved bandwidth and bound in
``args``. A zero-duration row (a softmax inside the fused attention kernel, a row that a concurrent
stage hides behind a slower device: AttAcc's overlapped attention) keeps its energy in its args and
adds it to the power counter's next span of its device (or its last, at the end), so each power
counter integrates to the device's energy unless the device has no span of its own; ``memory_bytes`` of a link row is
the traffic over the whole link (all ranks). :func:`check_events` is the validity check the tests use; the serving
timeline is
attnsim/studies/timeline_serve.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _layer_order(trace) -> list[tuple[int, int]]:
    """(group, layer-within-group) in execution order, groups interleaved by their share of layers."""
    keys = []
    for g, grp in enumerate(trace.groups):
        for i in range(grp.num_layers):
            keys.append(((i + 0.5) / grp.num_layers, g, i))
    return [(g, i) for _, g, i in sorted(keys)]


DEFAULT_TRACE_STEPS = 16  # decode steps drawn op by op per run (``attnsim run --trace-steps``)
MAX_TRACE_STEPS = 4096  # at most ~1,000 op events per step of an 80-layer model: bounded files


def _row_order(trace) -> list:
    """Trace rows (or (row, layer) pairs) in execution order."""
    ops, groups = trace["op"], trace["layer_group"]
    order = [r for r in range(len(trace)) if groups[r] < 0 and ops[r] == "embedding"]
    for g, i in _layer_order(trace):
        order += [(r, i) for r in np.nonzero(groups == g)[0]]
    return order + [r for r in range(len(trace)) if groups[r] < 0 and ops[r] != "embedding"]


def _check_step(step) -> None:
    if step.row_trace is None or step.row_time_s is None or len(step.row_time_s) != len(step.row_trace):
        raise ValueError("step_events needs the StepResult of one costed step (row_trace and row_time_s)")


def _devices(step) -> set:
    from attnsim.hwmodels.stack import HOST_DEVICE, HOST_OP, REQUEST_OP

    host = any(step.time_s_by_op.get(op, 0.0) > 0 for op in (REQUEST_OP, HOST_OP))
    return set(step.row_device) | ({HOST_DEVICE} if host else set())


def _op_events(step, pid: int, tids: dict, t_us: float) -> tuple[list[dict], float]:
    """One "X" event per op instance of a costed step (host work first/last), starting at ``t_us``.

    args: FLOPs, trace bytes per TP rank (weight / activation / KV read / KV write / collective),
    ``memory_bytes`` {level: bytes per device} and ``achieved_gbps`` (= bytes / dur) from the device
    model, ``bound`` (the device model's: compute / memory / link / overhead; host rows: host),
    ``energy_j`` (dynamic, all TP ranks) and ``static_energy_j`` (the system's idle power x dur).
    Returns (events, end time in us)."""
    from attnsim.hwmodels.stack import HOST_DEVICE, HOST_OP, REQUEST_OP

    trace = step.row_trace
    count = np.maximum(trace["count"], 1)
    per_rep = step.row_time_s / count
    e_row = step.row_energy_j if step.row_energy_j is not None else np.zeros(len(trace))
    b_rows = step.row_bytes or {}
    bound = step.row_bound
    static_w = step.static_energy_j / step.time_s if step.time_s > 0 else 0.0
    ops, groups, devs = trace["op"], trace["layer_group"], step.row_device
    events, t = [], t_us

    def emit(name, dev, dur_s, args):
        nonlocal t
        args["static_energy_j"] = static_w * dur_s
        events.append(
            {"ph": "X", "name": name, "pid": pid, "tid": tids[dev], "ts": t, "dur": dur_s * 1e6, "args": args}
        )
        t += dur_s * 1e6

    def host(op):  # per-request host work before the step, per-step host work after it
        dur = step.time_s_by_op.get(op, 0.0)
        if dur > 0:
            emit(op, HOST_DEVICE, dur, {"cls": "host", "bound": "host", "energy_j": 0.0})

    host(REQUEST_OP)
    for item in _row_order(trace):
        r, layer = (item, None) if isinstance(item, (int, np.integer)) else item
        dur = float(per_rep[r])
        dev = str(devs[r])
        args = {"cls": str(trace["cls"][r]), "flops": float(trace["flops"][r])}
        for col in ("weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes", "comm_bytes"):
            if trace[col][r]:
                args[col] = float(trace[col][r])
        mem = {
            k.split(":", 1)[1]: float(v[r] / count[r]) for k, v in b_rows.items() if k.split(":", 1)[0] == dev and v[r]
        }
        if mem:
            args["memory_bytes"] = mem
            if dur > 0:
                args["achieved_gbps"] = {lvl: b / dur / 1e9 for lvl, b in mem.items()}
        if bound is not None and bound[r]:
            args["bound"] = str(bound[r])
        args["energy_j"] = float(e_row[r] / count[r])
        if step.row_mapping is not None and step.row_mapping[r] is not None:  # PIM mapping (pim_mapping.py)
            args["pim_mapping"] = dict(step.row_mapping[r])
        if layer is not None:
            args["layer_in_group"] = int(layer)
            args["group"] = trace.groups[groups[r]].name
        emit(str(ops[r]), dev, dur, args)
    host(HOST_OP)
    return events, t


def step_totals(step) -> dict:
    """``args`` of a whole step (or a span of steps): time, energy, bytes and achieved bandwidth per
    device memory level, time by bound."""
    d = {
        "time_s": step.time_s,
        "energy_j": step.energy_j,
        "dynamic_energy_j": step.dynamic_energy_j,
        "static_energy_j": step.static_energy_j,
        "bytes_by_device": dict(step.bytes_by_device),
        "time_s_by_bound": dict(step.time_s_by_bound),
    }
    if step.time_s > 0:
        d["achieved_gbps"] = {k: b / step.time_s / 1e9 for k, b in step.bytes_by_device.items()}
        d["power_w"] = step.energy_j / step.time_s
    return d


def step_events(step, system_name: str, phase: str, pid: int = 1, t0_us: float = 0.0) -> list[dict]:
    """Trace events of one StepResult in execution order, as its own process (see :func:`_op_events`).

    The rows are those of the placed trace (``step.row_trace``: the mapper's copy, with its split and
    added transfer rows), so times, devices and ops always line up.
    """
    _check_step(step)
    tids = {d: k + 1 for k, d in enumerate(sorted(_devices(step)))}
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{system_name} {phase}"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": d}} for d, t in tids.items()]
    return events + _op_events(step, pid, tids, t0_us)[0]


def drawn_steps(n_costed: int, max_steps: int) -> set:
    """Indices (into the costed decode steps) drawn op by op: at most ``max_steps``, evenly spread,
    first and last included."""
    if n_costed <= 0 or max_steps <= 0:
        return set()
    return set(np.unique(np.rint(np.linspace(0, n_costed - 1, min(max_steps, n_costed)))).astype(int).tolist())


def generation_events(
    prefill, decode: list, n_steps: int, system_name: str, pid: int = 1, max_steps: int = DEFAULT_TRACE_STEPS
) -> list[dict]:
    """The timeline of one generation (attnsim.sim.runner.simulate_generation, pp = 1), one process:

    the prefill and every decode step j = 1 .. ``n_steps`` in sequence on one time axis (total =
    TTFT + decode time). ``decode``: (j, StepResult) of every costed step in order of j. Up to
    ``max_steps`` costed steps (evenly spread) are drawn op by op on one track per device; every other
    stretch of steps is one event on the ``steps`` track named ``decode steps i..k (interpolated)``
    (sampled mode: steps between two costed ones, linearly interpolated as
    engine.decode_step_weights does), ``(costed, not drawn)`` (over the cap) or ``(costed +
    interpolated)``, its args the span's totals and per-step time. The ``steps`` track holds one event
    per step or span with :func:`step_totals`; counter tracks give, per device, the achieved
    bandwidth per memory level (GB/s) and the power (W: its dynamic energy / time + its static power);
    over a span they are the span's means."""
    from attnsim.sim.engine import StepResult

    _check_step(prefill)
    js = [int(j) for j, _ in decode]
    if js != sorted(set(js)) or (js and (js[0] != 1 or js[-1] != n_steps)):
        raise ValueError("decode steps must be the costed steps 1 .. n_steps in order")
    drawn = drawn_steps(len(decode), max_steps)
    devs = set(_devices(prefill))
    for k in drawn:
        devs |= _devices(decode[k][1])
    tids = {"steps": 1, **{d: k + 2 for k, d in enumerate(sorted(devs))}}
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": system_name}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": d}} for d, t in tids.items()]
    events += [
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": t, "args": {"sort_index": t}} for t in tids.values()
    ]
    static_w = (
        {k: v / prefill.time_s for k, v in prefill.static_energy_j_by_device.items()} if prefill.time_s > 0 else {}
    )
    counters = _Counters(pid, static_w)
    t = 0.0

    def drawn_step(step, name):
        nonlocal t
        ops, end = _op_events(step, pid, tids, t)
        events.append(
            {
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": 1,
                "ts": t,
                "dur": step.time_s * 1e6,
                "args": step_totals(step),
            }
        )
        events.extend(ops)
        for e in ops:
            dev = next(d for d, v in tids.items() if v == e["tid"])
            counters.add(dev, e["ts"], e["dur"], e["args"].get("energy_j", 0.0), e["args"].get("memory_bytes", {}))
        t += step.time_s * 1e6

    span = {"res": None, "first": None, "last": None, "costed": 0, "interp": 0}

    def add_span(step, w, j0, j1, costed):
        if span["res"] is None:
            span.update(res=StepResult(), first=j0, costed=0, interp=0)
        span["res"].scaled_add(step, w)
        span["last"] = j1
        span["costed" if costed else "interp"] += j1 - j0 + 1

    def flush():
        nonlocal t
        res = span["res"]
        if res is None:
            return
        n = span["last"] - span["first"] + 1
        kind = (
            "interpolated"
            if not span["costed"]
            else "costed, not drawn"
            if not span["interp"]
            else "costed + interpolated"
        )
        args = {
            **step_totals(res),
            "steps": n,
            "costed_steps": span["costed"],
            "interpolated_steps": span["interp"],
            "time_s_per_step": res.time_s / n,
        }
        events.append(
            {
                "ph": "X",
                "name": f"decode steps {span['first']}..{span['last']} ({kind})",
                "pid": pid,
                "tid": 1,
                "ts": t,
                "dur": res.time_s * 1e6,
                "args": args,
            }
        )
        span_devs = (
            set(res.time_s_by_device) | set(res.energy_j_by_device) | {k.split(":", 1)[0] for k in res.bytes_by_device}
        )
        for dev in sorted(span_devs):  # the span's mean per device
            if res.time_s > 0:
                mem = {k.split(":", 1)[1]: b for k, b in res.bytes_by_device.items() if k.split(":", 1)[0] == dev}
                counters.add(dev, t, res.time_s * 1e6, res.energy_j_by_device.get(dev, 0.0), mem)
        t += res.time_s * 1e6
        span["res"] = None

    drawn_step(prefill, "prefill")
    for k, (j, step) in enumerate(decode):
        if k > 0 and j - js[k - 1] > 1:  # steps between two costed ones: linear interpolation
            lo, lo_step = js[k - 1], decode[k - 1][1]
            m = j - lo - 1
            b = m * (m + 1) / 2 / (j - lo)  # sum over the interior steps of (i - lo) / (j - lo)
            add_span(lo_step, m - b, lo + 1, j - 1, False)
            span["res"].scaled_add(step, b)
        if k in drawn:
            flush()
            drawn_step(step, f"decode step {j}")
        else:
            add_span(step, 1.0, j, j, True)
    flush()
    return events + counters.events(t)


class _Counters:
    """Counter tracks ("ph": "C") per device: bandwidth (GB/s) per memory level and power (W)."""

    def __init__(self, pid: int, static_w: dict):
        self.pid, self.static_w = pid, static_w
        self.spans: dict = {}  # counter name -> [(t0 us, t1 us, value)]
        self.base: dict = {}  # counter name -> value when nothing runs
        self.pending: dict = {}  # power counter -> energy (J) of zero-duration events not yet drawn

    def add(self, dev: str, ts: float, dur: float, energy_j: float, mem: dict) -> None:
        p = f"{dev} power (W)"
        if dur <= 0:  # e.g. a softmax inside the fused attention kernel: its energy joins the device's
            self.pending[p] = self.pending.get(p, 0.0) + energy_j  # next span (the kernel's context part)
            return
        energy_j += self.pending.pop(p, 0.0)
        self.base.setdefault(p, self.static_w.get(dev, 0.0))
        self.spans.setdefault(p, []).append((ts, ts + dur, self.base[p] + energy_j / (dur * 1e-6)))
        for lvl, b in mem.items():
            name = f"{dev} {lvl} bandwidth (GB/s)"
            self.base.setdefault(name, 0.0)
            self.spans.setdefault(name, []).append((ts, ts + dur, b / (dur * 1e-6) / 1e9))

    def events(self, end_us: float) -> list[dict]:
        for p, e in self.pending.items():  # zero-duration energy after a device's last span: onto that span
            if e and self.spans.get(p):
                t0, t1, v = self.spans[p][-1]
                self.spans[p][-1] = (t0, t1, v + e / ((t1 - t0) * 1e-6))
        self.pending.clear()
        for dev, w in self.static_w.items():  # devices that only idle: their static power throughout
            self.base.setdefault(f"{dev} power (W)", w)
        out = []
        for name, base in self.base.items():
            pts = [(0.0, base)]
            for t0, t1, v in sorted(self.spans.get(name, [])):
                t0 = max(t0, pts[-1][0])  # float sums: a span may start a rounding error before the last ends
                if t0 - pts[-1][0] <= 1e-9 * max(1.0, t0):
                    pts[-1] = (pts[-1][0], v)
                else:
                    pts.append((t0, v))
                pts.append((max(t1, pts[-1][0]), base))
            if pts[-1][0] < end_us:
                pts.append((end_us, base))
            out += [{"ph": "C", "name": name, "pid": self.pid, "ts": ts, "args": {"value": v}} for ts, v in pts]
        return out


def check_events(events: list[dict]) -> None:
    """ValueError unless ``events`` is a well-formed timeline: every number finite, "X" durations >= 0,
    the "X" events of each track (pid, tid) in time order and either disjoint or nested, async
    ("b"/"e") events paired per (cat, id) with end >= begin, counters ("C") in time order per name."""
    import math

    def finite(x, where):
        if isinstance(x, dict):
            for k, v in x.items():
                finite(v, f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                finite(v, f"{where}.{i}")
        elif isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"non-finite number at {where}")

    tracks: dict = {}
    counters: dict = {}
    open_async: dict = {}
    for i, e in enumerate(events):
        finite(e, f"event {i}")
        ph = e["ph"]
        if ph == "X":
            if e["dur"] < 0:
                raise ValueError(f"event {i} ({e['name']}): negative duration {e['dur']}")
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], i))
        elif ph == "C":
            last = counters.get((e["pid"], e["name"]), -math.inf)
            if e["ts"] < last:
                raise ValueError(f"counter {e['name']} out of time order at event {i}")
            counters[(e["pid"], e["name"])] = e["ts"]
        elif ph in ("b", "e"):
            stack = open_async.setdefault((e.get("cat"), e["id"]), [])
            if ph == "b":
                stack.append(e)
            elif not stack or stack[-1]["name"] != e["name"] or e["ts"] < stack[-1]["ts"]:
                raise ValueError(f"async end {e['name']!r} (id {e['id']}) without a matching earlier begin")
            else:
                stack.pop()
    for key, stack in open_async.items():
        if stack:
            raise ValueError(f"async event {stack[-1]['name']!r} (id {key[1]}) never ends")

    def tol(t):  # float sums of event durations (us)
        return 1e-6 + 1e-9 * abs(t)

    for key, spans in tracks.items():
        starts = [s for s, _, _ in spans]
        if any(b < a - tol(a) for a, b in zip(starts, starts[1:])):
            raise ValueError(f"track {key}: events out of time order")
        open_ends: list = []
        for s, t, i in spans:
            while open_ends and open_ends[-1] <= s + tol(s):
                open_ends.pop()
            if open_ends and t > open_ends[-1] + tol(t):
                raise ValueError(f"track {key}: event {i} overlaps an earlier event without nesting in it")
            open_ends.append(t)


def write_trace(path: str | Path, events: list[dict]) -> Path:
    """Write a trace JSON atomically (mode from the umask)."""
    from attnsim.core.config import ConfigError
    from attnsim.core.fileio import atomic_path

    path = Path(path)
    try:  # strict JSON; serialised before anything is written
        text = json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}, allow_nan=False)
    except ValueError:
        raise ConfigError(
            "expected finite event times, got inf/NaN (a run overflowed: see its error in the results)", file=str(path)
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".json") as tmp, open(tmp, "w") as f:
        f.write(text)
    return path
