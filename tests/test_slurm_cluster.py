"""A real single-node Slurm cluster (tests/slurm/cluster.sh: munged + slurmctld + slurmd on this machine).

(a) the array job that ``attnsim sweep --emit-sbatch --merge-after`` writes, submitted with ``sbatch``
(two shard tasks, then the dependent merge job), and (b) the same sweep through dask-jobqueue's
SLURMCluster (``--executor dask`` with a ``dask.jobqueue`` block) both give the local run's store:
same points, bit-equal metrics and breakdowns, equal run documents.

The cluster's packages are installed by .ci/run (``tests/slurm/cluster.sh install``); without them the
fixture installs them itself when root and fails with the install command otherwise. Jobs run the
Python of this test process and share one Numba cache, warmed by the local run.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from sweep_helpers import TINY_EXPERIMENT

from attnsim.studies.sweep.table import load_table

SCRIPT = Path(__file__).parent / "slurm" / "cluster.sh"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue")
VOLATILE = {"elapsed_s", "finished_unix_s", "worker"}  # when and where a point ran
WAIT_S = 180  # bound on each Slurm wait (a loaded 2-core machine finishes both tests in ~30 s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sh(cmd, env, timeout=120, cwd=None) -> str:
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        pytest.fail(
            f"{' '.join(map(str, cmd))} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}", pytrace=False
        )
    return r.stdout


def _have_slurm() -> bool:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return all(shutil.which(b, path=path) for b in BINARIES)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """Environment of a running private cluster (SLURM_CONF, ...); stopped at the end of the session."""
    if not _have_slurm():
        if os.geteuid() != 0:
            pytest.fail(
                "slurm-wlm and munge are missing: install them with `sudo tests/slurm/cluster.sh install` "
                "(apt-get install -y slurm-wlm munge)",
                pytrace=False,
            )
        _sh([str(SCRIPT), "install"], os.environ, timeout=600)
    root = os.environ.get("ATTNSIM_SLURM_ROOT")  # .ci/run's trap stops every cluster under it
    state = (
        Path(root) / f"slurm-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
        if root
        else tmp_path_factory.mktemp("slurm")
    )
    env = {
        **os.environ,
        "ATTNSIM_SLURM_DIR": str(state),
        "ATTNSIM_SLURM_CTLD_PORT": str(_free_port()),
        "ATTNSIM_SLURM_D_PORT": str(_free_port()),
        "SLURM_CONF": str(state / "etc" / "slurm.conf"),
    }
    if state.exists():  # a cluster of an earlier session under ATTNSIM_SLURM_ROOT: stopped, then started afresh
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state)
    try:
        _sh([str(SCRIPT), "start"], env)
        yield env
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def sweep_dir(slurm, tmp_path_factory):
    """A 4-point sweep (batch x output length, smallest model) with its sbatch and dask-jobqueue blocks, the
    environment its commands run in (this Python, a shared Numba cache), and the local run's store."""
    d = tmp_path_factory.mktemp("sweep")
    numba = os.environ.get("NUMBA_CACHE_DIR") or str(d / "numba-cache")
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY_EXPERIMENT))
    sweep = {
        "name": "tiny4",
        "base": "tiny.yaml",
        "parameters": [{"grid": {"scenario.batch_size": [1, 2], "scenario.output_len": [4, 8]}}],
        # a shell line before an #SBATCH line in `extra`: the directive must still reach sbatch
        "slurm": {
            "shards": 2,
            "cpus_per_task": 1,
            "time": "00:05:00",
            "mem": "1G",
            "extra": ["export ATTNSIM_TEST_MARK=1", f"#SBATCH --output={d}/array/logs/extra_%a.log"],
        },
        # one worker process, no nanny: a second process costs ~8 s of imports on a loaded 2-core machine
        "dask": {
            "jobqueue": {
                "kind": "slurm",
                "jobs": 1,
                "cores": 1,
                "memory": "2GB",
                "walltime": "00:05:00",
                "options": {
                    "job_name": "attnsim-dask",
                    "nanny": False,
                    "log_directory": str(d / "dask-logs"),
                    "local_directory": str(d / "dask-tmp"),
                    "job_script_prologue": [f"export NUMBA_CACHE_DIR={numba}"],
                },
            }
        },
    }
    (d / "tiny4.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    env = {**slurm, "NUMBA_CACHE_DIR": numba}
    if sys.prefix != sys.base_prefix:  # jobs activate the venv of this process (emit_sbatch reads VIRTUAL_ENV)
        env["VIRTUAL_ENV"] = sys.prefix
    else:
        env.pop("VIRTUAL_ENV", None)
    t0 = time.perf_counter()
    _sh(
        [
            sys.executable,
            "-m",
            "attnsim",
            "sweep",
            "tiny4.yaml",
            "--out",
            "local/s.h5",
            "--workers",
            "1",
            "--no-progress",
        ],
        env,
        cwd=d,
    )  # also compiles the Numba kernels once into the shared cache
    print(f"local run: {time.perf_counter() - t0:.1f} s")
    return d, env


def _same_store(got: Path, want: Path) -> None:
    """Same points (by key), bit-equal columns but the volatile ones, equal breakdowns and run documents."""
    a, b = load_table(got), load_table(want)
    assert a.attrs["sweep_id"] == b.attrs["sweep_id"] and len(b) == 4
    assert sorted(a.columns["key"]) == sorted(b.columns["key"])
    ia, ib = np.argsort(a.columns["key"]), np.argsort(b.columns["key"])
    assert set(a.columns) == set(b.columns) and set(a.breakdown) == set(b.breakdown)
    for k in sorted(set(a.columns) - VOLATILE):
        x, y = a.columns[k][ia], b.columns[k][ib]
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y, err_msg=k)
        else:
            assert x.tolist() == y.tolist(), k
    for k in a.breakdown:
        assert np.array_equal(a.breakdown[k][ia], b.breakdown[k][ib], equal_nan=True), k
    da, db = list(a.docs()), list(b.docs())
    assert [da[i] for i in ia] == [db[i] for i in ib]
    assert set(b.columns["status"]) == {"ok"}


