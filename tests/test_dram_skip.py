"""Exact skip-ahead over recurring controller states (hwmodels/dram/recur.py): on every stream the results with
skip-ahead equal those of issuing every command (cycles, every statistic, latency, energy), and on periodic
streams it does skip."""

import json
import subprocess
import sys

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import load_dram_spec, simulate_requests


def _spec(name, nrefi=None, channels=None):
    """A preset with a shorter refresh interval (so streams recur sooner) and / or another channel count,
    validated like any spec (nRFC < nREFI, ...)."""
    from attnsim.hwmodels.dram.spec import spec_from_dict

    d = load_dram_spec(name).model_dump()
    d.pop("timing_ns", None)
    d["org"].pop("transfers_per_ck", None)
    if nrefi:
        d["timing"].update(nREFI=nrefi, nREFIpb=max(nrefi // 8, 64))
    if channels:
        d["org"]["channels"] = channels
    return spec_from_dict(d, file=f"{name} (test)")


def _both(spec, addr, w, arr=None, **kw):
    a = simulate_requests(spec, addr, w, arr, **kw)
    b = simulate_requests(spec, addr, w, arr, skip_ahead=False, **kw)
    assert b.skipped_requests == 0
    assert (a.cycles, a.counts, a.mean_latency_cycles) == (b.cycles, b.counts, b.mean_latency_cycles)
    assert a.energy_j == b.energy_j and a.refresh_time_s == b.refresh_time_s and a.bytes == b.bytes
    return a


def _seq(spec, n, stride_bursts=1):
    return (np.arange(n, dtype=np.uint64) * np.uint64(stride_bursts * spec.org.burst_bytes), np.zeros(n, bool))


# (device, controller, refresh, page, write pattern, stride in bursts, short nREFI, channels)
CASES = [
    ("hbm3_6400", "ramulator2", "ab", "open", None, 1, 900, 1),
    ("hbm3_6400", "ideal", "ab", "open", None, 1, 900, 2),
    ("hbm3_6400", "ramulator2", "ab", "closed", None, 1, 2000, 1),
    ("hbm3_6400", "ideal", "pb", "open", None, 1, 900, 2),
    ("hbm3_6400", "ramulator2", "pb", "open", 7, 1, 900, 1),
    ("hbm3_6400", "ramulator2", "none", "open", None, 64, None, 1),
    ("hbm2_2000", "ramulator2", "ab", "open", 4, 1, 900, 1),
    ("hbm2_2000", "ideal", "ab", "closed", 3, 1, 900, 1),
    ("lpddr5_6400", "ramulator2", "ab", "open", None, 1, 900, 1),
    ("lpddr5_6400", "ramulator2", "ab", "closed", 3, 1, 900, 1),
    ("lpddr5_6400", "ideal", "pb", "open", 5, 1, 900, 1),
    ("ddr5_4800", "ramulator2", "ab", "open", 2, 1, 900, 1),
    ("ddr5_4800", "ideal", "none", "closed", None, 8, None, 1),
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
        p = _cli(
            "--device",
            "hbm3_6400",
            "--channels",
            "1",
            "--trace",
            str(trace),
            "--mapping",
            MAPPING,
            "--controller",
            "ramulator2",
            "--json",
            *extra,
        )
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    a, b = outs
    assert a["skipped_requests"] > 0 and a["skip_jumps"] >= 1 and b["skipped_requests"] == 0
    for k in ("cycles", "row_hits", "row_misses", "row_conflicts", "mean_latency_cycles", "energy_j"):
        assert a[k] == b[k]


@pytest.mark.parametrize(
    "args, word",
    [
        (["--pattern", "sequential", "--no-skip-ahead"], "--no-extrapolate"),
        (["--pattern", "random", "--controller", "dramsim3", "--no-skip-ahead"], "dramsim3"),
    ],
)
def test_cli_refuses_no_skip_ahead_where_it_has_no_effect(args, word):
    p = _cli("--device", "hbm2_2000", "--requests", "1000", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "--no-skip-ahead" in p.stderr and word in p.stderr


@pytest.mark.parametrize("seed", range(24))
def test_skip_ahead_exact_on_random_periodic_streams(seed):
    """A random block of requests (banks, rows, columns, reads / writes) repeated with every row shifted by a
    constant each time, on a random device / preset / refresh mode / page policy / queue depth, arrivals all at
    0 or spaced: identical to issuing every command, whether or not a recurrence is found (9 of the 24 do)."""
    rng = np.random.default_rng(1000 + seed)
    name = ["hbm3_6400", "hbm2_2000", "lpddr5_6400", "ddr5_4800"][seed % 4]
    spec = _spec(name, int(rng.choice([900, 2000, 4000])), 1)
    o = spec.org
    block = int(rng.integers(8, 400))
    reps = 40_000 // block + 1
    drow = int(rng.integers(0, 3))
    bank_bits = int(rng.integers(0, 5))
    units = o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group
    u = rng.integers(0, min(units, 1 << bank_bits), block)
    row0 = rng.integers(0, 64, block)
    col = rng.integers(0, o.columns, block)
    wb = rng.random(block) < rng.choice([0.0, 0.2, 0.6])
    rows = (row0[None, :] + drow * np.arange(reps)[:, None]).ravel() % o.rows
    uu = np.tile(u, reps)
    mapping = "PcRaBgBaRoCo" if o.pseudo_channels > 1 else "RaBgBaRoCo"
    if o.ranks == 1:
        mapping = mapping.replace("Ra", "")
    addr = np.zeros(uu.shape[0], np.uint64)
    P, R, G, B = o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group
    fields = {
        "Pc": (uu % P, P),
        "Ra": ((uu // (P * G)) % R, R),
        "Bg": ((uu // P) % G, G),
        "Ba": (uu // (P * G * R), B),
        "Ro": (rows, o.rows),
        "Co": (np.tile(col, reps), o.columns),
    }
    for f in ("Pc", "Ra", "Bg", "Ba", "Ro", "Co"):
        if f in mapping:
            val, size = fields[f]
            addr = addr * np.uint64(size) + val.astype(np.uint64)
    addr *= np.uint64(o.burst_bytes)
    gap = int(rng.choice([0, 0, 2, 7]))
    arr = np.arange(addr.shape[0]) * gap if gap else None
    kw = dict(
        mapping=mapping,
        controller=["ideal", "ramulator2"][seed % 2 if seed < 12 else (seed // 4) % 2],
        refresh=["ab", "pb", "none"][seed % 3],
        page=["open", "closed"][(seed // 3) % 2],
        queue=int(rng.choice([4, 16, 32])),
    )
    _both(spec, addr, np.tile(wb, reps), arr, **kw)


def test_a_spec_whose_refresh_never_ends_is_refused_not_run_forever():
    """nRFC >= nREFI (a spec built with model_copy, which skips the spec validators) livelocked the controller:
    the refresh is refused when the kernel's parameters are built."""
    spec = load_dram_spec("hbm2_2000")
    bad = spec.model_copy(update=dict(timing=spec.timing.model_copy(update=dict(nREFI=300))))
    addr, w = _seq(spec, 20)
    with pytest.raises(ConfigError, match="nRFC"):
        simulate_requests(bad, addr, w)
    assert simulate_requests(bad, addr, w, refresh="none").cycles > 0


def _one_bank_rows(spec, n):
    """Every request to bank 0 of channel 0, each to the next row (default mapping)."""
    o = spec.org
    rowstride = o.columns * o.bank_groups * o.pseudo_channels * o.banks_per_group * o.ranks
    return np.arange(n, dtype=np.uint64) * np.uint64(rowstride * o.burst_bytes), np.zeros(n, bool)


@pytest.mark.parametrize("n", [100, 6000])
def test_skip_ahead_latency_exact_when_queued_requests_arrived_otherwise(n):
    """Found by fuzzing (3,870 streams): requests queued at the saved state whose (old) arrivals do not follow the
    period's shift. Their arrivals do not change the schedule but count in the latency, so the input must be
    periodic from the oldest queued request on: the first 83 arrive at 0, the rest at 342 (queue 1), and a
    backlog of 40 at 0 followed by one request every nRC (queue 8)."""
    spec = _spec("hbm2_2000", channels=1)
    addr = np.arange(n, dtype=np.uint64) * np.uint64(512 * spec.org.burst_bytes)
    arr = np.zeros(n, np.int64)
    arr[83:] = 342
    _both(spec, addr, np.zeros(n, bool), arr, queue=1, controller="ramulator2", refresh="none")
    addr, w = _one_bank_rows(spec, n)
    arr = np.zeros(n, np.int64)
    arr[40:] = spec.timing.nRC * np.arange(n - 40)
    a = _both(spec, addr, w, arr, queue=8, controller="ideal", refresh="none")
    assert a.skipped_requests > 0 or n < 1000
