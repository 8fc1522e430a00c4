"""Sweep stores that cannot be wedged, misread or raced: odd grid values, damaged files, short journal
writes, two writers, sweep sizes, all-invalid sweeps, --retry-failed, code versions, file modes."""

import json
import os
import tracemalloc

import h5py
import numpy as np
import pytest
from sweep_helpers import write_sweep

import attnsim
from attnsim.cli import main
from attnsim.core.config import ConfigError
from attnsim.studies.sweep import store as store_mod
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.merge import merge_stores
from attnsim.studies.sweep.spec import MAX_POINTS, load_sweep
from attnsim.studies.sweep.store import StoreWriter, journal_dir, lock_path, make_record, open_store, read_journal
from attnsim.studies.sweep.table import load_table

RUN_KW = dict(workers=1, progress=False, log=lambda s: None)


# ---------------------------------------------------------------- helpers


def fake_point(tree_dict, files):
    """A fast point function (no simulation); fails for the batch size in $ATTNSIM_TEST_FAIL_BATCH."""
    name = next(iter(tree_dict["scenarios"]))
    sc = tree_dict["scenarios"][name]
    if str(sc["batch_size"]) == os.environ.get("ATTNSIM_TEST_FAIL_BATCH"):
        raise RuntimeError("flaky worker")
    return {
        "system": next(iter(tree_dict["systems"])),
        "model": next(iter(tree_dict["models"])),
        "scenario": {"name": name, **sc},
        "status": "ok",
        "metrics": {
            "ttft_s": 0.01,
            "tpot_s": 1e-3 * sc["batch_size"],
            "tokens_per_s": 1e3 / sc["batch_size"],
            "energy_per_token_j": 0.1,
        },
    }


def _record(i, **params):
    doc = {
        "system": "s",
        "model": "m",
        "scenario": {"name": "c", "batch_size": i},
        "status": "ok",
        "metrics": {"x_s": float(i)},
        "breakdown": {"decode_step": {"time_s": float(i)}},
    }
    return make_record(i, f"k{i:05d}", params or {"p": i}, doc, "{}")


def _fake_store(path, n=3, meta=None):
    with StoreWriter(path, {"sweep_id": "fake", **(meta or {})}, {"p": "i8"}) as w:
        for i in range(n):
            w.append(_record(i))
    return path


def _one_line_error(capsys, *names):
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in err
    for n in names:
        assert str(n) in err, (n, err)
    return err


# ---------------------------------------------------------------- folds never fail


def test_non_integer_grid_value_is_an_invalid_point_and_the_store_stays_usable(tmp_path, capsys):
    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, "two"]}}])
    out = tmp_path / "s.h5"
    s = run_sweep(load_sweep(p), out, point_fn="test_sweep_trust:fake_point", **RUN_KW)
    assert s.status_counts == {"ok": 1, "invalid": 1}
    assert any("batch_size" in e and "two" in e for _, e in s.failures)
    c = open_store(out).columns()
    assert c["scenario.batch_size"].tolist() == ["1", "two"] and c["batch_size"].tolist() == [1, -1]
    assert run_sweep(load_sweep(p), out, point_fn="test_sweep_trust:fake_point", **RUN_KW).already_done == 2
    assert main(["show", str(out)]) == 0 and "1 invalid, 1 ok" in capsys.readouterr().out
    assert main(["export", str(out), "--csv", "-o", str(tmp_path / "s.csv")]) == 0
    assert "two" in (tmp_path / "s.csv").read_text()


