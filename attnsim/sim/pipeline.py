"""Pipeline parallelism: a replica's layers split into ``parallelism.pp`` stages over device groups.

A stage is a contiguous range of layers (``layers_per_stage``, default as even as possible: the first
``num_layers % pp`` stages one layer more); ``stages_per_device`` consecutive stages share one device
group (tp devices of the compute pool, and of the paired PIM/PNM pool). The static batch of a replica
is split into ``microbatches`` contiguous micro-batches (``np.array_split``; ``auto`` = min(pp,
requests)) that are in flight together.

Costing (every device family and mapper policy unchanged): the full per-TP-rank trace of a
micro-batch is built and placed by the policy as without PP; each stage's plan keeps the rows of its
layers (``count`` rewritten per layer group) plus the once-per-step rows (embedding on the first stage,
final norm and LM head on the last), and is costed by ``engine.cost_step`` (``cost_step_pipelined``
when the policy splits the micro-batch into sub-batches). Between consecutive stages on different
device groups the activations of the micro-batch go over ``pp_link`` (default: the link of the pool
that holds the hidden state, to itself): tokens x hidden x act bytes / tp per rank (Megatron's
scatter/gather optimisation, Narayanan et al., SC'21 §4.1: each TP rank sends its 1/tp slice and
the receiving stage all-gathers over its fast intra-group link; the all-gather is not costed).
In decode the last stage returns each request's sampled token id (4 bytes) to the first stage.
Stages on one device group hand over for free.

- Prefill (TTFT): flow shop, micro-batches in order: finish[m][s] = max(finish[m][s-1] + transfer,
  free[group(s)]) + t[m][s]; TTFT = finish of the last micro-batch at the last stage.
- Decode step: cyclic steady state, period = max(max over device groups of the work on it summed
  over micro-batches and its stages, max over micro-batches of its chain: stage times + transfers
  + the token return + the software stack's host time of its token, hwmodels/stack.py), and the
  host's total over the micro-batches. Each request gets one token per period (TPOT = mean period);
  with fewer micro-batches than device groups the chain binds and groups idle (the bubble).
- Energy: dynamic energy of every (micro-batch, stage) cost and transfer, plus static power x time.
- ``time_s_by_op`` / ``time_s_by_device`` / ``time_s_by_bound`` of a pipelined step: each op's (device's) share of the
  work summed over all stages and micro-batches, scaled so that they sum to the step time.
- Memory: each placement of the policy (one TP rank holding the whole model) is scaled to the layers
  a device group holds: weights by parameter share (embedding on the first stage; final norm + LM head
  on the last; tied embeddings are copied to the last stage, as Megatron-LM does), KV by the share of
  cached tokens its layers keep (sliding-window layers keep at most the window) for the whole batch
  of the replica. Pools not sized per (rank, stage) (e.g. an offload host memory) are not split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.mapper.base import CapacityError, MemoryPlacement, Plan, transfer_row
from attnsim.sim.engine import StepResult, cost_step, cost_step_pipelined, set_static, subbatch_parts
from attnsim.workloads.model import DTYPE_BYTES
from attnsim.workloads.optrace import LayerGroup, OpTrace
from attnsim.workloads.trace import layer_groups, param_count

TOKEN_ID_BYTES = 4  # int32 token id returned from the last stage to the first (decode)


# ---------------------------------------------------------------- layout


@dataclass
class Layout:
    """Stages of one replica: layer ranges [lo, hi), device group of each stage, micro-batching."""

    stages: list  # [(lo, hi)] per stage
    group: list  # device group per stage
    microbatches: object  # int or "auto"
    link: str | None  # named pp link (None: the hidden-state pool's link to itself)
    tp: int = 1

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def groups(self) -> int:
        return max(self.group) + 1

    def microbatch_count(self, requests: int) -> int:
        m = self.pp if self.microbatches == "auto" else int(self.microbatches)
        return max(1, min(m, int(requests)))


def check_pipeline(system, model, file: str | None = None) -> None:
    """Refuse a pipeline the model or system cannot hold (ConfigError naming parallelism.<key>)."""
    spec = system.spec
    par = spec.parallelism
    if par.pp == 1:
        return
    L = model.num_layers
    if par.pp > L:
        raise ConfigError(
            f"expected at most {L} stages (num_layers of model {model.name}), got {par.pp}",
            file=file,
            key="parallelism.pp",
        )
    if par.layers_per_stage is not None and sum(par.layers_per_stage) != L:
        raise ConfigError(
            f"expected {par.pp} stage sizes summing to num_layers = {L} of model {model.name}, "
            f"got {list(par.layers_per_stage)} (sum {sum(par.layers_per_stage)})",
            file=file,
            key="parallelism.layers_per_stage",
        )
    if par.pp_link is not None and par.pp_link not in spec.links:
        raise ConfigError(
            f"expected one of the system's links ({', '.join(spec.links) or 'none'}), got {par.pp_link!r}",
            file=file,
            key="parallelism.pp_link",
        )
    if par.pp_link is None and par.device_groups > 1:
        kinds = {r: p.model.kind for r, p in system.pools.items()}
        role = next((r for r, k in kinds.items() if k in ("gpu", "npu")), None) or next(
            (r for r, k in kinds.items() if k == "pim"), None
        )
        if role is not None and system.link_between(role, role) is None:
            raise ConfigError(
                f"pipeline stages on different devices need a link: name one of the system's links "
                f"({', '.join(spec.links) or 'none'}) or add a link connecting {role} to itself",
                file=file,
                key="parallelism.pp_link",
            )


def layout_of(spec, model) -> Layout:
    par = spec.parallelism
    L, pp = model.num_layers, par.pp
    sizes = (
        list(par.layers_per_stage)
        if par.layers_per_stage is not None
        else [L // pp + (1 if s < L % pp else 0) for s in range(pp)]
    )
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    stages = [(int(bounds[s]), int(bounds[s + 1])) for s in range(pp)]
    return Layout(stages, [s // par.stages_per_device for s in range(pp)], par.microbatches, par.pp_link, par.tp)


def layer_group_index(model) -> np.ndarray:
    """Layer group (index into workloads.trace.layer_groups) of every layer, by the same grouping."""
    first_dense = 0 if model.moe is None else model.moe.first_dense_layers
    names = [g.name for g in layer_groups(model)]
    return np.array(
        [
            names.index(f"{kind}_{'moe' if model.moe is not None and i >= first_dense else 'dense'}")
            for i, kind in enumerate(model.layer_kinds())
        ],
        dtype=np.int64,
    )


# ---------------------------------------------------------------- stage plans


def stage_plan(plan: Plan, model, lo: int, hi: int, first: bool, last: bool) -> Plan:
    """The rows of ``plan`` that layers [lo, hi) run (counts rewritten per layer group), with the
    embedding on the first stage and the final norm / LM head on the last."""
    tr = plan.trace
    g_of = layer_group_index(model)
    n_groups = len(tr.groups)
    counts = np.bincount(g_of[lo:hi], minlength=n_groups)
    full = np.bincount(g_of, minlength=n_groups)
    grp, cnt, ops = tr["layer_group"], tr["count"], tr["op"]
    per_layer = grp >= 0
    new = cnt.copy()
    gi = np.where(per_layer, grp, 0)
    new[per_layer] = np.rint(cnt[per_layer] * counts[gi[per_layer]] / np.maximum(full[gi[per_layer]], 1)).astype(
        np.int64
    )
    is_emb = ops == "embedding"
    keep = np.where(per_layer, new > 0, (is_emb & first) | (~is_emb & last))
    cols = {c: v[keep] for c, v in tr.cols.items()}
    cols["count"] = new[keep]
    groups = [LayerGroup(g.name, int(counts[i]), g.attention, g.window, g.moe) for i, g in enumerate(tr.groups)]
    meta = dict(tr.meta, pp_layers=(lo, hi))
    st = OpTrace(
        phase=tr.phase,
        model=tr.model,
        tp=tr.tp,
        query_tokens=tr.query_tokens,
        context_lens=tr.context_lens,
        groups=groups,
        cols=cols,
        meta=meta,
    )
    idx = np.nonzero(keep)[0]
    remap = {int(o): k for k, o in enumerate(idx)}
    return Plan(
        plan.policy,
        st,
        plan.device[keep],
        plan.parallel[keep],
        list(plan.memory),
        stage=None if plan.stage is None else plan.stage[keep],
        stage_exposed=dict(plan.stage_exposed),
        pipeline_subbatches=plan.pipeline_subbatches,
        added=None if plan.added is None else plan.added[keep],
        programs={remap[k]: v for k, v in plan.programs.items() if isinstance(k, (int, np.integer)) and k in remap},
        notes=list(plan.notes),
        pim_schedule=dict(plan.pim_schedule),
    )


def _hidden_role(plan: Plan) -> str:
    """The pool holding the hidden state between layers (where the residual adds run)."""
    rows = np.nonzero(np.isin(plan.trace["op"], ("ffn_residual", "attn_residual")))[0]
    roles = [str(plan.device[r]) for r in rows if not str(plan.device[r]).startswith("link")]
    return roles[-1] if roles else next(str(d) for d in plan.device if not str(d).startswith("link"))


def pp_link_name(system, plan: Plan, layout: Layout) -> str:
    """The named pp link, else the link of the hidden state's pool to itself (else of the first other
    pool of the plan that has one, e.g. a CXL device whose controller runs the residual adds)."""
    if layout.link is not None:
        return layout.link
    role = _hidden_role(plan)
    others = [str(d) for d in dict.fromkeys(plan.device) if not str(d).startswith("link") and str(d) != role]
    for r in [role] + others:
        for name, roles in system.link_roles.items():
            if roles == (r, r):
                return name
    raise ConfigError(
        f"pipeline stages on different devices need a link: name one (links: "
        f"{', '.join(system.link_roles) or 'none'}) or add a link connecting {role} to itself",
        key="parallelism.pp_link",
    )


def transfer_plan(plan: Plan, link: str, op: str, nbytes: float) -> Plan:
    """One point-to-point transfer of ``nbytes`` per TP rank over ``link`` (a one-row plan)."""
    tr = plan.trace
    row = transfer_row(op, {"layer_group": -1, "count": 1}, nbytes)
    t = OpTrace.from_rows(
        [row],
        phase=tr.phase,
        model=tr.model,
        tp=tr.tp,
        query_tokens=tr.query_tokens,
        context_lens=tr.context_lens,
        groups=tr.groups,
        meta=dict(tr.meta),
    )
    return Plan(
        plan.policy, t, np.array(["link:" + link], dtype=object), np.array([tr.tp]), added=np.ones(1, dtype=bool)
    )


# ---------------------------------------------------------------- memory per device group


def _param_shares(model) -> tuple[np.ndarray, float, float, float]:
    """(parameters of each layer, embedding params, final norm + LM head params, total) from
    workloads.trace.param_count, by differences of model copies (one source of the counts)."""
    total = float(param_count(model))
    L = model.num_layers
    moe = model.moe
    plus = float(param_count(model.model_copy(update={"num_layers": L + 1}))) - total
    if moe is None:
        dense, moe_l = plus, 0.0
    else:
        moe_l = plus
        m2 = model.model_copy(
            update={
                "num_layers": L + 1,
                "moe": moe.model_copy(update={"first_dense_layers": moe.first_dense_layers + 1}),
            }
        )
        dense = float(param_count(m2)) - total
    first_dense = 0 if moe is None else moe.first_dense_layers
    per_layer = np.array([moe_l if moe is not None and i >= first_dense else dense for i in range(L)])
    h = model.hidden_size
    norm = h * (2 if model.norm == "layernorm" else 1)
    non_layer = total - float(per_layer.sum())
    head = norm + model.vocab_size * h  # untied: its own matrix; tied: a copy of the embedding
    emb = non_layer - norm - (0 if model.tie_word_embeddings else model.vocab_size * h)
    return per_layer, emb, head, total


def _kv_per_layer(model, final_ctx) -> np.ndarray:
    """Cached tokens each layer keeps for the batch (sliding-window layers at most the window)."""
    t = np.atleast_1d(np.asarray(final_ctx, dtype=np.int64))
    w = model.sliding_window or 0
    return np.array(
        [float(np.minimum(t, w).sum()) if k == "local" and w else float(t.sum()) for k in model.layer_kinds()]
    )


@dataclass
class StageMemory:
    """Bytes on ONE device of each role per device group (placements of the policy, split by stage)."""

    per_group: list  # [ [MemoryPlacement] ] per device group
    per_stage: list  # [ {role: (weights, kv)} ] per stage


def stage_memory(memory: list, system, model, layout: Layout, final_ctx) -> StageMemory:
    per_layer, emb, head, total = _param_shares(model)
    kv_l = _kv_per_layer(model, final_ctx)
    kv_total = float(kv_l.sum())
    split = {
        mp.role: system.pools[mp.role].count
        == system.spec.parallelism.devices_per_replica * system.spec.parallelism.replicas
        for mp in memory
        if mp.role in system.pools
    }
    per_stage = []
    for s, (lo, hi) in enumerate(layout.stages):
        wf = (per_layer[lo:hi].sum() + (emb if s == 0 else 0.0) + (head if s == layout.pp - 1 else 0.0)) / total
        kf = kv_l[lo:hi].sum() / kv_total if kv_total > 0 else (hi - lo) / model.num_layers
        per_stage.append(
            {mp.role: (mp.weights_bytes * wf, mp.kv_bytes * kf) if split.get(mp.role) else None for mp in memory}
        )
    per_group = []
    for g in range(layout.groups):
        out = []
        for mp in memory:
            if not split.get(mp.role):
                out.append(MemoryPlacement(mp.role, mp.weights_bytes, mp.kv_bytes, mp.capacity_bytes))
                continue
            w = sum(per_stage[s][mp.role][0] for s in range(layout.pp) if layout.group[s] == g)
            k = sum(per_stage[s][mp.role][1] for s in range(layout.pp) if layout.group[s] == g)
            out.append(MemoryPlacement(mp.role, w, k, mp.capacity_bytes))
        per_group.append(out)
    return StageMemory(per_group, per_stage)


def check_stage_capacity(mem: StageMemory, layout: Layout) -> None:
    gb = 1e9
    for g, placements in enumerate(mem.per_group):
        for mp in placements:
            if not mp.fits:
                st = [s for s in range(layout.pp) if layout.group[s] == g]
                lo, hi = layout.stages[st[0]][0], layout.stages[st[-1]][1]
                raise CapacityError(
                    f"pipeline device group {g} (stages {st[0]}-{st[-1]}, layers {lo}-{hi - 1}) {mp.role}: weights "
                    f"{mp.weights_bytes / gb:.1f} GB + KV {mp.kv_bytes / gb:.1f} GB = {mp.used_bytes / gb:.1f} GB per "
                    f"device exceed its capacity {mp.capacity_bytes / gb:.1f} GB by "
                    f"{(mp.used_bytes - mp.capacity_bytes) / gb:.1f} GB"
                )


def memory_doc(mem: StageMemory, layout: Layout, system) -> dict:
    """metrics.memory under PP: per role, weights_gb / kv_gb = mean per device of the role (x its count =
    the total), used_fraction = the fullest device's; ``per_device_group`` lists each group."""
    out = {}
    for i, mp0 in enumerate(mem.per_group[0]):
        rows = [grp[i] for grp in mem.per_group]
        cap = mp0.capacity_bytes
        out[mp0.role] = {
            "weights_gb": float(np.mean([r.weights_bytes for r in rows])) / 1e9,
            "kv_gb": float(np.mean([r.kv_bytes for r in rows])) / 1e9,
            "capacity_gb": cap / 1e9,
            "used_fraction": max(r.used_bytes for r in rows) / cap if cap else math.inf,
            "per_device_group": [
                {
                    "weights_gb": r.weights_bytes / 1e9,
                    "kv_gb": r.kv_bytes / 1e9,
                    "used_fraction": r.used_bytes / cap if cap else math.inf,
                }
                for r in rows
            ],
        }
    return out


