"""tiered: the KV cache split across tiers, attention computed where each part lives.

A ``hot_fraction`` of every request's KV (the most recent tokens) stays in GPU HBM; the rest lives
in a PIM/PNM pool paired with the GPU ranks (AttAcc-style: one device per rank). Each attention op
is split into a GPU part and a far part that run concurrently; the far part returns its partial
output with the running max and sum of the softmax (FlashAttention-style partial-softmax
reduction), and the GPU merges the two. Split rows keep the model's FLOPs and bytes (they only
move). New tokens' K/V are written to the hot tier.

Tier traffic follows the placement: the far tier holds ``1 - hot_fraction`` of every request's KV, so that share
of every K/V byte written crosses the GPU <-> far link once. Prefill writes the prompt's older ``1 - hot_fraction``
there (the recent ``hot_fraction`` stays in HBM); each decode step moves ``1 - hot_fraction`` of the step's new
K/V bytes (the tokens leaving the sliding hot window) over the link (``far_migrate_kv``).
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
    kv_writeback_rows,
    pim_pair,
    rank_weights,
    register,
    transfer_row,
)
from attnsim.workloads.model import DTYPE_BYTES
from attnsim.workloads.optrace import OpTrace

OPTIONS = {"hot_fraction": 0.25}
SPLIT = ("n", "flops", "kv_read_bytes", "act_bytes")


@register("tiered", options=OPTIONS)
def plan_tiered(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "tiered")
    f = float(opts["hot_fraction"])
    if not 0 <= f <= 1:
        raise ConfigError(f"expected 0 <= hot_fraction <= 1, got {f}", key="mapper.options.hot_fraction")
    gpu, far, link = pim_pair(system, "tiered")
    tp = system.spec.parallelism.tp
    kv = model_bytes["kv_per_rank"]
    memory = [
        MemoryPlacement(gpu, rank_weights(model_bytes, trace, tp), kv * f, system.pools[gpu].model.capacity_bytes),
        MemoryPlacement(far, 0.0, kv * (1 - f), system.pools[far].model.capacity_bytes),
    ]
    if f == 0.0:  # all KV far: exactly the attacc placement
        from attnsim.mapper.attacc import plan_attacc

        plan = plan_attacc(trace, system, model_bytes, {})
        plan.policy, plan.memory = "tiered", memory
        return plan
    if trace.phase == "prefill":
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace, 1.0 - f))
        device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
        device[added] = link
        return Plan("tiered", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    rows, dev, stage, added = [], [], [], []
    act = DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")]
    b = float(np.sum(trace.query_tokens))
    heads, dh = trace.meta["heads_per_rank"], trace.meta.get("attn_context_dim", trace.meta["head_dim"])
    migrate = {int(i): rs[0] for i, rs in kv_writeback_rows(trace, 1.0 - f, "far_migrate_kv").items()}
    for i, r in enumerate(trace.rows()):
        r = dict(r)
        if r["cls"] in ATTENTION_CLASSES and 0 < f < 1:
            if r["cls"] == "attn_score":  # q goes to the far tier
                like = {"layer_group": r["layer_group"], "count": r["count"]}
                rows.append(transfer_row("far_send_q", like, b * heads * trace.meta.get("attn_score_dim", dh) * act))
                dev.append(link)
                stage.append(-1)
                added.append(len(rows) - 1)
            hot, cold = dict(r), dict(r)
            for c in SPLIT:
                hot[c] = r[c] * f if c != "n" else int(round(r[c] * f))
                cold[c] = r[c] - hot[c]
            cold["kv_write_bytes"] = 0.0
            cold["op"] = r["op"] + "_far"
            rows += [hot, cold]
            dev += [gpu, far]
            stage += [int(r["layer_group"]), int(r["layer_group"])]
            if r["cls"] == "attn_context":  # partial outputs + softmax max/sum back, then merged on the GPU
                like = {"layer_group": r["layer_group"], "count": r["count"]}
                if migrate[i]["comm_bytes"] > 0:  # the step's K/V share leaving the hot window
                    rows.append(migrate[i])
                    dev.append(link)
                    stage.append(-1)
                    added.append(len(rows) - 1)
                rows.append(transfer_row("far_partial_out", like, b * heads * (dh + 2) * act))
                dev.append(link)
                stage.append(-1)
                added.append(len(rows) - 1)
                rows.append(
                    {
                        **like,
                        "op": "softmax_merge",
                        "cls": "elementwise",
                        "m": int(b),
                        "n": heads * dh,
                        "k": 0,
                        "batch": 1,
                        "flops": 4.0 * b * heads * dh,
                        "weight_bytes": 0.0,
                        "act_bytes": 3.0 * b * heads * (dh + 2) * act,
                        "kv_read_bytes": 0.0,
                        "kv_write_bytes": 0.0,
                        "comm_bytes": 0.0,
                    }
                )
                dev.append(gpu)
                stage.append(-1)
                added.append(len(rows) - 1)
            continue
        rows.append(r)
        dev.append("link" if r["cls"] == "allreduce" else gpu)
        stage.append(-1)
    tr = OpTrace.from_rows(
        rows,
        phase=trace.phase,
        model=trace.model,
        tp=trace.tp,
        query_tokens=trace.query_tokens,
        context_lens=trace.context_lens,
        groups=trace.groups,
        meta=dict(trace.meta),
    )
    mask = np.zeros(len(tr), dtype=bool)
    mask[added] = True
    return Plan(
        "tiered",
        tr,
        np.array(dev, dtype=object),
        np.full(len(tr), tp, dtype=np.int64),
        memory,
        stage=np.array(stage, dtype=np.int64),
        added=mask,
    )
