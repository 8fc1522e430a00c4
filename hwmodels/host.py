"""Host server (YAML ``kind: host``): CPU sockets and host DRAM that draw static power.

A system lists its host as a device pool (e.g. ``cpu: {hardware: dgx_h100_host, count: 1}``) so its
idle power lands in ``static_energy_j_by_device`` beside the accelerators (parts ``cpu``, ``dram``)
and ``--set hardware.<host>.<field>`` and ``attnsim sensitivity`` reach it like any device. Why a
device kind rather than a ``host:`` block of the system: static power, counts, breakdowns and
overrides already work per pool; a host pool runs no trace rows (a policy that places one on it is
refused), and the host's software costs are the system's ``software`` preset (hwmodels/stack.py).
Host memory that holds offloaded KV/weights is a ``kind: memory`` pool (it is costed), not this.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from attnsim.core.config import ConfigError, Plausible, Schema
from attnsim.hwmodels import registry


class HostSpec(Schema):
    plausible = {"cpu_sockets": Plausible(1, 64, "CPU sockets per host: 1-8 (HPE Superdome Flex: 32)")}
    kind: Literal["host"]
    name: str
    description: str = ""
    source: str = ""
    cpu_sockets: PositiveInt = 1
    cpu_idle_w_per_socket: float = Field(0.0, ge=0, description="one CPU socket's package power at idle (W)")
    dram_idle_w: float = Field(0.0, ge=0, description="host DRAM background power, all DIMMs (W)")


class HostDevice:
    """DeviceModel of a host: static power only."""

    kind = "host"
    peak_flops = 0.0
    capacity_bytes = 0.0
    peak_bandwidth_bytes_per_s = 0.0

    def __init__(self, spec: HostSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def static_power_parts_w(self) -> dict[str, float]:
        s = self.spec
        return {"cpu": s.cpu_sockets * s.cpu_idle_w_per_socket, "dram": s.dram_idle_w}

    @property
    def static_power_w(self) -> float:
        return float(sum(self.static_power_parts_w.values()))

    def cost(self, trace, rows):
        raise ConfigError(
            f"host {self.name!r} runs no trace rows (it draws static power only); place rows on a "
            f"gpu, npu, pim or memory pool",
            key="devices",
        )


registry.register("host", HostSpec, HostDevice)
