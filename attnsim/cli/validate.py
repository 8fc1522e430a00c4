"""``attnsim validate``: measured vs published for the bundled validation set, by role."""

from __future__ import annotations

from attnsim.core.report import fmt_num, table  # the one table formatter (attnsim.core.report)

SECTIONS = {  # role -> heading
    "calibration": "calibration rows (in-sample: attnsim parameters were set from them)",
    "validation": "validation rows (held out: no attnsim parameter was set from them)",
    "limit": "limit rows (physical bounds every run must keep)",
    # a paper's published number compared under the conditions it states that attnsim can express, where the
    # others could not be read: reported, not counted in the exit status; its note names what is missing
    "headline": "headline rows (a paper's published number under the stated conditions attnsim can express; "
    "reported, not counted in the exit status: each note names the conditions attnsim cannot express)",
}


def register(sub) -> None:
    v = sub.add_parser(
        "validate",
        help="run the bundled validation set (GPU calibration, reproductions, limits)",
        description="Prints attnsim vs the reference with the error of each row, calibration "
        "(in-sample), validation (held-out) and limit rows in separate sections; exit status 1 "
        "if any row is outside its stated tolerance.",
    )
    v.add_argument(
        "--set",
        dest="sets",
        action="append",
        metavar="SET",
        help="only these sets (repeatable; default all): gpu, reproductions (every folder of "
        "configs/reproductions/), reproductions/NAME (one), nccl, power, mlperf (MLPerf Inference DGX-H100 "
        "serving rows; minutes), mlperf/BENCHMARK (one), limits; attacc = reproductions/attacc",
    )
    v.add_argument("--json", action="store_true", help="print the rows as JSON (each with its role)")
    v.add_argument(
        "--figures",
        metavar="DIR",
        help="write each selected reproduction's figure (its reference.yaml figure: out) into DIR; with "
        "--explain its waterfall figure, <name>_waterfall.pdf",
    )
    v.add_argument(
        "--explain",
        nargs="?",
        const="",
        metavar="FOLDER",
        help="for each row of a reproduction (FOLDER, e.g. attacc; default: those --set selects, else all), "
        "the waterfall from the artefact's number to attnsim's defaults: attnsim with every assumption of "
        "its reference.yaml, then with them removed one at a time in the listed order",
    )
    v.set_defaults(func=validate_cmd)


def _figure_plan(args) -> dict:
    """reproduction name -> (spec, output paths), checked before anything runs."""
    if not args.figures:
        return {}
    from attnsim.core.config import ConfigError
    from attnsim.core.outputs import check_output, inside
    from attnsim.plots.style import figure_paths
    from attnsim.studies import reproduce
    from attnsim.studies.validate import reproductions_in

    check_output(args.figures, "--figures", kind="dir")
    plan = {}
    for name in reproductions_in(args.sets):
        folder = reproduce.find(name)
        spec = reproduce.read_spec(folder)
        if spec.figure is not None:
            out = inside(args.figures, spec.figure.out, "figure.out", file=str(folder / reproduce.REFERENCE))
            plan[name] = (spec, figure_paths(out, "--figures", create=True))
    if not plan:  # the option would do nothing
        raise ConfigError(
            "expected --set choosing a reproduction whose reference.yaml has a figure, got "
            f"{', '.join(args.sets or ['(all)'])}",
            file="--figures",
        )
    return plan


def _print(rows, specs) -> None:
    for role, heading in SECTIONS.items():
        part = [r for r in rows if r.role == role]
        if not part:
            continue
        body = [
            [
                r.set,
                r.system,
                r.name,
                role,
                fmt_num(r.published) if r.check != "bracket" else f"{fmt_num(r.published)}-{fmt_num(r.published_high)}",
                fmt_num(r.measured),
                "-" if r.check == "upper_bound" else f"{r.error:+.1%}",
                f"<= {r.published:g}" if r.check == "upper_bound" else f"±{r.tolerance:.0%}",
                "ok" if r.ok else "FAIL",
            ]
            for r in part
        ]
        bad = sum(not r.ok for r in part)
        print(f"{heading}\n")
        print(table(body, ["set", "system", "row", "role", "reference", "attnsim", "error", "tolerance", "ok"], 4))
        noted = [r for r in part if r.note]  # e.g. the stated conditions a headline row cannot express
        if noted:
            print("\nnotes:\n" + "\n".join(f"  {r.system}: {r.name}:\n    {r.note}" for r in noted))
        if role == "headline":
            print(f"\n{len(part) - bad} of {len(part)} headline rows reached" + (f"; {bad} not" if bad else "") + "\n")
        else:
            print(
                f"\n{len(part) - bad} of {len(part)} {role} rows within tolerance"
                + (f"; {bad} outside" if bad else "")
                + "\n"
            )
    if specs:
        print("reproductions (the artefacts the reference numbers come from)\n")
        print(
            table(
                [[name, spec.title, spec.source] for name, spec in specs.items()],
                ["system", "title", "source"],
            )
            + "\n"
        )
    claims = [(name, spec, c) for name, spec in specs.items() for c in spec.paper]
    if claims:
        print("paper headlines (printed beside; the rows compare the artefacts' numbers)\n")
        body = [
            [name, c.claim, fmt_num(c.value) if isinstance(c.value, float) else c.value, c.note]
            for name, spec, c in claims
        ]
        print(table(body, ["system", "claim", "value", "note"]) + "\n")
    counted = [r for r in rows if r.role != "headline"]
    bad = sum(not r.ok for r in counted)
    print(f"{len(counted) - bad} of {len(counted)} rows within tolerance" + (f"; {bad} outside" if bad else ""))


