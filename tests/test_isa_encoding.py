"""ISA tables: encoder/decoder and assembler/disassembler round trips on random legal programs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.isa import ISA_NAMES, get_isa
from attnsim.isa.base import Program, assemble, decode, disassemble, encode, validate_program

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def programs(draw, name):
    isa = get_isa(name)
    n = draw(st.integers(1, 40 if isa.max_len is None else isa.max_len - 1))
    recs = []
    for i in range(n):
        op = draw(st.sampled_from(isa.opcodes))
        vals = {}
        for f in op.fields:
            codes = f.allowed_codes()
            if codes is not None:
                vals[f.name] = draw(st.sampled_from(codes))
            elif f.label == "back":
                vals[f.name] = draw(st.integers(1, max(1, i)))
            else:
                vals[f.name] = draw(st.integers(f.min, f.max))
        if op.mnemonic == "JUMP" and i == 0:
            op, vals = isa.op("NOP"), {"count": 0}
        recs.append((op.mnemonic, vals))
    if name == "fimdram":
        recs.append(("EXIT", {}))
    if name == "aim":
        recs.append(("EOC", {}))
    return Program.from_records(isa, recs)


@pytest.mark.parametrize("name", ISA_NAMES)
def test_encode_decode_round_trip(name):
    @SETTINGS
    @given(programs(name))
    def check(prog):
        validate_program(prog)
        data = encode(prog)
        assert len(data) == len(prog) * prog.isa.word_bits // 8
        back = decode(prog.isa, data)
        assert back == prog
        assert encode(back) == data

    check()


@pytest.mark.parametrize("name", ISA_NAMES)
def test_asm_disasm_round_trip(name):
    @SETTINGS
    @given(programs(name))
    def check(prog):
        text = disassemble(prog)
        again = assemble(prog.isa, text)
        assert again == prog
        assert disassemble(again) == text

    check()


@pytest.mark.parametrize("name", ISA_NAMES)
def test_random_words_decode_exactly_or_fail_cleanly(name):
    isa = get_isa(name)

    @SETTINGS
    @given(st.lists(st.integers(0, (1 << isa.word_bits) - 1), min_size=1, max_size=8))
    def check(words):
        data = b"".join(w.to_bytes(isa.word_bytes, "little") for w in words)
        try:
            prog = decode(isa, data)
        except ConfigError as exc:
            assert "word " in str(exc)
            return
        assert encode(prog) == data  # the decoder is injective: no bits are dropped

    check()


def test_field_layouts_do_not_overlap_and_fit():
    for name in ISA_NAMES:
        isa = get_isa(name)
        for code, lay in isa.layout.items():
            used = code << (isa.word_bits - isa.opcode_bits)
            for f, lsb in lay:
                mask = ((1 << f.bits) - 1) << lsb
                assert not used & mask
                used |= mask
            assert used < (1 << isa.word_bits)


def test_fimdram_word_layout_by_hand():
    # MAC GRF_B[2], EVEN_BANK, GRF_A[5] with AAM: opcode 3 at 31:28, dst GRF_B (5) at 27:25,
    # src0 EVEN_BANK (2) at 24:22, src1 GRF_A (4) at 21:19, AAM bit 15, dst idx 2 at 10:8, src1 idx 5 at 2:0
    isa = get_isa("fimdram")
    prog = assemble(isa, "MAC GRF_B[2], EVEN_BANK, GRF_A[5], aam=1\nEXIT\n")
    word = int.from_bytes(encode(prog)[:4], "little")
    assert word == (3 << 28) | (5 << 25) | (2 << 22) | (4 << 19) | (1 << 15) | (2 << 8) | 5
    assert int.from_bytes(encode(prog)[4:], "little") == 0xF << 28


def test_cxl_pnm_words_are_128_bit():
    isa = get_isa("cxl_pnm")
    prog = assemble(isa, "GEMV 1, 0, 0xFFFFFFFFFF, 4096, 128, BF16, 1\n")
    data = encode(prog)
    assert len(data) == 16
    assert int.from_bytes(data, "little") >> 120 == 0x02
    back = decode(isa, data)
    assert int(back["base"][0]) == (1 << 40) - 1 and int(back["rows"][0]) == 4096


@pytest.mark.parametrize("name", ISA_NAMES)
def test_from_records_equals_one_record_at_a_time(name):
    """Program.from_records (columns built in bulk) = the instructions one by one: every operand given is
    stored, an omitted one takes its field default, other fields of the ISA stay 0; a missing operand
    without default is a ValueError and an operand the opcode lacks a KeyError."""
    isa = get_isa(name)
    recs = []
    for k, op in enumerate(isa.opcodes):  # each opcode twice: all operands given, then only required ones
        recs.append((op.mnemonic, {f.name: (f.min if f.default is None else f.default) + k % 2 for f in op.fields}))
        recs.append((op.mnemonic, {f.name: f.min for f in op.fields if f.default is None}))
    prog = Program.from_records(isa, recs)
    assert prog.opcode.dtype == np.int16 and all(c.dtype == np.int64 for c in prog.fields.values())
    for i, (mn, vals) in enumerate(recs):
        op = isa.op(mn)
        assert int(prog.opcode[i]) == op.code
        want = {f.name: vals.get(f.name, f.default) for f in op.fields}
        assert {k: int(c[i]) for k, c in prog.fields.items()} == {k: want.get(k, 0) for k in isa.field_names}
    required = [(op, f) for op in isa.opcodes for f in op.fields if f.default is None]
    if required:
        op, f = required[0]
        with pytest.raises(ValueError, match=f"missing operand {f.name}"):
            Program.from_records(isa, [(op.mnemonic, {g.name: g.min for g in op.fields if g is not f})])
    op = isa.opcodes[0]
    stray = next(k for k in isa.field_names + ("zz",) if k not in {f.name for f in op.fields})
    with pytest.raises(KeyError, match=stray):
        Program.from_records(isa, [(op.mnemonic, {**{f.name: f.min for f in op.fields}, stray: 1})])