# ---------------------------------------------------------------- timing


@dataclass
class PipelineStep:
    """One pipelined step: the combined StepResult and the schedule behind it."""

    result: StepResult
    microbatches: int
    stage_time_s: np.ndarray  # [microbatch, stage]
    transfer_time_s: np.ndarray  # [microbatch, stage]: after stage s (last column: the token return)
    group_load_s: np.ndarray  # per device group, summed over micro-batches
    chain_s: np.ndarray  # per micro-batch
    start_s: np.ndarray = field(default=None)  # flow-shop start of (m, s) (prefill schedule; decode: one step's)

    @property
    def time_s(self) -> float:
        return self.result.time_s


def flow_shop(t: np.ndarray, x: np.ndarray, group: list) -> tuple[np.ndarray, np.ndarray]:
    """Start and finish of each (micro-batch m, stage s): finish[m][s] = max(finish[m][s-1] +
    x[m][s-1], free[group(s)]) + t[m][s] (micro-batches in order on every device group)."""
    M, S = t.shape
    start, finish = np.zeros((M, S)), np.zeros((M, S))
    free = {}
    for m in range(M):
        ready = 0.0
        for s in range(S):
            st = max(ready, free.get(group[s], 0.0))
            start[m, s], finish[m, s] = st, st + t[m, s]
            free[group[s]] = finish[m, s]
            ready = finish[m, s] + x[m, s]
    return start, finish


