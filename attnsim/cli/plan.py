"""``attnsim plan``: which KV goes to which tier, in which format, under which ECC and refresh, within an
accuracy SLO (proxy or perplexity) and a performance SLO (attnsim.studies.plan)."""

from __future__ import annotations

import sys
from pathlib import Path

from attnsim.core.config import ConfigError


def front_points(text: str) -> int:
    """argparse type of ``--front-points``: an integer in [1, MAX_FRONT_POINTS] (one plan per point)."""
    import argparse

    from attnsim.core.config import check_int
    from attnsim.studies.plan import MAX_FRONT_POINTS

    try:
        return check_int(text, lo=1, hi=MAX_FRONT_POINTS)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def register(sub) -> None:
    from attnsim.cli import positive_int, positive_number
    from attnsim.studies.plan import DEFAULT_FORMATS, MAX_FRONT_POINTS

    r = sub.add_parser(
        "plan",
        help="reliability-aware KV tiering within an accuracy and a performance SLO",
        description="Run the experiment once (one system, model and scenario with a reliability: "
        "section), cut one request's KV into blocks (layer group x sink / recent / normal token "
        "ranges) and choose per block the tier, format, ECC on the high / low bit fields and their "
        "refresh that minimise the reliability objective within the accuracy SLO; check the "
        "performance SLO and print the plan table and the Pareto front (proxy error vs TPOT vs "
        "energy per token). An SLO no plan meets: one line naming it, exit status 1.",
    )
    r.add_argument("experiment", help="experiment YAML path or built-in name (e.g. plan_tiering)")
    r.add_argument(
        "--accuracy-slo",
        type=positive_number,
        default=None,
        metavar="X",
        help="max relative attention error (the proxy; default: reliability.accuracy_slo unless "
        "--max-ppl-increase is given)",
    )
    r.add_argument(
        "--max-ppl-increase",
        type=positive_number,
        default=None,
        metavar="X",
        help="max relative perplexity increase (0.01 = 1 %%), converted by the calibration entry of the "
        "plan's model (exact model, then family, within its measured context); a model no entry covers "
        "is refused unless --allow-uncalibrated",
    )
    r.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="error -> perplexity calibration table (default configs/calibration/kv_ppl_models.yaml)",
    )
    r.add_argument(
        "--allow-uncalibrated",
        action="store_true",
        help="with --max-ppl-increase: accept a model / context no calibration entry covers, or a plan whose "
        "predicted perplexity rests more than 1 %% on a borrowed bit-error slope (every published entry borrows the "
        "toy model's), and label the perplexity 'extrapolated from <calibration model>'",
    )
    perf = r.add_mutually_exclusive_group()
    perf.add_argument("--tpot-slo-s", type=positive_number, default=None, metavar="Y", help="max time per output token")
    perf.add_argument(
        "--latency-slo-s",
        type=positive_number,
        default=None,
        metavar="Y",
        help="max KV read time per decode step for one request (the planner's latency)",
    )
    r.add_argument(
        "--energy-slo-j", type=positive_number, default=None, metavar="J", help="max energy per output token"
    )
    r.add_argument(
        "--formats",
        default=",".join(DEFAULT_FORMATS),
        metavar="F,...",
        help=f"KV formats the planner may choose (default {','.join(DEFAULT_FORMATS)})",
    )
    r.add_argument("--layer-groups", type=positive_int, default=4, help="layer groups (default 4)")
    r.add_argument(
        "--block-tokens",
        type=positive_int,
        default=None,
        help="tokens per KV block (default: context / 8, a multiple of 32)",
    )
    r.add_argument(
        "--front-points",
        type=front_points,
        default=10,
        help=f"accuracy budgets on the front (default 10, at most {MAX_FRONT_POINTS})",
    )
    r.add_argument("--scenario", default=None, help="scenario (default: the first with a reliability section)")
    r.add_argument("--system", default=None, help="system (default: the first)")
    r.add_argument("--model", default=None, help="model (default: the first)")
    r.add_argument(
        "--verify",
        action="store_true",
        help="re-measure the chosen plan's error by fault injection into synthetic KV (4 seeds); while it "
        "exceeds the accuracy SLO, plan again against the SLO scaled by SLO / measured (at most 3 "
        "plans); the accuracy verdict is then the measured error",
    )
    r.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value (repeatable)",
    )
    r.add_argument("-o", "--output", default=None, metavar="FILE", help="write the plan document as JSON")
    r.add_argument("--json", action="store_true", help="print the plan document as JSON")
    r.add_argument(
        "--figure",
        default=None,
        metavar="FILE.pdf",
        help="draw the front (TPOT and J/token vs attention "
        "error, the plan, the configured placement, the SLOs; recipe plan_front) as PDF + PNG",
    )
    r.set_defaults(func=plan_cmd)


def _formats(text: str) -> tuple:
    from attnsim.hwmodels.reliability.formats import FORMATS

    fmts = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in fmts if f not in FORMATS]
    if not fmts or bad:
        raise ConfigError(f"expected comma-separated formats from {', '.join(FORMATS)}, got {text!r}", file="--formats")
    return fmts


def _calibration(args):
    if args.max_ppl_increase is None:
        for flag, v in (("--calibration", args.calibration), ("--allow-uncalibrated", args.allow_uncalibrated)):
            if v:
                raise ConfigError(f"{flag} is used only with --max-ppl-increase", file=flag)
        return None
    from attnsim.hwmodels.reliability.ppl_calibration import load_table

    return load_table(args.calibration)  # ConfigError naming the file and key


