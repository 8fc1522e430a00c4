"""Samsung HBM-PIM / FIMDRAM CRF programs (ISSCC'21; SAITPublic/PIMSimulator), as data.

The PCU (one per 2 banks, 16-lane FP16 SIMD) holds a 32-entry CRF of 32-bit instructions over
register files GRF_A (8 x 256 b), GRF_B (8 x 256 b), SRF_M/SRF_A (8 scalars each) and the
even/odd bank row buffers (shared/reference/pim_dram.md b.3). A CRF program is not run by a
clock: every DRAM column command (RD/WR) issued in PIM mode advances the CRF program counter
and feeds one 256-bit bank column to the instruction (b.6 "Every DRAM RD/WR in PIM mode
advances the CRF PC"); each arithmetic instruction costs tCCD_L (b.3, PIMSimulator issue #3).

Bit layout (word 31:0): opcode 31:28, dst 27:25, src0 24:22, src1 21:19, src2 18:16, AAM 15,
ReLU 12, dst index 10:8, src0 index 6:4, src1 index 2:0; JUMP: loop count 27:17, offset 16:11;
NOP: count 10:0. Layout, opcode codes and operand-type order follow PIMSimulator
``PIMCmd.cpp``/``PIMCmd.h`` as recalled [recall: not re-read here; the simulator's own binary
compatibility is not claimed].

JUMP semantics: ``JUMP offset, count`` jumps back ``offset`` entries ``count`` times, then
falls through (a per-entry loop counter, as in PIMSimulator). NOP ``count`` waits ``count + 1``
column commands. EXIT ends the program (PIM mode stays on; the host parks out).
"""

from __future__ import annotations

from attnsim.isa.base import ISA, Field, Opcode, Program

SRC = "pim_dram.md b.3/b.6 (SAITPublic/PIMSimulator PIMCmd.cpp, PIMKernel.cpp) [recall: encoding]"

# operand types, in PIMSimulator PIMOpdType order [recall]
OPD = ("A_OUT", "M_OUT", "EVEN_BANK", "ODD_BANK", "GRF_A", "GRF_B", "SRF_M", "SRF_A")
GRF = ("GRF_A", "GRF_B")
BANKS = ("EVEN_BANK", "ODD_BANK")
MAX_CRF = 32  # CRF entries (b.3)


def _opd(name: str, lsb: int, allowed, index: str | None = None) -> Field:
    return Field(name, 3, enum=OPD, allowed=tuple(allowed), index=index, lsb=lsb)


def _idx(name: str, lsb: int) -> Field:
    return Field(name, 3, lsb=lsb, default=0, doc="register index (GRF 0-7, SRF 0-7)")


AAM = Field("aam", 1, lsb=15, default=0, doc="auto address mode: register index from the column address")
RELU = Field("relu", 1, lsb=12, default=0, doc="apply ReLU on MOV")
SRCS = GRF + BANKS + ("SRF_M", "SRF_A")


def _arith(mn, code, doc, mad=False):
    fields = [_opd("dst", 25, GRF, "dst_idx"), _opd("src0", 22, SRCS, "src0_idx"), _opd("src1", 19, SRCS, "src1_idx")]
    if mad:
        fields.append(_opd("src2", 16, ("GRF_A", "GRF_B", "SRF_A")))
    fields += [AAM, _idx("dst_idx", 8), _idx("src0_idx", 4), _idx("src1_idx", 0)]
    return Opcode(mn, code, tuple(fields), "MACAB", doc, SRC)