def pipeline_step(
    system, model, layout: Layout, context_lens, query_tokens, place, cost, host_s=None, host_overlap: bool = False
) -> PipelineStep:
    """Cost one step of a replica's batch (``context_lens`` / ``query_tokens`` per request) through the
    pipeline. ``place(ctx, q, subbatch_of=None) -> Plan`` places a micro-batch's full trace (policy + memory
    of the whole replica; ``subbatch_of`` = s marks one of s concurrent sub-batches, as the runner does);
    ``cost(plan) -> StepResult`` costs a stage plan (engine.cost_step plus any run extras); a plan with
    ``pipeline_subbatches`` > 1 is split into that many sub-batch plans (``place`` again)
    costed by engine.cost_step_pipelined per stage, as attnsim.sim.runner does without PP.
    ``host_s(requests) -> seconds`` (decode): the software stack's host time of each micro-batch's token
    (sampling between its last stage and its next first stage) on that micro-batch's chain; the host
    runs the micro-batches' shares one after another, so its sum is one more load on the period.
    ``host_overlap`` (the stack's async_scheduling): a share overlaps its micro-batch's chain, only
    max(0, share - chain) is on the chain (the period is then max(load, chain, sum of the shares))."""
    c = np.atleast_1d(np.asarray(context_lens, dtype=np.int64))
    q = np.atleast_1d(np.asarray(query_tokens, dtype=np.int64))
    phase_decode = bool(np.all(q == 1))
    M = layout.microbatch_count(len(c))
    S = layout.pp
    parts = [p for p in np.array_split(np.arange(len(c)), M) if len(p)]
    M = len(parts)
    memo: dict = {}
    t = np.zeros((M, S))
    x = np.zeros((M, S))
    results = []
    link_name = None
    for m, idx in enumerate(parts):
        cm, qm = c[idx], q[idx]
        key = (tuple(cm), tuple(qm))
        if key not in memo:
            plan = place(cm, qm)
            subs = None
            if plan.pipeline_subbatches > 1:
                subs = [
                    place(
                        cm[p], qm[p], subbatch_of=plan.pipeline_subbatches, **({} if ch is None else {"channels": ch})
                    )  # the batch's channels per request
                    for p, ch in subbatch_parts(plan, len(cm))
                ]
            link_name = link_name or (pp_link_name(system, plan, layout) if layout.groups > 1 else None)
            act = DTYPE_BYTES[plan.trace.meta.get("act_dtype", "fp16")]
            per_stage, per_x, same = [], [], {}
            g_of = layer_group_index(model)
            for s, (lo, hi) in enumerate(layout.stages):
                first, last = s == 0, s == S - 1
                kind = (tuple(np.bincount(g_of[lo:hi], minlength=len(plan.trace.groups))), first, last)
                if kind in same:  # a stage of the same layer mix costs the same (e.g. CENT's 1-layer stages)
                    r = same[kind]
                elif subs is None:
                    r = cost(stage_plan(plan, model, lo, hi, first, last))
                else:
                    r = cost_step_pipelined([stage_plan(p, model, lo, hi, first, last) for p in subs], system)
                same[kind] = r
                per_stage.append(r)
                nxt = (s + 1) % S
                xr = None
                if layout.group[nxt] != layout.group[s] and (s < S - 1 or phase_decode):
                    nbytes = (
                        float(qm.sum()) * model.hidden_size * act / layout.tp
                        if s < S - 1
                        else float(len(cm)) * TOKEN_ID_BYTES
                    )
                    op = "pp_send_activations" if s < S - 1 else "pp_return_tokens"
                    xr = cost_step(transfer_plan(plan, link_name, op, nbytes), system)
                per_x.append(xr)
            memo[key] = (per_stage, per_x)
        per_stage, per_x = memo[key]
        for s in range(S):
            t[m, s] = per_stage[s].time_s
            x[m, s] = per_x[s].time_s if per_x[s] is not None else 0.0
            results.append(per_stage[s])
            if per_x[s] is not None:
                results.append(per_x[s])
    G = layout.groups
    load = np.array([t[:, [s for s in range(S) if layout.group[s] == g]].sum() for g in range(G)])
    chain = t.sum(axis=1) + x.sum(axis=1)  # prefill has no token return (x[:, -1] = 0)
    start, finish = flow_shop(t, x, layout.group)
    step_time = float(max(load.max(), chain.max())) if phase_decode else float(finish[-1, -1])
    if host_s is not None and phase_decode:
        from attnsim.hwmodels.stack import HOST_DEVICE, HOST_OP

        h = np.array([host_s(len(idx)) for idx in parts])
        he = np.maximum(0.0, h - chain) if host_overlap else h  # the part of each share on its chain
        chain = chain + he
        step_time = float(max(load.max(), chain.max(), h.sum()))
        for hm in he[he > 0]:
            results.append(
                StepResult(
                    time_s=float(hm), time_s_by_op={HOST_OP: float(hm)}, time_s_by_device={HOST_DEVICE: float(hm)}
                )
            )
    res = _combine(results, system, step_time, per_group_bytes=_group_bytes(parts, memo, c, q, layout))
    return PipelineStep(res, M, t, x, load, chain, start)


