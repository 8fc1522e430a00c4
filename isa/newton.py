"""Newton / NeuPIMs HBM2-PIM command set (casys-kaist/NeuPIMs, extern/NewtonSim), as data.

Commands follow NewtonSim's ``CommandType`` (``src/common.h``) and timing table (``src/timing.cc``,
``src/channel_state.cc``) at NeuPIMs main f299af3: ``GWRITE`` fills the channel's global buffer
with the input vector (query / probabilities), ``G_ACT`` opens one row in the four banks of a bank
group (NewtonSim spaces two G_ACTs of a rank by tFAW: four bank activations), ``COMP`` is one
all-bank column op (every bank multiplies ``pim_comp_coverage`` = 16 FP16 operands against the
global buffer; spacing max(burst cycle, tCCD_S) = 2 CK), ``READRES`` moves the per-bank results
(one FP16 per bank) to the NPU, ``PIM_PRECHARGE`` closes the PIM row in every bank. NeuPIMs fuses
``COMP x n + READRES`` into ``COMPS_READRES``; the fused form is the same command sequence here.
``RD``/``WR`` are the NPU's own memory traffic in the same command stream (single row buffer: the
two streams share the banks' row buffers).

Word: 64 bits, opcode in bits 63:58. Address widths cover the NeuPIMs preset (neupims.json,
HBM2_8Gb_x128_dualpim.ini): 32 channels (5 bits), 2 ranks per channel (1 bit, room for 4),
4 BG x 4 banks, 32768 rows (15 bits, room for 65536), 16 bursts of 64 B per 1 KB row.
"""

from __future__ import annotations

from attnsim.isa.base import ISA, Field, Opcode

SRC = "casys-kaist/NeuPIMs f299af3 extern/NewtonSim src/common.h, src/timing.cc, src/channel_state.cc"

CH = Field("ch", 5, doc="channel")
RANK = Field("rank", 2, doc="rank (HBM2 die pair / SID)")
BG = Field("bg", 2, doc="bank group")
BANK = Field("bank", 2, doc="bank within the bank group")
ROW = Field("row", 16, doc="row")
COL = Field("col", 6, default=0, doc="first column of the row (32 B COMP operand units)")
REPEAT = Field("repeat", 12, lo=1, default=1, doc="consecutive column commands (macro record)")
BURSTS = Field("bursts", 12, lo=1, doc="32 B units moved between the NPU and the global buffer / PUs")

OPCODES = (
    Opcode(
        "GWRITE",
        0x01,
        (CH, BURSTS),
        "BUF",
        "write `bursts` x 32 B of the input vector into the channel's global buffer "
        "(NewtonSim gwrite_delay = (tCCD_S + tCCD_L) x 32 per 1 KB row)",
        SRC,
    ),
    Opcode(
        "GACT",
        0x02,
        (CH, RANK, BG, ROW),
        "ACTBG",
        "G_ACT: open `row` in every bank of bank group `bg` of rank `rank`; counts as 4 ACTs in tFAW "
        "(pim.actbg_faw_acts), so two G_ACTs of a rank are >= tFAW apart as in NewtonSim",
        SRC,
    ),
    Opcode(
        "COMP",
        0x03,
        (CH, COL, REPEAT),
        "MACAB",
        "all-bank MAC: every bank multiplies 16 FP16 operands of its open row against the global "
        "buffer, `repeat` times, max(burst cycle, tCCD_S) apart",
        SRC,
    ),
    Opcode(
        "READRES",
        0x04,
        (CH, BURSTS),
        "BUF",
        "read the per-bank results (one FP16 per bank and query) back to the NPU",
        SRC,
    ),
    Opcode("PIM_PRECHARGE", 0x05, (CH,), "PREA", "close the PIM row in every bank of channel `ch`", SRC),
    Opcode(
        "BARRIER",
        0x06,
        (CH,),
        "BARRIER",
        "wait until every earlier command of channel `ch` completed (global buffer refilled)",
        SRC,
    ),
    Opcode(
        "RD",
        0x07,
        (CH, RANK, BG, BANK, ROW, COL, REPEAT),
        "RD",
        "NPU read burst(s) of 64 B from `row` (weights, KV) in the same banks",
        SRC,
    ),
    Opcode(
        "WR",
        0x08,
        (CH, RANK, BG, BANK, ROW, COL, REPEAT),
        "WR",
        "NPU write burst(s) of 64 B (new K/V tokens) in the same banks",
        SRC,
    ),
)

NEWTON = ISA(
    name="newton",
    word_bits=64,
    opcode_bits=6,
    opcodes=OPCODES,
    doc="Newton/NeuPIMs HBM2-PIM commands (bank-group activation, global buffer, all-bank COMP, READRES).",
    source=SRC,
)
