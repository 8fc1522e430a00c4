"""The registry's ``dram`` device (hwmodels/registry.py): a validated DRAMSpec with the command engine and the
request controller bound. Its own module, so spec.py (which engine.py and controller.py import) imports neither."""

from __future__ import annotations

from attnsim.hwmodels.dram.spec import DRAMSpec


class DRAMDevice:
    """Registry product: a validated spec with the engine entry points bound."""

    kind = "dram"

    def __init__(self, spec: DRAMSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        return self.spec.peak_bandwidth_gbps * 1e9

    @property
    def capacity_bytes(self) -> float:
        return float(self.spec.capacity_bytes)

    def run_commands(self, cmds, **kw):
        from attnsim.hwmodels.dram.engine import run_commands

        return run_commands(self.spec, cmds, **kw)

    def simulate_requests(self, addr, is_write, arrival=None, **kw):
        from attnsim.hwmodels.dram.controller import simulate_requests

        return simulate_requests(self.spec, addr, is_write, arrival, **kw)


def _register() -> None:
    from attnsim.hwmodels import registry

    registry.register("dram", DRAMSpec, DRAMDevice)


_register()