def test_mixed_kinds_in_a_column_widen_it_and_journal_reads_equal_folded_reads(tmp_path):
    out = tmp_path / "m.h5"
    odd = [
        _record(0, p=1),
        _record(1, p=2.5),
        _record(2, p="x"),
        _record(3, p=2**70),
        _record(4, p=[1, 2]),
        _record(5, p=None),
    ]
    odd[1]["doc"]["scenario"].update(batch_size="many", prompt_len=[3], output_len=1e300)
    odd[2]["doc"]["metrics"].update(x_s=2**2000, y_s="fast")
    odd[3]["doc"]["breakdown"] = {"decode_step": {"time_s": {"nested": 1.0}}, "": {".": 2.0}}
    with StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"}, checkpoint_s=1e9) as w:
        w.append(odd[0])
        w.fold()  # p is an i8 column in the file now
        for r in odd[1:]:
            w.append(r)
        unfolded = open_store(out).columns()  # HDF5 rows + journal records
    folded = open_store(out).columns()
    assert folded["p"].tolist() == unfolded["p"].tolist() == ["1", "2.5", "x", str(2**70), "[1, 2]", ""]
    assert folded["batch_size"].tolist() == [0, -1, 2, 3, 4, 5]
    assert np.isnan(folded["prompt_len"][1]) and folded["output_len"][1] == -1 and np.isnan(folded["x_s"][2])
    assert [d["scenario"]["batch_size"] for d in open_store(out).iter_docs()][1] == "many"  # the document keeps it


# ---------------------------------------------------------------- damaged stores


def _damage(kind, path):
    if kind == "only_format":
        path.unlink()
        with h5py.File(path, "w") as f:
            f.attrs["format"] = store_mod.FORMAT
    elif kind == "short_column":
        with h5py.File(path, "a") as f:
            f["points/x_s"].resize((2,))
    elif kind == "no_docs":
        with h5py.File(path, "a") as f:
            del f["docs"]
    elif kind == "bad_parameters":
        with h5py.File(path, "a") as f:
            f.attrs["parameters"] = "{oops"
    else:
        jd = journal_dir(path)
        jd.mkdir()
        good = json.dumps(_record(7)) + "\n"
        bad = {
            "journal_no_key": json.dumps({k: v for k, v in _record(8).items() if k != "key"}) + "\n",
            "journal_truncated": good[:40] + "\n",
            "journal_not_utf8": b"\xff\xfe{}\n".decode("latin-1"),
            "journal_doc_no_system": json.dumps(dict(_record(8), doc={"status": "ok"})) + "\n",
        }[kind]
        (jd / "seg-h-1-000001.jsonl").write_bytes((good + bad + good).encode("latin-1"))
    return {
        "only_format": "sweep_id",
        "short_column": "/points/x_s",
        "no_docs": "/docs",
        "bad_parameters": "parameters",
    }.get(kind, "line 2")


@pytest.mark.parametrize(
    "kind",
    [
        "only_format",
        "short_column",
        "no_docs",
        "bad_parameters",
        "journal_no_key",
        "journal_truncated",
        "journal_not_utf8",
        "journal_doc_no_system",
    ],
)
def test_damaged_store_is_a_one_line_error_for_every_reader(tmp_path, capsys, kind):
    path = _fake_store(tmp_path / "d.h5")
    where = _damage(kind, path)
    shown = path if not kind.startswith("journal") else "seg-h-1-000001.jsonl"
    outs = {"export": tmp_path / "d.csv", "plot": tmp_path / "d.png", "merge": tmp_path / "m.h5"}
    for argv in (
        ["show", str(path)],
        ["export", str(path), "--csv", "-o", str(outs["export"])],
        ["plot", str(path), "--recipe", "line", "--x", "p", "--y", "x_s", "-o", str(outs["plot"])],
        ["merge", str(path), "-o", str(outs["merge"])],
    ):
        assert main(argv) == 2, argv
        _one_line_error(capsys, shown, where)
    assert not any(p.exists() for p in outs.values())
    with pytest.raises(ConfigError, match=where.replace("[", r"\[")):  # resume
        StoreWriter(path, {"sweep_id": "fake"}, {"p": "i8"})
    assert not lock_path(path).exists()


