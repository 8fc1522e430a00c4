"""``attnsim asm`` / ``attnsim disasm``: PIM/PNM programs between text and binary words.

    attnsim asm --isa attacc|fimdram|aim|cxl_pnm FILE.s [-o FILE.bin]
    attnsim disasm --isa ... FILE.bin [-o FILE.s]
    attnsim asm --isa fimdram --list          # opcode table

Errors (unknown opcode, bad operand, jump out of range, ...) print ``<file>: line N: ...`` and
exit with status 2; no output file is written then.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnsim.core.config import ConfigError
from attnsim.core.outputs import check_output
from attnsim.isa import ISA_NAMES, get_isa
from attnsim.isa.base import assemble_file, decode_file, describe, disassemble, encode


def _write_atomic(path: Path, data: bytes) -> None:
    from attnsim.core.fileio import atomic_path

    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def run_asm(args) -> int:
    isa = get_isa(args.isa)
    if args.list:
        if args.file or args.output:
            raise ConfigError(
                "has no effect with --list (it only prints the opcode table)", key="FILE" if args.file else "-o"
            )
        print(describe(isa))
        return 0
    if not args.file:
        raise ConfigError("missing input FILE.s", key="asm")
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".bin")
    check_output(out, "-o", inputs=[args.file])  # never the source (asm p.s -o p.s)
    prog = assemble_file(isa, args.file)
    _write_atomic(out, encode(prog, validate=False))
    print(f"{args.file}: {len(prog)} {isa.name} instructions -> {out} ({len(prog) * isa.word_bytes} B)")
    return 0


def run_disasm(args) -> int:
    isa = get_isa(args.isa)
    if args.output:
        check_output(args.output, "-o", inputs=[args.file])
    prog = decode_file(isa, args.file)
    text = disassemble(prog)
    if args.output:
        _write_atomic(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("asm", help="assemble a PIM/PNM program into binary words")
    p.add_argument("--isa", required=True, choices=ISA_NAMES)
    p.add_argument("file", nargs="?", help="assembly text (FILE.s)")
    p.add_argument("-o", "--output", help="binary output (default: FILE.bin)")
    p.add_argument("--list", action="store_true", help="print the opcode table and exit")
    p.set_defaults(func=run_asm)
    d = subparsers.add_parser("disasm", help="disassemble binary PIM/PNM words into text")
    d.add_argument("--isa", required=True, choices=ISA_NAMES)
    d.add_argument("file", help="binary words (FILE.bin)")
    d.add_argument("-o", "--output", help="text output (default: stdout)")
    d.set_defaults(func=run_disasm)


def main(argv=None) -> int:
    """Standalone entry (``python -m attnsim.cli.isa asm ...``)."""
    parser = argparse.ArgumentParser(prog="attnsim")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
