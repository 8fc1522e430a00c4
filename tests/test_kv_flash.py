"""NAND flash KV tier (hwmodels/flash.py): page reads over channels by hand, UBER from an independent
binomial tail, the tier in a reliability section, and decode with the KV on flash (offload policy)."""

from __future__ import annotations

import math

import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.flash import FlashModel, FlashSpec, nand_rber, uber
from attnsim.hwmodels.reliability import ecc

BASE = dict(
    name="t",
    capacity_gb=100,
    channels=8,
    dies_per_channel=1,
    planes_per_die=1,
    page_kb=16,
    t_read_us=40,
    t_program_us=500,
    channel_gbps=2.0,
    read_pj_per_byte=10.0,
    ecc="bch_nand",
)


def _flash(**kw):
    return FlashModel(FlashSpec(**{**BASE, **kw}))


def test_read_of_p_pages_over_c_channels():
    """P pages over C channels = ceil(P/C) x tR + bytes on the busiest channel / channel bw (+ parity, + decode)."""
    f = _flash()
    page = 16384
    ov = (8752 - 8192) / 8192  # BCH(8752, 8192): 560 parity bits per 1 KB
    for pages in (1, 8, 37, 1000):
        hand = math.ceil(pages / 8) * 40e-6 + math.ceil(pages / 8) * page * (1 + ov) / 2e9 + 2e-6
        assert float(f.read_time_s(pages * page)) == pytest.approx(hand, rel=1e-12)
    assert float(f.read_time_s(0)) == 0.0
    # 4 dies x 2 planes per channel sense 8 pages at once: ceil(ceil(1000 / 8) / 8) = 16 waves of tR, the
    # later waves sensed while other dies use the bus: tR + max(15 tR, 15/16 bus) + bus / 16
    g = _flash(dies_per_channel=4, planes_per_die=2)
    bus = 125 * page * (1 + ov) / 2e9
    assert float(g.read_time_s(1000 * page)) == pytest.approx(40e-6 + max(15 * 40e-6, bus * 15 / 16) + bus / 16 + 2e-6)
    # a program takes tPROG per wave and no decode
    assert float(f.read_time_s(37 * page, write=True)) == pytest.approx(5 * 500e-6 + 5 * page * (1 + ov) / 2e9)


def test_latency_bound_small_and_bandwidth_bound_large():
    f = _flash(dies_per_channel=8, planes_per_die=4)
    small = float(f.read_time_s(16384))  # one page: tR + one page on the bus + decode
    assert small == pytest.approx(40e-6 + 16384 * 8752 / 8192 / 2e9 + 2e-6)
    big = 64e9
    rate = big / float(f.read_time_s(big))
    assert rate == pytest.approx(f.peak_bandwidth_bytes_per_s, rel=0.01)  # the channels' data rate
    assert rate <= f.peak_bandwidth_bytes_per_s


def _tail(n, t, p):
    """P(X > t), X ~ Binomial(n, p), summed term by term in log space (independent of scipy)."""
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        for i in range(t + 1, min(n, t + 400) + 1)
    ]
    return math.fsum(terms)


@pytest.mark.parametrize("p", [1e-3, 2e-3, 5e-3])
def test_uber_of_bch_is_the_binomial_tail(p):
    s = ecc.get_scheme("bch_nand")
    assert (s.n_bits, s.k_bits, s.t) == (8752, 8192, 40)
    assert uber(s, p) == pytest.approx(_tail(8752, 40, p) / 8192, rel=1e-6)
    o = s.outcome(p)
    assert o.sdc < 1e-40 * max(o.due, 1e-300) + 1e-300  # beyond t the decoder flags (miscorrection ~ 2^-560 x sphere)


def test_rber_anchors_and_ldpc_stronger_than_bch():
    assert nand_rber(0, 0) == pytest.approx(1e-4)
    assert nand_rber(3000, 0) == pytest.approx(1e-3)  # x10 at the rated endurance
    assert nand_rber(3000, 365) == pytest.approx(2e-3)  # x2 after a year of retention
    p = nand_rber(3000, 365)
    assert uber(ecc.get_scheme("ldpc_nand"), p) < uber(ecc.get_scheme("bch_nand"), p) < 1e-9
    with pytest.raises(ValueError):
        nand_rber(-1, 0)