def _print(doc: dict, out) -> None:
    run, p = doc["run"], doc["plan"]
    print(
        f"{doc['experiment']}: {doc['system']} / {doc['model']} / {doc['scenario']} ({doc['requests']} requests, "
        f"KV residency {doc['kv_residency_s']:.3g} s)",
        file=out,
    )
    print(
        f"as run:  TPOT {run['tpot_s'] * 1e3:.3f} ms, {run['energy_per_token_j']:.4g} J/token, "
        f"error {doc['configured']['rel_attention_error']:.4g}",
        file=out,
    )
    ppl, cal = p.get("ppl_increase_predicted"), doc.get("calibration", {})
    tag = cal.get("label", "")
    if cal.get("bit_errors_borrowed") and p.get("ppl_bit_error_share") is not None:
        tag += f": {p['ppl_bit_error_share'] * 100:.3g} % of it (log scale) from bit errors"
    tag = f" ({tag})" if tag else ""
    print(
        f"plan:    TPOT {p['tpot_s'] * 1e3:.3f} ms, {p['energy_per_token_j']:.4g} J/token, error "
        f"{p['rel_attention_error']:.4g} (quantization {p['eps_quant']:.3g}, bit errors {p['eps_bit']:.3g})"
        + (f", perplexity +{ppl * 100:.3g} %{tag}" if ppl is not None else "")
        + f" [objective {p['objective']}]",
        file=out,
    )
    if "verified_rel_attention_error" in p:
        print(
            f"verify:  error by fault injection into synthetic KV {p['verified_rel_attention_error']:.4g} "
            f"({p['verify_rounds']} plan(s); the accuracy verdict below is the measured one)",
            file=out,
        )
    for name, s in doc["slos"].items():
        v = "n/a" if s["value"] is None else f"{s['value']:.4g}"
        print(f"SLO {s['flag']} {s['limit']:g}: {v} -> {'met' if s['met'] else 'MISSED'}", file=out)
    print(
        f"{'layers':>7} {'class':>6} {'tokens':>6} {'mass':>6} {'tier':>5} {'format':>9} {'ecc high':>10} "
        f"{'ecc low':>10} {'ref hi ms':>9} {'ref lo ms':>9}",
        file=out,
    )
    for r in p["table"]:
        print(
            f"{r['layers']:>7} {r['class']:>6} {r['tokens']:>6} {r['attention_mass']:>6.3f} {r['tier']:>5} "
            f"{r['format']:>9} {r['ecc_high']:>10} {r['ecc_low']:>10} {r['refresh_high_ms']:>9g} "
            f"{r['refresh_low_ms']:>9g}",
            file=out,
        )
    print("Pareto front (error, TPOT ms, J/token, formats):", file=out)
    for f in doc["front"]:
        print(
            f"  {f['rel_attention_error']:.4g}  {f['tpot_s'] * 1e3:.3f}  {f['energy_per_token_j']:.5g}  "
            f"{'+'.join(f['formats_used'])}",
            file=out,
        )
    src = doc["accuracy_sources"]
    print("accuracy sources:", file=out)
    print(f"  error: {src['rel_attention_error']}", file=out)
    if "verified_rel_attention_error" in src:
        print(f"  verify: {src['verified_rel_attention_error']}", file=out)
    if "ppl_increase_predicted" in src:
        print(f"  perplexity: {src['ppl_increase_predicted']}", file=out)


def plan_cmd(args) -> int:
    from attnsim.sim.results import dumps
    from attnsim.studies import plan

    fmts = _formats(args.formats)
    cal = _calibration(args)
    path = None
    if args.output:
        from attnsim.core.outputs import check_output

        inputs = [args.experiment] if Path(args.experiment).is_file() else []
        path = check_output(args.output, "--output", inputs=inputs, create=True)
    if args.figure:
        from attnsim.core.outputs import figure_paths

        figure_paths(args.figure, "--figure", inputs=[x for x in (args.experiment, args.output) if x], create=True)
    st = plan.setup(
        args.experiment,
        args.sets,
        system=args.system,
        model=args.model,
        scenario=args.scenario,
        layer_groups=args.layer_groups,
        block_tokens=args.block_tokens,
    )
    if cal is not None:  # refused before anything is written when no entry covers the model and context
        cal = plan.calibration_for(st, cal, allow_uncalibrated=args.allow_uncalibrated)
    rc, err = 0, None
    make = plan.verified_plan if args.verify else plan.make_plan
    try:
        doc = make(
            st,
            accuracy_slo=args.accuracy_slo,
            max_ppl_increase=args.max_ppl_increase,
            calibration=cal,
            tpot_slo_s=args.tpot_slo_s,
            latency_slo_s=args.latency_slo_s,
            energy_slo_j=args.energy_slo_j,
            formats=fmts,
            front_points=args.front_points,
        )
    except plan.Infeasible as exc:
        doc, rc, err = exc.doc, 1, str(exc)
    if rc == 0 and not doc["slo_met"]:  # --verify: the measured error still above the SLO after its rounds
        s = doc["slos"]["accuracy"]
        rc, err = (
            1,
            (
                f"--accuracy-slo: the plan's error measured by fault injection is "
                f"{s['value']:.4g} > {s['limit']:g} after {doc['plan']['verify_rounds']} rounds"
            ),
        )
    text = dumps(doc, indent=1)
    if path is not None:
        from attnsim.core.fileio import atomic_path

        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(text + "\n")
    figure = None
    if args.figure:
        from attnsim.plots import plan_figure

        figure = plan_figure(doc, args.figure)
    if args.json:
        print(text)
    else:
        _print(doc, sys.stdout)
        if path is not None:
            print(f"wrote {path}")
        if figure is not None:
            print("figure: " + ", ".join(map(str, figure)))
    if err:
        print(f"infeasible: {err}", file=sys.stderr)
    return rc
