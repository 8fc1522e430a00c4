"""attacc: FC/GEMM on GPUs, decode attention on HBM-PIM stacks that hold the KV cache.

After AttAcc (Park et al., ASPLOS'24; scale-snu/attacc_simulator, shared/reference/pim_dram.md b.1,
b.6). Each tensor-parallel GPU rank is paired with one PIM device (an AttAcc board of HBM3-PIM
stacks) that holds that rank's KV heads, so the PIM pool must have ``tp`` devices.

Decode: attention score, softmax and context run on the PIM device; q and the new token's K/V
go GPU -> PIM and the attention output PIM -> GPU over the link between the two pools (one transfer
row each per layer). Prefill stays on the GPUs and writes the prompt's KV into the PIM stacks.

Options (``mapper.options`` in the system YAML):
- ``pipeline`` (bool, default false): split the decode batch into ``subbatches`` (default 2) and
  pipeline attention (PIM) of one sub-batch with FC (GPU) of another (AttAcc's pipelining).
- ``fc_on_pim_max_batch`` (int, default 0): at decode batch sizes up to this, FC GEMVs also run on
  the PIM stacks' internal bandwidth (AttAcc's small-batch FC option); the FC weights are then stored
  in the PIM stacks as well (counted in their capacity).
"""
from __future__ import annotations

import numpy as np

from attnsim.mapper.base import (ATTENTION_CLASSES, MemoryPlacement, Plan, attention_io_rows, check_options,
                                 insert_rows, kv_writeback_rows, pim_pair, rank_weights, register)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"pipeline": False, "subbatches": 2, "fc_on_pim_max_batch": 0}


@register("attacc", options=OPTIONS, needs={"subbatches": ("pipeline", True)})
def plan_attacc(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "attacc")
    gpu, pim, link = pim_pair(system, "attacc")
    tp = system.spec.parallelism.tp
    act_bytes = DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")]
    cls = trace["cls"]
    batch = int(len(trace.query_tokens))
    fc_on_pim = trace.phase == "decode" and batch <= int(opts["fc_on_pim_max_batch"])
    pim_weights = rank_weights(model_bytes, trace, tp) if opts["fc_on_pim_max_batch"] else 0.0
    memory = [MemoryPlacement(gpu, rank_weights(model_bytes, trace, tp), 0.0, system.pools[gpu].model.capacity_bytes),
              MemoryPlacement(pim, pim_weights, model_bytes["kv_per_rank"], system.pools[pim].model.capacity_bytes)]
    if trace.phase == "prefill":
        # attention on the GPUs; the prompt's K/V are written into the PIM stacks
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
        device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
        device[added] = link
        return Plan("attacc", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    before, after = attention_io_rows(trace, act_bytes)
    tr, _, added = insert_rows(trace, before, after)
    ncls = tr["cls"]
    device = np.where(ncls == "allreduce", "link", gpu).astype(object)
    device[np.isin(ncls, ATTENTION_CLASSES)] = pim
    if fc_on_pim:
        device[(ncls == "matmul") & (tr["layer_group"] >= 0)] = pim
    device[added] = link
    plan = Plan("attacc", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    if opts["pipeline"] and int(opts["subbatches"]) > 1 and batch >= int(opts["subbatches"]):
        plan.pipeline_subbatches = int(opts["subbatches"])
    if fc_on_pim:
        plan.notes.append(f"FC GEMV on PIM (batch {batch} <= {opts['fc_on_pim_max_batch']})")
    return plan
