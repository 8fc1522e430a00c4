"""simulate_requests(threads=N) / attnsim dram --threads: channel groups in parallel threads give exactly the
one-thread results; the setting is refused where it cannot take effect."""

import json

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.cli.dram import device_spec
from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import simulate_requests

SPEC = device_spec("hbm3_6400", channels=4)


def _fields(r):
    return (
        r.cycles,
        list(r.cycles_per_channel),
        r.row_hits,
        r.row_misses,
        r.row_conflicts,
        r.mean_latency_cycles,
        r.skipped_requests,
        r.skip_jumps,
        r.extrapolated,
        {k: float(v) for k, v in r.energy_j.items()},
    )


@pytest.mark.parametrize("threads", [2, 3, 4])  # at most the 4 channels of SPEC (check_threads)
def test_threads_give_the_one_thread_results(threads):
    """An uneven random mixed stream with arrivals (no channel symmetry), and a periodic one that recurs
    (skip-ahead jumps) on three of four channels."""
    rng = np.random.default_rng(4)
    n = 6000
    addr = (rng.integers(0, SPEC.capacity_bytes // 64, n) * 64).astype(np.uint64)
    addr[rng.random(n) < 0.4] &= ~np.uint64(0xC0)  # channel 0 (Ch is the low field) gets more requests
    w = rng.random(n) < 0.3
    arr = np.sort(rng.integers(0, 4 * n, n))
    one = simulate_requests(SPEC, addr, w, arr, controller="ramulator2")
    many = simulate_requests(SPEC, addr, w, arr, controller="ramulator2", threads=threads)
    assert _fields(many) == _fields(one)
    addr = _recurring_two_channels()
    one = simulate_requests(SPEC2, addr, False, controller="ramulator2", mapping=MAP2)
    many = simulate_requests(SPEC2, addr, False, controller="ramulator2", mapping=MAP2, threads=min(threads, 2))
    assert one.skip_jumps == 2 and _fields(many) == _fields(one)


SPEC2 = device_spec("hbm3_6400", channels=2)
MAP2 = "PcRaBgBaRoCoCh"


def _recurring_two_channels(n: int = 1_000_000) -> np.ndarray:
    """The cross-check's sequential HBM3 stream (it recurs after 75,776 requests) on each of two channels
    (the channel bit below the column), channel 1 ending 1,000 requests early (no channel symmetry)."""
    from attnsim.hwmodels.dram.streams import make_stream

    a = make_stream(device_spec("hbm3_6400", channels=1).org, "seq", n, 0)[0].astype(np.uint64)
    addr = np.empty(2 * n, np.uint64)
    for c in (0, 1):
        addr[c::2] = ((a >> np.uint64(5)) << np.uint64(6)) | np.uint64(c << 5) | (a & np.uint64(31))
    return addr[:-2001]


def test_serial_kernel_skips_on_every_channel():
    """One kernel call over both channels jumps on each (a previous channel's per-bank floors LA / LW were left
    in the scratch state and kept the next channel's canonical state from ever matching: fixed in flat.py)."""
    addr = _recurring_two_channels()
    r = simulate_requests(SPEC2, addr, False, controller="ramulator2", mapping=MAP2)
    full = simulate_requests(SPEC2, addr, False, controller="ramulator2", mapping=MAP2, skip_ahead=False)
    assert r.skip_jumps == 2 and r.skipped_requests > 1_500_000
    assert _fields(r)[:6] == _fields(full)[:6]  # cycles, per channel, hits, misses, conflicts, latency


def test_threads_with_steady_state_extrapolation_equal_one_thread():
    seq = np.arange(3_000_000, dtype=np.uint64) * np.uint64(32)  # settles within the 64 recorded windows
    one = simulate_requests(SPEC, seq, False, extrapolate=True, symmetry=False)
    many = simulate_requests(SPEC, seq, False, extrapolate=True, symmetry=False, threads=2)
    assert one.extrapolated and _fields(many) == _fields(one)


@pytest.mark.parametrize(
    "kw,spec,match",
    [
        ({"threads": 0}, SPEC, r"threads: expected an integer in \[1, 1024\], got 0"),
        ({"threads": 2.0}, SPEC, "threads: expected an integer"),
        ({"threads": True}, SPEC, "threads: expected an integer"),
        (
            {"threads": 2},
            device_spec("hbm3_6400", channels=1),
            r"threads: threads run channels apart: expected at most 1 \(the device's channels\), got 2",
        ),
        (
            {"threads": 5},
            SPEC,
            r"threads: threads run channels apart: expected at most 4 \(the device's channels\), got 5",
        ),
        ({"threads": 2, "scheduler": "heap"}, SPEC, "threads: threads > 1 run only in the fast scheduler"),
        ({"threads": 2, "emit": True}, SPEC, "threads: threads > 1 run only in the fast scheduler"),
        ({"threads": 2, "controller": "dramsim3"}, SPEC, "threads: threads > 1 run only in the fast scheduler"),
    ],
)
def test_threads_refused_where_they_cannot_take_effect(kw, spec, match):
    with pytest.raises(ConfigError, match=match):
        simulate_requests(spec, np.arange(64, dtype=np.int64) * 64, False, **kw)


def test_cli_threads(tmp_path, capsys):
    base = ["dram", "--device", "hbm3_6400", "--channels", "4", "--pattern", "random", "--requests", "4000", "--json"]
    assert main(base) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(base + ["--threads", "2"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in one.items() if "wall" not in k and k != "compile_s"} == {
        k: v for k, v in two.items() if "wall" not in k and k != "compile_s"
    }
    assert main(["dram", "--device", "hbm3_6400", "--channels", "1", "--threads", "2"]) == 2
    assert (
        "--threads: threads run channels apart: expected at most 1 (the device's channels), got 2"
        in capsys.readouterr().err
    )
    # the same rule on 8 channels (--threads 64 was accepted and ran 8 threads on main)
    assert main(["dram", "--device", "hbm3_6400", "--channels", "8", "--threads", "64"]) == 2
    assert (
        "--threads: threads run channels apart: expected at most 8 (the device's channels), got 64"
        in capsys.readouterr().err
    )
    t = tmp_path / "t.trace"
    t.write_text("LD 0x0\n")
    assert (
        main(
            [
                "dram",
                "convert",
                "--device",
                "hbm3_6400",
                "--trace",
                str(t),
                "--out",
                str(tmp_path / "o.npy"),
                "--threads",
                "2",
            ]
        )
        == 2
    )
    assert "--threads: has no effect with 'convert'" in capsys.readouterr().err
    assert not (tmp_path / "o.npy").exists()