OPCODES = (
    Opcode(
        "NOP",
        0x0,
        (Field("count", 11, lsb=0, default=0, doc="extra column commands to wait"),),
        "NONE",
        "do nothing for count + 1 column commands",
        SRC,
    ),
    _arith("ADD", 0x1, "dst = src0 + src1 (16 lanes)"),
    _arith("MUL", 0x2, "dst = src0 * src1 (16 lanes)"),
    _arith("MAC", 0x3, "dst += src0 * src1 (16 lanes)"),
    _arith("MAD", 0x4, "dst = src0 * src1 + src2 (16 lanes)", mad=True),
    Opcode(
        "MOV",
        0x8,
        (
            _opd("dst", 25, GRF + BANKS, "dst_idx"),
            _opd("src0", 22, GRF + BANKS, "src0_idx"),
            RELU,
            _idx("dst_idx", 8),
            _idx("src0_idx", 4),
        ),
        "MACAB",
        "dst = src0 (optionally ReLU); bank destination writes the row buffer",
        SRC,
    ),
    Opcode(
        "FILL",
        0x9,
        (
            _opd("dst", 25, GRF, "dst_idx"),
            _opd("src0", 22, BANKS, "src0_idx"),
            RELU,
            _idx("dst_idx", 8),
            _idx("src0_idx", 4),
        ),
        "MACAB",
        "load a GRF register from the bank column being accessed",
        SRC,
    ),
    Opcode(
        "JUMP",
        0xE,
        (
            Field("offset", 6, lo=1, lsb=11, label="back", doc="entries to jump back"),
            Field("count", 11, lsb=17, doc="times to take the jump"),
        ),
        "NONE",
        "jump back `offset` entries `count` times, then fall through",
        SRC,
    ),
    Opcode("EXIT", 0xF, (), "NONE", "end of the CRF program", SRC),
)


def _check(prog: Program) -> list[tuple[int, str]]:
    errs = []
    jump, exit_ = FIMDRAM.code("JUMP"), FIMDRAM.code("EXIT")
    for i in range(len(prog)):
        if prog.opcode[i] == jump:
            t = i - int(prog["offset"][i])
            if t < 0:
                errs.append((i, f"JUMP: jump out of range (target entry {t}, program starts at 0)"))
    if len(prog) and not (prog.opcode == exit_).any():
        errs.append((len(prog) - 1, "missing EXIT: a CRF program must end with EXIT"))
    if not len(prog):
        errs.append((0, "empty CRF program (missing EXIT)"))
    return errs


FIMDRAM = ISA(
    name="fimdram",
    word_bits=32,
    opcode_bits=4,
    opcodes=OPCODES,
    doc="Samsung HBM-PIM (FIMDRAM) PCU CRF microprogram, advanced by column commands.",
    source=SRC,
    max_len=MAX_CRF,
    checks=(_check,),
)

DATA_OPS = ("ADD", "MUL", "MAC", "MAD", "MOV", "FILL")


def execute_trace(prog: Program, max_steps: int = 1_000_000) -> list[int]:
    """CRF entries executed in order until EXIT (JUMP loops unrolled); NOP appears once."""
    jump, exit_ = FIMDRAM.code("JUMP"), FIMDRAM.code("EXIT")
    counters: dict[int, int] = {}
    pc, out = 0, []
    while pc < len(prog):
        if len(out) > max_steps:
            raise ValueError("CRF program does not terminate within max_steps")
        c = int(prog.opcode[pc])
        if c == exit_:
            return out
        if c == jump:
            left = counters.get(pc, int(prog["count"][pc]))
            if left > 0:
                counters[pc] = left - 1
                pc -= int(prog["offset"][pc])
                continue
            counters.pop(pc, None)
            pc += 1
            continue
        out.append(pc)
        pc += 1
    return out


def column_commands(prog: Program) -> int:
    """Column commands one pass of the CRF program consumes (data ops 1 each, NOP count + 1)."""
    nop = FIMDRAM.code("NOP")
    n = 0
    for pc in execute_trace(prog):
        n += int(prog["count"][pc]) + 1 if prog.opcode[pc] == nop else 1
    return n


def gemv_kernel(grf_a: int = 8) -> Program:
    """The PIMSimulator GEMV CRF kernel (b.6): MAC over the even bank, JUMP, MAC over the odd
    bank, JUMP, NOP, EXIT; each MAC runs ``grf_a`` times (one per GRF_A register, AAM on)."""
    recs = [
        ("MAC", dict(dst=5, src0=2, src1=4, aam=1)),
        ("JUMP", dict(offset=1, count=grf_a - 1)),
        ("MAC", dict(dst=5, src0=3, src1=4, aam=1)),
        ("JUMP", dict(offset=1, count=grf_a - 1)),
        ("NOP", dict(count=0)),
        ("EXIT", {}),
    ]
    return Program.from_records(FIMDRAM, recs)