def _group_bytes(parts, memo, c, q, layout) -> dict:
    """bytes_by_device under PP: the busiest device group's bytes (per device) over all micro-batches."""
    out: dict = {}
    for g in range(layout.groups):
        acc: dict = {}
        for idx in parts:
            per_stage, _ = memo[(tuple(c[idx]), tuple(q[idx]))]
            for s in range(layout.pp):
                if layout.group[s] == g:
                    for k, v in per_stage[s].bytes_by_device.items():
                        acc[k] = acc.get(k, 0.0) + v
        for k, v in acc.items():
            out[k] = max(out.get(k, 0.0), v)
    return out


def _combine(results: list, system, time_s: float, per_group_bytes: dict) -> StepResult:
    """Sum of the costs (energy, FLOPs), time = the pipeline's; per-op / per-device times are the
    shares of the summed work, scaled to the step time."""
    out = StepResult()
    for r in results:
        out.scaled_add(r, 1.0)
    work = sum(r.time_s for r in results)
    scale = time_s / work if work > 0 else 0.0
    out.time_s_by_op = {k: v * scale for k, v in out.time_s_by_op.items()}
    out.time_s_by_device = {k: v * scale for k, v in out.time_s_by_device.items()}
    out.time_s_by_bound = {k: v * scale for k, v in out.time_s_by_bound.items()}
    out.time_s_layers *= scale  # the decoder layers' share, as time_s_by_op
    out.time_s_layers_run *= scale
    out.bytes_by_device = dict(per_group_bytes)
    out.time_s = time_s
    set_static(out, system, time_s)
    return out


