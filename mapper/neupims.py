"""neupims: GEMMs on an NPU (systolic arrays), decode attention GEMV on the HBM-PIM that is the NPU's
own memory (NeuPIMs, casys-kaist/NeuPIMs; shared/reference/pim_dram.md b.2, b.5).

The NPU and the PIM share one HBM: weights and KV both live in the PIM pool's memory. Options:

* ``subbatches`` (default 2): the batch is split and pipelined (runner: engine.cost_step_pipelined),
  the attention of one sub-batch overlapping the GEMMs of the other (NeuPIMs' stages B-D,
  src/StageProgram.cc: SA runs QKV / projection + FFN of one sub-batch while PIM runs MHA of the other).
* ``subbatch_split`` (default ``per_channel``): how the sub-batches are formed. ``per_channel`` is NeuPIMs'
  (src/scheduler/Scheduler.cc group_sub_batches): the whole batch is placed on channels (the PIM's
  ``channel_assignment``), then each channel's requests are halved, so every sub-batch holds half of every
  channel's load and keeps the batch's channels (the runner passes them as trace ``meta["channel_assignment"]``);
  applies with ``isa: newton`` (another PIM spreads every request over all channels: the list's halves).
  ``list``: contiguous slices of the request list, each sub-batch placed on its own.
* ``dual_row_buffer`` (default true): with a Newton/NeuPIMs PIM (``isa: newton``), in a sub-batch of a
  pipelined step (the runner marks its trace ``meta["subbatch_of"]``), the concurrent sub-batch's NPU
  memory traffic (its GEMMs' weight stream, its new K/V writes, and the NPU's time for them) is recorded
  in the trace (``meta["neupims_rowbuffer"]``) and timed with the PIM commands on the DRAM engine
  (hwmodels/rowbuffer.py): single row buffer = the channel serves PIM tiles and NPU traffic in turns,
  the NPU first, each switch re-opening the other's rows (the npu+pim baseline's controller); dual = PIM
  on its own row buffer. With
  another PIM ISA there is no such model: a single row buffer then runs the ops one after another.

With ``isa: newton`` softmax runs on the NPU's vector units (NeuPIMs: the logits come back by READRES,
the probabilities go out by GWRITE, both inside the PIM lowering, isa/lower_newton.py); q and the
attention output move by those commands too, so only the new K/V tokens are a separate transfer.
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.mapper.base import (
    ATTENTION_CLASSES,
    MemoryPlacement,
    Plan,
    attention_io_rows,
    check_options,
    insert_rows,
    kv_writeback_rows,
    pim_pair,
    register,
    transfer_row,
)
from attnsim.workloads.model import DTYPE_BYTES

OPTIONS = {"dual_row_buffer": True, "subbatches": 2, "subbatch_split": "per_channel"}
SPLITS = ("per_channel", "list")


def per_channel_parts(channels: np.ndarray, s: int) -> list:
    """Sub-batches as NeuPIMs forms them (casys-kaist/NeuPIMs f299af3 src/scheduler/Scheduler.cc
    group_sub_batches, _partition_alg_simple = true): channel by channel, the first share of a channel's
    requests (batch order) to sub-batch 1, the rest to the next; a channel with an odd count gives its extra
    request to sub-batch 1 and 2 in turn (ceil_turn). Returns [(request indices, channel of each)]."""
    parts = [[] for _ in range(s)]
    turn = 0
    for c in sorted(set(channels.tolist())):
        reqs = np.flatnonzero(channels == c).tolist()
        base, rem = divmod(len(reqs), s)
        sizes = [base + (1 if (b - turn) % s < rem else 0) for b in range(s)]
        turn = (turn + rem) % s
        lo = 0
        for b, n in enumerate(sizes):
            parts[b] += reqs[lo : lo + n]
            lo += n
    return [(np.asarray(p, dtype=np.int64), [max(0, int(channels[i])) for i in p]) for p in parts if p]


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


@register("neupims", options=OPTIONS)
def plan_neupims(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "neupims")
    if opts["subbatch_split"] not in SPLITS:
        raise ConfigError(
            f"expected one of {', '.join(SPLITS)}, got {opts['subbatch_split']!r}", key="mapper.options.subbatch_split"
        )
    npu, pim, link = pim_pair(system, "neupims")
    tp = system.spec.parallelism.tp
    memory = [
        MemoryPlacement(
            pim, model_bytes["weights"] / tp, model_bytes["kv_per_rank"], system.pools[pim].model.capacity_bytes
        )
    ]
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
            before[int(i)] = [
                transfer_row(
                    "pim_write_kv",
                    {"layer_group": grp[i], "count": trace["count"][i]},
                    float(np.sum(trace["kv_write_bytes"][same])),
                )
            ]
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
        tr.meta["neupims_rowbuffer"] = {
            "mode": "dual" if opts["dual_row_buffer"] else "single",
            **concurrent_npu_traffic(tr, device, npu, system.pools[npu].model),
        }
    plan = Plan("neupims", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    if pipelined and (opts["dual_row_buffer"] or newton):
        plan.pipeline_subbatches = s
        if opts["subbatch_split"] == "per_channel" and newton and "subbatch_of" not in trace.meta:
            from attnsim.hwmodels.rowbuffer import newton_request_channels

            i = int(np.flatnonzero(tr["cls"] == "attn_score")[0])
            chans = newton_request_channels(system.pools[pim].model, tr, i)
            if chans is not None:
                plan.subbatch_parts = per_channel_parts(chans, s)
        elif opts["subbatch_split"] == "per_channel" and options and "subbatch_split" in options and not newton:
            raise ConfigError(
                "expected list (per_channel splits the requests each channel holds: a PIM with "
                "isa newton places whole requests on channels), got per_channel",
                key="mapper.options.subbatch_split",
            )
    return plan
