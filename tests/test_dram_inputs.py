"""DRAM engine on idle gaps (closed-form refresh == walk == reference) and `attnsim dram` on bad input."""
import numpy as np
import pytest

from attnsim.hwmodels.dram import Op, cmds_from, load_dram_spec, raw_run, run_commands, simulate_requests
from attnsim.hwmodels.dram.reference import reference_run
from dram_streams import random_stream


def _short_refresh(name, **org):
    spec = load_dram_spec(name)
    t = spec.timing.model_copy(update=dict(nREFI=900, nREFIpb=200))
    spec = spec.model_copy(update=dict(timing=t))
    if org:
        spec = spec.model_copy(update=dict(org=spec.org.model_copy(update=org)))
    return spec


def _gappy(rng, spec, n, gap_max):
    addr = rng.integers(0, 1 << 22, n) * spec.org.burst_bytes
    w = rng.random(n) < 0.3
    arr = np.cumsum(rng.integers(0, 10, n) + (rng.random(n) < 0.08) * rng.integers(1000, gap_max, n))
    return addr, w, arr


@pytest.mark.parametrize("seed", range(6))
def test_idle_gap_refresh_closed_form_equals_walk(seed):
    """Requests with idle gaps of 1e3..3e5 cycles (up to ~300 refresh windows): the closed-form refresh of idle
    ranks gives the walk's cycles, counts, energy and latency, for every scheduler, ab and pb, open and closed
    page, one and two ranks; the emitted stream (REF records included) still replays to the same cycles."""
    rng = np.random.default_rng(seed)
    name = ["hbm3_6400", "lpddr5_6400", "ddr5_4800"][seed % 3]
    spec = _short_refresh(name, **({"ranks": 2} if seed % 2 else {}))
    addr, w, arr = _gappy(rng, spec, 120, 300_000)
    assert np.diff(arr).max() > 100 * spec.timing.nREFI
    for mode in ("ab", "pb"):
        for page in ("open", "closed"):
            kw = dict(page=page, queue=int(rng.integers(1, 40)), refresh=mode, emit=True)
            walk = simulate_requests(spec, addr, w, arr, scheduler="scan", idle_skip=False, **kw)
            for sched in ("scan", "fast", "heap"):
                r = simulate_requests(spec, addr, w, arr, scheduler=sched, **kw)
                assert (r.cycles, r.counts, r.mean_latency_cycles) == (walk.cycles, walk.counts,
                                                                        walk.mean_latency_cycles), (sched, mode, page)
                assert r.energy_j == walk.energy_j
                cyc, _ = raw_run(spec, r.commands, refresh="none")
                assert int(cyc.max()) == r.cycles


def _engine_specs():
    out = {}
    for name in ("hbm3_5200_pim", "lpddr5_6400", "ddr5_4800"):
        s = load_dram_spec(name)
        t = s.timing.model_copy(update=dict(nREFI=400, nRFC=100, nREFIpb=100, nRFCpb=40))
        out[name] = s.model_copy(update=dict(timing=t))
    return out


ENGINE_SPECS = _engine_specs()


@pytest.mark.parametrize("seed", range(12))
def test_idle_gap_engine_equals_reference_and_walk(seed):
    """Command streams with arrival gaps of up to 2e4 cycles (50 refresh windows): engine with closed-form idle
    refresh == engine walking every refresh == the plain-Python reference (cycles and every statistic)."""
    name = sorted(ENGINE_SPECS)[seed % 3]
    spec = ENGINE_SPECS[name]
    mode = ("ab", "pb")[seed % 2]
    c = random_stream(np.random.default_rng(seed), spec, 14, pim=spec.pim is not None, channels=2, max_gap=20_000)
    a, sa = raw_run(spec, c, mode)
    w, sw = raw_run(spec, c, mode, idle_skip=False)
    b, sb = reference_run(spec, c, mode)
    assert np.array_equal(a, w) and np.array_equal(sa, sw)
    assert np.array_equal(a, b) and np.array_equal(sa, sb)


@pytest.mark.parametrize("mode", ["ab", "pb"])
def test_gap_of_1e15_cycles_counts_every_refresh(mode):
    """A 1e15-cycle gap (2.6e11 refresh windows) runs in closed form: the refresh count is the number of refresh
    dues in the run (floor((cycles - first due) / period) + 1 per rank), as the walk would count it."""
    spec = load_dram_spec("hbm3_6400")
    o, t = spec.org, spec.timing
    gap = 10 ** 15
    one_ch = o.burst_bytes * o.channels * o.pseudo_channels  # address step that stays on channel 0, pch 0
    r = simulate_requests(spec, np.array([0, 3, 7]) * one_ch, np.array([0, 0, 1]), np.array([0, gap, 2 * gap]),
                          refresh=mode)
    per = t.nREFIpb if mode == "pb" else t.nREFI
    ranks = o.pseudo_channels * o.ranks  # of the one channel used
    assert r.cycles > 2 * gap
    assert r.refreshes == ranks * ((r.cycles - per) // per + 1)
    assert r.energy_j["dram_refresh"] > 0 and np.isfinite(r.energy_total_j)
    c = cmds_from(op=[Op.RD, Op.RD, Op.WR], pch=[0, 0, 0], rank=[0, 0, 0], bg=[0, 1, 0], bank=[0, 0, 0],
                  row=[1, 2, 3], arrival=[0, gap, 2 * gap])
    e = run_commands(spec, c, refresh=mode)
    assert e.cycles > 2 * gap and e.refreshes == ranks * ((e.cycles - per) // per + 1)
