"""Link model: hand-computed ring all-reduce, latency-only transfers, monotonicity, presets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.hwmodels import registry
from attnsim.hwmodels.gpu import load_hardware
from attnsim.hwmodels.links import LinkModel
from attnsim.workloads.optrace import OpTrace

PRESETS = ("nvlink3", "nvlink4", "pcie4_x16", "pcie5_x16", "cxl2_x16", "cxl3_x16")


def ring(name: str) -> LinkModel:
    """Preset ``name`` with ``allreduce: ring`` (the formula before the NCCL tuner, kept by name)."""
    return LinkModel(load_hardware(name).spec.model_copy(update={"allreduce": "ring"}))


def test_presets_per_direction_bandwidth_and_energy():
    # per direction = half the bidirectional datasheet figure (devices.md (d)); PCIe/CXL per pim_dram.md/cxl md
    expect = {
        "nvlink3": (300e9, 1.3),
        "nvlink4": (450e9, 1.3),
        "pcie4_x16": (32e9, 4.4),
        "pcie5_x16": (64e9, 4.4),
        "cxl2_x16": (64e9, 4.4),
        "cxl3_x16": (128e9, 4.4),
    }
    for name, (bw, pj) in expect.items():
        link = load_hardware(name)
        assert isinstance(link, LinkModel) and link.kind == "link"
        assert link.peak_bandwidth_bytes_per_s == pytest.approx(bw)
        assert link.spec.energy_pj_per_bit == pj
    # CXL adds latency over the bare PCIe 5 PHY (cxl_reliability.md §1.2)
    assert load_hardware("cxl2_x16").latency_s > load_hardware("pcie5_x16").latency_s


def test_ring_allreduce_hand_computed():
    link = ring("nvlink3")
    # 4 ranks, 196,608 B: 2*3/4 * 196608 B / (300e9 * 0.8) + 6 * 4.2 us
    t = link.allreduce_time_s(196608.0, 4)
    assert t == pytest.approx(1.5 * 196608 / 240e9 + 6 * 4.2e-6)
    # the GPT-3 decode all-reduce measured 26.0 us (gpu_calibration.md §4.2)
    assert t == pytest.approx(26.0e-6, rel=0.05)
    assert link.allreduce_time_s(1e9, 1) == 0.0  # one rank: nothing to reduce
    # energy: all ranks send 2(n-1) S bytes, 1.3 pJ/bit
    assert link.allreduce_energy_j(1e6, 4) == pytest.approx(6e6 * 8 * 1.3e-12)


def test_zero_bytes_is_latency_only():
    for name in PRESETS:
        link = ring(name)
        assert link.transfer_time_s(0.0) == pytest.approx(link.spec.latency_us * 1e-6)
        assert link.transfer_energy_j(0.0) == 0.0
        assert link.allreduce_time_s(0.0, 8) == pytest.approx(14 * link.spec.latency_us * 1e-6)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(PRESETS), a=st.floats(0, 1e10), b=st.floats(0, 1e10), n=st.integers(2, 64))
def test_monotonic_in_bytes_and_below_peak(name, a, b, n):
    link = ring(name)
    lo, hi = sorted((a, b))
    assert link.transfer_time_s(lo) <= link.transfer_time_s(hi)
    assert link.allreduce_time_s(lo, n) <= link.allreduce_time_s(hi, n)
    assert link.transfer_energy_j(lo) <= link.transfer_energy_j(hi)
    if hi > 0:  # never faster than the raw wire
        assert hi / link.transfer_time_s(hi) <= link.peak_bandwidth_bytes_per_s
        assert 2 * (n - 1) / n * hi / link.allreduce_time_s(hi, n) <= link.peak_bandwidth_bytes_per_s


@pytest.mark.parametrize("mode", ["ring", "nccl"])
def test_cost_of_trace_allreduce_rows_matches_formula(mode):
    link = LinkModel(load_hardware("nvlink4").spec.model_copy(update={"allreduce": mode}))
    tp, tensor = 8, 4096 * 8192 * 2.0
    comm = 2.0 * (tp - 1) / tp * tensor  # what workloads/trace.py puts in comm_bytes
    t = OpTrace.from_rows(
        [
            dict(op="ar", cls="allreduce", count=80, comm_bytes=comm),
            dict(op="mm", cls="matmul", count=1, m=1, n=1, k=1),
        ],
        phase="decode",
        model="x",
        tp=tp,
        query_tokens=np.ones(1),
        context_lens=np.ones(1),
        groups=[],
    )
    c = link.cost(t, np.arange(2))
    assert c.time_s[0] == pytest.approx(link.allreduce_time_s(tensor, tp))
    assert c.energy_j["link"][0] == pytest.approx(link.allreduce_energy_j(tensor, tp))
    assert c.bytes_by_level["link"][0] == pytest.approx(comm * tp)
    assert c.time_s[1] == 0 and c.bound[0] == "link"


def test_bad_link_config():
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "hardware" / "nvlink3.yaml").read_text())
    with pytest.raises(ConfigError, match="l.yaml: efficiency: expected a value <= 1"):
        registry.build(dict(data, efficiency=1.2), file="l.yaml")
    with pytest.raises(ConfigError, match="l.yaml: latency_us"):
        registry.build(dict(data, latency_us=-1.0), file="l.yaml")


def test_tree_allreduce_latency_grows_logarithmically():
    from attnsim.hwmodels.links import LinkModel, LinkSpec

    ring = LinkModel(LinkSpec(name="r", bandwidth_gbps=100, latency_us=2.0, energy_pj_per_bit=1.0))
    tree = LinkModel(LinkSpec(name="t", bandwidth_gbps=100, latency_us=2.0, energy_pj_per_bit=1.0, allreduce="tree"))
    for n, ring_steps, tree_steps in ((2, 2, 2), (8, 14, 6), (16, 30, 8)):
        bw = 2 * (n - 1) / n * 1e6 / 100e9
        assert float(ring.allreduce_time_s(1e6, n)) == pytest.approx(bw + ring_steps * 2e-6)
        assert float(tree.allreduce_time_s(1e6, n)) == pytest.approx(bw + tree_steps * 2e-6)
