"""The sweep store: resume, SIGKILL safety (real sweep process), shards + merge, CSV, failures, cache."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from sweep_helpers import read_store_rows, write_sweep

from attnsim.core.config import ConfigError
from attnsim.studies.sweep.executors import parse_shard, run_sweep, shard_path
from attnsim.studies.sweep.merge import merge_stores
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import StoreWriter, journal_dir, make_record, open_store, read_journal
from attnsim.studies.sweep.table import load_table, write_csv

ROOT = Path(__file__).resolve().parent.parent
RUN_KW = dict(workers=1, progress=False, log=lambda s: None)
VOLATILE = {"elapsed_s", "finished_unix_s", "worker"}


def _grid(tmp_path, n=6, name="t", **extra):
    return write_sweep(
        tmp_path, [{"grid": {"scenario.batch_size": {"start": 1, "stop": n, "step": 1}}}], name=name, **extra
    )


def _same_points(a, b):
    ca, cb = open_store(a).columns(), open_store(b).columns()
    assert set(ca) == set(cb)
    for k in ca:
        if k in VOLATILE:
            continue
        if ca[k].dtype.kind == "f":
            np.testing.assert_array_equal(ca[k], cb[k], err_msg=k)
        else:
            assert ca[k].tolist() == cb[k].tolist(), k
    ba, bb = open_store(a).breakdown(), open_store(b).breakdown()
    assert set(ba) == set(bb) and all(np.array_equal(ba[k], bb[k], equal_nan=True) for k in ba)
    assert list(open_store(a).iter_docs()) == list(open_store(b).iter_docs())


def test_run_then_resume_skips_finished_points(tmp_path):
    sw = load_sweep(_grid(tmp_path, 4))
    out = tmp_path / "s.h5"
    s1 = run_sweep(sw, out, **RUN_KW)
    assert s1.simulated == 4 and s1.status_counts == {"ok": 4}
    first = read_store_rows(out)
    s2 = run_sweep(sw, out, **RUN_KW)
    assert s2.simulated == 0 and s2.already_done == 4
    assert read_store_rows(out) == first  # nothing re-run, nothing duplicated
    assert not journal_dir(out).exists() and not Path(str(out) + ".lock").exists()
    # a different sweep definition is a different sweep_id: the store refuses to mix it in
    with pytest.raises(ConfigError, match="different sweep"):
        run_sweep(load_sweep(_grid(tmp_path / "w", 6)), out, **RUN_KW)


def test_store_columns_match_the_run_documents(tmp_path):
    sw = load_sweep(_grid(tmp_path, 3))
    out = tmp_path / "s.h5"
    run_sweep(sw, out, **RUN_KW)
    st = open_store(out)
    c, docs = st.columns(), list(st.iter_docs())
    assert c["index"].tolist() == [0, 1, 2]
    assert c["scenario.batch_size"].tolist() == [1, 2, 3] == c["batch_size"].tolist()
    assert c["scenario.batch_size"].dtype == np.int64
    for j, d in enumerate(docs):
        assert d["scenario"]["batch_size"] == j + 1 and d["system"] == c["system"][j] == "h100_x1"
        assert c["tpot_s"][j] == d["metrics"]["tpot_s"] and c["ttft_s"][j] == d["metrics"]["ttft_s"]
        assert np.isclose(st.breakdown()["decode_step/time_s"][j], d["breakdown"]["decode_step"]["time_s"])
        assert json.loads(json.dumps(st.resolved(j)))["scenarios"]["chat"]["batch_size"] == j + 1
    with h5py.File(out) as f:
        for a in (
            "attnsim_version",
            "git_revision",
            "created_utc",
            "updated_utc",
            "sweep_definition",
            "base_config",
            "sweep_id",
        ):
            assert f.attrs[a]
        assert f.attrs["n_points_total"] == 3
    # physical limit: more requests per step cannot make a step faster
    assert np.all(np.diff(c["tpot_s"]) >= 0)


def test_invalid_and_duplicate_points(tmp_path):
    p = write_sweep(
        tmp_path,
        [
            {
                "grid": {
                    "model": ["llama2-7b", "mistral-7b"],
                    "models.mistral-7b.num_layers": [16, 32],
                }
            },
            {"grid": {"scenario.batch_size": [1, -2]}},
        ],
    )
    sw = load_sweep(p)
    assert sw.n_points == 8
    s = run_sweep(sw, tmp_path / "s.h5", **RUN_KW)
    # llama2-7b points ignore mistral's num_layers: 2 of its 4 points duplicate the other 2
    assert s.duplicates == 2 and s.n_shard == 6
    assert s.status_counts == {"ok": 3, "invalid": 3}
    assert len(s.failures) == 3 and all("batch_size=-2" in lab for lab, _ in s.failures)
    assert all("expected a positive integer, got -2" in e for _, e in s.failures)
    assert "3 x " in s.text() and "scenarios.chat.batch_size" in s.text()
    c = open_store(tmp_path / "s.h5").columns()
    layers = {(m, b): n for m, b, n in zip(c["model"], c["scenario.batch_size"], c["models.mistral-7b.num_layers"])}
    assert set(layers) == {("llama2-7b", 1), ("llama2-7b", -2), ("mistral-7b", 1), ("mistral-7b", -2)}


def _kill_when(proc, out, n_min, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            n = len(read_store_rows(out))
        except ConfigError:
            n = 0
        if n >= n_min:
            break
        if proc.poll() is not None:
            pytest.fail("the sweep finished before it could be killed")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_sigkill_mid_sweep_then_resume_loses_and_duplicates_nothing(tmp_path):
    p = _grid(tmp_path, 90)
    out = tmp_path / "k.h5"
    cmd = [
        sys.executable,
        "-m",
        "attnsim",
        "sweep",
        str(p),
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
        "--checkpoint-s",
        "0.15",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    seen = {}
    for n_min in (8, 30):  # two kills, the second into a resumed run; checkpoints fold every 0.15 s
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _kill_when(proc, out, n_min)
        rows = read_store_rows(out)  # readable after the kill (HDF5 + journal)
        with h5py.File(out) as f:  # the HDF5 itself is intact
            assert f["points/key"].shape[0] == f["docs"].shape[0]
        assert all(rows[k] == t for k, t in seen.items()), "a finished point was lost or re-run"
        seen = rows
        assert n_min <= len(seen) < 90
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{len(seen)} already done" in r.stdout
    final = read_store_rows(out)
    c = open_store(out).columns()
    assert len(c["key"]) == 90 == len(set(c["key"]))  # nothing lost, nothing duplicated
    assert sorted(c["scenario.batch_size"].tolist()) == list(range(1, 91))
    assert all(final[k] == t for k, t in seen.items())  # points finished before the kills were kept
    assert not journal_dir(out).exists()


def _fake_record(i):
    doc = {
        "system": "s",
        "model": "m",
        "scenario": {"name": "c", "batch_size": i},
        "status": "ok",
        "metrics": {"x_s": float(i)},
        "breakdown": {"decode_step": {"time_s": float(i), "time_s_by_op": {"a": 1.0}}},
    }
    return make_record(i, f"k{i:05d}", {"p": i}, doc, "{}")


_WRITER_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_sweep_store import _fake_record
from attnsim.studies.sweep.store import StoreWriter
w = StoreWriter({out!r}, {{"sweep_id": "fake"}}, {{"p": "i8"}}, checkpoint_s=0.0)
for i in range({n}):
    if "k%05d" % i not in w.done_keys:
        w.append(_fake_record(i))
    if i + 1 == {hold}:   # a killed run: it waits for its SIGKILL here instead of finishing under a loaded test
        import time
        time.sleep(600)
w.close()
"""


