"""neupims: GEMMs on an NPU (systolic arrays), decode attention GEMV on the HBM-PIM that is the NPU's
own memory (NeuPIMs, casys-kaist/NeuPIMs; shared/reference/pim_dram.md b.2, b.5).

The NPU and the PIM share one HBM: weights and KV both live in the PIM pool's memory. With
NeuPIMs' dual row buffers (option ``dual_row_buffer``, default true) PIM GEMV runs while the NPU
streams weights, and sub-batch interleaving (``subbatches``, default 2) overlaps the attention of
one sub-batch with the GEMMs of the other; with a single row buffer (the "npu+pim" baseline of the
NeuPIMs README) NPU and PIM accesses exclude each other and the ops run one after another.
q / outputs move over the memory interface (the link between the two roles).
"""
from __future__ import annotations

import numpy as np

from attnsim.mapper.base import (ATTENTION_CLASSES, MemoryPlacement, Plan, attention_io_rows, check_options,
                                 insert_rows, kv_writeback_rows, pim_pair, rank_weights, register)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"dual_row_buffer": True, "subbatches": 2}


@register("neupims", options=OPTIONS)
def plan_neupims(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "neupims")
    npu, pim, link = pim_pair(system, "neupims")
    tp = system.spec.parallelism.tp
    memory = [MemoryPlacement(pim, rank_weights(model_bytes, trace, tp), model_bytes["kv_per_rank"],
                              system.pools[pim].model.capacity_bytes)]
    if trace.phase == "prefill":
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
        device = np.where(tr["cls"] == "allreduce", "link", npu).astype(object)
        device[added] = link
        return Plan("neupims", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    before, after = attention_io_rows(trace, DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")])
    tr, _, added = insert_rows(trace, before, after)
    device = np.where(tr["cls"] == "allreduce", "link", npu).astype(object)
    device[np.isin(tr["cls"], ATTENTION_CLASSES)] = pim
    device[added] = link
    plan = Plan("neupims", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    s = int(opts["subbatches"])
    if opts["dual_row_buffer"] and s > 1 and len(trace.query_tokens) >= s:
        plan.pipeline_subbatches = s
    return plan
