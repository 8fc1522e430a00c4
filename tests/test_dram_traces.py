"""attnsim dram --trace in Ramulator / DRAMsim3 / attnsim / .npy formats (hwmodels/dram/traces.py), convert."""

import json

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.cli.dram import device_spec
from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram.controller import decode
from attnsim.hwmodels.dram.streams import MAPPING, make_stream
from attnsim.hwmodels.dram.traces import read_trace_any

SPEC = device_spec("hbm3_6400", channels=1)
ADDR, W = make_stream(SPEC.org, "mixed", 300, 5)


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _vectors():
    """Ramulator ReadWriteTrace lines of the stream: ch,pc,sid,bg,ba,row,col (column = burst x BL8)."""
    o = SPEC.org
    _, k, row = decode(SPEC, ADDR, MAPPING)
    B, G, R = o.banks_per_group, o.bank_groups, o.ranks
    col = (ADDR.astype(np.int64) // o.burst_bytes) % o.columns
    return [
        f"{'W' if w else 'R'} 0,{kk // (B * G * R)},{kk // (B * G) % R},{kk // B % G},{kk % B},{r},{c * 8}"
        for w, kk, r, c in zip(W, k, row, col)
    ]


def test_every_format_gives_the_same_stream(tmp_path):
    fs = {
        "attnsim": [f"0x{a:x} {'W' if w else 'R'}" for a, w in zip(ADDR, W)],
        "ramulator": [f"{'ST' if w else 'LD'} 0x{a:x}" for a, w in zip(ADDR, W)],
        "dramsim3": [f"0x{a:x} {'WRITE' if w else 'READ'} {i}" for i, (a, w) in enumerate(zip(ADDR, W))],
    }
    for fmt, lines in fs.items():
        a, w, t = read_trace_any(_write(tmp_path, fmt + ".trace", lines), SPEC)  # format detected
        assert np.array_equal(a, ADDR) and np.array_equal(w, W), fmt
        assert np.array_equal(t, np.arange(300) if fmt == "dramsim3" else np.zeros(300)), fmt
    dec = [f"{'ST' if w else 'LD'} {a}" for a, w in zip(ADDR, W)]  # LoadStoreTrace also takes decimal
    assert np.array_equal(read_trace_any(_write(tmp_path, "dec.trace", dec), SPEC)[0], ADDR)
    a, w, _ = read_trace_any(_write(tmp_path, "vec.trace", _vectors()), SPEC, mapping=MAPPING)
    assert np.array_equal(a, ADDR) and np.array_equal(w, W)


def test_convert_to_npy_and_run_equal_text(tmp_path, capsys):
    txt = _write(tmp_path, "t.trace", [f"{'ST' if w else 'LD'} 0x{a:x}" for a, w in zip(ADDR, W)])
    npy = str(tmp_path / "t.npy")
    assert main(["dram", "convert", "--device", "hbm3_6400", "--trace", txt, "--out", npy]) == 0
    assert "300 requests" in capsys.readouterr().out
    outs = []
    for p in (txt, npy):
        assert main(["dram", "--device", "hbm3_6400", "--trace", p, "--json", "--controller", "ramulator2"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["cycles"] == outs[1]["cycles"] > 0 and outs[0]["bytes"] == 300 * 32


@pytest.mark.parametrize(
    "fmt,lines,want",
    [
        ("ramulator", ["LD 0x0", "XX 0x40"], "line 2: expected 'LD|ST <address>'"),
        ("ramulator", ["R 0,0,0,0,0,1,8", "R 0,0,0,0,9,1,8"], "line 2: address vector"),
        ("ramulator", ["R 0,0,0,0,0,1,8", "LD 0x40"], "request 2: mixes address vectors and flat addresses"),
        ("ramulator", ["# c", "LD 0x40", "W 0,0,0,0,0,1,8"], "request 1: mixes address vectors and flat addresses"),
        (
            "ramulator",
            ["LD 0x40", "W 0,0,0,0,0,1,8", "LD zz"],
            "line 3: expected a 0x-hex (at most 16 digits) or decimal "
            "(at most 18 digits) address (ramulator format), got 'LD zz'",
        ),
        (
            "ramulator",
            ["LD 1234567890123456789"],
            "line 1: expected a 0x-hex (at most 16 digits) or decimal (at most 18",
        ),
        ("dramsim3", ["0x0 READ 0", "0x40 FETCH 3"], "line 2: expected '<0x hex address> <READ|WRITE> <cycle>'"),
        ("dramsim3", ["0x0 READ 0", "0x40 RXXX 3"], "(dramsim3 format), got '0x40 RXXX 3'"),  # DRAMsim3: a read
        ("dramsim3", ["0x0 READ 5", "0x40 READ 3"], "line 2: arrival cycles must not decrease"),
        (
            "attnsim",
            ["0x0 R 1000", "0x40 W"],
            "line 2: arrival cycles must not decrease (0 < 1000: a line without one arrives at cycle 0)",
        ),
        ("ramulator", ["LD 0x40000000000"], "beyond the device capacity"),
    ],
)
def test_bad_lines_are_one_error_naming_file_and_line(tmp_path, fmt, lines, want):
    p = _write(tmp_path, "b.trace", lines)
    with pytest.raises(ConfigError) as e:
        if fmt == "attnsim":  # the CLI's reader (the compiled one defers attnsim-format errors to it)
            from attnsim.cli.dram import read_trace

            read_trace(p, SPEC.capacity_bytes)
        else:
            read_trace_any(p, SPEC, fmt)
    assert want in str(e.value) and str(e.value).startswith(p + ": ") and "\n" not in str(e.value)


def test_dramsim3_command_words_are_its_own(tmp_path):
    """DRAMsim3 reads WRITE, write, P_MEM_WR and BOFF as writes (umd-memsys/DRAMsim3 2981759 common.cc operator>>);
    READ / read / P_MEM_RD are reads (any other word, a read there, is refused here)."""
    lines = [
        "0x0 READ 0",
        "0x40 read 1",
        "0x80 P_MEM_RD 2",
        "0xc0 WRITE 3",
        "0x100 write 4",
        "0x140 P_MEM_WR 5",
        "0x180 BOFF 6",
        "0x1c0 Write 7",
    ]
    a, w, t = read_trace_any(_write(tmp_path, "t.trace", lines), SPEC, "dramsim3")
    assert w.tolist() == [False, False, False, True, True, True, True, True] and t.tolist() == list(range(8))


def test_npy_of_another_dtype_and_format_without_trace_are_refused(tmp_path, capsys):
    p = str(tmp_path / "x.npy")
    np.save(p, np.arange(4))
    with pytest.raises(ConfigError, match="expected a 1-D array"):
        read_trace_any(p, SPEC)
    assert main(["dram", "--device", "hbm3_6400", "--trace-format", "dramsim3"]) == 2
    assert "--trace-format has no effect without --trace" in capsys.readouterr().err


def _general(data: bytes, fmt: int):
    """The general parser alone (what every line of another shape goes through)."""
    from attnsim.hwmodels.dram.traces import _parse

    b = np.frombuffer(data, np.uint8)
    cap = data.count(b"\n") + 1
    out = np.empty(cap, np.uint64), np.empty(cap, np.bool_), np.zeros(cap, np.int64)  # arrivals: zeroed (contract)
    k, err, _ = _parse(b, fmt, 1, np.ones(1, np.int64), *out, np.full((1, 1), -1, np.int64), False)
    return k, err, out


def test_fast_parser_equals_the_general_one_or_defers_to_it():
    """The one-pass parser of the canonical line shapes (traces._parse_fast) returns exactly the general
    parser's requests whenever it accepts a file, and defers (-1) on every file the general parser refuses;
    canonical files take the fast path. Random files mix canonical lines with odd ones (tabs, CRLF, comments,
    decimal / upper-case / over-long numbers, lax DRAMsim3 words, decreasing cycles, extra tokens)."""
    from attnsim.hwmodels.dram.traces import _HEXVAL, _parse_fast

    rng = np.random.default_rng(7)
    odd = {
        0: [
            "0X1F r",
            "1f W 3",
            "0x10 R ",
            "# c",
            "",
            "\t0x1 R",
            "0x1 R\r",
            "0x1 X",
            "0x" + "f" * 17 + " R",
            "0x1 R " + "9" * 19,
            "0x1 R 1",
            "g R",
            "0x1  R",
            "0x1 RW",
        ],
        1: [
            "LD 12",
            "ST 0X1f",
            "LD " + "9" * 19,
            "LD 0x",
            "LD\t0x1",
            "LD 0x1 5",
            "ld 0x1",
            "LX 0x1",
            "",
            "LD 0x1\r",
            "ST " + "1" * 18,
            "LD 0x" + "0" * 16,
        ],
        2: ["0x1 read 1", "0x1 RXXX 2", "1 READ 3", "0x1 WRITE", "0x1 WRITE 0", "0x1 READ 99 ", "0x1 READ x"],
    }
    canon = {
        0: lambda a, w, t: f"0x{a:x} {'W' if w else 'R'} {t}",
        1: lambda a, w, t: f"{'ST' if w else 'LD'} 0x{a:x}",
        2: lambda a, w, t: f"0x{a:x} {'WRITE' if w else 'READ'} {t}",
    }
    fast_taken = 0
    for trial in range(300):
        fmt = trial % 3
        n = int(rng.integers(1, 12))
        t = np.sort(rng.integers(0, 50, n))
        lines = [
            canon[fmt](int(a), bool(w), int(c))
            for a, w, c in zip(rng.integers(0, 1 << 40, n), rng.integers(0, 2, n), t)
        ]
        if trial % 4:  # three of four files get one odd line somewhere
            lines.insert(int(rng.integers(0, n + 1)), odd[fmt][int(rng.integers(len(odd[fmt])))])
        data = ("\n".join(lines) + ("\n" if rng.integers(2) else "")).encode()
        k_g, err, (ag, wg, tg) = _general(data, fmt)
        cap = len(data) // 4 + 1
        af, wf, tf = np.empty(cap, np.uint64), np.empty(cap, np.bool_), np.zeros(cap, np.int64)
        k_f = _parse_fast(np.frombuffer(data, np.uint8), fmt, _HEXVAL, af, wf, tf)
        if k_f >= 0:
            fast_taken += 1
            assert err == 0 and k_f == k_g, (fmt, data)
            assert np.array_equal(af[:k_f], ag[:k_g]) and np.array_equal(wf[:k_f], wg[:k_g]), (fmt, data)
            assert np.array_equal(tf[:k_f], tg[:k_g]), (fmt, data)
        if trial % 4 == 0:  # canonical files: always the fast path
            assert k_f == k_g > 0, (fmt, data)
    assert fast_taken >= 75


def test_npy_addresses_are_decoded_in_place_with_the_same_results(tmp_path):
    """The .npy trace's addresses stay a view of the mapped file (no copy); the run equals one on a copy."""
    from attnsim.hwmodels.dram.controller import simulate_requests
    from attnsim.hwmodels.dram.traces import write_npy

    p = str(tmp_path / "t.npy")
    write_npy(p, ADDR, W)
    a, w, t = read_trace_any(p, SPEC)
    assert not a.flags.owndata and not a.flags.writeable and a.strides == (17,)  # a field of the mapped records
    ch, k, row = decode(SPEC, a, MAPPING)
    _, k2, row2 = decode(SPEC, np.array(a), MAPPING)
    assert k.dtype == row.dtype == np.int32 and np.array_equal(k, k2) and np.array_equal(row, row2)
    r1 = simulate_requests(SPEC, a, w, t, mapping=MAPPING)
    r2 = simulate_requests(SPEC, np.array(a), np.array(w, dtype=np.int64), mapping=MAPPING)  # 0/1 ints, no arrival
    assert (r1.cycles, r1.row_hits, r1.row_conflicts, r1.mean_latency_cycles) == (
        r2.cycles,
        r2.row_hits,
        r2.row_conflicts,
        r2.mean_latency_cycles,
    )


def test_convert_onto_its_own_npy_input_keeps_the_stream(tmp_path, capsys):
    """The .npy input is a view of its file: converting onto the same path must copy before writing."""
    from attnsim.hwmodels.dram.traces import write_npy

    p = str(tmp_path / "t.npy")
    write_npy(p, ADDR, W)
    assert main(["dram", "convert", "--device", "hbm3_6400", "--channels", "1", "--trace", p, "--out", p]) == 0
    a, w, _ = read_trace_any(p, SPEC)
    assert np.array_equal(a, ADDR) and np.array_equal(w, W)


def test_text_trace_from_a_pipe_and_an_empty_file(tmp_path, capsys):
    """Regular files are mapped; a FIFO is read (it cannot be mapped); an empty file has no requests."""
    import os
    import threading

    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    text = "".join(f"{'ST' if w else 'LD'} 0x{a:x}\n" for a, w in zip(ADDR, W))

    def feed():
        with open(fifo, "w") as f:
            f.write(text)

    th = threading.Thread(target=feed)
    th.start()
    a, w, t = read_trace_any(fifo, SPEC, "ramulator")
    th.join()
    assert np.array_equal(a, ADDR) and np.array_equal(w, W) and not t.any()
    for name, content in (("empty.trace", ""), ("blank.trace", "\n")):  # size 0 (not mapped) and a blank line
        (tmp_path / name).write_text(content)
        with pytest.raises(ConfigError, match="no requests"):
            read_trace_any(str(tmp_path / name), SPEC, "ramulator")


def test_cli_main_leaves_the_collector_as_it_found_it(tmp_path, capsys):
    """main() pauses the cyclic collector during start-up (cli.settle_gc) and restores it, also on an error; an
    in-process call (argv given) freezes nothing (a freeze would keep the caller's uncollected cycles forever)."""
    import gc

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    p = _write(tmp_path, "t.trace", [f"LD 0x{a:x}" for a in ADDR])
    assert main(["dram", "--device", "hbm3_6400", "--channels", "1", "--trace", p, "--json"]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    assert main(["dram", "--device", "hbm3_6400", "--trace", str(tmp_path / "missing.trace")]) == 2
    assert gc.isenabled()
    gc.disable()
    try:
        assert main(["dram", "--device", "hbm3_6400", "--channels", "1", "--trace", p, "--json"]) == 0
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_decode_by_channel_is_a_stable_sort_of_decode():
    """decode_by_channel writes each request at its channel-contiguous position: decode's output in the order of a
    stable sort by channel; write flags and arrivals follow (arrivals stay zeros when there are none)."""
    from attnsim.hwmodels.dram.controller import decode_by_channel

    spec = device_spec("hbm3_6400", channels=8)
    rng = np.random.default_rng(11)
    addr = (rng.integers(0, spec.capacity_bytes // 32, 5000) * 32).astype(np.uint64)
    w = (rng.random(5000) < 0.3).astype(np.int8)
    for arr in (np.zeros(5000, np.int64), np.sort(rng.integers(0, 10**6, 5000))):
        ch, k, row = decode(spec, addr)
        o = np.argsort(ch, kind="stable")
        starts, k2, row2, w2, arr2 = decode_by_channel(spec, addr, w, arr)
        assert np.array_equal(starts, np.concatenate([[0], np.cumsum(np.bincount(ch, minlength=8))]))
        assert np.array_equal(k2, k[o]) and np.array_equal(row2, row[o]) and np.array_equal(w2, w[o])
        assert np.array_equal(arr2, arr[o]) and k2.dtype == np.int32 and w2.dtype == np.int8


def test_the_program_freezes_its_start_up_objects(tmp_path):
    """Run as the program (main() with no argv, as the console script and python -m attnsim do), start-up's
    objects leave the collector's generations (gc.freeze) and attnsim dram freezes again at exit."""
    import subprocess
    import sys

    p = _write(tmp_path, "t.trace", [f"LD 0x{a:x}" for a in ADDR])
    code = (
        "import atexit, gc, sys\n"
        f"sys.argv = ['attnsim', 'dram', '--device', 'hbm3_6400', '--channels', '1', '--trace', {p!r}, '--json']\n"
        "from attnsim.cli import main\n"
        "import attnsim.cli.dram, attnsim.hwmodels.dram.controller, attnsim.hwmodels.dram.traces\n"
        # numba's lazy registries (their import builds an error message, and colorama registers an atexit)
        "from numba.core.registry import cpu_target; cpu_target.target_context.refresh()\n"
        "n0 = atexit._ncallbacks()\n"
        "rc = main()\n"
        "print('FROZEN', rc, gc.isenabled(), gc.get_freeze_count() > 1000, atexit._ncallbacks() - n0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [ln for ln in out.stdout.splitlines() if ln.startswith("FROZEN")] == ["FROZEN 0 True True 1"]


@pytest.mark.parametrize(
    "extra,key",
    [
        (["--queue", "8"], "--queue"),
        (["--page", "closed"], "--page"),
        (["--controller", "ramulator2"], "--controller"),
        (["--json"], "--json"),
        (["--no-refresh"], "--no-refresh"),
        (["--no-skip-ahead"], "--no-skip-ahead"),
    ],
)
def test_convert_refuses_options_only_a_simulation_reads(tmp_path, capsys, extra, key):
    t = _write(tmp_path, "t.trace", ["LD 0x0"])
    out = tmp_path / "o.npy"
    assert main(["dram", "convert", "--device", "hbm3_6400", "--trace", t, "--out", str(out)] + extra) == 2
    assert f"{key}: has no effect with 'convert' (nothing is simulated)" in capsys.readouterr().err
    assert not out.exists()


def _through_fifo(tmp_path, text, argv_of, capsys):
    """Run ``attnsim dram`` on a FIFO fed ``text`` by a thread (as bash's ``<(zcat t.gz)`` does); its exit code, out
    and err."""
    import os
    import threading

    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:
            f.write(text)

    th = threading.Thread(target=feed)
    th.start()
    rc = main(argv_of(fifo))
    th.join()
    out, err = capsys.readouterr()
    os.unlink(fifo)
    return rc, out, err


def test_cli_reads_a_pipe_with_the_default_auto_format(tmp_path, capsys):
    """--trace-format auto sniffs the head, then parses: a pipe cannot be read twice, so it is read once (bounded)
    and gives the same result as the same text in a file (it was refused: 'not a regular file')."""
    text = "".join(f"{'ST' if w else 'LD'} 0x{a:x}\n" for a, w in zip(ADDR, W))
    p = _write(tmp_path, "t.trace", text.splitlines())

    def argv(path):
        return ["dram", "--device", "hbm3_6400", "--trace", path, "--json", "--controller", "ramulator2"]

    assert main(argv(p)) == 0
    want = json.loads(capsys.readouterr().out)
    rc, out, err = _through_fifo(tmp_path, text, argv, capsys)
    assert rc == 0, err
    got = json.loads(out)
    for k in ("cycles", "requests", "row_hits", "row_misses", "row_conflicts"):
        assert got[k] == want[k], k
    # a bad line in a pipe is named with the pipe's path and its line
    rc, out, err = _through_fifo(tmp_path, "LD 0x40\nLD zz\n", argv, capsys)
    assert rc == 2 and err.strip().startswith(f"error: {tmp_path / 'pipe'}: line 2: ") and "LD zz" in err
