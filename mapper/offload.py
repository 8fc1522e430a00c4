"""offload: KV (and optionally weights) live in host DDR5 / CXL memory / NAND flash and stream to the GPU.

FlexGen / InfiniGen-style offloading (shared/reference/cxl_reliability.md §1.3). Each decode layer
fetches its KV (``topk_fraction`` of it: InfiniGen-style selection of the important tokens; 1.0 =
all) and, with ``offload_weights``, its weights over the GPU <-> memory link. With ``overlap``
(default true) a layer's fetches are double-buffered against its compute: the layer takes
max(fetch, compute); without it, fetch then compute. A fetch takes the longer of the link transfer
and the memory pool's read (``kind: memory`` bandwidth; its read energy is counted too). Attention
over a top-k subset reads and computes only that subset (a different algorithm: FLOPs change with
``topk_fraction`` < 1).
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.mapper.base import (
    ATTENTION_CLASSES,
    MemoryPlacement,
    Plan,
    check_options,
    insert_rows,
    link_name_between,
    rank_weights,
    register,
    role_of_kind,
    transfer_row,
)

OPTIONS = {"topk_fraction": 1.0, "offload_weights": False, "overlap": True}


@register("offload", options=OPTIONS)
def plan_offload(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "offload")
    f = float(opts["topk_fraction"])
    if not 0 < f <= 1:
        raise ConfigError(f"expected 0 < topk_fraction <= 1, got {f}", key="mapper.options.topk_fraction")
    gpu = role_of_kind(system, "gpu", "npu")
    host = role_of_kind(system, "memory", "flash")
    if gpu is None or host is None:
        raise ConfigError("policy offload needs a gpu pool and a memory pool (kind: memory or flash)", key="devices")
    link = "link:" + link_name_between(system, gpu, host)
    tp = system.spec.parallelism.tp
    w_gpu = 0.0 if opts["offload_weights"] else rank_weights(model_bytes, trace, tp)
    memory = [
        MemoryPlacement(gpu, w_gpu, 0.0, system.pools[gpu].model.capacity_bytes),
        MemoryPlacement(
            host,
            model_bytes["weights"] if opts["offload_weights"] else 0.0,
            model_bytes["kv"],
            system.pools[host].model.capacity_bytes * system.pools[host].count,
        ),
    ]
    cls, grp = trace["cls"], trace["layer_group"]
    rows = [dict(r) for r in trace.rows()]
    if trace.phase == "decode" and f < 1.0:
        for i in np.nonzero(np.isin(cls, ATTENTION_CLASSES))[0]:
            for c in ("n", "flops", "kv_read_bytes", "act_bytes"):
                rows[i][c] = rows[i][c] * f if c != "n" else int(round(rows[i][c] * f))
    from attnsim.workloads.optrace import OpTrace

    trace = OpTrace.from_rows(
        rows,
        phase=trace.phase,
        model=trace.model,
        tp=trace.tp,
        query_tokens=trace.query_tokens,
        context_lens=trace.context_lens,
        groups=trace.groups,
        meta=dict(trace.meta),
    )
    # each transfer row (per TP rank, over the link) has a twin on the memory pool: the pool reads
    # (writes) the bytes of all TP ranks, shared over its devices, concurrently with the link
    hosts = system.pools[host].count
    before, after = {}, {}
    for g in np.unique(grp[grp >= 0]):
        first = int(np.nonzero(grp == g)[0][0])
        like = {"layer_group": g, "count": trace["count"][first]}
        same = grp == g
        fetch = []
        if trace.phase == "decode":
            fetch.append(("fetch_kv", float(np.sum(trace["kv_read_bytes"][same]))))
        else:  # prefill writes the prompt's KV out to host memory
            b = float(np.sum(trace["kv_write_bytes"][same]))
            after.setdefault(int(np.nonzero(same)[0][-1]), []).extend(
                [transfer_row("store_kv", like, b), transfer_row("host_store_kv", like, b * tp / hosts)]
            )
        if opts["offload_weights"]:
            fetch.append(("fetch_weights", float(np.sum(trace["weight_bytes"][same]))))
        if fetch:
            before[first] = [
                r
                for op, b in fetch
                for r in (transfer_row(op, like, b), transfer_row("host_" + op, like, b * tp / hosts))
            ]
    # non-layer weights (embedding, LM head) stay on the GPU
    tr, _, added = insert_rows(trace, before, after)
    on_host = added & np.char.startswith(tr["op"].astype(str), "host_")
    device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
    device[added] = link
    device[on_host] = host
    parallel = np.full(len(tr), tp, dtype=np.int64)
    parallel[on_host] = hosts
    if opts["overlap"]:  # a layer's transfers double-buffered against its compute
        stage = np.where(tr["layer_group"] >= 0, tr["layer_group"], -1).astype(np.int64)
        stage[(tr["cls"] == "allreduce")] = -1
    else:  # link and memory side of each transfer concurrent; compute waits for them
        stage = np.where(added, tr["layer_group"], -1).astype(np.int64)
    return Plan("offload", tr, device, parallel, memory, stage=stage)