def test_sigkill_at_random_moments_of_folds_never_corrupts(tmp_path):
    """Folds after every append, killed at random times: the file always opens, keys stay unique."""
    out = tmp_path / "f.h5"
    n = 150
    rng = np.random.default_rng(3)
    prev = {}
    for _ in range(4):  # kill after a random number of new points, at a random moment (mostly in a fold)
        target = len(prev) + int(rng.integers(5, 25))
        # the writer goes on 20 points past the target, then waits to be killed (never finishes first)
        script = _WRITER_SCRIPT.format(tests=str(ROOT / "tests"), out=str(out), n=n, hold=target + 20)
        proc = subprocess.Popen([sys.executable, "-c", script])
        while proc.poll() is None and (not out.exists() or len(read_store_rows(out)) < target):
            time.sleep(0.01)
        time.sleep(float(rng.uniform(0.0, 0.05)))
        assert proc.poll() is None, "the writer finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        rows = read_store_rows(out)
        st = open_store(out)
        assert len(st) == len(set(st.columns()["key"]))
        assert all(rows.get(k) == t for k, t in prev.items())
        assert len(rows) >= target
        prev = rows
    script = _WRITER_SCRIPT.format(tests=str(ROOT / "tests"), out=str(out), n=n, hold=-1)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    c = open_store(out).columns()
    assert c["key"].tolist() == [f"k{i:05d}" for i in range(n)]
    assert np.array_equal(open_store(out).breakdown()["decode_step/time_s"], np.arange(n, dtype=float))


