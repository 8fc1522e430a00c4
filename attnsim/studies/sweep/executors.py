"""Run a sweep's points: local process pool, dask.distributed, or one SLURM-array shard.

The driver (:func:`run_sweep`) validates every point first, then hands resolved configs to an
executor and streams each finished point into the store (:class:`attnsim.studies.sweep.store.StoreWriter`);
only a bounded window of points is in flight, so the driver's memory does not grow with the sweep.
Executors only differ in where :func:`execute_point` runs; results are identical.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing as mp
import os
import shlex
import shutil
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from attnsim.core import cache as _cache
from attnsim.core.config import ConfigError, ConfigTree
from attnsim.core.outputs import terminal_text
from attnsim.sim.results import finalize_doc
from attnsim.studies.sweep.spec import Sweep, canonical_json, sweep_definition_yaml
from attnsim.studies.sweep.store import FORMAT, StoreWriter, make_record, open_store

DEFAULT_POINT_FN = "attnsim.studies.sweep.executors:simulate_point"
EXECUTORS = ("local", "dask", "slurm")
_ENV_LOCK = threading.Lock()


# ---------------------------------------------------------------- one point (runs in a worker)


def simulate_point(tree_dict: dict, files: dict) -> dict:
    """The default point function: one run (system x model x scenario) of a resolved config tree;
    with a ``serving:`` section, one serving run (attnsim.studies.serve, replications included)."""
    from attnsim.sim.experiment import validate_tree
    from attnsim.sim.runner import run_experiment

    tree = ConfigTree(**tree_dict, files=files)
    if tree.experiment.get("serving") is not None:  # a serving experiment: request-level simulation
        from attnsim.studies.serve.run import serve_point

        return serve_point(tree)
    exp = validate_tree(tree)
    return run_experiment(exp)[0]


def _resolve_fn(spec: str) -> Callable:
    mod, _, name = spec.partition(":")
    return getattr(importlib.import_module(mod), name)


def execute_point(task: dict) -> dict:
    """Run one point and return its store record; failures become records with status invalid/error."""
    if task.get("cache_dir") is not None and os.environ.get(_cache.ENV) != task["cache_dir"]:
        with _ENV_LOCK:  # threads of one dask worker share the environment
            os.environ[_cache.ENV] = task["cache_dir"]
    before = _cache.stats()
    t0 = time.perf_counter()
    files = {tuple(k): v for k, v in task["files"]}
    try:
        doc = _resolve_fn(task.get("point_fn") or DEFAULT_POINT_FN)(task["tree"], files)
        if not isinstance(doc, dict):
            raise TypeError(f"the point function returned {type(doc).__name__}, expected a run document (dict)")
        if task.get("flips") and doc.get("status") == "ok":  # --flips: what would flip it (attnsim.studies.verdict)
            doc["verdict_flips"] = _point_flips(task, files, doc)
        finalize_doc(doc)  # the finite-number rule for custom point functions too (built-in ones apply it)
    except ConfigError as exc:
        doc = _failed_doc(task, "invalid", str(exc))
    except Exception as exc:  # noqa: BLE001 - a bug in one point must not stop the sweep
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        doc = _failed_doc(task, "error", f"{type(exc).__name__}: {exc} ({Path(tb.filename).name}:{tb.lineno})")
    after = _cache.stats()
    return make_record(
        task["index"],
        task["key"],
        task["params"],
        doc,
        task["resolved"],
        elapsed_s=time.perf_counter() - t0,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        cache={k: after[k] - before[k] for k in after},
    )


def _point_flips(task: dict, files: dict, doc: dict) -> dict:
    """The point's ``verdict_flips`` section against its baseline partner (``task["flips"]``: its key, tree,
    files); a refused perturbation or partner is the section's ``error``, not the point's."""
    from attnsim.studies.verdict import point_flips

    partner = task["flips"]
    partner_files = {tuple(k): v for k, v in partner["files"]}
    try:
        return point_flips(
            doc,
            (task["key"], ConfigTree(**task["tree"], files=files)),
            (partner["key"], ConfigTree(**partner["tree"], files=partner_files)),
        )
    except ConfigError as exc:
        return {"error": str(exc)}


def _failed_doc(task: dict, status: str, error: str) -> dict:
    tree = task["tree"]
    scen = {"name": task["scenario"], **(tree["scenarios"].get(task["scenario"]) or {})}
    return {
        "system": task["system"],
        "model": task["model"],
        "scenario": scen,
        "status": status,
        "error": error,
        "metrics": _null_metrics(tree),
    }


def _null_metrics(tree: dict) -> dict:
    """The metric keys of an ok run of the point's kind (serving or static), null."""
    serving = tree["experiment"].get("serving")
    if isinstance(serving, dict):
        from attnsim.studies.serve.run import null_metrics

        reps = serving.get("replications", 1)
        return null_metrics(False, reps if isinstance(reps, int) and not isinstance(reps, bool) else 1)
    from attnsim.sim.runner import null_metrics

    return null_metrics()


