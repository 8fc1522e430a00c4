"""Thread safety (registry, sub-result cache, dask workers with several threads) and Ctrl-C on a sweep."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from sweep_helpers import read_store_rows, write_sweep
from test_sweep_store import _same_points

from attnsim.core import cache
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import open_store

ROOT = Path(__file__).resolve().parent.parent
ENTERED, RELEASE = threading.Event(), threading.Event()


def test_registry_lookups_wait_for_the_imports(tmp_path, monkeypatch):
    """A lookup during the first (slow) import of the device families sees the complete registry."""
    from attnsim.hwmodels import registry

    (tmp_path / "slow_family.py").write_text(
        f"import {__name__} as t\n"
        "from attnsim.hwmodels import registry\n"
        "t.ENTERED.set()\n"
        "t.RELEASE.wait(60)\n"
        "registry.register('slow_kind', object, lambda spec: spec)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.kinds()  # the real families are imported (and registered) once, before the state is patched
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_MODULES", registry._MODULES + ("slow_family",))
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.delitem(sys.modules, "slow_family", raising=False)
    seen = {}
    first = threading.Thread(target=lambda: seen.setdefault("first", registry.kinds()))
    first.start()
    assert ENTERED.wait(60)  # the first lookup is inside the import now
    second = threading.Thread(target=lambda: seen.setdefault("second", registry.kinds()))
    second.start()
    second.join(0.5)  # (with the old flag it returned here, without slow_kind)
    RELEASE.set()
    first.join(60)
    second.join(60)
    assert "slow_kind" in seen["first"] and "slow_kind" in seen["second"] and "gpu" in seen["second"]


def test_cache_under_threads(tmp_path, monkeypatch):
    for loc in (str(tmp_path / "d"), f"sqlite:{tmp_path / 'c.sqlite'}"):
        monkeypatch.setenv(cache.ENV, loc)
        cache.reset()
        errors, counts = [], []

        def work(tid):
            try:
                for i in range(40):
                    j = (i * 7 + tid) % 10
                    v = cache.cached(("thr", j), lambda j=j: np.full(4, float(j)))
                    assert v.tolist() == [float(j)] * 4
                counts.append(cache.stats())
            except Exception as exc:  # noqa: BLE001 - reported by the assert below
                errors.append(repr(exc))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == [] and len(counts) == 6
        assert all(c["hits"] + c["misses"] == 40 for c in counts)  # per-thread counters
        assert 10 <= sum(c["misses"] for c in counts)
        cache.reset()
        for j in range(10):  # every entry on disk is authentic and complete
            assert cache.cached(("thr", j), lambda: None).tolist() == [float(j)] * 4
        assert cache.stats() == {"hits": 10, "misses": 0}
    cache.reset()


def test_dask_threads_processes_and_local_give_equal_stores(tmp_path):
    from dask.distributed import LocalCluster

    p = write_sweep(
        tmp_path,
        [
            {
                "grid": {
                    "system": ["h100_x1", "cxl_pnm"],
                    "model": ["llama2-7b", "mistral-7b"],
                    "scenario.batch_size": [1, 4],
                    "scenario.prompt_len": [128, 512],
                }
            }
        ],
    )
    sw = load_sweep(p)
    kw = dict(progress=False, log=lambda m: None, point_fn="sweep_helpers:cached_point")
    local = run_sweep(sw, tmp_path / "local.h5", workers=1, cache_dir=tmp_path / "c0", **kw)
    assert local.status_counts == {"ok": 16}
    for name, ckw in (
        ("threads", dict(n_workers=1, threads_per_worker=3, processes=False)),
        ("procs", dict(n_workers=2, threads_per_worker=1, processes=True)),
    ):
        # a fresh in-process memo, as in the processes' workers: the local run's would answer whole PIM steps
        # (key pim.cost, hwmodels/pim.py) without the engine lookups nested in them, so fewer lookups counted
        cache.reset()
        with LocalCluster(dashboard_address=None, **ckw) as cluster:
            s = run_sweep(
                sw,
                tmp_path / f"{name}.h5",
                executor="dask",
                scheduler=cluster.scheduler_address,
                cache_dir=tmp_path / f"c_{name}",
                **kw,
            )
        assert s.status_counts == {"ok": 16}, (name, s.failures)
        assert s.cache_hits + s.cache_misses == local.cache_hits + local.cache_misses  # no double counting
        _same_points(tmp_path / f"{name}.h5", tmp_path / "local.h5")
    workers = set(open_store(tmp_path / "threads.h5").columns()["worker"].tolist())
    assert workers == {f"{socket.gethostname()}:{os.getpid()}"}  # threads of this very process


def slow_point(tree_dict, files):
    """Point function of the Ctrl-C test: batch 1 runs, every other point blocks."""
    from attnsim.studies.sweep.executors import simulate_point

    if tree_dict["scenarios"][next(iter(tree_dict["scenarios"]))]["batch_size"] != 1:
        time.sleep(300)
    return simulate_point(tree_dict, files)


def test_ctrl_c_stops_a_local_sweep_quietly(tmp_path):
    p = write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1, 2, 3, 4]}}])
    out = tmp_path / "s.h5"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnsim",
            "sweep",
            str(p),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
            "--point-fn",
            f"{__name__}:slow_point",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and read_store_rows(out)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # the last line says what is kept and how to resume (issue 28)
    assert (
        proc.returncode == 130
        and stderr.strip().splitlines()[-1] == f"interrupted: 1 point kept in {out}; run the same command to resume"
    )
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    rows = read_store_rows(out)
    assert len(rows) == 1  # the finished point is kept (a rerun resumes from it)
