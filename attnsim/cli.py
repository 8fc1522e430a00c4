"""Command-line interface: ``attnsim <command> ...``.

Every command turns bad input into one line ``error: <file>: <key>: <what>`` on
stderr and exit status 2, and writes no result file.
"""
from __future__ import annotations

import argparse
import importlib
import os
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
    """Run one command; bad input -> ``error: ...`` and 2, Ctrl-C -> ``interrupted`` and 130, a closed
    stdout pipe (``attnsim show ... | head``) -> quiet exit 141 (128 + SIGPIPE)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        try:
            rc = args.func(args)
        finally:
            sys.stdout.flush()  # a closed pipe fails here, inside the handler, not at interpreter exit
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (e.g. captured by a test)
        pass


if __name__ == "__main__":
    sys.exit(main())