# ---------------------------------------------------------------- executors


def _run_serial(tasks: Iterator[dict]) -> Iterator[dict]:
    for t in tasks:
        yield execute_point(t)


def _windowed(submit, tasks: Iterator[dict], window: int, wait_one) -> Iterator[dict]:
    pending = set()
    for t in tasks:
        pending.add(submit(t))
        if len(pending) >= window:
            done, pending = wait_one(pending)
            for f in done:
                yield f.result()
    while pending:
        done, pending = wait_one(pending)
        for f in done:
            yield f.result()


def _run_local(tasks: Iterator[dict], workers: int) -> Iterator[dict]:
    if workers <= 1:
        yield from _run_serial(tasks)
        return
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    # Ctrl-C reaches the whole process group: workers ignore it (no tracebacks from them) and the
    # driver, which gets the KeyboardInterrupt, stops them; finished points are already in the journal
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint) as pool:

        def wait_one(p):
            done, rest = cf.wait(p, return_when=cf.FIRST_COMPLETED)
            return done, rest

        try:
            yield from _windowed(lambda t: pool.submit(execute_point, t), tasks, 2 * workers, wait_one)
        except BaseException:
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:  # running points are abandoned (re-run on resume), not waited for
                proc.terminate()
            raise


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def dask_client(workers: int, scheduler: Optional[str] = None, jobqueue=None):
    """A dask.distributed Client: existing scheduler, dask-jobqueue cluster, or a LocalCluster."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError(
            "the dask executor needs dask.distributed: pip install 'attnsim[dask]'", file="--executor"
        ) from None
    if scheduler:
        return Client(scheduler)
    if jobqueue is not None:
        try:
            import dask_jobqueue  # noqa: F401 - availability check
        except ImportError:
            raise ConfigError(
                "a dask.jobqueue block needs dask-jobqueue: pip install 'attnsim[slurm]'", file="dask.jobqueue"
            ) from None
        cluster = jobqueue_cluster(jobqueue)
        cluster.scale(jobs=jobqueue.jobs)
        return Client(cluster)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster)


def _jobqueue_class(jobqueue, check_submit: bool = True):
    """SLURMCluster / PBSCluster; refuses (one line) when dask-jobqueue or the submit command is missing."""
    import shutil

    try:
        import dask_jobqueue
    except ImportError:
        raise ConfigError(
            "a dask.jobqueue block needs dask-jobqueue: pip install 'attnsim[slurm]'", file="dask.jobqueue"
        ) from None
    cls, submit = (
        (dask_jobqueue.SLURMCluster, "sbatch") if jobqueue.kind == "slurm" else (dask_jobqueue.PBSCluster, "qsub")
    )
    if check_submit and shutil.which(submit) is None:
        raise ConfigError(
            f"needs the {submit} command on PATH (run on a {jobqueue.kind} login node), got none",
            file="dask.jobqueue",
            key="kind",
        )
    return cls


def check_executor(sweep: Sweep, executor: str, scheduler: Optional[str] = None) -> None:
    """Refuse, before any file is written, an executor that cannot start here (dask missing, no sbatch)."""
    if executor != "dask":
        return
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise ConfigError(
            "the dask executor needs dask.distributed: pip install 'attnsim[dask]'", file="--executor"
        ) from None
    dspec = sweep.spec.dask
    if dspec and dspec.jobqueue and not (scheduler or dspec.scheduler):
        _jobqueue_class(dspec.jobqueue)


def jobqueue_cluster(jobqueue, check_submit: bool = True):
    """The dask-jobqueue cluster of a ``dask.jobqueue`` section (named fields + ``options`` passed through).

    One thread per worker process unless ``processes`` says otherwise (the point function holds the GIL).
    """
    cls = _jobqueue_class(jobqueue, check_submit)
    kw = jobqueue.model_dump(exclude={"kind", "jobs", "options"}, exclude_none=True)
    kw.setdefault("processes", jobqueue.cores)
    kw.update(jobqueue.options)
    try:
        return cls(**kw)
    except TypeError as exc:  # an option the cluster class does not take
        raise ConfigError(
            f"options accepted by {cls.__name__}, got {exc}", file="dask.jobqueue", key="options"
        ) from None


def dask_window(client, workers: int, scheduler: Optional[str], jobqueue) -> int:
    """Points in flight on a dask cluster: 4 per worker thread, + 4. A dask-jobqueue cluster counts the
    threads it asked for (jobs x cores): its workers join minutes after the first points are submitted."""
    if scheduler:
        n = sum(client.nthreads().values())
    elif jobqueue is not None:
        n = max(sum(client.nthreads().values()), jobqueue.jobs * jobqueue.cores)
    else:
        n = workers
    return 4 * max(1, n) + 4


def _run_dask(tasks: Iterator[dict], workers: int, scheduler: Optional[str], jobqueue) -> Iterator[dict]:
    from dask.distributed import wait as dwait

    client = dask_client(workers, scheduler, jobqueue)
    try:
        window = dask_window(client, workers, scheduler, jobqueue)

        def wait_one(p):
            res = dwait(list(p), return_when="FIRST_COMPLETED")
            return res.done, set(res.not_done)

        yield from _windowed(lambda t: client.submit(execute_point, t, pure=False), tasks, window, wait_one)
    finally:
        cluster = client.cluster if not scheduler else None
        client.close()
        if cluster is not None:
            cluster.close()


# ---------------------------------------------------------------- shards


def parse_shard(text: Optional[str]) -> tuple[int, int]:
    """``"I/N"`` (0 <= I < N) -> (I, N); None -> from SLURM_ARRAY_TASK_ID/COUNT, else (0, 1)."""
    if text is None:
        tid, cnt = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_ARRAY_TASK_COUNT")
        if tid is None or cnt is None:
            return 0, 1
        lo = int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        return int(tid) - lo, int(cnt)
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ConfigError(f"expected I/N (e.g. 0/4), got {text!r}", file="--shard") from None
    if not (n >= 1 and 0 <= i < n):
        raise ConfigError(f"expected 0 <= I < N, got {text!r}", file="--shard")
    return i, n


def shard_path(out: Path, shard: tuple[int, int]) -> Path:
    i, n = shard
    if n == 1:
        return out
    return out.with_name(f"{out.stem}.shard{i}of{n}{out.suffix}")


# ---------------------------------------------------------------- driver


@dataclass
class SweepSummary:
    out: Path
    n_points: int = 0  # points of the whole sweep
    n_shard: int = 0  # distinct points of this shard
    duplicates: int = 0  # points whose resolved config equals an earlier point's
    already_done: int = 0  # skipped because the store had them (resume)
    simulated: int = 0  # run by this invocation
    invalid_up_front: int = 0
    wall_s: float = 0.0
    status_counts: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)  # (params label, error) of invalid/error points
    cache_hits: int = 0
    cache_misses: int = 0
    retried: int = 0  # failed points dropped from the store to run again (--retry-failed)
    shards: int = 1

    @property
    def all_failed(self) -> bool:
        """An unsharded store that holds points, none of them ok or does_not_fit (the CLI exits 3)."""
        return (
            self.shards == 1
            and bool(self.status_counts)
            and not (self.status_counts.get("ok") or self.status_counts.get("does_not_fit"))
        )

    def text(self) -> str:
        rate = self.simulated / self.wall_s if self.wall_s > 0 else 0.0
        counts = ", ".join(f"{v} {k}" for k, v in sorted(self.status_counts.items()))
        lines = [
            f"sweep: {self.n_shard} points in this store ({self.n_points} in the sweep"
            + (f", {self.duplicates} duplicate configs run once" if self.duplicates else "")
            + ")",
            f"  this run: {self.simulated} simulated in {self.wall_s:.1f} s ({rate:.2f} points/s), "
            f"{self.already_done} already done" + (f", {self.retried} failed points re-run" if self.retried else ""),
            f"  store: {counts or 'empty'}",
        ]
        hr = _cache.hit_rate(self.cache_hits, self.cache_misses)
        lines.append(
            f"  sub-result cache: {self.cache_hits} hits / {self.cache_hits + self.cache_misses} lookups"
            + (f" (hit rate {hr:.1%})" if hr == hr else "")
        )
        if self.failures:
            reasons = Counter(e for _, e in self.failures)
            lines.append(f"  failed: {len(self.failures)} points")
            for e, c in reasons.most_common(5):
                example = next(p for p, e2 in self.failures if e2 == e)
                lines.append(f"    {c} x {e}  (e.g. {example})")
        lines.append(f"  results: {self.out}")
        return "\n".join(lines)


def _task(sweep: Sweep, index: int, point_fn: Optional[str], cache_dir: Optional[str], flips: bool = False) -> dict:
    pt = sweep.resolve(index, check=False)
    d = pt.tree.as_dict()
    task = {
        "index": index,
        "key": pt.key,
        "params": pt.params,
        "tree": d,
        "files": [[list(k), v] for k, v in pt.tree.files.items()],
        "resolved": canonical_json(d),
        "system": pt.system,
        "model": pt.model,
        "scenario": pt.scenario,
        "point_fn": point_fn,
        "cache_dir": cache_dir,
    }
    if flips and pt.system != sweep.baseline:  # the partner: the point with the baseline system (sweep.baselines)
        partner = sweep.resolve(index, {**pt.params, "system": sweep.baseline}, check=False)
        task["flips"] = {
            "key": partner.key,
            "tree": partner.tree.as_dict(),
            "files": [[list(k), v] for k, v in partner.tree.files.items()],
        }
    return task


def check_flips(sweep: Sweep, point_fn: Optional[str]) -> None:
    """``--flips`` needs a baseline, static runs and the built-in point function (it re-runs points with it)."""
    if sweep.baseline is None:
        raise ConfigError(
            "expected a sweep with a baseline (baseline: a swept system, or the base experiment's), got none",
            file="--flips",
        )
    if sweep.base_tree.experiment.get("serving") is not None:
        raise ConfigError(
            "expected static runs (verdict flips re-run attnsim run's points), got a serving section", file="--flips"
        )
    if point_fn is not None:
        raise ConfigError(
            "expected the built-in point function (verdict flips re-run it), got --point-fn", file="--flips"
        )


def store_meta(sweep: Sweep, shard: tuple[int, int], argv=None) -> dict:
    import json

    import yaml

    from attnsim import __version__
    from attnsim.sim.results import git_revision

    return {
        "format": FORMAT,
        "attnsim_version": __version__,
        "git_revision": git_revision(),
        "sweep_name": sweep.spec.name,
        "sweep_id": sweep.sweep_id,
        "accepted_ids": json.dumps(sweep.accepted_ids),  # not stored (StoreWriter drops it): resume check only
        "sweep_definition": sweep_definition_yaml(sweep),
        "base_config": yaml.safe_dump(sweep.base_tree.as_dict(), sort_keys=False),
        "parameters": json.dumps(sweep.param_names),
        "n_points_total": sweep.n_points,
        "shard": f"{shard[0]}/{shard[1]}",
        "argv": " ".join(argv if argv is not None else sys.argv),
        "baseline": sweep.baseline or "",
    }  # vs_baseline columns (attnsim.studies.sweep.baselines)


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    executor: str = "local",
    workers: Optional[int] = None,
    shard: Optional[tuple[int, int]] = None,
    scheduler: Optional[str] = None,
    cache_dir: Optional[str | Path] = None,
    point_fn: Optional[str] = None,
    progress: bool = True,
    checkpoint_s: float = 300.0,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    argv=None,
    retry_failed: bool = False,
    allow_version_mismatch: bool = False,
    flips: bool = False,
) -> SweepSummary:
    """Run (or resume) a sweep into the store ``out`` (or its shard file); returns a summary.

    ``retry_failed`` re-runs the store's invalid/error points; ``allow_version_mismatch`` resumes a
    store written by another attnsim version. A sweep whose every point is invalid is refused
    (ConfigError) and leaves no store behind. ``flips``: every point compared with the baseline also gets
    its verdict flips (attnsim.studies.verdict; the store column ``verdict_flips``), at up to two re-runs per
    assumed parameter of its and its partner's hardware; points already in the store keep theirs."""
    if executor not in EXECUTORS:
        raise ConfigError(f"expected one of {', '.join(EXECUTORS)}, got {executor!r}", file="--executor")
    if flips:
        check_flips(sweep, point_fn)
    check_executor(sweep, executor, scheduler)
    if shard is None:
        shard = parse_shard(None) if executor == "slurm" else (0, 1)
    workers = workers or int(os.environ.get("SLURM_CPUS_PER_TASK", 0)) or os.cpu_count() or 1
    out_path = shard_path(Path(out), shard)
    cache_dir = (
        str(cache_dir)
        if cache_dir is not None
        else os.environ.get(_cache.ENV) or str(out_path.parent / ".attnsim-cache")
    )
    created = _first_missing(cache_dir) if cache_dir not in ("", "off") else None
    why = _cache.check_location(cache_dir)
    if why is not None:  # read-only, full, or not ours: one warning, then in-process memo only
        log(f"warning: sub-result cache {cache_dir}: {why}; continuing without it")
        cache_dir = ""
    from attnsim.core import jitcache

    kernels = jitcache.kernel_dir()  # chosen before ATTNSIM_CACHE_DIR names the sub-result folder (jitcache doc)
    old_env, old_pin = os.environ.get(_cache.ENV), os.environ.get(jitcache.PIN_ENV)
    os.environ[_cache.ENV] = cache_dir  # inherited by pool workers; dask workers get it in each task
    if kernels is not None:
        os.environ[jitcache.PIN_ENV] = str(kernels)
    try:
        return _drive(
            sweep,
            out_path,
            executor,
            workers,
            shard,
            scheduler,
            cache_dir,
            point_fn,
            progress,
            checkpoint_s,
            log,
            argv,
            retry_failed=retry_failed,
            allow_version_mismatch=allow_version_mismatch,
            flips=flips,
        )
    except ConfigError:  # refused (e.g. every point invalid): the cache folder this run created goes too
        if created is not None:
            shutil.rmtree(created, ignore_errors=True) if created.is_dir() else created.unlink(missing_ok=True)
        raise
    finally:
        for var, old in ((_cache.ENV, old_env), (jitcache.PIN_ENV, old_pin)):
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


