"""Engine: cost a placed step on device timelines, and step a whole generation.

Timeline model: on each tensor-parallel rank the ops of a step run in trace
order, one after another (a row's time is a per-repeat time x ``count``); ranks run
in lock-step, so the step time is one rank's sum. Policies with overlap (e.g.
attention/FC pipelining) report it through their device models' costs.

Definitions used in every report (see README "Metrics"):
- TTFT: time from the start of a static batch to its first output token = the
  prefill step (all prompts of the batch, LM head included).
- TPOT: mean time between later output tokens = total decode time / (output_len - 1);
  decode step j (j = 1 .. output_len-1) attends to prompt_len + j tokens.
- tokens/s: generated tokens (batch x output_len x replicas) / (TTFT + decode time).
- J/token: all energy (dynamic + static of every device in the system) / generated tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnsim.hwmodels.base import ENERGY_COMPONENTS


@dataclass
class StepResult:
    """Totals of one step (or a weighted sum of steps); every field is additive."""

    time_s: float = 0.0
    flops: float = 0.0
    static_energy_j: float = 0.0
    energy_j_by_component: dict = field(default_factory=dict)
    time_s_by_op: dict = field(default_factory=dict)
    time_s_by_device: dict = field(default_factory=dict)
    energy_j_by_op: dict = field(default_factory=dict)
    energy_j_by_device: dict = field(default_factory=dict)
    bytes_by_device: dict = field(default_factory=dict)  # bytes moved per ONE device of the role (main memory)
    row_time_s: np.ndarray | None = None  # per trace row (x count), one step only (for timelines)
    row_device: np.ndarray | None = None

    @property
    def dynamic_energy_j(self) -> float:
        return float(sum(self.energy_j_by_component.values()))

    @property
    def energy_j(self) -> float:
        return self.dynamic_energy_j + self.static_energy_j

    def scaled_add(self, other: "StepResult", w: float) -> None:
        """self += w * other (for weighted sums of steps)."""
        self.time_s += w * other.time_s
        self.flops += w * other.flops
        self.static_energy_j += w * other.static_energy_j
        for name in ("energy_j_by_component", "time_s_by_op", "time_s_by_device", "energy_j_by_op",
                     "energy_j_by_device", "bytes_by_device"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + w * v

    def scaled(self, w: float) -> "StepResult":
        out = StepResult()
        out.scaled_add(self, w)
        return out

    def breakdown(self) -> dict:
        comp = {k: self.energy_j_by_component.get(k, 0.0) for k in ENERGY_COMPONENTS}
        comp["static"] = comp.get("static", 0.0) + self.static_energy_j
        energy_by_device = dict(self.energy_j_by_device)
        return {
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "time_s_by_op": dict(self.time_s_by_op),
            "time_s_by_device": dict(self.time_s_by_device),
            "energy_j_by_op": dict(self.energy_j_by_op),
            "energy_j_by_device": energy_by_device,
            "energy_j_by_component": comp,
        }


def _add(d: dict, keys, values) -> None:
    for k, v in zip(keys, values):
        d[k] = d.get(k, 0.0) + float(v)


def cost_step(plan, system) -> StepResult:
    """Time and energy of one placed step (all TP ranks; one replica)."""
    trace = plan.trace
    count = trace["count"].astype(np.float64)
    ops = trace["op"]
    res = StepResult()
    row_time = np.zeros(len(trace))
    row_energy = np.zeros(len(trace))
    for role in np.unique(plan.device):
        rows = np.nonzero(plan.device == role)[0]
        if role == "link":
            model = _collective_link(system, plan)
            if model is None:
                continue
            devices_per_row = np.ones(len(rows))  # a link's energy is counted once per transfer
            ndev = 1
        else:
            model = system.pools[role].model
            devices_per_row = plan.parallel[rows].astype(np.float64)
            ndev = None
        c = model.cost(trace, rows)
        t = np.asarray(c.time_s, dtype=np.float64) * count[rows]
        row_time[rows] = t
        e_rows = np.zeros(len(rows))
        for comp, e in c.energy_j.items():
            ej = np.asarray(e, dtype=np.float64) * count[rows] * devices_per_row
            res.energy_j_by_component[comp] = res.energy_j_by_component.get(comp, 0.0) + float(ej.sum())
            e_rows += ej
        row_energy[rows] = e_rows
        res.time_s_by_device[role] = res.time_s_by_device.get(role, 0.0) + float(t.sum())
        res.energy_j_by_device[role] = res.energy_j_by_device.get(role, 0.0) + float(e_rows.sum())
        if c.flops is not None:
            res.flops += float(np.sum(np.asarray(c.flops) * count[rows] * devices_per_row))
        for level, b in c.bytes_by_level.items():
            key = f"{role}:{level}"
            res.bytes_by_device[key] = res.bytes_by_device.get(key, 0.0) + float(np.sum(np.asarray(b) * count[rows]))
        del ndev
    res.time_s = float(row_time.sum())
    res.row_time_s = row_time
    res.row_device = plan.device
    _add(res.time_s_by_op, ops, row_time)
    _add(res.energy_j_by_op, ops, row_energy)
    res.static_energy_j = system.static_power_w() / max(1, system.spec.parallelism.replicas) * res.time_s
    return res


def _collective_link(system, plan):
    """The link that carries the compute pool's collectives."""
    roles = [r for r in np.unique(plan.device) if r != "link"]
    role = roles[0] if roles else next(iter(system.pools))
    return system.link_between(role, role)


def decode_step_weights(output_len: int, mode: str, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode steps to simulate and the weight of each, so that sum(w * f(step)) ~ sum_j f(j).

    exact: every step j = 1 .. output_len-1, weight 1. sampled: ``samples`` steps spread
    evenly; every integer step is linearly interpolated between its two neighbours
    (exact when f is linear in j, as memory-bound decode is in the context length).
    """
    n = output_len - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if mode == "exact" or samples >= n:
        return np.arange(1, n + 1, dtype=np.int64), np.ones(n)
    pts = np.unique(np.rint(np.linspace(1, n, samples)).astype(np.int64))
    w = np.zeros(len(pts))
    for j in range(1, n + 1):
        k = np.searchsorted(pts, j)
        if k < len(pts) and pts[k] == j:
            w[k] += 1.0
            continue
        lo, hi = pts[k - 1], pts[k]
        frac = (j - lo) / (hi - lo)
        w[k - 1] += 1.0 - frac
        w[k] += frac
    return pts, w
