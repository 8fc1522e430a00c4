"""Request controller: replay equality, closed-form sequential/strided cycles, monotonicity, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.cli.dram import device_spec
from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import load_dram_spec, raw_run, simulate_requests


def one_channel(name):
    return device_spec(name, channels=1)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    page=st.sampled_from(["open", "closed"]),
    name=st.sampled_from(["hbm3_6400", "lpddr5_6400", "ddr5_4800"]),
    mode=st.sampled_from(["ab", "pb"]),
)
def test_emitted_commands_replay_to_same_cycles(seed, page, name, mode):
    """The controller's command stream (with its REF records) replays on the engine to the same cycles."""
    spec = load_dram_spec(name)
    t = spec.timing.model_copy(update=dict(nREFI=900, nREFIpb=200))
    spec = spec.model_copy(update=dict(timing=t))
    rng = np.random.default_rng(seed)
    n = 150
    addr = rng.integers(0, 1 << 22, n) * spec.org.burst_bytes
    w = rng.random(n) < 0.3
    arr = np.cumsum(rng.integers(0, 12, n))
    r = simulate_requests(spec, addr, w, arr, page=page, queue=int(rng.integers(1, 40)), refresh=mode, emit=True)
    cyc, stats = raw_run(spec, r.commands, refresh="none")
    assert int(cyc.max()) == r.cycles
    assert r.row_hits + r.row_misses + r.row_conflicts == n
    assert r.counts["rd_bursts"] + r.counts["wr_bursts"] == n


@pytest.mark.parametrize("name", ["hbm2_2000", "hbm3_6400", "lpddr5_6400"])
def test_sequential_reaches_peak_minus_refresh(name):
    """Closed form: sequential reads stream at one burst per nBL per pseudo-channel; all-bank refresh removes
    nRFC of every nREFI; row switches are hidden by a deep queue."""
    spec = one_channel(name)
    t = spec.timing
    n = 60_000
    addr = np.arange(n, dtype=np.int64) * spec.org.burst_bytes
    ideal = n / spec.org.pseudo_channels * t.nBL
    r0 = simulate_requests(spec, addr, 0, queue=256, refresh="none")
    assert ideal <= r0.cycles <= ideal * 1.02
    r = simulate_requests(spec, addr, 0, queue=256)
    expect = ideal / (1 - t.nRFC / t.nREFI)
    assert r.cycles == pytest.approx(expect, rel=0.02)
    assert r.bandwidth_gbps <= r.peak_bandwidth_gbps


def test_hbm3_sequential_default_queue_in_published_band():
    spec = one_channel("hbm3_6400")
    n = 60_000
    r = simulate_requests(spec, np.arange(n, dtype=np.int64) * 32, 0)
    # Ramulator 2.1 on a sequential HBM3-6400 stream (1M reads, one channel, refresh on): 43.42 of 51.2 GB/s = 84.8 %
    # of peak (shared/reference/dram_crosscheck.md); the default rules (ramulator2) within the project's 3 %. (The
    # band was 85-95 % for the old optimistic default, now "ideal": 46.00 GB/s = 89.8 % on that stream.)
    assert abs(r.bandwidth_gbps / r.peak_bandwidth_gbps / (43.42 / 51.2) - 1) <= 0.03


@pytest.mark.parametrize("name", ["hbm2_2000", "hbm3_6400", "lpddr5_6400"])
def test_strided_same_bank_costs_one_row_cycle_per_request(name):
    """A stride that maps every request to a new row of one bank: one row cycle per request."""
    spec = one_channel(name)
    t, o = spec.timing, spec.org
    stride = o.burst_bytes * o.channels * o.pseudo_channels * o.bank_groups * o.columns * o.banks_per_group * o.ranks
    n = 3000
    r = simulate_requests(spec, np.arange(n, dtype=np.int64) * stride, 0, refresh="none")
    per = max(t.nRC, max(t.nRAS, t.nRCDRD + t.nRTP) + t.nRP)
    assert r.row_conflicts == n - 1 and r.row_misses == 1
    assert r.cycles == (n - 1) * per + t.nRCDRD + t.nCL + t.nBL


