"""GPU device model: tile/wave-quantised compute + bytes-dependent HBM efficiency + kernel overheads.

Per row (one repeat), after shared/reference/gpu_calibration.md §7:

* ``matmul``: ``t = t_kernel + smax(t_compute, t_memory)`` (p-norm smooth max, ``overlap_p``; fitted per GPU,
  see the preset YAMLs; ``overlap_p: .inf`` gives the plain max).

  - ``t_memory = bytes / (BW * eta(bytes))`` with ``eta(b) = mem_eta_max * b / (b + min(b, mem_half_bytes))``:
    eta saturates from ~0.6 at tens of MB to ~mem_eta_max at hundreds of MB. Algebraically this is
    ``(b + min(b, mem_half_bytes)) / (BW * mem_eta_max)``, i.e. a fixed "tail" cost of ``mem_half_bytes``
    of streaming, which is what the small-matrix rows of gpu_calibration.md §4.1 show; the tail never
    exceeds the transfer itself, so tiny kernels (a 1-token residual add, 2 us in §4.1) stay launch-bound.
  - ``t_compute``: the output (M x N, ``batch`` times) is cut into tiles ``tm x tn``; M below ``tm`` is
    padded only to the MMA granularity ``mma_m`` (GEMV-like kernels for decode); ``waves = ceil(tiles /
    num_sms)``; with fewer tiles than SMs the K loop is split (split-K) over the idle SMs. Per wave,
    ``t_wave = 2 * tm * tn * (K_split + k_overhead) / (peak_per_sm * compute_eta)``: ``k_overhead`` is the
    per-tile prologue/epilogue (pipeline fill, output write, split-K reduction) expressed as K-depth, so
    shallow-K GEMMs reach a lower fraction of peak (vidur §4.1: A100 out-proj K=2,048 at 62 % vs K=8,192
    at 80 %). cuBLAS picks the kernel per shape; the model takes the fastest of the candidate ``tiles``
    (each with its best split-K), which is what its heuristics approximate. Small M therefore wastes
    compute (padding), and partial last waves cost a whole wave.
* ``attn_score`` / ``attn_context``: roofline on the KV (+activation) bytes and FLOPs with attention
  efficiencies; ``software_stack: eager`` uses the unfused PyTorch efficiencies (§4.2: 53-70 % of peak
  BW), ``fused`` the flash-decoding ones. ``fused``: attn_score + softmax + attn_context are ONE flash
  kernel call: ``t = attn_call_us + (KV + q/o bytes) / (BW * attn_mem_eta_fused)`` (the scores never reach
  HBM, the softmax row costs nothing of its own: the kernel's measured time includes it); the fixed cost
  and achieved bandwidth are per-op kernel measurements where a preset has them (h100_sxm: FlashAttention-3
  paged decode, calibration/README.md "Decode attention kernel times").
* ``softmax`` / ``elementwise`` / ``embedding``: bytes-bound with eta(bytes) plus a per-kernel cost
  (``kernel_overhead_us`` fused, ``eager_elementwise_overhead_us`` / ``eager_softmax_overhead_us``
  eager: §4.2 ~45-48 us per element-wise kernel).
* ``allreduce``: not costed here (links do it): time 0, bound "link".

Energy (dynamic, per GPU; the power model is :mod:`attnsim.hwmodels.gpu_power`): HBM bytes x (activate +
read/write + I/O) pJ/bit (FGDRAM via AttAcc, pim_dram.md b.1 energy table); on-chip traffic: each HBM byte
passes L2 and L1 once (AttAcc pJ/B); arithmetic: ``compute_pj_per_flop`` x FLOPs; SM/uncore activity:
``sm_active_power_w`` x occupancy x kernel-body time (component ``active``); board power capped at ``tdp_w``.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Tuple

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from attnsim.core.config import HARDWARE_COUNT, Plausible
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import HBMEnergySpec, OpCost
from attnsim.hwmodels.base import ceil_div as _ceil_div
from attnsim.hwmodels.gpu_power import matmul_occupancy, op_energy_j

_ETA = Plausible(0, 1, "an efficiency (achieved / peak)")


class GPUSpec(HBMEnergySpec):
    """One GPU (hardware YAML with ``kind: gpu``). Units are in the key names."""

    plausible = {
        "num_sms": HARDWARE_COUNT,
        "mma_m": Plausible(1, 4096, "MMA tile rows: 16-256 (NVIDIA PTX ISA)"),
        "max_split_k": Plausible(
            1,
            1024,
            "split-K factor: cuBLAS/CUTLASS split up to ~16-64 ways; 1024 keeps the "
            "candidate table small (issue 31: 1.6e10 asked numpy for 119 GiB)",
        ),
        "min_k_split": Plausible(1, 1 << 20, "smallest K slice (elements)"),
        "k_overhead": Plausible(0, 1e6, "fixed K-loop overhead (elements)"),
        "mem_eta_max": _ETA,
        "attn_mem_eta_unfused": _ETA,
        "attn_mem_eta_fused": _ETA,
        "attn_compute_eta_unfused": _ETA,
        "attn_compute_eta_fused": _ETA,
        "overlap_p": Plausible(0, 100, "the overlap exponent of compute and memory time (p-norm; 1: sum, large: max)"),
    }

    kind: Literal["gpu"] = "gpu"
    name: str
    source: str = ""
    # --- datasheet
    peak_fp16_tflops: PositiveFloat = Field(description="dense FP16/BF16 tensor-core peak")
    peak_fp8_tflops: Optional[PositiveFloat] = Field(None, description="dense FP8 peak (None: no FP8 tensor cores)")
    hbm_bandwidth_gbps: PositiveFloat = Field(description="HBM bandwidth, GB/s (1e9 B/s)")
    hbm_capacity_gb: PositiveFloat
    num_sms: PositiveInt
    idle_power_w: float = Field(ge=0, description="idle with a CUDA context and weights resident (static)")
    tdp_w: PositiveFloat = Field(description="board power limit; power above it is charged at the cap")
    sm_active_power_w: float = Field(
        ge=0,
        description="SM/uncore power while kernels run at full occupancy, beyond idle, arithmetic and data movement",
    )
    # --- software stack and kernel costs
    software_stack: Literal["fused", "eager"] = "fused"
    kernel_overhead_us: float = Field(ge=0, description="fixed cost of every kernel (launch + prologue/epilogue)")
    eager_elementwise_overhead_us: float = Field(45.0, ge=0, description="per element-wise kernel in eager PyTorch")
    eager_softmax_overhead_us: float = Field(12.0, ge=0, description="per softmax kernel in eager PyTorch")
    eager_matmul_overhead_us: float = Field(0.0, ge=0, description="extra per matmul kernel in eager PyTorch")
    # --- memory efficiency curve eta(b) = mem_eta_max * b / (b + min(b, mem_half_mb))
    mem_eta_max: float = Field(gt=0, le=1)
    mem_half_mb: float = Field(ge=0, description="streaming tail (MB, 1e6); eta = mem_eta_max / 2 up to this size")
    # --- compute efficiency and tiling
    compute_eta: float = Field(gt=0, le=1, description="fraction of per-SM peak a full tile wave achieves")
    k_overhead: float = Field(0.0, ge=0, description="per-tile prologue/epilogue cost as K-depth (elements)")
    tiles: List[Tuple[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [(128, 128)],
        min_length=1,
        description="candidate CTA tiles (M x N); the fastest per shape is used",
    )
    mma_m: PositiveInt = Field(16, description="M granularity of the MMA instruction (padding quantum for small M)")
    split_k: bool = True
    max_split_k: PositiveInt = Field(16, description="largest split-K factor considered")
    min_k_split: PositiveInt = Field(256, description="smallest K slice of a split-K kernel")
    overlap_p: float = Field(float("inf"), gt=0, description="t = (t_c^p + t_m^p)^(1/p); inf = plain max")
    # --- attention kernels
    attn_mem_eta_unfused: float = Field(gt=0, le=1)
    attn_mem_eta_fused: float = Field(gt=0, le=1)
    attn_compute_eta_unfused: float = Field(gt=0, le=1)
    attn_compute_eta_fused: float = Field(gt=0, le=1)
    attn_call_us: Optional[float] = Field(
        None,
        ge=0,
        description="fixed cost of one fused attention kernel call "
        "(launch, split-KV combine, pipeline fill), on attn_score; null: "
        "kernel_overhead_us (one launch)",
    )
    # --- energy
    l2_pj_per_byte: float = Field(ge=0)
    l1_pj_per_byte: float = Field(ge=0)
    compute_pj_per_flop: float = Field(ge=0)

    @model_validator(mode="after")
    def _tdp_above_idle(self):
        if self.tdp_w <= self.idle_power_w:
            raise ValueError(f"tdp_w must be above idle_power_w = {self.idle_power_w}, got {self.tdp_w}")
        return self


class GPUModel:
    """Analytical GPU timing/energy model (implements hwmodels.base.DeviceModel)."""

    kind = "gpu"

    def __init__(self, spec: GPUSpec):
        self.spec = spec
        self.name = spec.name

    # ------------------------------------------------------------ DeviceModel properties
    @property
    def peak_flops(self) -> float:
        return self.spec.peak_fp16_tflops * 1e12

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.hbm_bandwidth_gbps * 1e9

    @property
    def capacity_bytes(self) -> float:
        return self.spec.hbm_capacity_gb * 1e9

    @property
    def static_power_w(self) -> float:
        return self.spec.idle_power_w

    # ------------------------------------------------------------ building blocks (vectorised)
    def peak_flops_for(self, dtype: str = "fp16") -> float:
        """Dense peak for the compute dtype (FP8 only where the GPU has FP8 tensor cores)."""
        if dtype.startswith("fp8") and self.spec.peak_fp8_tflops:
            return self.spec.peak_fp8_tflops * 1e12
        return self.peak_flops

    def mem_eta(self, nbytes) -> np.ndarray:
        """Achieved fraction of peak HBM bandwidth for a kernel streaming ``nbytes``."""
        b = np.asarray(nbytes, dtype=np.float64)
        tail = np.minimum(b, self.spec.mem_half_mb * 1e6)
        with np.errstate(invalid="ignore", divide="ignore"):
            eta = self.spec.mem_eta_max * b / (b + tail)
        return np.where(b > 0, eta, self.spec.mem_eta_max)

    def memory_time_s(self, nbytes, eta=None) -> np.ndarray:
        """Streaming time of ``nbytes`` (eta(bytes) unless a fixed ``eta`` is given)."""
        b = np.asarray(nbytes, dtype=np.float64)
        bw = self.peak_bandwidth_bytes_per_s
        if eta is None:
            return (b + np.minimum(b, self.spec.mem_half_mb * 1e6)) / (bw * self.spec.mem_eta_max)
        return b / (bw * eta)

    def matmul_compute_time_s(self, m, n, k, batch=1, peak=None) -> np.ndarray:
        """Tile/wave-quantised compute time of ``batch`` (m x k) @ (k x n) matmuls."""
        s = self.spec
        m = np.maximum(np.asarray(m, dtype=np.int64), 0)
        n = np.maximum(np.asarray(n, dtype=np.int64), 0)
        k = np.maximum(np.asarray(k, dtype=np.int64), 0)
        batch = np.maximum(np.asarray(batch, dtype=np.int64), 1)
        m, n, k, batch = np.broadcast_arrays(np.atleast_1d(m), np.atleast_1d(n), np.atleast_1d(k), np.atleast_1d(batch))
        per_sm = (self.peak_flops if peak is None else peak) / s.num_sms
        # split-K: the kernel picks the split (1..max_split_k, K slices >= min_k_split) that minimises
        # waves(tiles * split) * (ceil(K / split) + k_overhead): fills SMs when there are few output tiles
        max_split = np.clip(k // s.min_k_split, 1, s.max_split_k if s.split_k else 1)
        cand = np.arange(1, (s.max_split_k if s.split_k else 1) + 1)[:, None]
        t = np.full(m.shape, np.inf)
        for tile_m, tile_n in s.tiles:
            tm = np.minimum(tile_m, _ceil_div(np.maximum(m, 1), s.mma_m) * s.mma_m)
            tiles = batch * _ceil_div(m, tm) * _ceil_div(n, tile_n)
            waves = _ceil_div(tiles[None, :] * cand, s.num_sms)
            work = waves * (_ceil_div(k[None, :], cand) + s.k_overhead)  # = waves * effective K-slice depth
            work = np.where(cand <= max_split[None, :], work, np.inf)
            t = np.minimum(t, 2.0 * tm * tile_n * work.min(axis=0) / (per_sm * s.compute_eta))
        tiles = batch * (m > 0) * (n > 0)
        return np.where(tiles > 0, t, 0.0)

    def combine(self, t_compute, t_memory) -> np.ndarray:
        """Overlap of compute and memory time: plain max, or the p-norm smooth max if overlap_p < inf."""
        tc = np.asarray(t_compute, dtype=np.float64)
        tm = np.asarray(t_memory, dtype=np.float64)
        mx = np.maximum(tc, tm)
        p = self.spec.overlap_p
        if not np.isfinite(p):
            return mx
        safe = np.where(mx > 0, mx, 1.0)
        return np.where(mx > 0, safe * ((tc / safe) ** p + (tm / safe) ** p) ** (1.0 / p), 0.0)

    @staticmethod
    def _fused_attention_bytes(c, rows, meta) -> np.ndarray:
        """HBM bytes of attention rows run as one flash kernel: KV read + written, query in / output out;
        the score/probability matrix (``H x pairs`` of the trace's unfused ``act_bytes`` = flops / 2k
        elements) never leaves the chip."""
        from attnsim.workloads.model import DTYPE_BYTES

        act = DTYPE_BYTES.get(str(meta.get("act_dtype", "fp16")), 2)
        k = np.maximum(c["k"][rows].astype(np.float64), 1.0)
        scores = c["flops"][rows].astype(np.float64) / (2.0 * k) * act
        qo = np.maximum(c["act_bytes"][rows] - scores, 0.0)
        return (c["kv_read_bytes"][rows] + c["kv_write_bytes"][rows] + qo).astype(np.float64)

    MAX_MATMUL_MEMO = 4096  # entries of the matmul-rows memo below (cleared when full; bounds memory)

    def _matmul_rows(self, m, n, k, batch, nbytes, peak: float):
        """(compute time, memory time, occupancy) of matmul rows, memoised on everything they read (the rows' shapes
        and bytes, the peak, the spec): a serving run's iterations with the same token count share their GEMMs."""
        key = (peak, *((a.dtype.str, a.tobytes()) for a in map(np.asarray, (m, n, k, batch, nbytes))))
        memo = self.__dict__.setdefault("_matmul_memo", {})
        hit = memo.get(key)
        if hit is None or hit[0] is not self.spec:
            hit = (
                self.spec,
                self.matmul_compute_time_s(m, n, k, batch, peak=peak),
                self.memory_time_s(nbytes),
                matmul_occupancy(self.spec, m, n, k, batch),
            )
            if len(memo) >= self.MAX_MATMUL_MEMO:
                memo.clear()
            memo[key] = hit
        return hit[1], hit[2], hit[3]

    # ------------------------------------------------------------ DeviceModel.cost
    def cost(self, trace, rows: np.ndarray) -> OpCost:
        s = self.spec
        rows = np.asarray(rows, dtype=np.int64)
        c = trace.cols
        cls = c["cls"][rows]
        m, n, k, batch = (c[x][rows] for x in ("m", "n", "k", "batch"))
        flops = c["flops"][rows].astype(np.float64)
        nbytes = (
            c["weight_bytes"][rows] + c["act_bytes"][rows] + c["kv_read_bytes"][rows] + c["kv_write_bytes"][rows]
        ).astype(np.float64)
        meta = getattr(trace, "meta", {}) or {}
        peak = self.peak_flops_for(str(meta.get("compute_dtype", meta.get("weight_dtype", "fp16"))))
        eager = s.software_stack == "eager"
        t_kernel = s.kernel_overhead_us * 1e-6

        n_rows = len(rows)
        occupancy = np.ones(n_rows)  # bandwidth-bound kernels keep every SM issuing loads
        t_comp = np.zeros(n_rows)
        t_mem = np.zeros(n_rows)
        t_ovh = np.full(n_rows, t_kernel)

        mm = cls == "matmul"
        if mm.any():
            t_comp[mm], t_mem[mm], occupancy[mm] = self._matmul_rows(m[mm], n[mm], k[mm], batch[mm], nbytes[mm], peak)
            if eager:
                t_ovh[mm] += s.eager_matmul_overhead_us * 1e-6

        at = (cls == "attn_score") | (cls == "attn_context")
        fused_sm = np.zeros(n_rows, dtype=bool) if eager else cls == "softmax"
        if fused_sm.any():  # inside a flash kernel only where this device runs that layer group's attention
            lg = c["layer_group"][rows]
            fused_sm &= np.isin(lg, lg[cls == "attn_score"])
        if at.any():
            mem_eta = s.attn_mem_eta_unfused if eager else s.attn_mem_eta_fused
            c_eta = s.attn_compute_eta_unfused if eager else s.attn_compute_eta_fused
            if not eager:  # one flash kernel: scores stay on chip; its fixed cost once per call
                nbytes[at] = self._fused_attention_bytes(c, rows[at], meta)
                call_us = s.kernel_overhead_us if s.attn_call_us is None else s.attn_call_us
                t_ovh[at] = np.where(cls[at] == "attn_score", call_us * 1e-6, 0.0)
            t_mem[at] = self.memory_time_s(nbytes[at], eta=mem_eta)
            t_comp[at] = flops[at] / (peak * c_eta)
        if fused_sm.any():  # inside the fused attention kernel (its measured time includes it): no time, no HBM
            nbytes[fused_sm] = 0.0
            t_ovh[fused_sm] = 0.0

        ew = ((cls == "softmax") & ~fused_sm) | (cls == "elementwise") | (cls == "embedding")
        if ew.any():
            t_mem[ew] = self.memory_time_s(nbytes[ew])
            t_comp[ew] = flops[ew] / peak
            if eager:
                extra = np.where(cls[ew] == "softmax", s.eager_softmax_overhead_us, s.eager_elementwise_overhead_us)
                extra = np.where(cls[ew] == "embedding", 0.0, extra)
                t_ovh[ew] += extra * 1e-6

        ar = cls == "allreduce"
        t_ovh[ar] = 0.0
        hbm_bytes = np.where(ar, 0.0, nbytes)
        dyn_flops = np.where(ar, 0.0, flops)

        t_body = self.combine(t_comp, t_mem)
        time_s = t_ovh + t_body
        bound = np.where(t_comp >= t_mem, "compute", "memory").astype(object)
        bound[t_ovh > t_body] = "overhead"
        bound[ar] = "link"

        energy = op_energy_j(
            s, time_s, np.where(ar, 0.0, t_body), occupancy, dyn_flops, hbm_bytes, count=c["count"][rows]
        )
        return OpCost(
            time_s=time_s, energy_j=energy, bytes_by_level={"hbm": hbm_bytes}, flops=dyn_flops, bound=bound.astype(str)
        )


def from_spec(spec: GPUSpec) -> GPUModel:
    return GPUModel(spec)


def load_hardware(ref: str):
    """Build any hardware model from a built-in name (``h100_sxm``) or a YAML path, validated."""
    from attnsim.core.config import display_path, find_config, load_yaml

    path = find_config("hardware", ref)
    return registry.build(load_yaml(path), file=display_path(path))


registry.register("gpu", GPUSpec, from_spec)
