"""``attnsim sensitivity``: how headline metrics and vs_baseline ratios move over the documented ranges of
unpublished hardware parameters (attnsim.studies.sensitivity)."""

from __future__ import annotations

from pathlib import Path

from attnsim.core.config import ConfigError

RESULT = "sensitivity.json"
FIGURE = "tornado.pdf"


def register(sub) -> None:
    from attnsim.cli import positive_int
    from attnsim.studies.sensitivity import METHODS

    r = sub.add_parser(
        "sensitivity",
        help="vary unpublished hardware parameters over their documented ranges",
        description="Run the experiment with each ranged hardware parameter (a hardware config's "
        "ranges: block) at its low and high end (oat, a tornado) or sampled jointly (morris, sobol: "
        "needs SALib, pip install 'attnsim[sensitivity]'); prints per headline metric and "
        "vs_baseline ratio the effect of each parameter and which parameters could move a ratio "
        "across 1.0. Writes results/<experiment>/sensitivity.json and tornado.pdf/.png.",
    )
    r.add_argument("experiment", help="experiment YAML path or built-in name")
    r.add_argument(
        "--params",
        default=None,
        metavar="NAME,...",
        help="comma-separated parameters <hardware>.<key> (default: every ranged parameter)",
    )
    r.add_argument("--method", default="oat", choices=METHODS, help="oat (default), morris or sobol")
    r.add_argument(
        "--samples",
        type=positive_int,
        default=None,
        help="morris: trajectories (default 4); sobol: base samples, a power of 2 (default 8)",
    )
    r.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value before the analysis (repeatable)",
    )
    r.add_argument("--out", default=None, help=f"results folder (default results/<experiment>/): {RESULT}, {FIGURE}")
    r.add_argument("--no-write", action="store_true", help="write no file (print only)")
    r.add_argument(
        "--figure-output",
        default=None,
        metavar="RUN:METRIC",
        help="output the tornado draws, e.g. cxl_pnm/llama2-7b/chat:vs_baseline.energy_efficiency_ratio "
        "(default: the first energy_efficiency_ratio, else the first energy_per_token_j)",
    )
    r.add_argument("--json", action="store_true", help="print the result document as JSON")
    r.set_defaults(func=sensitivity_cmd)


def _plan(args, name: str):
    """(result path, figure paths) checked before any simulation; (None, []) with --no-write."""
    from attnsim.core.outputs import check_output, figure_paths

    if args.no_write:
        if args.out:
            raise ConfigError("--no-write writes no results folder; drop one of --out and --no-write", file="--out")
        return None, []
    inputs = [args.experiment] if Path(args.experiment).is_file() else []
    out_dir = Path(args.out) if args.out else Path("results") / name
    check_output(out_dir, "--out", kind="dir", inputs=inputs)
    path = check_output(out_dir / RESULT, "--out", inputs=inputs, create=True)
    return path, figure_paths(out_dir / FIGURE, "--out", inputs=inputs, create=True)


def sensitivity_cmd(args) -> int:
    from attnsim.sim.experiment import load_tree
    from attnsim.sim.results import dumps
    from attnsim.studies import sensitivity

    names = None
    if args.params is not None:
        names = [n.strip() for n in args.params.split(",") if n.strip()]
        if not names:
            raise ConfigError(f"expected comma-separated parameter names, got {args.params!r}", file="--params")
    tree, _ = load_tree(args.experiment, args.sets)
    from attnsim.core.outputs import check_name

    name = check_name(str(tree.experiment.get("name")), "experiment name", file=tree.file_of("experiment"))
    path, figs = _plan(args, name)
    doc = sensitivity.run(args.experiment, args.sets, names, args.method, args.samples)
    output = args.figure_output or sensitivity.figure_metric(doc)
    if output not in doc["base"]:
        raise ConfigError(f"expected one of {', '.join(doc['base'])}, got {output!r}", file="--figure-output")
    if path is not None:
        import matplotlib.pyplot as plt

        from attnsim.core.fileio import atomic_path
        from attnsim.plots.recipes import tornado
        from attnsim.plots.style import paper_style, save

        with paper_style():
            fig = tornado(doc, output)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                save(fig, figs[0])
            finally:
                plt.close(fig)
        with atomic_path(path, suffix=".json") as tmp:
            tmp.write_text(dumps(doc, indent=1) + "\n")
    if args.json:
        print(dumps(doc, indent=1))
    else:
        print(f"experiment: {doc['experiment']} ({doc['method']}, {doc['evaluations']} runs of the experiment)")
        print(sensitivity.table(doc))
        if path is not None:
            print(f"\nresults: {path}\nfigure: {figs[0]}")
    return 0
