"""Security of sweeps: cache entries are data and authenticated; --emit-sbatch quotes every user string."""

import json
import os
import pickle
import sqlite3
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
from sweep_helpers import write_sweep

from attnsim.core import cache

ROOT = Path(__file__).resolve().parent.parent


class _Shell:
    """Unpickling this runs a shell command (what a planted pickle entry did before)."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


@pytest.fixture
def disk(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(d))
    cache.reset()
    yield d
    cache.reset()


def _entry(d: Path, key_parts) -> Path:
    k = cache.cache_key(key_parts)
    return d / k[:2] / f"{k}.json"


def _compute(key_parts, value, calls):
    return cache.cached(key_parts, lambda: calls.append(1) or value)


def test_a_planted_pickle_is_never_executed(disk, tmp_path):
    marker = tmp_path / "pwned"
    key = ("sec.pickle", 1)
    payload = pickle.dumps(_Shell(f"touch {marker}"))
    p = _entry(disk, key)
    p.parent.mkdir(parents=True)
    p.write_bytes(payload)  # where the entry lives now
    p.with_suffix(".pkl").write_bytes(payload)  # where the old format kept it
    calls = []
    assert _compute(key, 2.5, calls) == 2.5 and calls == [1]  # rejected -> recomputed
    assert not marker.exists()
    cache.reset()
    assert _compute(key, 9.9, calls) == 2.5 and calls == [1]  # overwritten by the authentic value
    assert not marker.exists()


def test_a_tampered_valid_looking_entry_is_rejected(disk):
    key = ("sec.tamper", 1)
    calls = []
    value = (1.5e-3, {"dram_read_write": 2.0}, {"acts": 7})
    assert _compute(key, value, calls) == value
    p = _entry(disk, key)
    mac, payload = p.read_bytes().split(b"\n", 1)
    fmt, enc = json.loads(payload)
    assert enc[1][0] == ["f", (1.5e-3).hex()]
    enc[1][0] = ["f", (1.0e-3).hex()]  # a "faster" device: edit the value, keep the MAC
    p.write_bytes(mac + b"\n" + json.dumps([fmt, enc]).encode())
    cache.reset()
    assert _compute(key, value, calls) == value and len(calls) == 2
    # a genuine entry of another key moved into this key's slot is rejected too
    other = ("sec.tamper", 2)
    _compute(other, (9.0, {}, {}), calls)
    p.write_bytes(_entry(disk, other).read_bytes())
    cache.reset()
    assert _compute(key, value, calls) == value and len(calls) == 4
    # a MAC under another key (someone who made their own key file) is rejected
    forged = cache._Store(b"x" * 32).pack(cache.cache_key(key), (0.0, {}, {}))
    p.write_bytes(forged[0].encode() + b"\n" + forged[1])
    cache.reset()
    assert _compute(key, value, calls) == value and len(calls) == 5


def test_values_round_trip_as_data(disk):
    vals = [
        None,
        True,
        3,
        2**70,
        -0.0,
        float("inf"),
        "s",
        b"\x00b",
        [1, (2, 3)],
        {"a": 1, (1, "x"): 2.0},
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.float64(0.1),
        np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
    ]
    for i, v in enumerate(vals):
        cache.cached(("sec.rt", i), lambda v=v: v)
    cache.reset()
    for i, v in enumerate(vals):
        got = cache.cached(("sec.rt", i), lambda: pytest.fail("should be a hit"))
        assert type(got) is type(v)
        if isinstance(v, np.ndarray):
            assert got.dtype == v.dtype and np.array_equal(got, v)
        else:
            assert got == v
    with pytest.raises(TypeError):
        cache.cached(("sec.rt", "obj"), lambda: object())


def test_a_key_file_that_is_not_private_refuses_the_cache(disk):
    calls = []
    _compute(("sec.key", 1), 1, calls)
    keyfile = disk / ".key"
    assert stat.S_IMODE(keyfile.stat().st_mode) == 0o600
    keyfile.chmod(0o644)  # readable by others: forged entries are possible
    cache.reset()
    with pytest.warns(RuntimeWarning, match="not a private file") as rec:
        for i in range(1, 4):
            _compute(("sec.key", i), i, calls)
    assert len(rec) == 1 and len(calls) == 4  # one warning; nothing read from or written to the folder
    assert len(list(disk.glob("*/*.json"))) == 1
    keyfile.unlink()
    keyfile.symlink_to(disk / "elsewhere")  # a link planted in place of the key
    cache.reset()
    with pytest.warns(RuntimeWarning, match="key file"):
        _compute(("sec.key", 1), 1, calls)


def test_a_full_or_read_only_cache_degrades_with_one_warning(disk, monkeypatch):
    def full(self, k, value):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.DirStore, "put", full)
    calls = []
    with pytest.warns(RuntimeWarning, match="not writable") as rec:
        for i in range(4):
            assert _compute(("sec.full", i), i, calls) == i
    assert len(rec) == 1 and len(calls) == 4
    assert cache.check_location(str(disk)).startswith("not usable")
    # a location that cannot be created (its parent is a file): the driver warns once and runs on
    blocker = disk.parent / "file"
    blocker.write_text("")
    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import load_sweep

    logs = []
    p = write_sweep(disk.parent / "sw", [{"grid": {"scenario.batch_size": [1, 2]}}])
    s = run_sweep(
        load_sweep(p),
        disk.parent / "s.h5",
        workers=1,
        progress=False,
        log=logs.append,
        point_fn="sweep_helpers:cached_point",
        cache_dir=blocker / "cache",
    )
    assert s.status_counts == {"ok": 2}
    assert len([m for m in logs if "sub-result cache" in m and "continuing without it" in m]) == 1


def test_code_fingerprint_is_in_every_key(monkeypatch):
    k = cache.cache_key(("sec.fp", 1))
    assert len(cache.code_fingerprint()) == 64
    monkeypatch.setattr(cache, "_fingerprint", "0" * 64)  # another version of the code
    assert cache.cache_key(("sec.fp", 1)) != k


def _sqlite_worker(loc, q):
    os.environ[cache.ENV] = loc
    cache.reset()
    calls = []
    v = cache.cached(("sec.sqlite", 1), lambda: calls.append(1) or np.full(3, 7.0))
    q.put((len(calls), v.tolist()))


def test_sqlite_one_file_cache(tmp_path, monkeypatch):
    import multiprocessing as mp

    db = tmp_path / "c.sqlite"
    monkeypatch.setenv(cache.ENV, str(db))
    cache.reset()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    for expect_miss in (1, 0):  # shared across processes through the one file
        p = ctx.Process(target=_sqlite_worker, args=(f"sqlite:{db}", q))
        p.start()
        assert q.get(timeout=60) == (expect_miss, [7.0] * 3)
        p.join()
    assert sorted(x.name for x in tmp_path.iterdir() if not x.name.startswith("c.sqlite-")) == [
        "c.sqlite",
        "c.sqlite.key",
    ]
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        k = cache.cache_key(("sec.sqlite", 1))
        mac, payload = c.execute("SELECT mac, payload FROM entries WHERE k = ?", (k,)).fetchone()
        other = json.dumps([1, cache.encode_value(np.full(3, 1.0))]).encode()  # valid-looking, old MAC
        assert other != payload
        c.execute("UPDATE entries SET payload = ? WHERE k = ?", (other, k))
    cache.reset()
    calls = []
    v = cache.cached(("sec.sqlite", 1), lambda: calls.append(1) or np.full(3, 7.0))
    assert calls == [1] and v.tolist() == [7.0] * 3  # the edited row was rejected


# ---------------------------------------------------------------- --emit-sbatch


def test_emit_sbatch_quotes_every_user_string(tmp_path, monkeypatch):
    """The emitted script parses (bash -n); running its array tasks (fake Slurm env, fake sbatch) keeps
    an injected ';touch X' inside the value, paths with spaces stay one argument, and the merge job
    submitted with --merge-after merges the shards."""
    from attnsim.cli import main
    from attnsim.studies.sweep.store import open_store

    work = tmp_path / "my dir"
    p = write_sweep(work, [{"grid": {"scenario.batch_size": [1, 2]}}], slurm={"shards": 2, "cpus_per_task": 1})
    monkeypatch.chdir(work)
    out = work / "res ults" / "o.h5"
    evil = "a;touch X $(touch Y) `touch Z`"
    script = work / "job.sh"
    assert (
        main(
            [
                "sweep",
                str(p),
                "--out",
                str(out),
                "--set",
                f"experiment.description={evil}",
                "--emit-sbatch",
                str(script),
                "--merge-after",
            ]
        )
        == 0
    )
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert '#SBATCH --output="' in text and "_%A_%a.log" in text and (out.parent / "logs").is_dir()
    assert "NUMBA_CACHE_DIR=" in text
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_SBATCH_ARGS"\necho 4242\n')
    (fake / "sbatch").chmod(0o755)
    for i in range(2):
        env = {
            **os.environ,
            "PATH": f"{fake}:{os.environ['PATH']}",
            "SLURM_ARRAY_TASK_ID": str(i),
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_COUNT": "2",
            "SLURM_ARRAY_JOB_ID": "77",
            "SLURM_CPUS_PER_TASK": "1",
            "FAKE_SBATCH_ARGS": str(tmp_path / f"sbatch{i}.txt"),
            "PYTHONPATH": str(ROOT / "tests"),
        }
        r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    for name in "XYZ":
        assert not (work / name).exists() and not (tmp_path / name).exists()
    args = (tmp_path / "sbatch0.txt").read_text().splitlines()
    assert not (tmp_path / "sbatch1.txt").exists()  # only the first task submits the merge
    assert "--dependency=afterok:77" in args
    wrap = args[args.index("--wrap") + 1]
    assert subprocess.run(["sh", "-c", wrap], cwd=tmp_path).returncode == 0
    import yaml

    st = open_store(out)
    assert len(st) == 2 and yaml.safe_load(st.attrs["base_config"])["experiment"]["description"] == evil


def test_emit_sbatch_dry_run_and_jobqueue(tmp_path, monkeypatch, capsys):
    from attnsim.cli import main

    p = write_sweep(
        tmp_path,
        [{"grid": {"scenario.batch_size": [1, 2]}}],
        dask={"jobqueue": {"cores": 2, "options": {"job_script_prologue": ["export MARK=1"]}}},
    )
    target = tmp_path / "job.sh"
    assert main(["sweep", str(p), "--emit-sbatch", str(target), "--dry-run"]) == 0
    assert "#SBATCH --array=0-3" in capsys.readouterr().out and not target.exists()
    assert main(["sweep", str(p), "--emit-sbatch", str(p / "job.sh")]) == 2  # a folder that is a file
    assert "--emit-sbatch" in capsys.readouterr().err and not (tmp_path / "logs").exists()
    assert main(["sweep", str(p), "--executor", "dask", "--dry-run"]) == 0
    job = capsys.readouterr().out
    assert "#SBATCH" in job and "export MARK=1" in job and "--nworkers 2" in job  # one thread per process
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["sweep", str(p), "--executor", "dask", "--no-progress", "--out", str(tmp_path / "s.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sbatch" in err and not (tmp_path / "s.h5").exists()
