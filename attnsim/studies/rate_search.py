"""The highest Poisson arrival rate a serving system sustains under tail-latency SLOs (``attnsim serve
--max-rate-under-slo``), the way MLPerf Inference's Server scenario scores a system: the largest query rate
whose p99 TTFT and p99 TPOT (MLPerf: p99 end-to-end latency for GPT-J) meet the benchmark's constraints.

A study on top of ``attnsim serve``: each probe serves the experiment's synthetic trace at one rate
(``experiment.serving.trace.rate_per_s``, as ``--slo-vs-load`` does) and passes when every limit holds for the
probe's value (the mean over ``serving.replications`` seeded traces). :func:`bisect_rate` first brackets the
threshold (doubling or halving from the start rate), then bisects until the bracket is narrower than
``rel_tol`` of its lower end: the lower end always passed, the upper end always failed.

Confidence (the seeds' confidence, serve/replicate.py): with ``serving.replications`` > 1 each probe's p99s
carry a bootstrap interval at ``serving.confidence``; a probe is *decided* when every limit's interval lies
on one side of it (all below for a pass, one above for a fail). The reported rate is the bracket's lower
end; ``decided`` says whether both ends were decided at that confidence (with one replication nothing is
decided: a single trace has no interval).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from attnsim.core.config import ConfigError

MAX_PROBES = 40  # doubling/halving plus bisection; a bracket of 2^12 needs ~12 + log2(1/rel_tol) probes
LIMIT_METRICS = ("ttft_p99", "tpot_p99", "latency_p99")  # run metrics a limit may bound (seconds)


@dataclass
class Probe:
    rate_per_s: float
    ok: bool
    values: dict  # metric -> value at this rate (means over replications)
    ci: dict = field(default_factory=dict)  # metric -> [low, high] (replications > 1)
    decided: bool = False  # every interval on the verdict's side of its limit
    status: str = "ok"  # a run that could not be served (does_not_fit, ...) fails


@dataclass
class RateSearch:
    system: str
    model: str
    scenario: str
    rate_per_s: float  # highest passing rate found (the bracket's lower end; 0: none passed)
    bracket_per_s: tuple  # (passing, failing) rates
    limits: dict  # metric -> limit (s)
    rel_tol: float
    probes: list  # Probe s in the order they ran
    replications: int = 1
    confidence: Optional[float] = None
    requests: int = 0

    @property
    def at_rate(self) -> Optional[Probe]:
        return next((p for p in self.probes if p.ok and p.rate_per_s == self.rate_per_s), None)

    @property
    def decided(self) -> bool:
        ends = [p for p in self.probes if p.rate_per_s in self.bracket_per_s]
        return bool(ends) and all(p.decided for p in ends)

    def as_dict(self) -> dict:
        at = self.at_rate
        return {
            "system": self.system,
            "model": self.model,
            "scenario": self.scenario,
            "rate_per_s": self.rate_per_s,
            "bracket_per_s": list(self.bracket_per_s),
            "rel_tol": self.rel_tol,
            "limits": self.limits,
            "replications": self.replications,
            "confidence": self.confidence,
            "requests": self.requests,
            "decided": self.decided,
            "at_rate": asdict(at) if at else None,
            "probes": [asdict(p) for p in self.probes],
        }


def bisect_rate(
    evaluate: Callable[[float], Probe], start: float, rel_tol: float = 0.02, max_probes: int = MAX_PROBES
) -> tuple[tuple[float, float], list]:
    """((passing rate, failing rate), probes): bracket the pass/fail threshold of ``evaluate`` from ``start``
    (x2 up while it passes, /2 down while it fails), then bisect until (hi - lo) <= rel_tol x lo. A passing
    rate of 0 means nothing passed down to ``start`` / 2^k within ``max_probes``; a failing rate of inf means
    everything passed (the bracket could not be closed)."""
    if not (start > 0 and math.isfinite(start)):
        raise ValueError(f"start rate must be positive and finite, got {start}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    probes: list = []

    def run(rate: float) -> bool:
        p = evaluate(rate)
        probes.append(p)
        return p.ok

    lo, hi = 0.0, math.inf
    rate = start
    if run(rate):
        lo = rate
        while len(probes) < max_probes and math.isinf(hi):
            rate *= 2.0
            if run(rate):
                lo = rate
            else:
                hi = rate
    else:
        hi = rate
        while len(probes) < max_probes and lo == 0.0:
            rate /= 2.0
            if run(rate):
                lo = rate
            else:
                hi = rate
    while len(probes) < max_probes and lo > 0 and math.isfinite(hi) and hi - lo > rel_tol * lo:
        mid = 0.5 * (lo + hi)
        if run(mid):
            lo = mid
        else:
            hi = mid
    return (lo, hi), probes


def probe_from_doc(doc: dict, rate: float, limits: dict) -> Probe:
    """A probe from one serve run document: passes when the run is ok and every limit holds for the metric's
    value; decided from the metrics' ``_ci_low`` / ``_ci_high`` (replications > 1)."""
    if doc.get("status") != "ok":
        return Probe(rate, False, {}, status=str(doc.get("status")))
    m = doc["metrics"]
    values = {k: float(m[k]) for k in limits}
    ok = all(values[k] <= lim for k, lim in limits.items())
    ci = {k: [float(m[f"{k}_ci_low"]), float(m[f"{k}_ci_high"])] for k in limits if f"{k}_ci_low" in m}
    decided = len(ci) == len(limits) and (
        all(ci[k][1] <= lim for k, lim in limits.items()) if ok else any(ci[k][0] > lim for k, lim in limits.items())
    )
    return Probe(rate, ok, values, ci, decided)


