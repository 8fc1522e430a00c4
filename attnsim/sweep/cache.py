"""A cache of expensive sub-results, keyed by their inputs, on disk and shared across processes.

Device models wrap an expensive, deterministic computation::

    from attnsim.sweep.cache import cached
    t = cached(("dram.attn_time", MODEL_VERSION, spec_dict, heads, ctx, dtype), lambda: run_engine(...))

``key_parts`` must contain everything the result depends on (numbers, strings, bools, None, lists/
tuples/dicts of those, numpy arrays, pydantic models) plus a version tag of the computing code, so a
change of the model invalidates old entries. Values must be picklable.

Storage: one pickle per entry under ``<dir>/<k[:2]>/<k>.pkl`` (``k`` = SHA-256 of the canonical key),
written to a temporary file and renamed, so concurrent processes (pool workers, dask workers on a
shared file system) never see a partial entry; two processes computing the same entry at once both
write the same bytes. An in-process dict in front avoids repeated reads. The directory is
``$ATTNSIM_CACHE_DIR`` (set by ``attnsim sweep --cache DIR``); without it the cache is in-process only.
``ATTNSIM_CACHE_DIR=off`` disables caching. Hit/miss counters are per process; ``stats()`` returns
them and the sweep driver sums the workers' counts into the hit rate it reports.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

ENV = "ATTNSIM_CACHE_DIR"
_MEMO_MAX = 4096
_memo: dict[str, Any] = {}
_stats = {"hits": 0, "misses": 0}


def _feed(h, obj) -> None:
    """Feed a canonical, type-tagged encoding of ``obj`` into hash ``h``."""
    if obj is None or isinstance(obj, (bool, np.bool_)):
        h.update(f"b:{obj!r};".encode())
    elif isinstance(obj, (int, np.integer)):
        h.update(f"i:{int(obj)};".encode())
    elif isinstance(obj, (float, np.floating)):
        h.update(f"f:{float(obj).hex()};".encode())
    elif isinstance(obj, str):
        h.update(f"s:{len(obj)}:".encode() + obj.encode() + b";")
    elif isinstance(obj, bytes):
        h.update(f"y:{len(obj)}:".encode() + obj + b";")
    elif isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"a:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    elif isinstance(obj, dict):
        h.update(f"d:{len(obj)}:".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(f"l:{len(obj)}:".encode())
        for x in obj:
            _feed(h, x)
    elif hasattr(obj, "model_dump"):  # pydantic models (config schemas)
        h.update(f"m:{type(obj).__name__}:".encode())
        _feed(h, obj.model_dump())
    else:
        raise TypeError(f"cache key part of unsupported type {type(obj).__name__}")


def cache_key(key_parts) -> str:
    """SHA-256 hex digest of the canonical encoding of ``key_parts``."""
    h = hashlib.sha256()
    _feed(h, key_parts)
    return h.hexdigest()


def cache_dir() -> Optional[Path]:
    d = os.environ.get(ENV, "")
    if not d or d == "off":
        return None
    return Path(d)


def enabled() -> bool:
    return os.environ.get(ENV, "") != "off"


def cached(key_parts, fn: Callable[[], Any]) -> Any:
    """Return the cached value for ``key_parts``, computing ``fn()`` (and storing it) on a miss."""
    if not enabled():
        return fn()
    k = cache_key(key_parts)
    if k in _memo:
        _stats["hits"] += 1
        return _memo[k]
    d = cache_dir()
    if d is not None:
        p = d / k[:2] / f"{k}.pkl"
        try:
            with open(p, "rb") as fh:
                val = pickle.load(fh)
            _stats["hits"] += 1
            _remember(k, val)
            return val
        except (FileNotFoundError, EOFError, pickle.UnpicklingError):
            pass
    _stats["misses"] += 1
    val = fn()
    _remember(k, val)
    if d is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(val, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return val


def _remember(k: str, val: Any) -> None:
    if len(_memo) >= _MEMO_MAX:
        _memo.pop(next(iter(_memo)))
    _memo[k] = val


def stats() -> dict:
    """This process's counters: {'hits': int, 'misses': int}."""
    return dict(_stats)


def reset(memo: bool = True) -> None:
    """Zero the counters (and forget the in-process memo)."""
    _stats["hits"] = _stats["misses"] = 0
    if memo:
        _memo.clear()


def hit_rate(hits: int, misses: int) -> float:
    n = hits + misses
    return hits / n if n else float("nan")