def test_random_far_below_sequential_and_closed_page_has_no_conflicts():
    spec = one_channel("hbm3_6400")
    rng = np.random.default_rng(5)
    n = 20_000
    addr = rng.integers(0, spec.capacity_bytes // 32, n) * 32
    seq = simulate_requests(spec, np.arange(n, dtype=np.int64) * 32, 0)
    rnd = simulate_requests(spec, addr, 0)
    assert rnd.bandwidth_gbps < 0.6 * seq.bandwidth_gbps
    assert rnd.row_hits < 0.05 * n
    # closed page that closes a row after its last queued hit (ideal) or after every column access (closed_cap 1):
    # no request ever finds another row open. The default ClosedCAP cap 4 keeps a row open until its 4th access,
    # which a random stream (< 5 % hits) rarely reaches: its rows then conflict as under open page.
    from attnsim.hwmodels.dram.spec import spec_from_dict

    cap1 = spec_from_dict({**spec.model_dump(), "controller_rules": {"closed_cap": 1}})
    for closed in (
        simulate_requests(spec, addr, 0, page="closed", controller="ideal"),
        simulate_requests(cap1, addr, 0, page="closed"),
    ):
        assert closed.row_conflicts == 0
    cap4 = simulate_requests(spec, addr, 0, page="closed")
    assert cap4.row_conflicts > 0.9 * rnd.row_conflicts


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_more_banks_never_slower_in_order(seed):
    """In-order service (queue 1): the same requests over more banks are never slower."""
    rng = np.random.default_rng(seed)
    n = 400
    addr = rng.integers(0, 1 << 24, n) * 32
    w = rng.random(n) < 0.2
    cycles = [
        simulate_requests(device_spec("hbm3_6400", channels=1, banks=b), addr, w, refresh="none", queue=1).cycles
        for b in (2, 4, 8, 16)
    ]
    assert all(a >= b for a, b in zip(cycles, cycles[1:])), cycles


def test_more_banks_faster_on_average_under_fr_fcfs():
    """FR-FCFS (queue 32) is greedy, so a different bank spread can occasionally reorder a stream worse
    (a scheduling anomaly that the reference queue scan shows too: hypothesis found +20 % for one
    400-request stream going from 8 to 16 banks). Over many streams more banks must still win."""
    totals = np.zeros(4)
    for seed in range(40):
        rng = np.random.default_rng(seed)
        addr = rng.integers(0, 1 << 24, 400) * 32
        w = rng.random(400) < 0.2
        totals += [
            simulate_requests(device_spec("hbm3_6400", channels=1, banks=b), addr, w, refresh="none").cycles
            for b in (2, 4, 8, 16)
        ]
    assert np.all(np.diff(totals) < 0), totals


def test_symmetric_reduction_equals_full_simulation():
    spec = load_dram_spec("hbm3_6400")
    n = 32 * 2000
    addr = np.arange(n, dtype=np.int64) * 32
    a = simulate_requests(spec, addr, np.arange(n) % 7 == 0, symmetry=True)
    b = simulate_requests(spec, addr, np.arange(n) % 7 == 0, symmetry=False)
    assert a.cycles == b.cycles and a.row_hits == b.row_hits and a.bytes == b.bytes
    assert a.energy_total_j == pytest.approx(b.energy_total_j)


def test_mapping_letters_route_requests():
    spec = one_channel("lpddr5_6400")
    # Bg lowest: consecutive bursts rotate bank groups (nCCD_S) -> faster than Co lowest (nCCD_L in one bank)
    n = 2000
    addr = np.arange(n, dtype=np.int64) * 32
    fast = simulate_requests(spec, addr, 0, mapping="RoBaCoBgCh", queue=1, refresh="none")
    slow = simulate_requests(spec, addr, 0, mapping="RoBaBgCoCh", queue=1, refresh="none")
    t = spec.timing
    assert slow.cycles >= (n - 1) * t.nCCD_L
    assert fast.cycles < slow.cycles


def test_bad_inputs():
    spec = load_dram_spec("hbm2_2000")
    with pytest.raises(ConfigError, match="mapping.*unknown field"):
        simulate_requests(spec, [0], 0, mapping="RoXxCh")
    with pytest.raises(ConfigError, match="page"):
        simulate_requests(spec, [0], 0, page="half")
    with pytest.raises(ConfigError, match="queue"):
        simulate_requests(spec, [0], 0, queue=0)
    with pytest.raises(ConfigError, match="arrival"):
        simulate_requests(spec, [0, 32], 0, arrival=[0, -1])
