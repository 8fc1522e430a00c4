"""cxl_pnm: LPDDR5X CXL-PNM devices hold weights and KV; their near-memory accelerators run decode.

After Samsung's CXL-PNM (Park et al., HPCA'24; shared/reference/cxl_reliability.md §1.1, devices.md
(e)) and CENT's GDDR6-AiM CXL devices (pim_dram.md b.4). Tensor parallelism across the PNM devices
(``parallelism.tp`` = PNM count), collectives over the CXL link/switch between them. Prefill runs on
a host GPU pool if the system has one and ``prefill_on_gpu`` (default true), with the prompt's KV
written to the devices over the GPU<->PNM link; otherwise on the PNM accelerators.
"""
from __future__ import annotations

import numpy as np

from attnsim.config import ConfigError
from attnsim.mapper.base import (MemoryPlacement, Plan, check_options, insert_rows, kv_writeback_rows,
                                 link_name_between, rank_weights, register, role_of_kind)

OPTIONS = {"prefill_on_gpu": True}


@register("cxl_pnm", options=OPTIONS)
def plan_cxl_pnm(trace, system, model_bytes: dict, options: dict | None = None) -> Plan:
    opts = check_options(options or {}, OPTIONS, "cxl_pnm")
    pnm = role_of_kind(system, "pim")
    if pnm is None:
        raise ConfigError("policy cxl_pnm needs a pool of kind pim (a CXL-PNM device)", key="devices")
    tp = system.spec.parallelism.tp
    par = system.spec.parallelism
    if system.pools[pnm].count != par.devices_per_replica * par.replicas:
        raise ConfigError(f"expected {par.device_formula()} PNM devices, got {system.pools[pnm].count}",
                          key=f"devices.{pnm}.count")
    gpu = role_of_kind(system, "gpu")
    memory = [MemoryPlacement(pnm, rank_weights(model_bytes, trace, tp), model_bytes["kv_per_rank"],
                              system.pools[pnm].model.capacity_bytes)]
    parallel = np.full(len(trace), tp, dtype=np.int64)
    if trace.phase == "prefill" and gpu is not None and opts["prefill_on_gpu"]:
        link = "link:" + link_name_between(system, gpu, pnm)
        ngpu = system.pools[gpu].count
        if ngpu != par.devices_per_replica * par.replicas:
            raise ConfigError(f"prefill_on_gpu runs the tensor-parallel prefill on the host GPUs: expected "
                              f"{par.device_formula()} GPUs (one per PNM device), got {ngpu}",
                              key=f"devices.{gpu}.count")
        tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
        device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
        device[added] = link
        # the host GPUs hold a copy of the weights for prefill (one TP rank's share, like the PNM devices)
        memory.append(MemoryPlacement(gpu, model_bytes["weights"] / tp, 0.0, system.pools[gpu].model.capacity_bytes))
        return Plan("cxl_pnm", tr, device, np.full(len(tr), tp, dtype=np.int64), memory)
    device = np.where(trace["cls"] == "allreduce", "link", pnm).astype(object)
    ctrl = role_of_kind(system, "cxl_controller")
    if ctrl is not None:  # CENT: softmax, RMSNorm and RoPE on the device controller's vector units
        if system.pools[ctrl].count != system.pools[pnm].count:
            raise ConfigError(f"expected one controller per PNM device ({system.pools[pnm].count}), "
                              f"got {system.pools[ctrl].count}", key=f"devices.{ctrl}.count")
        from attnsim.hwmodels.cxl_controller import kernel_of
        on_ctrl = np.array([kernel_of(str(o), str(c)) is not None for o, c in zip(trace["op"], trace["cls"])], bool)
        device[on_ctrl] = ctrl
    return Plan("cxl_pnm", trace, device, parallel, memory)