def _first_missing(path: str) -> Optional[Path]:
    """The outermost folder (or file) of ``path`` that does not exist yet, or None."""
    p, missing = Path(path).absolute(), None
    while not p.exists() and p != p.parent:
        p, missing = p.parent, p
    return missing


def _drive(
    sweep,
    out_path,
    executor,
    workers,
    shard,
    scheduler,
    cache_dir,
    point_fn,
    progress,
    checkpoint_s,
    log,
    argv,
    retry_failed=False,
    allow_version_mismatch=False,
    flips=False,
) -> SweepSummary:
    t0 = time.perf_counter()
    summary = SweepSummary(out=out_path, n_points=sweep.n_points)
    si, sn = shard
    writer = StoreWriter(
        out_path,
        store_meta(sweep, shard, argv),
        sweep.param_dtypes(),
        checkpoint_s=checkpoint_s,
        allow_version_mismatch=allow_version_mismatch,
        retry_failed=retry_failed,
    )
    summary.retried, summary.shards = writer.retried, sn
    invalid: list = []  # (index, key, params, error): recorded after pass 1, unless every point is invalid
    resolved_all = False  # a failure before every point resolved leaves no new store behind
    try:
        # pass 1: resolve + validate every point (dedupe is global, so every shard sees every key)
        seen: set = set()
        to_run: list[int] = []
        for i, params in sweep.iter_params():
            pt = sweep.resolve(i, params, check=(i % sn == si))
            if pt.key in seen:
                summary.duplicates += 1
                continue
            seen.add(pt.key)
            if i % sn != si:
                continue
            summary.n_shard += 1
            if pt.key in writer.done_keys:
                summary.already_done += 1
                continue
            if pt.error is not None:
                invalid.append((i, pt.key, pt.params, pt.error))
                continue
            to_run.append(i)
        del seen
        resolved_all = True
        if sn == 1 and invalid and not to_run and not summary.already_done:  # (a shard records them: merge needs it)
            i, _, params, err = invalid[0]
            label = ", ".join(f"{k}={v}" for k, v in params.items())
            raise ConfigError(
                f"expected at least one valid point, got {len(invalid)} invalid of {len(invalid)} "
                f"(nothing run, no store written); first: point {i} ({label}): {err}",
                file=sweep.file,
            )
        for i, key, params, err in invalid:
            task = _task(sweep, i, point_fn, cache_dir)
            writer.append(make_record(i, key, params, _failed_doc(task, "invalid", err), task["resolved"]))
        summary.invalid_up_front = len(invalid)
        del invalid
        if summary.invalid_up_front:
            log(f"{summary.invalid_up_front} invalid points recorded (not run); summary at the end")
        tasks = (_task(sweep, i, point_fn, cache_dir, flips) for i in to_run)
        if executor == "dask":
            dspec = sweep.spec.dask
            results = _run_dask(
                tasks, workers, scheduler or (dspec.scheduler if dspec else None), dspec.jobqueue if dspec else None
            )
        else:
            results = _run_local(tasks, workers)
        from tqdm import tqdm

        with tqdm(
            total=len(to_run),
            unit="pt",
            desc=f"{sweep.spec.name}" + (f" [{si}/{sn}]" if sn > 1 else ""),
            disable=not progress,
            dynamic_ncols=True,
            smoothing=0.1,
        ) as bar:
            for rec in results:
                writer.append(rec)
                summary.simulated += 1
                summary.cache_hits += rec["cache"].get("hits", 0)
                summary.cache_misses += rec["cache"].get("misses", 0)
                bar.update(1)
    finally:
        writer.close(keep_empty=resolved_all and summary.n_shard == 0)  # a refused or interrupted new store
        # is not left behind (a shard with no points of its own keeps its empty store: the merge reads it)
    summary.wall_s = time.perf_counter() - t0
    cols = open_store(out_path).columns()
    if len(cols.get("status", [])):
        summary.status_counts = Counter(cols["status"].tolist())
        params = open_store(out_path).parameters
        for j, st in enumerate(cols["status"]):
            if st in ("invalid", "error"):
                label = ", ".join(f"{p}={cols[p][j]}" for p in params if p in cols)
                summary.failures.append((label, str(cols["error"][j])))
    return summary


