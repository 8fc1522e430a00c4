"""attnsim.hwmodels.dram: DRAM specs, Numba bank-timing engine, request controller (see API.md)."""

from attnsim.hwmodels.dram.device import DRAMDevice
from attnsim.hwmodels.dram.engine import (
    CMD_DTYPE,
    F_AP,
    F_IL,
    CommandResult,
    Op,
    cmds_from,
    expand_macros,
    make_cmds,
    raw_run,
    run_commands,
)
from attnsim.hwmodels.dram.spec import DRAMSpec, energy_params, load_dram_spec, parse_mapping

__all__ = [
    "DRAMSpec",
    "DRAMDevice",
    "energy_params",
    "load_dram_spec",
    "parse_mapping",
    "CMD_DTYPE",
    "F_AP",
    "F_IL",
    "CommandResult",
    "Op",
    "cmds_from",
    "expand_macros",
    "make_cmds",
    "raw_run",
    "run_commands",
    "RequestResult",
    "decode",
    "simulate_requests",
]


def __getattr__(name: str):
    """The request controller (Numba kernels) is imported on first use: a PIM model's command walks need none of it."""
    if name in ("RequestResult", "decode", "simulate_requests"):
        from attnsim.hwmodels.dram import controller

        return getattr(controller, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
