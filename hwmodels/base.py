"""Interfaces shared by all device models: OpCost and the DeviceModel protocol.

A device model times and costs operators that the mapper placed on it; it never
decides placement. Costs are vectorised over the rows of an OpTrace and are per
ONE repeat of the row (multiply by ``count`` for totals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import Field

from attnsim.core.config import Schema

# Energy components used in every breakdown (joules). Devices fill the ones they have.
ENERGY_COMPONENTS = (
    "compute",  # GPU/NPU/PNM arithmetic (dynamic)
    "pim_compute",  # in-DRAM processing units (dynamic)
    "active",  # GPU SM/uncore activity power x kernel time, beyond arithmetic and data movement (gpu_power.py)
    "sram",  # on-chip buffers / caches (dynamic)
    "dram_activate",  # ACT/PRE (row cycles)
    "dram_read_write",  # cell array + column path to the I/O
    "dram_io",  # TSV / PHY / interposer / board I/O
    "dram_refresh",
    "dram_background",
    "ecc",  # ECC decode of KV reads (reliability section)
    "link",  # NVLink / PCIe / CXL transfers
    "static",  # idle/leakage power x time of devices
)


def ceil_div(a, b):
    """Integer ceiling division (numpy arrays or ints)."""
    return -(-a // b)


def request_kv_tokens(trace, i: int) -> np.ndarray:
    """KV tokens each request of ``trace`` reads in attention row ``i``: its context (``trace.context_lens``),
    capped at the row's sliding window; when a mapper split the row (its ``n`` differs from that sum, e.g. the
    cold share of a tiered KV, or a hand-built row without per-request lengths) every length is scaled to the
    row's ``n`` (rounded), so the lengths always sum to the row's tokens."""
    c = trace.cols
    lens = np.asarray(trace.context_lens, np.int64)
    g = int(c["layer_group"][i])
    if 0 <= g < len(trace.groups) and trace.groups[g].window:
        lens = np.minimum(lens, trace.groups[g].window)
    total = float(lens.sum())
    n_row = float(c["n"][i])
    if n_row > 0 and total > 0 and abs(n_row - total) > 0.5:
        lens = np.maximum(np.rint(lens * (n_row / total)).astype(np.int64), 0)
    return lens


@dataclass
class OpCost:
    """Time, energy and traffic of ops on one device (arrays over selected rows, per repeat)."""

    time_s: np.ndarray
    energy_j: dict[str, np.ndarray] = field(default_factory=dict)  # component -> joules (dynamic)
    bytes_by_level: dict[str, np.ndarray] = field(default_factory=dict)  # memory level -> bytes moved
    flops: np.ndarray | None = None
    bound: np.ndarray | None = None  # "compute" | "memory" | "overhead" | "link" per row
    # PIM devices: per row the mapping it ran with (hwmodels/pim_mapping.py) as a JSON-able dict, or None
    mapping: np.ndarray | None = None

    def energy_total_j(self) -> np.ndarray:
        tot = np.zeros_like(self.time_s, dtype=np.float64)
        for v in self.energy_j.values():
            tot = tot + v
        return tot


@runtime_checkable
class DeviceModel(Protocol):
    """What the engine needs from a compute device (GPU, NPU, PIM stack, PNM device)."""

    name: str
    kind: str

    @property
    def peak_flops(self) -> float: ...  # FLOP/s at the default dtype

    @property
    def peak_bandwidth_bytes_per_s(self) -> float: ...  # main-memory bandwidth

    @property
    def capacity_bytes(self) -> float: ...

    @property
    def static_power_w(self) -> float: ...  # power drawn whatever it does (idle)

    def cost(self, trace, rows: np.ndarray) -> OpCost: ...  # rows: integer indices into trace


class HBMEnergySpec(Schema):
    """Per-bit energy of a device's own DRAM (HBM) traffic, split like the FGDRAM / AttAcc table
    (shared/reference/pim_dram.md b.1): row activation, cell array + column path, TSV/PHY/interposer I/O."""

    dram_activate_pj_per_bit: float = Field(ge=0)
    dram_read_write_pj_per_bit: float = Field(ge=0)
    dram_io_pj_per_bit: float = Field(ge=0)

    def dram_energy_j(self, nbytes) -> dict:
        """Energy components (J) of moving ``nbytes`` (array) to or from the device's DRAM."""
        bits = np.asarray(nbytes, dtype=np.float64) * 8.0
        return {
            "dram_activate": bits * self.dram_activate_pj_per_bit * 1e-12,
            "dram_read_write": bits * self.dram_read_write_pj_per_bit * 1e-12,
            "dram_io": bits * self.dram_io_pj_per_bit * 1e-12,
        }


def set_static(res, system, time_s: float) -> None:
    """Static energy of one replica over ``time_s`` into a step result ``res``
    (attnsim.sim.engine.StepResult): total, by device and by device component
    (``System.static_power_by_device_w``; the total is ``System.static_power_w``, as before)."""
    per = 1.0 / max(1, system.spec.parallelism.replicas)
    res.static_energy_j = system.static_power_w() * per * time_s
    res.static_energy_j_by_device, res.static_energy_j_by_part = {}, {}
    for dev, parts in system.static_power_by_device_w().items():
        res.static_energy_j_by_device[dev] = sum(parts.values()) * per * time_s
        for comp, w in parts.items():
            res.static_energy_j_by_part[f"{dev}.{comp}"] = w * per * time_s
