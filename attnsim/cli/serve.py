"""``attnsim serve``: request-level serving simulation of an experiment's ``serving:`` section."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

REQUEST_COLUMNS = (
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "ttft_s",
    "tpot_s",
    "latency_s",
    "queue_s",
    "energy_j",
    "preemptions",
    "prefix_hit_tokens",
)


def register(sub) -> None:
    r = sub.add_parser(
        "serve",
        help="simulate serving a request trace (continuous batching)",
        description="Serve the experiment's request trace (serving: section) on every system x model x "
        "scenario with iteration-level continuous batching, and on every prefill/decode "
        "disaggregation pair. Prints a summary, or one JSON document with --json; per-request rows "
        "go to the HDF5 results (/requests) and, with --csv, to a CSV file.",
    )
    r.add_argument("experiment", help="experiment YAML path or built-in name")
    r.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. experiment.serving.trace.rate_per_s=8 (repeatable)",
    )
    r.add_argument("--out", default=None, help="results folder (default results/<experiment>/)")
    r.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    r.add_argument("--no-write", action="store_true", help="do not write the HDF5 results file")
    r.add_argument("--csv", default=None, metavar="FILE.csv", help="also write per-request rows to a CSV file")
    r.add_argument(
        "--slo-vs-load",
        default=None,
        metavar="RATES",
        help="comma-separated arrival rates: serve at each and draw SLO attainment and goodput vs load "
        "per system into --figure (default serve_slo.pdf)",
    )
    r.add_argument("--figure", default=None, help="figure file for --slo-vs-load (default serve_slo.pdf)")
    r.add_argument(
        "--max-rate-under-slo",
        nargs="?",
        const="auto",
        default=None,
        metavar="START",
        help="bisect the Poisson arrival rate for the highest rate whose p99 TTFT and p99 TPOT meet "
        "serving.slo, per system (START: first rate probed, default the trace's rate_per_s or 1); "
        "text or --json (rate, bracket, confidence, the p99s at the rate); writes no results",
    )
    r.add_argument(
        "--rate-tolerance",
        type=float,
        default=None,
        metavar="REL",
        help="with --max-rate-under-slo: stop when the bracket is narrower than REL of its lower end (default 0.02)",
    )
    r.add_argument(
        "--trace",
        default=None,
        metavar="TRACE.json",
        help="write a Chrome/Perfetto timeline (ui.perfetto.dev): per pool instance its scheduler iterations "
        "and counters (running, waiting, KV occupancy, tokens/s), per request its phases",
    )
    r.add_argument(
        "--trace-requests",
        type=int,
        default=None,
        metavar="N",
        help="with --trace: requests drawn per run, the first N by arrival (default 1000)",
    )
    r.set_defaults(func=serve_cmd)


def _fmt(v, scale=1.0):
    """attnsim.core.report.fmt_num of ``v * scale`` ('-' for a missing or non-finite value)."""
    from attnsim.core.report import fmt_num

    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return fmt_num(v * scale)


def summary_table(docs) -> str:
    head = (
        "system",
        "status",
        "req/s",
        "out tok/s",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "lat p50/p99 s",
        "SLO %",
        "goodput",
        "J/req",
        "preempt",
        "prefix hit",
    )
    rows = []
    for d in docs:
        if d["status"] != "ok":
            rows.append((d["system"], d["status"]) + ("",) * (len(head) - 2))
            continue
        m = d["metrics"]
        sv = d.get("serving", {})
        hit = sv.get("prefix_hit_rate", sv.get("prefill_pool", {}).get("prefix_hit_rate", 0.0))
        rows.append(
            (
                d["system"],
                "ok",
                _fmt(m["throughput_rps"]),
                _fmt(m["output_tokens_per_s"]),
                f"{_fmt(m['ttft_p50'], 1e3)}/{_fmt(m['ttft_p99'], 1e3)}",
                f"{_fmt(m['tpot_p50'], 1e3)}/{_fmt(m['tpot_p99'], 1e3)}",
                f"{_fmt(m['latency_p50'])}/{_fmt(m['latency_p99'])}",
                _fmt(m["slo_attainment"], 100),
                _fmt(m["goodput_rps"]),
                _fmt(m["energy_per_request_j"]),
                str(m["preemptions"]),
                _fmt(hit, 100) + "%",
            )
        )
    from attnsim.core.report import table

    out = table(rows, list(head), numeric=2)
    errs = [f"{d['system']}: {d['error']}" for d in docs if d["status"] != "ok"]
    return out + ("\n" + "\n".join(errs) if errs else "")


def request_rows(docs) -> np.ndarray:
    import h5py

    dt = [
        ("run", "i8"),
        ("system", h5py.string_dtype()),
        ("model", h5py.string_dtype()),
        ("scenario", h5py.string_dtype()),
        ("request", "i8"),
    ] + [
        (c, "i8" if c in ("prompt_tokens", "output_tokens", "preemptions", "prefix_hit_tokens") else "f8")
        for c in REQUEST_COLUMNS
    ]
    parts = []
    for i, d in enumerate(docs):
        req = d.get("_requests")
        if req is None:
            continue
        n = len(req["arrival_s"])
        a = np.zeros(n, dtype=dt)
        a["run"] = i
        a["system"] = d["system"]
        a["model"] = d["model"]
        a["scenario"] = d["scenario"]["name"]
        a["request"] = np.arange(n)
        for c in REQUEST_COLUMNS:
            a[c] = req[c]
        parts.append(a)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dt)


def write_serve_results(path: Path, docs, tree_dict: dict, experiment: str) -> Path:
    """results.h5 as ``attnsim run`` writes it plus a ``/requests`` table; atomic (temp + rename)."""
    import h5py

    from attnsim.core.fileio import atomic_path
    from attnsim.sim.results import write_results

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".h5") as tmp:
        clean = [{k: v for k, v in d.items() if not k.startswith("_")} for d in docs]
        write_results(tmp, clean, tree_dict, experiment)
        with h5py.File(tmp, "a") as f:
            f.create_dataset("requests", data=request_rows(docs))
            f.attrs["command"] = "serve"
    return path


def write_csv(path, docs) -> None:
    from attnsim.core.fileio import atomic_path
    from attnsim.core.outputs import csv_cell  # names from configs: a formula is quoted, numbers unchanged

    rows = request_rows(docs)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(rows.dtype.names)
        for r in rows:
            w.writerow([csv_cell(x.decode() if isinstance(x, bytes) else x) for x in r.tolist()])


def _check_trace_requests(args) -> int | None:
    """``--trace-requests``: only with --trace, an integer in [0, timeline_serve.MAX_TRACE_REQUESTS]."""
    from attnsim.core.config import ConfigError
    from attnsim.studies.timeline_serve import MAX_TRACE_REQUESTS

    n = args.trace_requests
    if n is None:
        return None
    if not args.trace:
        raise ConfigError("only applies with --trace", file="--trace-requests")
    if not 0 <= n <= MAX_TRACE_REQUESTS:
        raise ConfigError(f"expected an integer in [0, {MAX_TRACE_REQUESTS}], got {n}", file="--trace-requests")
    return n


def serve_cmd(args) -> int:
    from attnsim.core.config import ConfigError

    trace_requests = _check_trace_requests(args)
    if args.figure is not None and args.slo_vs_load is None:
        raise ConfigError("only applies with --slo-vs-load", file="--figure")
    if args.rate_tolerance is not None and args.max_rate_under_slo is None:
        raise ConfigError("only applies with --max-rate-under-slo", file="--rate-tolerance")
    if args.max_rate_under_slo is not None:
        return rate_search_cmd(args)
    if args.slo_vs_load is not None:
        from attnsim.plots.serve import slo_vs_load

        ignored = [
            f
            for f, v in (("--out", args.out), ("--csv", args.csv), ("--json", args.json), ("--trace", args.trace))
            if v
        ]
        if ignored:
            raise ConfigError(
                f"--slo-vs-load draws one figure and writes no results; drop {', '.join(ignored)}", file="--slo-vs-load"
            )
        args.figure = args.figure or "serve_slo.pdf"
        try:
            rates = [float(x) for x in args.slo_vs_load.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(
                f"expected comma-separated numbers, got {args.slo_vs_load!r}", file="--slo-vs-load"
            ) from None
        if not rates or min(rates) <= 0 or not all(math.isfinite(r) for r in rates):
            raise ConfigError(f"expected positive finite arrival rates, got {args.slo_vs_load!r}", file="--slo-vs-load")
        from attnsim.core.outputs import figure_paths

        figure_paths(args.figure, "--figure")
        paths, table = slo_vs_load(args.experiment, rates, args.figure, args.sets)
        for name, rows in table.items():
            print(name, ", ".join(f"{r:g}/s: {100 * s:.0f}% SLO, {g:.2f} good/s" for r, s, g in rows))
        print("figure: " + ", ".join(str(p) for p in paths))
        return 0
    from attnsim import __version__
    from attnsim.cli.run import check_run_outputs
    from attnsim.sim.results import dumps
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    exp, serving = load_serving_experiment(args.experiment, args.sets)
    out_path = check_run_outputs(args, exp.spec.name)
    timeline = [] if args.trace else None
    docs = serve_experiment(exp, serving, timeline=timeline, trace_requests=trace_requests)
    if out_path is not None:
        out_path = write_serve_results(out_path, docs, exp.tree.as_dict(), exp.spec.name)
    if args.csv:
        write_csv(args.csv, docs)
    if timeline is not None:
        from attnsim.sim.timeline import write_trace

        write_trace(args.trace, timeline)
    if args.json:
        clean = [{k: v for k, v in d.items() if not k.startswith("_")} for d in docs]
        print(
            dumps(
                {"experiment": exp.spec.name, "attnsim_version": __version__, "command": "serve", "runs": clean},
                indent=1,
            )
        )
    else:
        print(f"experiment: {exp.spec.name} (serve)")
        print(summary_table(docs))
        if out_path:
            print(f"\nresults: {out_path}")
    return 0


def rate_search_cmd(args) -> int:
    """``attnsim serve --max-rate-under-slo``: attnsim.studies.rate_search per system, as text or one JSON document."""
    from attnsim.core.config import ConfigError
    from attnsim.studies import rate_search

    ignored = [
        f
        for f, v in (
            ("--out", args.out),
            ("--csv", args.csv),
            ("--trace", args.trace),
            ("--slo-vs-load", args.slo_vs_load),
        )
        if v
    ]
    if ignored:
        raise ConfigError(f"the search writes no results; drop {', '.join(ignored)}", file="--max-rate-under-slo")
    start = None
    if args.max_rate_under_slo != "auto":
        try:
            start = float(args.max_rate_under_slo)
        except ValueError:
            raise ConfigError(
                f"expected a start rate in requests/s, got {args.max_rate_under_slo!r}", file="--max-rate-under-slo"
            ) from None
        if not (start > 0 and math.isfinite(start)):
            raise ConfigError(
                f"expected a positive finite start rate, got {args.max_rate_under_slo!r}", file="--max-rate-under-slo"
            )
    tol = 0.02 if args.rate_tolerance is None else args.rate_tolerance
    if not (0 < tol < 1):
        raise ConfigError(f"expected a number in (0, 1), got {tol!r}", file="--rate-tolerance")
    searches = rate_search.max_rate_under_slo(args.experiment, args.sets, start=start, rel_tol=tol)
    if args.json:
        from attnsim import __version__
        from attnsim.sim.results import dumps

        print(
            dumps(
                {
                    "experiment": args.experiment,
                    "attnsim_version": __version__,
                    "command": "serve --max-rate-under-slo",
                    "searches": [s.as_dict() for s in searches],
                },
                indent=1,
            )
        )
    else:
        print(rate_search.summary(searches))
    return 0
