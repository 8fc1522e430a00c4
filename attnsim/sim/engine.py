"""Engine: cost a placed step on device timelines, and step a whole generation.

Timeline model: on each tensor-parallel rank the ops of a step run in trace
order, one after another (a row's time is a per-repeat time x ``count``); ranks run
in lock-step, so the step time is one rank's sum. Policies with overlap (e.g.
attention/FC pipelining) report it through their device models' costs.

Definitions used in every report (see docs/reference/metrics.md):
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

from attnsim.hwmodels.base import ENERGY_COMPONENTS, set_static


@dataclass
class StepResult:
    """Totals of one step (or a weighted sum of steps); every field is additive."""

    time_s: float = 0.0
    time_s_layers: float = 0.0  # time of the decoder-layer rows (layer_group >= 0): no embedding / final norm / LM head
    # the same layers run once through, a two-sub-batch pipeline's fill and drain included (engine.layers_run_s);
    # = time_s_layers for a step that is not pipelined
    time_s_layers_run: float = 0.0
    flops: float = 0.0
    static_energy_j: float = 0.0
    static_energy_j_by_device: dict = field(default_factory=dict)  # role / link:<name> -> J (sums to static_energy_j)
    static_energy_j_by_part: dict = field(default_factory=dict)  # "<device>.<component>" -> J (same total)
    energy_j_by_component: dict = field(default_factory=dict)
    time_s_by_op: dict = field(default_factory=dict)
    time_s_by_device: dict = field(default_factory=dict)
    time_s_by_bound: dict = field(default_factory=dict)  # the device models' bound per row (compute/memory/...)
    energy_j_by_op: dict = field(default_factory=dict)
    energy_j_by_device: dict = field(default_factory=dict)
    bytes_by_device: dict = field(default_factory=dict)  # bytes moved per ONE device of the role (main memory)
    row_time_s: np.ndarray | None = None  # per trace row (x count), one step only (for timelines)
    row_device: np.ndarray | None = None
    row_trace: object = None  # the OpTrace those rows index (the plan's: mapper-added rows included)
    row_mapping: np.ndarray | None = None  # PIM mapping per row (dict or None), one step only (timelines)
    row_energy_j: np.ndarray | None = None  # dynamic energy per row (x count, all TP ranks), one step only
    row_bytes: dict | None = None  # "<role>:<level>" -> bytes per row (x count, one device), one step only
    row_bound: np.ndarray | None = None  # the device model's bound per row ("" if none), one step only
    pim_mapping: dict = field(default_factory=dict)  # op -> PIM mapping (hwmodels/pim_mapping.summarize)

    @property
    def dynamic_energy_j(self) -> float:
        return float(sum(self.energy_j_by_component.values()))

    @property
    def energy_j(self) -> float:
        return self.dynamic_energy_j + self.static_energy_j

    def scaled_add(self, other: "StepResult", w: float) -> None:
        """self += w * other (for weighted sums of steps)."""
        self.time_s += w * other.time_s
        self.time_s_layers += w * other.time_s_layers
        self.time_s_layers_run += w * other.time_s_layers_run
        self.flops += w * other.flops
        self.static_energy_j += w * other.static_energy_j
        for name in (
            "energy_j_by_component",
            "time_s_by_op",
            "time_s_by_device",
            "time_s_by_bound",
            "energy_j_by_op",
            "energy_j_by_device",
            "bytes_by_device",
            "static_energy_j_by_device",
            "static_energy_j_by_part",
        ):
            mine, theirs = getattr(self, name), getattr(other, name)
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + w * v
        from attnsim.hwmodels.pim_mapping import combine

        for op, m in other.pim_mapping.items():
            self.pim_mapping[op] = (
                combine(self.pim_mapping[op], m, w)
                if op in self.pim_mapping
                else dict(m, merge_s=float(w * m["merge_s"]))
            )

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
            "time_s_layers": self.time_s_layers,
            "time_s_layers_run": self.time_s_layers_run,
            "energy_j": self.energy_j,
            "time_s_by_op": dict(self.time_s_by_op),
            "time_s_by_device": dict(self.time_s_by_device),
            "time_s_by_bound": dict(self.time_s_by_bound),
            "energy_j_by_op": dict(self.energy_j_by_op),
            "energy_j_by_device": energy_by_device,
            "energy_j_by_component": comp,
            "static_energy_j_by_device": dict(self.static_energy_j_by_device),
            "static_energy_j_by_part": dict(self.static_energy_j_by_part),
            **({"pim_mapping": {op: dict(m) for op, m in self.pim_mapping.items()}} if self.pim_mapping else {}),
        }


def _add(d: dict, keys, values) -> None:
    for k, v in zip(keys, values):
        d[k] = d.get(k, 0.0) + float(v)


def _device_model(system, plan, role: str):
    """The model that costs rows placed on ``role``: a pool, a named link or the collective link."""
    if role == "link":
        return _collective_link(system, plan)
    if role.startswith("link:"):
        return system.links[role.split(":", 1)[1]]
    return system.pools[role].model


def cost_rows(plan, system):
    """Per-row time (x count) and per-row dynamic energy by component (x count x parallel devices).

    Returns (row_time_s, {component: row energy}, {device:level: row bytes per device}, row_flops).
    """
    trace = plan.trace
    n = len(trace)
    count = trace["count"].astype(np.float64)
    row_time = np.zeros(n)
    row_energy: dict[str, np.ndarray] = {}
    row_bytes: dict[str, np.ndarray] = {}
    row_flops = np.zeros(n)
    for role in np.unique(plan.device):
        rows = np.nonzero(plan.device == role)[0]
        model = _device_model(system, plan, str(role))
        if model is None:  # no collective link (tp = 1): collectives are free
            continue
        is_link = str(role).startswith("link")
        devices_per_row = np.ones(len(rows)) if is_link else plan.parallel[rows].astype(np.float64)
        # uneven TP: the tp copies of a row do sum-over-ranks work, not tp x the largest shard's
        f_share = trace.cols["flops_share"][rows] if "flops_share" in trace.cols else 1.0
        b_share = trace.cols["bytes_share"][rows] if "bytes_share" in trace.cols else 1.0
        c = model.cost(trace, rows)
        if getattr(c, "mapping", None) is not None:  # PIM mapping per row (hwmodels/pim_mapping.py)
            if getattr(plan, "row_mapping", None) is None:
                plan.row_mapping = np.full(n, None, dtype=object)
            plan.row_mapping[rows] = c.mapping
        if getattr(c, "bound", None) is not None:  # what limits each row (the device model's roofline)
            if getattr(plan, "row_bound", None) is None:
                plan.row_bound = np.full(n, "", dtype=object)
            plan.row_bound[rows] = np.asarray(c.bound, dtype=object)
        row_time[rows] = np.asarray(c.time_s, dtype=np.float64) * count[rows]
        for comp, e in c.energy_j.items():
            arr = row_energy.setdefault(comp, np.zeros(n))
            share = f_share if comp in ("compute", "pim_compute") else b_share
            arr[rows] += np.asarray(e, dtype=np.float64) * count[rows] * devices_per_row * share
        for level, b in c.bytes_by_level.items():
            arr = row_bytes.setdefault(f"{role}:{level}", np.zeros(n))
            arr[rows] += np.asarray(b, dtype=np.float64) * count[rows]
        if c.flops is not None:
            row_flops[rows] = np.asarray(c.flops, dtype=np.float64) * count[rows] * devices_per_row * f_share
    return row_time, row_energy, row_bytes, row_flops


def _effective_times(plan, row_time: np.ndarray) -> np.ndarray:
    """Row times after overlap: in a concurrent stage only the slowest device's rows count, plus the
    ``plan.stage_exposed`` share of the other devices' rows (pipeline fill and drain)."""
    eff = row_time.copy()
    if plan.stage is None:
        return eff
    for st in np.unique(plan.stage[plan.stage >= 0]):
        rows = np.nonzero(plan.stage == st)[0]
        devs = plan.device[rows]
        per_dev = {d: row_time[rows[devs == d]].sum() for d in np.unique(devs)}
        crit = max(per_dev, key=per_dev.get)
        eff[rows[devs != crit]] *= float(plan.stage_exposed.get(int(st), 0.0))
    return eff