def check_limits(limits: dict) -> dict:
    for k, v in limits.items():
        if k not in LIMIT_METRICS:
            raise ConfigError(f"expected a limit on one of {', '.join(LIMIT_METRICS)}, got {k!r}", file="limits")
        if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise ConfigError(f"expected a positive number of seconds, got {v!r}", file="limits", key=k)
    return {k: float(v) for k, v in limits.items()}


def max_rate_under_slo(
    experiment,
    sets=None,
    start: Optional[float] = None,
    rel_tol: float = 0.02,
    limits: Optional[dict] = None,
    progress=None,
) -> list[RateSearch]:
    """One :class:`RateSearch` per (colocated system, model, scenario) of ``experiment`` (path or built-in
    name; ``sets``: --set overrides). ``limits`` default to the serving section's SLOs: p99 TTFT <=
    ``serving.slo.ttft_s`` and p99 TPOT <= ``serving.slo.tpot_s``. ``start``: the first rate probed (default
    the trace's rate_per_s, else 1 request/s)."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    sets = list(sets or ())
    exp, sv = load_serving_experiment(experiment, sets)
    flag = "--max-rate-under-slo"
    if sv.trace.file is not None:
        raise ConfigError(
            "expected a synthetic trace (a trace file fixes its own arrival times), got trace.file", file=flag
        )
    if sv.disaggregation:
        raise ConfigError(
            "searches colocated systems only; drop serving.disaggregation (--set experiment.serving.disaggregation=[])",
            file=flag,
        )
    if not sv.colocated:
        raise ConfigError("expected serving.colocated: true (the search serves each system on its own)", file=flag)
    lim = check_limits(limits if limits is not None else {"ttft_p99": sv.slo.ttft_s, "tpot_p99": sv.slo.tpot_s})
    first = start if start is not None else (sv.trace.rate_per_s or 1.0)
    if not (first > 0 and math.isfinite(first)):
        raise ConfigError(f"expected a positive finite start rate, got {first!r}", file=flag)
    out = []
    for sname in exp.systems:
        for mname in exp.models:
            for scname in exp.scenarios:
                narrow = sets + [
                    f"experiment.systems=[{sname}]",
                    f"experiment.models=[{mname}]",
                    "experiment.baseline=null",
                ]
                label = {}

                def evaluate(rate: float) -> Probe:
                    e, s = load_serving_experiment(experiment, narrow + [f"experiment.serving.trace.rate_per_s={rate}"])
                    e = _only_scenario(e, scname)
                    (doc,) = serve_experiment(e, s)
                    label.update(system=doc["system"])
                    p = probe_from_doc(doc, rate, lim)
                    if progress:
                        progress(sname, p)
                    return p

                bracket, probes = bisect_rate(evaluate, first, rel_tol)
                out.append(
                    RateSearch(
                        label.get("system", sname),
                        mname,
                        scname,
                        bracket[0],
                        bracket,
                        lim,
                        rel_tol,
                        probes,
                        sv.replications,
                        sv.confidence if sv.replications > 1 else None,
                        sv.trace.num_requests,
                    )
                )
    return out


def _only_scenario(exp, name: str):
    from dataclasses import replace

    return replace(exp, scenarios={name: exp.scenarios[name]})


def _ms(v: float) -> str:
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s"


def summary(searches: list) -> str:
    """Text lines: per search the rate, its bracket and the limited metrics at the rate."""
    from attnsim.core.report import fmt_num

    names = {"ttft_p99": "p99 TTFT", "tpot_p99": "p99 TPOT", "latency_p99": "p99 latency"}
    lines = []
    for s in searches:
        lim = ", ".join(f"{names[k]} <= {_ms(v)}" for k, v in s.limits.items())
        lo, hi = s.bracket_per_s
        conf = (
            (
                f"{100 * s.confidence:g}% intervals over {s.replications} seeds: "
                f"{'decided' if s.decided else 'not decided'}"
            )
            if s.confidence
            else "1 seed (no interval)"
        )
        lines.append(
            f"{s.system} / {s.model} / {s.scenario}: max rate {fmt_num(s.rate_per_s)} req/s under {lim} "
            f"(bracket {fmt_num(lo)}-{fmt_num(hi)} req/s, {len(s.probes)} probes of "
            f"{s.requests} requests; {conf})"
        )
        at = s.at_rate
        if at is not None:
            vals = ", ".join(
                f"{names[k]} {_ms(v)}" + (f" [{_ms(at.ci[k][0])}, {_ms(at.ci[k][1])}]" if k in at.ci else "")
                for k, v in at.values.items()
            )
            lines.append(f"  at {fmt_num(s.rate_per_s)} req/s: {vals}")
        elif s.rate_per_s == 0:
            lines.append("  no probed rate met the limits")
    return "\n".join(lines)
