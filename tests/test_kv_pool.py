"""Shared KV pool tier (hwmodels/kv_pool.py; serving.kv_pool): lookup + transfer costs from the module
docstring's formula, a pooled prefix on the TTFT path, and prefix reuse across instances."""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels.kv_pool import SharedPrefixPool


def _pool(name="rdma_mooncake_pool"):
    return registry.build(load_yaml(find_config("hardware", name)))


def test_fetch_is_lookups_plus_transfer():
    """K blocks: rpc + K x per-block lookup + latency + bytes / bw, by hand from the preset's numbers."""
    m = _pool()  # 5 us rpc, 0.1 us/block, 3 us access, 360 GB/s per host, 2880 GB/s pool
    k, nbytes = 128, 128 * 16 * 131072  # 128 blocks of 16 tokens x 128 KiB/token (Llama-3-8B fp16)
    hand = 5e-6 + 128 * 0.1e-6 + 3e-6 + nbytes / 360e9
    assert float(m.fetch_time_s(k, nbytes)) == pytest.approx(hand, rel=1e-12)
    # 16 hosts streaming: the pool side (2880 / 16 = 180 GB/s) is below one host's 360 GB/s
    assert float(m.fetch_time_s(k, nbytes, 16)) == pytest.approx(5e-6 + 12.8e-6 + 3e-6 + nbytes / 180e9, rel=1e-12)
    assert float(m.energy_j(nbytes)) == pytest.approx(nbytes * 135e-12)
    # Pond pools: no rpc, the multi-headed pool is faster per access than the switched one (70-90 vs > 180 ns)
    mhd, sw = _pool("cxl_pool_pond_mhd"), _pool("cxl_pool_pond_switched")
    assert mhd.spec.lookup_rpc_us == 0 and float(mhd.fetch_time_s(1, 0)) == pytest.approx((0.36 + 0.18) * 1e-6)
    assert float(sw.fetch_time_s(1, 0)) > float(mhd.fetch_time_s(1, 0))


def test_shared_pool_entries_and_capacity():
    m = _pool("cxl_pool_pond_mhd")
    sp = SharedPrefixPool(m, bytes_per_token=1e6, block_tokens=16, instances=4)
    assert sp.lookup(7, 1.0, 100) == (0, 0.0, 0.0)  # empty pool: a counted miss
    sp.publish(7, 40, now=1.0)  # 32 tokens (whole blocks) = 32 MB
    vis = 1.0 + 0.18e-6 + 32e6 / (min(26.9, 460.8 / 4) * 1e9)
    assert sp.live[7] == (pytest.approx(vis), 32)
    assert sp.lookup(7, vis - 1e-9, 100)[0] == 0  # not visible before its write ends
    tok, t, e = sp.lookup(7, vis, 20)  # limited to the request's 20 tokens -> 16
    assert tok == 16 and t == pytest.approx(float(m.fetch_time_s(1, 16e6, 4))) and e == pytest.approx(16e6 * 50.2e-12)
    assert (sp.lookups, sp.hits) == (3, 1)
    big = SharedPrefixPool(m, bytes_per_token=m.capacity_bytes / 32, block_tokens=16, instances=1)
    big.publish(1, 32, 0.0)  # fills the pool exactly
    big.publish(2, 16, 0.0)  # does not fit: not stored
    assert set(big.live) == {1}
    with pytest.raises(ConfigError, match="at most hosts = 16"):
        SharedPrefixPool(m, 1.0, 16, 17)


def test_pooled_prefix_on_the_ttft_path():
    """A request whose prefix another instance put in the pool: TTFT = fetch + prefill of the rest
    (the coster's own iteration time), and no prefill of the pooled tokens."""
    from attnsim.studies.serve.run import quick_pool
    from attnsim.studies.serve.scheduler import simulate_pool

    pool, _, _ = quick_pool(
        "h100_x1", "llama3-8b", {"prompt_len": 512, "output_len": 4}, {"kv": {"prefix_caching": True}}
    )
    bt = pool.block_tokens
    bpt = pool.token_bytes
    sp = SharedPrefixPool(_pool(), bpt, bt, instances=2)
    sp.known = {3: (0.0, 1024)}  # published by the other instance
    r = simulate_pool(pool, [0.5], [1100], [2], prefix_id=[3], prefix_tokens=[1024], remote=sp)
    fetch = float(sp.pool.fetch_time_s(1024 // bt, 1024 * bpt, 2))
    dt, _ = pool.coster.cost(0, 0, [1100 - 1024], [1024])
    assert r.first_token_s[0] == pytest.approx(0.5 + fetch + dt, rel=1e-9)
    assert r.prefix_hit_tokens[0] == 1024 and sp.hits == 1
    plain = simulate_pool(pool, [0.5], [1100], [2], prefix_id=[3], prefix_tokens=[1024])
    assert plain.first_token_s[0] > r.first_token_s[0]  # 1024 tokens of prefill cost more than the fetch
    assert r.energy_j[0] > 0 and sp.energy == pytest.approx(float(sp.pool.energy_j(1024 * bpt)))


SMALL = [
    "experiment.models=[llama3-8b]",
    "experiment.serving.trace.num_requests=48",
    "experiment.serving.trace.rate_per_s=8",
    "experiment.serving.trace.prefix={num_prefixes: 8, tokens: 512, fraction: 1.0}",
    "experiment.serving.trace.prompt={dist: fixed, mean: 64}",
    "experiment.serving.trace.output={dist: fixed, mean: 4}",
    "experiment.systems=[mooncake_h100_x4, mooncake_h100_x8_nopool]",
    "experiment.serving.kv_pool.systems=[mooncake_h100_x4]",
]


def test_instances_share_prefixes_through_the_pool():
    """4 instances with a pool: each prefix is computed once in the cluster (8 cold misses of 48 lookups,
    the pool serves every other instance's first request); 8 instances without it miss once per instance."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    exp, sv = load_serving_experiment("kv_pool", SMALL)
    docs = {d["system"]: d for d in serve_experiment(exp, sv)}
    pooled, alone = docs["mooncake_h100_x4"]["serving"], docs["mooncake_h100_x8_nopool"]["serving"]
    kp = pooled["kv_pool"]
    assert kp["converged"] and kp["passes"] >= 2
    assert kp["prefix_hit_rate_with_pool"] == pytest.approx((48 - 8) / 48)  # only the 8 first computations miss
    assert "kv_pool" not in alone
    assert alone["prefix_hit_rate"] < kp["prefix_hit_rate_with_pool"]
    assert np.isfinite(docs["mooncake_h100_x4"]["metrics"]["ttft_mean"])


def test_bad_pool_settings_are_refused():
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    with pytest.raises(ConfigError) as e:
        load_serving_experiment("kv_pool", SMALL + ["experiment.serving.kv_pool.systems=[nope]"])
    assert e.value.key == "serving.kv_pool.systems.0" and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_serving_experiment("kv_pool", SMALL + ["experiment.serving.kv_pool.hardware=h100_sxm"])
    assert e.value.key == "serving.kv_pool.hardware"
    exp, sv = load_serving_experiment("kv_pool", SMALL + ["hardware.rdma_mooncake_pool.hosts=2"])
    with pytest.raises(ConfigError) as e:
        serve_experiment(exp, sv)
    assert e.value.key == "hosts" and "rdma_mooncake_pool.yaml" in str(e.value)