def pipeline_doc(layout: Layout, prefill: PipelineStep, decode: PipelineStep | None, mem: StageMemory) -> dict:
    """The run document's ``pipeline`` section."""

    def bubble(step):
        busy = float(step.stage_time_s.sum())
        return 1.0 - busy / (layout.groups * step.time_s) if step.time_s > 0 else 0.0

    stages = [
        {"stage": s, "layers": [lo, hi - 1], "num_layers": hi - lo, "device_group": layout.group[s]}
        for s, (lo, hi) in enumerate(layout.stages)
    ]
    for s, st in enumerate(stages):
        st["prefill_time_s"] = float(prefill.stage_time_s[:, s].sum())
        if decode is not None:
            st["decode_time_s"] = float(decode.stage_time_s[:, s].sum())
        st["memory"] = {
            role: {"weights_gb": v[0] / 1e9, "kv_gb": v[1] / 1e9}
            for role, v in mem.per_stage[s].items()
            if v is not None
        }
    doc = {
        "pp": layout.pp,
        "device_groups": layout.groups,
        "stages": stages,
        "microbatches": prefill.microbatches,
        "microbatches_setting": layout.microbatches,
        "prefill_bubble_fraction": bubble(prefill),
        "prefill_transfer_time_s": float(prefill.transfer_time_s.sum()),
    }
    if decode is not None:
        doc.update(
            {
                "decode_microbatches": decode.microbatches,
                "decode_period_s": decode.time_s,
                "decode_bubble_fraction": bubble(decode),
                "decode_chain_s": float(decode.chain_s.max()),
                "decode_max_group_load_s": float(decode.group_load_s.max()),
                "decode_transfer_time_s": float(decode.transfer_time_s.sum()),
            }
        )
    return doc


