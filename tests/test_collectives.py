"""Collectives (hwmodels/collectives.py through the link presets): each protocol/algorithm by hand, the
tuner's minimum, the ring preset bit for bit, monotonicity, busbw bounds, nccl-tests rows, bad options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.hwmodels import collectives as C
from attnsim.hwmodels import registry
from attnsim.hwmodels.gpu import load_hardware
from attnsim.hwmodels.links import LinkModel
from attnsim.workloads.optrace import OpTrace

HW = Path(__file__).parent.parent / "configs" / "hardware"
NCCL_PRESETS = ("nvlink3", "nvlink4", "pcie4_x16_gpu_p2p", "pcie4_x16_gpu_shm")


def _with(name: str, **update) -> LinkModel:
    return LinkModel(load_hardware(name).spec.model_copy(update=update))


def test_ring_protocols_by_hand():
    link = load_hardware("nvlink3")  # 300 GB/s per direction; nccl block of configs/hardware/nvlink3.yaml
    nc = link.spec.nccl
    for proto, base, step, frac in (
        ("LL", 1.71, 2.11, 0.064),
        ("LL128", 24.0, 0.905, 0.208),
        ("Simple", 22.7, 6.57, 1.0),
    ):
        for n, s in ((8, 64.0), (4, 1 << 20), (8, 1 << 30)):
            want = (0.0 + base + 2 * (n - 1) * step) * 1e-6 + 2 * (n - 1) / n * s / (300e9 * 0.727 * frac)
            assert C.algo_time_s(nc, 300e9, "allreduce", s, n, "ring", proto) == pytest.approx(want, rel=1e-12)
    # all-gather / reduce-scatter: n-1 steps, (n-1)/n of the buffer; send/recv: one step, every byte
    s, n = 4e6, 8
    ll = nc.protocols["Simple"]
    for coll in ("allgather", "reducescatter"):
        want = (ll.base_us + (n - 1) * ll.step_us) * 1e-6 + (n - 1) / n * s / (300e9 * 0.727)
        assert C.algo_time_s(nc, 300e9, coll, s, n, "ring", "Simple") == pytest.approx(want, rel=1e-12)
    assert C.algo_time_s(nc, 300e9, "sendrecv", s, n, "ring", "Simple") == pytest.approx(
        (ll.base_us + ll.step_us) * 1e-6 + s / (300e9 * 0.727), rel=1e-12
    )


def test_tree_and_nvls_by_hand():
    h = load_hardware("nvlink4")  # call_us 6.49, nvls {25 us, 0.61}
    nc = h.spec.nccl
    p = nc.protocols["LL128"]
    n, s = 8, 2e6
    # one-node tree: a chain of 2(n-1) steps at 0.92 of the ring's bandwidth (NCCL tuning model)
    tree = (6.49 + p.base_us + 14 * p.step_us) * 1e-6 + 1.75 * s / (450e9 * 0.8125 * p.bw_fraction * 0.92)
    assert C.algo_time_s(nc, 450e9, "allreduce", s, n, "tree", "LL128") == pytest.approx(tree, rel=1e-12)
    assert C.algo_time_s(nc, 450e9, "allreduce", s, n, "tree", "LL128") > C.algo_time_s(
        nc, 450e9, "allreduce", s, n, "ring", "LL128"
    )
    # NVLS: each GPU moves S per direction at 0.61 x 450 GB/s, 25 us + call
    assert C.algo_time_s(nc, 450e9, "allreduce", 1e9, 8, "nvls", "Simple") == pytest.approx(
        (6.49 + 25.0) * 1e-6 + 1e9 / (450e9 * 0.61), rel=1e-12
    )
    t, c = h.collective("allreduce", np.array([1e3, 1e9]), 8)
    assert list(c) == ["ring/LL128", "nvls/Simple"]  # small: LL128 ring; 1 GB on 8 x H100: NVLS
    assert 1.75 * 1e9 / t[1] / 1e9 == pytest.approx(480, rel=0.03)  # maintainers' ~480 GB/s NVLS busbw
    with pytest.raises(ValueError, match="nvls"):
        C.algo_time_s(load_hardware("nvlink3").spec.nccl, 300e9, "allreduce", s, n, "nvls", "Simple")  # A100: none
    with pytest.raises(ValueError, match="tree"):
        C.algo_time_s(nc, 450e9, "allgather", s, n, "tree", "LL")


def test_custom_one_and_two_shot_by_hand():
    h = _with("nvlink4", allreduce="custom")  # sync_us 5, max 8 MiB, bus_efficiency 0.8125
    bw = 450e9 * 0.8125
    t, c = h.collective("allreduce", np.array([256e3, 4e6, 16e6]), 4)
    assert t[0] == pytest.approx(5e-6 + 3 * 256e3 / bw) and c[0] == "custom/one_shot"
    assert t[1] == pytest.approx(10e-6 + 1.5 * 4e6 / bw) and c[1] == "custom/two_shot"
    nccl_t = load_hardware("nvlink4").collective("allreduce", 16e6, 4)[0]
    assert t[2] == pytest.approx(nccl_t) and not c[2].startswith("custom")  # above max_bytes: NCCL
    assert h.collective("allreduce", 1e6, 1)[0] == 0.0


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(NCCL_PRESETS),
    coll=st.sampled_from(C.COLLECTIVES),
    n=st.integers(2, 16),
    sizes=st.lists(st.floats(1.0, 4e9), min_size=2, max_size=12),
)
def test_tuner_is_the_minimum_and_monotone(name, coll, n, sizes):
    link = load_hardware(name)
    nc, bw = link.spec.nccl, link.peak_bandwidth_bytes_per_s
    s = np.sort(np.array(sizes))
    t, choice = C.tuned(nc, bw, coll, s, n)
    every = np.stack([C.algo_time_s(nc, bw, coll, s, n, a, p) for a, p in C.candidates(nc, coll, n)])
    assert np.array_equal(t, every.min(axis=0))
    assert all(t[i] == float(C.algo_time_s(nc, bw, coll, s[i], n, *choice[i].split("/"))) for i in range(len(s)))
    assert np.all(np.diff(t) >= 0)  # monotone in the message size
    if coll == "allreduce":
        tc = _with(name, allreduce="custom", custom_allreduce=load_hardware("nvlink4").spec.custom_allreduce)
        assert np.all(np.diff(tc.collective("allreduce", s, n)[0]) >= 0)


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(NCCL_PRESETS),
    coll=st.sampled_from(C.COLLECTIVES),
    n=st.integers(2, 16),
    s=st.floats(1.0, 1e11),
)
def test_busbw_never_above_the_link(name, coll, n, s):
    link = load_hardware(name)
    nc, bw = link.spec.nccl, link.peak_bandwidth_bytes_per_s
    for a, p in C.candidates(nc, coll, n):
        t = float(C.algo_time_s(nc, bw, coll, s, n, a, p))
        wire = s if a == "nvls" else float(C.bus_factor(coll, n)) * s  # bytes each GPU moves per direction
        assert wire / t <= bw


def test_ring_preset_is_the_old_formula_bit_for_bit():
    """allreduce: ring reproduces the model before the tuner exactly (the old LinkModel.cost, inline)."""
    link = _with("nvlink3", allreduce="ring")
    tp = 8
    tensors = np.array([16384.0, 196608.0, 4096 * 8192 * 2.0])
    comm = 2.0 * (tp - 1) / tp * tensors
    rows = [dict(op=f"ar{i}", cls="allreduce", count=1, comm_bytes=c) for i, c in enumerate(comm)]
    rows.append(dict(op="x", cls="transfer", count=1, comm_bytes=1e6))
    tr = OpTrace.from_rows(
        rows, phase="decode", model="x", tp=tp, query_tokens=np.ones(1), context_lens=np.ones(1), groups=[]
    )
    c = link.cost(tr, np.arange(4))
    bw, lat = 300e9 * 0.8, 4.2e-6  # nvlink3.yaml: bandwidth, efficiency, latency_us
    old = np.append(comm / bw + 2.0 * (tp - 1.0) * lat, 1e6 / bw + lat)
    assert np.array_equal(c.time_s, old)
    old_ar = 2.0 * (4 - 1.0) / 4 * 196608.0 / bw + 2.0 * (4 - 1.0) * lat
    assert link.allreduce_time_s(196608.0, 4) == old_ar


def test_pipeline_transfers_are_nccl_send_recv():
    link = load_hardware("nvlink4")
    tr = OpTrace.from_rows(
        [dict(op="pp", cls="transfer", count=1, comm_bytes=2e6)],
        phase="decode",
        model="x",
        tp=4,
        query_tokens=np.ones(1),
        context_lens=np.ones(1),
        groups=[],
    )
    assert link.cost(tr, np.arange(1)).time_s[0] == pytest.approx(float(link.collective("sendrecv", 2e6, 2)[0]))
    # GPU <-> PIM copies stay point-to-point DMA (nvlink*_p2p keep the formula)
    assert load_hardware("nvlink3_p2p").spec.allreduce == "ring"


def test_every_nccl_tests_row_within_15_percent():
    """calibration/nccl_allreduce.csv (copied with sources into configs/validation/nccl.yaml): N1 8 x A100
    NVSwitch, N4 4 x A100 NVLink mesh, N6 4 x H100 NVSwitch (VM), 8 B - 1 GB, and the held-out rows."""
    from attnsim.studies.validate import nccl_rows

    rows = nccl_rows()
    cal = [r for r in rows if r.role == "calibration"]
    assert len(cal) == 25 + 25 + 28 and {r.name.split()[0] for r in cal} == {"N1", "N4", "N6"}
    bad = [(r.name, round(r.error, 3)) for r in rows if not r.ok]
    assert not bad
    assert max(abs(r.error) for r in cal) <= 0.15


def _bad(update: dict, match: str):
    data = yaml.safe_load((HW / "nvlink4.yaml").read_text())
    with pytest.raises(ConfigError) as e:
        registry.build({**data, **update}, file="l.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("l.yaml: ") and match in msg, msg


def test_bad_collective_options_are_refused_one_line():
    data = yaml.safe_load((HW / "nvlink4.yaml").read_text())
    nc = data["nccl"]
    _bad({"allreduce": "nccl2"}, "allreduce")
    _bad({"nccl": None}, "nccl: expected an nccl block with allreduce: nccl")
    _bad({"allreduce": "custom", "custom_allreduce": None}, "custom_allreduce: expected a custom_allreduce block")
    _bad(
        {"nccl": {**nc, "protocols": {k: v for k, v in nc["protocols"].items() if k != "LL128"}}},
        "nccl.protocols: expected the protocols LL, LL128, Simple, missing LL128",
    )
    _bad(
        {"nccl": {**nc, "protocols": {**nc["protocols"], "LL": {**nc["protocols"]["LL"], "bw_fraction": 1.5}}}},
        "nccl.protocols.LL.bw_fraction",
    )
    _bad({"nccl": {**nc, "protocols": {**nc["protocols"], "LL256": nc["protocols"]["LL"]}}}, "nccl.protocols")
    _bad({"nccl": {**nc, "bus_efficiency": 0}}, "nccl.bus_efficiency")
    _bad({"nccl": {**nc, "nvls": {"base_us": -1, "bus_efficiency": 0.6}}}, "nccl.nvls.base_us")
    with pytest.raises(ValueError, match="collective: expected one of"):
        C.tuned(load_hardware("nvlink4").spec.nccl, 450e9, "alltoall", 1e6, 4)
