"""links.collective() / cost() ring and tree branches against the textbook formulas, each term on its own.

Ring all-reduce of S bytes per rank over p ranks (reduce-scatter + all-gather, 2(p-1) steps of S/p bytes):
    t = 2 (p-1)/p x S / bw + 2 (p-1) x latency
    (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009;
    Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005, §4 for the all-gather / reduce-scatter halves:
    (p-1)/p x S / bw + (p-1) x latency each).
Tree all-reduce: NCCL's (double binary) tree reduces up and broadcasts down a tree of depth ceil(log2 p), so its
latency is 2 ceil(log2 p) steps while the two trees together keep the full ring bandwidth term
(NCCL docs / NVIDIA developer blog "Massively Scale Your Deep Learning Training with NCCL 2.4", Jeaugey 2019:
double binary trees give full bandwidth at logarithmic latency; the model's tree: hwmodels/links.py LinkSpec).

Synthetic link with round numbers so every term is a short hand calculation: 100 GB/s per direction at efficiency
0.5 (achieved bw = 50e9 B/s), 2 us per step, 1 pJ/bit.
"""

import numpy as np
import pytest

from attnsim.hwmodels.links import LinkModel, LinkSpec
from attnsim.workloads.optrace import OpTrace

BW = 100e9 * 0.5  # achieved bandwidth, B/s
LAT = 2e-6  # latency per message / step, s
S = 1e6  # bytes per rank


def _link(algo: str, latency_us=2.0, bandwidth_gbps=100.0) -> LinkModel:
    return LinkModel(
        LinkSpec(
            name=algo,
            bandwidth_gbps=bandwidth_gbps,
            latency_us=latency_us,
            energy_pj_per_bit=1.0,
            efficiency=0.5,
            allreduce=algo,
        )
    )


def _t(link, coll, s, p):
    t, choice = link.collective(coll, s, p)
    return float(t), str(np.asarray(choice).reshape(-1)[0]) if np.asarray(choice).size else ""


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_ring_allreduce_bandwidth_term(p):
    # latency 0 leaves the bandwidth term alone: 2 (p-1)/p x 1e6 / 50e9; p = 4: 1.5e6 / 50e9 = 30 us
    t, choice = _t(_link("ring", latency_us=0.0), "allreduce", S, p)
    assert t == pytest.approx(2 * (p - 1) / p * S / BW, rel=1e-12)
    assert choice == "ring"


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_ring_allreduce_latency_term(p):
    # 0 bytes leaves the latency term alone: 2 (p-1) steps x 2 us; p = 8: 14 x 2 us = 28 us
    t, _ = _t(_link("ring"), "allreduce", 0.0, p)
    assert t == pytest.approx(2 * (p - 1) * LAT, rel=1e-12)


def test_ring_allreduce_both_terms_by_hand():
    # p = 4, S = 1e6: 2 x 3/4 x 1e6 / 50e9 = 30 us, + 2 x 3 x 2 us = 12 us -> 42 us
    t, _ = _t(_link("ring"), "allreduce", S, 4)
    assert t == pytest.approx(42e-6, rel=1e-12)
    assert float(_link("ring").allreduce_time_s(S, 4)) == pytest.approx(42e-6, rel=1e-12)


@pytest.mark.parametrize("p, depth", [(2, 1), (3, 2), (4, 2), (5, 3), (6, 3), (8, 3), (9, 4), (16, 4)])
def test_tree_allreduce_latency_is_two_tree_depths(p, depth):
    # depth = ceil(log2 p) (hand: 2->1, 3->2, 4->2, 5->3, 6->3, 8->3, 9->4, 16->4); up and down: 2 x depth steps
    t, choice = _t(_link("tree"), "allreduce", 0.0, p)
    assert t == pytest.approx(2 * depth * LAT, rel=1e-12)
    assert choice == "tree"
    assert float(_link("tree").latency_steps(p)) == 2 * depth


def test_one_rank_has_no_latency_steps():
    # log2 1 = 0 levels (tree), p - 1 = 0 steps (ring)
    assert float(_link("tree").latency_steps(1)) == 0.0
    assert float(_link("ring").latency_steps(1)) == 0.0