# ---------------------------------------------------------------- sbatch


def _sbatch_value(v) -> str:
    """A value on an ``#SBATCH`` line: sbatch reads double quotes and backslash escapes there, and an
    unescaped ``#`` starts a comment."""
    t = str(v)
    if "\n" in t or "\r" in t:
        raise ConfigError(f"a value without line breaks, got {t!r}", file="--emit-sbatch")
    t = "".join("\\" + c if c in '\\"#' else c for c in t)
    return f'"{t}"' if any(c.isspace() for c in t) else t


def emit_sbatch(
    sweep: Sweep,
    out: str | Path,
    sweep_arg: Optional[str] = None,
    sets: Iterable[str] = (),
    cache: Optional[str] = None,
    merge_after: bool = False,
    environ=None,
    make_dirs: bool = False,
    flips: bool = False,
) -> str:
    """A ready sbatch array script: one task per shard (each resumes its own shard file).

    Every user string is shell-quoted and every path absolute; the environment of the tasks (venv,
    ``NUMBA_CACHE_DIR``, ``ATTNSIM_CONFIG_PATH``) comes from the sweep's ``slurm:`` section, else from
    ``environ`` (default: this process's). ``merge_after``: the first task submits the merge as a job
    depending on the whole array (``--dependency=afterok:$SLURM_ARRAY_JOB_ID``). ``make_dirs``: create
    the log folder now (Slurm opens the log before the script runs; a missing folder fails the task silently).
    """
    from attnsim.studies.sweep.spec import SlurmSpec

    s = sweep.spec.slurm or SlurmSpec()
    env = os.environ if environ is None else environ
    here = sweep.source.parent if sweep.source is not None else Path.cwd()

    def absolute(p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() else (here / q).absolute()

    out = Path(out).absolute()
    log_dir = absolute(s.log_dir) if s.log_dir else out.parent / "logs"
    venv = str(absolute(s.venv)) if s.venv else env.get("VIRTUAL_ENV")
    numba = (
        str(absolute(s.numba_cache_dir))
        if s.numba_cache_dir
        else (env.get("NUMBA_CACHE_DIR") or str(out.parent / ".numba-cache"))
    )
    config_path = s.config_path or env.get("ATTNSIM_CONFIG_PATH")
    python = str(Path(venv) / "bin" / "python") if venv else sys.executable
    job = "attnsim-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in sweep.spec.name)
    sweep_ref = str(sweep.source) if sweep.source is not None else str(sweep_arg)
    if cache and cache != "off":
        cache = "sqlite:" + os.path.abspath(cache[7:]) if cache.startswith("sqlite:") else os.path.abspath(cache)
    logs = str(log_dir).replace("%", "%%")  # Slurm expands %-patterns in log names
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={_sbatch_value(job)}",
        f"#SBATCH --array=0-{s.shards - 1}",
        f"#SBATCH --cpus-per-task={s.cpus_per_task}",
        f"#SBATCH --time={_sbatch_value(s.time)}",
        f"#SBATCH --mem={_sbatch_value(s.mem)}",
        f"#SBATCH --output={_sbatch_value(logs + '/' + job + '_%A_%a.log')}",
    ]
    if s.partition:
        lines.append(f"#SBATCH --partition={_sbatch_value(s.partition)}")
    if s.account:
        lines.append(f"#SBATCH --account={_sbatch_value(s.account)}")
    # the sweep file's own lines, taken as written: its #SBATCH lines join the header (sbatch ignores every
    # #SBATCH after the first command), then its shell lines (module load ...) before the venv is activated
    lines += [x for x in s.extra if x.startswith("#SBATCH")] + [x for x in s.extra if not x.startswith("#SBATCH")]
    lines += [
        "",
        f"# {sweep.n_points} points in {s.shards} shards; each array task runs one deterministic slice",
        "# (points i with i % N == SLURM_ARRAY_TASK_ID) into its own shard file. Re-submitting resumes",
        "# (all tasks, or some: sbatch --array=1,3 job.sh; finished points are skipped).",
        "set -eo pipefail",
        f"mkdir -p {q(str(log_dir))}",
        f"cd {q(str(Path.cwd()))}",
    ]
    if venv:
        lines.append(f"source {q(str(Path(venv) / 'bin' / 'activate'))}")
    lines.append("set -u")
    exports = {"NUMBA_CACHE_DIR": numba, **({"ATTNSIM_CONFIG_PATH": config_path} if config_path else {}), **s.env}
    lines += [f"export {k}={q(str(v))}" for k, v in exports.items()]
    lines.append('mkdir -p "$NUMBA_CACHE_DIR"  # compiled DRAM kernels, shared by every task')
    shards = [str(shard_path(out, (i, s.shards))) for i in range(s.shards)]
    merge = shlex.join([python, "-m", "attnsim", "merge", *shards, "-o", str(out)])
    if merge_after:
        opts = [
            f"--job-name={job}-merge",
            "--kill-on-invalid-dep=yes",
            f"--output={logs}/{job}-merge_%j.log",
            f"--time={s.time}",
            f"--mem={s.mem}",
        ]
        opts += [f"--partition={s.partition}"] * bool(s.partition) + [f"--account={s.account}"] * bool(s.account)
        lines += [
            'if [ "$SLURM_ARRAY_TASK_ID" = "${SLURM_ARRAY_TASK_MIN:-0}" ]; then  # once: the merge job',
            f'  sbatch --parsable --dependency=afterok:"$SLURM_ARRAY_JOB_ID" {shlex.join(opts)} --wrap {q(merge)} \\',
            '    || echo "warning: could not submit the merge job; run it by hand: "' + q(merge) + " >&2",
            "fi",
        ]
    cmd = [python, "-m", "attnsim", "sweep", sweep_ref, "--executor", "slurm", "--out", str(out)]
    cmd += (["--cache", cache] if cache else []) + [a for x in sets for a in ("--set", x)] + ["--flips"] * flips
    # the shard count is the script's, not SLURM_ARRAY_TASK_COUNT: re-submitting some tasks (sbatch --array=1,3)
    # resumes those shards instead of re-slicing the sweep
    lines += [
        shlex.join(cmd) + f' --shard "$SLURM_ARRAY_TASK_ID/{s.shards}" --workers "$SLURM_CPUS_PER_TASK" --no-progress'
    ]
    if not merge_after:
        lines += ["", "# when every task has finished:", f"#   {merge}"]
    if make_dirs:  # last: a script refused above leaves no empty log folder behind
        log_dir.mkdir(parents=True, exist_ok=True)
    return "\n".join(lines) + "\n"


def extra_notice(sweep: Sweep) -> list[str]:
    """The lines of a sweep's ``slurm.extra``, for a notice on stderr whenever a script is emitted: they are
    pasted into the job script unchanged, as shell, so a sweep file received from someone else cannot run
    commands unseen."""
    s = sweep.spec.slurm
    if s is None or not s.extra:
        return []
    src = sweep.source if sweep.source is not None else "the sweep"
    return [
        f"note: {len(s.extra)} slurm.extra line(s) of {src} are pasted into the job script as written "
        "(shell lines run on the cluster as you; read them before you submit):"
    ] + [f"  {terminal_text(x)}" for x in s.extra]
