"""The resumable, kill-safe results store of a sweep (HDF5 + an append-only journal).

Kill-safety design (journal + atomic fold):

* While a sweep runs, each finished point is appended as one JSON line to a journal segment
  ``FILE.h5.journal/seg-<host>-<pid>-<n>.jsonl`` with a single unbuffered ``write`` (the driver is the
  only writer; workers return results to it). A SIGKILL can only tear the last line; readers drop a
  line that does not end in a newline or does not parse (that point was in flight and is re-run).
* Folding moves journal records into the HDF5 file without ever modifying the live file: the HDF5 is
  copied to a temporary file in the same folder, the records are appended there (resizable, chunked
  datasets, streamed in batches), the copy is fsync'ed and atomically renamed over ``FILE.h5``, and only
  then are the folded segments deleted. A kill during a fold leaves the old file and the journal (the
  next run folds again); a kill between rename and delete leaves records that are already in the file,
  which the next fold skips by key. So a finished point is never lost or duplicated and ``FILE.h5`` is
  always a complete, readable HDF5 file. The writer folds on open (recovery), every ``checkpoint_s``
  seconds and on close. ``FILE.h5.lock`` (``flock``, released by the kernel on kill) keeps two sweeps
  from writing one store. Durability against power loss: segments are fsync'ed at every fold.
* Readers (:func:`open_store`) see the HDF5 rows plus any unfolded journal records.

HDF5 layout (``format = attnsim.sweep/1``), every dataset row-aligned, one row per finished point in
completion order (``index`` gives the expansion order):

* file attrs: ``format``, ``attnsim_version``, ``git_revision``, ``created_utc``, ``updated_utc``,
  ``sweep_name``, ``sweep_id``, ``sweep_definition`` (YAML), ``base_config`` (YAML of the base tree after
  fixed overrides), ``parameters`` (JSON list of parameter columns), ``n_points_total``, ``shard``
  (``"I/N"``), ``argv``, ``cache_hits``, ``cache_misses``.
* ``/points/<column>``: ``index`` (i8), ``key`` (str), ``status`` (``ok``, ``does_not_fit``, ``invalid``,
  ``error``), ``error`` (str), ``system``, ``model``, ``scenario`` (str), ``batch_size`` (i8),
  ``prompt_len`` (f8, mean prompt length), ``output_len`` (i8), ``elapsed_s`` (f8, wall time of the
  simulation), ``finished_unix_s`` (f8), ``worker`` (str), one column per parameter (named by its
  sweep key; i8/f8/str) and one f8 column per scalar metric of the run document (``ttft_s``, ``tpot_s``,
  ...; NaN where a point has none).
* ``/breakdown/<phase>/<table>/<name>`` (f8): per-point breakdowns (e.g.
  ``/breakdown/decode_step/time_s_by_op/attn_score``), plus ``/breakdown/<phase>/time_s`` and ``energy_j``.
* ``/docs`` (str): the full run document of each point as JSON (what ``attnsim run --json`` prints).
* ``/resolved`` (str): the point's resolved config tree as canonical JSON (its ``key`` is a hash of it).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import glob
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

import h5py
import numpy as np

from attnsim.results import json_default as _json_default
from attnsim.config import ConfigError

FORMAT = "attnsim.sweep/1"
STR = h5py.string_dtype()
FIXED_COLUMNS = {"index": "i8", "key": "str", "status": "str", "error": "str", "system": "str", "model": "str",
                 "scenario": "str", "batch_size": "i8", "prompt_len": "f8", "output_len": "i8", "elapsed_s": "f8",
                 "finished_unix_s": "f8", "worker": "str"}
_FOLD_BATCH = 256
_CHUNK = 256  # rows per HDF5 chunk of a column


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def journal_dir(path: Path) -> Path:
    return Path(str(path) + ".journal")


# ---------------------------------------------------------------- records

def make_record(index: int, key: str, params: dict, doc: dict, resolved: str, elapsed_s: float = 0.0,
                worker: str = "", cache: Optional[dict] = None) -> dict:
    """One finished point as stored in the journal (and folded into the HDF5 rows)."""
    return {"index": int(index), "key": key, "params": params, "doc": doc, "resolved": resolved,
            "elapsed_s": float(elapsed_s), "finished_unix_s": time.time(), "worker": worker,
            "cache": cache or {}}


def _scalar_metrics(doc: dict) -> dict:
    return {k: float(v) for k, v in (doc.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _breakdown_columns(doc: dict) -> dict:
    out = {}
    for phase, bd in (doc.get("breakdown") or {}).items():
        for table, vals in bd.items():
            if isinstance(vals, dict):
                for name, v in vals.items():
                    out[f"{phase}/{table}/{str(name).replace('/', '_')}"] = float(v)
            elif isinstance(vals, (int, float)):
                out[f"{phase}/{table}"] = float(vals)
    return out


def record_row(rec: dict) -> dict:
    """Flat column values of a record (fixed columns, parameters, metrics)."""
    doc = rec["doc"]
    sc = doc.get("scenario") or {}
    plen = sc.get("prompt_len", np.nan)
    if isinstance(sc.get("context_lens"), list) and sc["context_lens"]:
        plen = float(np.mean(sc["context_lens"]))
    elif isinstance(sc.get("context_lens"), dict) and sc["context_lens"].get("mean") is not None:
        plen = float(sc["context_lens"]["mean"])
    row = {"index": rec["index"], "key": rec["key"], "status": doc.get("status", ""), "error": doc.get("error", ""),
           "system": doc.get("system", ""), "model": doc.get("model", ""), "scenario": sc.get("name", ""),
           "batch_size": int(sc.get("batch_size", 0) or 0), "prompt_len": float(plen),
           "output_len": int(sc.get("output_len", 0) or 0), "elapsed_s": rec.get("elapsed_s", 0.0),
           "finished_unix_s": rec.get("finished_unix_s", 0.0), "worker": rec.get("worker", "")}
    for k, v in rec.get("params", {}).items():
        if k not in FIXED_COLUMNS:
            row[k] = v
    for k, v in _scalar_metrics(doc).items():
        if k not in row:
            row[k] = v
    return row


class JournalChanged(RuntimeError):
    """A journal segment was folded and deleted by a running writer while being read."""


def read_journal(path: Path) -> Iterator[tuple[Path, dict]]:
    """Yield (segment, record) for every complete record of a store's journal; torn lines are dropped.

    Raises JournalChanged if a listed segment disappears (a concurrent fold): re-read the store."""
    for seg in sorted(journal_dir(path).glob("seg-*.jsonl")):
        try:
            fh = open(seg, "rb")
        except FileNotFoundError:
            raise JournalChanged(str(seg)) from None
        with fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # torn by a kill: the point was in flight
                try:
                    yield seg, json.loads(line)
                except json.JSONDecodeError:
                    continue


# ---------------------------------------------------------------- HDF5 appends

def _kind_of(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "str"
    if isinstance(v, (int, np.integer)):
        return "i8"
    if isinstance(v, (float, np.floating)):
        return "f8"
    return "str"


def _fill(kind: str):
    return {"i8": -1, "f8": np.nan, "str": ""}[kind]


def _as_str(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (list, dict, bool)) or v is None:
        return json.dumps(v)
    return str(v)


def _column(group: h5py.Group, name: str, kind: str, n: int) -> h5py.Dataset:
    if name in group:
        return group[name]
    dt = STR if kind == "str" else np.dtype(kind)
    ds = group.create_dataset(name, shape=(n,), maxshape=(None,), dtype=dt, chunks=(_CHUNK,),
                              fillvalue=None if kind == "str" else _fill(kind))
    if n and kind == "str":
        ds[:] = np.array([""] * n, dtype=object)
    return ds


def _append_batch(f: h5py.File, recs: list[dict], param_kinds: dict) -> None:
    """Append records (already de-duplicated) to an open store file."""
    if not recs:
        return
    pts = f.require_group("points")
    n0 = pts["key"].shape[0] if "key" in pts else 0
    m = len(recs)
    rows = [record_row(r) for r in recs]
    names = list(FIXED_COLUMNS)
    for r in rows:
        for k in r:
            if k not in names:
                names.append(k)
    for name in names:
        kind = FIXED_COLUMNS.get(name) or param_kinds.get(name) or ("f8" if name not in param_kinds else "str")
        if name in pts:
            ds = pts[name]
            kind = "str" if ds.dtype.kind == "O" else ds.dtype.str[1:]
        else:
            first = next((r[name] for r in rows if name in r), None)
            kind = FIXED_COLUMNS.get(name) or param_kinds.get(name) or _kind_of(first)
            ds = _column(pts, name, kind, n0)
        vals = [r.get(name, _fill(kind)) for r in rows]
        ds.resize((n0 + m,))
        if kind == "str":
            ds[n0:] = np.array([_as_str(v) for v in vals], dtype=object)
        else:
            ds[n0:] = np.asarray([_fill(kind) if v is None else v for v in vals], dtype=kind)
    for name in list(pts):  # columns absent from this batch
        if pts[name].shape[0] < n0 + m:
            ds = pts[name]
            kind = "str" if ds.dtype.kind == "O" else ds.dtype.str[1:]
            ds.resize((n0 + m,))
            ds[n0:] = np.array([""] * m, dtype=object) if kind == "str" else np.full(m, _fill(kind), dtype=kind)
    bd = f.require_group("breakdown")
    cols = [_breakdown_columns(r["doc"]) for r in recs]
    bnames = sorted({k for c in cols for k in c} | set(_breakdown_names(bd)))
    for name in bnames:
        ds = bd[name] if name in bd else bd.create_dataset(name, shape=(n0,), maxshape=(None,), dtype="f8",
                                                           chunks=(_CHUNK,), fillvalue=np.nan)
        ds.resize((n0 + m,))
        ds[n0:] = np.array([c.get(name, np.nan) for c in cols])
    for dname, field in (("docs", "doc"), ("resolved", "resolved")):
        ds = f[dname] if dname in f else f.create_dataset(dname, shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))
        ds.resize((n0 + m,))
        ds[n0:] = np.array([r[field] if isinstance(r[field], str) else json.dumps(r[field]) for r in recs], dtype=object)


def _breakdown_names(group: h5py.Group) -> list[str]:
    names = []
    group.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def _store_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with h5py.File(path, "r") as f:
        if "points/key" not in f:
            return set()
        return {k.decode() if isinstance(k, bytes) else k for k in f["points/key"][()]}


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def _write_attrs(f: h5py.File, meta: dict) -> None:
    for k, v in meta.items():
        f.attrs[k] = v if isinstance(v, (int, float, np.integer, np.floating)) else str(v)


def fold_into(path: Path, records: Iterable[dict], meta: dict, param_kinds: dict, skip_keys: Optional[set] = None) -> int:
    """Atomically produce ``path`` = old contents + ``records`` (keys already present skipped).

    Returns the number of records appended. The live file is never modified in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = set(_store_keys(path)) if skip_keys is None else set(skip_keys)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".h5", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a store should get the usual file mode
    added = 0
    try:
        if path.exists():
            shutil.copyfile(path, tmp)
            mode = "a"
        else:
            mode = "w"
        with h5py.File(tmp, mode) as f:
            if mode == "w":
                f.attrs["created_utc"] = _now()
            _write_attrs(f, {k: v for k, v in meta.items() if k not in ("cache_hits", "cache_misses")})
            hits = int(f.attrs.get("cache_hits", 0)) + int(meta.get("cache_hits", 0))
            misses = int(f.attrs.get("cache_misses", 0)) + int(meta.get("cache_misses", 0))
            f.attrs["cache_hits"], f.attrs["cache_misses"] = hits, misses
            f.attrs["updated_utc"] = _now()
            if "points" not in f:
                _init_columns(f, param_kinds)
            batch = []
            for rec in records:
                if rec["key"] in seen:
                    continue
                seen.add(rec["key"])
                batch.append(rec)
                if len(batch) >= _FOLD_BATCH:
                    _append_batch(f, batch, param_kinds)
                    added += len(batch)
                    batch = []
            _append_batch(f, batch, param_kinds)
            added += len(batch)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return added


