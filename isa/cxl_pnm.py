"""A CXL-PNM instruction set for LPDDR5X near-memory units (designed here).

Target: an LPDDR-based CXL-PNM device (Park et al., HPCA 2024; shared/reference/devices.md (e),
cxl_reliability.md 1.1): an accelerator inside the CXL controller with matrix/vector units
and on-chip vector buffers, streaming operands from 16 x64 LPDDR5X-8533 packages (~1.1 TB/s
[D]). The paper's ISA is not public, so this one is a documented design, not a reproduction.

Semantics (buffers ``b0``..``b15`` are on-chip vector buffers; addresses are device bytes;
``dtype`` is the element format in memory, accumulation in FP32):

- ``LOAD_VEC dst, addr, length, dtype``: ``b[dst][0:length] = mem[addr : addr + length*size]``.
- ``GEMV dst, src, base, rows, cols, dtype, trans, vectors``: W is a ``rows x cols`` row-major matrix at
  ``base``. ``trans=0``: ``b[dst][0:rows] = W @ b[src][0:cols]`` (attention score: W = K of one
  head, rows = tokens, cols = head dim). ``trans=1``: ``b[dst][0:cols] = W^T @ b[src][0:rows]``
  (context: W = V, x = softmax scores). ``vectors`` > 1 applies W to that many consecutive
  input vectors (GQA: the query heads sharing one KV head) in the same single pass over W.
  Streams ``rows*cols*size`` bytes once.
- ``SOFTMAX buf, length``: numerically stable softmax in place over ``b[buf][0:length]``.
- ``REDUCE dst, src, length, op``: ``b[dst][0] = op(b[src][0:length])`` with op SUM or MAX.
- ``STORE src, addr, length, dtype``: ``mem[addr ...] = b[src][0:length]``.
- ``BARRIER``: wait until every earlier instruction completed. ``HALT``: end of program.

Word: 128 bits, opcode 127:120, operands packed below in the listed order.
"""

from __future__ import annotations

from attnsim.isa.base import ISA, Field, Opcode

#: trace ops each PNM kernel runs (the op names of workloads/trace.py): the lowering (isa/lower.py) and the
#: controller model (hwmodels/cxl_controller.py) read them here, so the ISA never imports a device model
NORM_OPS = ("attn_norm", "ffn_norm", "final_norm", "q_norm", "kv_norm")
ROPE_OPS = ("rope",)

SRC = "designed for attnsim; target device devices.md (e), cxl_reliability.md 1.1"
DTYPES = ("FP32", "FP16", "BF16", "FP8", "INT8", "INT4")
DTYPE_BYTES = {"FP32": 4.0, "FP16": 2.0, "BF16": 2.0, "FP8": 1.0, "INT8": 1.0, "INT4": 0.5}

DST = Field("dst", 4, doc="destination buffer")
SRCB = Field("src", 4, doc="source buffer")
ADDR = Field("addr", 40, doc="device byte address (1 TiB)")
LEN = Field("length", 24, lo=1, doc="elements")
DT = Field("dtype", 3, enum=DTYPES, default=1, doc="element format in memory")

OPCODES = (
    Opcode("LOAD_VEC", 0x01, (DST, ADDR, LEN, DT), "RD", "load a vector from memory into a buffer", SRC),
    Opcode(
        "GEMV",
        0x02,
        (
            DST,
            SRCB,
            Field("base", 40, doc="matrix byte address"),
            Field("rows", 24, lo=1),
            Field("cols", 16, lo=1),
            DT,
            Field("trans", 1, default=0, doc="1: W^T x"),
            Field("vectors", 8, lo=1, default=1, doc="input vectors sharing one pass over W"),
        ),
        "RD",
        "matrix-vector product streaming the matrix from memory",
        SRC,
    ),
    Opcode("SOFTMAX", 0x03, (Field("buf", 4), LEN), "FIX", "softmax in place over a buffer", SRC),
    Opcode(
        "REDUCE",
        0x04,
        (DST, SRCB, LEN, Field("op", 1, enum=("SUM", "MAX"))),
        "FIX",
        "reduce a buffer to one element",
        SRC,
    ),
    Opcode("STORE", 0x05, (SRCB, ADDR, LEN, DT), "WR", "store a buffer to memory", SRC),
    Opcode("BARRIER", 0x06, (), "BARRIER", "wait for all earlier instructions", SRC),
    Opcode("HALT", 0x07, (), "NONE", "end of program", SRC),
)

CXL_PNM = ISA(
    name="cxl_pnm",
    word_bits=128,
    opcode_bits=8,
    opcodes=OPCODES,
    doc="CXL-PNM vector/matrix instructions over LPDDR5X (designed here).",
    source=SRC,
)
