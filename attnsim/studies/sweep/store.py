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
  The lock file is unlinked while still locked, and a writer that wins the lock checks that its file is
  still the one at the path (else it retries), so two writers can never both hold it.
* Readers (:func:`open_store`) see the HDF5 rows plus any unfolded journal records. They check the
  layout (attributes, every column as long as ``key``, ``/docs`` JSON) and every complete journal line
  (a JSON object with ``key``, ``index``, ``doc``, ``resolved``): a damaged store is a one-line
  :class:`ConfigError` naming the file and the dataset or line, never a traceback.
* Folds never fail on a recorded point: fixed columns take what fits their type (else the fill value),
  and a column whose values do not fit its type is widened (i8 -> f8 -> str) in the folded copy.
* Provenance: ``attnsim_version`` (from git at build time, :data:`attnsim.__version__`) and
  ``git_revision``. Resuming a store written by another version is refused unless the writer is given
  ``allow_version_mismatch`` (then the store keeps its first version and lists the others in
  ``other_versions``). ``retry_failed`` drops ``invalid``/``error`` rows at open, so they run again.

HDF5 layout (``format = attnsim.sweep/1``), every dataset row-aligned, one row per finished point in
completion order (``index`` gives the expansion order):

* file attrs: ``format``, ``attnsim_version``, ``git_revision``, ``created_utc``, ``updated_utc``,
  ``sweep_name``, ``sweep_id``, ``sweep_definition`` (YAML), ``base_config`` (YAML of the base tree after
  fixed overrides), ``parameters`` (JSON list of parameter columns), ``n_points_total``, ``shard``
  (``"I/N"``), ``argv``, ``cache_hits``, ``cache_misses``; optionally ``other_versions`` (JSON list of
  ``"version (revision)"`` that also wrote points, see --allow-version-mismatch) and ``merged_from``;
  ``baseline`` (system of the vs_baseline columns, ``""`` for none).
