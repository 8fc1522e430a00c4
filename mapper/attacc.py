"""attacc: FC/GEMM on GPUs, decode attention on HBM-PIM stacks that hold the KV cache.

After AttAcc (Park et al., ASPLOS'24; scale-snu/attacc_simulator, shared/reference/pim_dram.md b.1,
b.6). Each tensor-parallel GPU rank is paired with one PIM device (an AttAcc board of HBM3-PIM
stacks) that holds that rank's KV heads, so the PIM pool must have ``tp`` devices.

Decode: attention score, softmax and context run on the PIM device; q and the new token's K/V
go GPU -> PIM and the attention output PIM -> GPU over the link between the two pools (one transfer
row each per layer). Prefill stays on the GPUs and writes the prompt's KV into the PIM stacks.

Options (``mapper.options`` in the system YAML; AttAcc's own two are ``pipeopt`` and ``ffopt``, the
artefact's ``--pipeopt`` / ``--ffopt``, mechanisms in mapper/attacc_overlap.py):
- ``pipeopt`` (bool, default false): per layer, the QKV-generation and output-projection FCs (GPU),
  the GPU <-> PIM transfers and the PIM attention are pipelined over heads: the layer's attention
  block takes its busiest resource's time plus 1 / (query heads per rank) of the others' (fill and
  drain). No batch split, no weight read twice: bytes and energy are those of no option.
- ``ffopt`` (bool, default false): each dense FFN layer is split between the GPU and the PIM stacks,
  which compute their share at their internal bandwidth (one pass over the share per request) while
  the GPU reads its share once; the share balances the two (device-model times, transfers over the
  GPU-PIM link included) and is capped by the PIM capacity left next to the KV cache. The PIM share
  of the FFN weights is stored in the stacks (counted in their capacity); the GPUs keep all weights
  (prefill runs the whole FFN on them).
- ``pipeline`` (bool, default false) with ``subbatches`` (default 2): NeuPIMs-style sub-batch
  interleaving, NOT AttAcc's pipelining: the decode batch is split into sub-batches, attention (PIM)
  of one overlaps FC (GPU) of another, and every sub-batch reads the FC weights again
  (engine.cost_step_pipelined). ``pipeopt`` and ``ffopt`` are refused with it (the sub-batch period
  is bounded by each device's busy time, which a concurrent stage inside a sub-batch would hide).
- ``fc_on_pim_max_batch`` (int, default 0): at decode batch sizes up to this, all FC GEMVs run on
  the PIM stacks' internal bandwidth; every weight is then stored in the PIM stacks as well (counted
  in their capacity). At those batches it takes precedence over ``ffopt``.
"""

from __future__ import annotations

import numpy as np

from attnsim.mapper.attacc_overlap import (
    balance_share,
    decode_ffn_probe,
    ffn_weight_bytes,
    head_pipeline_stages,
    split_ffn,
)
from attnsim.mapper.base import (
    Plan,
    attention_decode_rows,
    attention_devices,
    attention_memory,
    attention_prefill,
    check_options,
    pim_pair,
    rank_weights,
    register,
)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"pipeopt": False, "ffopt": False, "pipeline": False, "subbatches": 2, "fc_on_pim_max_batch": 0}


@register(
    "attacc",
    options=OPTIONS,
    needs={"subbatches": ("pipeline", True), "pipeopt": ("pipeline", False), "ffopt": ("pipeline", False)},
    attention_on=True,
)
def plan_attacc(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "attacc")
    gpu, pim, link = pim_pair(system, "attacc")
    tp = system.spec.parallelism.tp
    act_bytes = DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")]
    batch = int(len(trace.query_tokens))
    fc_on_pim = trace.phase == "decode" and batch <= int(opts["fc_on_pim_max_batch"])
    pim_weights = rank_weights(model_bytes, trace, tp) if opts["fc_on_pim_max_batch"] else 0.0
    pim_cap = system.pools[pim].model.capacity_bytes
    notes = []
    f_ffn = 0.0
    if opts["ffopt"] and not fc_on_pim:
        ffn_w = ffn_weight_bytes(trace)
        free = pim_cap - model_bytes["kv_per_rank"] - pim_weights
        cap = 1.0 if pim_weights else (min(1.0, max(0.0, free) / ffn_w) if ffn_w > 0 else 0.0)
        f_ffn = balance_share(system, decode_ffn_probe(trace), gpu, pim, link, act_bytes, cap)
        if not pim_weights:
            pim_weights += f_ffn * ffn_w
        notes.append(
            f"ffopt: {f_ffn:.1%} of the FFN on the PIM stacks (capacity allows {cap:.1%})"
            if ffn_w > 0
            else "ffopt: no dense FFN rows (MoE experts stay on the GPUs)"
        )
    # the attention split itself is the shared mechanism (mapper/base.py place_attention); AttAcc adds
    # its FFN share, FC-on-PIM and the pipelining below
    memory = attention_memory(system, trace, model_bytes, gpu, pim, tp, pim_weights)
    if trace.phase == "prefill":
        # attention and the whole FFN on the GPUs; the prompt's K/V are written into the PIM stacks
        tr, device = attention_prefill(trace, gpu, link)
        return Plan("attacc", tr, device, np.full(len(tr), tp, dtype=np.int64), memory, notes=notes)
    tr = attention_decode_rows(trace, act_bytes)
    ffn_group = np.full(len(tr), -1, dtype=np.int64)
    role = np.full(len(tr), None, dtype=object)
    if f_ffn > 0:
        tr, role, ffn_group, _, _ = split_ffn(tr, f_ffn, act_bytes)
    ncls = tr["cls"]
    device = attention_devices(tr, gpu, pim, link)
    if fc_on_pim:
        device[(ncls == "matmul") & (tr["layer_group"] >= 0)] = pim
    device[role == "pim"] = pim
    plan = Plan("attacc", tr, device, np.full(len(tr), tp, dtype=np.int64), memory, notes=notes)
    stage = np.full(len(tr), -1, dtype=np.int64)
    if opts["pipeopt"]:
        heads = int(trace.meta.get("heads_per_rank", 1) or 1)
        head_pipeline_stages(tr, stage, plan.stage_exposed, heads)
        if heads == 1:
            notes.append("pipeopt: one head per rank, nothing to pipeline over")
    stage[ffn_group >= 0] = 2 * ffn_group[ffn_group >= 0] + 1
    if (stage >= 0).any():
        plan.stage = stage
    if opts["pipeline"] and int(opts["subbatches"]) > 1 and batch >= int(opts["subbatches"]):
        plan.pipeline_subbatches = int(opts["subbatches"])
    if fc_on_pim:
        notes.append(f"FC GEMV on PIM (batch {batch} <= {opts['fc_on_pim_max_batch']})")
    return plan