def _figure(rows, out, spec) -> None:
    import matplotlib.pyplot as plt

    from attnsim.plots.recipes import reproduction
    from attnsim.plots.style import paper_style, save

    with paper_style():
        fig = reproduction(rows, title=spec.title)
        try:
            save(fig, out)
        finally:
            plt.close(fig)


def _fmt_bar(v) -> str:
    return fmt_num(v) if isinstance(v, float) else str(v)


def _fmt_set(v) -> str:
    """An assumption's value as printed: a long list (a placement of every request) by its head and length."""
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(map(str, v[:4]))}, ... ({len(v)} values)]"
    return str(v)


def print_waterfall(wf) -> None:
    """One table per reproduction: a row per reference row, a column per waterfall step; the assumptions below."""
    print(f"{wf.system}: {wf.title}\n")
    head = ["row", *wf.labels]
    body = [[r.name, *[_fmt_bar(b) for b in wf.bars(i)]] for i, r in enumerate(wf.rows)]
    print(table(body, head))
    notes = [r for r in wf.rows if r.note]
    if notes:
        print("\nnotes:")
        for r in notes:
            print(f"  {r.name}:\n    {r.note}")
    if wf.assumptions:
        print("\nassumptions (the artefact's conditions, removed left to right):")
        for a in wf.assumptions:
            sets = ", ".join(f"{k}={_fmt_set(v)}" for k, v in a.set.items())
            only = f"\n    experiments: {', '.join(a.experiments)}" if a.experiments else ""
            print(f"  {a.name}: {a.title}\n    set: {sets}{only}\n    source: {a.source}")
    else:
        print(
            "\nno assumptions: attnsim's defaults run as they are (reference.yaml says which of the artefact's "
            "conditions could not be expressed)"
        )
    if wf.paper:
        print("\npaper headlines (printed, not compared; the note says what attnsim gives and why):")
        for c in wf.paper:
            print(f"  {c.claim}: {fmt_num(c.value)}" + (f"\n    {c.note}" if c.note else ""))
    print()


def _explain(args) -> int:
    from attnsim.studies import reproduce
    from attnsim.studies.validate import reproductions_in

    names = [args.explain] if args.explain else reproductions_in(args.sets or ["reproductions"])
    folders = [reproduce.find(n, flag="--explain") for n in names]
    out = None
    if args.figures:
        from attnsim.core.outputs import check_output
        from attnsim.plots.style import figure_paths

        check_output(args.figures, "--figures", kind="dir")
        from pathlib import Path

        out = {
            f.name: figure_paths(Path(args.figures) / f"{f.name}_waterfall.pdf", "--figures", create=True)[0]
            for f in folders
        }
    for f in folders:  # every folder is loaded and checked at every step before anything runs
        spec = reproduce.read_spec(f)
        for k in range(len(spec.assumptions) + 1):
            reproduce.load(f, dropped=k)
    wfs = [reproduce.waterfall(f) for f in folders]
    if args.json:
        from attnsim.sim.results import dumps

        print(dumps([w.as_dict() for w in wfs], indent=1))
    else:
        for w in wfs:
            print_waterfall(w)
    for w in wfs:
        if out is not None:
            import matplotlib.pyplot as plt

            from attnsim.plots.recipes import waterfall
            from attnsim.plots.style import paper_style, save

            with paper_style():
                fig = waterfall(w, rows=list(range(min(12, len(w.rows)))), title=w.title)
                try:
                    save(fig, out[w.system])
                finally:
                    plt.close(fig)
    return 0


def validate_cmd(args) -> int:
    from attnsim.studies import reproduce

    if args.explain is not None:
        return _explain(args)
    from attnsim.studies.validate import ALIASES, reproductions_in, run

    plan = _figure_plan(args)
    specs = {name: reproduce.read_spec(reproduce.find(name)) for name in reproductions_in(args.sets)}
    rows = run(args.sets)
    if args.json:
        from attnsim.sim.results import dumps

        print(dumps([r.as_dict() for r in rows], indent=1))
    else:
        _print(rows, specs)
    for name, (spec, paths) in plan.items():
        part = [r for r in rows if r.system == name and (r.set.startswith("reproductions/") or r.set in ALIASES)]
        _figure(part, paths[0], spec)
    return 1 if any(not r.ok for r in rows if r.role != "headline") else 0