def _assemble(plan, system, row_time, row_energy, row_bytes, row_flops) -> StepResult:
    trace = plan.trace
    res = StepResult()
    ops = trace["op"]
    row_e_total = np.zeros(len(trace))
    for comp, arr in row_energy.items():
        res.energy_j_by_component[comp] = float(arr.sum())
        row_e_total += arr
    for role in np.unique(plan.device):
        rows = plan.device == role
        res.time_s_by_device[str(role)] = float(row_time[rows].sum())
        res.energy_j_by_device[str(role)] = float(row_e_total[rows].sum())
    for key, arr in row_bytes.items():
        res.bytes_by_device[key] = float(arr.sum())
    res.flops = float(row_flops.sum())
    res.time_s = float(row_time.sum())
    res.time_s_layers = float(row_time[np.asarray(trace["layer_group"]) >= 0].sum())
    res.time_s_layers_run = res.time_s_layers
    res.row_time_s = row_time
    res.row_device = plan.device
    res.row_trace = trace
    res.row_mapping = getattr(plan, "row_mapping", None)
    res.row_energy_j, res.row_bytes = row_e_total, dict(row_bytes)
    res.row_bound = getattr(plan, "row_bound", None)
    from attnsim.hwmodels.pim_mapping import summarize

    res.pim_mapping = summarize(ops, trace["count"], res.row_mapping)
    _add(res.time_s_by_op, ops, row_time)
    bound = getattr(plan, "row_bound", None)
    if bound is not None:
        _add(res.time_s_by_bound, [str(b) or "other" for b in bound], row_time)
    _add(res.energy_j_by_op, ops, row_e_total)
    set_static(res, system, res.time_s)
    return res


