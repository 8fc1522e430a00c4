"""``attnsim run`` and ``attnsim show``."""

from __future__ import annotations

import sys
from pathlib import Path

from attnsim.core.config import ConfigError


def register(sub) -> None:
    r = sub.add_parser(
        "run",
        help="simulate an experiment (default: configs/experiments/default.yaml)",
        description="Simulate every system x model x scenario of an experiment: a whole "
        "generation (prefill + decode) per run. Prints tables, or one JSON document with --json.",
    )
    r.add_argument("experiment", nargs="?", default=None, help="experiment YAML path or built-in name")
    r.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. models.llama2-70b.num_layers=40 (repeatable)",
    )
    r.add_argument("--out", default=None, help="results folder (default results/<experiment>/)")
    r.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    r.add_argument("--no-write", action="store_true", help="do not write the HDF5 results file")
    r.add_argument("--breakdown", action="store_true", help="also print per-op breakdown tables")
    r.add_argument(
        "--no-flips",
        action="store_true",
        help="with a baseline: skip the verdict flips (each assumed hardware parameter, a ranges: entry, "
        "at its low and high end, the affected runs simulated again; attnsim.studies.verdict)",
    )
    r.add_argument(
        "--no-figures",
        action="store_true",
        help="do not draw the summary figures (latency by device, energy by component) next to the results",
    )
    r.add_argument(
        "--trace",
        default=None,
        metavar="TRACE.json",
        help="write a Chrome/Perfetto timeline (ui.perfetto.dev) of each run: prefill and every decode step "
        "on one time axis, per-op bytes/energy/bandwidth/bound, per-device bandwidth and power counters",
    )
    r.add_argument(
        "--trace-steps",
        type=int,
        default=None,
        metavar="N",
        help="with --trace: decode steps drawn op by op per run, evenly spread (default 16); the others "
        "are one event per stretch of steps",
    )
    r.set_defaults(func=run_cmd)

    s = sub.add_parser("show", help="print a results file again")
    s.add_argument("file", help="results .h5 written by attnsim run")
    s.add_argument("--json", action="store_true")
    s.add_argument("--breakdown", action="store_true")
    s.set_defaults(func=show_cmd)


def _print_docs(
    docs,
    attrs,
    as_json: bool,
    breakdown: bool,
    ends=(),
    defaults: bool = True,
    claims=(),
    flips_cost: dict | None = None,
) -> None:
    """``ends``: the reproduction rows this run answers (attnsim.studies.reproduce.run_ends), printed after the table
    (JSON: a top-level ``reproductions`` list, present when there are any); ``defaults``: the run had no --set;
    ``claims``: those folders' paper headlines (text only); ``flips_cost``: what the verdict flips cost."""
    from attnsim.core.report import (
        breakdown_table,
        differ_lines,
        mapping_lines,
        paper_claim_lines,
        reproduction_lines,
        summary_table,
    )
    from attnsim.sim.results import dumps, finalize_doc

    if as_json:  # strict JSON: a stored document with inf/NaN (older versions) is shown as an error run
        docs = [finalize_doc(dict(d)) for d in docs]
        doc = {"experiment": attrs.get("experiment"), "attnsim_version": attrs.get("attnsim_version"), "runs": docs}
        if ends:
            doc["reproductions"] = [dict(e, defaults=defaults) for e in ends]
        if flips_cost is not None:  # without its wall time: the same config prints the same bytes
            doc["verdict_flips_cost"] = {k: v for k, v in flips_cost.items() if k != "wall_s"}
        print(dumps(doc, indent=1))
        return
    print(f"experiment: {attrs.get('experiment')}")
    print(summary_table(docs))
    if ends:
        print("\nreproductions of this experiment (the published or artefact number, and this run's):")
        print("\n".join("  " + x for x in reproduction_lines(ends, defaults) + paper_claim_lines(claims)))
    differs = differ_lines(docs)
    if differs:
        print(
            "\nwhat differs and why (decode step = one token for the whole batch; attention = attn_score + "
            "softmax + attn_context):"
        )
        print("\n".join(differs))
    if flips_cost is not None:
        print(
            f"verdict flips: {flips_cost['parameters']} assumed parameters (ranges: entries at their low and high "
            f"end, choices: entries at each alternative), {flips_cost['reruns']} re-runs, {flips_cost['wall_s']:.1f} s "
            "(--no-flips skips them)"
        )
    mappings = mapping_lines(docs)
    if mappings:  # the JSON holds the same per run: breakdown.decode_step.pim_mapping
        print(
            "\nPIM mapping of the decode step (partition x channels_per_item on the channels used; a hardware file's "
            "channels_per_item / partition: auto = searched, a number / name = pinned):"
        )
        print("\n".join(mappings))
    if breakdown:
        for d in docs:
            if d["status"] == "ok":
                print()
                print(breakdown_table(d, "decode_step"))


