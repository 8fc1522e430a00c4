"""``attnsim sweep``, ``attnsim merge``, ``attnsim export`` and ``attnsim plot``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from attnsim.cli import positive_int, positive_seconds
from attnsim.core.config import ConfigError
from attnsim.core.outputs import check_output


def register(sub) -> None:
    import argparse

    s = sub.add_parser(
        "sweep",
        help="run a batch sweep into a resumable HDF5 store",
        description="Run every point of a sweep file (grid / zip / ranges / random samples over "
        "any config key). Re-running resumes: finished points are skipped. Exit status: 0 done; "
        "2 refused before running (bad input, more than 10^6 points, every point invalid); "
        "3 every point of the store failed.",
    )
    s.add_argument("sweep", help="sweep YAML path or built-in name (configs/sweeps/)")
    s.add_argument("--out", default=None, help="store file (default results/<sweep name>.h5)")
    s.add_argument(
        "--executor",
        default="local",
        choices=("local", "dask", "slurm"),
        help="local process pool, dask.distributed, or one SLURM array shard (default local)",
    )
    s.add_argument("--workers", type=positive_int, default=None, help="worker processes (default: CPU count)")
    s.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run slice I of N into its own shard file (default from SLURM_ARRAY_TASK_ID/COUNT with --executor slurm)",
    )
    s.add_argument("--scheduler", default=None, metavar="ADDRESS", help="dask scheduler address (else a LocalCluster)")
    s.add_argument(
        "--emit-sbatch",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write a ready sbatch array script (to FILE or stdout) and exit",
    )
    s.add_argument(
        "--merge-after",
        action="store_true",
        help="with --emit-sbatch: the first array task submits the merge as a dependent job",
    )
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print the job script (--emit-sbatch, or the dask.jobqueue worker script) and exit",
    )
    s.add_argument("--retry-failed", action="store_true", help="re-run the store's invalid/error points")
    s.add_argument(
        "--allow-version-mismatch",
        action="store_true",
        help="resume a store written by another attnsim version (recorded in its other_versions)",
    )
    s.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra fixed override for every point (repeatable)",
    )
    s.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="sub-result cache: a folder, or one SQLite "
        "file (sqlite:PATH or *.sqlite) (default $ATTNSIM_CACHE_DIR or .attnsim-cache beside the store; "
        "'off' disables)",
    )
    s.add_argument(
        "--checkpoint-s", type=positive_seconds, default=300.0, help="fold the journal into the HDF5 this often"
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--figures", action="store_true", help="render the sweep's figures block when done")
    s.add_argument(
        "--flips",
        action="store_true",
        help="with a baseline: also record each point's verdict flips (store column verdict_flips: the "
        "assumed hardware parameters whose range moves its throughput ratio across 1.0; up to two "
        "re-runs per parameter and point)",
    )
    s.add_argument("--fig-dir", default=None, help="folder the figures' paths are relative to (default: the store's)")
    s.add_argument(
        "--point-fn",
        default=None,
        metavar="MODULE:FUNCTION",
        help="plugin: run FUNCTION(tree_dict, files) -> run document of MODULE (imported from your "
        "Python path: it runs that code) for every point instead of the built-in simulation; "
        "only ever taken from this option, never from a file (docs/robustness.md)",
    )
    s.set_defaults(func=sweep_cmd)

    m = sub.add_parser("merge", help="merge shard stores of one sweep")
    m.add_argument("shards", nargs="+", help="shard .h5 files")
    m.add_argument("-o", "--out", required=True, help="merged store to write")
    m.add_argument("--allow-version-mismatch", action="store_true", help="merge shards of different attnsim versions")
    m.set_defaults(func=merge_cmd)

    e = sub.add_parser(
        "export",
        help="export a sweep store or results file as a flat CSV or Parquet table",
        description="One row per point/run: swept parameters, status, scalar metrics, vs_baseline "
        "ratios and breakdowns, with a unit in every quantity's column name. For attnsim serve "
        "results, the per-request rows go to OUT.requests.<ext> beside it.",
    )
    e.add_argument("file")
    fmt = e.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", action="store_true", help="write CSV")
    fmt.add_argument("--parquet", action="store_true", help="write Parquet (pyarrow: pip install attnsim[parquet])")
    e.add_argument("-o", "--out", default=None, help="output path (default: FILE with .csv / .parquet)")
    e.set_defaults(func=export_cmd)

    p = sub.add_parser("plot", help="render a figure recipe from a sweep store or results file")
    p.add_argument("file", nargs="?", help="results .h5 of attnsim run/serve, or a sweep store (not needed for --list)")
    p.add_argument("--recipe", default=None, help="recipe name (see --list)")
    p.add_argument("--x", default=None)
    p.add_argument("--y", default=None)
    p.add_argument("--hue", default=None)
    p.add_argument("--z", default=None, help="colour metric (heatmap) or third metric (pareto)")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE", help="select rows (repeatable)")
    p.add_argument(
        "--width",
        choices=("single", "double"),
        default=None,
        help="IEEE column (3.5 in, default) or text (7.16 in) width",
    )
    p.add_argument("--title", default=None)
    p.add_argument(
        "--labels",
        default=None,
        metavar="FILE.yaml",
        help="display labels (name: text per line) over "
        "the built-in ones (dgx_h100: DGX H100, attn_score: QK^T, ...); a column name sets its axis title "
        "(tpot_s: Time per token), unit.<column> its unit (unit.tpot_s: us); unknown names are refused",
    )
    p.add_argument(
        "--label",
        dest="label_items",
        action="append",
        default=[],
        metavar="NAME=TEXT",
        help="one display label, axis title or unit (unit.tpot_s=us) over --labels (repeatable)",
    )
    p.add_argument(
        "--components",
        default=None,
        metavar="A,B,...",
        help="stacked recipes: the segments drawn (e.g. pim_compute,dram_read_write), the rest summed as 'other'",
    )
    p.add_argument(
        "--logx", action=argparse.BooleanOptionalAction, default=None, help="log / linear (--no-logx) x axis"
    )
    p.add_argument(
        "--logy", action=argparse.BooleanOptionalAction, default=None, help="log / linear (--no-logy) y axis"
    )
    p.add_argument("--xlim", default=None, metavar="LO,HI", help="x limits in the column's stored units (s, J, ...)")
    p.add_argument("--ylim", default=None, metavar="LO,HI", help="y limits in the column's stored units (s, J, ...)")
    p.add_argument(
        "--font",
        default=None,
        help="sans (bundled DejaVu Sans, default), serif (bundled DejaVu Serif), "
        "an installed family or a .ttf/.otf file",
    )
    p.add_argument("--baseline", default=None, metavar="SYSTEM", help="ratio recipe: the system lines are divided by")
    p.add_argument(
        "--replicate",
        default=None,
        metavar="COLUMN",
        help="line recipes: average over this seed column (mean +- standard deviation error bars)",
    )
    p.add_argument("-o", "--out", default=None, help="figure file (.pdf/.png; the other format is written beside it)")
    p.add_argument("--all", action="store_true", help="render every figure of the store's sweep definition")
    p.add_argument("--fig-dir", default=None)
    p.add_argument("--list", action="store_true", help="list recipes")
    p.set_defaults(func=plot_cmd)


_POINT_FN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")


def point_fn_arg(text: str) -> str:
    """``--point-fn``: ``package.module:function`` (dotted identifiers), else one ConfigError; the module is
    imported when the first point runs."""
    if not _POINT_FN.match(text):
        raise ConfigError(
            f"expected MODULE:FUNCTION (e.g. mypkg.points:fast_point), got {text[:80]!r}", file="--point-fn"
        )
    return text


def sweep_cmd(args) -> int:
    from attnsim.studies.sweep.executors import parse_shard, run_sweep
    from attnsim.studies.sweep.spec import load_sweep

    sweep = load_sweep(args.sweep, extra_sets=args.sets)
    out = Path(args.out) if args.out else Path("results") / f"{sweep.spec.name}.h5"
    if args.fig_dir and not args.figures:
        raise ConfigError("only applies with --figures", file="--fig-dir")
    sources = [args.sweep] if Path(args.sweep).is_file() else []
    check_output(out, "--out", inputs=sources, create=True)  # a store folder is created, like results/
    if args.figures and sweep.spec.figures:  # every figure path and label key checked before the sweep runs
        _figure_targets(sweep.spec.figures, Path(args.fig_dir) if args.fig_dir else out.parent, out)
        check_figure_labels(sweep)
    if args.merge_after and args.emit_sbatch is None:
        raise ConfigError("needs --emit-sbatch", file="--merge-after")
    if args.flips:
        from attnsim.studies.sweep.executors import check_flips

        check_flips(sweep, args.point_fn)
    if args.point_fn is not None:
        point_fn_arg(args.point_fn)
    if args.point_fn is not None and (args.emit_sbatch is not None or args.dry_run):
        raise ConfigError(
            "has no effect on an emitted job script (its tasks run the built-in simulation)", file="--point-fn"
        )
    if args.emit_sbatch is not None:
        return _emit_sbatch(args, sweep, out)
    if args.dry_run:
        return _dry_run_jobqueue(sweep)
    shard = parse_shard(args.shard) if args.shard is not None else None
    try:
        summary = run_sweep(
            sweep,
            out,
            executor=args.executor,
            workers=args.workers,
            shard=shard,
            scheduler=args.scheduler,
            cache_dir=args.cache,
            point_fn=args.point_fn,
            progress=not args.no_progress,
            checkpoint_s=args.checkpoint_s,
            retry_failed=args.retry_failed,
            allow_version_mismatch=args.allow_version_mismatch,
            flips=args.flips,
        )
    except KeyboardInterrupt:  # the finished points are in the store (journal folded on the way out)
        print(interrupted_line(out, shard, args.executor), file=sys.stderr)
        return 130
    print(summary.text())
    if summary.all_failed:
        print(
            f"error: {summary.out}: expected at least one ok point, got {sum(summary.status_counts.values())} "
            "failed (see above; fix, then re-run with --retry-failed)",
            file=sys.stderr,
        )
        return 3
    if args.figures and sweep.spec.figures:
        _render_all(summary.out, sweep.spec.figures, Path(args.fig_dir) if args.fig_dir else summary.out.parent)
    return 0


def interrupted_line(out: Path, shard, executor: str) -> str:
    """What Ctrl-C leaves: ``interrupted: N points kept in STORE; run the same command to resume``."""
    from attnsim.studies.sweep.executors import parse_shard, shard_path
    from attnsim.studies.sweep.store import open_store

    if shard is None:
        shard = parse_shard(None) if executor == "slurm" else (0, 1)
    path = shard_path(out, shard)
    try:
        n = len(open_store(path)) if path.exists() else 0
    except (ConfigError, OSError):  # a store the interrupted run could not fold: the next run recovers it
        return f"interrupted; run the same command to resume ({path})"
    return f"interrupted: {n} point{'s' * (n != 1)} kept in {path}; run the same command to resume"


def _emit_sbatch(args, sweep, out: Path) -> int:
    from attnsim.studies.sweep.executors import emit_sbatch, extra_notice

    target = None if args.emit_sbatch == "-" or args.dry_run else Path(args.emit_sbatch)
    if target is not None:
        check_output(target, "--emit-sbatch", inputs=[args.sweep] if Path(args.sweep).is_file() else [])
    text = emit_sbatch(
        sweep,
        out,
        sweep_arg=args.sweep,
        sets=args.sets,
        cache=args.cache,
        merge_after=args.merge_after,
        make_dirs=target is not None,
        flips=args.flips,
    )
    for line in extra_notice(sweep):  # slurm.extra is shell by design: never pasted unseen
        print(line, file=sys.stderr)
    if target is None:
        print(text, end="")
        return 0
    import shlex

    from attnsim.core.fileio import atomic_path

    with atomic_path(target) as tmp:
        Path(tmp).write_text(text)
    print(f"wrote {target} ({sweep.n_points} points); submit with: sbatch {shlex.quote(str(target))}", file=sys.stderr)
    return 0


def _dry_run_jobqueue(sweep) -> int:
    from attnsim.studies.sweep.executors import jobqueue_cluster

    jq = sweep.spec.dask.jobqueue if sweep.spec.dask else None
    if jq is None:
        raise ConfigError("needs --emit-sbatch or a dask.jobqueue section in the sweep", file="--dry-run")
    cluster = jobqueue_cluster(jq, check_submit=False)
    try:
        print(cluster.job_script(), end="")
    finally:
        cluster.close()
    return 0


def merge_cmd(args) -> int:
    from attnsim.studies.sweep.merge import merge_stores

    check_output(args.out, "-o", inputs=args.shards)
    n = merge_stores(args.shards, args.out, allow_version_mismatch=args.allow_version_mismatch)
    print(f"merged {len(args.shards)} shards: {n} points -> {args.out}")
    return 0


def export_cmd(args) -> int:
    from attnsim.studies.sweep import table as tb

    ext = ".parquet" if args.parquet else ".csv"
    out = Path(args.out) if args.out else Path(args.file).with_suffix(ext)
    check_output(out, "-o", inputs=[args.file])
    if args.parquet:
        tb._optional("pyarrow", "attnsim[parquet]")  # refused before any reading
    t = tb.load_table(args.file)
    requests = tb.request_columns(args.file) if t.kind == "run" else None
    req_out = out.with_name(out.stem + ".requests" + (out.suffix or ext)) if requests is not None else None
    if req_out is not None:
        check_output(req_out, "-o", inputs=[args.file, out])
    cols = tb.export_columns(t)
    write = (lambda c, p: tb.write_parquet(c, p, tb.export_meta(t))) if args.parquet else tb.write_columns_csv
    write(cols, out)
    print(f"wrote {out} ({len(t)} rows, {len(cols)} columns)")
    if req_out is not None:
        write(requests, req_out)
        print(f"wrote {req_out} ({len(next(iter(requests.values()), []))} requests, {len(requests)} columns)")
    return 0


def _figure_targets(figures, fig_dir: Path, store: Path) -> list[Path]:
    """The file of each figure of a sweep definition, checked writable and inside ``fig_dir``."""
    from attnsim.core.outputs import figure_paths, inside
    from attnsim.plots.style import resolve_font

    check_output(fig_dir, "--fig-dir", kind="dir", inputs=[store])
    outs = []
    for i, fs in enumerate(figures):
        outs.append(inside(fig_dir, fs.out, f"figures.{i}.out", file=str(store)))
        figure_paths(outs[-1], f"figures.{i}.out", inputs=[store], create=True)
        resolve_font(fs.font, file=str(store), key=f"figures.{i}.font")  # a missing font fails before the sweep
    return outs


def check_figure_labels(sweep) -> None:
    """Refuse a ``figures:`` label key that names nothing the sweep can draw, before any point runs: the
    built-in names, the sweep's systems, models, scenarios, hardware, devices, links, parameters and their
    values, and any name with a unit (a metric column). The figure itself checks against the store's columns."""
    from attnsim.plots.labels import UNIT_PREFIX, check_labels, known_keys
    from attnsim.studies.sweep.table import has_unit

    tree = sweep.base_tree
    names = known_keys() | set(tree.systems) | set(tree.models) | set(tree.scenarios) | set(tree.hardware)
    for sysd in tree.systems.values():
        for sec in ("devices", "links"):
            names |= set((sysd.get(sec) or {}) if isinstance(sysd, dict) else {})
    for keys, rows in sweep.axes:
        names |= set(keys) | {k.split(".")[-1] for k in keys} | {str(v) for r in rows for v in r}
    for i, fs in enumerate(sweep.spec.figures):
        extra = {k for k in fs.labels if has_unit(k) or (k.startswith(UNIT_PREFIX) and has_unit(k[len(UNIT_PREFIX) :]))}
        check_labels(fs.labels, sweep.file, f"figures.{i}.labels", known=names | extra)


