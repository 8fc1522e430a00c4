"""AttAcc HBM3-PIM command set (ASPLOS'24; scale-snu/attacc_simulator), as data.

Commands follow the Ramulator2 HBM3-PIM model and its trace generator
(shared/reference/pim_dram.md b.1 and b.6: ``pim_ramulator_src/HBM3-PIM.cpp``,
``trace_gen/gen_trace_attacc_bank.py``). One command is issued per channel and acts on every
bank of that channel (all pseudo-channels and ranks: "one head per channel" scheme). ACTAB/PREA
are inserted by the controller in AttAcc; here the lowering emits them explicitly so that the
program is the whole command stream.

Word: 64 bits, opcode in bits 63:58. Address widths cover HBM3 (JESD238A; b.1): 16 channels
(5 bits, room for 32), 2 pCH, 2 ranks (SID), 4 BG x 4 banks, 2^14 rows (16 bits, room for
denser dies), 2^5 columns of 32 B (6 bits).
"""

from __future__ import annotations

from attnsim.isa.base import ISA, Field, Opcode

SRC = "pim_dram.md b.1/b.6 (AttAcc HBM3-PIM.cpp, gen_trace_attacc_bank.py)"

CH = Field("ch", 5, doc="channel")
ROW = Field("row", 16, doc="row activated in every bank")
COL = Field("col", 6, doc="first column (32 B units)")
REPEAT = Field("repeat", 12, lo=1, default=1, doc="consecutive column commands (macro record)")
BURSTS = Field("bursts", 12, lo=1, doc="32 B transfers on the PIM datapath")
BANK = Field("bank", 6, doc="flat bank index in the channel (pch, rank, bg, bank)")

OPCODES = (
    Opcode(
        "ACTAB",
        0x01,
        (CH, ROW),
        "ACTAB",
        "activate `row` in all banks of channel `ch` (ACTAB->ACTAB >= nRC, tFAW waived)",
        SRC,
    ),
    Opcode(
        "PREA",
        0x02,
        (CH,),
        "PREA",
        "precharge all banks of channel `ch` (>= nRAS after ACTAB, >= nRTPL after MACAB)",
        SRC,
    ),
    Opcode(
        "MACAB",
        0x03,
        (CH, COL, REPEAT),
        "MACAB",
        "all-bank MAC: every bank reads `repeat` consecutive 32 B columns from `col` and does 16 FP16 "
        "MACs each against its GEMV buffer; spacing nCCDAB",
        SRC,
    ),
    Opcode(
        "MACSB",
        0x04,
        (CH, BANK, COL, REPEAT),
        "MACSB",
        "single-bank MAC on bank `bank` of channel `ch`; spacing nCCDSB",
        SRC,
    ),
    Opcode(
        "WRGB",
        0x05,
        (CH, BURSTS),
        "BUF",
        "write `bursts` x 32 B of the query/score vector into the GEMV buffers (broadcast)",
        SRC,
    ),
    Opcode(
        "MVSB",
        0x06,
        (CH, BURSTS),
        "BUF",
        "move `bursts` x 32 B of accumulated results from the GEMV buffers to the softmax buffer",
        SRC,
    ),
    Opcode(
        "MVGB",
        0x07,
        (CH, BURSTS),
        "BUF",
        "move `bursts` x 32 B of softmax output into the GEMV buffers (context phase)",
        SRC,
    ),
    Opcode(
        "SFM",
        0x08,
        (CH, Field("length", 20, lo=1, doc="elements")),
        "FIX",
        "softmax over `length` scores in the buffer-die softmax unit",
        SRC,
    ),
    Opcode("BARRIER", 0x09, (CH,), "BARRIER", "wait until all earlier commands of channel `ch` complete", SRC),
    Opcode("REFAB", 0x0A, (CH,), "REF", "all-bank refresh of channel `ch` (blocks ACTAB for nRFC)", SRC),
    Opcode("RD", 0x0B, (CH, BANK, COL, REPEAT), "RD", "normal read burst(s) to the host", SRC),
    Opcode("WR", 0x0C, (CH, BANK, COL, REPEAT), "WR", "normal write burst(s) from the host", SRC),
)

ATTACC = ISA(
    name="attacc",
    word_bits=64,
    opcode_bits=6,
    opcodes=OPCODES,
    doc="AttAcc-style HBM3-PIM all-bank GEMV commands (one command per channel).",
    source=SRC,
)