def _init_columns(f: h5py.File, param_kinds: dict) -> None:
    pts = f.create_group("points")
    for name, kind in FIXED_COLUMNS.items():
        _column(pts, name, kind, 0)
    for name, kind in param_kinds.items():
        if name not in pts:
            _column(pts, name, kind, 0)
    f.create_group("breakdown")
    f.create_dataset("docs", shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))
    f.create_dataset("resolved", shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))


# ---------------------------------------------------------------- writer

class StoreWriter:
    """The single writer of a store: journal appends per point, atomic folds into the HDF5.

    ``meta`` holds the file attributes (sweep identity etc.); opening a store of a different
    ``sweep_id`` is refused.
    """

    def __init__(self, path: str | Path, meta: dict, param_kinds: dict, checkpoint_s: float = 300.0):
        self.path = Path(path)
        self.meta = dict(meta)
        self.meta.setdefault("format", FORMAT)
        self.param_kinds = dict(param_kinds)
        self.checkpoint_s = checkpoint_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fh = open(str(self.path) + ".lock", "a+")
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise ConfigError("another sweep is writing this store (lock held)", file=self.path) from None
        try:
            self._check_identity()
        except ConfigError:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            self._lock_fh.close()
            raise
        for stale in glob.glob(str(self.path.parent / f".{self.path.name}.tmp-*.h5")):
            os.unlink(stale)  # a fold killed half-way (we hold the lock, so nobody else is folding)
        self._jdir = journal_dir(self.path)
        self._jdir.mkdir(exist_ok=True)
        self._seq = 0
        self._fd: Optional[int] = None
        self._seg: Optional[Path] = None
        self._keys: set = set()
        self._hits = 0
        self._misses = 0
        self.fold()  # recovery: fold whatever a killed run left in the journal
        self._keys = _store_keys(self.path)
        self._last_fold = time.monotonic()

    def _check_identity(self) -> None:
        if not self.path.exists():
            return
        try:
            with h5py.File(self.path, "r") as f:
                fmt = f.attrs.get("format")
                sid = f.attrs.get("sweep_id")
        except OSError as exc:
            raise ConfigError(f"cannot read HDF5 ({exc})", file=self.path) from None
        if fmt != FORMAT:
            raise ConfigError(f"not a sweep store (format {fmt!r}); choose another --out", file=self.path)
        if sid != self.meta.get("sweep_id"):
            raise ConfigError(f"holds a different sweep (sweep_id {sid}, this sweep {self.meta.get('sweep_id')}); "
                              "choose another --out", file=self.path)

    @property
    def done_keys(self) -> set:
        return self._keys

    def _open_segment(self) -> None:
        self._seq += 1
        self._seg = self._jdir / f"seg-{socket.gethostname()}-{os.getpid()}-{self._seq:06d}.jsonl"
        self._fd = os.open(self._seg, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, rec: dict) -> None:
        """Record one finished point (one unbuffered write: survives a kill of this process)."""
        if rec["key"] in self._keys:
            return
        if self._fd is None:
            self._open_segment()
        c = rec.get("cache") or {}
        self._hits += int(c.get("hits", 0))
        self._misses += int(c.get("misses", 0))
        line = (json.dumps(rec, separators=(",", ":"), default=_json_default) + "\n").encode()
        os.write(self._fd, line)
        self._keys.add(rec["key"])
        if time.monotonic() - self._last_fold >= self.checkpoint_s:
            self.fold()

    def _close_segment(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def fold(self) -> int:
        """Fold every closed journal segment into the HDF5 (atomic), then delete those segments."""
        self._close_segment()
        segs = sorted(self._jdir.glob("seg-*.jsonl"))
        meta = dict(self.meta, cache_hits=self._hits, cache_misses=self._misses)
        recs = (rec for _, rec in read_journal(self.path))
        added = fold_into(self.path, recs, meta, self.param_kinds)
        self._hits = self._misses = 0
        for s in segs:
            s.unlink()
        _fsync_dir(self._jdir)
        self._last_fold = time.monotonic()
        return added

    def close(self) -> None:
        self.fold()
        try:
            self._jdir.rmdir()
        except OSError:
            pass
        fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        self._lock_fh.close()
        try:
            os.unlink(str(self.path) + ".lock")
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- reading

class Store:
    """Read view of a sweep store: HDF5 rows plus unfolded journal records (no lock needed)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists() and not journal_dir(self.path).is_dir():
            raise ConfigError("file not found", file=self.path)
        # a running sweep may fold journal segments into the HDF5 between our two reads: start over
        for _ in range(20):
            try:
                return self._load()
            except JournalChanged:
                time.sleep(0.01)
        self._load()

    def _load(self) -> None:
        self.attrs: dict = {}
        self._cols: dict[str, np.ndarray] = {}
        self._bd: dict[str, np.ndarray] = {}
        self._docs: list = []
        n = 0
        keys: set = set()
        if self.path.exists():
            try:
                with h5py.File(self.path, "r") as f:
                    self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
                    if self.attrs.get("format") != FORMAT:
                        raise ConfigError("not a sweep store", file=self.path)
                    for name, ds in f["points"].items():
                        self._cols[name] = _decode(ds[()])
                    for name in _breakdown_names(f["breakdown"]):
                        self._bd[name] = f["breakdown"][name][()]
                    n = f["points/key"].shape[0]
            except OSError as exc:
                raise ConfigError(f"cannot read HDF5 ({exc})", file=self.path) from None
            keys = set(self._cols.get("key", []))
        self._n_h5 = n
        extra = [rec for _, rec in read_journal(self.path) if rec["key"] not in keys and not keys.add(rec["key"])]
        self._journal = extra
        if extra:
            rows = [record_row(r) for r in extra]
            names = set(self._cols) | {k for r in rows for k in r}
            for name in names:
                old = self._cols.get(name)
                vals = [r.get(name) for r in rows]
                kind = ("str" if old.dtype.kind in "OU" else "f8") if old is not None else _kind_of(next((v for v in vals if v is not None), ""))
                fill = _fill("f8" if kind == "i8" else kind)
                new = np.array([fill if v is None else (_as_str(v) if kind == "str" else v) for v in vals],
                               dtype=object if kind == "str" else None)
                if old is None:
                    old = np.array([fill] * n, dtype=object if kind == "str" else float)
                self._cols[name] = np.concatenate([old, new]) if kind != "str" else np.array(list(old) + list(new), dtype=object)
            bcols = [_breakdown_columns(r["doc"]) for r in extra]
            for name in set(self._bd) | {k for c in bcols for k in c}:
                old = self._bd.get(name, np.full(n, np.nan))
                self._bd[name] = np.concatenate([old, [c.get(name, np.nan) for c in bcols]])

    def __len__(self) -> int:
        return len(self._cols.get("key", []))

    @property
    def parameters(self) -> list[str]:
        return json.loads(self.attrs.get("parameters", "[]"))

    def columns(self) -> dict[str, np.ndarray]:
        """Point columns (fixed, parameters, metrics) in expansion order (sorted by ``index``)."""
        order = np.argsort(self._cols["index"], kind="stable") if len(self) else np.zeros(0, dtype=int)
        params = [p for p in self.parameters if p in self._cols and p not in FIXED_COLUMNS]
        names = [c for c in FIXED_COLUMNS if c in self._cols] + params
        names += sorted(c for c in self._cols if c not in names)
        return {k: self._cols[k][order] for k in names}

    def breakdown(self) -> dict[str, np.ndarray]:
        order = np.argsort(self._cols["index"], kind="stable") if len(self) else np.zeros(0, dtype=int)
        return {k: v[order] for k, v in self._bd.items()}

    def iter_docs(self) -> Iterator[dict]:
        """Run documents in expansion order (read one at a time from the file)."""
        order = np.argsort(self._cols["index"], kind="stable") if len(self) else []
        with h5py.File(self.path, "r") if self._n_h5 else _null() as f:
            for i in order:
                if i < self._n_h5:
                    s = f["docs"][i]
                    yield json.loads(s.decode() if isinstance(s, bytes) else s)
                else:
                    yield self._journal[i - self._n_h5]["doc"]

    def resolved(self, row: int) -> dict:
        """Resolved config of the row-th point in expansion order."""
        order = np.argsort(self._cols["index"], kind="stable")
        i = int(order[row])
        if i < self._n_h5:
            with h5py.File(self.path, "r") as f:
                s = f["resolved"][i]
            return json.loads(s.decode() if isinstance(s, bytes) else s)
        r = self._journal[i - self._n_h5]["resolved"]
        return json.loads(r) if isinstance(r, str) else r


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _decode(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "O":
        return np.array([x.decode() if isinstance(x, bytes) else x for x in a], dtype=object)
    return a


def is_sweep_store(path: str | Path) -> bool:
    p = Path(path)
    if not p.is_file():
        return journal_dir(p).is_dir()
    try:
        with h5py.File(p, "r") as f:
            return f.attrs.get("format") == FORMAT
    except OSError:
        return False


def open_store(path: str | Path) -> Store:
    return Store(path)