def _render_all(path: Path, figures, fig_dir: Path) -> None:
    from attnsim.plots import render
    from attnsim.studies.sweep.table import load_table

    outs = _figure_targets(figures, fig_dir, path)
    table = load_table(path)
    from attnsim.core.plot_options import figure_options

    for fs, out in zip(figures, outs):
        paths = render(table, fs.recipe, out, **figure_options(fs))
        print("figure: " + ", ".join(map(str, paths)))


def _sweep_definition(table) -> str:
    text = table.attrs.get("sweep_definition")
    if not isinstance(text, str):
        raise ConfigError(
            "attribute missing (every store written by attnsim sweep has it)", file=table.path, key="sweep_definition"
        )
    return text


def _plan_front(args, style: dict) -> int:
    from attnsim.core.plot_options import check_recipe
    from attnsim.plots import plan_figure

    check_recipe(
        args.recipe,
        {
            "x": args.x,
            "y": args.y,
            "hue": args.hue,
            "z": args.z,
            "where": args.where,
            "logy": args.logy,
            "xlim": args.xlim,
            "ylim": args.ylim,
            "components": args.components,
            "baseline": args.baseline,
            "replicate": args.replicate,
        },
    )
    paths = plan_figure(args.file, Path(args.out), width=args.width, title=args.title, **style)
    print("figure: " + ", ".join(map(str, paths)))
    return 0