* ``/points/<column>``: ``index`` (i8), ``key`` (str), ``status`` (``ok``, ``does_not_fit``, ``invalid``,
  ``error``), ``error`` (str), ``system``, ``model``, ``scenario`` (str), ``batch_size`` (i8),
  ``prompt_len`` (f8, mean prompt length), ``output_len`` (i8), ``elapsed_s`` (f8, wall time of the
  simulation), ``finished_unix_s`` (f8), ``worker`` (str), one column per parameter (named by its
  sweep key; i8/f8/str) and one f8 column per scalar metric of the run document (``ttft_s``, ``tpot_s``,
  ...; NaN where a point has none). ``index`` is an HDF5 dimension scale that every column is attached
  to (``xarray.open_dataset(FILE, group="points", engine="h5netcdf")`` reads the table). With a
  ``baseline``: ``vs_baseline.<ratio>`` (f8) and ``vs_baseline.status`` (str), recomputed over all rows
  at every fold (:mod:`attnsim.studies.sweep.baselines`). With ``attnsim sweep --flips``: ``verdict_flips`` (str), the
  assumed hardware parameters whose range moves the point's throughput ratio across 1.0, ``;``-separated
  (:mod:`attnsim.studies.verdict`; the full section in the point's document).
* ``/breakdown/<phase>/<table>/<name>`` (f8): per-point breakdowns (e.g.
  ``/breakdown/decode_step/time_s_by_op/attn_score``), plus ``/breakdown/<phase>/time_s`` and ``energy_j``.
* ``/docs`` (str): the full run document of each point as JSON (what ``attnsim run --json`` prints).
* ``/resolved`` (str): the point's resolved config tree as canonical JSON (its ``key`` is a hash of it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import functools
import glob
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

import h5py
import numpy as np

from attnsim import __version__
from attnsim.core.config import ConfigError
from attnsim.core.fileio import fsync_dir as _fsync_dir
from attnsim.core.fileio import temp_beside
from attnsim.sim.results import json_default as _json_default

FORMAT = "attnsim.sweep/1"
STR = h5py.string_dtype()
FIXED_COLUMNS = {
    "index": "i8",
    "key": "str",
    "status": "str",
    "error": "str",
    "system": "str",
    "model": "str",
    "scenario": "str",
    "batch_size": "i8",
    "prompt_len": "f8",
    "output_len": "i8",
    "elapsed_s": "f8",
    "finished_unix_s": "f8",
    "worker": "str",
}
FAILED = ("invalid", "error")
_FOLD_BATCH = 256
_I8_MIN, _I8_MAX = -(2**63), 2**63 - 1
_CHUNK = 256  # rows per HDF5 chunk of a column


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def journal_dir(path: Path) -> Path:
    return Path(str(path) + ".journal")


# ---------------------------------------------------------------- records


def make_record(
    index: int,
    key: str,
    params: dict,
    doc: dict,
    resolved: str,
    elapsed_s: float = 0.0,
    worker: str = "",
    cache: Optional[dict] = None,
) -> dict:
    """One finished point as stored in the journal (and folded into the HDF5 rows)."""
    return {
        "index": int(index),
        "key": key,
        "params": params,
        "doc": doc,
        "resolved": resolved,
        "elapsed_s": float(elapsed_s),
        "finished_unix_s": time.time(),
        "worker": worker,
        "cache": cache or {},
    }


def _float(v) -> float:
    """``v`` as a float if it is a number (bools are not), else NaN."""
    if type(v) is float:
        return v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return np.nan
    try:
        return float(v)
    except OverflowError:  # an int beyond the float range
        return np.nan


def _int(v, fill: int = -1) -> int:
    """``v`` as an int64 if it is an integer in range (or an integral float), else ``fill``."""
    if isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
        v = int(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not _I8_MIN <= v <= _I8_MAX:
        return fill
    return int(v)


def _scalar_metrics(doc: dict) -> dict:
    m = doc.get("metrics")
    return {
        str(k): _float(v)
        for k, v in (m.items() if isinstance(m, dict) else ())
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _breakdown_columns(doc: dict) -> dict:
    out = {}
    bds = doc.get("breakdown")
    for phase, bd in bds.items() if isinstance(bds, dict) else ():
        for table, vals in bd.items() if isinstance(bd, dict) else ():
            if isinstance(vals, dict):
                for name, v in vals.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        out[f"{_h5name(phase)}/{_h5name(table)}/{_h5name(name)}"] = _float(v)
            elif isinstance(vals, (int, float)) and not isinstance(vals, bool):
                out[f"{_h5name(phase)}/{_h5name(table)}"] = _float(vals)
    return out


@functools.lru_cache(maxsize=8192)
def _h5name(x) -> str:
    """One HDF5 path component (no '/', never empty, '.' or '..')."""
    s = str(x).replace("/", "_")
    return "_" if s in ("", ".", "..") else s


def _text(v) -> str:
    return v if isinstance(v, str) else ("" if v is None else _as_str(v))


def record_row(rec: dict) -> dict:
    """Flat column values of a record (fixed columns, parameters, metrics); never raises on odd values.

    A fixed column takes the value when it fits its type, else its fill value (-1, NaN, ""); the
    run document and the parameter columns keep what was given."""
    doc = rec["doc"] if isinstance(rec.get("doc"), dict) else {}
    sc = doc.get("scenario") if isinstance(doc.get("scenario"), dict) else {}
    plen = _float(sc.get("prompt_len", np.nan))
    ctx = sc.get("context_lens")
    if isinstance(ctx, list) and ctx:
        vals = [_float(x) for x in ctx]
        plen = float(np.mean(vals)) if not any(np.isnan(vals)) else np.nan
    elif isinstance(ctx, dict) and ctx.get("mean") is not None:
        plen = _float(ctx["mean"])
    row = {
        "index": _int(rec.get("index")),
        "key": _text(rec.get("key")),
        "status": _text(doc.get("status")),
        "error": _text(doc.get("error")),
        "system": _text(doc.get("system")),
        "model": _text(doc.get("model")),
        "scenario": _text(sc.get("name")),
        "batch_size": _int(sc.get("batch_size", 0) or 0),
        "prompt_len": plen,
        "output_len": _int(sc.get("output_len", 0) or 0),
        "elapsed_s": _float(rec.get("elapsed_s", 0.0)),
        "finished_unix_s": _float(rec.get("finished_unix_s", 0.0)),
        "worker": _text(rec.get("worker")),
    }
    params = rec.get("params")
    for k, v in params.items() if isinstance(params, dict) else ():
        if k not in FIXED_COLUMNS:
            row[_h5name(k)] = v
    for k, v in _scalar_metrics(doc).items():
        if _h5name(k) not in row:
            row[_h5name(k)] = v
    vf = doc.get("verdict_flips")
    if isinstance(vf, dict):  # attnsim.studies.verdict: the parameters that move the ratio across 1.0 ("" for none)
        rows = vf.get("parameters") if isinstance(vf.get("parameters"), list) else []
        row["verdict_flips"] = ";".join(str(r.get("parameter")) for r in rows if isinstance(r, dict) and r.get("flips"))
    return row


class JournalChanged(RuntimeError):
    """A journal segment was folded and deleted by a running writer while being read."""


def check_record(rec, seg: Path, line: int) -> dict:
    """``rec`` if it is a journal record (dict with key, index, doc, resolved), else ConfigError."""
    where = f"line {line}"
    if not isinstance(rec, dict):
        raise ConfigError(f"expected a JSON object (a journal record), got {type(rec).__name__}", file=seg, key=where)
    want = {"key": str, "index": int, "doc": dict, "resolved": (str, dict)}
    for name, typ in want.items():
        if name not in rec:
            raise ConfigError(
                f"journal record lacks {name!r}; delete this line (the point runs again)", file=seg, key=where
            )
        v = rec[name]
        if not isinstance(v, typ) or isinstance(v, bool) or (name == "index" and v < 0):
            raise ConfigError(
                f"{name}: expected {getattr(typ, '__name__', 'a string or object')}"
                f"{' >= 0' if name == 'index' else ''}, got {v!r:.60}",
                file=seg,
                key=where,
            )
    if not isinstance(rec.get("params", {}), dict):
        raise ConfigError(f"params: expected an object, got {rec['params']!r:.60}", file=seg, key=where)
    check_run_doc(rec["doc"], seg, f"{where}: doc")
    return rec


def read_journal(path: Path) -> Iterator[tuple[Path, dict]]:
    """Yield (segment, record) for every complete record of a store's journal.

    A last line without a newline was torn by a kill (its point was in flight) and is dropped; any
    other line that is not a valid record is a ConfigError naming the segment and line. Raises
    JournalChanged if a listed segment disappears (a concurrent fold): re-read the store."""
    for seg in sorted(journal_dir(path).glob("seg-*.jsonl")):
        try:
            fh = open(seg, "rb")
        except FileNotFoundError:
            raise JournalChanged(str(seg)) from None
        except OSError as exc:
            raise ConfigError(f"cannot read journal segment ({exc.strerror})", file=seg) from None
        with fh:
            for n, line in enumerate(fh, 1):
                if not line.endswith(b"\n"):
                    break  # torn by a kill: the point was in flight
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting
                    raise ConfigError(
                        f"expected a JSON journal record, got a damaged line ({exc}); "
                        "delete this line (the point runs again)",
                        file=seg,
                        key=f"line {n}",
                    ) from None
                yield seg, check_record(rec, seg, n)


# ---------------------------------------------------------------- HDF5 appends


def _kind_of(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "str"
    if isinstance(v, (int, np.integer)):
        return "i8" if _I8_MIN <= v <= _I8_MAX else "str"
    if isinstance(v, (float, np.floating)):
        return "f8"
    return "str"


_RANK = {"i8": 0, "f8": 1, "str": 2}


def _ints_fit(vals) -> bool:
    ints = [v for v in vals if type(v) is int]
    return not ints or (_I8_MIN <= min(ints) and max(ints) <= _I8_MAX)


def _widen(kind: Optional[str], vals) -> str:
    """The narrowest kind (i8 < f8 < str) that holds ``kind`` values and every non-None ``vals``."""
    if kind == "str":
        return kind
    types = set(map(type, vals)) - {type(None)}
    if kind == "f8" and types <= {float, int} and (int not in types or _ints_fit(vals)):
        return kind  # the common cases, without a Python loop per value
    if kind == "i8" and types <= {int} and _ints_fit(vals):
        return kind
    for v in vals:
        if v is not None:
            vk = _kind_of(v)
            if kind is None or _RANK[vk] > _RANK[kind]:
                kind = vk
    return kind or "f8"


def _fill(kind: str):
    return {"i8": -1, "f8": np.nan, "str": ""}[kind]


def _as_str(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (float, np.floating)) and np.isnan(v):
        return ""
    if isinstance(v, (list, dict, bool)) or v is None:
        return json.dumps(v, default=_json_default)
    return str(v)


def _values(kind: str, vals) -> np.ndarray:
    """``vals`` (None = missing) as an array of a column of ``kind`` (they fit: see :func:`_widen`)."""
    if kind == "str":
        return np.array(["" if v is None else _as_str(v) for v in vals], dtype=object)
    return np.array([_fill(kind) if v is None else v for v in vals], dtype=kind)


def _ds_kind(ds: h5py.Dataset) -> str:
    return "str" if ds.dtype.kind in "OSU" else ("i8" if ds.dtype.kind in "iu" else "f8")


def _column(group: h5py.Group, name: str, kind: str, n: int) -> h5py.Dataset:
    if name in group:
        return group[name]
    dt = STR if kind == "str" else np.dtype(kind)
    ds = group.create_dataset(
        name, shape=(n,), maxshape=(None,), dtype=dt, chunks=(_CHUNK,), fillvalue=None if kind == "str" else _fill(kind)
    )
    if n and kind == "str":
        ds[:] = np.array([""] * n, dtype=object)
    _attach_dim(group, ds, name)
    return ds


def _attach_dim(group: h5py.Group, ds: h5py.Dataset, name: str) -> None:
    """``/points/index`` is an HDF5 dimension scale that every ``/points`` column is attached to, so
    ``xarray.open_dataset(store, group="points", engine="h5netcdf")`` reads the columns as variables
    along one ``index`` dimension (netCDF-4 layout, no phony dimensions)."""
    if group.name != "/points":
        return
    if name == "index":
        ds.make_scale("index")
        return
    idx = group.get("index")
    if idx is not None:
        if not idx.is_scale:  # a store written before the scale existed
            idx.make_scale("index")
        ds.dims[0].attach_scale(idx)


def _retype(group: h5py.Group, name: str, kind: str) -> h5py.Dataset:
    """Rewrite column ``name`` as ``kind`` (a wider kind: its old values are kept, as text for str)."""
    old = _decode(group[name][()])
    idx = group.get("index")
    if idx is not None and name != "index" and idx.is_scale and group[name].dims[0].keys():
        group[name].dims[0].detach_scale(idx)  # no dangling reference in the scale's list
    del group[name]
    ds = _column(group, name, kind, 0)
    ds.resize((len(old),))
    if len(old):
        if kind == "str":
            ds[:] = np.array(
                ["" if isinstance(v, float) and np.isnan(v) else str(v) for v in old.tolist()], dtype=object
            )
        else:
            ds[:] = old.astype(kind)
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
        vals = [r.get(name) for r in rows]
        ds = pts.get(name)
        if ds is not None:
            have = _ds_kind(ds)
            kind = _widen(have, vals)
            if kind != have:
                ds = _retype(pts, name, kind)
        else:
            kind = FIXED_COLUMNS.get(name) or _widen(param_kinds.get(name), vals)
            ds = _column(pts, name, kind, n0)
        ds.resize((n0 + m,))
        ds[n0:] = _values(kind, vals)
    for name in list(pts):  # columns absent from this batch
        if pts[name].shape[0] < n0 + m:
            ds = pts[name]
            ds.resize((n0 + m,))
            ds[n0:] = _values(_ds_kind(ds), [None] * m)
    bd = f.require_group("breakdown")
    cols = [_breakdown_columns(r["doc"]) for r in recs]
    bnames = sorted({k for c in cols for k in c} | set(_breakdown_names(bd)))
    have = set(_breakdown_names(bd))
    for name in bnames:
        if name not in have:
            if any(name.startswith(h + "/") or h.startswith(name + "/") for h in have):
                continue  # a table that is a number in one document and a mapping in another: not a column
            bd.create_dataset(name, shape=(n0,), maxshape=(None,), dtype="f8", chunks=(_CHUNK,), fillvalue=np.nan)
            have.add(name)
        ds = bd[name]
        ds.resize((n0 + m,))
        ds[n0:] = np.array([c.get(name, np.nan) for c in cols])
    for dname, field in (("docs", "doc"), ("resolved", "resolved")):
        ds = f[dname] if dname in f else f.create_dataset(dname, shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))
        ds.resize((n0 + m,))
        ds[n0:] = np.array(
            [r[field] if isinstance(r[field], str) else json.dumps(r[field], default=_json_default) for r in recs],
            dtype=object,
        )


def _breakdown_names(group: h5py.Group) -> list[str]:
    names = []
    group.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def lock_path(path: Path) -> Path:
    return Path(str(path) + ".lock")


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[h5py.File]:
    """Open a store file read-only; HDF5/structure errors become a one-line ConfigError naming it (a FIFO or a
    device is refused before HDF5 opens it: attnsim.core.fileio.check_regular)."""
    from attnsim.core.fileio import InputRefused, check_regular

    try:
        check_regular(path)
    except InputRefused as exc:
        raise ConfigError(str(exc), file=path) from None
    try:
        with h5py.File(path, "r") as f:
            yield f
    except (ConfigError, JournalChanged):
        raise
    except (OSError, KeyError, ValueError, TypeError, AttributeError, IndexError, RuntimeError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__  # h5py: RuntimeError on damaged metadata
        raise ConfigError(f"cannot read the store ({msg})", file=path) from None


def _attrs(f: h5py.File) -> dict:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def parameters_attr(attrs: dict, path) -> list[str]:
    """The store's ``parameters`` attribute (JSON list of names), checked."""
    try:
        params = json.loads(attrs.get("parameters", "[]"))
    except (TypeError, ValueError):
        params = None
    if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
        raise ConfigError(
            f"expected a JSON list of parameter names, got {str(attrs.get('parameters'))[:60]!r}",
            file=path,
            key="parameters",
        )
    return params


def check_layout(f: h5py.File, path) -> int:
    """Check an open store file's layout (attributes, groups, row-aligned columns); returns its rows."""
    attrs = _attrs(f)
    if attrs.get("format") != FORMAT:
        raise ConfigError(f"expected a sweep store (format {FORMAT}), got format {attrs.get('format')!r}", file=path)
    for a in ("sweep_id",):
        if not isinstance(attrs.get(a), str):
            raise ConfigError("attribute missing (every store written by attnsim sweep has it)", file=path, key=a)
    parameters_attr(attrs, path)
    for name, want in (
        ("points", h5py.Group),
        ("breakdown", h5py.Group),
        ("docs", h5py.Dataset),
        ("resolved", h5py.Dataset),
    ):
        if not isinstance(f.get(name), want):
            raise ConfigError(
                f"expected a {'group' if want is h5py.Group else 'dataset'}, got "
                f"{'nothing' if name not in f else type(f.get(name)).__name__}; not a complete store",
                file=path,
                key=f"/{name}",
            )
    pts = f["points"]
    for c in FIXED_COLUMNS:
        if not isinstance(pts.get(c), h5py.Dataset):
            raise ConfigError("column missing; not a complete store", file=path, key=f"/points/{c}")
    n = pts["key"].shape[0] if pts["key"].ndim == 1 else -1
    cols = [(f"/points/{k}", v) for k, v in pts.items()] + [("/docs", f["docs"]), ("/resolved", f["resolved"])]
    f["breakdown"].visititems(lambda k, v: cols.append((f"/breakdown/{k}", v)) if isinstance(v, h5py.Dataset) else None)
    for name, ds in cols:
        if not isinstance(ds, h5py.Dataset):
            raise ConfigError(f"expected a column (dataset), got a {type(ds).__name__}", file=path, key=name)
        if ds.ndim != 1 or ds.shape[0] != n:
            raise ConfigError(f"expected {n} rows (as /points/key), got shape {ds.shape}", file=path, key=name)
    for name, kinds in (
        ("/points/key", "OSU"),
        ("/points/index", "iu"),
        ("/points/status", "OSU"),
        ("/docs", "OSU"),
        ("/resolved", "OSU"),
    ):
        if f[name].dtype.kind not in kinds:
            raise ConfigError(
                f"expected {'integers' if kinds == 'iu' else 'strings'}, got dtype {f[name].dtype}", file=path, key=name
            )
    return n


def check_run_doc(doc: dict, path, key: str) -> dict:
    """``doc`` if it has what every reader of run documents relies on (status, system, model, scenario.name)."""
    for name in ("status", "system", "model"):
        if not isinstance(doc.get(name), str):
            raise ConfigError(
                f"{name}: expected a string in a run document, got {doc.get(name)!r:.60}", file=path, key=key
            )
    if not isinstance(doc.get("scenario"), dict) or not isinstance(doc["scenario"].get("name"), str):
        raise ConfigError(
            f"scenario.name: expected a string in a run document, got {doc.get('scenario')!r:.60}", file=path, key=key
        )
    return doc


def json_doc(raw, path, key: str, run_doc: bool = True):
    """Decode one JSON document stored in a string dataset (a dict; a checked run document if
    ``run_doc``), else ConfigError."""
    try:
        obj = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigError(
            f"expected a JSON document, got a damaged one ({' '.join(str(exc).split())})", file=path, key=key
        ) from None
    if not isinstance(obj, dict):
        raise ConfigError(f"expected a JSON object, got {type(obj).__name__}", file=path, key=key)
    return check_run_doc(obj, path, key) if run_doc else obj


def _store_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with _reading(path) as f:
        check_layout(f, path)
        return {k.decode() if isinstance(k, bytes) else k for k in f["points/key"][()]}


def _write_attrs(f: h5py.File, meta: dict) -> None:
    for k, v in meta.items():
        f.attrs[k] = v if isinstance(v, (int, float, np.integer, np.floating)) else str(v)


def fold_into(
    path: Path,
    records: Iterable[dict],
    meta: dict,
    param_kinds: dict,
    skip_keys: Optional[set] = None,
    fresh: bool = False,
) -> int:
    """Atomically produce ``path`` = old contents (none if ``fresh``) + ``records`` (keys seen skipped).

    Returns the number of records appended. The live file is never modified in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = set(_store_keys(path)) if skip_keys is None else set(skip_keys)
    tmp = temp_beside(path, ".h5")
    added = 0
    try:
        if path.exists() and not fresh:
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
            _write_baselines(f, path)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return added


def _write_baselines(f: h5py.File, path: Path) -> None:
    """(Re)compute the ``vs_baseline.*`` columns over every row (attnsim.studies.sweep.baselines); none without
    a ``baseline`` attribute."""
    from attnsim.sim.results import BASELINE_RATIOS
    from attnsim.studies.sweep.baselines import STATUS, baseline_columns, blind_parameters, ratio_names

    pts, baseline = f["points"], _attrs(f).get("baseline") or ""
    if not baseline:
        for name in ratio_names() + [STATUS]:
            if name in pts:  # the sweep no longer names a baseline
                del pts[name]
        return
    params = [_h5name(p) for p in parameters_attr(_attrs(f), path)]
    need = {"key", "system", "model", "scenario", "status", *params, *(m for _, m, _ in BASELINE_RATIOS)}
    cols = {k: _decode(pts[k][()]) for k in need if k in pts}
    n = pts["key"].shape[0]
    blind = blind_parameters(_attrs(f), params, baseline)
    for name, vals in baseline_columns(cols, params, baseline, blind).items():
        kind = "str" if name == STATUS else "f8"
        ds = pts[name] if name in pts else _column(pts, name, kind, n)
        ds.resize((n,))
        ds[:] = _values(kind, vals.tolist())


def _init_columns(f: h5py.File, param_kinds: dict) -> None:
    pts = f.create_group("points")
    for name, kind in FIXED_COLUMNS.items():
        _column(pts, name, kind, 0)
    for name, kind in param_kinds.items():
        if _h5name(name) not in pts:
            _column(pts, _h5name(name), kind, 0)
    f.create_group("breakdown")
    f.create_dataset("docs", shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))
    f.create_dataset("resolved", shape=(0,), maxshape=(None,), dtype=STR, chunks=(64,))


def iter_records(path: Path, journal: bool = True) -> Iterator[dict]:
    """Records of a store (HDF5 rows, then the journal), reconstructed for re-folding (merge, retry)."""
    if path.exists():
        with _reading(path) as f:
            n = check_layout(f, path)
            pts = f["points"]
            params = [p for p in (_h5name(x) for x in parameters_attr(_attrs(f), path)) if p in pts]
            cols = {k: pts[k] for k in ("index", "key", "elapsed_s", "finished_unix_s", "worker") + tuple(params)}
            step = 512
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                block = {k: _decode(ds[lo:hi]) for k, ds in cols.items()}
                docs = f["docs"][lo:hi]
                res = f["resolved"][lo:hi]
                for j in range(hi - lo):
                    r = res[j]
                    yield {
                        "index": int(block["index"][j]),
                        "key": block["key"][j],
                        "params": {p: _py(block[p][j]) for p in params},
                        "doc": json_doc(docs[j], path, f"/docs[{lo + j}]"),
                        "resolved": r.decode() if isinstance(r, bytes) else r,
                        "elapsed_s": _float(block["elapsed_s"][j]),
                        "finished_unix_s": _float(block["finished_unix_s"][j]),
                        "worker": _text(block["worker"][j]),
                        "cache": {},
                    }
    if journal:
        for _, rec in read_journal(path):
            yield rec


def _py(v):
    return v.item() if hasattr(v, "item") else v


def _lock(path: Path):
    """Take the exclusive lock of a store (its ``.lock`` file); ConfigError if another writer holds it.

    A writer unlinks the lock file before it unlocks; one that opened the old file and wins its lock
    afterwards sees that the file at the path is another one (or none), and tries again."""
    lp = lock_path(path)
    for _ in range(100):
        try:
            fh = open(lp, "a+")
        except OSError as exc:
            raise ConfigError(f"cannot create the store's lock file ({exc.strerror})", file=lp) from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise ConfigError("another sweep is writing this store (lock held)", file=path) from None
        except OSError as exc:  # ENOSYS/EOPNOTSUPP/ENOLCK: e.g. Lustre mounted without -o flock
            fh.close()
            with contextlib.suppress(OSError):  # nobody can hold a lock here: no lock file left behind
                lp.unlink()
            raise ConfigError(
                f"a file system with flock() for the store's lock file, got {exc.strerror}: write "
                "the store elsewhere (home, node-local $TMPDIR)",
                file=lp,
            ) from None
        try:
            same = os.path.samestat(os.fstat(fh.fileno()), os.stat(lp))
        except FileNotFoundError:
            same = False
        if same:
            return fh
        fh.close()  # unlinked by a writer that finished after we opened it
    raise ConfigError("cannot take the store's lock (its lock file keeps being replaced)", file=lp)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is continued; 0 bytes is an error)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(f"wrote 0 of {len(view)} bytes to the journal")
        view = view[n:]


# ---------------------------------------------------------------- writer


class StoreWriter:
    """The single writer of a store: journal appends per point, atomic folds into the HDF5.

    ``meta`` holds the file attributes (sweep identity etc.); opening a store of a different
    ``sweep_id`` is refused, and one of a different ``attnsim_version`` unless
    ``allow_version_mismatch``. ``retry_failed`` removes the store's invalid/error points (counted in
    ``retried``) so that they run again.
    """

    def __init__(
        self,
        path: str | Path,
        meta: dict,
        param_kinds: dict,
        checkpoint_s: float = 300.0,
        allow_version_mismatch: bool = False,
        retry_failed: bool = False,
    ):
        from attnsim.sim.results import git_revision

        self.path = Path(path)
        self.meta = dict(meta)
        # ids of the same sweep a store may carry (older id forms); a resumed store is rewritten with sweep_id
        self._accepted_ids = set(json.loads(self.meta.pop("accepted_ids", "[]"))) | {self.meta.get("sweep_id")}
        self.meta.setdefault("format", FORMAT)
        self.meta.setdefault("attnsim_version", __version__)
        self.meta.setdefault("git_revision", git_revision())
        self.param_kinds = dict(param_kinds)
        self.checkpoint_s = checkpoint_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fh = _lock(self.path)
        self._jdir = journal_dir(self.path)
        self._seq = 0
        self._fd: Optional[int] = None
        self._seg: Optional[Path] = None
        self._keys: set = set()
        self._hits = 0
        self._misses = 0
        self.retried = 0
        self._created = not self.path.exists()
        self._appended = 0
        try:
            self._check_identity(allow_version_mismatch)
            for stale in glob.glob(str(self.path.parent / f".{self.path.name}.tmp-*.h5")):
                os.unlink(stale)  # a fold killed half-way (we hold the lock, so nobody else is folding)
            self._jdir.mkdir(exist_ok=True)
            self.fold()  # recovery: fold whatever a killed run left in the journal
            if retry_failed:
                self.retried = self._drop_failed()
            self._keys = _store_keys(self.path)
        except BaseException:
            self._unlock()
            raise
        self._last_fold = time.monotonic()

    def _check_identity(self, allow_version_mismatch: bool) -> None:
        if not self.path.exists():
            return
        with _reading(self.path) as f:
            check_layout(f, self.path)
            attrs = _attrs(f)
        sid = attrs.get("sweep_id")
        if sid not in self._accepted_ids:
            raise ConfigError(
                f"holds a different sweep (sweep_id {sid}, this sweep {self.meta.get('sweep_id')}); "
                "choose another --out",
                file=self.path,
            )
        have, mine = attrs.get("attnsim_version"), self.meta["attnsim_version"]
        if have != mine:
            if not allow_version_mismatch:
                raise ConfigError(
                    f"expected a store written by this attnsim ({mine}), "
                    f"got one written by {have or 'an unknown version'}: "
                    "resuming would mix two code versions; choose another --out or pass "
                    "--allow-version-mismatch",
                    file=self.path,
                )
            others = set(json.loads(attrs.get("other_versions", "[]") or "[]"))
            others.add(f"{mine} ({self.meta['git_revision']})")
            self.meta.update(
                attnsim_version=have,
                git_revision=attrs.get("git_revision", "unknown"),
                other_versions=json.dumps(sorted(others)),
            )

    def _drop_failed(self) -> int:
        """Rewrite the store without its invalid/error rows; returns how many were dropped."""
        if not self.path.exists():
            return 0
        with _reading(self.path) as f:
            status = _decode(f["points/status"][()])
            attrs = _attrs(f)
        n = sum(s in FAILED for s in status.tolist())
        if n:
            meta = dict(attrs, **self.meta)
            meta["created_utc"] = attrs.get("created_utc", _now())
            keep = (r for r in iter_records(self.path, journal=False) if r["doc"].get("status") not in FAILED)
            fold_into(self.path, keep, meta, self.param_kinds, skip_keys=set(), fresh=True)
        return n

    @property
    def done_keys(self) -> set:
        return self._keys

    def _open_segment(self) -> None:
        """A new segment file (never one left by another process with the same host name and pid)."""
        while True:
            self._seq += 1
            self._seg = self._jdir / f"seg-{socket.gethostname()}-{os.getpid()}-{self._seq:06d}.jsonl"
            try:
                self._fd = os.open(self._seg, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
                return
            except FileExistsError:
                continue

    def append(self, rec: dict) -> None:
        """Record one finished point (written whole before returning: survives a kill of this process)."""
        if rec["key"] in self._keys:
            return
        if self._fd is None:
            self._open_segment()
        c = rec.get("cache") or {}
        self._hits += int(c.get("hits", 0))
        self._misses += int(c.get("misses", 0))
        line = (json.dumps(rec, separators=(",", ":"), default=_json_default) + "\n").encode()
        _write_all(self._fd, line)
        self._keys.add(rec["key"])
        self._appended += 1
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

    def _unlock(self) -> None:
        if self._lock_fh is None:
            return
        try:
            os.unlink(lock_path(self.path))  # while still locked: see _lock
        except OSError:
            pass
        fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        self._lock_fh.close()
        self._lock_fh = None

    def close(self, keep_empty: bool = True) -> None:
        """Fold, then release the store. ``keep_empty=False``: a store this writer created and recorded
        nothing into is removed (a sweep refused after opening its store leaves no file behind)."""
        try:
            self.fold()
            try:
                self._jdir.rmdir()
            except OSError:
                pass
            if not keep_empty and self._created and not self._appended:
                self.path.unlink()
        finally:
            self._unlock()

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
        n = 0
        if self.path.exists():
            with _reading(self.path) as f:
                n = check_layout(f, self.path)
                self.attrs = _attrs(f)
                for name, ds in f["points"].items():
                    self._cols[name] = _decode(ds[()])
                for name in _breakdown_names(f["breakdown"]):
                    self._bd[name] = f["breakdown"][name][()]
        keys = set(self._cols.get("key", []))
        self._n_h5 = n
        extra = [rec for _, rec in read_journal(self.path) if rec["key"] not in keys and not keys.add(rec["key"])]
        self._journal = extra
        if extra:
            rows = [record_row(r) for r in extra]
            names = list(self._cols) + [k for k in dict.fromkeys(k for r in rows for k in r) if k not in self._cols]
            for name in names:
                old = self._cols.get(name)
                vals = [r.get(name) for r in rows]
                kind = _widen(FIXED_COLUMNS.get(name) if old is None else _arr_kind(old), vals)
                old = _values(kind, [None] * n) if old is None else _as_kind(old, kind)
                self._cols[name] = np.concatenate([old, _values(kind, vals)])
            bcols = [_breakdown_columns(r["doc"]) for r in extra]
            for name in set(self._bd) | {k for c in bcols for k in c}:
                old = self._bd.get(name, np.full(n, np.nan))
                self._bd[name] = np.concatenate([old, [c.get(name, np.nan) for c in bcols]])
            if self.attrs.get("baseline"):  # the folded ratios did not see the journal's points
                from attnsim.studies.sweep.baselines import baseline_columns, blind_parameters

                params = list(map(_h5name, self.parameters))
                self._cols.update(
                    baseline_columns(
                        self._cols,
                        params,
                        self.attrs["baseline"],
                        blind_parameters(self.attrs, params, self.attrs["baseline"]),
                    )
                )

    def __len__(self) -> int:
        return len(self._cols.get("key", []))

    @property
    def parameters(self) -> list[str]:
        return parameters_attr(self.attrs, self.path)

    def _order(self) -> np.ndarray:
        return np.argsort(self._cols["index"], kind="stable") if len(self) else np.zeros(0, dtype=int)

    def columns(self) -> dict[str, np.ndarray]:
        """Point columns (fixed, parameters, metrics) in expansion order (sorted by ``index``)."""
        order = self._order()
        params = [p for p in map(_h5name, self.parameters) if p in self._cols and p not in FIXED_COLUMNS]
        names = [c for c in FIXED_COLUMNS if c in self._cols] + params
        names += sorted(c for c in self._cols if c not in names)
        return {k: self._cols[k][order] for k in names}

    def breakdown(self) -> dict[str, np.ndarray]:
        order = self._order()
        return {k: v[order] for k, v in self._bd.items()}

    def iter_docs(self) -> Iterator[dict]:
        """Run documents in expansion order (read one at a time from the file)."""
        order = self._order()
        with _reading(self.path) if self._n_h5 else _null() as f:
            for i in order:
                if i < self._n_h5:
                    yield json_doc(f["docs"][i], self.path, f"/docs[{i}]")
                else:
                    yield self._journal[i - self._n_h5]["doc"]

    def resolved(self, row: int) -> dict:
        """Resolved config of the row-th point in expansion order."""
        i = int(self._order()[row])
        if i < self._n_h5:
            with _reading(self.path) as f:
                return json_doc(f["resolved"][i], self.path, f"/resolved[{i}]", run_doc=False)
        r = self._journal[i - self._n_h5]["resolved"]
        return (
            json_doc(r, self.path, f"journal record {self._journal[i - self._n_h5]['key']}", run_doc=False)
            if isinstance(r, str)
            else r
        )


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _decode(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "OS":
        return np.array([x.decode(errors="replace") if isinstance(x, bytes) else x for x in a], dtype=object)
    return a


def _arr_kind(a: np.ndarray) -> str:
    return "str" if a.dtype.kind in "OSU" else ("i8" if a.dtype.kind in "iu" else "f8")


def _as_kind(a: np.ndarray, kind: str) -> np.ndarray:
    """A column array as ``kind`` (same or wider than its own)."""
    if kind == _arr_kind(a):
        return a
    if kind == "str":
        return np.array(["" if isinstance(v, float) and np.isnan(v) else str(v) for v in a.tolist()], dtype=object)
    return a.astype(kind)


def is_sweep_store(path: str | Path) -> bool:
    p = Path(path)
    if not p.is_file():
        return journal_dir(p).is_dir()
    try:
        with h5py.File(p, "r") as f:
            return f.attrs.get("format") == FORMAT
    except (OSError, RuntimeError, ValueError, KeyError):  # not HDF5, or damaged: the results reader says so
        return False


def open_store(path: str | Path) -> Store:
    return Store(path)


def read_results(path: str | Path) -> tuple[dict, list[dict]]:
    """(file attributes, run documents) of a results file (attnsim.sim.results) or a sweep store: a store's points
    come back as run documents (in expansion order), with the sweep name as ``experiment`` and a one-line
    summary, so ``attnsim show`` summarises both kinds of file."""
    path = Path(path)
    if is_sweep_store(path):
        return _read_sweep_store(path)
    from attnsim.core.fileio import InputRefused, check_regular

    try:
        check_regular(path)  # a FIFO would stall HDF5's open()
    except InputRefused as exc:
        raise ConfigError(str(exc), file=path) from None
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            if not isinstance(f.get("run_docs"), h5py.Dataset) or f["run_docs"].ndim != 1:
                raise ConfigError("not an attnsim results file (no /run_docs)", file=path)
            docs = [json_doc(s, path, f"/run_docs[{i}]") for i, s in enumerate(f["run_docs"][()])]
    except ConfigError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:  # h5py on damaged files
        raise ConfigError(f"cannot read HDF5 ({' '.join(str(exc).split())})", file=path) from None
    return attrs, docs


def _read_sweep_store(path: Path) -> tuple[dict, list[dict]]:
    """(attrs, run documents) of a sweep store, for ``attnsim show``."""
    from collections import Counter

    st = open_store(path)
    attrs = dict(st.attrs)
    docs = list(st.iter_docs())
    counts = Counter(d.get("status", "") for d in docs)
    attrs["experiment"] = (
        f"{attrs.get('sweep_name', '?')} (sweep {attrs.get('sweep_id', '?')}, shard {attrs.get('shard', '?')}: "
        f"{len(docs)} of {attrs.get('n_points_total', '?')} points; "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        + ")"
    )
    return attrs, docs