def test_corrupt_run_document_is_named_by_readers_of_documents(tmp_path, capsys):
    path = _fake_store(tmp_path / "d.h5")
    with h5py.File(path, "a") as f:
        f["docs"][1] = '{"status": "ok", "metr'
    assert main(["show", str(path)]) == 2
    _one_line_error(capsys, path, "/docs[1]", "JSON")
    assert main(["merge", str(path), "-o", str(tmp_path / "m.h5")]) == 2
    _one_line_error(capsys, path, "/docs[1]")
    assert not (tmp_path / "m.h5").exists()
    with pytest.raises(ConfigError, match=r"/docs\[1\]"):
        list(open_store(path).iter_docs())
    with h5py.File(path, "a") as f:  # valid JSON, but not a run document
        f["docs"][1] = '{"status": "ok", "system": "s", "model": "m", "scenario": "c"}'
    assert main(["show", str(path)]) == 2
    _one_line_error(capsys, path, "/docs[1]", "scenario.name")


def test_plot_all_names_a_missing_sweep_definition(tmp_path, capsys):
    path = _fake_store(tmp_path / "d.h5")  # a store written without a sweep definition
    assert main(["plot", str(path), "--all", "--fig-dir", str(tmp_path / "figs")]) == 2
    _one_line_error(capsys, path, "sweep_definition")
    assert not (tmp_path / "figs").exists()


