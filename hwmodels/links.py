"""Links (NVLink, PCIe, CXL): transfer time/energy and collectives.

``allreduce`` chooses how collectives (and, with ``nccl``/``custom``, point-to-point transfers) are timed:

* ``nccl`` (GPU links' default): NCCL's protocols and algorithms with its tuner (:mod:`collectives`,
  parameters in the preset's ``nccl`` block); transfers are NCCL send/recv;
* ``custom``: framework one-shot / two-shot all-reduce up to ``custom_allreduce.max_bytes`` (vLLM /
  TensorRT-LLM custom all-reduce), NCCL above;
* ``ring`` / ``tree``: the one-line formulas below (``ring`` is the model before the NCCL tuner, kept by
  name; the default of links that carry no NCCL, e.g. CXL-PNM devices and GPU <-> PIM copies):

* ``transfer_time_s(b) = latency + b / (bandwidth_per_direction * efficiency)``
* ring all-reduce of ``S`` bytes per rank over ``n`` ranks (reduce-scatter + all-gather, 2(n-1) steps of
  ``S/n`` bytes): ``t = 2(n-1)/n * S / (bw * eff) + 2(n-1) * latency``; each rank sends (and receives)
  ``2(n-1)/n * S`` bytes, which is what OpTrace's ``comm_bytes`` column holds (workloads/trace.py).
* energy: ``energy_pj_per_bit`` x bits sent (each bit crosses one link once).

``cost(trace, rows)`` costs ``allreduce`` rows with ``n = trace.tp``; time is per collective, energy and
link bytes are summed over all ranks (the engine counts a link's energy once per transfer).
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, PositiveFloat, model_validator
from pydantic_core import PydanticCustomError

from attnsim.core.config import Schema
from attnsim.hwmodels import collectives, registry
from attnsim.hwmodels.base import OpCost
from attnsim.hwmodels.collectives import CustomAllReduceSpec, NCCLSpec


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
    # nccl: NCCL's tuner over protocols x algorithms (the ``nccl`` block); custom: framework one-/two-shot
    # all-reduce then NCCL; ring: 2(n-1) x latency_us + 2(n-1)/n x bytes / (bandwidth x efficiency) (the
    # model before the tuner); tree: the same with 2 ceil(log2 n) latency steps.
    allreduce: Literal["ring", "tree", "nccl", "custom"] = "ring"
    nccl: Optional[NCCLSpec] = Field(None, description="NCCL collectives parameters (allreduce: nccl or custom)")
    custom_allreduce: Optional[CustomAllReduceSpec] = Field(
        None, description="framework one-/two-shot all-reduce parameters (allreduce: custom)"
    )

    @model_validator(mode="after")
    def _blocks(self):
        if self.allreduce in ("nccl", "custom") and self.nccl is None:
            raise PydanticCustomError(
                "config_number",
                "{msg}",
                {"msg": f"expected an nccl block with allreduce: {self.allreduce}, got none", "path": "nccl"},
            )
        if self.allreduce == "custom" and self.custom_allreduce is None:
            raise PydanticCustomError(
                "config_number",
                "{msg}",
                {
                    "msg": "expected a custom_allreduce block with allreduce: custom, got none",
                    "path": "custom_allreduce",
                },
            )
        return self


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

    @property
    def uses_nccl(self) -> bool:
        return self.spec.allreduce in ("nccl", "custom")

    def collective(self, coll: str, nbytes, n_ranks: int):
        """(time_s, choice) of one ``coll`` (allreduce, allgather, reducescatter, sendrecv) of ``nbytes``
        (nccl-tests' size: the per-rank buffer; all-gather's output, reduce-scatter's input) over
        ``n_ranks``; ``choice`` names the algorithm/protocol (or the formula)."""
        s = np.asarray(nbytes, dtype=np.float64)
        n = int(n_ranks)
        peak = self.peak_bandwidth_bytes_per_s
        if self.spec.allreduce == "custom" and coll == "allreduce":
            return collectives.custom_allreduce_time_s(self.spec.custom_allreduce, self.spec.nccl, peak, s, n)
        if self.uses_nccl:
            return collectives.tuned(self.spec.nccl, peak, coll, s, n)
        if coll == "allreduce":
            t = self.allreduce_time_s(s, n)
        elif coll == "sendrecv":
            t = self.transfer_time_s(s)
        else:  # ring all-gather / reduce-scatter: n-1 steps of S/n bytes
            t = (n - 1.0) / n * s / self.bandwidth_bytes_per_s + (n - 1.0) * self.latency_s if n > 1 else 0.0 * s
        return np.asarray(t, dtype=np.float64), np.full(s.shape, self.spec.allreduce, dtype=object)

    def allreduce_time_s(self, bytes_per_rank, n_ranks) -> np.ndarray:
        """All-reduce of ``bytes_per_rank`` (the tensor size on each rank) over ``n_ranks``."""
        s = np.asarray(bytes_per_rank, dtype=np.float64)
        if self.uses_nccl:
            return self.collective("allreduce", s, int(n_ranks))[0]
        n = np.asarray(n_ranks, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = 2.0 * (n - 1.0) / n * s / self.bandwidth_bytes_per_s + self.latency_steps(n) * self.latency_s
        return np.where(n > 1, t, 0.0)

    def allreduce_energy_j(self, bytes_per_rank, n_ranks) -> np.ndarray:
        """All ranks together send ``n * 2(n-1)/n * S = 2(n-1) * S`` bytes."""
        s = np.asarray(bytes_per_rank, dtype=np.float64)
        n = np.asarray(n_ranks, dtype=np.float64)
        return self.transfer_energy_j(2.0 * np.maximum(n - 1.0, 0.0) * s)

    MAX_COST_MEMO = 4096  # entries of the per-link cost memo below (cleared when full; bounds memory)

    def cost(self, trace, rows: np.ndarray) -> OpCost:
        """Cost of the rows, memoised on everything it reads (the rows' classes and bytes, tp, the spec): a serving
        run's iterations repeat the same collectives (the arrays returned are shared, so read only)."""
        rows = np.asarray(rows, dtype=np.int64)
        cls = trace.cols["cls"][rows]
        raw = trace.cols["comm_bytes"][rows].astype(np.float64)
        n = int(getattr(trace, "tp", 1) or 1)
        key = (id(self.spec), n, cls.dtype.str, cls.tobytes(), raw.tobytes())
        memo = self.__dict__.setdefault("_cost_memo", {})
        hit = memo.get(key)
        if hit is None or hit[0] is not self.spec:
            hit = (self.spec, self._cost(cls, raw, n))
            for a in (
                hit[1].time_s,
                hit[1].bound,
                hit[1].flops,
                *hit[1].energy_j.values(),
                *hit[1].bytes_by_level.values(),
            ):
                a.setflags(write=False)
            if len(memo) >= self.MAX_COST_MEMO:
                memo.clear()
            memo[key] = hit
        return hit[1]

    def _cost(self, cls: np.ndarray, raw: np.ndarray, n: int) -> OpCost:
        comm = np.where(cls == "allreduce", raw, 0.0)
        xfer = np.where(cls == "transfer", raw, 0.0)
        if self.uses_nccl:  # comm_bytes = 2(n-1)/n x the tensor (workloads/trace.py): back to the tensor
            tensor = comm * n / (2.0 * (n - 1.0)) if n > 1 else np.zeros(len(raw))
            time_s = np.where(comm > 0, self.collective("allreduce", tensor, n)[0], 0.0)
            # point-to-point transfers (pipeline stages): NCCL send/recv of comm_bytes per rank
            time_s = time_s + np.where(xfer > 0, self.collective("sendrecv", xfer, 2)[0], 0.0)
        else:
            if n > 1:
                time_s = comm / self.bandwidth_bytes_per_s + np.where(
                    comm > 0, self.latency_steps(n) * self.latency_s, 0.0
                )
            else:
                time_s = np.zeros(len(raw))
            # point-to-point transfers (mapper-added rows): every rank moves comm_bytes over its own link
            time_s = time_s + np.where(xfer > 0, xfer / self.bandwidth_bytes_per_s + self.latency_s, 0.0)
        total_bytes = comm * n if n > 1 else np.zeros(len(raw))
        total_bytes = total_bytes + xfer * n
        bound = np.full(len(raw), "link").astype(str)
        return OpCost(
            time_s=time_s,
            energy_j={"link": self.transfer_energy_j(total_bytes)},
            bytes_by_level={"link": total_bytes},
            flops=np.zeros(len(raw)),
            bound=bound,
        )


def from_spec(spec: LinkSpec) -> LinkModel:
    return LinkModel(spec)


registry.register("link", LinkSpec, from_spec)
