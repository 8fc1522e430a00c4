"""Serving metrics: per-request latencies and run aggregates.

Per request (seconds from its arrival): TTFT = first token - arrival; end-to-end latency =
last token - arrival; TPOT = (last token - first token) / (output_tokens - 1) (NaN in the
per-request table for one-token outputs; an aggregate with no defined value is None, so run
documents hold only finite numbers); queueing delay = first admission - arrival. Energy per
request = the share of every iteration's energy (dynamic + static during the iteration) in
proportion to the tokens it processed in that iteration (+ its KV transfers/swaps).

Run aggregates: mean and p50/p90/p99 of TTFT, TPOT, latency; makespan = last finish - first
arrival; throughput = requests (and output tokens) / makespan; SLO attainment = fraction of
requests with TTFT <= slo.ttft_s and TPOT <= slo.tpot_s (one-token outputs: TTFT only); goodput =
SLO-meeting requests / makespan (DistServe's definition, Zhong et al., OSDI 2024); energy =
every pool's busy + idle energy + links, per request and per output token; mean number in system
= the scheduler's time integral of requests present / horizon (Little's law: = arrival rate x
mean latency).
"""

from __future__ import annotations

import numpy as np

PERCENTILES = (50, 90, 99)


def request_table(arrival, prompt, output, first_token, finish, admit, energy, preemptions, prefix_hit) -> dict:
    out = np.asarray(output)
    ttft = first_token - arrival
    e2e = finish - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first_token) / np.maximum(out - 1, 1), np.nan)
    return {
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": out,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "latency_s": e2e,
        "queue_s": admit - arrival,
        "energy_j": energy,
        "preemptions": preemptions,
        "prefix_hit_tokens": prefix_hit,
    }


def _stats(name: str, x: np.ndarray, out: dict) -> None:
    x = x[np.isfinite(x)]
    if not len(x):
        for p in PERCENTILES:
            out[f"{name}_p{p}"] = None
        out[f"{name}_mean"] = None
        return
    out[f"{name}_mean"] = float(x.mean())
    for p, v in zip(PERCENTILES, np.percentile(x, PERCENTILES)):
        out[f"{name}_p{p}"] = float(v)


def summarize(req: dict, slo, total_energy_j: float, in_system_area: float | None = None) -> dict:
    """Aggregate metrics of one serving run (see the module docstring)."""
    arr, fin = req["arrival_s"], req["latency_s"] + req["arrival_s"]
    n = len(arr)
    m: dict = {"requests": n}
    for k in ("ttft_s", "tpot_s", "latency_s", "queue_s"):
        _stats(k[:-2], np.asarray(req[k], dtype=float), m)
    start, end = float(arr.min()), float(fin.max())
    makespan = end - start
    out_tok = int(np.sum(req["output_tokens"]))
    m["makespan_s"] = makespan
    m["throughput_rps"] = n / makespan if makespan > 0 else None
    m["output_tokens_per_s"] = out_tok / makespan if makespan > 0 else None
    m["total_tokens_per_s"] = (out_tok + int(np.sum(req["prompt_tokens"]))) / makespan if makespan > 0 else None
    ok_ttft = req["ttft_s"] <= slo.ttft_s
    ok_tpot = np.where(np.isnan(req["tpot_s"]), True, req["tpot_s"] <= slo.tpot_s)
    ok = ok_ttft & ok_tpot
    m["slo_ttft_s"] = slo.ttft_s
    m["slo_tpot_s"] = slo.tpot_s
    m["slo_attainment"] = float(ok.mean())
    m["ttft_attainment"] = float(ok_ttft.mean())
    m["tpot_attainment"] = float(ok_tpot.mean())
    m["goodput_rps"] = float(ok.sum() / makespan) if makespan > 0 else None
    m["energy_j"] = total_energy_j
    m["energy_per_request_j"] = total_energy_j / n
    m["attributed_energy_per_request_j"] = float(np.mean(req["energy_j"]))
    m["energy_per_output_token_j"] = total_energy_j / out_tok
    m["preemptions"] = int(np.sum(req["preemptions"]))
    horizon = end - min(start, 0.0)
    lat = req["latency_s"]
    m["mean_in_system"] = (in_system_area if in_system_area is not None else float(np.sum(lat))) / horizon
    # the keys `attnsim run` reports, so `attnsim show` reads serve results too (means over requests)
    m["ttft_s"], m["tpot_s"] = m["ttft_mean"], m["tpot_mean"]
    m["tokens_per_s"] = m["output_tokens_per_s"]
    m["energy_per_token_j"] = m["energy_per_output_token_j"]
    m["arrival_rate_per_s"] = (n - 1) / (float(arr.max()) - start) if n > 1 and arr.max() > start else None
    m["littles_law_rhs"] = (
        m["arrival_rate_per_s"] * float(np.mean(lat)) if m["arrival_rate_per_s"] is not None else None
    )
    return m


def metric_keys() -> tuple[str, ...]:
    """The keys :func:`summarize` returns (a run that produced no metrics has them all, null)."""
    from types import SimpleNamespace

    one, zero = np.ones(1), np.zeros(1)
    req = {
        "arrival_s": zero,
        "latency_s": one,
        "ttft_s": one,
        "tpot_s": one,
        "queue_s": zero,
        "output_tokens": one,
        "prompt_tokens": one,
        "energy_j": one,
        "preemptions": zero,
    }
    return tuple(summarize(req, SimpleNamespace(ttft_s=1.0, tpot_s=1.0), 1.0))


def mean_in_system_from_times(arrival, finish, horizon_end: float) -> float:
    """Time average of the number of requests between arrival and finish over [0, horizon_end]."""
    return float(np.sum(np.minimum(finish, horizon_end) - np.minimum(arrival, horizon_end))) / horizon_end
