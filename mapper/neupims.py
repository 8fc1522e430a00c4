"""neupims: GEMMs on an NPU (systolic arrays), decode attention GEMV on the HBM-PIM that is the NPU's
own memory (NeuPIMs, casys-kaist/NeuPIMs; shared/reference/pim_dram.md b.2, b.5).

The NPU and the PIM share one HBM: weights and KV both live in the PIM pool's memory. Options:

* ``subbatches`` (default 2): the batch is split and pipelined (runner: engine.cost_step_pipelined),
  the attention of one sub-batch overlapping the GEMMs of the other (NeuPIMs' stages B-D,
  src/StageProgram.cc: SA runs QKV / projection + FFN of one sub-batch while PIM runs MHA of the other).
* ``dual_row_buffer`` (default true): with a Newton/NeuPIMs PIM (``isa: newton``), in a sub-batch of a
  pipelined step (the runner marks its trace ``meta["subbatch_of"]``), the concurrent sub-batch's NPU
  memory traffic (its GEMMs' weight stream, its new K/V writes, and the NPU's time for them) is recorded
  in the trace (``meta["neupims_rowbuffer"]``) and timed with the PIM commands on the DRAM engine
  (hwmodels/rowbuffer.py): single row buffer = both streams interleaved in the same banks, each
  switch closing the other's row (the npu+pim baseline); dual = PIM on its own row buffer. With
  another PIM ISA there is no such model: a single row buffer then runs the ops one after another.

With ``isa: newton`` softmax runs on the NPU's vector units (NeuPIMs: the logits come back by READRES,
the probabilities go out by GWRITE, both inside the PIM lowering, isa/lower_newton.py); q and the
attention output move by those commands too, so only the new K/V tokens are a separate transfer.
"""
from __future__ import annotations

import numpy as np

from attnsim.mapper.base import (ATTENTION_CLASSES, MemoryPlacement, Plan, attention_io_rows, check_options,
                                 insert_rows, kv_writeback_rows, pim_pair, register, transfer_row)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"dual_row_buffer": True, "subbatches": 2}


def _newton(system, pim: str) -> bool:
    return getattr(getattr(system.pools[pim].model, "spec", None), "isa", None) == "newton"


def concurrent_npu_traffic(trace, device: np.ndarray, npu: str, npu_model) -> dict:
    """Per layer group: the NPU's memory bytes of one sub-batch layer (GEMM weights read, new K/V written)
    and its NPU time (the NPU model's cost of its rows), which run while the PIM serves another
    sub-batch's attention: the PIM sees that traffic at bytes / time."""
    grp, cls = trace["layer_group"], trace["cls"]
    on_npu = device == npu
    rd, wr, t = {}, {}, {}
    for g in np.unique(grp[grp >= 0]):
        rows = grp == g
        rd[int(g)] = float(np.sum(trace["weight_bytes"][rows & on_npu & (cls == "matmul")]))
        wr[int(g)] = float(np.sum(trace["kv_write_bytes"][rows & np.isin(cls, ATTENTION_CLASSES)]))
        idx = np.flatnonzero(rows & on_npu)
        t[int(g)] = float(npu_model.cost(trace, idx).time_s.sum()) if len(idx) else 0.0
    return {"npu_read_bytes": rd, "npu_write_bytes": wr, "npu_time_s": t}


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


@register("neupims", options=OPTIONS)
def plan_neupims(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "neupims")
    npu, pim, link = pim_pair(system, "neupims")
    tp = system.spec.parallelism.tp
    memory = [MemoryPlacement(pim, model_bytes["weights"] / tp, model_bytes["kv_per_rank"],
                              system.pools[pim].model.capacity_bytes)]
    if trace.phase == "prefill":
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
        device = np.where(tr["cls"] == "allreduce", "link", npu).astype(object)
        device[added] = link
        return Plan("neupims", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    newton = _newton(system, pim)
    if newton:  # only the new K/V tokens cross as a transfer; q / scores / probabilities / output by GWRITE/READRES
        cls, grp = trace["cls"], trace["layer_group"]
        before = {}
        for i in np.nonzero(cls == "attn_score")[0]:
            same = (grp == grp[i]) & np.isin(cls, ATTENTION_CLASSES)
            before[int(i)] = [transfer_row("pim_write_kv", {"layer_group": grp[i], "count": trace["count"][i]},
                                           float(np.sum(trace["kv_write_bytes"][same])))]
        tr, _, added = insert_rows(trace, before)
    else:
        before, after = attention_io_rows(trace, DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")])
        tr, _, added = insert_rows(trace, before, after)
    device = np.where(tr["cls"] == "allreduce", "link", npu).astype(object)
    on_pim = np.isin(tr["cls"], ("attn_score", "attn_context") if newton else ATTENTION_CLASSES)
    device[on_pim] = pim
    device[added] = link
    s = int(opts["subbatches"])
    pipelined = s > 1 and len(trace.query_tokens) >= s
    # a sub-batch of a pipelined step (runner: trace meta "subbatch_of"): the other sub-batches' NPU
    # traffic shares the banks with this one's PIM GEMVs
    if int(trace.meta.get("subbatch_of", 1)) > 1 and newton:
        tr.meta["neupims_rowbuffer"] = {"mode": "dual" if opts["dual_row_buffer"] else "single",
                                        **concurrent_npu_traffic(tr, device, npu, system.pools[npu].model)}
    plan = Plan("neupims", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    if pipelined and (opts["dual_row_buffer"] or newton):
        plan.pipeline_subbatches = s
    return plan
