"""Chrome/Perfetto timeline (JSON trace event format) of one simulated step.

One track (thread) per device role, one event per op instance (each layer of a
row's ``count`` is its own event), so overlap and stalls can be inspected in
chrome://tracing or ui.perfetto.dev. Format: the Trace Event Format's complete
events (``"ph": "X"``, times in microseconds).
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


def step_events(step, system_name: str, phase: str, pid: int = 1, t0_us: float = 0.0) -> list[dict]:
    """Trace events of one StepResult in execution order.

    The rows are those of the placed trace (``step.row_trace``: the mapper's copy, with its split and
    added transfer rows), so times, devices and ops always line up.
    """
    trace = step.row_trace
    if trace is None or step.row_time_s is None or len(step.row_time_s) != len(trace):
        raise ValueError("step_events needs the StepResult of one costed step (row_trace and row_time_s)")
    per_rep = step.row_time_s / np.maximum(trace["count"], 1)
    ops, groups, devs = trace["op"], trace["layer_group"], step.row_device
    pre = [r for r in range(len(trace)) if groups[r] < 0 and ops[r] == "embedding"]
    post = [r for r in range(len(trace)) if groups[r] < 0 and ops[r] != "embedding"]
    order = list(pre)
    for g, i in _layer_order(trace):
        order += [(r, i) for r in np.nonzero(groups == g)[0]]
    order += post
    from attnsim.stack import HOST_DEVICE, HOST_OP, REQUEST_OP
    host = {op: step.time_s_by_op.get(op, 0.0) for op in (REQUEST_OP, HOST_OP)}  # the software stack's time
    tids = {d: k + 1 for k, d in enumerate(sorted(set(devs) | ({HOST_DEVICE} if any(host.values()) else set())))}
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{system_name} {phase}"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": d}} for d, t in tids.items()]
    t = t0_us

    def host_event(op):  # per-request host work before the step, per-step host work after it
        nonlocal t
        if host[op] > 0:
            events.append({"ph": "X", "name": op, "pid": pid, "tid": tids[HOST_DEVICE], "ts": t,
                           "dur": host[op] * 1e6, "args": {"cls": "host"}})
            t += host[op] * 1e6

    host_event(REQUEST_OP)
    for item in order:
        r, layer = (item, None) if isinstance(item, (int, np.integer)) else item
        dur = float(per_rep[r]) * 1e6
        args = {"cls": str(trace["cls"][r]), "flops": float(trace["flops"][r])}
        if step.row_mapping is not None and step.row_mapping[r] is not None:  # PIM mapping (pim_mapping.py)
            args["pim_mapping"] = dict(step.row_mapping[r])
        if layer is not None:
            args["layer_in_group"] = int(layer)
            args["group"] = trace.groups[groups[r]].name
        events.append({"ph": "X", "name": str(ops[r]), "pid": pid, "tid": tids[devs[r]], "ts": t, "dur": dur, "args": args})
        t += dur
    host_event(HOST_OP)
    return events


def write_trace(path: str | Path, events: list[dict]) -> Path:
    """Write a trace JSON atomically (mode from the umask)."""
    from attnsim.fileio import atomic_path
    from attnsim.config import ConfigError
    path = Path(path)
    try:  # strict JSON; serialised before anything is written
        text = json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}, allow_nan=False)
    except ValueError:
        raise ConfigError("expected finite event times, got inf/NaN (a run overflowed: see its error in the "
                          "results)", file=str(path)) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".json") as tmp, open(tmp, "w") as f:
        f.write(text)
    return path
