"""GPU board power as a function of activity, and the energy of one op from it.

Per GPU, while an op runs for ``t_op`` seconds (``t_body`` of it the kernel body, the rest launch/tail)::

    P = idle_power_w                                   static: idle with a CUDA context and weights resident
      + sm_active_power_w * occupancy * t_body / t_op  "active": SM clocks, warp issue, register files,
                                                       L2/crossbar/uncore switching while a kernel runs
      + compute_pj_per_flop * FLOPs / t_op             "compute": tensor-core/ALU arithmetic incl. operand
                                                       delivery (marginal energy per FLOP)
      + (l1 + l2) pJ/B * HBM bytes / t_op              "sram": every HBM byte passes L2 and L1 once
      + HBM pJ/bit * bits / t_op                       "dram_*": activate / array+column / TSV+PHY I/O
    P <= tdp_w                                         board power limit: the dynamic part is scaled down

``occupancy`` is the fraction of SMs the kernel keeps busy (1 for bandwidth-bound kernels, which keep
every SM issuing loads; a matmul with fewer CTAs than SMs leaves the rest idle). Memory-bound decode
therefore draws ``idle + sm_active_power_w + HBM`` -- most of a GPU's serving power -- even though
its FLOP share is a few percent. The power cap is applied to the average over one costing call (a step
on one GPU): above it the GPU would clock down (its effect on time is not modelled; the energy is
charged at the cap).

Only the dynamic components are returned (the engine adds ``idle_power_w`` x time as ``static``), so the
breakdown keeps compute / active / sram / dram / link / static apart.
"""

from __future__ import annotations

import numpy as np

from attnsim.hwmodels.base import ceil_div

DYNAMIC_GPU_COMPONENTS = ("compute", "active", "sram", "dram_activate", "dram_read_write", "dram_io")


def matmul_occupancy(spec, m, n, k, batch) -> np.ndarray:
    """Fraction of SMs a (batch x) m x k @ k x n matmul keeps busy: CTAs (first tile, split-K up to
    ``max_split_k`` with K slices >= ``min_k_split``, as :meth:`GPUModel.matmul_compute_time_s`) / SMs, <= 1."""
    m = np.maximum(np.asarray(m, dtype=np.int64), 1)
    n = np.maximum(np.asarray(n, dtype=np.int64), 1)
    k = np.maximum(np.asarray(k, dtype=np.int64), 1)
    batch = np.maximum(np.asarray(batch, dtype=np.int64), 1)
    tile_m, tile_n = spec.tiles[0]
    tm = np.minimum(tile_m, ceil_div(m, spec.mma_m) * spec.mma_m)
    tiles = batch * ceil_div(m, tm) * ceil_div(n, tile_n)
    split = np.clip(k // spec.min_k_split, 1, spec.max_split_k if spec.split_k else 1)
    split = np.minimum(split, np.maximum(1, ceil_div(spec.num_sms, tiles)))
    return np.atleast_1d(np.minimum(1.0, tiles * split / spec.num_sms))


def op_energy_j(spec, t_op_s, t_body_s, occupancy, flops, hbm_bytes, count=None) -> dict:
    """Dynamic energy (J) by component of ops on ONE GPU (arrays over ops, per repeat), capped at ``tdp_w``
    on average over the ops costed together (``count`` repeats each: one step on one GPU): the board's
    power limiter acts over a window of milliseconds, not per kernel, so a short power-hungry kernel
    (a prefill GEMM) may exceed the cap while the step as a whole stays under it."""
    t_op = np.asarray(t_op_s, dtype=np.float64)
    t_body = np.minimum(np.asarray(t_body_s, dtype=np.float64), t_op)
    flops = np.asarray(flops, dtype=np.float64)
    hbm = np.asarray(hbm_bytes, dtype=np.float64)
    e = {
        "compute": flops * spec.compute_pj_per_flop * 1e-12,
        "active": spec.sm_active_power_w * np.clip(occupancy, 0.0, 1.0) * t_body,
        "sram": hbm * (spec.l2_pj_per_byte + spec.l1_pj_per_byte) * 1e-12,
        **spec.dram_energy_j(hbm),
    }
    w = np.ones_like(t_op) if count is None else np.asarray(count, dtype=np.float64)
    dyn = float(np.sum(sum(e.values()) * w))
    budget = max(spec.tdp_w - spec.idle_power_w, 0.0) * float(np.sum(t_op * w))
    scale = budget / dyn if dyn > budget else 1.0
    return {k: v * scale for k, v in e.items()}


def power_w(spec, t_op_s, energy_j: dict) -> np.ndarray:
    """Board power per op (W): idle + dynamic energy / time (0-time ops draw idle)."""
    t = np.asarray(t_op_s, dtype=np.float64)
    dyn = sum(np.asarray(v, dtype=np.float64) for v in energy_j.values())
    with np.errstate(invalid="ignore", divide="ignore"):
        return spec.idle_power_w + np.where(t > 0, dyn / np.where(t > 0, t, 1.0), 0.0)
