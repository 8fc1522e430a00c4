"""cxl_pnm: LPDDR5X CXL-PNM devices hold weights and KV; their near-memory accelerators run decode.

After Samsung's CXL-PNM (Park et al., HPCA'24; shared/reference/cxl_reliability.md §1.1, devices.md
(e)) and CENT's GDDR6-AiM CXL devices (pim_dram.md b.4). Tensor parallelism across the PNM devices
(``parallelism.tp`` = PNM count), collectives over the CXL link/switch between them. Prefill runs on
a host GPU pool if the system has one and ``prefill_on_gpu`` (default true), tensor parallel over the
host GPUs of a replica (``host_tp``: any count, e.g. 2 GPUs for 8 PNM devices), with the prompt's KV
written to the devices over the GPU<->PNM link; otherwise on the PNM accelerators.
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.mapper.base import (
    MemoryPlacement,
    Plan,
    check_options,
    insert_rows,
    kv_writeback_rows,
    link_name_between,
    rank_weights,
    register,
    role_of_kind,
)

# tp_vector_ops default "split": each device runs the softmax and RoPE of the heads it holds, as tensor parallelism
# over heads does (Megatron-LM, Shoeybi et al. 2019 section 3: attention heads are partitioned across ranks and
# need no communication until the output projection). The heads' scores live in the device's own banks, so
# nothing forces another device to run them. "replicated" is CENT's artefact (its traces run all heads on every
# device): a condition of the CENT reproduction and the cent_* presets, not a hardware fact.
OPTIONS = {"prefill_on_gpu": True, "tp_vector_ops": "split"}
TP_VECTOR_OPS = ("split", "replicated")


def host_tp(system, options: dict | None = None) -> int | None:
    """Tensor-parallel width of the host-GPU prefill: the host GPUs of one replica (any count, not tied
    to the PNM devices); None when prefill runs on the PNM devices."""
    opts = check_options(options or {}, OPTIONS, "cxl_pnm")
    gpu = role_of_kind(system, "gpu")
    if gpu is None or not opts["prefill_on_gpu"]:
        return None
    ngpu, par = system.pools[gpu].count, system.spec.parallelism
    if par.pp > 1 or ngpu % par.replicas:
        raise ConfigError(
            f"expected a multiple of replicas = {par.replicas} host GPUs (pp = 1), got {ngpu}"
            + (f" with pp = {par.pp}" if par.pp > 1 else ""),
            key=f"devices.{gpu}.count",
        )
    return ngpu // par.replicas


@register("cxl_pnm", options=OPTIONS, values={"tp_vector_ops": TP_VECTOR_OPS})
def plan_cxl_pnm(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "cxl_pnm")  # tp_vector_ops one of TP_VECTOR_OPS (register)
    pnm = role_of_kind(system, "pim")
    if pnm is None:
        raise ConfigError("policy cxl_pnm needs a pool of kind pim (a CXL-PNM device)", key="devices")
    tp = system.spec.parallelism.tp
    par = system.spec.parallelism
    if system.pools[pnm].count != par.devices_per_replica * par.replicas:
        raise ConfigError(
            f"expected {par.device_formula()} PNM devices, got {system.pools[pnm].count}", key=f"devices.{pnm}.count"
        )
    gpu = role_of_kind(system, "gpu")
    pnm_weights = rank_weights(model_bytes, trace, tp) if trace.tp == tp else model_bytes["weights"] / tp
    dev = system.pools[pnm].model
    ratio = getattr(dev, "stored_ratio", lambda kind, dtype=None: 1.0)  # CXL-NDP compression (hwmodels/compression.py)
    rw, rk = ratio("weights", trace.meta.get("weight_dtype")), ratio("kv", trace.meta.get("kv_dtype"))
    memory = [MemoryPlacement(pnm, pnm_weights * rw, model_bytes["kv_per_rank"] * rk, dev.capacity_bytes)]
    parallel = np.full(len(trace), tp, dtype=np.int64)
    if trace.phase == "prefill" and gpu is not None and opts["prefill_on_gpu"]:
        link = "link:" + link_name_between(system, gpu, pnm)
        gtp = host_tp(system, options)
        if trace.tp != gtp:  # the runner builds the prefill trace at host_tp (serving builds it at tp)
            raise ConfigError(
                f"prefill_on_gpu runs the prefill tensor-parallel over the {gtp} host GPUs of a "
                f"replica: expected a prefill trace of tp {gtp}, got {trace.tp} (serving needs "
                f"one host GPU per PNM device)",
                key=f"devices.{gpu}.count",
            )
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
        device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
        device[added] = link  # each host GPU writes its KV shard to the PNM devices over its own port
        comp = getattr(dev.spec, "compression", None)
        if comp is not None and comp.link:  # the KV crosses the link compressed (an engine at the host end too)
            tr.cols["comm_bytes"] = np.where(added, tr.cols["comm_bytes"] * rk, tr.cols["comm_bytes"])
        # the host GPUs hold a copy of the weights for prefill (one host-TP rank's share)
        memory.append(
            MemoryPlacement(gpu, rank_weights(model_bytes, trace, gtp), 0.0, system.pools[gpu].model.capacity_bytes)
        )
        return Plan("cxl_pnm", tr, device, np.full(len(tr), gtp, dtype=np.int64), memory)
    ctrl = role_of_kind(system, "cxl_controller")
    added = None
    if ctrl is not None:  # CENT: softmax, RMSNorm and RoPE on the device controller's vector units
        if system.pools[ctrl].count != system.pools[pnm].count:
            raise ConfigError(
                f"expected one controller per PNM device ({system.pools[pnm].count}), got {system.pools[ctrl].count}",
                key=f"devices.{ctrl}.count",
            )
        trace, added = softmax_io_rows(trace, replicated=opts["tp_vector_ops"] == "replicated")
        parallel = np.full(len(trace), tp, dtype=np.int64)
    if opts["tp_vector_ops"] == "replicated" and tp > 1:
        trace = replicate_vector_ops(trace, tp)
    device = np.where(trace["cls"] == "allreduce", "link", pnm).astype(object)
    if ctrl is not None:
        from attnsim.hwmodels.cxl_controller import kernel_of

        on_ctrl = np.array([kernel_of(str(o), str(c)) is not None for o, c in zip(trace["op"], trace["cls"])], bool)
        device[on_ctrl & ~added] = ctrl
        if opts["tp_vector_ops"] == "replicated" and tp > 1:
            # CENT's energy counts the vector work once (run_sim.py: energy_main + energy_FC x (FC_devices - 1):
            # one device's trace holds it, the others' only their FCs): energy on one device, time unchanged
            parallel[on_ctrl | added] = 1
    return Plan("cxl_pnm", trace, device, parallel, memory, added=added)


def softmax_io_rows(trace, replicated: bool = False):
    """CENT's controller vector work as its traces run it on the banks: after each softmax row a
    ``softmax_io`` row, the scores' trips between the banks and the controller (isa/lower.py
    ``_aim_softmax_io``); in decode, after each RMSNorm / RoPE / FFN activation row a ``<op>_io``
    row, their operands' trips and in-bank multiplies (isa/lower.py ``lower_aim_vector_io``; ``n`` =
    the vector length, RoPE: ``n`` / ``k`` = the q / k elements; all heads / the whole FFN width when
    ``replicated``, as CENT's main-device trace). Returns (trace, mask of the added rows)."""
    from attnsim.hwmodels.cxl_controller import NORM_OPS, ROPE_OPS
    from attnsim.isa.lower import ACT_OPS
    from attnsim.mapper.base import insert_rows

    meta, rep = trace.meta, (trace.tp if replicated else 1)
    after = {}
    for i, r in enumerate(trace.rows()):
        op, cls = str(r["cls"]), str(r["op"])
        if op == "softmax":
            after[i] = [dict(r, op="softmax_io")]
        elif trace.phase == "decode" and op == "elementwise" and cls in NORM_OPS:
            after[i] = [dict(r, op=f"{cls}_io", n=int(meta.get("hidden_size", r["n"])))]
        elif trace.phase == "decode" and op == "elementwise" and cls in ACT_OPS:
            full = int(meta.get("intermediate_size", 0)) if replicated else 0
            after[i] = [dict(r, op=f"{cls}_io", n=full or int(r["n"]))]
        elif trace.phase == "decode" and op == "elementwise" and cls in ROPE_OPS and meta.get("head_dim"):
            hd = int(meta["head_dim"])
            after[i] = [
                dict(
                    r,
                    op=f"{cls}_io",
                    n=int(meta["heads_per_rank"]) * hd * rep,
                    k=int(meta["kv_heads_per_rank"]) * hd * rep,
                )
            ]
    tr, _, added = insert_rows(trace, after=after)
    return tr, added