@pytest.mark.parametrize("p", [2, 4, 6, 8])
def test_tree_allreduce_bandwidth_term_equals_ring(p):
    # double binary tree: full bandwidth, the same 2 (p-1)/p x S / bw as the ring
    t, _ = _t(_link("tree", latency_us=0.0), "allreduce", S, p)
    assert t == pytest.approx(2 * (p - 1) / p * S / BW, rel=1e-12)


def test_tree_allreduce_both_terms_by_hand():
    # p = 6, S = 1e6: 2 x 5/6 x 1e6 / 50e9 = 33.333 us, + 2 x ceil(log2 6) = 6 steps x 2 us = 12 us
    t, _ = _t(_link("tree"), "allreduce", S, 6)
    assert t == pytest.approx(2 * 5 / 6 * 1e6 / 50e9 + 12e-6, rel=1e-12)


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_one_rank_collectives_cost_nothing(algo):
    # p = 1: no peer, nothing moves (both terms have a factor (p-1) or log2 1 = 0)
    for coll in ("allreduce", "allgather", "reducescatter"):
        t, _ = _t(_link(algo), coll, S, 1)
        assert t == 0.0, coll
        t, _ = _link(algo).collective(coll, np.array([0.0, S]), 1)  # 0 bytes: 0 s, not 0 / 0
        assert list(t) == [0.0, 0.0], coll


@pytest.mark.parametrize("coll", ["allgather", "reducescatter"])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_allgather_and_reducescatter_are_half_an_allreduce(coll, p):
    # (p-1)/p x S / bw + (p-1) x latency; p = 4: 0.75 x 1e6 / 50e9 = 15 us + 3 x 2 us = 21 us
    t, _ = _t(_link("ring"), coll, S, p)
    assert t == pytest.approx((p - 1) / p * S / BW + (p - 1) * LAT, rel=1e-12)
    t0, _ = _t(_link("ring", latency_us=0.0), coll, S, p)
    assert t0 == pytest.approx((p - 1) / p * S / BW, rel=1e-12)


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_sendrecv_is_one_transfer(algo):
    # latency + S / bw = 2 us + 1e6 / 50e9 = 22 us, whatever the rank count
    for p in (2, 8):
        t, _ = _t(_link(algo), "sendrecv", S, p)
        assert t == pytest.approx(22e-6, rel=1e-12)


def test_vector_sizes_keep_their_shape():
    sizes = np.array([0.0, 1e3, 1e6])
    t, choice = _link("ring").collective("allreduce", sizes, 4)
    assert t.shape == choice.shape == (3,)
    assert list(choice) == ["ring"] * 3
    # 2 x 3/4 x s / 50e9 + 6 x 2 us
    assert t == pytest.approx(1.5 * sizes / BW + 12e-6, rel=1e-12)


def test_bandwidth_uses_efficiency_and_peak_does_not():
    link = _link("ring")
    assert link.bandwidth_bytes_per_s == 50e9  # 100 GB/s x 0.5
    assert link.peak_bandwidth_bytes_per_s == 100e9
    assert link.latency_s == pytest.approx(2e-6)


def test_energy_counts_every_bit_sent_once():
    link = _link("ring")
    # one transfer of 1e6 B: 8e6 bits x 1 pJ = 8 uJ
    assert float(link.transfer_energy_j(S)) == pytest.approx(8e-6, rel=1e-12)
    # all-reduce: all p ranks send 2 (p-1)/p x S each = 2 (p-1) S in all; p = 4: 6e6 B x 8 x 1 pJ = 48 uJ
    assert float(link.allreduce_energy_j(S, 4)) == pytest.approx(48e-6, rel=1e-12)
    assert float(link.allreduce_energy_j(S, 1)) == 0.0


def _trace(rows, tp):
    return OpTrace.from_rows(
        rows, phase="decode", model="x", tp=tp, query_tokens=np.ones(1), context_lens=np.ones(1), groups=[]
    )


