"""Continuous batching: the must-hold checks (serve == run for one request, Little's law,
capacity never exceeded, unservable traces explained, determinism) and hand-derived cases."""

import numpy as np
import pytest

from attnsim.sim.experiment import GenerationSpec
from attnsim.sim.runner import simulate_generation
from attnsim.studies.serve.metrics import request_table, summarize
from attnsim.studies.serve.run import quick_pool
from attnsim.studies.serve.scheduler import ServeError, simulate_pool

EXACT = {"memo": {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}}


def _serve(pool, arrival, prompt, output, **kw):
    return simulate_pool(pool, np.asarray(arrival, float), np.asarray(prompt), np.asarray(output), **kw)


@pytest.mark.parametrize(
    "system,model,memo,rel",
    [
        ("h100_x1", "llama3-8b", EXACT["memo"], 1e-12),
        ("h100_x1", "llama3-8b", {}, 1e-2),  # default grid: within one tile step (costing.py)
        ("attacc", "gpt3-175b", EXACT["memo"], 1e-12),  # GPU + HBM-PIM (attacc policy, DRAM engine)
    ],
)
def test_one_request_serve_equals_run(system, model, memo, rel):
    P, O = 700, 40
    pool, _, sv = quick_pool(
        system=system,
        model=model,
        scenario={"prompt_len": P, "output_len": O, "batch_size": 1},
        serving={"memo": memo, "scheduler": {"max_tokens_per_iter": 4096}},
    )
    r = _serve(pool, [0.0], [P], [O])
    ref = simulate_generation(pool.system, pool.model, pool.sc, GenerationSpec(mode="exact"))["metrics"]
    ttft = r.first_token_s[0]
    tpot = (r.finish_s[0] - r.first_token_s[0]) / (O - 1)
    assert ttft == pytest.approx(ref["ttft_s"], rel=rel)
    assert tpot == pytest.approx(ref["tpot_s"], rel=rel)
    assert r.iterations == O  # one prefill + O - 1 decode steps


def test_two_identical_requests_share_iterations():
    """Two equal requests arriving together: one prefill iteration of both, then shared decodes;
    both finish at the same time, equal to prefill(batch 2) + sum of decode(batch 2) steps."""
    pool, _, _ = quick_pool(serving=EXACT)
    P, O = 300, 5
    r = _serve(pool, [0, 0], [P, P], [O, O])
    c = pool.coster
    t = c.exact([P, P], [P, P]).time_s
    assert r.first_token_s[0] == pytest.approx(t, rel=1e-12)
    for j in range(1, O):
        t += c.exact([P + j, P + j], [1, 1]).time_s
    assert np.allclose(r.finish_s, t, rtol=1e-12)


def test_chunked_prefill_splits_long_prompt():
    pool, _, _ = quick_pool(serving={**EXACT, "scheduler": {"max_tokens_per_iter": 512, "chunked_prefill": True}})
    r = _serve(pool, [0], [1300], [2])
    c = pool.coster
    t = sum(c.exact([d + q], [q]).time_s for d, q in ((0, 512), (512, 512), (1024, 276)))
    assert r.first_token_s[0] == pytest.approx(t, rel=1e-12)
    assert r.iterations == 4


def _load_run(rate, n=1500, seed=0, **serving):
    from attnsim.studies.serve.requests import TraceSpec, synthetic_trace

    pool, _, sv = quick_pool(serving=serving)
    tr = synthetic_trace(
        TraceSpec(
            num_requests=n,
            rate_per_s=rate,
            seed=seed,
            prompt={"dist": "lognormal", "mean": 600, "std": 300, "high": 3000},
            output={"dist": "lognormal", "mean": 120, "std": 80, "high": 600},
        ),
        1,
        1,
    )
    r = simulate_pool(pool, tr.arrival_s, tr.prompt_tokens, tr.output_tokens)
    req = request_table(
        tr.arrival_s,
        tr.prompt_tokens,
        tr.output_tokens,
        r.first_token_s,
        r.finish_s,
        r.admit_s,
        r.energy_j,
        r.preemptions,
        r.prefix_hit_tokens,
    )
    return pool, tr, r, req, sv


