"""Exact skip-ahead over recurring controller states (hwmodels/dram/recur.py): on every stream the results with
skip-ahead equal those of issuing every command (cycles, every statistic, latency, energy), and on periodic
streams it does skip."""
import json
import subprocess
import sys

import numpy as np
import pytest

from attnsim.config import ConfigError
from attnsim.hwmodels.dram import load_dram_spec, simulate_requests


def _spec(name, nrefi=None, channels=None):
    spec = load_dram_spec(name)
    upd = {}
    if nrefi:
        upd["timing"] = spec.timing.model_copy(update=dict(nREFI=nrefi, nREFIpb=max(nrefi // 8, 64)))
    if channels:
        upd["org"] = spec.org.model_copy(update=dict(channels=channels))
    return spec.model_copy(update=upd) if upd else spec


def _both(spec, addr, w, arr=None, **kw):
    a = simulate_requests(spec, addr, w, arr, **kw)
    b = simulate_requests(spec, addr, w, arr, skip_ahead=False, **kw)
    assert b.skipped_requests == 0
    assert (a.cycles, a.counts, a.mean_latency_cycles) == (b.cycles, b.counts, b.mean_latency_cycles)
    assert a.energy_j == b.energy_j and a.refresh_time_s == b.refresh_time_s and a.bytes == b.bytes
    return a


def _seq(spec, n, stride_bursts=1):
    return (np.arange(n, dtype=np.uint64) * np.uint64(stride_bursts * spec.org.burst_bytes),
            np.zeros(n, bool))


# (device, controller, refresh, page, write pattern, stride in bursts, short nREFI, channels)
CASES = [
    ("hbm3_6400", "ramulator2", "ab", "open", None, 1, 900, 1),
    ("hbm3_6400", "attnsim", "ab", "open", None, 1, 900, 2),
    ("hbm3_6400", "ramulator2", "ab", "closed", None, 1, 2000, 1),
    ("hbm3_6400", "attnsim", "pb", "open", None, 1, 900, 2),
    ("hbm3_6400", "ramulator2", "pb", "open", 7, 1, 900, 1),
    ("hbm3_6400", "ramulator2", "none", "open", None, 64, None, 1),
    ("hbm2_2000", "ramulator2", "ab", "open", 4, 1, 900, 1),
    ("hbm2_2000", "attnsim", "ab", "closed", 3, 1, 900, 1),
    ("lpddr5_6400", "ramulator2", "ab", "open", None, 1, 900, 1),
    ("lpddr5_6400", "ramulator2", "ab", "closed", 3, 1, 900, 1),
    ("lpddr5_6400", "attnsim", "pb", "open", 5, 1, 900, 1),
    ("ddr5_4800", "ramulator2", "ab", "open", 2, 1, 900, 1),
    ("ddr5_4800", "attnsim", "none", "closed", None, 8, None, 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c))
def test_skip_ahead_equals_issuing_every_command_on_periodic_streams(case):
    name, ctrl, refresh, page, wevery, stride, nrefi, channels = case
    spec = _spec(name, nrefi, channels)
    n = 300_000
    addr, w = _seq(spec, n, stride)
    if wevery:
        w = np.arange(n) % wevery == 0
    a = _both(spec, addr, w, controller=ctrl, refresh=refresh, page=page)
    assert a.skipped_requests > 0 and a.skip_jumps >= 1


@pytest.mark.parametrize("extra", [0, 1, 777])
def test_skip_ahead_exact_whatever_the_stream_end(extra):
    """Partial last period: the jump stops a period short of where the stream stops being periodic."""
    spec = _spec("hbm2_2000", 900, 1)
    addr, w = _seq(spec, 200_000 + extra)
    a = _both(spec, addr, w, controller="ramulator2")
    assert a.skipped_requests > 0


def test_skip_ahead_exact_across_a_break_in_the_period():
    """One request moved in the middle and a random tail: jumps before the break, none across it."""
    spec = _spec("hbm2_2000", 900, 1)
    n = 400_000
    addr, w = _seq(spec, n)
    addr[250_001] = addr[3] + np.uint64(1 << 20)
    rng = np.random.default_rng(3)
    addr[350_000:] = rng.integers(0, 1 << 24, n - 350_000).astype(np.uint64) * np.uint64(spec.org.burst_bytes)
    a = _both(spec, addr, w, controller="ramulator2")
    assert 0 < a.skipped_requests < 350_000 and a.skip_jumps >= 2


@pytest.mark.parametrize("gap", [3, 5])
def test_skip_ahead_with_arrivals_shifting_by_the_period(gap):
    """Timed streams (arrival = gap x index) below saturation: arrivals shift with the period."""
    spec = _spec("hbm2_2000", 900, 1)
    n = 600_000
    addr, w = _seq(spec, n)
    a = _both(spec, addr, w, np.arange(n) * gap, controller="ramulator2")
    assert a.skipped_requests > 0


def test_skip_ahead_exact_on_a_saturated_timed_stream():
    """Arrivals faster than service (1 per cycle, served every ~1.76): the backlog grows, so the arrivals drift
    against the horizon of admission and no state recurs; the result is that of issuing every command."""
    spec = _spec("hbm2_2000", 900, 1)
    n = 200_000
    addr, w = _seq(spec, n)
    a = _both(spec, addr, w, np.arange(n), controller="ramulator2")
    assert a.cycles > 1.7 * n


def test_no_skip_on_random_streams_and_identical_results():
    spec = _spec("hbm3_6400", channels=1)
    rng = np.random.default_rng(5)
    n = 60_000
    addr = rng.integers(0, 1 << 26, n).astype(np.uint64) * np.uint64(spec.org.burst_bytes)
    a = _both(spec, addr, rng.random(n) < 0.3, controller="ramulator2")
    assert a.skipped_requests == 0


def test_skip_ahead_required_where_the_scheduler_lacks_it_is_refused():
    spec = _spec("hbm2_2000")
    addr, w = _seq(spec, 100)
    for kw in (dict(scheduler="heap"), dict(emit=True), dict(extrapolate=True), dict(controller="dramsim3")):
        with pytest.raises(ConfigError, match="skip_ahead"):
            simulate_requests(spec, addr, w, skip_ahead=True, **kw)
    with pytest.raises(ConfigError, match="skip_ahead"):
        simulate_requests(spec, addr, w, skip_ahead="yes")
    r = simulate_requests(spec, addr, w, skip_ahead=True)
    assert r.skipped_requests == 0  # too short to recur


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "attnsim", "dram", *args], capture_output=True, text=True)


def test_cli_reports_skipped_requests_and_no_skip_ahead_gives_the_same_figures(tmp_path):
    """The bench's sequential HBM3 stream (bench/crosscheck_dram.py --speed) from a .npy trace."""
    from attnsim.hwmodels.dram.streams import MAPPING, make_stream
    from attnsim.hwmodels.dram.traces import write_npy
    spec = _spec("hbm3_6400", channels=1)
    addr, w = make_stream(spec.org, "seq", 400_000, 1)
    trace = tmp_path / "seq.npy"
    write_npy(str(trace), addr, w)
    outs = []
    for extra in ([], ["--no-skip-ahead"]):
        p = _cli("--device", "hbm3_6400", "--channels", "1", "--trace", str(trace), "--mapping", MAPPING,
                 "--controller", "ramulator2", "--json", *extra)
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    a, b = outs
    assert a["skipped_requests"] > 0 and a["skip_jumps"] >= 1 and b["skipped_requests"] == 0
    for k in ("cycles", "row_hits", "row_misses", "row_conflicts", "mean_latency_cycles", "energy_j"):
        assert a[k] == b[k]


@pytest.mark.parametrize("args, word", [
    (["--pattern", "sequential", "--no-skip-ahead"], "--no-extrapolate"),
    (["--pattern", "random", "--controller", "dramsim3", "--no-skip-ahead"], "dramsim3"),
])
def test_cli_refuses_no_skip_ahead_where_it_has_no_effect(args, word):
    p = _cli("--device", "hbm2_2000", "--requests", "1000", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "--no-skip-ahead" in p.stderr and word in p.stderr