@pytest.mark.parametrize("algo, steps", [("ring", 2 * 7), ("tree", 2 * 3)])
def test_cost_of_allreduce_and_transfer_rows(algo, steps):
    tp = 8
    comm = 2 * (tp - 1) / tp * S  # trace's comm_bytes for an all-reduce of S (workloads/trace.py)
    tr = _trace(
        [
            dict(op="ar", cls="allreduce", count=1, comm_bytes=comm),
            dict(op="x", cls="transfer", count=1, comm_bytes=S),
            dict(op="mm", cls="matmul", count=1, m=1, n=1, k=1),
        ],
        tp,
    )
    c = _link(algo).cost(tr, np.arange(3))
    # all-reduce: 1.75e6 / 50e9 = 35 us + steps x 2 us (ring 14 -> 63 us, tree 6 -> 47 us)
    assert c.time_s[0] == pytest.approx(comm / BW + steps * LAT, rel=1e-12)
    # transfer: every rank moves S over its own link: 2 us + 20 us
    assert c.time_s[1] == pytest.approx(LAT + S / BW, rel=1e-12)
    assert c.time_s[2] == 0.0
    # bytes over all ranks: all-reduce 8 x 1.75e6 = 14e6 B; transfer 8 x 1e6 = 8e6 B; energy 8 bits x 1 pJ each
    assert c.bytes_by_level["link"] == pytest.approx([tp * comm, tp * S, 0.0])
    assert c.energy_j["link"] == pytest.approx([tp * comm * 8e-12, tp * S * 8e-12, 0.0])
    assert list(c.bound) == ["link"] * 3 and list(c.flops) == [0.0] * 3


def test_cost_on_two_ranks():
    # p = 2: comm = 2 x 1/2 x S = S; ring 2 x (2-1) = 2 steps: 1e6 / 50e9 = 20 us + 4 us = 24 us; bytes 2 x 1e6
    tr = _trace([dict(op="ar", cls="allreduce", count=1, comm_bytes=S)], 2)
    c = _link("ring").cost(tr, np.arange(1))
    assert c.time_s[0] == pytest.approx(24e-6, rel=1e-12)
    assert c.bytes_by_level["link"][0] == pytest.approx(2 * S)


@pytest.mark.parametrize("algo", ["ring", "nccl"])
def test_one_byte_transfer_still_pays_the_latency(algo):
    # a transfer row of 1 B: ring = 2 us + 1 / 50e9 s; nccl = its send/recv of 1 B between 2 ranks (> 0)
    if algo == "ring":
        link = _link("ring")
        expect = LAT + 1 / BW
    else:
        from attnsim.hwmodels.gpu import load_hardware

        link = LinkModel(load_hardware("nvlink4").spec.model_copy(update={"allreduce": "nccl"}))
        expect = float(link.collective("sendrecv", 1.0, 2)[0])
        assert expect > 0
    c = link.cost(_trace([dict(op="x", cls="transfer", count=1, comm_bytes=1.0)], 8), np.arange(1))
    assert c.time_s[0] == pytest.approx(expect, rel=1e-12)


def test_zero_latency_and_zero_static_power_are_valid():
    # 0 is the physical lower limit of both (ge=0); a negative value is refused
    assert LinkSpec(name="z", bandwidth_gbps=1, latency_us=0.0, energy_pj_per_bit=0.0, static_power_w=0.0)
    for bad in ({"latency_us": -1.0}, {"static_power_w": -0.1}, {"energy_pj_per_bit": -1.0}):
        with pytest.raises(ValueError):
            LinkSpec(**{"name": "z", "bandwidth_gbps": 1, "latency_us": 1.0, "energy_pj_per_bit": 1.0, **bad})


def test_cost_on_one_rank_keeps_only_transfers():
    tr = _trace(
        [dict(op="ar", cls="allreduce", count=1, comm_bytes=0.0), dict(op="x", cls="transfer", count=1, comm_bytes=S)],
        1,
    )
    c = _link("ring").cost(tr, np.arange(2))
    assert c.time_s[0] == 0.0
    assert c.time_s[1] == pytest.approx(22e-6, rel=1e-12)
    assert c.bytes_by_level["link"] == pytest.approx([0.0, S])