def test_torn_journal_line_is_dropped(tmp_path):
    out = tmp_path / "j.h5"
    jd = journal_dir(out)
    jd.mkdir()
    good = json.dumps(_fake_record(0)) + "\n"
    (jd / "seg-h-1-000001.jsonl").write_text(good + json.dumps(_fake_record(1))[:50])
    assert [r["key"] for _, r in read_journal(out)] == ["k00000"]
    with StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"}) as w:  # recovery folds the good record
        assert w.done_keys == {"k00000"}
    assert open_store(out).columns()["key"].tolist() == ["k00000"]


def test_two_shards_merged_equal_the_unsharded_run(tmp_path):
    p = write_sweep(tmp_path, [{"grid": {"model": ["llama2-7b", "mistral-7b"], "scenario.batch_size": [1, 2, 3]}}])
    sw = load_sweep(p)
    whole = tmp_path / "whole.h5"
    run_sweep(sw, whole, **RUN_KW)
    out = tmp_path / "sh.h5"
    for i in range(2):
        s = run_sweep(sw, out, shard=(i, 2), **RUN_KW)
        assert s.n_shard == 3 and s.out == shard_path(out, (i, 2))
    shards = [shard_path(out, (i, 2)) for i in range(2)]
    assert set(open_store(shards[0]).columns()["index"]) == {0, 2, 4}
    merged = tmp_path / "merged.h5"
    assert merge_stores(shards, merged) == 6
    _same_points(merged, whole)
    # a store of another sweep is refused
    other = tmp_path / "o.h5"
    run_sweep(load_sweep(_grid(tmp_path / "o", 2, name="other")), other, **RUN_KW)
    with pytest.raises(ConfigError, match="refusing to merge different sweeps"):
        merge_stores([shards[0], other], tmp_path / "bad.h5")
    assert not (tmp_path / "bad.h5").exists()


def test_shard_argument_and_slurm_environment(monkeypatch):
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "x", "1/0"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "3")
    assert parse_shard(None) == (2, 4)


def test_export_csv_matches_the_store(tmp_path):
    sw = load_sweep(_grid(tmp_path, 3))
    out = tmp_path / "s.h5"
    run_sweep(sw, out, **RUN_KW)
    t = load_table(out)
    csv_path = write_csv(t, tmp_path / "s.csv")
    with open(csv_path) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3
    assert [int(r["scenario.batch_size"]) for r in rows] == [1, 2, 3]
    assert [float(r["tpot_s"]) for r in rows] == t.col("tpot_s").tolist()
    assert "decode_step/time_s_by_op/attn_score" in rows[0] or any(
        k.startswith("decode_step/time_s_by_op/") for k in rows[0]
    )