def plot_cmd(args) -> int:
    from attnsim.plots import RECIPES, render
    from attnsim.studies.sweep.table import load_table, parse_where

    if args.list:
        for name, fn in RECIPES.items():
            print(f"{name:22s} {(fn.__doc__ or '').strip().splitlines()[0]}")
        from attnsim.core.plot_options import DOC_RECIPE_SUMMARIES

        for name, text in DOC_RECIPE_SUMMARIES.items():
            print(f"{name:22s} {text}")
        return 0
    if not args.file:
        raise ConfigError("needs a results file or sweep store (or --list)", file="plot")
    if args.fig_dir and not args.all:
        raise ConfigError("only applies with --all (use -o FILE for one figure)", file="--fig-dir")
    if args.all and (args.recipe or args.out):
        raise ConfigError("--all renders the store's own figures; drop --recipe/-o, or drop --all", file="plot")
    if args.all:
        from attnsim.core.config import parse_yaml, validate
        from attnsim.studies.sweep.spec import SweepSpec

        table = load_table(args.file)
        if table.kind != "sweep":
            raise ConfigError("--all needs a sweep store (its sweep definition lists the figures)", file=args.file)
        spec = validate(SweepSpec, parse_yaml(_sweep_definition(table), file=args.file) or {}, file=args.file)
        _render_all(Path(args.file), spec.figures, Path(args.fig_dir) if args.fig_dir else Path(args.file).parent)
        return 0
    if not args.recipe or not args.out:
        raise ConfigError("needs --recipe NAME and -o FILE (or --all, --list)", file="plot")
    from attnsim.core.outputs import figure_paths

    figure_paths(args.out, "-o", inputs=[args.file], create=True)  # missing folders are made, as by run and sweep
    from attnsim.plots.labels import load_labels
    from attnsim.plots.style import resolve_font

    labels = load_labels(args.labels) if args.labels else None
    for item in args.label_items:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ConfigError(f"expected NAME=TEXT, got {item!r}", file="--label")
        name, text = item.split("=", 1)
        labels = {**(labels or {}), name.strip(): text}
    resolve_font(args.font, file="--font", key=None)
    style = {"labels": labels, "font": args.font, "logx": args.logx}
    if args.recipe in ("latency_cdf", "latency_ccdf"):  # per-request rows of `attnsim serve` results
        from attnsim.core.plot_options import check_recipe
        from attnsim.plots.serve import _read_requests, check_request_labels, latency_cdf, read_slos

        check_recipe(
            args.recipe,
            {
                "x": args.x,
                "y": args.y,
                "hue": args.hue,
                "z": args.z,
                "where": args.where,
                "title": args.title,
                "width": args.width,
                "logy": args.logy,
                "xlim": args.xlim,
                "ylim": args.ylim,
                "components": args.components,
                "baseline": args.baseline,
                "replicate": args.replicate,
            },
        )
        if not Path(args.file).is_file():
            raise ConfigError("file not found", file=args.file)
        try:
            requests = _read_requests(args.file)[0]
        except OSError:
            raise ConfigError(
                "expected an attnsim serve results file (HDF5), got unreadable data", file=args.file
            ) from None
        check_request_labels(labels, requests)  # the names a latency figure draws: built-in and the runs' text
        ccdf = args.recipe == "latency_ccdf"
        paths = latency_cdf(requests, Path(args.out), ccdf=ccdf, slos=read_slos(args.file) if ccdf else None, **style)
        print("figure: " + ", ".join(map(str, paths)))
        return 0
    if args.recipe == "plan_front":  # an attnsim plan document (attnsim plan -o PLAN.json)
        return _plan_front(args, style)
    table = load_table(args.file)
    paths = render(
        table,
        args.recipe,
        Path(args.out),
        x=args.x,
        y=args.y,
        hue=args.hue,
        z=args.z,
        where=parse_where(args.where),
        width=args.width,
        title=args.title,
        logy=args.logy,
        components=args.components,
        xlim=args.xlim,
        ylim=args.ylim,
        baseline=args.baseline,
        replicate=args.replicate,
        **style,
    )
    print("figure: " + ", ".join(map(str, paths)))
    return 0
