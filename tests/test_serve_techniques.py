"""Technique families: paged KV allocator and layout locality, prefix caching, KV eviction /
selection budgets, prefill/decode disaggregation."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, validate
from attnsim.mapper.base import CapacityError
from attnsim.studies.serve.disagg import simulate_disagg, transfer_schedule
from attnsim.studies.serve.kvpolicy import KVPolicy, KVPolicySpec, accuracy_proxy
from attnsim.studies.serve.paging import BlockAllocator, kv_read_locality
from attnsim.studies.serve.requests import RequestTrace
from attnsim.studies.serve.run import quick_pool
from attnsim.studies.serve.scheduler import simulate_pool
from attnsim.studies.serve.spec import DisaggSpec

EXACT = {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}


def test_allocator_refuses_over_capacity():
    a = BlockAllocator(10, 16)
    x = a.allocate(7)
    assert x == list(range(7)) and a.free == 3
    with pytest.raises(CapacityError):
        a.allocate(4)
    a.release(x[:2])
    assert a.free == 5 and a.peak_used == 7
    assert list(a.blocks_for([1, 16, 17, 32])) == [1, 1, 2, 2]


def test_paged_layout_loses_row_locality_on_dram_engine():
    """Reading 1 KB blocks scattered by an allocator vs the same blocks contiguous (HBM3 engine)."""
    rng = np.random.default_rng(0)
    n = 512
    contig = kv_read_locality("hbm3_6400", np.arange(n), 1024)
    paged = kv_read_locality("hbm3_6400", rng.permutation(64 * n)[:n], 1024)
    assert contig["row_hit_rate"] > 0.9 > 0.1 > paged["row_hit_rate"]
    assert paged["bandwidth_gbps"] < 0.7 * contig["bandwidth_gbps"]


def test_contiguous_reservation_limits_concurrency():
    """Same burst of requests: contiguous reservation (prompt + longest output) holds fewer requests
    at once than paged blocks, so the burst takes longer."""
    n = 120
    tr = dict(arrival_s=np.zeros(n), prompt=np.full(n, 1000), output=np.r_[np.full(n - 1, 50), 2000])
    out = {}
    for layout in ("paged", "contiguous"):
        pool, _, _ = quick_pool(
            model="llama2-13b", serving={"kv": {"layout": layout}, "scheduler": {"memory_fraction": 0.5}}
        )
        r = simulate_pool(pool, tr["arrival_s"], tr["prompt"], tr["output"])
        out[layout] = r
    # hand count: contiguous holds floor(blocks / ceil((1000 + 2000) / 16)) requests at once
    pool, _, _ = quick_pool(
        model="llama2-13b", serving={"kv": {"layout": "contiguous"}, "scheduler": {"memory_fraction": 0.5}}
    )
    per_req = -(-3000 // 16)
    assert out["contiguous"].stats["max_batch"] <= pool.total_blocks // per_req
    assert out["paged"].stats["max_batch"] > 2 * out["contiguous"].stats["max_batch"]
    assert out["paged"].end_s < out["contiguous"].end_s
    assert out["contiguous"].stats["mean_fragmentation"] > out["paged"].stats["mean_fragmentation"]


def test_prefix_caching_skips_shared_prefill():
    """Requests one after another with the same 512-token prefix: the first misses, the others hit
    whole blocks (512 tokens) and their prefill time is that of the 100 own tokens."""
    P, own = 512, 100
    n = 5
    pool, _, _ = quick_pool(serving={"kv": {"prefix_caching": True}, "memo": EXACT})
    arr = np.arange(n) * 10.0
    r = simulate_pool(pool, arr, np.full(n, P + own), np.full(n, 2), np.zeros(n, np.int64), np.full(n, P))
    assert r.stats["prefix_lookups"] == n and r.stats["prefix_hits"] == n - 1
    assert list(r.prefix_hit_tokens) == [0] + [P] * (n - 1)
    ttft = r.first_token_s - arr
    assert ttft[1] == pytest.approx(pool.coster.exact([P + own], [own]).time_s, rel=1e-12)
    assert ttft[0] == pytest.approx(pool.coster.exact([P + own], [P + own]).time_s, rel=1e-12)
    off, _, _ = quick_pool(serving={"memo": EXACT})
    r2 = simulate_pool(off, arr, np.full(n, P + own), np.full(n, 2), np.zeros(n, np.int64), np.full(n, P))
    assert r2.stats["prefix_hits"] == 0 and np.allclose(r2.first_token_s - arr, ttft[0])


def test_kv_policy_token_counts():
    L = 40
    s = KVPolicy(validate(KVPolicySpec, {"kind": "streaming", "sink_tokens": 4, "window_tokens": 60}), L)
    assert list(s.retained_tokens([10, 64, 1000], [5, 5, 5])) == [10, 64, 64]
    h = KVPolicy(validate(KVPolicySpec, {"kind": "h2o", "heavy_tokens": 100, "recent_tokens": 28}), L)
    assert list(h.read_tokens([100, 5000], [0, 0])) == [100, 128]
    sn = KVPolicy(validate(KVPolicySpec, {"kind": "snapkv", "budget_tokens": 256}), L)
    assert list(sn.retained_tokens([1000 + 7, 200], [1000, 200])) == [256 + 7, 200]
    q = KVPolicy(validate(KVPolicySpec, {"kind": "quest", "budget_tokens": 512, "page_tokens": 16}), L)
    assert list(q.retained_tokens([4000], [4000])) == [4000]
    assert list(q.read_tokens([4000], [4000])) == [512 + 250]
    qd = KVPolicy(
        validate(KVPolicySpec, {"kind": "quest", "budget_tokens": 512, "page_tokens": 16, "dense_layers": 2}), L
    )
    assert list(qd.read_tokens([4000], [4000])) == [int(np.ceil(2 / 40 * 4000 + 38 / 40 * 762))]


def test_eviction_reduces_decode_time_and_kv():
    """Long prompts: a 1024-token SnapKV budget reads fewer KV bytes per decode step (lower TPOT),
    holds fewer blocks; the accuracy proxy reports a non-zero attention error."""
    n = 8
    arr, prompt, out = np.zeros(n), np.full(n, 6000), np.full(n, 64)
    res = {}
    for kind in ("none", "snapkv"):
        policy = {"kind": kind, **({"budget_tokens": 1024} if kind == "snapkv" else {})}
        pool, _, sv = quick_pool(model="llama2-13b", serving={"kv": {"policy": policy}})
        res[kind] = simulate_pool(pool, arr, prompt, out)
    tpot = {k: np.mean((r.finish_s - r.first_token_s) / 63) for k, r in res.items()}
    assert tpot["snapkv"] < 0.8 * tpot["none"]
    assert res["snapkv"].stats["peak_kv_blocks"] < 0.3 * res["none"].stats["peak_kv_blocks"]
    a = accuracy_proxy(validate(KVPolicySpec, {"kind": "streaming", "window_tokens": 256}), tokens=1024)
    with pytest.raises(ConfigError, match="budget_tokens: not used by kind: streaming"):
        validate(KVPolicySpec, {"kind": "streaming", "budget_tokens": 256})
    assert 0 < a["rel_err"] and a["attention_mass_kept"] < 1 and a["kept_fraction"] == pytest.approx(260 / 1024)


class _Link:
    latency_s = 1e-3
    bw = 1e9

    def transfer_time_s(self, b):
        return self.latency_s + np.asarray(b, float) / self.bw

    def transfer_energy_j(self, b):
        return np.asarray(b, float) * 8 * 2e-12


def test_transfer_schedule_hand_derived():
    link = _Link()
    ready = np.array([1.0, 1.0])
    last = np.array([0.4, 0.4])
    kv = np.array([2e8, 2e8])  # 0.2 s + 1 ms each on one link
    a, e = transfer_schedule(ready, last, kv, link, 1, 4, overlap=False)
    assert a[0] == pytest.approx(1.201) and a[1] == pytest.approx(1.402)
    a, _ = transfer_schedule(ready, last, kv, link, 1, 4, overlap=True)
    # overlap: starts after layer 1 of the last iteration (0.6 + 0.1), ends max(0.7 + 0.201, 1 + 0.201/4)
    assert a[0] == pytest.approx(max(0.901, 1.0 + 0.201 / 4))
    assert a[1] == pytest.approx(a[0] + 0.201)
    assert e[0] == pytest.approx(2e8 * 8 * 2e-12)


def test_disaggregation_end_to_end():
    """One request: TTFT = the prefill pool's prefill; the decode pool starts when the KV has crossed
    the link; decode steps as on the decode pool alone."""
    P, O = 800, 6
    pool, exp, sv = quick_pool(serving={"memo": EXACT})
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry

    link = registry.build(load_yaml(find_config("hardware", "nvlink4")))
    tr = RequestTrace.from_arrays([0.0], [P], [O])
    d = validate(DisaggSpec, {"prefill": "h100_x1", "decode": "h100_x1", "link": "nvlink4", "layerwise_overlap": False})
    out = simulate_disagg(pool, pool, tr, link, d)
    c = pool.coster
    t_pre = c.exact([P], [P]).time_s
    from attnsim.workloads.trace import kv_cache_bytes

    t_x = float(link.transfer_time_s(kv_cache_bytes(pool.model, pool.sc, [P])))
    assert out["first_token_s"][0] == pytest.approx(t_pre, rel=1e-12)
    assert out["kv_arrival_s"][0] == pytest.approx(t_pre + t_x, rel=1e-12)
    dec = sum(c.exact([P + j], [1]).time_s for j in range(1, O))
    assert out["finish_s"][0] == pytest.approx(t_pre + t_x + dec, rel=1e-12)