def cost_step(plan, system) -> StepResult:
    """Time and energy of one placed step (all TP ranks; one replica).

    ``time_s_by_device`` is the time each device is on the critical path; work a
    concurrent stage hides behind a slower device is not counted in the step time
    (its energy is).
    """
    row_time, row_energy, row_bytes, row_flops = cost_rows(plan, system)
    eff = _effective_times(plan, row_time)
    if plan.pim_schedule:  # unified NPU-PIM memory: PIM access scheduling (hwmodels/pim_scheduling.py)
        from attnsim.hwmodels.pim_scheduling import schedule_times

        eff = schedule_times(plan, system, eff)
    return _assemble(plan, system, eff, row_energy, row_bytes, row_flops)


def cost_step_pipelined(plans: list, system) -> StepResult:
    """One decode step whose batch is split into sub-batches pipelined across devices.

    Per layer, sub-batch b needs time T[d, b] on device d (its rows in layer order).
    A cyclic two-or-more-stage pipeline has a period of at least each device's total
    (sum_b T[d, b]) and each sub-batch's chain (sum_d T[d, b]); the layer takes
    period = max of those. Non-layer rows run sequentially. Energy is the sum.
    With two sub-batches ``time_s_layers_run`` is the layers run once through, fill and drain included
    (:func:`layers_run_s`); the period above is the steady state.
    """
    parts = [cost_rows(p, system) for p in plans]
    groups = plans[0].trace["layer_group"]
    scale = np.ones(len(groups))
    for g in np.unique(groups[groups >= 0]):
        rows = groups == g
        t = {}  # (device, sub-batch) -> time of this layer group
        for b, (p, part) in enumerate(zip(plans, parts)):
            eff = _effective_times(p, part[0])
            for d in np.unique(p.device[rows]):
                t[(d, b)] = t.get((d, b), 0.0) + eff[rows & (p.device == d)].sum()
        devs = sorted({d for d, _ in t})
        nb = len(plans)
        dev_tot = max(sum(t.get((d, b), 0.0) for b in range(nb)) for d in devs)
        chain = max(sum(t.get((d, b), 0.0) for d in devs) for b in range(nb))
        serial = sum(t.values())
        scale[rows] = max(dev_tot, chain) / serial if serial > 0 else 1.0
    row_time = sum(_effective_times(p, part[0]) for p, part in zip(plans, parts)) * scale
    row_energy = {}
    for part in parts:
        for k, v in part[1].items():
            row_energy[k] = row_energy.get(k, 0.0) + v
    row_bytes = {}
    for part in parts:
        for k, v in part[2].items():
            row_bytes[k] = row_bytes.get(k, 0.0) + v
    row_flops = sum(part[3] for part in parts)
    res = _assemble(plans[0], system, row_time, row_energy, row_bytes, row_flops)
    if len(plans) == 2:
        res.time_s_layers_run = layers_run_s(plans, [_effective_times(p, part[0]) for p, part in zip(plans, parts)])
    return res


