"""DRAM engine on idle gaps (closed-form refresh == walk == reference) and `attnsim dram` on bad input."""

import numpy as np
import pytest
from dram_streams import random_stream

from attnsim.hwmodels.dram import Op, cmds_from, load_dram_spec, raw_run, run_commands, simulate_requests
from attnsim.hwmodels.dram.reference_oracle import reference_run


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
                assert (r.cycles, r.counts, r.mean_latency_cycles) == (
                    walk.cycles,
                    walk.counts,
                    walk.mean_latency_cycles,
                ), (sched, mode, page)
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
    gap = 10**15
    one_ch = o.burst_bytes * o.channels * o.pseudo_channels  # address step that stays on channel 0, pch 0
    r = simulate_requests(
        spec, np.array([0, 3, 7]) * one_ch, np.array([0, 0, 1]), np.array([0, gap, 2 * gap]), refresh=mode
    )
    per = t.nREFIpb if mode == "pb" else t.nREFI
    ranks = o.pseudo_channels * o.ranks  # of the one channel used
    assert r.cycles > 2 * gap
    assert r.refreshes == ranks * ((r.cycles - per) // per + 1)
    assert r.energy_j["dram_refresh"] > 0 and np.isfinite(r.energy_total_j)
    c = cmds_from(
        op=[Op.RD, Op.RD, Op.WR],
        pch=[0, 0, 0],
        rank=[0, 0, 0],
        bg=[0, 1, 0],
        bank=[0, 0, 0],
        row=[1, 2, 3],
        arrival=[0, gap, 2 * gap],
    )
    e = run_commands(spec, c, refresh=mode)
    assert e.cycles > 2 * gap and e.refreshes == ranks * ((e.cycles - per) // per + 1)


def test_emitting_the_refreshes_of_a_huge_gap_is_refused_not_allocated():
    from attnsim.core.config import ConfigError

    with pytest.raises(ConfigError, match="emit: the emitted command stream would hold"):
        simulate_requests("hbm3_6400", np.array([0, 1024]), np.array([0, 0]), np.array([0, 10**15]), emit=True)


# ---------------------------------------------------------------- `attnsim dram` on bad input

from attnsim.cli import main  # noqa: E402

HUGE = str(2**63)
TRACES = {  # name: (trace bytes, substrings of the one error line besides the file name)
    "empty": (b"", ["no requests"]),
    "blank-and-comments": (b"\n  \n# c\n", ["no requests"]),
    "one-column": (b"0x0 R\n0x40\n", ["line 2", "expected '<hex address>"]),
    "four-columns": (b"0x0 R 1 2\n", ["line 1", "expected '<hex address>"]),
    "bad-rw": (b"0x0 X\n", ["line 1", "expected R or W"]),
    "address-word": (b"0x0 R\nzz R\n", ["line 2", "hex address"]),
    "address-negative": (b"-0x40 R\n", ["line 1", "hex address"]),
    "address-2p64": (b"0x10000000000000000 R\n", ["line 1", "hex address of at most 64 bits"]),
    "address-2p63": (b"0x8000000000000000 R\n", ["line 1", "beyond the device capacity"]),
    "address-beyond-capacity": (b"0x40 R\n0x400000000 W\n", ["line 2", "beyond the device capacity"]),
    "arrival-2p63": (f"0x0 R {HUGE}\n".encode(), ["line 1", "arrival cycle", "[0, 2**53]"]),
    "arrival-1e30": (b"0x0 R 1000000000000000000000000000000\n", ["line 1", "arrival cycle"]),
    "arrival-negative": (b"0x0 R -5\n", ["line 1", "arrival cycle"]),
    "arrival-float": (b"0x0 R 1.5\n", ["line 1", "arrival cycle"]),
    "arrival-decreasing": (b"0x0 R 10\n0x40 R 5\n", ["line 2", "must not decrease"]),
    "non-utf8": (b"0x0 R\n0x40 \xff\n", ["not UTF-8", "byte offset 11"]),
    "nul-byte": (b"0x0 R 0\x00\n", ["line 1"]),
}


def _bad(capsys, argv, want):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: "), (rc, out, err)
    for w in want:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_bad_trace_is_one_line_naming_file_and_line(capsys, tmp_path, name):
    data, want = TRACES[name]
    p = tmp_path / "t.trace"
    p.write_bytes(data)
    _bad(capsys, ("dram", "--device", "hbm3_6400", "--trace", str(p)), [str(p)] + want)


OPTIONS = {
    "banks-2p20": (["--banks", str(2**20)], ["--banks", "[1, 1024]", "4096"]),
    "banks-2p63": (["--banks", HUGE], ["--banks"]),
    "channels-2p20": (["--channels", str(2**20)], ["--channels", "[1, 4096]"]),
    "channels-2p63": (["--channels", HUGE], ["--channels"]),
    "requests-1e12": (["--requests", str(10**12)], ["--requests", "[1, 33554432]"]),
    "requests-2p63": (["--requests", HUGE], ["--requests"]),
    "queue-2p40": (["--queue", str(2**40)], ["--queue", "[1, 65536]"]),
    "queue-2p63": (["--queue", HUGE], ["--queue"]),
    "stride-2p70": (["--pattern", "strided", "--stride", str(2**70)], ["--stride", "capacity"]),
    "seed-negative": (["--pattern", "random", "--seed", "-1"], ["--seed"]),
    "seed-2p200": (["--pattern", "random", "--seed", str(2**200)], ["--seed"]),
    "refresh-with-no-refresh": (["--refresh", "pb", "--no-refresh"], ["--refresh", "no effect"]),
    "stride-without-strided": (["--stride", "64"], ["--stride", "no effect"]),
    "seed-without-randomness": (["--seed", "3"], ["--seed", "no effect"]),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_bad_size_and_option_refused_before_allocating(capsys, name):
    extra, want = OPTIONS[name]
    _bad(capsys, ("dram", "--device", "hbm3_6400", *extra), want)


def test_pattern_options_with_a_trace_are_refused(capsys, tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("0x0 R\n")
    for opt in (["--requests", "5"], ["--seed", "1"], ["--write-fraction", "0.5"]):
        _bad(capsys, ("dram", "--device", "hbm3_6400", "--trace", str(p), *opt), [opt[0], "no effect with --trace"])


SPEC_MUTATIONS = {  # dotted key: value (each gives one error naming the file and the key)
    "org.rows": 2**63,
    "org.channels": 2**20,
    "org.columns": 2**40,
    "org.burst_bytes": 2**20,
    "timing.nRC": 2**60,
    "timing.nREFI": 2**30,
    "energy.act_pj": 1e300,
    "energy.io_pj_per_bit": -1.0,
    "org.bank_groups": 2**12,
}


@pytest.mark.parametrize("key", sorted(SPEC_MUTATIONS))
def test_spec_values_outside_the_legal_range(capsys, tmp_path, key):
    import yaml

    from attnsim.core.config import find_config

    d = yaml.safe_load(find_config("hardware", "hbm3_6400").read_text())
    sec, k = key.split(".")
    d[sec][k] = SPEC_MUTATIONS[key]
    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump(d))
    want = "org" if key == "org.bank_groups" else key  # banks per channel: a limit on the org as a whole
    _bad(capsys, ("dram", "--device", str(p), "--requests", "64"), [str(p), want])


def test_legal_range_edges_still_run(capsys, tmp_path):
    """The limits refuse only nonsense: the largest --banks and --queue and a 2**53 arrival still run."""
    p = tmp_path / "t.trace"
    p.write_text(f"0x0 R 0\n0x400 W {2**53}\n")
    assert main(["dram", "--device", "hbm3_6400", "--trace", str(p), "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["cycles"] > 2**53
    assert (
        main(
            [
                "dram",
                "--device",
                "hbm3_6400",
                "--channels",
                "1",
                "--banks",
                "1024",
                "--queue",
                "65536",
                "--requests",
                "2000",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["requests"] == 2000


def test_idd_currents_that_give_negative_energy_are_refused(capsys, tmp_path):
    """DRAMsim3's formulas subtract currents: IDD5AB below IDD3N would make every refresh return energy."""
    import yaml

    from attnsim.core.config import find_config

    d = yaml.safe_load(find_config("hardware", "hbm2_2000").read_text())
    d["energy"]["idd"]["idd5ab_ma"] = 1
    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump(d))
    _bad(capsys, ("dram", "--device", str(p), "--requests", "64"), [str(p), "energy.idd", "non-negative ref_pj"])


@pytest.mark.parametrize("mode", ["ab", "pb"])
def test_bank_state_after_a_gap_equals_the_walk(mode):
    """After a gap of 2e5 cycles (~500 refresh windows) every bank, rank and channel state array (open rows, next
    ACT cycles, refresh dues, per-bank refresh pointer) is the walk's, not only the totals."""
    from attnsim.hwmodels.dram import kernel as K
    from attnsim.hwmodels.dram.engine import scratch_for, timing_vector

    spec = ENGINE_SPECS["ddr5_4800"]
    c = random_stream(np.random.default_rng(7), spec, 30, channels=2, max_gap=200_000)
    states = []
    for skip in (True, False):
        T = timing_vector(spec, mode, idle_skip=skip)
        S = K.new_state(spec.org.channels, T)
        K.run_kernel(
            c["op"],
            c["flags"],
            c["ch"],
            c["pch"],
            c["rank"],
            c["bg"],
            c["bank"],
            c["row"],
            c["repeat"],
            c["cycles"],
            c["arrival"],
            T,
            *S,
            scratch_for(spec),
        )
        states.append(S)
    for a, b in zip(*states):
        assert np.array_equal(a, b)
    assert states[0][-1][:, K.S_REF if mode == "ab" else K.S_REFPB].sum() > 100