def test_flash_tier_in_a_reliability_section():
    """The preset as a reliability tier: its ECC and RBER reach the error model the planner and the proxy use."""
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry
    from attnsim.hwmodels.reliability.spec import ReliabilitySpec

    f = registry.build(load_yaml(find_config("hardware", "nand_tlc_ssd")))
    tier = f.reliability_tier()
    spec = ReliabilitySpec.load({"accuracy_slo": {"max_rel_attention_error": 0.05}, "tiers": {"nand": tier}})
    (ts,) = spec.tier_specs()
    assert ts.errors.p_bit(60.0, 64.0) == pytest.approx(f.rber)  # static RBER, no soft/retention part
    assert spec.tiers["nand"].ecc.high == "ldpc_nand"
    assert ts.read_s_per_byte == pytest.approx(1 / f.peak_bandwidth_bytes_per_s)
    with pytest.raises(ConfigError) as e:
        ReliabilitySpec.load(
            {"accuracy_slo": {"max_rel_attention_error": 0.05}, "tiers": {"nand": {**tier, "ecc": {"high": "ldpc"}}}},
            file="x.yaml",
        )
    assert e.value.key == "reliability.tiers.nand.ecc.high"


def test_decode_with_kv_on_flash():
    """Offload to 1 SSD: a decode step is at least the layers x (NVMe link time, flash read time) of each
    layer's KV; 4 SSDs share the reads (each reads a quarter) and are faster."""
    from attnsim.hwmodels.system import build_system
    from attnsim.mapper.base import get_policy
    from attnsim.sim.engine import cost_step
    from attnsim.sim.experiment import load_experiment
    from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

    exp = load_experiment(
        "kv_flash",
        [
            "experiment.systems=[kvnand_h100_ssd, kvnand_h100_ssd_x4]",
            "experiment.baseline=null",
            "experiment.scenarios={s: {batch_size: 4, prompt_len: 4096, output_len: 2}}",
        ],
    )
    model, sc = exp.models["llama3-8b"], exp.scenarios["s"]
    times = {}
    for name, sspec in exp.systems.items():
        sysm = build_system(sspec, exp.tree.hardware, exp.tree.file_of)
        tr = build_trace(model, sc, "decode", tp=1)
        mb = {
            "weights": weight_bytes(model, sc.weight_dtype),
            "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 1),
            "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 1, tp=1),
        }
        plan = get_policy("offload")(tr, sysm, mb, sspec.mapper.options)
        times[name] = cost_step(plan, sysm).time_s
        if name == "kvnand_h100_ssd":
            per_layer = tr.total("kv_read_bytes") / model.num_layers
            f, link = sysm.pools["flash"].model, next(iter(sysm.links.values()))
            bound = model.num_layers * max(float(f.read_time_s(per_layer)), float(link.transfer_time_s(per_layer)))
            assert times[name] >= bound * (1 - 1e-9)
    assert times["kvnand_h100_ssd_x4"] < times["kvnand_h100_ssd"]


def test_worn_flash_pays_read_retries():
    """At RBER 1e-4 x 10^1.5 (4500 P/E cycles) BCH t = 40 fails a codeword with the binomial tail q; a page
    of 16 codewords is re-read with probability 1 - (1 - q)^16, once per page on the busiest channel."""
    fresh, worn = _flash(), _flash(pe_cycles=4500)
    p = 1e-4 * 10**1.5
    assert worn.rber == pytest.approx(p)
    q = _tail(8752, 40, p)
    p_page = 1 - (1 - q) ** 16
    assert worn.p_retry == pytest.approx(p_page, rel=1e-6) and 1e-3 < p_page < 0.5
    page_bus = 16384 * 8752 / 8192 / 2e9
    nbytes = 37 * 16384
    assert float(worn.read_time_s(nbytes)) == pytest.approx(
        float(fresh.read_time_s(nbytes)) + p_page * 5 * (40e-6 + page_bus), rel=1e-9
    )
    assert fresh.p_retry < 1e-30


def test_kv_flash_experiment_tier_is_the_preset():
    """kv_flash.yaml's nand reliability tier is FlashModel.reliability_tier() of its SSD preset (no drift)."""
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry

    tier = load_yaml(find_config("experiments", "kv_flash"))["reliability"]["tiers"]["nand"]
    want = registry.build(load_yaml(find_config("hardware", "nand_tlc_ssd"))).reliability_tier()
    assert tier["ecc"] == want["ecc"] and tier["capacity_gb"] == want["capacity_gb"]
    for k in ("read_gbps", "read_pj_per_byte", "refresh_mw_per_gb"):
        assert tier[k] == pytest.approx(want[k], rel=1e-5, abs=1e-12)
    for k, v in want["errors"].items():
        assert tier["errors"][k] == pytest.approx(v, rel=1e-5, abs=1e-30)
