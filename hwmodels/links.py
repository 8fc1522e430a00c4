"""Point-to-point links (NVLink, PCIe, CXL): transfer time/energy and ring all-reduce.

* ``transfer_time_s(b) = latency + b / (bandwidth_per_direction * efficiency)``
* ring all-reduce of ``S`` bytes per rank over ``n`` ranks (reduce-scatter + all-gather, 2(n-1) steps of
  ``S/n`` bytes): ``t = 2(n-1)/n * S / (bw * eff) + 2(n-1) * latency``; each rank sends (and receives)
  ``2(n-1)/n * S`` bytes, which is what OpTrace's ``comm_bytes`` column holds (workloads/trace.py).
* energy: ``energy_pj_per_bit`` x bits sent (each bit crosses one link once).

``cost(trace, rows)`` costs ``allreduce`` rows with ``n = trace.tp``; time is per collective, energy and
link bytes are summed over all ranks (the engine counts a link's energy once per transfer).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat

from attnsim.config import Schema
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import OpCost


class LinkSpec(Schema):
    """One link type (hardware YAML with ``kind: link``)."""

    kind: Literal["link"] = "link"
    name: str
    source: str = ""
    bandwidth_gbps: PositiveFloat = Field(description="GB/s (1e9 B/s) per direction")
    latency_us: float = Field(ge=0, description="per-message (per ring step) latency")
    energy_pj_per_bit: float = Field(ge=0)
    efficiency: float = Field(1.0, gt=0, le=1, description="achieved fraction of the raw bandwidth")
    static_power_w: float = Field(0.0, ge=0, description="idle power per port (one per device the link connects)")
    # latency term of an all-reduce: ring = 2(n-1) latency steps (NCCL ring); tree = 2 ceil(log2 n) steps
    # (double binary tree / NVLS-like, for small messages). The bandwidth term is 2(n-1)/n x bytes either way.
    allreduce: Literal["ring", "tree"] = "ring"


class LinkModel:
    """Analytical link model; ``cost`` handles allreduce and transfer rows of an OpTrace."""

    kind = "link"

    def __init__(self, spec: LinkSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Achieved bandwidth per direction."""
        return self.spec.bandwidth_gbps * 1e9 * self.spec.efficiency

    @property
    def latency_s(self) -> float:
        return self.spec.latency_us * 1e-6

    @property
    def static_power_w(self) -> float:
        return self.spec.static_power_w

    # DeviceModel-compatible properties (a link computes nothing and stores nothing)
    peak_flops = 0.0
    capacity_bytes = 0.0

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.bandwidth_gbps * 1e9

    def transfer_time_s(self, nbytes) -> np.ndarray:
        """One point-to-point transfer: latency + bytes / achieved bandwidth (latency only for 0 bytes)."""
        b = np.asarray(nbytes, dtype=np.float64)
        return self.latency_s + b / self.bandwidth_bytes_per_s

    def transfer_energy_j(self, nbytes) -> np.ndarray:
        return np.asarray(nbytes, dtype=np.float64) * 8.0 * self.spec.energy_pj_per_bit * 1e-12

    def latency_steps(self, n):
        """Latency steps of one all-reduce over ``n`` ranks (``allreduce``: ring or tree)."""
        n = np.asarray(n, dtype=np.float64)
        if self.spec.allreduce == "tree":
            return 2.0 * np.ceil(np.log2(np.maximum(n, 1.0)))
        return 2.0 * (n - 1.0)

    def allreduce_time_s(self, bytes_per_rank, n_ranks) -> np.ndarray:
        """Ring all-reduce of ``bytes_per_rank`` (the tensor size on each rank) over ``n_ranks``."""
        s = np.asarray(bytes_per_rank, dtype=np.float64)
        n = np.asarray(n_ranks, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = 2.0 * (n - 1.0) / n * s / self.bandwidth_bytes_per_s + self.latency_steps(n) * self.latency_s
        return np.where(n > 1, t, 0.0)

    def allreduce_energy_j(self, bytes_per_rank, n_ranks) -> np.ndarray:
        """All ranks together send ``n * 2(n-1)/n * S = 2(n-1) * S`` bytes."""
        s = np.asarray(bytes_per_rank, dtype=np.float64)
        n = np.asarray(n_ranks, dtype=np.float64)
        return self.transfer_energy_j(2.0 * np.maximum(n - 1.0, 0.0) * s)

    def cost(self, trace, rows: np.ndarray) -> OpCost:
        rows = np.asarray(rows, dtype=np.int64)
        cls = trace.cols["cls"][rows]
        raw = trace.cols["comm_bytes"][rows].astype(np.float64)
        comm = np.where(cls == "allreduce", raw, 0.0)
        n = int(getattr(trace, "tp", 1) or 1)
        if n > 1:
            time_s = comm / self.bandwidth_bytes_per_s + np.where(comm > 0, self.latency_steps(n) * self.latency_s, 0.0)
        else:
            time_s = np.zeros(len(rows))
        total_bytes = comm * n if n > 1 else np.zeros(len(rows))
        # point-to-point transfers (mapper-added rows): every rank moves comm_bytes over its own link
        xfer = np.where(cls == "transfer", raw, 0.0)
        time_s = time_s + np.where(xfer > 0, xfer / self.bandwidth_bytes_per_s + self.latency_s, 0.0)
        total_bytes = total_bytes + xfer * n
        bound = np.full(len(rows), "link").astype(str)
        return OpCost(time_s=time_s, energy_j={"link": self.transfer_energy_j(total_bytes)},
                      bytes_by_level={"link": total_bytes}, flops=np.zeros(len(rows)), bound=bound)


def from_spec(spec: LinkSpec) -> LinkModel:
    return LinkModel(spec)


registry.register("link", LinkSpec, from_spec)
