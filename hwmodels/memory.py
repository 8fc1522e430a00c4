"""Capacity-only memory pools (host DDR5, CXL memory expanders): ``kind: memory``.

They hold data a mapper places there (offloaded KV or weights); moving it to a compute device is
costed by the link between the two and, on the pool's side, by ``cost`` of ``transfer`` rows
(``comm_bytes`` read or written at ``bandwidth_gbps``, ``energy_pj_per_byte`` each way), which a
mapper runs concurrently with the link transfer (the slower of the two sets the time). No other
op runs on a memory pool.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat

from attnsim.core.config import ConfigError, Schema
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import OpCost


class MemorySpec(Schema):
    kind: Literal["memory"] = "memory"
    name: str
    description: str = ""
    source: str = ""
    capacity_gb: PositiveFloat
    bandwidth_gbps: PositiveFloat = Field(description="device-side bandwidth, 1e9 B/s")
    energy_pj_per_byte: float = Field(ge=0, description="read energy incl. I/O")
    static_power_w: float = Field(0.0, ge=0)


class MemoryPool:
    kind = "memory"

    def __init__(self, spec: MemorySpec):
        self.spec = spec
        self.name = spec.name

    peak_flops = 0.0

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.bandwidth_gbps * 1e9

    @property
    def capacity_bytes(self) -> float:
        return self.spec.capacity_gb * 1e9

    @property
    def static_power_w(self) -> float:
        return self.spec.static_power_w

    def read_energy_j(self, nbytes) -> np.ndarray:
        return np.asarray(nbytes, dtype=np.float64) * self.spec.energy_pj_per_byte * 1e-12

    def cost(self, trace, rows) -> OpCost:
        rows = np.asarray(rows, dtype=np.int64)
        bad = rows[trace["cls"][rows] != "transfer"]
        if len(bad):
            raise ConfigError(f"no operator can run on memory pool {self.name!r}", key=str(trace["op"][bad[0]]))
        nbytes = trace["comm_bytes"][rows].astype(np.float64)
        return OpCost(
            time_s=nbytes / self.peak_bandwidth_bytes_per_s,
            energy_j={"dram_read_write": self.read_energy_j(nbytes)},
            bytes_by_level={"memory": nbytes},
            flops=np.zeros(len(rows)),
            bound=np.full(len(rows), "memory", dtype=object),
        )


registry.register("memory", MemorySpec, MemoryPool)
