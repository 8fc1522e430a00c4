"""Command-line interface: ``attnsim <command> ...``.

Every command turns bad input into one line ``error: <file>: <key>: <what>`` on
stderr and exit status 2, and writes no result file.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

# Nothing heavy at import time: `attnsim --version` is this module, argparse and attnsim._version (issue 30:
# <= 0.15 s CPU). attnsim.core.config (numpy, pydantic, yaml: ~90 ms) is imported by the commands that need it.

# modules that add subcommands: each has register(subparsers)
_COMMAND_MODULES = (
    "attnsim.cli.run",
    "attnsim.cli.dram",
    "attnsim.cli.isa",
    "attnsim.cli.sweep",
    "attnsim.cli.serve",
    "attnsim.cli.validate",
    "attnsim.cli.sensitivity",
    "attnsim.cli.pim",
    "attnsim.cli.listing",
    "attnsim.cli.schema",
    "attnsim.cli.warmup",
    "attnsim.cli.plan",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse with the project's error convention: a usage error is one line ``error: <prog>:
    <message> (see <prog> --help)`` and exit status 2 (argparse prints the whole usage first)."""

    def error(self, message):  # noqa: D401 - argparse API
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:  # a mistyped subcommand or choice: 'did you mean' (attnsim.core.suggest)
            from attnsim.core.suggest import did_you_mean

            message = (
                message[: m.end(1) + 1]
                + did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
                + message[m.end(1) + 1 :]
            )
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (bounded like every integer, attnsim.core.config.check_int)."""
    from attnsim.core.config import INT_LIMIT, ConfigError, check_int

    try:
        return check_int(text, lo=1, hi=INT_LIMIT)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive_float(text: str, what: str) -> float:
    from attnsim.core.config import ConfigError, check_float

    try:
        v = check_float(text, lo=0.0)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return v


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    return _positive_float(text, "a positive number of seconds")


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _positive_float(text, "a number > 0")


# `attnsim dram ...` registers only its own module: the other command modules import most of the simulator
# (~1 s), which would count against the DRAM engine's whole-process speed (issue 13)
_ONLY = {"dram": ("attnsim.cli.dram",)}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or only ``_ONLY[argv[0]]``'s when argv starts with such a command."""
    p = OneLineParser(
        prog="attnsim",
        description="Cycle-approximate simulator of LLM inference "
        "on memory-centric hardware (GPU/NPU, HBM-PIM, CXL-PNM).",
    )
    from attnsim import __version__

    p.add_argument("--version", action="version", version=f"attnsim {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _ONLY.get(argv[0], _COMMAND_MODULES) if argv else _COMMAND_MODULES:
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
    global _process_entry
    _process_entry = argv is None  # the program itself (console script, python -m attnsim), not a caller's call
    argv_list = sys.argv[1:] if argv is None else list(argv)
    if argv_list[:1] == ["--version"]:  # what argparse's version action prints, without registering every command
        from attnsim import __version__

        print(f"attnsim {__version__}")
        return 0
    collecting = gc.isenabled()
    gc.disable()  # start-up: see settle_gc
    try:
        parser = build_parser(argv_list)
        args, extra = parser.parse_known_args(argv)
        if extra:  # argparse's own message, with 'did you mean' for a mistyped option (--sett)
            unknown_arguments(parser, args, extra)
        settle_gc(collecting)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        from attnsim.core import notices

        notices.to_stderr()  # e.g. 'compiling Numba kernels ...' (attnsim.core.jitcache)
        try:
            rc = args.func(args)
        finally:
            sys.stdout.flush()  # a closed pipe fails here, inside the handler, not at interpreter exit
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except Exception as exc:  # noqa: BLE001 - a ConfigError (attnsim.core.config) becomes one line; others propagate
        config = sys.modules.get("attnsim.core.config")  # not imported yet: nothing can have raised its ConfigError
        if config is None or not isinstance(exc, config.ConfigError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if collecting:
            gc.enable()
    return int(rc or 0)


def unknown_arguments(parser: argparse.ArgumentParser, args, extra: list[str]) -> None:
    """Refuse ``extra`` (arguments no option takes) like ``parse_args`` does, naming the closest option of
    the command for each mistyped one (``--sett`` -> ``--set``)."""
    from attnsim.core.suggest import did_you_mean

    sub = parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, "command", None) in action.choices:
            sub = action.choices[args.command]
    options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    hints = [did_you_mean(x.split("=", 1)[0], options) for x in extra if x.startswith("-")]
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + "".join(h for h in hints if h))


_process_entry = False  # set by main(): it runs as the program, so what start-up allocated may be frozen


def settle_gc(collecting: bool = True) -> None:
    """Start-up (imports: numpy, pydantic, numba's type system, ~10^5 long-lived objects) is done with the cyclic
    collector paused; run as the program, what it allocated lives to the end, so it leaves the collector's
    generations (gc.freeze: traversing it over and over cost ~0.1 s of an `attnsim dram` process). A caller's
    in-process main([...]) (tests, scripts) freezes nothing: a freeze would keep its uncollected cycles forever.
    Collection resumes unless the caller had it off."""
    if _process_entry:
        gc.freeze()
    if collecting:
        gc.enable()


def skip_final_collection() -> None:
    """For a command that leaves no buffered file behind, run as the program: freeze everything at exit, so the
    interpreter's final collection (which atexit precedes) does not traverse the run's objects (~0.13 s)."""
    if _process_entry:
        import atexit

        atexit.register(gc.freeze)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (e.g. captured by a test)
        pass


if __name__ == "__main__":
    sys.exit(main())
