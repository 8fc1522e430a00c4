"""attnsim.isa: PIM/PNM instruction sets as data, programs, assembler, GEMV lowering."""

from __future__ import annotations

from attnsim.core.config import ConfigError

ISA_NAMES = ("attacc", "fimdram", "aim", "cxl_pnm", "newton")


def get_isa(name: str):
    """The ISA table called ``name`` (one of ISA_NAMES); ConfigError otherwise."""
    if name == "attacc":
        from attnsim.isa.attacc import ATTACC as isa
    elif name == "fimdram":
        from attnsim.isa.fimdram import FIMDRAM as isa
    elif name == "aim":
        from attnsim.isa.aim import AIM as isa
    elif name == "cxl_pnm":
        from attnsim.isa.cxl_pnm import CXL_PNM as isa
    elif name == "newton":
        from attnsim.isa.newton import NEWTON as isa
    else:
        raise ConfigError(f"expected one of {', '.join(ISA_NAMES)}, got {name!r}", key="isa")
    return isa
