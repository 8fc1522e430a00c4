"""Run one bad-input case in-process and classify the outcome.

Classes: ``clean`` (exit 2, one ``error:`` line naming file and key, nothing written), ``traceback`` (an
exception other than ConfigError escaped), ``silent`` (exit 0: the input was accepted), ``message`` (exit 2
but not one line naming what :attr:`Case.names` lists), ``wrote`` (an error, but files were written or
changed), ``hang`` / ``memory`` (only from :func:`classify_all`, which runs cases in a watched child).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

from bad_inputs.cases import COMMON, DIR, Case, Store


@dataclass
class Outcome:
    klass: str
    rc: object = None
    stderr: str = ""
    detail: str = ""  # traceback, changed paths or the reason of the class


def make_stores(folder: Path) -> dict:
    """A valid ``attnsim run`` results file and a valid 2-point sweep store, built from :data:`COMMON`."""
    from attnsim.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    write_files(folder, COMMON)
    old = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["run", "exp.yaml", "--no-figures", "--out", "run"]) == 0
            assert (
                main(
                    ["sweep", "sweep.yaml", "--workers", "1", "--no-progress", "--out", "sweep/s.h5", "--cache", "off"]
                )
                == 0
            )
    finally:
        os.chdir(old)
    return {"results": folder / "run" / "results.h5", "sweep": folder / "sweep" / "s.h5"}


def write_files(folder: Path, files: dict, stores: dict | None = None) -> None:
    for rel, content in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if content is DIR:
            p.mkdir()
        elif isinstance(content, Store):
            shutil.copyfile(stores[content.kind], p)
            if content.mutate:
                content.mutate(p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


# the folder that the absolute names of some cases point into (``name: /tmp/attnsim-abs/name``): it must not appear
OUTSIDE = "/tmp/attnsim-abs"


def materialise(case: Case, root: Path, stores: dict) -> Path:
    """Write the case's files (over :data:`COMMON`) into ``root/w`` (the cwd of the run); returns it.

    The run's changes are looked for in all of ``root``, so ``../x`` escapes are seen too."""
    work = root / "w"
    work.mkdir(parents=True, exist_ok=True)
    write_files(work, {**COMMON, **case.files}, stores)
    return work


def snapshot(folder: Path) -> dict:
    """relative path -> content hash ('dir' for folders) of everything under ``folder``."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder)] = "dir"
        for f in files:
            p = os.path.join(root, f)
            try:
                out[os.path.relpath(p, folder)] = hashlib.sha1(Path(p).read_bytes()).hexdigest()
            except OSError:
                out[os.path.relpath(p, folder)] = "unreadable"
    return out


def run_case(case: Case, root: Path) -> Outcome:
    """Run ``attnsim <case.argv>`` in ``root/w`` (see :func:`materialise`) and classify it."""
    from attnsim.cli import main

    folder = root / "w"
    if os.path.lexists(OUTSIDE):
        shutil.rmtree(OUTSIDE, ignore_errors=True)
    before = snapshot(root)
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(case.argv))
            except SystemExit as exc:
                rc = exc.code
    except MemoryError:
        return Outcome("memory", None, err.getvalue(), traceback.format_exc())
    except Exception:  # noqa: BLE001 - any other exception is the failure being looked for
        return Outcome("traceback", None, err.getvalue(), traceback.format_exc())
    finally:
        os.chdir(old)
    after = snapshot(root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if os.path.lexists(OUTSIDE):
        changed.append(OUTSIDE)
        shutil.rmtree(OUTSIDE, ignore_errors=True)
    text = err.getvalue()
    lines = text.splitlines()
    if rc == 0:
        return Outcome("silent", rc, text, f"exit 0; changed: {changed}")
    if rc != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in text:
        return Outcome("message", rc, text, f"exit {rc}, stderr {lines!r}")
    missing = [n for n in case.names if not any(x in lines[0] for x in ((n,) if isinstance(n, str) else n))]
    if missing:
        return Outcome("message", rc, text, f"error line lacks {missing}: {lines[0]}")
    if changed:
        return Outcome("wrote", rc, text, f"changed: {changed}")
    return Outcome("clean", rc, text, lines[0])


def _worker(conn, cases, stores, base):
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    for i, case in cases:
        root = Path(base) / f"{i:04d}"
        try:
            materialise(case, root, stores)
            o = run_case(case, root)
        except Exception:  # noqa: BLE001
            o = Outcome("traceback", None, "", "setup: " + traceback.format_exc())
        conn.send((i, o))
    conn.send(None)


def classify_all(cases: list[Case], base: Path, timeout_s: float = 60.0) -> dict:
    """case id -> Outcome, each case run in a child process that is restarted after a hang or a crash."""
    import multiprocessing as mp

    stores = make_stores(base / "stores")
    todo = list(enumerate(cases))
    results = {}
    ctx = mp.get_context("fork")
    while todo:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, todo, stores, str(base)))
        p.start()
        while True:
            if not parent.poll(timeout_s):
                i = todo[0][0]
                p.kill()
                p.join()
                results[cases[i].id] = Outcome("hang", None, "", f"no result in {timeout_s:.0f} s")
                todo = todo[1:]
                break
            try:
                msg = parent.recv()
            except EOFError:
                i = todo[0][0]
                p.join()
                results[cases[i].id] = Outcome("memory", None, "", f"worker died (exit {p.exitcode})")
                todo = todo[1:]
                break
            if msg is None:
                p.join()
                todo = []
                break
            i, o = msg
            results[cases[i].id] = o
            todo = [t for t in todo if t[0] != i]
    return results
