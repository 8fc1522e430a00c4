"""gpu_only: every op on the compute pool (tensor parallel), KV in its HBM.

Collectives (allreduce rows) go over the link that connects the pool to itself. No
``mapper.options`` (any given is refused, like every policy's unknown options). With the system's
``mapper.attention_on: <role>`` decode attention and the KV go to that attention-capable memory device
(mapper/base.py ``place_attention``: q and the new K/V in, the output back over the link between them).
"""

from __future__ import annotations

import numpy as np

from attnsim.mapper.base import (
    MemoryPlacement,
    Plan,
    check_options,
    place_attention,
    rank_weights,
    register,
    role_of_kind,
)

OPTIONS: dict = {}


@register("gpu_only", options=OPTIONS, attention_on=True)
def plan_gpu_only(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    """``model_bytes``: {'weights': total weight bytes, 'kv': total KV bytes at the largest context,
    'kv_per_rank': KV bytes one TP rank holds (KV heads replicate when fewer than tp)}."""
    check_options(options or {}, OPTIONS, "gpu_only")
    att = getattr(system.spec.mapper, "attention_on", None)
    if att is not None:
        return place_attention(trace, system, model_bytes, "gpu_only", att)
    role = role_of_kind(system, "gpu", "npu") or next(iter(system.pools))
    tp = system.spec.parallelism.tp
    cls = trace["cls"]
    device = np.where(cls == "allreduce", "link", role).astype(object)
    parallel = np.full(len(trace), tp, dtype=np.int64)
    pool = system.pools[role]
    mem = [
        MemoryPlacement(
            role, rank_weights(model_bytes, trace, tp), model_bytes["kv_per_rank"], pool.model.capacity_bytes
        )
    ]
    return Plan("gpu_only", trace, device, parallel, mem)