def run_cmd(args) -> int:
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.results import write_results
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(args.experiment, args.sets)
    if exp.spec.serving is not None:  # attnsim run would silently ignore the whole section
        raise ConfigError(
            "expected no serving section for attnsim run (it simulates static batches): use attnsim "
            "serve, or --set experiment.serving=null, got a serving section",
            file=exp.tree.file_of("experiment"),
            key="serving",
        )
    trace_steps = check_trace_steps(args)
    out_path = check_run_outputs(args, exp.spec.name, SUMMARY_RECIPES)
    timeline = [] if args.trace else None
    docs = run_experiment(exp, timeline=timeline, trace_steps=trace_steps)
    flips_cost = None
    if exp.spec.baseline and not args.no_flips:  # what would flip each verdict (attnsim.studies.verdict)
        from attnsim.hwmodels.system import ref_name
        from attnsim.studies.verdict import add_flips

        flips_cost = add_flips(exp.tree, docs, ref_name(exp.spec.baseline))
    attrs = {"experiment": exp.spec.name}
    from attnsim import __version__

    attrs["attnsim_version"] = __version__
    if out_path is not None:
        out_path = write_results(out_path, docs, exp.tree.as_dict(), exp.spec.name)
        if not args.no_figures and any(d["status"] == "ok" for d in docs):
            figures = summary_figures(out_path)
    if timeline is not None:
        from attnsim.sim.timeline import write_trace

        write_trace(args.trace, timeline)
    from attnsim.studies.reproduce import run_ends, run_paper_claims

    ends = run_ends(exp.source, docs)  # the two ends of each reproduction's waterfall: read from docs, no simulation
    # a --set outside experiment.systems / experiment.models changes what attnsim computes: not its defaults
    defaults = all(s.split("=", 1)[0].strip() in ("experiment.systems", "experiment.models") for s in args.sets)
    _print_docs(
        docs,
        attrs,
        args.json,
        args.breakdown,
        ends,
        defaults=defaults,
        claims=run_paper_claims(exp.source) if ends else (),
        flips_cost=flips_cost,
    )
    if out_path and not args.json:
        print(f"\nresults: {out_path}")
        if not args.no_figures and any(d["status"] == "ok" for d in docs):
            print("figures: " + ", ".join(str(p) for p in figures if p.suffix == ".pdf"))
    return 0


def check_trace_steps(args) -> int | None:
    """``--trace-steps``: only with --trace, an integer in [0, timeline.MAX_TRACE_STEPS]."""
    from attnsim.sim.timeline import MAX_TRACE_STEPS

    n = getattr(args, "trace_steps", None)
    if n is None:
        return None
    if not args.trace:
        raise ConfigError("only applies with --trace", file="--trace-steps")
    if not 0 <= n <= MAX_TRACE_STEPS:
        raise ConfigError(f"expected an integer in [0, {MAX_TRACE_STEPS}], got {n}", file="--trace-steps")
    return n


SUMMARY_RECIPES = ("latency_by_device", "energy_breakdown")  # drawn beside the results by attnsim run


def check_run_outputs(args, name: str, figures=()) -> Path | None:
    """Check every path ``run``/``serve`` will write (results folder, results.h5, the figures beside it,
    ``--trace``, ``--csv``) before any simulation; returns the results.h5 path (None with --no-write)."""
    from attnsim.core.outputs import check_output, figure_paths

    if args.no_write and args.out:
        raise ConfigError("--no-write writes no results folder; drop one of --out and --no-write", file="--out")
    inputs = [args.experiment] if args.experiment and Path(args.experiment).is_file() else []
    out_path = None
    if not args.no_write:
        out_dir = Path(args.out) if args.out else Path("results") / name
        check_output(out_dir, "--out", kind="dir", inputs=inputs)
        out_path = check_output(out_dir / "results.h5", "--out", inputs=inputs, create=True)
        if not getattr(args, "no_figures", True):
            for recipe in figures:
                figure_paths(out_dir / f"{recipe}.pdf", "--out", create=True)
    produced = inputs + ([out_path] if out_path else [])
    for flag in ("trace", "csv"):
        if getattr(args, flag, None):
            check_output(getattr(args, flag), f"--{flag}", inputs=produced)
            produced.append(getattr(args, flag))
    return out_path


def summary_figures(results_h5: Path) -> list[Path]:
    """Decode-step latency by device and energy per token by component, one bar per run."""
    from attnsim.plots import render
    from attnsim.studies.sweep.table import load_table

    table = load_table(results_h5)
    table = table.select({"status": "ok"})
    out = []
    for recipe in SUMMARY_RECIPES:
        out += render(table, recipe, results_h5.parent / f"{recipe}.pdf", width="double")
    return out


def show_cmd(args) -> int:
    """Print a stored file; its strings (names, messages, parameters) may come from someone else, so the text
    output passes attnsim.core.outputs.terminal_text (escape sequences are shown, not run); JSON escapes them itself."""
    import contextlib

    from attnsim.core.outputs import TerminalSafe

    with contextlib.redirect_stdout(TerminalSafe(sys.stdout)):
        return _show(args)


def _show(args) -> int:
    from attnsim.studies.sweep.store import is_sweep_store, read_results

    attrs, docs = read_results(args.file)
    if is_sweep_store(args.file) and not args.json:  # one line per point, the swept parameters as columns
        from attnsim.core.report import breakdown_table
        from attnsim.studies.sweep.table import load_table, sweep_text

        print(f"experiment: {attrs.get('experiment')}")
        print(sweep_text(load_table(args.file)))
        for d in docs if args.breakdown else ():
            if d["status"] == "ok":
                print()
                print(breakdown_table(d, "decode_step"))
        return 0
    _print_docs(docs, attrs, args.json, args.breakdown)
    return 0
