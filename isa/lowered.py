"""What a PIM lowering produces and reads: the channel organisation (Org), the processing-unit facts (PU),
the lowered op (Lowered) and engine command records (_Cmds, the engine's op codes and fields). Shared by the
lowerings of isa/lower.py and isa/lower_newton.py, so neither imports the other's module for its types."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnsim.isa.base import Program

# Engine op codes, from hwmodels/dram/API.md ("values stable"); checked against Op in the tests.
ENGINE_CODES = {
    "NOP": 0,
    "ACT": 1,
    "PRE": 2,
    "PREA": 3,
    "RD": 4,
    "WR": 5,
    "REF": 6,
    "REFPB": 7,
    "ACTAB": 8,
    "MACAB": 9,
    "MACSB": 10,
    "ACTBG": 11,
    "MACBG": 12,
    "BUF": 13,
    "FIX": 14,
    "BARRIER": 15,
    "MODE": 16,
}
# record flags, from hwmodels/dram/API.md (F_AP auto-precharge, F_IL interleaved reads); checked in the tests
ENGINE_FLAGS = {"AP": 1, "IL": 2}
CMD_FIELDS = ("op", "ch", "pch", "rank", "bg", "bank", "row", "col", "repeat", "cycles")
LEVELS = ("pch", "rank", "bg", "bank")


@dataclass(frozen=True)
class Org:
    """The organisation facts the lowering needs (one channel)."""

    pseudo_channels: int
    ranks: int
    bank_groups: int
    banks_per_group: int
    rows: int
    columns: int  # column commands (bursts) per row
    burst_bytes: int

    @staticmethod
    def from_spec(spec) -> "Org":
        o = spec.org
        return Org(o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group, o.rows, o.columns, o.burst_bytes)

    def size(self, level: str) -> int:
        return {"pch": self.pseudo_channels, "rank": self.ranks, "bg": self.bank_groups, "bank": self.banks_per_group}[
            level
        ]

    @property
    def banks(self) -> int:
        return self.pseudo_channels * self.ranks * self.bank_groups * self.banks_per_group


@dataclass(frozen=True)
class PU:
    """Processing-unit facts the lowering needs."""

    macs_per_command: int = 16  # AttAcc trace-gen n_mac = 16 (pim_dram.md b.1)
    column_bytes: int = 32  # AttAcc prefetch_size = 32 B (b.1); AiM 256 bit (b.4)
    acc_bytes: int = 2  # result element (FP16)
    softmax_cycles_per_element: float = 0.0  # buffer-die softmax unit, CK cycles per score
    gb_bytes: int = 2048  # AiM global buffer (2 KB, b.4); FIMDRAM GRF_A tile = 8 x 32 B
    mac_registers: int = 1  # AiM: MAC result registers per bank (FC outputs in flight per GB fill)


@dataclass
class Lowered:
    """Distinct channel workloads of one op: program, engine records, channels running it."""

    isa: str
    phase: str
    programs: list[Program]
    commands: list[dict[str, np.ndarray]]
    multiplicity: np.ndarray  # channels running each program
    macs: float = 0.0  # useful MACs over all channels
    pim_bytes: float = 0.0  # matrix bytes read by PUs over all channels
    meta: dict = field(default_factory=dict)

    @property
    def channels_used(self) -> int:
        return int(self.multiplicity.sum())


class _Cmds:
    def __init__(self):
        self.rows: list[tuple] = []

    def add(self, op, ch=0, pch=-1, rank=-1, bg=-1, bank=-1, row=0, col=0, repeat=1, cycles=0):
        self.rows.append((ENGINE_CODES[op], ch, pch, rank, bg, bank, row, col, repeat, cycles))

    def arrays(self) -> dict[str, np.ndarray]:
        a = np.array(self.rows, dtype=np.int64).reshape(-1, len(CMD_FIELDS))
        return {k: a[:, i].copy() for i, k in enumerate(CMD_FIELDS)}
