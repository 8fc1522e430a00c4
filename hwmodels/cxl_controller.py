"""CXL-device controller vector units (YAML ``kind: cxl_controller``): CENT's "Acc" term.

CENT (Yufeng98/CENT @ 8c79786, ``cent_simulation/cent_power_calculator.py``, ``run_sim.py``
``calculate_acc_latency``; shared/reference/pim_dram.md b.4) puts, beside the GDDR6-AiM channels
of a CXL device, ``accelerators`` (one per channel) of ``lanes`` SIMD lanes at ``clock_ghz``
sharing one buffer (SB), a reduction tree and ``riscv_cores`` RISC-V cores. A SIMD pass over N
elements with r SB reads per element group costs, in cycles,

    N / (lanes x accelerators) x (accelerators x r x sb_read_cycles + op_cycles + sb_write_cycles)

(the accelerators' SB reads are serialised on the shared buffer, then the op and the write back).
Kernels (what CENT runs on the controller; the rest of a block runs in the banks):

- softmax over the context: an EXP pass (r = 1, ``exp_cycles``) and a VEC add pass (r = 2,
  ``vec_cycles``) over every score, then per query row the reduction tree (``reduce_cycles``) and
  the reciprocal on a RISC-V core (``riscv_softmax_cycles`` spread over the cores, pipelined) with
  its result broadcast to the lanes (lanes SB writes + 1 SB read). Grows with context x heads.
- RMSNorm: the banks' 16-to-1 MACs deliver ``pu_reduction``-fold partial sums of x^2; a VEC pass
  over them, one reduction (SB read + write + tree) and ``riscv_norm_cycles`` (rsqrt) per token.
- RoPE: ``riscv_rope_cycles`` per rotated element (q and k) spread over the RISC-V cores.

Residual adds and the FFN activation stay in the banks (AiM EWADD / AF, as in CENT), on the PIM
device. Operands move between banks and the controller over the device's ``channels`` at
``channel_gbps`` each (norm partials out and the scale back; q/k out and back for RoPE), serially
before/after the kernel, at ``dq_pj_per_bit`` (CENT DQ). The softmax's scores are not moved here:
in CENT they make 4 writes and 2 reads through the banks (EWMUL scaling in between), which the
mapper costs on the PIM device as a ``softmax_io`` row (mapper/cxl_pnm.py, isa/lower.py).

Energy: CENT's synthesis numbers (mW at the 2 GHz clock -> pJ per operation): EXP / VEC ops per
16-lane op, reduction tree per reduction, RISC-V per busy core-cycle, SB per read/write, instruction
buffer (IB) per controller instruction; leakage and SRAM static power as ``static_power_w``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import HARDWARE_COUNT, ConfigError, Schema
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import OpCost
from attnsim.isa.cxl_pnm import NORM_OPS, ROPE_OPS  # noqa: F401 (trace ops each kernel runs; the ISA's lists)


def kernel_of(op: str, cls: str) -> str | None:
    """The controller kernel that runs a trace row (None: not a controller op)."""
    if cls == "softmax":
        return "softmax"
    if cls == "elementwise" and op in NORM_OPS:
        return "rmsnorm"
    if cls == "elementwise" and op in ROPE_OPS:
        return "rope"
    return None


class ControllerSpec(Schema):
    plausible = {
        "accelerators": HARDWARE_COUNT,
        "lanes": HARDWARE_COUNT,
        "riscv_cores": HARDWARE_COUNT,
        "channels": HARDWARE_COUNT,
        "pu_reduction": HARDWARE_COUNT,
    }

    kind: Literal["cxl_controller"]
    name: str
    description: str = ""
    source: str = ""
    accelerators: PositiveInt = Field(32, description="SIMD accelerators (CENT: one per channel, CH_PER_DV)")
    lanes: PositiveInt = Field(16, description="SIMD lanes per accelerator")
    clock_ghz: PositiveFloat = 2.0
    sb_read_cycles: float = Field(1.0, ge=0, description="shared-buffer read (SB_RD_CYCLE)")
    sb_write_cycles: float = Field(1.0, ge=0, description="shared-buffer write (SB_WR_CYCLE)")
    exp_cycles: float = Field(11.0, ge=0, description="exponent lane latency (EXP_LANE_CYCLE)")
    vec_cycles: float = Field(1.0, ge=0, description="vector add/mul latency")
    reduce_cycles: float = Field(1.0, ge=0, description="reduction tree")
    riscv_cores: PositiveInt = 8
    riscv_norm_cycles: float = Field(26.0, ge=0, description="rsqrt per token (RV_RMSNorm_CYCLE)")
    riscv_rope_cycles: float = Field(3.0, ge=0, description="core-cycles per rotated element")
    riscv_softmax_cycles: float = Field(2.0, ge=0, description="core-cycles per softmax row (reciprocal)")
    pu_reduction: PositiveInt = Field(16, description="x^2 partial sums per element from the bank MACs")
    channels: PositiveInt = Field(32, description="DQ channels between the banks and the controller")
    channel_gbps: PositiveFloat = Field(32.0, description="per channel, 1e9 B/s (x16 at 16 Gb/s/pin)")
    dq_pj_per_bit: float = Field(5.5, ge=0)
    exp_pj_per_op: float = Field(0.0, ge=0, description="one 16-lane EXP op")
    vec_pj_per_op: float = Field(0.0, ge=0, description="one 16-lane VEC op")
    reduce_pj: float = Field(0.0, ge=0, description="one reduction-tree pass")
    riscv_pj_per_cycle: float = Field(0.0, ge=0, description="one busy RISC-V core-cycle")
    sb_read_pj: float = Field(0.0, ge=0)
    sb_write_pj: float = Field(0.0, ge=0)
    ib_pj_per_instruction: float = Field(0.0, ge=0, description="instruction-buffer read per controller op")
    static_power_w: float = Field(0.0, ge=0, description="leakage + SRAM static power")


class ControllerDevice:
    """DeviceModel of a CXL device's controller: runs softmax, RMSNorm and RoPE rows (kernel_of)."""

    kind = "cxl_controller"
    peak_flops = 0.0
    capacity_bytes = 0.0

    def __init__(self, spec: ControllerSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.channels * self.spec.channel_gbps * 1e9

    @property
    def static_power_w(self) -> float:
        return self.spec.static_power_w

    # ------------------------------------------------------------ kernels
    def pass_cycles(self, elements: float, reads: int, op_cycles: float) -> float:
        """Cycles of one SIMD pass over ``elements`` with ``reads`` SB reads per element group."""
        s = self.spec
        return (
            elements
            / (s.lanes * s.accelerators)
            * (s.accelerators * reads * s.sb_read_cycles + op_cycles + s.sb_write_cycles)
        )

    def kernel(self, name: str, elements: float, rows: float) -> dict:
        """Cycles, moved bytes and operation counts of one kernel.

        softmax: ``elements`` scores in ``rows`` query rows; rmsnorm: ``elements`` = tokens x hidden
        over ``rows`` tokens; rope: ``elements`` rotated q/k elements.
        """
        s = self.spec
        lanes = float(s.lanes)
        if name == "softmax":
            row_cyc = (
                s.reduce_cycles
                + s.lanes * s.sb_write_cycles
                + s.riscv_softmax_cycles / s.riscv_cores
                + s.sb_read_cycles
            )
            cyc = (
                self.pass_cycles(elements, 1, s.exp_cycles)
                + self.pass_cycles(elements, 2, s.vec_cycles)
                + rows * row_cyc
            )
            return dict(
                cycles=cyc,
                bytes=0.0,
                exp_ops=elements / lanes,
                vec_ops=elements / lanes,
                reductions=rows,
                riscv_core_cycles=rows * s.riscv_softmax_cycles,
                sb_reads=3.0 * elements / lanes + 2.0 * rows,
                sb_writes=2.0 * elements / lanes + 2.0 * rows,
                instructions=2.0 * elements / lanes + 2.0 * rows,
            )
        if name == "rmsnorm":
            partials = elements / s.pu_reduction
            cyc = self.pass_cycles(partials, 2, s.vec_cycles) + rows * (
                s.sb_read_cycles + s.sb_write_cycles + s.reduce_cycles + s.riscv_norm_cycles
            )
            return dict(
                cycles=cyc,
                bytes=(partials + rows) * 2.0,
                exp_ops=0.0,
                vec_ops=partials / lanes,
                reductions=rows,
                riscv_core_cycles=rows * s.riscv_norm_cycles,
                sb_reads=2.0 * partials / lanes + 2.0 * rows,
                sb_writes=partials / lanes + rows,
                instructions=partials / lanes + 2.0 * rows,
            )
        if name == "rope":
            return dict(
                cycles=elements * s.riscv_rope_cycles / s.riscv_cores,
                bytes=2.0 * elements * 2.0,
                exp_ops=0.0,
                vec_ops=0.0,
                reductions=0.0,
                riscv_core_cycles=elements * s.riscv_rope_cycles,
                sb_reads=elements / lanes,
                sb_writes=2.0 * elements / lanes,
                instructions=elements,
            )
        raise ConfigError(f"expected softmax, rmsnorm or rope, got {name!r}", key="kernel")

    def kernel_time_s(self, k: dict) -> float:
        """Compute cycles at the clock, then the operand transfers over the DQ channels."""
        return k["cycles"] / (self.spec.clock_ghz * 1e9) + k["bytes"] / self.peak_bandwidth_bytes_per_s

    def kernel_energy_j(self, k: dict) -> dict:
        s = self.spec
        pj = 1e-12
        return {
            "compute": (
                k["exp_ops"] * s.exp_pj_per_op
                + k["vec_ops"] * s.vec_pj_per_op
                + k["reductions"] * s.reduce_pj
                + k["riscv_core_cycles"] * s.riscv_pj_per_cycle
            )
            * pj,
            "sram": (
                k["sb_reads"] * s.sb_read_pj
                + k["sb_writes"] * s.sb_write_pj
                + k["instructions"] * s.ib_pj_per_instruction
            )
            * pj,
            "dram_io": k["bytes"] * 8.0 * s.dq_pj_per_bit * pj,
        }

    @staticmethod
    def row_work(trace, i: int) -> tuple[str, float, float]:
        """(kernel, elements, rows) of trace row i (per repeat, one TP rank)."""
        from attnsim.workloads.trace import SOFTMAX_FLOPS

        c = trace.cols
        op, cls = str(c["op"][i]), str(c["cls"][i])
        name = kernel_of(op, cls)
        if name is None:
            raise ConfigError(
                f"controller {op!r} ({cls}) is not a controller op: the controller runs softmax, "
                f"RMSNorm ({', '.join(NORM_OPS)}) and RoPE rows",
                key=op,
            )
        if name == "softmax":  # flops = SOFTMAX_FLOPS x heads x (query, key) pairs
            elements = float(c["flops"][i]) / SOFTMAX_FLOPS
            rows = float(c["batch"][i]) * float(trace.meta.get("tokens", 1))
        elif name == "rmsnorm":  # elements = tokens x hidden (m = tokens, n = hidden)
            rows = float(c["m"][i])
            elements = rows * float(c["n"][i])
        else:
            from attnsim.workloads.trace import ROPE_FLOPS

            elements = float(c["flops"][i]) / ROPE_FLOPS
            rows = 0.0
        return name, elements, rows

    def cost(self, trace, rows) -> OpCost:
        rows = np.asarray(rows, np.int64)
        n = len(rows)
        time = np.zeros(n)
        energy = {k: np.zeros(n) for k in ("compute", "sram", "dram_io")}
        moved = np.zeros(n)
        for j, i in enumerate(rows):
            name, elements, nrows = self.row_work(trace, int(i))
            k = self.kernel(name, elements, nrows)
            time[j] = self.kernel_time_s(k)
            for comp, v in self.kernel_energy_j(k).items():
                energy[comp][j] = v
            moved[j] = k["bytes"]
        return OpCost(
            time_s=time,
            energy_j=energy,
            bytes_by_level={"controller_dq": moved},
            flops=np.zeros(n),
            bound=np.full(n, "compute", dtype=object),
        )


registry.register("cxl_controller", ControllerSpec, ControllerDevice)
