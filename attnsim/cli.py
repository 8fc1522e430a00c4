"""Command-line interface: ``attnsim <command> ...``.

Every command turns bad input into one line ``error: <file>: <key>: <what>`` on
stderr and exit status 2, and writes no result file.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from attnsim.config import ConfigError

# modules that add subcommands: each has register(subparsers)
_COMMAND_MODULES = ("attnsim.cli_run", "attnsim.cli_dram", "attnsim.cli_isa", "attnsim.cli_sweep", "attnsim.cli_serve",
                    "attnsim.cli_validate")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnsim", description="Cycle-approximate simulator of LLM inference "
                                "on memory-centric hardware (GPU/NPU, HBM-PIM, CXL-PNM).")
    from attnsim import __version__
    p.add_argument("--version", action="version", version=f"attnsim {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _COMMAND_MODULES:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod:
                continue
            raise
        m.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
