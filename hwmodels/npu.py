"""NPU device model: systolic arrays (weight- or output-stationary) + vector units + HBM.

Analytical tile model (SCALE-Sim-style fill/drain, as used by NeuPIMs' NPU and LLMCompass' systolic
arrays; gpu_calibration.md §1.1, pim_dram.md b.2):

* weight-stationary (WS): a ``rows x cols`` array holds a (K-slice x N-slice) weight tile; the M input rows
  stream through it. ``tiles = batch * ceil(K/rows) * ceil(N/cols)``, ``cycles/tile = M + rows + cols``
  (M streaming + fill + drain; the next tile's weights are double-buffered behind the stream).
* output-stationary (OS): the array holds an (M-slice x N-slice) output tile and K streams through:
  ``tiles = batch * ceil(M/rows) * ceil(N/cols)``, ``cycles/tile = K + rows + cols``.
* tiles are spread over ``num_arrays`` arrays: ``compute cycles = ceil(tiles / num_arrays) * cycles/tile``;
  utilisation = MACs / (num_arrays * rows * cols * cycles) <= 1 by construction.
* memory: every byte of the row (weights stream from HBM each step; activations/KV) at
  ``hbm_bandwidth * mem_eta``; ``t = overhead + max(compute, memory)``.
* attention rows run as per-request tiles (``attention_cycles``): a request's K (and V) is its own stationary
  operand, so no tile holds two requests' keys; per request r and KV head, score = (m x k) @ (k x L_r), context
  = (m x L_r) @ (L_r x k), m = query tokens x the query heads sharing that KV head (GQA group), L_r the tokens it
  reads (hwmodels/base.request_kv_tokens). Tiles of all requests and heads are spread over the arrays
  (``attention_issue: parallel``) or run one at a time (``serial``: the arrays as one pipeline, each tile its
  own fill + drain). A row without per-request lengths is one request of ``n`` tokens.
* softmax / elementwise on the vector units (``vector_units x vector_width`` ops per cycle) or bytes-bound;
  allreduce: 0 (links).

Evidence for the attention tiles (casys-kaist/NeuPIMs npu-only 57617ee, the NPU-only baseline of NeuPIMs):
src/operations/FusedMHA.cc initialize_tiles builds one tile per request, each head a GEMV of q against that
request's K, a softmax on the vector units, then GEMVs over its V in 128-key chunks (systolic 128 x 128,
SystolicWS.cc get_inst_compute_cycles: rows + cols - 1 + streamed rows per instruction). The artefact issues
them one at a time on a single compute pipeline (SystolicWS.cc issue_ex_inst: start = previous finish), its 8
arrays ganged within an instruction (MatMul.cc / FusedMHA.cc ``size / 8``): ``attention_issue: serial``, a
named assumption of the NeuPIMs reproduction, not the default (an NPU with independent arrays, as the tile model
gives every other op here, overlaps the tiles of different requests and heads).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import ARRAY_SIDE, HARDWARE_COUNT, Plausible
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import HBMEnergySpec, OpCost, request_kv_tokens
from attnsim.hwmodels.base import ceil_div as _ceil_div


class NPUSpec(HBMEnergySpec):
    """One NPU (hardware YAML with ``kind: npu``)."""

    plausible = {
        "num_arrays": HARDWARE_COUNT,
        "array_rows": ARRAY_SIDE,
        "array_cols": ARRAY_SIDE,
        "vector_units": HARDWARE_COUNT,
        "vector_width": Plausible(1, 1 << 16, "vector lanes: 8-4096 (TPU VPU 8x128, Jouppi ISCA 2023)"),
    }

    kind: Literal["npu"] = "npu"
    name: str
    source: str = ""
    num_arrays: PositiveInt
    array_rows: PositiveInt
    array_cols: PositiveInt
    dataflow: Literal["weight_stationary", "output_stationary"] = "weight_stationary"
    clock_mhz: PositiveFloat
    vector_units: PositiveInt
    vector_width: PositiveInt
    hbm_bandwidth_gbps: PositiveFloat
    hbm_capacity_gb: PositiveFloat
    mem_eta: float = Field(1.0, gt=0, le=1, description="achieved fraction of HBM bandwidth")
    kernel_overhead_cycles: int = Field(0, ge=0, description="fixed cycles per operator")
    idle_power_w: float = Field(0.0, ge=0)
    mac_pj: float = Field(ge=0, description="energy per MAC")
    vector_pj_per_op: float = Field(ge=0)
    sram_pj_per_byte: float = Field(ge=0)
    attention_issue: Literal["parallel", "serial"] = Field(
        "parallel",
        description="attention tiles spread over the arrays (parallel) or run one at a time (serial: the "
        "NeuPIMs artefact's single compute pipeline, FusedMHA.cc / SystolicWS.cc)",
    )


class NPUModel:
    """Systolic-array NPU (implements hwmodels.base.DeviceModel)."""

    kind = "npu"

    def __init__(self, spec: NPUSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def clock_hz(self) -> float:
        return self.spec.clock_mhz * 1e6

    @property
    def peak_flops(self) -> float:
        s = self.spec
        return 2.0 * s.num_arrays * s.array_rows * s.array_cols * self.clock_hz

    @property
    def peak_vector_ops(self) -> float:
        return self.spec.vector_units * self.spec.vector_width * self.clock_hz

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.hbm_bandwidth_gbps * 1e9

    @property
    def capacity_bytes(self) -> float:
        return self.spec.hbm_capacity_gb * 1e9

    @property
    def static_power_w(self) -> float:
        return self.spec.idle_power_w

    def matmul_cycles(self, m, n, k, batch=1) -> np.ndarray:
        """Systolic-array cycles of ``batch`` (m x k) @ (k x n) matmuls (see module doc)."""
        s = self.spec
        m, n, k, batch = (np.atleast_1d(np.asarray(x, dtype=np.int64)) for x in (m, n, k, batch))
        r, c = s.array_rows, s.array_cols
        if s.dataflow == "weight_stationary":
            tiles = np.maximum(batch, 1) * _ceil_div(k, r) * _ceil_div(n, c)
            per_tile = m + r + c
        else:
            tiles = np.maximum(batch, 1) * _ceil_div(m, r) * _ceil_div(n, c)
            per_tile = k + r + c
        cycles = _ceil_div(tiles, s.num_arrays) * per_tile
        return np.where((m > 0) & (n > 0) & (k > 0), cycles, 0)

    def attention_cycles(self, trace, i: int) -> float:
        """Systolic cycles of attention row ``i`` (attn_score / attn_context) as per-request tiles (module doc):
        per request and KV head, weight-stationary tiles ceil(K / rows) x ceil(N / cols) of ``m + rows + cols``
        cycles (output-stationary: ceil(m / rows) x ceil(N / cols) of ``K + rows + cols``), with K, N = head dim,
        L_r (score) or L_r, head dim (context); parallel: ceil(tiles / arrays) x the tiles' mean cycles; serial:
        their sum."""
        s = self.spec
        c = trace.cols
        heads = int(c["batch"][i])
        kvh = int(trace.meta.get("kv_heads_per_rank", heads)) or heads
        kvh = min(max(kvh, 1), max(heads, 1))
        m = int(c["m"][i]) * -(-heads // kvh)  # the query heads sharing one KV head stream through its tile
        dim = int(c["k"][i])
        lens = request_kv_tokens(trace, i)
        lens = lens[lens > 0]
        if m <= 0 or dim <= 0 or heads <= 0 or not len(lens):
            return 0.0
        kk, nn = (np.full_like(lens, dim), lens) if c["cls"][i] == "attn_score" else (lens, np.full_like(lens, dim))
        r, cols = s.array_rows, s.array_cols
        if s.dataflow == "weight_stationary":
            tiles = _ceil_div(kk, r) * _ceil_div(nn, cols)
            per_tile = np.full(len(lens), m + r + cols, dtype=np.float64)
        else:
            tiles = _ceil_div(m, r) * _ceil_div(nn, cols)
            per_tile = (kk + r + cols).astype(np.float64)
        tiles = tiles * kvh
        work = float(np.sum(tiles * per_tile))
        if s.attention_issue == "serial":
            return work
        n_tiles = int(tiles.sum())
        return float(_ceil_div(n_tiles, s.num_arrays)) * work / n_tiles

    def utilisation(self, m, n, k, batch=1) -> np.ndarray:
        """Useful MACs / MAC slots over the compute cycles."""
        s = self.spec
        cyc = self.matmul_cycles(m, n, k, batch).astype(np.float64)
        macs = np.asarray(m, dtype=np.float64) * n * k * np.asarray(batch, dtype=np.float64)
        slots = s.num_arrays * s.array_rows * s.array_cols * cyc
        return np.divide(macs, slots, out=np.zeros_like(slots), where=slots > 0)

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
        nrow = len(rows)
        cycles = np.zeros(nrow)
        mm = cls == "matmul"
        score = cls == "attn_score"
        ctx = cls == "attn_context"
        cycles[mm] = self.matmul_cycles(m[mm], n[mm], k[mm], batch[mm])
        for j in np.flatnonzero(score | ctx):
            cycles[j] = self.attention_cycles(trace, int(rows[j]))
        t_comp = cycles / self.clock_hz
        vec = (cls == "softmax") | (cls == "elementwise") | (cls == "embedding")
        t_comp[vec] = flops[vec] / self.peak_vector_ops
        ar = cls == "allreduce"
        nbytes = np.where(ar, 0.0, nbytes)
        t_mem = nbytes / (self.peak_bandwidth_bytes_per_s * s.mem_eta)
        t_ovh = np.where(ar, 0.0, s.kernel_overhead_cycles / self.clock_hz)
        body = np.maximum(t_comp, t_mem)
        time_s = t_ovh + body
        bound = np.where(t_comp >= t_mem, "compute", "memory").astype(object)
        bound[t_ovh > body] = "overhead"
        bound[ar] = "link"
        sa = mm | score | ctx
        macs = np.where(sa, flops / 2.0, 0.0)
        vec_ops = np.where(vec, flops, 0.0)
        energy = {
            "compute": (macs * s.mac_pj + vec_ops * s.vector_pj_per_op) * 1e-12,
            "sram": nbytes * s.sram_pj_per_byte * 1e-12,  # every HBM byte lands in the scratchpad once
            **s.dram_energy_j(nbytes),
        }
        return OpCost(
            time_s=time_s,
            energy_j=energy,
            bytes_by_level={"hbm": nbytes},
            flops=np.where(ar, 0.0, flops),
            bound=bound.astype(str),
        )


def from_spec(spec: NPUSpec) -> NPUModel:
    return NPUModel(spec)


registry.register("npu", NPUSpec, from_spec)