def _jobcomp(env) -> list[dict]:
    """Finished jobs of the cluster (its jobcomp/filetxt log): one dict of KEY=VALUE fields per job."""
    log = Path(env["ATTNSIM_SLURM_DIR"]) / "log" / "jobcomp.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in lines]


def _wait_jobs(env, names: set, count: int, what: str, logs: Path) -> list[dict]:
    """Wait (bounded) until ``count`` jobs named in ``names`` have finished and none is queued."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < WAIT_S:
        queued = _sh(["squeue", "-h", "-o", "%j"], env).split()
        done = [j for j in _jobcomp(env) if j.get("Name") in names]
        if len(done) >= count and not set(queued) & names:
            return done
        time.sleep(0.5)
    tails = "; ".join(f"{p.name}: {p.read_text()[-300:]!r}" for p in sorted(logs.glob("*"))[:4])
    pytest.fail(
        f"{what}: not finished after {WAIT_S} s (queued: {queued}, finished: {done}; logs: {tails})", pytrace=False
    )


def _processes_naming(text: str, wait_s: float) -> list[str]:
    """Command lines of live processes that contain ``text``, after waiting (bounded) for them to end."""
    t0 = time.monotonic()
    while True:
        found = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit() and int(p.name) != os.getpid():
                try:
                    cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:  # ended meanwhile
                    continue
                if text in cmd:
                    found.append(f"{p.name}: {cmd.strip()}")
        if not found or time.monotonic() - t0 > wait_s:
            return found
        time.sleep(0.5)


def test_sbatch_array_and_merge_job_equal_local_run(sweep_dir):
    d, env = sweep_dir
    t0 = time.perf_counter()
    (d / "array").mkdir()
    _sh(
        [
            sys.executable,
            "-m",
            "attnsim",
            "sweep",
            "tiny4.yaml",
            "--out",
            "array/s.h5",
            "--emit-sbatch",
            "array/job.sh",
            "--merge-after",
        ],
        env,
        cwd=d,
    )
    script = (d / "array" / "job.sh").read_text()
    assert "#SBATCH --array=0-1" in script and f"export NUMBA_CACHE_DIR={env['NUMBA_CACHE_DIR']}" in script
    assert '--shard "$SLURM_ARRAY_TASK_ID/2"' in script  # re-submitting task 1 alone resumes shard 1 of 2
    # the jobs run the venv's python (its bin/python, whatever name started this process: python or python3)
    python = str(Path(env["VIRTUAL_ENV"]) / "bin" / "python") if "VIRTUAL_ENV" in env else sys.executable
    assert f"{python} -m attnsim sweep" in script and ("VIRTUAL_ENV" not in env or env["VIRTUAL_ENV"] in script)
    array_id = _sh(["sbatch", "--parsable", "array/job.sh"], env, cwd=d).strip().split(";")[0]
    jobs = _wait_jobs(
        env, {"attnsim-tiny4", "attnsim-tiny4-merge"}, 3, f"array job {array_id} + merge", d / "array" / "logs"
    )
    print(f"sbatch array (2 tasks) + merge job: {time.perf_counter() - t0:.1f} s")
    assert sorted(j["Name"] for j in jobs) == ["attnsim-tiny4", "attnsim-tiny4", "attnsim-tiny4-merge"]
    assert {j["JobState"] for j in jobs} == {"COMPLETED"}, jobs
    merge = next(j for j in jobs if j["Name"] == "attnsim-tiny4-merge")
    ends = [j["EndTime"] for j in jobs if j["Name"] == "attnsim-tiny4"]
    assert merge["StartTime"] >= max(ends)  # the dependency held it until the whole array was done
    assert sorted(p.name for p in (d / "array" / "logs").glob("extra_*.log")) == ["extra_0.log", "extra_1.log"]
    for i in range(2):  # each task wrote its deterministic slice (points i % 2 == task id)
        shard = load_table(d / "array" / f"s.shard{i}of2.h5")
        assert shard.columns["index"].tolist() == [i, i + 2]
    merged = load_table(d / "array" / "s.h5")
    assert merged.attrs["shard"] == "merged"
    local_pids = set(load_table(d / "local" / "s.h5").columns["worker"])
    assert not set(merged.columns["worker"]) & local_pids  # the points ran in the jobs
    _same_store(d / "array" / "s.h5", d / "local" / "s.h5")


def test_dask_jobqueue_slurmcluster_equals_local_run(sweep_dir):
    import dask_jobqueue  # noqa: F401 - in the test extra: a missing one fails here

    d, env = sweep_dir
    t0 = time.perf_counter()
    out = _sh(
        [
            sys.executable,
            "-m",
            "attnsim",
            "sweep",
            "tiny4.yaml",
            "--executor",
            "dask",
            "--out",
            "dask/s.h5",
            "--no-progress",
        ],
        env,
        cwd=d,
        timeout=WAIT_S,
    )
    print(f"dask-jobqueue SLURMCluster sweep: {time.perf_counter() - t0:.1f} s")
    assert "4 simulated" in out
    jobs = _wait_jobs(env, {"attnsim-dask"}, 1, "dask worker job", d / "dask-logs")
    assert len(jobs) == 1 and jobs[0]["JobState"] in ("COMPLETED", "CANCELLED"), jobs  # closed with the sweep
    worker_log = d / "dask-logs" / f"attnsim-dask-{jobs[0]['JobId']}.err"  # <job_name>-<job id>
    assert worker_log.read_text().count("Start worker at") == 1  # the worker ran inside the Slurm job
    left = _processes_naming(str(d / "dask-tmp"), wait_s=30)  # KillWait 5 s: the job leaves no process behind
    assert left == [], f"dask worker processes outlived their job: {left}"
    _same_store(d / "dask" / "s.h5", d / "local" / "s.h5")


def test_scancel_kills_a_job_step_that_ignores_sigterm(slurm, tmp_path):
    """The test cluster kills what a cancelled job leaves, as a cgroup-tracking cluster does: the batch shell dies
    on SIGTERM, its child ignores it (as a dask worker hung in its close did) and must still get SIGKILL after
    KillWait. Tracking by parent links (proctrack/linuxproc) lost the re-parented child for good."""
    env = slurm
    marker = f"attnsim-stray-{os.getpid()}-{time.monotonic_ns()}"
    job = tmp_path / "stray.sh"
    job.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=attnsim-stray\n#SBATCH --output={tmp_path}/stray.out\n"
        f"{sys.executable} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f'print("ready", flush=True); time.sleep(600)\' {marker}\n'
    )
    jid = _sh(["sbatch", "--parsable", str(job)], env, cwd=tmp_path).strip()
    t0 = time.monotonic()
    while not _processes_naming(marker, wait_s=0):
        if time.monotonic() - t0 > WAIT_S:
            pytest.fail(f"job {jid} did not start its step in {WAIT_S} s", pytrace=False)
        time.sleep(0.2)
    _sh(["scancel", jid], env)
    left = _processes_naming(marker, wait_s=30)
    for line in left:  # do not leave it running on a developer machine
        os.kill(int(line.split(":")[0]), 9)
    assert left == [], f"a cancelled job's process survived: {left}"


def test_dask_window_counts_jobqueue_workers_before_they_join():
    """Points in flight: 4 per worker thread + 4; a jobqueue cluster's threads (jobs x cores) count from the
    start (they join after the first submissions: with 10 jobs x 8 cores, a window from the 0 joined
    threads would keep 8 points in flight and 72 workers idle)."""
    from attnsim.studies.sweep.executors import dask_window
    from attnsim.studies.sweep.spec import DaskJobqueue

    class Client:
        def __init__(self, joined: int):
            self.joined = joined

        def nthreads(self):
            return {f"tcp://w{i}": 1 for i in range(self.joined)}

    jq = DaskJobqueue(jobs=10, cores=8)
    assert dask_window(Client(0), 2, None, jq) == 4 * 80 + 4
    assert dask_window(Client(96), 2, None, jq) == 4 * 96 + 4  # more threads joined than asked (adaptive)
    assert dask_window(Client(3), 2, "tcp://sched:8786", None) == 4 * 3 + 4  # an existing cluster: its threads
    assert dask_window(Client(0), 6, None, None) == 4 * 6 + 4  # LocalCluster: --workers


def test_store_on_a_file_system_without_flock_is_refused_in_one_line(tmp_path, monkeypatch):
    """Lustre mounted without ``-o flock`` answers flock() with ENOSYS: one ConfigError naming the lock file,
    no traceback, no store."""
    import errno
    import fcntl

    from sweep_helpers import write_sweep

    from attnsim.core.config import ConfigError
    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import load_sweep

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    sw = load_sweep(write_sweep(tmp_path, [{"grid": {"scenario.batch_size": [1]}}]))
    with pytest.raises(ConfigError) as err:
        run_sweep(sw, tmp_path / "s.h5", workers=1, progress=False, log=lambda m: None)
    msg = str(err.value)
    assert "\n" not in msg and "s.h5.lock" in msg and "Function not implemented" in msg
    assert not (tmp_path / "s.h5").exists() and not (tmp_path / "s.h5.lock").exists()
