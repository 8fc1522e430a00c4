"""``attnsim pim run PROGRAM --device NAME``: time and energy of a user's PIM/PNM program (attnsim/sim/pim.py)."""

from __future__ import annotations

from pathlib import Path

from attnsim.core.config import ConfigError


def register(sub) -> None:
    p = sub.add_parser(
        "pim",
        help="run your own PIM/PNM program on a PIM device",
        description="Commands on PIM programs written by hand or by attnsim asm.",
    )
    psub = p.add_subparsers(dest="pim_command", metavar="COMMAND")
    r = psub.add_parser(
        "run",
        help="time a program on a PIM device and report energy per command class",
        description="Execute a program (assembly text FILE.s, or the binary words attnsim asm "
        "writes, FILE.bin) on the DRAM bank-timing engine through the PIM device model; print "
        "total time (s, cycles) and energy per command class.",
    )
    r.add_argument("program", help="assembly text (.s) or binary words (.bin) in the device's ISA")
    r.add_argument("--device", required=True, help="hardware config of kind pim (built-in name or path)")
    r.add_argument(
        "--isa", default=None, help="the ISA the program is written for (refused if the device runs another)"
    )
    r.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    r.add_argument("-o", "--output", default=None, metavar="OUT.json", help="also write the JSON document to a file")
    r.set_defaults(func=run_cmd)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_cmd(args) -> int:
    from attnsim.core.outputs import check_output
    from attnsim.sim.pim import load_device, run
    from attnsim.sim.results import dumps

    if args.output:
        check_output(args.output, "-o", inputs=[args.program])
    if args.isa is not None:
        from attnsim.isa import ISA_NAMES

        if args.isa not in ISA_NAMES:
            raise ConfigError(f"expected one of {', '.join(ISA_NAMES)}, got {args.isa!r}", file="--isa")
        dev, f = load_device(args.device)
        if dev.spec.isa != args.isa:
            raise ConfigError(
                f"expected a program for isa {dev.spec.isa} (device {dev.name}, {f}), got --isa {args.isa}",
                file=args.program,
                key="--isa",
            )
    res = run(Path(args.program), args.device)
    doc = dumps(res.to_dict(), indent=1)
    if args.output:
        from attnsim.core.fileio import atomic_path

        with atomic_path(Path(args.output)) as tmp:
            Path(tmp).write_text(doc + "\n")
    print(doc if args.json else res.table())
    return 0