def test_damaged_hdf5_bytes_are_a_one_line_error(tmp_path, capsys):
    path = _fake_store(tmp_path / "d.h5")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data[: len(data) * 3 // 4]))
    for argv in (["show", str(path)], ["export", str(path), "--csv", "-o", str(tmp_path / "d.csv")]):
        assert main(argv) == 2
        _one_line_error(capsys, path)
    assert not (tmp_path / "d.csv").exists()


def test_torn_last_journal_line_is_still_dropped_silently(tmp_path):
    path = _fake_store(tmp_path / "t.h5", n=1)
    jd = journal_dir(path)
    jd.mkdir()
    (jd / "seg-h-1-000001.jsonl").write_text(json.dumps(_record(1)) + "\n" + json.dumps(_record(2))[:30])
    assert [r["key"] for _, r in read_journal(path)] == ["k00001"]
    assert open_store(path).columns()["key"].tolist() == ["k00000", "k00001"]


# ---------------------------------------------------------------- journal writes and the lock


def test_short_journal_writes_are_completed_and_a_zero_write_raises(tmp_path, monkeypatch):
    real = os.write
    out = tmp_path / "w.h5"
    w = StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"}, checkpoint_s=1e9)
    calls = []

    def short(fd, data):  # at most 7 bytes per call on the journal segment, like a full pipe or NFS
        if fd == w._fd:
            calls.append(len(data))
            return real(fd, bytes(data[:7]))
        return real(fd, data)

    monkeypatch.setattr(store_mod.os, "write", short)
    for i in range(3):
        w.append(_record(i))
    assert len(calls) > 30
    monkeypatch.setattr(store_mod.os, "write", lambda fd, data: 0 if fd == w._fd else real(fd, data))
    with pytest.raises(OSError, match="wrote 0 of"):
        w.append(_record(3))
    assert "k00003" not in w.done_keys
    monkeypatch.setattr(store_mod.os, "write", real)
    w._close_segment()
    seg = next(journal_dir(out).glob("seg-*.jsonl"))
    seg.write_bytes(seg.read_bytes().rsplit(b"\n", 1)[0] + b"\n")  # what a kill at that point leaves
    w.close()
    assert open_store(out).columns()["key"].tolist() == ["k00000", "k00001", "k00002"]


def test_two_writers_never_hold_the_lock_together(tmp_path, monkeypatch):
    out = tmp_path / "l.h5"
    a = StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"})
    with pytest.raises(ConfigError, match="lock held"):
        StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"})
    a.close()
    assert not lock_path(out).exists()
    # the race of an unlinked lock file: B opens the old lock file, A finishes (unlink + unlock), C starts
    # on a new lock file, then B wins the old file's lock. B must notice and be refused, as C holds it.
    a = StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"})
    real = store_mod.fcntl.flock
    held = {}

    def racing_flock(fd, op):
        if op & store_mod.fcntl.LOCK_EX and not held:
            held["a_closed"] = True
            a.close()
            held["c"] = StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"})
        return real(fd, op)

    monkeypatch.setattr(store_mod.fcntl, "flock", racing_flock)
    with pytest.raises(ConfigError, match="lock held"):
        StoreWriter(out, {"sweep_id": "fake"}, {"p": "i8"})
    monkeypatch.setattr(store_mod.fcntl, "flock", real)
    c = held["c"]
    c.append(_record(0))
    c.close()
    assert open_store(out).columns()["key"].tolist() == ["k00000"]


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    "values, count",
    [
        ({"start": 1, "stop": 4096, "factor": 1.0000001}, "83,177,666"),
        ({"start": 1, "stop": 2, "step": 1e-9}, "1,000,000,000"),
        ({"start": 1, "stop": 2, "num": 10**9}, "1,000,000,000"),
        ({"start": 1e-300, "stop": 1e300, "factor": 1.0000000000000002}, "an unbounded number"),
    ],
)
def test_huge_ranges_are_refused_with_the_count_before_allocation(tmp_path, values, count):
    p = write_sweep(tmp_path, [{"grid": {"scenario.prompt_len": values}}])
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=f"got {count}") as e:
            load_sweep(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{MAX_POINTS:,}" in str(e.value) and "parameters.0.grid.scenario.prompt_len" in str(e.value)
    assert peak < 50e6


def test_huge_grids_and_samples_are_refused_with_the_count(tmp_path, capsys):
    grid = {
        "scenario.batch_size": {"start": 1, "stop": 10000, "step": 1},
        "scenario.output_len": {"start": 1, "stop": 1000, "step": 1},
    }
    p = write_sweep(tmp_path / "g", [{"grid": grid}])
    assert main(["sweep", str(p), "--out", str(tmp_path / "g.h5")]) == 2
    _one_line_error(capsys, "parameters.0.grid", "got 10,000,000", f"{MAX_POINTS:,}")
    assert not (tmp_path / "g.h5").exists()
    two = [
        {"grid": {"scenario.batch_size": list(range(1, 2001))}},
        {"grid": {"scenario.output_len": list(range(1, 1001))}},
    ]
    with pytest.raises(ConfigError, match="parameters: .*got 2,000,000"):
        load_sweep(write_sweep(tmp_path / "b", two))
    rnd = [{"random": {"samples": 10**9, "params": {"scenario.prompt_len": {"uniform": [1, 2]}}}}]
    with pytest.raises(ConfigError, match="parameters.0.random.samples: .*got 1,000,000,000"):
        load_sweep(write_sweep(tmp_path / "r", rnd))


# ---------------------------------------------------------------- all invalid, retry, versions


def test_set_that_invalidates_every_point_exits_non_zero_and_writes_nothing(tmp_path, capsys, monkeypatch):
    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2]}}])
    out = tmp_path / "s.h5"
    argv = [
        "sweep",
        str(p),
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
        "--point-fn",
        "test_sweep_trust:fake_point",
    ]
    assert main(argv + ["--set", "scenarios.chat.output_len=-1"]) == 2
    _one_line_error(capsys, "expected at least one valid point, got 2 invalid of 2", "output_len")
    assert not out.exists() and not journal_dir(out).exists() and not lock_path(out).exists()
    # the fixed sweep then runs into the same path (no stale store of another sweep_id in the way)
    monkeypatch.setenv("ATTNSIM_TEST_FAIL_BATCH", "1")
    p1 = write_sweep(tmp_path / "one", [{"grid": {"scenario.batch_size": [1]}}])
    assert (
        main(["sweep", str(p1), "--out", str(out), "--no-progress", "--point-fn", "test_sweep_trust:fake_point"]) == 3
    )
    assert "expected at least one ok point, got 1 failed" in capsys.readouterr().err
    assert open_store(out).columns()["status"].tolist() == ["error"]