def timeline_events(step: PipelineStep, layout: Layout, system_name: str, phase: str, pid: int = 1) -> list[dict]:
    """Trace events of a pipelined step: one track per device group, one event per (micro-batch,
    stage) at its flow-shop start."""
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{system_name} {phase}"}}]
    events += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": g + 1, "args": {"name": f"device group {g}"}}
        for g in range(layout.groups)
    ]
    for m in range(step.stage_time_s.shape[0]):
        for s in range(layout.pp):
            events.append(
                {
                    "ph": "X",
                    "name": f"mb{m} stage{s}",
                    "pid": pid,
                    "tid": layout.group[s] + 1,
                    "ts": float(step.start_s[m, s]) * 1e6,
                    "dur": float(step.stage_time_s[m, s]) * 1e6,
                    "args": {"microbatch": m, "stage": s, "layers": [layout.stages[s][0], layout.stages[s][1] - 1]},
                }
            )
    return events[: 1 + layout.groups] + sorted(events[1 + layout.groups :], key=lambda e: (e["ts"], e["tid"]))


# ---------------------------------------------------------------- glue for attnsim.sim.runner


class RunPipeline:
    """The pipelined steps of one static-batch run (attnsim.sim.runner.simulate_generation, pp > 1).

    ``build(model, scenario, phase, tp=, context_lens=, query_tokens=)`` and ``place(trace)`` are the
    runner's (ECC scaling, policy with the whole replica's model bytes); ``cost(plan)`` its costing.
    Every placed plan's memory is split per device group and checked against capacity."""

    def __init__(self, system, model, scenario, final_ctx, build, place, cost):
        self.system, self.model, self.sc = system, model, scenario
        self.layout = layout_of(system.spec, model)
        self.final_ctx = final_ctx
        self._build, self._place, self._cost = build, place, cost
        self.mem: StageMemory | None = None
        self.prefill_step: PipelineStep | None = None
        self.decode_first: PipelineStep | None = None

    def place(self, phase: str):
        def fn(ctx, q, subbatch_of=None, channels=None):
            sc = self.sc.model_copy(update={"batch_size": len(ctx)})
            tr = self._build(self.model, sc, phase, tp=self.layout.tp, context_lens=ctx, query_tokens=q)
            if subbatch_of is not None:  # trace meta "subbatch_of": other sub-batches run concurrently
                tr.meta["subbatch_of"] = subbatch_of
            if channels is not None:  # the channels the whole batch's requests were placed on
                tr.meta["channel_assignment"] = [int(c) for c in channels]
            plan = self._place(tr)
            mem = stage_memory(plan.memory, self.system, self.model, self.layout, self.final_ctx)
            check_stage_capacity(mem, self.layout)
            if self.mem is None:
                self.mem = mem
            return plan

        return fn

    def prefill(self) -> StepResult:
        p = self.sc.prompt_lens()
        self.prefill_step = pipeline_step(self.system, self.model, self.layout, p, p, self.place("prefill"), self._cost)
        return self.prefill_step.result

    def decode(self, ctx) -> StepResult:
        from attnsim.hwmodels.stack import NONE, step_overhead_s

        stack = getattr(self.system, "stack", NONE)
        step = pipeline_step(
            self.system,
            self.model,
            self.layout,
            ctx,
            np.ones_like(ctx),
            self.place("decode"),
            self._cost,
            host_s=lambda n: step_overhead_s(stack, n),
            host_overlap=stack.async_scheduling,
        )
        if self.decode_first is None:
            self.decode_first = step
        return step.result

    def memory_doc(self) -> dict:
        return memory_doc(self.mem, self.layout, self.system)

    def doc(self) -> dict:
        return pipeline_doc(self.layout, self.prefill_step, self.decode_first, self.mem)

    def timeline(self, phase: str, pid: int) -> list[dict]:
        step = self.prefill_step if phase == "prefill" else self.decode_first
        return timeline_events(step, self.layout, self.system.spec.name, phase, pid=pid)
