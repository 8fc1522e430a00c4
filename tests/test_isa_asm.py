"""Assembler errors with line numbers, example programs, CRF execution semantics and the CLI."""

from pathlib import Path

import pytest

from attnsim.cli.isa import main
from attnsim.core.config import ConfigError
from attnsim.isa import get_isa
from attnsim.isa.base import assemble, assemble_file, decode, encode
from attnsim.isa.fimdram import column_commands, execute_trace, gemv_kernel

DATA = Path(__file__).parent / "data" / "isa"
EXAMPLES = {"attacc": "attacc_score.s", "fimdram": "fimdram_gemv.s", "aim": "aim_gemv.s", "cxl_pnm": "cxl_pnm_attn.s"}


def err(isa, text):
    with pytest.raises(ConfigError) as exc:
        assemble(get_isa(isa), text, file="prog.s")
    return str(exc.value)


@pytest.mark.parametrize(
    "isa,text,line,words",
    [
        ("attacc", "WRGB 0, 8\n\nFROB 1\n", 3, ["unknown opcode", "FROB"]),
        ("attacc", "ACTAB 0, 70000\n", 1, ["row", "[0, 65535]", "70000"]),
        ("attacc", "; c\nMACAB 0, 0, 0\n", 2, ["repeat", "[1, 4095]"]),
        ("attacc", "ACTAB 0\n", 1, ["missing operand row"]),
        ("attacc", "PREA 0, 1\n", 1, ["too many operands"]),
        ("attacc", "ACTAB 0, row=1, row=2\n", 1, ["given twice"]),
        ("attacc", "ACTAB 0, zz\n", 1, ["expected an integer", "zz"]),
        ("attacc", "ACTAB ch=0, 3\n", 1, ["positional operand"]),
        ("attacc", "ACTAB 0, bank=3\n", 1, ["unknown operand 'bank'"]),
        ("fimdram", "MAC SRF_A[0], EVEN_BANK, GRF_A[0]\nEXIT\n", 1, ["dst", "GRF_A, GRF_B", "SRF_A"]),
        ("fimdram", "FILL GRF_A[0], GRF_B[1]\nEXIT\n", 1, ["src0", "EVEN_BANK, ODD_BANK"]),
        ("fimdram", "NOP\nJUMP 3, 2\nEXIT\n", 2, ["jump out of range"]),
        ("fimdram", "JUMP nowhere, 2\nEXIT\n", 1, ["undefined label"]),
        ("fimdram", "NOP\nMAC GRF_B[0], EVEN_BANK, GRF_A[0]\n", 2, ["missing EXIT"]),
        ("fimdram", "NOP\n" * 33 + "EXIT\n", 33, ["34 instructions", "limit is 32"]),
        ("aim", "WR_GB 64, 0\nEOC\n", 1, ["ch_mask", "[1, 4294967295]"]),
        ("aim", "MAC_ABK 65, 1, 0\nEOC\n", 1, ["opsize", "[1, 64]"]),
        ("aim", "SYNC\n", 1, ["missing EOC"]),
        ("cxl_pnm", "GEMV 1, 0, 0, 0, 128\n", 1, ["rows"]),
        ("cxl_pnm", "LOAD_VEC 0, 0, 128, FP64\n", 1, ["dtype", "FP64"]),
    ],
)
def test_malformed_programs_name_the_line(isa, text, line, words):
    msg = err(isa, text)
    assert msg.startswith(f"prog.s: line {line}: "), msg
    for w in words:
        assert w in msg, msg


def test_labels_and_comments():
    isa = get_isa("fimdram")
    a = assemble(isa, "loop: MAC GRF_B[1], ODD_BANK, GRF_A[3]  # c\n  NOP // c\n JUMP loop, 4 ; c\nEXIT")
    assert int(a["offset"][2]) == 2 and int(a["count"][2]) == 4
    assert list(a.lines) == [1, 2, 3, 4]


def test_examples_assemble_and_round_trip():
    for name, fn in EXAMPLES.items():
        prog = assemble_file(get_isa(name), DATA / fn)
        assert len(prog) >= 5
        assert decode(prog.isa, encode(prog)) == prog


def test_crf_gemv_kernel_consumes_hand_derived_column_commands():
    # MAC even x (1 + 7 jumps) + MAC odd x 8 + NOP (0 + 1) = 17 column commands per pass
    assert column_commands(gemv_kernel(8)) == 17
    assert column_commands(gemv_kernel(1)) == 3
    ex = assemble_file(get_isa("fimdram"), DATA / "fimdram_gemv.s")
    assert ex == gemv_kernel(8)
    # nested loops: inner 3 runs, outer repeats the pair (MAC, JUMP inner) 2 more times -> 3*3 = 9 MACs
    nested = assemble(get_isa("fimdram"), "a: MAC GRF_B[0], EVEN_BANK, GRF_A[0]\nJUMP a, 2\nJUMP a, 2\nEXIT\n")
    assert len(execute_trace(nested)) == 9


def test_cli_asm_disasm_round_trip(tmp_path, capsys):
    for name, fn in EXAMPLES.items():
        out = tmp_path / f"{name}.bin"
        assert main(["asm", "--isa", name, str(DATA / fn), "-o", str(out)]) == 0
        txt = tmp_path / f"{name}.s"
        assert main(["disasm", "--isa", name, str(out), "-o", str(txt)]) == 0
        out2 = tmp_path / f"{name}2.bin"
        assert main(["asm", "--isa", name, str(txt), "-o", str(out2)]) == 0
        assert out.read_bytes() == out2.read_bytes()
        assert len(out.read_bytes()) % get_isa(name).word_bytes == 0


def test_cli_errors_write_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.s"
    bad.write_text("WRGB 0, 8\nMACAB 0, 0, 9999\n")
    out = tmp_path / "bad.bin"
    assert main(["asm", "--isa", "attacc", str(bad), "-o", str(out)]) == 2
    assert not out.exists()
    assert "bad.s: line 2: MACAB: operand repeat" in capsys.readouterr().err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff" * 7)
    assert main(["disasm", "--isa", "attacc", str(junk)]) == 2
    assert "not a multiple of the 8-byte" in capsys.readouterr().err
    junk.write_bytes((0x3F << 58).to_bytes(8, "little"))
    assert main(["disasm", "--isa", "attacc", str(junk)]) == 2
    assert "word 0: unknown opcode 0x3f" in capsys.readouterr().err
    assert main(["asm", "--isa", "aim", "--list"]) == 0
    assert "MAC_ABK" in capsys.readouterr().out