def test_retry_failed_reruns_only_failed_points(tmp_path, monkeypatch):
    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2, 3, -4]}}])
    sw, out = load_sweep(p), tmp_path / "r.h5"
    kw = dict(RUN_KW, point_fn="test_sweep_trust:fake_point")
    monkeypatch.setenv("ATTNSIM_TEST_FAIL_BATCH", "2")
    s = run_sweep(sw, out, **kw)
    assert s.status_counts == {"ok": 2, "error": 1, "invalid": 1}
    before = dict(zip(open_store(out).columns()["key"], open_store(out).columns()["finished_unix_s"]))
    assert run_sweep(sw, out, **kw).simulated == 0  # a plain resume keeps failures
    monkeypatch.delenv("ATTNSIM_TEST_FAIL_BATCH")
    s = run_sweep(sw, out, retry_failed=True, **kw)
    assert (s.retried, s.simulated, s.invalid_up_front) == (2, 1, 1) and "2 failed points re-run" in s.text()
    assert s.status_counts == {"ok": 3, "invalid": 1}
    c = open_store(out).columns()
    assert c["scenario.batch_size"].tolist() == [1, 2, 3, -4] and len(set(c["key"])) == 4
    after = dict(zip(c["key"], c["finished_unix_s"]))
    assert sum(after[k] == t for k, t in before.items()) == 2  # the ok points were kept, not re-run


def test_version_is_recorded_and_mismatches_are_refused_unless_allowed(tmp_path, capsys):
    assert attnsim.BUILD_COMMIT and attnsim.__version__  # written from git when the package was built/installed
    a = _fake_store(tmp_path / "a.h5")
    with h5py.File(a) as f:
        assert f.attrs["attnsim_version"] == attnsim.__version__ and f.attrs["git_revision"] != "unknown"
    old = {"attnsim_version": "0.0.1"}
    with pytest.raises(
        ConfigError,
        match=r"expected a store written by this attnsim \(0\.0\.1\), got one written by "
        r".*--allow-version-mismatch",
    ):
        StoreWriter(a, {"sweep_id": "fake", **old}, {"p": "i8"})
    with StoreWriter(a, {"sweep_id": "fake", **old}, {"p": "i8"}, allow_version_mismatch=True) as w:
        w.append(_record(5))
    with h5py.File(a) as f:
        assert f.attrs["attnsim_version"] == attnsim.__version__ and "0.0.1" in f.attrs["other_versions"]
    b = _fake_store(tmp_path / "b.h5", meta=old)
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m.h5")]) == 2
    _one_line_error(capsys, "expected shards of one attnsim version", "0.0.1", "--allow-version-mismatch")
    assert not (tmp_path / "m.h5").exists()
    assert merge_stores([a, b], tmp_path / "m.h5", allow_version_mismatch=True) == 4
    with h5py.File(tmp_path / "m.h5") as f:
        assert "0.0.1" in f.attrs["other_versions"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_store_files_honour_the_umask(tmp_path, umask, mode):
    from attnsim.studies.sweep.table import write_csv

    old = os.umask(umask)
    try:
        path = _fake_store(tmp_path / "u.h5")
        csv_path = write_csv(load_table(path), tmp_path / "u.csv")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == mode == os.stat(csv_path).st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u.csv", "u.h5"]  # no temporary or lock files left
    assert load_table(path).columns["key"].tolist() == ["k00000", "k00001", "k00002"]


def test_custom_point_functions_obey_the_finite_number_rule(tmp_path):
    import json

    from sweep_helpers import write_sweep

    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import load_sweep
    from attnsim.studies.sweep.store import open_store

    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2]}}])
    run_sweep(
        load_sweep(p), tmp_path / "inf.h5", point_fn="sweep_helpers:infinite_point", progress=False, log=lambda m: None
    )
    st = open_store(tmp_path / "inf.h5")
    assert list(st.columns()["status"]) == ["error", "error"]
    for doc in st.iter_docs():
        assert doc["metrics"]["tpot_s"] is None and "non-finite result: metrics.tpot_s" in doc["error"]
        json.loads(json.dumps(doc), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