def stage_schedule_s(phases, layers: int) -> list[float]:
    """Stage times of NeuPIMs' two-sub-batch schedule over ``layers`` decoder layers, fill and drain included
    (casys-kaist/NeuPIMs f299af3 src/StageProgram.cc, the stage table above init_program):

    ====  ================  ==========
    A     SA: QKV#1         PIM: -
    B     SA: QKV#2         PIM: MHA#1
    C     SA: PjFFN#1+QKV#1 PIM: MHA#2
    D     SA: PjFFN#2+QKV#2 PIM: MHA#1
    E     SA: PjFFN#1       PIM: MHA#2
    F     SA: PjFFN#2       PIM: -
    ====  ================  ==========

    A, B, (C, D) x (layers - 1), E, F; a stage lasts its slower side. ``phases`` = ((qkv, mha, pjffn) of
    sub-batch 1, the same of sub-batch 2) in seconds. The steady state is C + D per layer; the average over
    the run is sum / layers (the artefact's sub-batch-on run is layers = 2: A-F)."""
    if layers < 1:
        raise ValueError(f"expected at least one layer, got {layers}")
    (q1, m1, f1), (q2, m2, f2) = phases
    steady = [max(f1 + q1, m2), max(f2 + q2, m1)] * (layers - 1)
    return [q1, max(q2, m1), *steady, max(f1, m2), f2]


def subbatch_parts(plan, n_requests: int) -> list:
    """The sub-batches of a pipelined step: [(request indices, channel per request or None)], the plan's own
    (``plan.subbatch_parts``, e.g. mapper neupims' per-channel halves) or the batch's contiguous slices."""
    if plan.subbatch_parts:
        return [(np.asarray(i, dtype=np.int64), c) for i, c in plan.subbatch_parts if len(i)]
    return [(p, None) for p in np.array_split(np.arange(n_requests), plan.pipeline_subbatches) if len(p)]


def layer_phases_s(plan, eff: np.ndarray, rows: np.ndarray) -> tuple[float, float, float]:
    """(before, offloaded, after) of one layer of a sub-batch: the layer's rows (``rows``, in trace order) cut at
    the first and last row placed on a device other than the layer's first row's (the collective link
    aside), e.g. NeuPIMs' QKV generation, MHA on PIM (the NPU softmax between the GEMVs included),
    projection + FFN. Per repeat (a row's time / its count)."""
    idx = np.flatnonzero(rows)
    if not len(idx):
        return 0.0, 0.0, 0.0
    t = eff[idx] / np.maximum(plan.trace["count"][idx].astype(np.float64), 1.0)
    dev = plan.device[idx]
    off = np.flatnonzero((dev != dev[0]) & (dev != "link"))
    if not len(off):
        return float(t.sum()), 0.0, 0.0
    lo, hi = off[0], off[-1] + 1
    return float(t[:lo].sum()), float(t[lo:hi].sum()), float(t[hi:].sum())


def layers_run_s(plans: list, effs: list) -> float:
    """Decoder-layer time of two pipelined sub-batches run once through each layer group's ``count`` layers,
    fill and drain included: the stages of NeuPIMs' schedule (:func:`stage_schedule_s`) on each
    sub-batch's per-layer phases (:func:`layer_phases_s`)."""
    groups = plans[0].trace["layer_group"]
    total = 0.0
    for g in np.unique(groups[groups >= 0]):
        rows = groups == g
        layers = int(round(float(np.max(plans[0].trace["count"][rows]))))
        phases = [layer_phases_s(p, e, p.trace["layer_group"] == g) for p, e in zip(plans, effs)]
        total += sum(stage_schedule_s(phases, max(1, layers)))
    return total


def _collective_link(system, plan):
    """The link that carries collectives: the first pool of the plan with a link to itself."""
    for role in plan.device:
        role = str(role)
        if role.startswith("link") or role not in system.pools:
            continue
        link = system.link_between(role, role)
        if link is not None:
            return link
    return None


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
