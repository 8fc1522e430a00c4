"""Replications of a serving run: the same system on ``N`` independently seeded request traces.

One serving run is one sample of a stochastic process (arrivals and lengths are drawn), so a tail
percentile from one trace carries sampling error. ``serving.replications: N`` serves ``N`` traces
with seeds ``trace.seed + r`` (r = 0 .. N-1; r = 0 is the unreplicated run) and combines them:

- every numeric metric becomes the mean over replications;
- the metrics in :data:`CI_METRICS` also get ``<metric>_ci_low`` / ``<metric>_ci_high``: a bootstrap
  confidence interval of that mean over the replications (``scipy.stats.bootstrap``, BCa, 9,999
  resamples, ``serving.confidence`` level, seeded by the experiment seed, so it is reproducible).
  Requests within one trace are correlated through the queue, so replications, not requests, are the
  independent samples that are resampled;
- ``serving`` facts and breakdowns are those of replication 0, plus ``replications`` and ``seeds``;
- the per-request table holds every replication's requests with a ``replication`` column.
"""

from __future__ import annotations

import warnings

import numpy as np

CI_METRICS = tuple(f"{m}_{s}" for m in ("ttft", "tpot", "latency", "queue") for s in ("mean", "p50", "p90", "p99")) + (
    "throughput_rps",
    "output_tokens_per_s",
    "slo_attainment",
    "goodput_rps",
    "energy_per_request_j",
    "energy_per_output_token_j",
)
N_RESAMPLES = 9999


def replication_seeds(base_seed: int, replications: int) -> list[int]:
    return [int(base_seed) + r for r in range(int(replications))]


def mean_ci(values: np.ndarray, confidence: float, seed: int) -> tuple[float, float]:
    """Bootstrap (BCa) confidence interval of the mean of ``values`` (>= 2 samples).

    Identical samples have a degenerate bootstrap distribution: the interval is the value itself."""
    v = np.asarray(values, dtype=float)
    if np.ptp(v) == 0.0:
        return float(v[0]), float(v[0])
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on near-degenerate samples; it then falls back per scipy
        res = bootstrap(
            (v,),
            np.mean,
            confidence_level=confidence,
            n_resamples=N_RESAMPLES,
            method="BCa",
            random_state=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # BCa undefined (e.g. 2 samples): percentile interval
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap(
                (v,),
                np.mean,
                confidence_level=confidence,
                n_resamples=N_RESAMPLES,
                method="percentile",
                random_state=np.random.default_rng(seed),
            )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return lo, hi


def combine(docs: list[dict], seeds: list[int], confidence: float, seed: int) -> dict:
    """One run document from the replications' documents (see the module docstring)."""
    if len(docs) == 1:
        return docs[0]
    ok = [d for d in docs if d.get("status") == "ok"]
    if len(ok) != len(docs):  # one replication could not be served: the point is reported as that failure
        bad = next(d for d in docs if d.get("status") != "ok")
        out = dict(bad)
        out["error"] = (
            f"replication {docs.index(bad)} (seed {seeds[docs.index(bad)]}): {bad.get('error', bad['status'])}"
        )
        return out
    out = dict(docs[0])
    metrics = {}
    for k, v0 in docs[0]["metrics"].items():
        if isinstance(v0, bool) or not isinstance(v0, (int, float)):
            metrics[k] = v0
            continue
        if any(d["metrics"].get(k) is None for d in docs):  # undefined in a replication: undefined
            metrics[k] = None
            continue
        vals = np.array([float(d["metrics"][k]) for d in docs])
        metrics[k] = float(vals.mean())
        if k in CI_METRICS:
            metrics[f"{k}_ci_low"], metrics[f"{k}_ci_high"] = mean_ci(vals, confidence, seed)
    out["metrics"] = metrics
    out["serving"] = {
        **docs[0].get("serving", {}),
        "replications": len(docs),
        "seeds": list(seeds),
        "confidence": confidence,
    }
    if all("_requests" in d for d in docs):
        cols = docs[0]["_requests"]
        out["_requests"] = {c: np.concatenate([np.asarray(d["_requests"][c]) for d in docs]) for c in cols}
        out["_requests"]["replication"] = np.concatenate(
            [np.full(len(np.asarray(d["_requests"][next(iter(cols))])), r, np.int64) for r, d in enumerate(docs)]
        )
    return out
