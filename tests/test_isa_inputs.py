"""`attnsim asm` / `attnsim disasm` on bad input: exit 2, one line naming the file and line/word, no output."""

import pytest

from attnsim.cli import main

HUGE = 2**63
ASM = {  # name: (isa, source bytes, substrings of the one error line besides the file name)
    "operand-2p63": ("attacc", f"ACTAB 0, {HUGE}\n".encode(), ["line 1", "operand row", "[0, 65535]"]),
    "operand-hex-2p64": ("attacc", b"ACTAB 0x10000000000000000, 0\n", ["line 1", "operand ch", "[0, 31]"]),
    "operand-negative-2p63": ("fimdram", f"JUMP -{HUGE}, 3\nEXIT\n".encode(), ["line 1", "operand offset"]),
    "operand-5000-digits": ("attacc", b"ACTAB 0, " + b"9" * 5000 + b"\n", ["line 1", "expected an integer", "..."]),
    "index-2p63": (
        "fimdram",
        f"MAC GRF_B[{HUGE}], EVEN_BANK, GRF_A[0]\nEXIT\n".encode(),
        ["line 1", "expected an integer in"],
    ),
    "named-operand-2p63": ("attacc", f"ACTAB ch=0, row={HUGE}\n".encode(), ["line 1", "operand row"]),
    "non-utf8": ("attacc", b"ACTAB 0, 0\nPREA \xff\n", ["not UTF-8", "byte offset 16"]),
    "empty": ("attacc", b"", ["no instructions"]),
    "only-comments-and-labels": ("attacc", b"; c\nstart:\n# x\n", ["no instructions"]),
    "unknown-opcode-long": ("attacc", b"X" * 500 + b"\n", ["line 1", "unknown opcode"]),
}


def _one_error(capsys, argv, want):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    assert len(lines[0]) < 400
    for w in want:
        assert w in lines[0], (w, lines[0])


@pytest.mark.parametrize("name", sorted(ASM))
def test_bad_asm_source(capsys, tmp_path, name):
    isa, data, want = ASM[name]
    src = tmp_path / "p.s"
    src.write_bytes(data)
    out = tmp_path / "p.bin"
    _one_error(capsys, ("asm", "--isa", isa, str(src), "-o", str(out)), [str(src)] + want)
    assert not out.exists()


def test_in_range_operands_still_assemble(capsys, tmp_path):
    src = tmp_path / "p.s"
    src.write_text("ACTAB 31, 65535\nACTAB ch=0x1f, row=0\n")
    assert main(["asm", "--isa", "attacc", str(src), "-o", str(tmp_path / "p.bin")]) == 0
    assert (tmp_path / "p.bin").stat().st_size == 16


@pytest.mark.parametrize(
    "name,data,want",
    [
        ("empty", b"", ["empty file"]),
        ("truncated", b"\x00" * 12, ["not a multiple"]),
        ("unknown-opcode", b"\xff" * 8, ["word 0", "unknown opcode"]),
    ],
)
def test_bad_disasm_input(capsys, tmp_path, name, data, want):
    p = tmp_path / "p.bin"
    p.write_bytes(data)
    out = tmp_path / "p.s"
    _one_error(capsys, ("disasm", "--isa", "attacc", str(p), "-o", str(out)), [str(p)] + want)
    assert not out.exists()


def test_directory_inputs(capsys, tmp_path):
    for cmd in ("asm", "disasm"):
        _one_error(capsys, (cmd, "--isa", "attacc", str(tmp_path)), [str(tmp_path), "directory"])


def test_list_with_a_file_is_refused(capsys, tmp_path):
    _one_error(capsys, ("asm", "--isa", "attacc", "--list", str(tmp_path / "p.s")), ["FILE", "no effect with --list"])
    assert main(["asm", "--isa", "attacc", "--list"]) == 0
    assert "ACTAB" in capsys.readouterr().out


def test_oversized_inputs_refused_before_reading(capsys, tmp_path):
    """Sizes are counted before anything is read: a 2 GiB (sparse) source and a 3 GiB trace."""
    src = tmp_path / "big.s"
    with open(src, "wb") as f:
        f.truncate(2 << 30)
    _one_error(capsys, ("asm", "--isa", "attacc", str(src), "-o", str(tmp_path / "b.bin")), [str(src), "limit"])
    tr = tmp_path / "big.trace"
    with open(tr, "wb") as f:
        f.truncate(3 << 30)
    _one_error(capsys, ("dram", "--device", "hbm3_6400", "--trace", str(tr)), [str(tr), "limit"])
    assert not (tmp_path / "b.bin").exists()
