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

from attnsim.config import ConfigError
from attnsim.mapper.base import (ATTENTION_CLASSES, MemoryPlacement, Plan, insert_rows, link_name_between,
                                 register, role_of_kind, transfer_row)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"pipeline": False, "subbatches": 2, "fc_on_pim_max_batch": 0}


def check_options(options: dict, allowed: dict, policy: str) -> dict:
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ConfigError(f"unknown option(s) {', '.join(bad)} for policy {policy} (known: {', '.join(allowed)})",
                          key="mapper.options")
    return {**allowed, **options}


def pim_pair(system, policy: str):
    """(gpu role, pim role, link device id) with the PIM pool matched to the TP ranks."""
    gpu = role_of_kind(system, "gpu", "npu")
    pim = role_of_kind(system, "pim")
    if gpu is None or pim is None:
        raise ConfigError(f"policy {policy} needs a gpu/npu pool and a pim pool (have: "
                          f"{', '.join(f'{r}: {p.model.kind}' for r, p in system.pools.items())})", key="devices")
    tp = system.spec.parallelism.tp
    if system.pools[pim].count != tp * system.spec.parallelism.replicas:
        raise ConfigError(f"policy {policy} pairs each tensor-parallel rank with one PIM device: expected "
                          f"{tp * system.spec.parallelism.replicas} PIM devices, got {system.pools[pim].count}",
                          key=f"devices.{pim}.count")
    return gpu, pim, "link:" + link_name_between(system, gpu, pim)


def attention_io_rows(trace, act_bytes: float) -> tuple[dict, dict]:
    """Transfer rows around each attention block: q + the new token's K/V in, the output back.

    Returns (before, after) insert maps for ``insert_rows``.
    """
    meta, cls, grp = trace.meta, trace["cls"], trace["layer_group"]
    b = float(np.sum(trace.query_tokens))
    q_bytes = b * meta["heads_per_rank"] * meta.get("attn_score_dim", meta["head_dim"]) * act_bytes
    o_bytes = b * meta["heads_per_rank"] * meta.get("attn_context_dim", meta["head_dim"]) * act_bytes
    before, after = {}, {}
    for i in np.nonzero(cls == "attn_score")[0]:
        same = (grp == grp[i]) & np.isin(cls, ATTENTION_CLASSES)
        kv_new = float(np.sum(trace["kv_write_bytes"][same]))
        like = {"layer_group": grp[i], "count": trace["count"][i]}
        before[int(i)] = [transfer_row("pim_send_q_kv", like, q_bytes + kv_new)]
    for j in np.nonzero(cls == "attn_context")[0]:
        like = {"layer_group": grp[j], "count": trace["count"][j]}
        after[int(j)] = [transfer_row("pim_recv_out", like, o_bytes)]
    return before, after


def kv_writeback_rows(trace) -> dict:
    """After each prefill attention block: write the prompt's K/V into the PIM stacks."""
    cls, grp = trace["cls"], trace["layer_group"]
    after = {}
    for j in np.nonzero(cls == "attn_context")[0]:
        same = (grp == grp[j]) & np.isin(cls, ATTENTION_CLASSES)
        like = {"layer_group": grp[j], "count": trace["count"][j]}
        after[int(j)] = [transfer_row("pim_write_kv", like, float(np.sum(trace["kv_write_bytes"][same])))]
    return after


@register("attacc")
def plan_attacc(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "attacc")
    gpu, pim, link = pim_pair(system, "attacc")
    tp = system.spec.parallelism.tp
    act_bytes = DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")]
    cls = trace["cls"]
    batch = int(len(trace.query_tokens))
    fc_on_pim = trace.phase == "decode" and batch <= int(opts["fc_on_pim_max_batch"])
    pim_weights = model_bytes["weights"] / tp if opts["fc_on_pim_max_batch"] else 0.0
    memory = [MemoryPlacement(gpu, model_bytes["weights"] / tp, 0.0, system.pools[gpu].model.capacity_bytes),
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
