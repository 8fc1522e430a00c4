"""Error model curves, refresh scaling, the tiering planner and the reliability config section."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.reliability.errors import RawErrorModel, field_fault_modes, refresh_power_scale
from attnsim.hwmodels.reliability.planner import KVBlock, Planner, TierSpec, uniform_blocks
from attnsim.hwmodels.reliability.spec import ReliabilitySpec, expected_errors


def test_refresh_power_scale():
    assert refresh_power_scale(64) == 1.0
    assert refresh_power_scale(1000) == pytest.approx(0.064)
    assert refresh_power_scale(32) == pytest.approx(2.0)
    assert refresh_power_scale(32, temp_c=90) == pytest.approx(1.0)  # JEDEC 32 ms above 85 C
    with pytest.raises(ValueError):
        refresh_power_scale(0)


def test_retention_curve():
    m = RawErrorModel()
    assert m.ber_retention(64, 25) == 0.0 and m.ber_retention(64, 85) == 0.0
    assert m.ber_retention(1000, 25) == pytest.approx(3e-8)
    assert m.ber_retention(10000, 25) == pytest.approx(1e-5)
    assert m.ber_retention(1000, 35) == pytest.approx(2 * m.ber_retention(1000, 25))
    ts = [65, 100, 500, 1000, 5000, 20000, 60000]
    b = [m.ber_retention(t, 45) for t in ts]
    assert all(x < y for x, y in zip(b, b[1:]))
    assert RawErrorModel.zero().p_bit(3600, 20000) == 0.0
    # random data: retention flips only charged cells (half the bits on average)
    assert m.p_bit(0.0, 10000, 25) == pytest.approx(0.5e-5)


def test_fault_flips_scale():
    m = RawErrorModel(lambda_soft_per_bit_h=0.0, fault_modes=field_fault_modes(40.0))
    one_h = m.fault_flips(8e9, 3600)
    assert one_h == pytest.approx(2 * m.fault_flips(8e9, 1800))
    chip = [f for f in m.fault_modes if f.name == "chip"][0]
    assert one_h > chip.fit_per_device / 1e9 * 8e9 * 0.5  # at least the chip-fault share


def _tiers(hbm_cap=4e6, relax=(64.0, 1000.0, 20000.0)):
    # HBM3E-class: H200 4.8 TB/s (cxl_reliability.md §2), 28.72 pJ/B off-chip (pim_dram.md, FGDRAM)
    hbm = TierSpec("hbm", 1 / 4.8e12, 28.72e-12, 1.45e-11, hbm_cap, RawErrorModel(), ecc_options=("hbm3_ondie",))
    cxl = TierSpec(
        "cxl",
        1 / 1.1e12,
        32e-12,
        1.45e-11,
        1e12,
        RawErrorModel(),
        ecc_options=("none", "secded"),
        refresh_options_ms=relax,
    )
    return [hbm, cxl]


def test_planner_respects_budget_and_capacity():
    blocks = uniform_blocks(2, 2, 2, 64, 2048, 256)
    for budget in (0.2, 0.02, 0.005):
        pl = Planner(_tiers(hbm_cap=1e6), budget=budget, residency_s=10.0).plan(blocks)
        assert pl.feasible and pl.eps <= budget * (1 + 1e-9)
        assert pl.tier_bytes["hbm"] <= 1e6
    loose = Planner(_tiers(hbm_cap=1e6), budget=0.2, residency_s=10.0).plan(blocks)
    tight = Planner(_tiers(hbm_cap=1e6), budget=0.005, residency_s=10.0).plan(blocks)
    assert loose.objective < tight.objective  # a looser budget never costs more


def test_planner_relaxes_mantissa_refresh_only_when_budget_allows():
    blocks = uniform_blocks(1, 2, 4, 128, 4096, 512)
    cxl = _tiers()[1:]
    kw = dict(formats=("bf16",), residency_s=10.0)
    base = Planner(cxl, budget=1.0, **kw)
    M = base._matrices(blocks)
    opts = base.options
    strict = [
        i for i, o in enumerate(opts) if o.refresh_low_ms == 64 and o.refresh_high_ms == 64 and o.ecc_high == "secded"
    ]
    eps_strict = min(M["eps"][:, i].sum() for i in strict)
    loose = Planner(cxl, budget=eps_strict * 1.5 + 1e-3, **kw).plan(blocks)
    assert any(o.refresh_low_ms > 64 for o in loose.options)
    assert loose.eps <= loose.budget
    tight = Planner(cxl, budget=eps_strict * 1.001, **kw).plan(blocks)
    assert tight.feasible and all(o.refresh_low_ms == 64 and o.refresh_high_ms == 64 for o in tight.options)
    assert loose.refresh_w < tight.refresh_w


def test_replan_follows_importance_drift():
    blocks = uniform_blocks(1, 1, 4, 64, 2048, 256)
    P = Planner(_tiers(hbm_cap=3e5), budget=0.02, residency_s=10.0)
    first = P.plan(blocks)
    # importance drifts: a middle block becomes a heavy hitter holding 60 % of the attention
    masses = np.array([b.attention_mass for b in blocks])
    masses *= 0.4 / (masses.sum() - masses[3])
    masses[3] = 0.6
    drifted = [
        KVBlock(b.layer, b.head_group, b.token_start, b.token_end, b.n_heads, b.head_dim, b.context_tokens, m)
        for b, m in zip(blocks, masses)
    ]
    stale = P._matrices(drifted)["eps"][np.arange(len(blocks)), first.choice].sum()
    assert stale > 0.02  # the old plan breaks the budget after the drift
    second = P.replan(drifted, first)
    assert second.feasible and second.eps <= 0.02 and second.tier_bytes["hbm"] <= 3e5
    assert second.migrations == int(np.sum(second.choice != first.choice)) and second.migrations > 0


SPEC = {
    "temperature_c": 45,
    "kv_format": "bf16",
    "accuracy_slo": {"max_rel_attention_error": 0.05},
    "tiers": {
        "cxl": {
            "read_gbps": 1100,
            "read_pj_per_byte": 32,
            "refresh_mw_per_gb": 14.5,
            "capacity_gb": 512,
            "ecc": {"high": "secded", "low": "none"},
            "refresh_ms": {"low": 1000},
        }
    },
}


def test_spec_parses_and_reports_key_paths():
    s = ReliabilitySpec.load(SPEC, file="experiments/x.yaml")
    assert s.refresh_of("cxl", "low") == 1000 and s.refresh_of("cxl", "high") == 64
    bad = {**SPEC, "tiers": {"cxl": {**SPEC["tiers"]["cxl"], "ecc": {"high": "hamming9"}}}}
    with pytest.raises(ConfigError, match=r"experiments/x.yaml: reliability.tiers.cxl.ecc.high"):
        ReliabilitySpec.load(bad, file="experiments/x.yaml")
    with pytest.raises(ConfigError, match="unknown key"):
        ReliabilitySpec.load({**SPEC, "refresh": 3}, file="x.yaml")


def test_expected_errors_field_rates_vs_relaxed_refresh():
    fp = {"cxl": 64 * 2 * 8 * 128 * 4096 * 2.0}  # 64 layers x 8 KV heads x 4096 tokens, bf16
    s = ReliabilitySpec.load({**SPEC, "tiers": {"cxl": {**SPEC["tiers"]["cxl"], "refresh_ms": {}}}})
    field = expected_errors(fp, 5.0, s, kv_heads_total=512)
    assert (
        field["accuracy_proxy"]
        - expected_errors(fp, 5.0, s.model_copy(update={}), kv_heads_total=512)["accuracy_proxy"]
        == 0
    )
    assert field["silent_errors_per_token"] < 1e-3 and field["slo_met"]
    relaxed = expected_errors(
        fp,
        5.0,
        ReliabilitySpec.load({**SPEC, "tiers": {"cxl": {**SPEC["tiers"]["cxl"], "refresh_ms": {"low": 20000}}}}),
        kv_heads_total=512,
    )
    assert relaxed["silent_errors_per_token"] > 1e3 * max(field["silent_errors_per_token"], 1e-9)
