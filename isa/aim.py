"""SK hynix GDDR6-AiM command set (ISSCC'22; arkhadem/aim_simulator as used by CENT), as data.

ISR forms follow the aim_simulator README and ``GDDR6.cpp`` (shared/reference/pim_dram.md b.4,
b.6): ``MAC_ABK opsize channel_mask row`` expands to ACT16 + ``opsize`` MAC16 commands (each a
256-bit MAC in all 16 banks against the global buffer, spaced nCCDL, first after nRCDRDMAC);
``WR_GB`` fills the 2 KB channel global buffer; ``RD_MAC`` reads the 16 per-bank MAC registers
into a GPR; ``AF`` applies the LUT activation; ``SYNC``/``EOC`` block. ``ch_mask`` broadcasts
the ISR to several of the 32 channels (GDDR6_AiM_org: 32 channels x 16 banks, 16K rows, 1K
columns x 16 bit = 64 columns of 32 B per row). ``WR_SBK`` / ``RD_SBK`` are ordinary single-bank
column writes / reads (the simulator turns them into its ``W MEM`` / ``R MEM`` requests); here
``opsize`` of them on consecutive columns of one bank form one instruction.

Two host-interface rules of the simulator the lowering follows (aim_simulator @ 2eb1ee0, CENT's
submodule): the register ISRs (``REGISTER_ISRS``: WR_GB, WR_BIAS, RD_MAC, RD_AF) run in the
register-RW mode and every switch into or out of it costs a TMOD command (nMODCH) before the next
command (AiM_dram_controller.cpp ``tick``: ``requires_reg_RW_mode ^ is_reg_RW_mode``; GDDR6.cpp
TMOD -> all commands nMODCH); and the device's memory system decodes one host request per command
clock (aim_DRAM_system.cpp ``tick``): an ISR is one request whatever its channel mask, every
single-bank access one request, so a device's ``RD_SBK`` / ``WR_SBK`` stream is bounded at
``HOST_REQUESTS_PER_CYCLE`` per tCK over all its channels.

Word: 64 bits, opcode 63:58; operands packed below it in the listed order.
A program must end with EOC (end of computation).
"""

from __future__ import annotations

from attnsim.isa.base import ISA, Field, Opcode, Program

SRC = "pim_dram.md b.4/b.6 (arkhadem/aim_simulator README, src/dram/impl/GDDR6.cpp; Yufeng98/CENT)"

MASK = Field("ch_mask", 32, lo=1, doc="channel mask (bit c = channel c)")
OPSIZE = Field("opsize", 7, lo=1, hi=64, doc="256-bit column operations (<= 64 per 2 KB row)")
ROW = Field("row", 14, doc="row")
BANK = Field("bank", 4, doc="bank (0-15)")
REG = Field("reg", 5, doc="GPR index")
GB = Field("gb_col", 6, default=0, doc="first 32 B column of the global buffer")

OPCODES = (
    Opcode(
        "WR_GB",
        0x01,
        (OPSIZE, MASK, GB),
        "BUF",
        "write opsize x 256 b of the input vector into the channel global buffer",
        SRC,
    ),
    Opcode(
        "MAC_ABK",
        0x02,
        (OPSIZE, MASK, ROW),
        "MACAB",
        "ACT16 on `row`, then opsize MAC16 (all 16 banks x 16 MACs vs GB), nCCDL apart",
        SRC,
    ),
    Opcode(
        "MAC_SBK",
        0x03,
        (OPSIZE, MASK, BANK, ROW),
        "MACSB",
        "single-bank MAC: ACT `row` in `bank`, opsize MAC commands",
        SRC,
    ),
    Opcode("RD_MAC", 0x04, (MASK, REG), "BUF", "read the 16 per-bank MAC registers into GPR `reg`", SRC),
    Opcode("WR_BIAS", 0x05, (MASK,), "BUF", "write a bias vector into the per-bank MAC registers", SRC),
    Opcode("AF", 0x06, (MASK,), "FIX", "LUT-based activation function on the MAC registers", SRC),
    Opcode("RD_AF", 0x07, (MASK, REG), "BUF", "read the activation results into GPR `reg`", SRC),
    Opcode("WR_AFLUT", 0x08, (OPSIZE, MASK), "BUF", "load the activation look-up table", SRC),
    Opcode("EWMUL", 0x09, (OPSIZE, MASK, ROW), "MACAB", "element-wise multiply of bank data (nRCDEWMUL)", SRC),
    Opcode("EWADD", 0x0A, (OPSIZE, MASK, ROW), "MACAB", "element-wise add of bank data", SRC),
    Opcode("COPY_BKGB", 0x0B, (OPSIZE, MASK, BANK, ROW), "RD", "copy bank columns into the global buffer", SRC),
    Opcode("COPY_GBBK", 0x0C, (OPSIZE, MASK, BANK, ROW), "WR", "copy the global buffer into bank columns", SRC),
    Opcode("SYNC", 0x0D, (), "BARRIER", "wait for all outstanding ISRs", SRC),
    Opcode("EOC", 0x0E, (), "BARRIER", "end of computation", SRC),
    Opcode("WR_SBK", 0x0F, (OPSIZE, MASK, BANK, ROW), "WR", "opsize single-bank column writes (W MEM)", SRC),
    Opcode("RD_SBK", 0x10, (OPSIZE, MASK, BANK, ROW), "RD", "opsize single-bank column reads (R MEM)", SRC),
)

#: ISRs executed in the register-RW mode (aim_simulator base/request.h ``require_reg_RW_mod``)
REGISTER_ISRS = frozenset({"WR_GB", "WR_BIAS", "RD_MAC", "RD_AF"})
#: host requests the device's memory system decodes per command clock (aim_DRAM_system.cpp ``tick``)
HOST_REQUESTS_PER_CYCLE = 1


def _check(prog: Program) -> list[tuple[int, str]]:
    eoc = AIM.code("EOC")
    if not len(prog) or prog.opcode[-1] != eoc:
        return [(max(len(prog) - 1, 0), "missing EOC: an AiM program must end with EOC")]
    return []


AIM = ISA(
    name="aim",
    word_bits=64,
    opcode_bits=6,
    opcodes=OPCODES,
    doc="SK hynix GDDR6-AiM ISRs (all-bank MAC against a per-channel global buffer).",
    source=SRC,
    checks=(_check,),
)