def test_cache_hit_rate_is_reported(tmp_path):
    from attnsim.core import cache

    cache.reset()
    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2, 3, 4]}}])
    s = run_sweep(
        load_sweep(p), tmp_path / "c.h5", point_fn="sweep_helpers:cached_point", cache_dir=tmp_path / "cache", **RUN_KW
    )
    # one model: the first point misses, the other three hit
    assert (s.cache_hits, s.cache_misses) == (3, 1)
    assert "hit rate 75.0%" in s.text()
    assert open_store(tmp_path / "c.h5").columns()["cached_layers"].tolist() == [32.0] * 4
    with h5py.File(tmp_path / "c.h5") as f:
        assert (f.attrs["cache_hits"], f.attrs["cache_misses"]) == (3, 1)


def test_cli_sweep_emit_sbatch_merge_export(tmp_path, capsys):
    from attnsim.cli import main

    p = _grid(tmp_path, 4, slurm={"shards": 2, "cpus_per_task": 3, "partition": "gpu"})
    out = tmp_path / "c.h5"
    assert main(["sweep", str(p), "--emit-sbatch", "--out", str(out)]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --array=0-1" in script and "#SBATCH --cpus-per-task=3" in script
    assert "#SBATCH --partition=gpu" in script and "--executor slurm" in script
    assert f"attnsim merge {tmp_path / 'c.shard0of2.h5'} {tmp_path / 'c.shard1of2.h5'} -o {out}" in script
    for i in range(2):  # what the array tasks do
        env = {"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_COUNT": "2"}
        os.environ.update(env)
        try:
            assert (
                main(["sweep", str(p), "--executor", "slurm", "--out", str(out), "--workers", "1", "--no-progress"])
                == 0
            )
        finally:
            for k in env:
                os.environ.pop(k)
    assert main(["merge", str(tmp_path / "c.shard0of2.h5"), str(tmp_path / "c.shard1of2.h5"), "-o", str(out)]) == 0
    assert sorted(open_store(out).columns()["scenario.batch_size"].tolist()) == [1, 2, 3, 4]
    assert main(["export", str(out), "--csv"]) == 0 and out.with_suffix(".csv").exists()
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert "4 of 4 points; 4 ok" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "c.shard0of2.h5"), "-o", str(out)]) == 2  # exists: refused


def test_editing_figures_keeps_resuming_and_an_older_stores_id_is_accepted(tmp_path):
    """The sweep id digests what decides the points; ``figures:`` (drawn from the store) is not part of it, so a
    store resumes after a figure is added or edited (found by issue 28's newcomer walk: it was refused)."""
    fig = {"recipe": "tpot_vs_batch", "out": "f.pdf"}
    out = tmp_path / "s.h5"
    s1 = run_sweep(load_sweep(_grid(tmp_path / "a", 3, figures=[fig])), out, **RUN_KW)
    assert s1.simulated == 3
    edited = load_sweep(
        _grid(tmp_path / "b", 3, figures=[{**fig, "out": "g.pdf"}, {"recipe": "tpot_vs_batch", "out": "h.png"}])
    )
    none = load_sweep(_grid(tmp_path / "c", 3))
    assert edited.sweep_id == none.sweep_id == s1_id(out)
    assert run_sweep(edited, out, **RUN_KW).already_done == 3
    # a store written before the change carries the id that digested figures: the same file still resumes it, and
    # the store takes the current id (the legacy form is the second accepted id)
    legacy = edited.accepted_ids[1]
    assert legacy != edited.sweep_id
    with h5py.File(out, "a") as f:
        f.attrs["sweep_id"] = legacy
    assert run_sweep(edited, out, **RUN_KW).already_done == 3
    assert s1_id(out) == edited.sweep_id
    # another sweep's legacy id is still refused
    with h5py.File(out, "a") as f:
        f.attrs["sweep_id"] = load_sweep(_grid(tmp_path / "d", 4, figures=[fig])).accepted_ids[1]
    with pytest.raises(ConfigError, match="different sweep"):
        run_sweep(edited, out, **RUN_KW)


def s1_id(out):
    with h5py.File(out) as f:
        return f.attrs["sweep_id"]
