"""``attnsim plan``: reliability-aware KV tiering from an experiment (hwmodels/reliability/planner.py).

One timing run of (system, model, scenario) gives the decode step time (TPOT), the energy per
token, where the KV lives (reliability_run.kv_footprint) and how long it stays (residency). The
experiment's ``reliability:`` section gives the tiers (read time and energy per byte, refresh power,
capacity shared by the batch's requests, error models, ``ecc_options``, ``refresh_options_ms``).
One request's KV is cut into blocks (layer group x token range; uniform_blocks' sink / recent /
normal importance classes) and the planner picks tier, format, ECC on the high / low bit fields
and their refresh per block.

Costs of a plan against the run: the planner's KV read time T and energy per step replace those of
the configured storage (every block in the tier the run put it in, kv_format, configured ECC and
refresh): TPOT = TPOT_run + requests x (T_plan - T_conf); energy per token = run + (E_dyn,plan -
E_dyn,conf) + refresh power x TPOT (plan minus configured). The accuracy SLO bounds the proxy (the
planner's eps); a perplexity SLO is converted by the calibration entry of the plan's model
(configs/calibration/kv_ppl_models.yaml: exact model, then family, within the measured context; else
refused unless extrapolation is allowed; ppl_calibration.resolve, perplexity.error_weights). Every accuracy
number in the document names its source (``accuracy_sources``, ``calibration``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnsim.core.config import ConfigError, check_int

DEFAULT_FORMATS = ("bf16", "fp8_e4m3", "int8", "int4")
# what the proxy error numbers are (hwmodels/reliability/accuracy.py, planner.py)
PROXY_SOURCE = (
    "attnsim L0 proxy: relative attention error of the stored KV on synthetic q/K/V (accuracy.py, "
    "planner.py), not a model-quality measurement"
)


class Infeasible(Exception):
    """An SLO that no plan meets; ``slo`` names it (a CLI flag), the message says why."""

    def __init__(self, slo: str, message: str, doc: dict):
        super().__init__(f"{slo}: {message}")
        self.slo, self.doc = slo, doc


@dataclasses.dataclass
class Setup:
    """Everything the planner needs from the experiment and its timing run."""

    name: str
    system: str
    model: str
    scenario: str
    spec: object  # ReliabilitySpec
    tiers: list  # TierSpec, capacities shared by the requests
    blocks: list
    baseline_choice: list  # configured Option per block
    requests: int
    residency_s: float
    tpot_s: float
    energy_per_token_j: float
    layer_groups: list  # (first layer, last layer) per group
    context_tokens: int = 0  # one request's context (mean prompt + output tokens)


def _pick(name, options: dict, what: str, flag: str):
    if name is None:
        return next(iter(options))
    if name not in options:
        raise ConfigError(f"expected one of {', '.join(options)}, got {name!r}", file=flag)
    return name


def setup(
    experiment: str,
    sets=(),
    *,
    system=None,
    model=None,
    scenario=None,
    layer_groups: int = 4,
    block_tokens: int | None = None,
) -> Setup:
    from attnsim.hwmodels.reliability.planner import uniform_blocks
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.reliability_run import kv_footprint
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(experiment, list(sets))
    rel = exp.reliability or {}
    with_rel = [n for n in exp.scenarios if rel.get(n) is not None]
    if not with_rel:
        raise ConfigError(
            "expected a reliability: section (tiers, accuracy_slo) to plan with, got none",
            file=str(experiment),
            key="reliability",
        )
    sc = _pick(scenario, {n: 1 for n in with_rel}, "scenario", "--scenario")
    sy = _pick(system, exp.systems, "system", "--system")
    mo = _pick(model, exp.models, "model", "--model")
    L = exp.models[mo].num_layers
    if layer_groups > L:
        raise ConfigError(
            f"expected at most {L} layer groups ({mo} has {L} layers), got {layer_groups}", file="--layer-groups"
        )
    context = int(round(float(np.mean(exp.scenarios[sc].prompt_lens())) + exp.scenarios[sc].output_len))
    if block_tokens is not None and block_tokens > context:
        raise ConfigError(
            f"expected at most the context of one request ({context} tokens in scenario {sc}), got {block_tokens}",
            file="--block-tokens",
        )
    one = dataclasses.replace(
        exp,
        systems={sy: exp.systems[sy]},
        models={mo: exp.models[mo]},
        scenarios={sc: exp.scenarios[sc]},
        reliability={sc: rel[sc]},
    )
    doc = run_experiment(one)[0]
    if doc["status"] != "ok":
        raise ConfigError(
            f"expected a run that fits, got {doc['status']} ({doc.get('error', '')})", file=str(experiment)
        )
    spec, mspec, scen = rel[sc], exp.models[mo], exp.scenarios[sc]
    footprint = kv_footprint(spec, exp.systems[sy], mspec, scen, doc)
    if not footprint:
        raise ConfigError(
            "expected the run to place KV on a device role mapped to a tier, got none",
            file=str(experiment),
            key="reliability.role_tiers",
        )
    m = doc["metrics"]
    if m["tpot_s"] is None:  # one-token outputs have no TPOT (null): the plan's performance is per output token
        raise ConfigError(
            f"expected output_len >= 2 (the plan trades accuracy against TPOT), got {scen.output_len}",
            file=str(experiment),
            key=f"scenarios.{sc}.output_len",
        )
    requests = int(scen.batch_size)
    residency = float(spec.residency_s if spec.residency_s is not None else m["total_time_s"])
    kv_heads = 1 if mspec.mla else mspec.num_kv_heads
    head_dim = (mspec.mla.kv_lora_rank + mspec.mla.qk_rope_head_dim) if mspec.mla else mspec.head_dim
    bt = block_tokens or max(32, -(-context // 8) // 32 * 32)
    edges = np.linspace(0, L, layer_groups + 1).round().astype(int)
    blocks, groups = [], []
    for g in range(layer_groups):
        n_layers = int(edges[g + 1] - edges[g])
        for b in uniform_blocks(1, 1, n_layers * kv_heads, head_dim, context, bt):
            blocks.append(dataclasses.replace(b, layer=g))
        groups.append((int(edges[g]), int(edges[g + 1] - 1)))
    # configured storage: blocks fill the run's tiers in proportion to their KV share
    total = sum(footprint.values())
    share_edges = np.cumsum([v / total for v in footprint.values()])
    names = list(footprint)
    per_group = len(blocks) // layer_groups
    base = []
    for i, b in enumerate(blocks):
        pos = ((i % per_group) + 0.5) / per_group
        tier = names[min(int(np.searchsorted(share_edges, pos)), len(names) - 1)]
        base.append(spec.configured_option(tier))
    # a tier's read_gbps and capacity_gb are per device (reliability_tiering.yaml: one H100, one CXL-PNM
    # device); the tier holds the KV of every device of the roles mapped to it, each request's KV spread
    # over them (TP shards, replicas hold other requests): aggregate bandwidth and capacity
    from attnsim.sim.reliability_run import role_tiers

    devices = {}
    for role, tier in role_tiers(spec, exp.systems[sy]).items():
        if role in exp.systems[sy].devices:
            devices[tier] = devices.get(tier, 0) + int(exp.systems[sy].devices[role].count)
    tiers = [
        dataclasses.replace(
            t,
            read_s_per_byte=t.read_s_per_byte / max(devices.get(t.name, 1), 1),
            capacity_bytes=t.capacity_bytes * max(devices.get(t.name, 1), 1) / requests,
        )
        for t in spec.tier_specs()
    ]
    return Setup(
        exp.spec.name,
        sy,
        mo,
        sc,
        spec,
        tiers,
        blocks,
        base,
        requests,
        residency,
        float(m["tpot_s"]),
        float(m["energy_per_token_j"]),
        groups,
        context,
    )


def calibration_for(st: Setup, path=None, *, allow_uncalibrated: bool = False) -> dict:
    """The perplexity calibration of the plan's model and context (ppl_calibration.resolve; ConfigError when
    no entry covers it and ``allow_uncalibrated`` is False)."""
    from attnsim.hwmodels.reliability.ppl_calibration import load_table, resolve

    table = path if isinstance(path, dict) else load_table(path)
    return resolve(table, st.model, st.context_tokens, allow_uncalibrated=allow_uncalibrated, group=st.spec.quant_group)


def planner_for(st: Setup, formats, budget: float, objective: str, error_weights=(1.0, 1.0)):
    from attnsim.hwmodels.reliability.planner import Planner, enumerate_options

    opts = enumerate_options(st.tiers, formats)
    for o in st.baseline_choice:  # the configured options are always costed (and allowed)
        if o not in opts:
            opts.append(o)
    return Planner(
        st.tiers,
        formats=formats,
        budget=budget,
        objective=objective,
        residency_s=st.residency_s,
        group=st.spec.quant_group,
        due_policy=st.spec.due_policy,
        options=opts,
        error_weights=error_weights,
    )


def costs(st: Setup, planner, choice) -> dict:
    """Per-token costs of an assignment (option index per block) against the timing run."""
    M = planner._matrices(st.blocks)
    rows = np.arange(len(st.blocks))
    conf = np.array([planner.options.index(o) for o in st.baseline_choice])
    T, E, P = (float(M[k][rows, choice].sum()) for k in ("time", "energy", "ref"))
    T0, E0, P0 = (float(M[k][rows, conf].sum()) for k in ("time", "energy", "ref"))
    tpot = st.tpot_s + st.requests * (T - T0)
    energy = st.energy_per_token_j + (E - E0) + P * tpot - P0 * st.tpot_s
    eq, eb = float(M["eps_q"][rows, choice].sum()), float(M["eps_b"][rows, choice].sum())
    return {
        "rel_attention_error": eq + eb,
        "eps_quant": eq,
        "eps_bit": eb,
        "kv_read_time_s": T,
        "tpot_s": tpot,
        "energy_per_token_j": energy,
        "refresh_w": P,
    }


def table(st: Setup, options) -> list:
    """Plan rows: (layer group, importance class) -> tier, format, ECC high/low, refresh high/low."""
    rows: dict = {}
    for b, o in zip(st.blocks, options):
        key = (b.layer, b.importance, o)
        r = rows.setdefault(
            key,
            {
                "layers": "%d-%d" % st.layer_groups[b.layer],
                "class": b.importance,
                "tokens": 0,
                "attention_mass": 0.0,
                "tier": o.tier,
                "format": o.fmt,
                "ecc_high": o.ecc_high,
                "ecc_low": o.ecc_low,
                "refresh_high_ms": o.refresh_high_ms,
                "refresh_low_ms": o.refresh_low_ms,
            },
        )
        r["tokens"] += b.n_tokens
        r["attention_mass"] += b.attention_mass
    return list(rows.values())


def slo_weights(accuracy_slo: float | None, max_ppl_increase: float | None, calibration: dict | None):
    """(w_quant, w_bit) with budget 1 meeting both the proxy SLO and the perplexity SLO (each part's
    weight the larger of the two; exact when only one is given)."""
    from attnsim.hwmodels.reliability.perplexity import error_weights

    w = [0.0, 0.0]
    if accuracy_slo is not None:
        w = [1 / accuracy_slo, 1 / accuracy_slo]
    if max_ppl_increase is not None:
        wq, wb = error_weights(max_ppl_increase, calibration["fit"])
        w = [max(w[0], wq), max(w[1], wb)]
    return tuple(w)


def protection(planner, blocks, choice) -> dict:
    """Bit-weighted protection of an assignment over a request's KV: stored bits (data + check bits)
    and expected silent data-bit flips, both summed over elements."""
    from attnsim.hwmodels.reliability.accuracy import field_bits
    from attnsim.hwmodels.reliability.ecc import get_scheme
    from attnsim.hwmodels.reliability.formats import FIELD_GROUPS

    bits = silent = 0.0
    for b, i in zip(blocks, choice):
        o = planner.options[i]
        fb = field_bits(o.fmt, planner.group)
        for grp, ecc in (("high", o.ecc_high), ("low", o.ecc_low)):
            gb = sum(v for f, v in fb.items() if f in FIELD_GROUPS[grp])
            bits += b.n_elements * gb * (1 + get_scheme(ecc).storage_overhead)
        silent += b.n_elements * planner.table.silent_bits[i]
    return {"stored_bits": bits, "silent_flips": silent}


def make_plan(
    st: Setup,
    *,
    accuracy_slo=None,
    max_ppl_increase=None,
    calibration=None,
    tpot_slo_s=None,
    latency_slo_s=None,
    energy_slo_j=None,
    formats=DEFAULT_FORMATS,
    front_points: int = 10,
) -> dict:
    """The chosen plan, the Pareto front and the SLO verdicts (raises Infeasible with the document)."""
    acc = (
        accuracy_slo
        if accuracy_slo is not None
        else (None if max_ppl_increase is not None else st.spec.accuracy_slo.max_rel_attention_error)
    )
    w = slo_weights(acc, max_ppl_increase, calibration)
    obj = st.spec.objective
    pl = planner_for(st, formats, 1.0, obj, w)
    plan = pl.plan(st.blocks)
    c = costs(st, pl, plan.choice)

    def perf_miss(c):
        for flag, lim, key in (
            ("--tpot-slo-s", tpot_slo_s, "tpot_s"),
            ("--latency-slo-s", latency_slo_s, "kv_read_time_s"),
            ("--energy-slo-j", energy_slo_j, "energy_per_token_j"),
        ):
            if lim is not None and c[key] > lim * (1 + 1e-12):
                return flag, lim, key
        return None

    miss = perf_miss(c) if plan.feasible else None
    if miss and miss[0] != "--energy-slo-j" and obj != "latency":  # retry: fastest plan within accuracy
        pl2 = planner_for(st, formats, 1.0, "latency", w)
        p2 = pl2.plan(st.blocks)
        if p2.feasible:
            pl, plan, c, obj, miss = pl2, p2, costs(st, pl2, p2.choice), "latency", perf_miss(costs(st, pl2, p2.choice))
    if miss and miss[0] == "--energy-slo-j" and obj != "energy":
        pl2 = planner_for(st, formats, 1.0, "energy", w)
        p2 = pl2.plan(st.blocks)
        if p2.feasible:
            pl, plan, c, obj, miss = pl2, p2, costs(st, pl2, p2.choice), "energy", perf_miss(costs(st, pl2, p2.choice))
    conf = np.array([pl.options.index(o) for o in st.baseline_choice])
    ppl = None
    if calibration is not None:
        from attnsim.hwmodels.reliability.perplexity import ppl_increase

        ppl = ppl_increase(c["eps_quant"], c["eps_bit"], calibration["fit"])
    share = bit_error_share(c, calibration)
    chosen = {
        **c,
        "objective": obj,
        "ppl_increase_predicted": ppl,
        "ppl_bit_error_share": share,
        "table": table(st, plan.options),
        "options": [dataclasses.asdict(o) for o in plan.options],
        "protection": protection(pl, st.blocks, plan.choice),
        "tier_bytes": plan.tier_bytes,
        "silent_errors_per_token": plan.silent_errors_per_token,
    }
    slos = {}
    if acc is not None:
        slos["accuracy"] = {
            "flag": "--accuracy-slo",
            "limit": acc,
            "value": c["rel_attention_error"],
            "met": c["rel_attention_error"] <= acc * (1 + 1e-9),
        }
    if max_ppl_increase is not None:
        slos["perplexity"] = {
            "flag": "--max-ppl-increase",
            "limit": max_ppl_increase,
            "value": ppl,
            "met": plan.feasible,
        }
    for flag, lim, key in (
        ("--tpot-slo-s", tpot_slo_s, "tpot_s"),
        ("--latency-slo-s", latency_slo_s, "kv_read_time_s"),
        ("--energy-slo-j", energy_slo_j, "energy_per_token_j"),
    ):
        if lim is not None:
            slos[key] = {"flag": flag, "limit": lim, "value": c[key], "met": c[key] <= lim * (1 + 1e-12)}
    doc = {
        "experiment": st.name,
        "system": st.system,
        "model": st.model,
        "scenario": st.scenario,
        "requests": st.requests,
        "kv_residency_s": st.residency_s,
        "formats": list(formats),
        "run": {"tpot_s": st.tpot_s, "energy_per_token_j": st.energy_per_token_j},
        "configured": {**costs(st, pl, conf), "table": table(st, st.baseline_choice)},
        "plan": chosen,
        "slos": slos,
        "slo_met": bool(plan.feasible and all(s["met"] for s in slos.values())),
        "front": front(st, formats, front_points, calibration),
    }
    doc["accuracy_sources"] = {"rel_attention_error": PROXY_SOURCE}
    if calibration is not None:
        doc["calibration"] = {k: v for k, v in calibration.items() if k not in ("points", "mean_points")}
        doc["accuracy_sources"]["ppl_increase_predicted"] = _ppl_source(calibration)
    _refuse_borrowed_bit_slope(share, calibration)
    if not plan.feasible:
        lo = planner_for(st, formats, 0.0, obj, w).plan(st.blocks)
        lc = costs(st, pl, lo.choice)
        if acc is not None and lc["rel_attention_error"] > acc:
            flag, msg = (
                "--accuracy-slo",
                (
                    f"no placement reaches a relative attention error of {acc:g}; the most "
                    f"accurate one has {lc['rel_attention_error']:.4g}"
                ),
            )
        else:
            flag, msg = (
                "--max-ppl-increase",
                (
                    f"no placement keeps the predicted perplexity increase within "
                    f"{max_ppl_increase:g} ({calibration.get('label', 'calibrated')})"
                ),
            )
        raise Infeasible(flag, msg, doc)
    for s in slos.values():
        if not s["met"]:
            raise Infeasible(
                s["flag"], f"the best plan within the accuracy SLO gives {s['value']:.4g} > {s['limit']:g}", doc
            )
    return doc


BIT_SHARE_MAX = 0.01
"""Largest share of a plan's predicted log-perplexity increase (s_bit e_bit over s_quant e_quant + s_bit e_bit) that
may rest on a borrowed bit-error slope (an entry with ``bit_errors: {from: ...}``: every published entry borrows the
toy model's, no published KV bit-error -> perplexity measurement of a real LLM was found, cxl_reliability.md §4.1).
Assumed: at 1 % a true slope 10x the borrowed one moves the predicted log-perplexity by at most 9 %; above it the
figure is the toy model's as much as the calibrated model's and is refused unless --allow-uncalibrated."""


def bit_error_share(c: dict, calibration: dict | None) -> float | None:
    """Share of the predicted log-perplexity increase of costs ``c`` due to bit errors (None without a
    calibration or with no predicted increase)."""
    if calibration is None:
        return None
    f = calibration["fit"]
    lq, lb = f["s_quant"] * c["eps_quant"], f["s_bit"] * c["eps_bit"]
    return lb / (lq + lb) if lq + lb > 0 else None


def _refuse_borrowed_bit_slope(share: float | None, calibration: dict | None) -> None:
    """ConfigError (at --max-ppl-increase) when more than BIT_SHARE_MAX of the plan's predicted perplexity rests on
    a borrowed bit-error slope and extrapolation was not allowed; names the calibration that would be needed."""
    if share is None or not calibration.get("bit_errors_borrowed") or share <= BIT_SHARE_MAX:
        return
    if calibration.get("allow_uncalibrated"):
        return
    raise ConfigError(
        f"expected a plan whose predicted perplexity rests on {calibration['plan_model']}'s calibration, got "
        f"{share:.1%} of it from bit errors at a borrowed slope ({calibration['bit_error_source']}; more than "
        f"{BIT_SHARE_MAX:.0%}): needs a KV bit-error -> perplexity measurement of {calibration['model']} (a "
        f"bit_errors: entry in {calibration['file']}); --allow-uncalibrated prints it labelled",
        file="--max-ppl-increase",
    )


def _ppl_source(cal: dict) -> str:
    """One line: where a predicted perplexity comes from (calibration file, entry, model, measurement)."""
    if "entry" not in cal:  # a raw single-curve document (perplexity.load_calibration)
        return f"single curve measured on {cal.get('model')}"
    return (
        f"{cal['file']} entry {cal['entry']}{' (TOY MODEL)' if cal['toy'] else ''}: {cal['model']}, "
        f"{cal['measurement']} ({cal['source']}); {cal['coverage']}; bit-error part: {cal['bit_error_source']}"
    )


MAX_FRONT_POINTS = 1000
"""Most accuracy budgets on a front (one full plan each). Assumed bound: 1000 log-spaced budgets over ten decades of
error are 2.3 % apart, more than a table or a plot of the front resolves; 10^9 asked numpy for 7.45 GiB (issue 31)."""


def front(st: Setup, formats, n: int, calibration=None) -> list:
    """Pareto front (proxy error vs TPOT vs energy per token) over ``n`` accuracy budgets (at most
    MAX_FRONT_POINTS) from the most accurate placement to the cheapest one (budgets log-spaced)."""
    check_int(n, key="front_points", lo=1, hi=MAX_FRONT_POINTS)
    obj = st.spec.objective
    lo = planner_for(st, formats, 0.0, obj).plan(st.blocks)
    hi = planner_for(st, formats, np.inf, obj).plan(st.blocks)
    e0, e1 = max(lo.eps, 1e-12), max(hi.eps, lo.eps * 1.001, 1e-12)
    pts = []
    for budget in np.geomspace(e0 * (1 + 1e-9), e1, n):
        pl = planner_for(st, formats, float(budget), obj)
        p = pl.plan(st.blocks)
        if not p.feasible:
            continue
        c = costs(st, pl, p.choice)
        if calibration is not None:
            from attnsim.hwmodels.reliability.perplexity import ppl_increase

            c["ppl_increase_predicted"] = ppl_increase(c["eps_quant"], c["eps_bit"], calibration["fit"])
        c["budget"] = float(budget)
        c["formats_used"] = sorted({o.fmt for o in p.options})
        pts.append(c)
    keep = []
    for a in pts:
        dominated = any(
            b is not a
            and b["rel_attention_error"] <= a["rel_attention_error"]
            and b["tpot_s"] <= a["tpot_s"]
            and b["energy_per_token_j"] <= a["energy_per_token_j"]
            and (b["rel_attention_error"], b["tpot_s"], b["energy_per_token_j"])
            != (a["rel_attention_error"], a["tpot_s"], a["energy_per_token_j"])
            for b in pts
        )
        if not dominated and all(
            k["rel_attention_error"] != a["rel_attention_error"] or k["tpot_s"] != a["tpot_s"] for k in keep
        ):
            keep.append(a)
    return sorted(keep, key=lambda c: c["rel_attention_error"])


def verified_plan(st: Setup, *, rounds: int = 3, seeds=(0, 1, 2, 3), **kw) -> dict:
    """``make_plan``, then the chosen plan re-measured by fault injection (``verify_by_injection``); while the
    measured error exceeds the accuracy SLO, plan again against the SLO scaled by SLO / measured (the
    measured error is what the SLO bounds; the proxy's sum over blocks is an estimate), at most ``rounds``
    plans. The accuracy verdict is then the measured one. Raises Infeasible like make_plan."""
    from attnsim.hwmodels.reliability.planner import Option

    acc = kw.get("accuracy_slo")
    if acc is None and kw.get("max_ppl_increase") is None:
        acc = st.spec.accuracy_slo.max_rel_attention_error
    target = acc
    for r in range(1, rounds + 1):
        doc = make_plan(st, **{**kw, "accuracy_slo": target} if acc is not None else kw)
        measured = verify_by_injection(st, [Option(**o) for o in doc["plan"]["options"]], seeds)
        doc["plan"]["verified_rel_attention_error"] = measured
        doc["plan"]["verify_rounds"] = r
        doc["accuracy_sources"]["verified_rel_attention_error"] = (
            f"bit-exact fault injection (inject.py) into synthetic KV, {len(seeds)} seeds, proxy metric as above"
        )
        if acc is None or measured <= acc * (1 + 1e-9):
            break
        target *= acc / measured
    if acc is not None:
        s = doc["slos"]["accuracy"]
        s.update(limit=acc, planned_limit=target, value=measured, met=measured <= acc * (1 + 1e-9))
        doc["slo_met"] = all(v["met"] for v in doc["slos"].values())
    return doc


def verify_by_injection(st: Setup, options, seeds=(0, 1, 2, 3), n_heads: int = 4) -> float:
    """Independent check of a plan: inject (inject.py) into synthetic KV (accuracy.synthetic_qkv, one per
    layer group, the plan's token ranges stored in their formats under their ECC and refresh) and measure
    the clipped relative attention error against the float KV, mean over layer groups (weighted by heads)
    and seeds. Rare flips make one draw heavy-tailed (a scale or exponent flip loses a head): use seeds."""
    return float(np.mean([_verify_once(st, options, s, n_heads) for s in seeds]))


def _verify_once(st: Setup, options, seed: int, n_heads: int) -> float:
    from attnsim.hwmodels.reliability.accuracy import metrics, store, synthetic_qkv, unstore
    from attnsim.hwmodels.reliability.formats import FIELD_GROUPS
    from attnsim.hwmodels.reliability.inject import StreamSpec, inject

    tiers = {t.name: t for t in st.tiers}
    errs, weights = [], []
    for g in range(len(st.layer_groups)):
        blk = [(b, o) for b, o in zip(st.blocks, options) if b.layer == g]
        T, d = blk[-1][0].token_end, blk[0][0].head_dim
        qkv = synthetic_qkv(n_heads=n_heads, n_tokens=T, head_dim=d, seed=seed + g)
        out = {}
        for kind in ("k", "v"):
            parts = []
            for i, (b, o) in enumerate(blk):
                x = qkv[kind][:, b.token_start : b.token_end]
                t = tiers[o.tier]
                specs = [
                    StreamSpec(
                        FIELD_GROUPS[grp],
                        ecc,
                        p_flip=t.errors.p_bidirectional(st.residency_s),
                        p_retention=t.errors.ber_retention(ref, t.temp_c),
                        true_cell_fraction=t.errors.true_cell_fraction,
                    )
                    for grp, ecc, ref in (("high", o.ecc_high, o.refresh_high_ms), ("low", o.ecc_low, o.refresh_low_ms))
                ]
                enc = inject(
                    store(x, o.fmt, kind, st.spec.quant_group),
                    specs,
                    seed=seed * 1000 + g * 100 + i * 2 + (kind == "v"),
                ).encoded
                parts.append(unstore(enc, n_heads))
            out[kind] = np.concatenate(parts, axis=1)
        errs.append(metrics(qkv["q"], qkv["k"], qkv["v"], out["k"], out["v"])["rel_err_clipped"])
        weights.append(blk[0][0].n_heads)
    return float(np.average(errs, weights=weights))
