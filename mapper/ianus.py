"""ianus: an NPU and a commercial PIM (GDDR6-AiM) that is ALSO the NPU's main memory (IANUS, Seo et al.,
ASPLOS'24; shared/reference/pim_dram.md item 7 and b.4).

Unified memory: weights and KV are stored once, in the PIM pool; the NPU reads them by normal accesses,
the PIM by all-bank MACs, and the two cannot run at once on a channel (hwmodels/pim_scheduling.py).
Per decode op the policy chooses where it runs: GEMV-shaped ops (matmul, attention score / context of a
decode step) go to the PIM when its time, charged in full to the channels (a PIM phase blocks every
normal access), is below the NPU's; everything else (norms, softmax, activations, embedding, prefill
GEMMs) runs on the NPU. Options:

* ``placement``: ``auto`` (the per-op choice above), ``compute`` (every op on the NPU: the NPU-only
  system on the same memory), ``pim`` (every GEMV-shaped decode op on the PIM).
* ``draft_placement``: the placement of a speculative draft model's steps (``same`` = ``placement``);
  only read for scenarios with ``speculative:`` (workloads/speculative.py), refused otherwise.
* ``schedule`` (default true): PIM access scheduling: NPU work overlaps PIM phases per layer and normal
  accesses fill the gaps; false = naive: every op waits for the previous one.
* ``exclusion`` (default true; needs ``schedule``): false = a PIM with its own row buffer whose phases
  overlap normal accesses (NeuPIMs' relaxation), to price the exclusion.
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.mapper.base import MemoryPlacement, Plan, check_options, rank_weights, register, role_of_kind

PLACEMENTS = ("auto", "compute", "pim")
OPTIONS = {"placement": "auto", "draft_placement": "same", "schedule": True, "exclusion": True}
GEMV_CLASSES = ("matmul", "attn_score", "attn_context")


def _roles(system):
    comp, pim = role_of_kind(system, "npu", "gpu"), role_of_kind(system, "pim")
    if comp is None or pim is None:
        raise ConfigError(
            f"policy ianus needs an npu/gpu pool and a pim pool (the unified memory) (have: "
            f"{', '.join(f'{r}: {p.model.kind}' for r, p in system.pools.items())})",
            key="devices",
        )
    par = system.spec.parallelism
    for role in (comp, pim):
        if system.pools[role].count != par.devices_per_replica * par.replicas:
            raise ConfigError(
                f"policy ianus pairs each tensor-parallel rank with one unified PIM memory: expected "
                f"{par.device_formula()} devices, got {system.pools[role].count}",
                key=f"devices.{role}.count",
            )
    return comp, pim


def placement_of(trace, opts: dict, key: str = "mapper.options.placement") -> str:
    """The placement that applies to ``trace``: the draft's for a speculative draft step."""
    for name in ("placement", "draft_placement"):
        allowed = PLACEMENTS + (("same",) if name == "draft_placement" else ())
        if opts[name] not in allowed:
            raise ConfigError(f"expected one of {', '.join(allowed)}, got {opts[name]!r}", key=f"mapper.options.{name}")
    if "speculative" not in trace.meta and opts.get("_given_draft"):
        raise ConfigError(
            "not used unless the scenario has speculative: (a draft model); remove it",
            key="mapper.options.draft_placement",
        )
    if trace.meta.get("speculative") == "draft" and opts["draft_placement"] != "same":
        return opts["draft_placement"]
    return opts["placement"]


@register("ianus", options=OPTIONS, needs={"exclusion": ("schedule", True)})
def plan_ianus(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "ianus")
    placement = placement_of(trace, {**opts, "_given_draft": "draft_placement" in (options or {})})
    comp, pim = _roles(system)
    tp = system.spec.parallelism.tp
    memory = [
        MemoryPlacement(
            pim,
            rank_weights(model_bytes, trace, tp),
            model_bytes["kv_per_rank"],
            system.pools[pim].model.capacity_bytes,
        )
    ]
    cls = trace["cls"]
    device = np.where(cls == "allreduce", "link", comp).astype(object)
    plan = Plan("ianus", trace, device, np.full(len(trace), tp, dtype=np.int64), memory)
    if trace.phase != "decode" or placement == "compute":
        return plan
    cand = np.flatnonzero(np.isin(cls, GEMV_CLASSES))
    if placement == "auto" and len(cand):
        t_npu = np.asarray(system.pools[comp].model.cost(trace, cand).time_s, dtype=np.float64)
        t_pim = np.asarray(system.pools[pim].model.cost(trace, cand).time_s, dtype=np.float64)
        cand = cand[t_pim < t_npu]
    device[cand] = pim
    if opts["schedule"] and len(cand):
        plan.pim_schedule = {
            "compute": comp,
            "pim": pim,
            "exclusion": bool(opts["exclusion"]),
            "partitions": int(trace.meta.get("heads_per_rank", 1)),
        }
    plan.notes.append(f"ianus: {len(cand)} of {len(trace)} rows on the PIM ({placement})")
    return plan