def replicate_vector_ops(trace, tp: int):
    """``tp_vector_ops: replicated``: every device runs the softmax and the RoPE of all heads, not its
    rank's share, as CENT's tensor-parallel runs do (Yufeng98/CENT @ 8c79786: ``function_sim.py
    --model-parallel`` traces ``store_for_EWMUL_score_only_trace`` over all ``n_heads``, and ``run_sim.py
    calculate_acc_latency`` costs softmax over ``n_heads`` and RoPE over ``embedding_size`` on every
    device, while the FCs and the score/context GEMVs are split). Those rows (softmax, its ``softmax_io``,
    rope) carry ``tp`` x the rank's heads and work. The K/V caches stay split (no extra capacity) and, as
    in CENT, nothing more moves between devices for it. Their energy (and their bank-side ``_io`` rows')
    counts on one device (plan_cxl_pnm: parallel 1), as CENT's energy_main. Returns a new trace."""
    from attnsim.mapper.base import insert_rows

    trace = insert_rows(trace)[0]  # a copy: the caller's trace is shared
    rep = (np.asarray(trace["cls"]) == "softmax") | (np.asarray(trace["op"]) == "rope")
    for col in ("batch", "flops"):
        trace.cols[col] = np.where(rep, trace.cols[col] * tp, trace.cols[col]).astype(trace.cols[col].dtype)
    return trace


plan_cxl_pnm.prefill_tp = host_tp  # the runner builds the prefill trace at this width (attnsim/sim/runner.py)
plan_cxl_pnm.own_compute_pool_check = True  # the PNM count is checked here; host GPUs are free in number
