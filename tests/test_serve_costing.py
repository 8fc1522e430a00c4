"""Iteration costing: the memo (bucketed, interpolated) against exact per-iteration costing."""

import numpy as np
import pytest

from attnsim.studies.serve.run import quick_pool


@pytest.fixture(scope="module")
def pools():
    exact, _, _ = quick_pool(serving={"memo": {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}})
    default, _, _ = quick_pool()
    return exact, default


def test_unequal_decode_contexts_equal_their_mean(pools):
    """Decode rows depend on contexts only through their sum (no sliding window in Llama-3-8B)."""
    p, _ = pools
    c = np.array([100, 900, 3000, 20])
    a = p.coster.exact(c, np.ones(4, np.int64))
    b = p.coster.exact(np.full(4, c.sum() // 4), np.ones(4, np.int64))
    assert c.sum() % 4 == 0
    assert a.time_s == pytest.approx(b.time_s, rel=1e-12) and a.energy_j == pytest.approx(b.energy_j, rel=1e-12)


def test_exact_buckets_reproduce_exact_costing(pools):
    p, _ = pools
    rng = np.random.default_rng(0)
    for _ in range(10):
        n = int(rng.integers(1, 40))
        c = np.full(n, int(rng.integers(1, 4000)))
        q, d = int(rng.integers(1, 900)), int(rng.integers(0, 2000))
        t, e = p.coster.cost(int(c.sum()), n, [q], [d])
        ref = p.coster.exact(np.r_[c, d + q], np.r_[np.ones(n, np.int64), q])
        assert t == pytest.approx(ref.time_s, rel=1e-12) and e == pytest.approx(ref.energy_j, rel=1e-12)


def test_bucketed_memo_error_is_small(pools):
    """Default grids (batch, 32-token context, 16-token chunk; geometric at 8 points per octave;
    all interpolated): decode batches are exact in the context (linear); otherwise the error comes
    from the GPU model's tile-quantisation steps inside one interval: small on average, bounded
    by one step."""
    _, p = pools
    rng = np.random.default_rng(1)
    errs = []
    for _ in range(25):
        n = int(rng.integers(1, 64))
        c = rng.integers(1, 6000, size=n)
        pre_q = [int(rng.integers(1, 2048))] if rng.random() < 0.5 else []
        pre_d = [int(rng.integers(0, 3000))] if pre_q else []
        t, e = p.coster.cost(int(c.sum()), n, pre_q, pre_d)
        ctx = np.r_[c, [q + d for q, d in zip(pre_q, pre_d)]]
        qq = np.r_[np.ones(n, np.int64), pre_q].astype(np.int64)
        ref = p.coster.exact(ctx, qq)
        errs.append(max(abs(t / ref.time_s - 1), abs(e / ref.energy_j - 1)))
        if not pre_q:  # exact in the context (linear); n > 8 interpolated on the batch grid
            assert errs[-1] < (1e-9 if n <= 8 else 1e-3)
    assert np.median(errs) < 2e-3 and max(errs) < 0.05


def test_memo_reuses_shapes(pools):
    _, p = pools
    before = len(p.coster.memo)
    for _ in range(5):
        p.coster.cost(32 * 1000, 32, [], [])
    assert len(p.coster.memo) - before <= 2  # mean 1000 is off the 32-token grid: two grid points, once


def test_pim_lowering_memos_change_nothing(monkeypatch):
    """The PIM memos (hwmodels/pim.py per-device row costs, isa/lower.py AttAcc channel lowerings) are exact:
    a small AttAcc serving run gives bit-identical per-request results with them switched off."""
    import attnsim.isa.lower as lower
    from attnsim.hwmodels.pim import PIMDevice
    from attnsim.studies.serve.requests import TraceSpec, synthetic_trace
    from attnsim.studies.serve.scheduler import simulate_pool

    tr = synthetic_trace(
        TraceSpec(
            num_requests=12,
            rate_per_s=20.0,
            seed=1,
            prompt={"dist": "uniform", "low": 64, "high": 512},
            output={"dist": "uniform", "low": 4, "high": 24},
        ),
        1,
        1,
    )

    def run():
        pool, _, _ = quick_pool(system="attacc", model="gpt3-7b", scenario={"prompt_len": 512, "output_len": 32})
        r = simulate_pool(pool, tr.arrival_s, tr.prompt_tokens, tr.output_tokens)
        return r, pool.coster.memo

    fast, memo = run()
    decode_points = [k for k in memo if k[0] > 0 and not k[2]]
    assert decode_points  # pure decode iterations: the ones lowered onto the PIM channels

    def unmemoised(slices, phase, org, part, pu, dhead, elem_bytes, group):
        p = lower._attacc_channel(list(slices), phase, org, part, pu, dhead, elem_bytes, group)
        return p, lower.attacc_commands(p, org, pu)

    monkeypatch.setattr(lower, "_attacc_bank_channel", unmemoised)
    monkeypatch.setattr(PIMDevice, "_row_key", lambda self, trace, i, part: None)
    slow, _ = run()
    for k in ("first_token_s", "finish_s", "energy_j"):
        assert np.array_equal(getattr(fast, k), getattr(slow, k)), k
    assert fast.busy_energy_j == slow.busy_energy_j and fast.iterations == slow.iterations
