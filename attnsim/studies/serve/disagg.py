"""Prefill/decode disaggregation: a prefill pool and a decode pool joined by a KV link.

Flow (DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA 2024): requests are
prefilled on the prefill pool (continuous batching, prefill-only iterations); the pool emits the
first token (TTFT) and the prompt KV then crosses the link; the request joins the decode pool's
queue when its KV has arrived. The link is one FIFO resource; the KV of one request is split over
``parallel_links`` links (default: the prefill pool's tp: each rank sends its own shard).

Transfer time of a request: t_x = link latency + (KV bytes / parallel_links) / link bandwidth;
energy = KV bytes x 8 x pJ/bit. With ``layerwise_overlap`` the KV of layer l is sent as soon as
layer l of the request's last prefill iteration (time T, L layers, p = T / L per layer) is done:
the transfer ends at max(start + t_x, T_end + t_x / L) with start = max(T_start + p, link free);
otherwise it starts after the prefill and the link are free. The prefill pool's KV is released
when its prefill finishes (assumed staged out; decode-pool back-pressure on the prefill pool is
not modelled).
"""

from __future__ import annotations

import numpy as np

from attnsim.studies.serve.scheduler import simulate_pool
from attnsim.workloads.trace import kv_cache_bytes


def transfer_schedule(
    ready_end_s, last_iter_s, kv_bytes, link, parallel_links: int, num_layers: int, overlap: bool
) -> tuple[np.ndarray, np.ndarray]:
    """KV arrival time and link energy per request (requests served FIFO in order of ``ready_end_s``)."""
    n = len(ready_end_s)
    arrive = np.full(n, np.nan)
    energy = np.zeros(n)
    order = np.argsort(ready_end_s, kind="stable")
    free = -np.inf
    for i in order:
        if not np.isfinite(ready_end_s[i]):
            continue
        tx = float(link.transfer_time_s(kv_bytes[i] / parallel_links))
        end_pre = ready_end_s[i]
        if overlap:
            per_layer = last_iter_s[i] / num_layers
            start = max(end_pre - last_iter_s[i] + per_layer, free)
            done = max(start + tx, end_pre + tx / num_layers)
        else:
            start = max(end_pre, free)
            done = start + tx
        free = done
        arrive[i] = done
        energy[i] = float(link.transfer_energy_j(kv_bytes[i]))
    return arrive, energy


def simulate_disagg(pre_pool, dec_pool, trace, link, spec, labels=None) -> dict:
    """Serve ``trace`` on a prefill pool + decode pool; returns per-request arrays and totals."""
    model, sc = pre_pool.model, pre_pool.sc
    rp = simulate_pool(
        pre_pool,
        trace.arrival_s,
        trace.prompt_tokens,
        trace.output_tokens,
        trace.prefix_id,
        trace.prefix_tokens,
        mode="prefill",
        labels=labels,
    )
    kept = pre_pool.kvpol.retained_tokens(trace.prompt_tokens, trace.prompt_tokens)
    kv_bytes = np.array([kv_cache_bytes(model, sc, [int(k)]) for k in kept])
    to_decode = trace.output_tokens > 1
    # default: every TP rank of every pipeline device group sends the KV of its own layers
    plinks = spec.parallel_links or pre_pool.tp * pre_pool.system.spec.parallelism.device_groups
    ready = np.where(to_decode, rp.prefill_done_s, np.nan)
    arrive, link_e = transfer_schedule(
        ready, rp.last_prefill_iter_s, kv_bytes, link, plinks, model.num_layers, spec.layerwise_overlap
    )
    idx = np.nonzero(to_decode)[0]
    order = idx[np.argsort(arrive[idx], kind="stable")]
    finish = rp.finish_s.copy()
    energy = rp.energy_j + link_e
    preempt = rp.preemptions.copy()
    rd = None
    if len(order):
        rd = simulate_pool(
            dec_pool,
            arrive[order],
            trace.prompt_tokens[order],
            trace.output_tokens[order],
            mode="decode",
            labels=None if labels is None else np.asarray(labels)[order],
        )
        finish[order] = rd.finish_s
        energy[order] += rd.energy_j
        preempt[order] += rd.preemptions
    total = rp.busy_energy_j + rp.idle_energy_j + rp.swap_energy_j + float(link_e.sum())
    if rd is not None:
        # the decode pool idles from t = 0 until its first request, too
        total += rd.busy_energy_j + rd.idle_energy_j + rd.swap_energy_j
    return {
        "first_token_s": rp.first_token_s,
        "finish_s": finish,
        "admit_s": rp.admit_s,
        "energy_j": energy,
        "preemptions": preempt,
        "prefix_hit_tokens": rp.prefix_hit_tokens,
        "total_energy_j": total,
        "kv_arrival_s": arrive,
        "link_energy_j": float(link_e.sum()),
        "kv_transfer_s_mean": float(np.nanmean(arrive[idx] - rp.prefill_done_s[idx])) if len(idx) else 0.0,
        "prefill": rp,
        "decode": rd,
    }
