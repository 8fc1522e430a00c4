"""Sensitivity of an experiment's headline metrics and ``vs_baseline`` ratios to unpublished parameters.

The parameters are the ``ranges:`` entries of the hardware configs an experiment loads
(:func:`attnsim.hwmodels.registry.split_ranges`: per dotted field ``low``, ``high`` and ``source``).
Each evaluation is the experiment with ``--set hardware.<name>.<key>=<value>`` overrides (the same
path as ``attnsim run --set``), simulated by :func:`attnsim.sim.runner.run_experiment`.

Methods: ``oat`` (default): one parameter at a time at its low and high end, the others at their
values (a tornado); ``morris`` (elementary effects) and ``sobol`` (Saltelli sampling, first-order
and total indices) sample all selected parameters jointly through SALib (``pip install
attnsim[sensitivity]``). For every ``vs_baseline`` ratio the result says which parameters could move
it across 1.0 (the verdict flips): an OAT end or a sampled point on the other side of 1 from the
base value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from attnsim.core.config import ConfigError

METHODS = ("oat", "morris", "sobol")
HEADLINE = ("tokens_per_s", "tpot_s", "ttft_s", "energy_per_token_j")
RATIO_PREFIX = "vs_baseline."
DEFAULT_SAMPLES = {"morris": 4, "sobol": 8}  # Morris trajectories; Sobol base samples (a power of 2)
MAX_EVALUATIONS = 4096


@dataclass(frozen=True)
class Param:
    """One ranged parameter: ``name`` = ``<hardware>.<dotted key>`` (what ``--params`` takes)."""

    hardware: str
    key: str
    low: float
    base: float
    high: float
    source: str
    file: str
    integer: bool

    @property
    def name(self) -> str:
        return f"{self.hardware}.{self.key}"

    def value(self, v: float):
        return int(round(v)) if self.integer else float(v)

    def override(self, v: float) -> str:
        return f"hardware.{self.hardware}.{self.key}={self.value(v)!r}"

    def doc(self) -> dict:
        return {
            "name": self.name,
            "file": self.file,
            "low": self.value(self.low),
            "base": self.base,
            "high": self.value(self.high),
            "source": self.source,
        }


def parameters(exp) -> list[Param]:
    """Every ranged parameter of the hardware a validated Experiment loads (file order)."""
    return [p for hname in exp.tree.hardware for p in hardware_params(exp.tree, hname)]


def hardware_params(tree, hname: str) -> list[Param]:
    """The ranged parameters of hardware ``hname`` of a config tree (file order), their values as the tree
    holds them (``--set`` overrides applied)."""
    from attnsim.hwmodels import registry

    hw, f = tree.hardware[hname], tree.file_of("hardware", hname)
    rest, ranges = registry.split_ranges(hw, f)
    if not ranges:
        return []
    spec = registry.validate_hardware(hw, f)
    kinds = registry.number_fields(type(spec))
    out = []
    for key, r in ranges.items():
        value = registry.spec_value(spec, key)
        if value is None:
            raise ConfigError("expected a value for a ranged field, got None", file=f, key=key)
        out.append(Param(hname, key, r.low, value, r.high, r.source, f, kinds[key] == "int"))
    return out


def select(params: list[Param], names: Optional[list[str]]) -> list[Param]:
    """The parameters named (``<hardware>.<key>`` or ``hardware.<hardware>.<key>``), all when None."""
    if not params:
        raise ConfigError(
            "expected hardware with a ranges: block (none of this experiment's hardware configs has one)",
            file="--params",
        )
    if not names:
        return params
    by = {p.name: p for p in params}
    out = []
    for n in names:
        key = n[len("hardware.") :] if n.startswith("hardware.") and n not in by else n
        if key not in by:
            raise ConfigError(f"unknown parameter {n!r} (known: {', '.join(by)})", file="--params")
        if by[key] not in out:
            out.append(by[key])
    return out


# ---------------------------------------------------------------- evaluation


def outputs(docs: list[dict]) -> dict[str, Optional[float]]:
    """``<system>/<model>/<scenario>:<metric>`` -> value (None for a run that did not complete) for the
    headline metrics and every numeric ``vs_baseline`` ratio."""
    out = {}
    for d in docs:
        run = f"{d['system']}/{d['model']}/{d['scenario']['name']}"
        m = d.get("metrics") or {}
        for k in HEADLINE:
            v = m.get(k) if d.get("status") == "ok" else None
            out[f"{run}:{k}"] = float(v) if v is not None else None
        for k, v in (d.get("vs_baseline") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{run}:{RATIO_PREFIX}{k}"] = float(v)
    return out


class Evaluator:
    """Runs the experiment (its tree loaded once) with ``--set`` overrides of ranged parameters."""

    def __init__(self, tree, source, sets: list[str]):
        self.tree, self.source, self.sets = tree, source, list(sets)
        self.evaluations = 0

    def __call__(self, values: dict[Param, float]) -> dict[str, Optional[float]]:
        from attnsim.sim.experiment import validate_tree
        from attnsim.sim.runner import run_experiment

        t = self.tree.copy()
        t.apply_sets(self.sets + [p.override(v) for p, v in values.items()])
        self.evaluations += 1
        return outputs(run_experiment(validate_tree(t, self.source)))


def load(experiment, sets: list[str]):
    """(validated Experiment, Evaluator) of an experiment path/name with ``--set`` overrides."""
    from attnsim.sim.experiment import load_tree, validate_tree

    tree, src = load_tree(experiment, sets)
    rest = [s for s in sets or () if s.split("=", 1)[0].split(".")[0] != "experiment"]
    base_tree = tree.copy()
    tree.apply_sets(rest)
    exp = validate_tree(tree, src)
    if exp.spec.serving is not None:  # run_experiment simulates static batches: the section would be ignored
        raise ConfigError(
            "expected no serving section for attnsim sensitivity (it runs static batches like attnsim "
            "run): --set experiment.serving=null, got a serving section",
            file=tree.file_of("experiment"),
            key="serving",
        )
    return exp, Evaluator(base_tree, src, rest)


def _side(v: Optional[float]) -> int:
    return 0 if v is None else (1 if v > 1.0 else -1 if v < 1.0 else 0)


def flips(base: Optional[float], values) -> list[float]:
    """The values on the other side of 1.0 from ``base`` (a ratio's verdict reversed)."""
    s = _side(base)
    return [v for v in values if v is not None and s != 0 and _side(v) == -s]


def oat(params: list[Param], evaluate: Callable, progress=None) -> dict:
    """Baseline + each parameter at its low and high end (the others at their values)."""
    base = evaluate({})
    rows = []
    for p in params:
        lo, hi = evaluate({p: p.low}), evaluate({p: p.high})
        if progress:
            progress(p)
        for out, b in base.items():
            vl, vh = lo.get(out), hi.get(out)
            swing = vh - vl if vl is not None and vh is not None else None
            rows.append(
                {
                    "parameter": p.name,
                    "output": out,
                    "low": vl,
                    "base": b,
                    "high": vh,
                    "swing": swing,
                    "relative_swing": swing / abs(b) if swing is not None and b else None,
                }
            )
    return {"base": base, "rows": rows}


def sampled(method: str, params: list[Param], evaluate: Callable, samples: int, seed: int, progress=None) -> dict:
    """Morris (``samples`` trajectories) or Sobol (``samples`` base points) over all ``params``."""
    try:
        import numpy as np
        from SALib.analyze import morris as morris_analyze
        from SALib.analyze import sobol as sobol_analyze
        from SALib.sample import morris as morris_sample
        from SALib.sample import sobol as sobol_sample
    except ImportError:
        raise ConfigError("SALib is not installed (pip install 'attnsim[sensitivity]')", file="--method") from None
    problem = {"num_vars": len(params), "names": [p.name for p in params], "bounds": [[p.low, p.high] for p in params]}
    if any(p.low == p.high for p in params):
        bad = next(p.name for p in params if p.low == p.high)
        raise ConfigError(f"expected low < high for {method} sampling, got an empty range for {bad}", file="--params")
    n = samples * (len(params) + 1) if method == "morris" else samples * (len(params) + 2)
    if n > MAX_EVALUATIONS:
        raise ConfigError(
            f"expected at most {MAX_EVALUATIONS} evaluations, got {n} ({samples} samples x {len(params)} parameters)",
            file="--samples",
        )
    if method == "morris":
        X = morris_sample.sample(problem, samples, num_levels=4, seed=seed)
    else:
        if samples & (samples - 1):
            raise ConfigError(f"expected a power of 2 for sobol, got {samples}", file="--samples")
        X = sobol_sample.sample(problem, samples, calc_second_order=False, seed=seed)
    base = evaluate({})
    Y = []
    for i, x in enumerate(X):
        Y.append(evaluate({p: v for p, v in zip(params, x)}))
        if progress:
            progress(i)
    rows, notes = [], []
    for out, b in base.items():
        y = [r.get(out) for r in Y]
        if any(v is None for v in y):
            notes.append(f"{out}: not analysed ({sum(v is None for v in y)} of {len(y)} samples did not complete)")
            continue
        y = np.asarray(y, dtype=float)
        if np.ptp(y) == 0:  # a constant output: no parameter moves it (the estimators would divide by 0)
            keys = (
                ("mu_star", "sigma", "mu", "mu_star_conf") if method == "morris" else ("S1", "ST", "S1_conf", "ST_conf")
            )
            idx = {k: np.zeros(len(params)) for k in keys}
        elif method == "morris":
            res = morris_analyze.analyze(problem, X, y, num_levels=4, seed=seed)
            idx = {
                "mu_star": res["mu_star"],
                "sigma": res["sigma"],
                "mu": res["mu"],
                "mu_star_conf": res["mu_star_conf"],
            }
        else:
            res = sobol_analyze.analyze(problem, y, calc_second_order=False, seed=seed)
            idx = {
                "S1": res["S1"],
                "ST": res["ST"],
                "S1_conf": res["S1_conf"],
                "ST_conf": res["ST_conf"],
            }  # small N: noisy
        lo, hi = float(y.min()), float(y.max())
        for j, p in enumerate(params):
            row = {"parameter": p.name, "output": out, "base": b, "sample_min": lo, "sample_max": hi}
            row.update({k: _finite(v[j]) for k, v in idx.items()})
            rows.append(row)
        if out.split(":", 1)[1].startswith(RATIO_PREFIX):
            f = flips(b, y.tolist())
            if f:
                notes.append(
                    f"{out}: {len(f)} of {len(y)} samples on the other side of 1.0 from {b:.4g} "
                    f"(range {lo:.4g} - {hi:.4g})"
                )
    return {"base": base, "rows": rows, "evaluations": len(X) + 1, "notes": notes}


def _finite(v) -> Optional[float]:
    v = float(v)
    return v if math.isfinite(v) else None


def run(
    experiment,
    sets: list[str],
    names: Optional[list[str]] = None,
    method: str = "oat",
    samples: Optional[int] = None,
    progress=None,
) -> dict:
    """The sensitivity document of an experiment (see the module docstring)."""
    if method not in METHODS:
        raise ConfigError(f"expected one of {', '.join(METHODS)}, got {method!r}", file="--method")
    if method == "oat" and samples is not None:
        raise ConfigError("not used with --method oat (low and high per parameter); drop it", file="--samples")
    exp, evaluate = load(experiment, sets)
    params = select(parameters(exp), names)
    doc = {
        "experiment": exp.spec.name,
        "method": method,
        "baseline_system": exp.spec.baseline,
        "parameters": [p.doc() for p in params],
    }
    if method == "oat":
        doc.update(oat(params, evaluate, progress))
    else:
        doc["samples"] = samples or DEFAULT_SAMPLES[method]
        doc.update(sampled(method, params, evaluate, doc["samples"], exp.spec.seed, progress))
    doc["evaluations"] = evaluate.evaluations
    doc["flips"] = flip_lines(doc)
    return doc


def flip_lines(doc: dict) -> list[str]:
    """The "could flip a ratio across 1.0" summary: one line per (parameter, ratio) for OAT; the
    sampled methods' notes name the ratios whose samples cross 1.0."""
    if doc["method"] != "oat":
        return [n for n in doc.get("notes", ()) if "other side of 1.0" in n]
    out = []
    for r in doc["rows"]:
        if r["output"].split(":", 1)[1].startswith(RATIO_PREFIX) and flips(r["base"], [r["low"], r["high"]]):
            p = next(q for q in doc["parameters"] if q["name"] == r["parameter"])
            out.append(
                f"{r['parameter']} could flip {r['output']} across 1.0: {r['low']:.4g} at {p['low']:g}, "
                f"{r['base']:.4g} at {p['base']:g}, {r['high']:.4g} at {p['high']:g}"
            )
    return out


def table(doc: dict) -> str:
    """The result as text: per output, the parameters by descending effect."""
    from attnsim.core.report import fmt_num as g
    from attnsim.core.report import table as fmt

    if doc["method"] == "oat":
        rows = sorted(doc["rows"], key=lambda r: (r["output"], -abs(r["relative_swing"] or 0.0)))
        body = [
            [
                r["output"],
                r["parameter"],
                g(r["low"]),
                g(r["base"]),
                g(r["high"]),
                g(r["swing"]),
                "-" if r["relative_swing"] is None else f"{100 * r['relative_swing']:+.1f}%",
            ]
            for r in rows
        ]
        text = fmt(body, ["output", "parameter", "at low", "base", "at high", "swing", "swing/base"], numeric=2)
    else:
        keys = ["mu_star", "sigma"] if doc["method"] == "morris" else ["S1", "ST"]
        rows = sorted(doc["rows"], key=lambda r: (r["output"], -abs(r[keys[0]] or 0.0)))
        body = [
            [r["output"], r["parameter"], g(r["base"])]
            + [g(r[k]) for k in keys]
            + [g(r["sample_min"]), g(r["sample_max"])]
            for r in rows
        ]
        text = fmt(body, ["output", "parameter", "base"] + keys + ["sample min", "sample max"], numeric=2)
    lines = [text, ""]
    lines += doc["flips"] or [
        "no parameter moves a vs_baseline ratio across 1.0 over its range"
        if any(RATIO_PREFIX in o for o in doc["base"])
        else "no vs_baseline ratios (no baseline)"
    ]
    lines += [n for n in doc.get("notes", ()) if n not in doc["flips"]]
    return "\n".join(lines)


def figure_metric(doc: dict) -> str:
    """The output the tornado draws by default: the first energy-efficiency ratio, else the first
    run's energy per token."""
    outs = list(doc["base"])
    return next(
        (o for o in outs if o.endswith(RATIO_PREFIX + "energy_efficiency_ratio")),
        next(o for o in outs if o.endswith(":energy_per_token_j")),
    )