def test_littles_law():
    """Time-average number in system (sampled by the scheduler at every iteration) equals the
    configured arrival rate x mean latency within sampling error (rate estimate ~1/sqrt(n))."""
    rate = 8.0
    pool, tr, r, req, sv = _load_run(rate)
    L = r.in_system_area / r.end_s
    W = float(np.mean(req["latency_s"]))
    assert L == pytest.approx(rate * W, rel=0.08)
    # and exactly (up to arrivals counted from the next iteration) the timestamp integral
    assert r.in_system_area == pytest.approx(float(np.sum(req["latency_s"])), rel=0.01)
    assert W > 0.5  # the queue is not trivial: requests overlap


def test_capacity_never_exceeded_and_preemption():
    """A tiny KV budget forces preemptions; the allocator never exceeds capacity and every
    request still emits exactly its output tokens."""
    for mode in ("recompute", "swap"):
        pool, tr, r, req, sv = _load_run(20.0, n=300, scheduler={"memory_fraction": 0.215, "preemption": mode})
        assert pool.total_blocks < 1500
        assert r.stats["peak_kv_blocks"] <= r.stats["kv_blocks"]
        assert r.stats["preemptions"] > 0
        assert np.all(np.isfinite(r.finish_s)) and np.all(r.finish_s >= r.first_token_s)
        if mode == "swap":
            assert r.stats["swaps"] > 0 and r.swap_energy_j > 0


def test_bucketed_run_matches_exact_run():
    _, _, _, a, _ = _load_run(8.0, n=300)
    _, _, _, b, _ = _load_run(8.0, n=300, memo=EXACT["memo"])
    for k in ("ttft_s", "tpot_s", "latency_s"):
        assert np.nanmean(a[k]) == pytest.approx(np.nanmean(b[k]), rel=1e-2)  # measured: 0.5 % TTFT, 0.1 % TPOT


def test_unservable_trace_says_why():
    pool, _, _ = quick_pool(serving={"scheduler": {"memory_fraction": 0.215}})
    cap_tokens = pool.total_blocks * pool.block_tokens
    with pytest.raises(ServeError) as e:
        _serve(pool, [0, 1], [100, cap_tokens], [10, 10], labels=np.array([0, 1]))
    msg = str(e.value)
    assert "request 1" in msg and f"holds only {pool.total_blocks} blocks" in msg and "cannot be served" in msg
    pool2, _, _ = quick_pool(serving={"scheduler": {"chunked_prefill": False, "max_tokens_per_iter": 256}})
    with pytest.raises(ServeError, match="exceeds max_tokens_per_iter 256 without chunked prefill"):
        _serve(pool2, [0], [300], [3])


def test_same_seed_same_results():
    _, _, a, ra, sv = _load_run(8.0, n=200, seed=3)
    _, _, b, rb, _ = _load_run(8.0, n=200, seed=3)
    for k in ra:
        assert np.array_equal(ra[k], rb[k], equal_nan=True)
    m1 = summarize(ra, sv.slo, a.busy_energy_j + a.idle_energy_j)
    m2 = summarize(rb, sv.slo, b.busy_energy_j + b.idle_energy_j)
    assert m1 == m2


def test_energy_conservation():
    """Requests' attributed energy = every iteration's energy; the pool adds idle static power."""
    pool, tr, r, req, sv = _load_run(2.0, n=100)
    assert float(np.sum(r.energy_j)) == pytest.approx(r.busy_energy_j + r.swap_energy_j, rel=1e-9)
    assert r.idle_s > 0
    assert r.idle_energy_j == pytest.approx(pool.system.static_power_w() * r.idle_s, rel=1e-12)
