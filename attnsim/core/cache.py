"""A cache of expensive sub-results, keyed by their inputs, on disk and shared across processes.

Device models wrap an expensive, deterministic computation::

    from attnsim.core.cache import cached
    t = cached(("dram.attn_time", spec_dict, heads, ctx, dtype), lambda: run_engine(...))

``key_parts`` must contain everything the result depends on besides the code (numbers, strings, bools,
None, lists/tuples/dicts of those, numpy arrays, pydantic models). The code version is mixed into every
key automatically: :func:`code_fingerprint` (SHA-256 of every ``.py`` file of the attnsim packages,
computed once per process), so an edit of any model invalidates old entries without a hand-bumped tag.
Values must be data: None, bool, int, float, str, bytes, lists/tuples/dicts of those (any key type
above), numpy arrays and scalars of non-object dtypes; anything else raises ``TypeError``.

Where (``$ATTNSIM_CACHE_DIR``, set by ``attnsim sweep --cache``): unset or empty = in-process memo only;
``off`` = no caching; ``sqlite:PATH`` or a path ending ``.sqlite`` = one SQLite file (WAL mode) for file
systems where many small files hurt (WAL needs every process on one host: for array tasks on several
nodes use a folder, or one file per node); any other value = a folder, one file per entry under
``<dir>/<k[:2]>/<k>.json`` written to a temporary file and renamed, so concurrent processes (pool and
dask workers, array tasks on a shared file system) never see a partial entry. An in-process memo
(4,096 entries) sits in front. Everything is thread-safe (dask workers with several threads).

Threat model. The cache location may be writable by others (shared scratch, a group project folder):
anyone who can write it can plant, replace or delete entries; they do not run as our user. So:
(1) nothing read back is executed: entries are JSON decoded into the data types above only (no
pickle); a malformed entry is rejected. (2) An entry is used only if its HMAC-SHA256, under a random
key kept in ``<dir>/.key`` (``<file>.key`` for SQLite; created mode 0600, atomically), matches over
(cache key, payload); so a forged, edited or moved entry is rejected and recomputed, and a replayed
old entry of ours carries the value our code computes for that key (the fingerprint is in the key).
(3) The key file must be a regular file owned by us and not accessible to group/others; otherwise
(replaced by someone else, loosened permissions) the location is refused with one warning and the
sweep runs without it. (4) An entry is opened as a regular file only (non-blocking, no symlink followed,
fstat'ed, read up to its size limit): a FIFO, a device or a link planted as an entry is skipped with one
warning and recomputed; a SQLite location that exists but is not a regular file is refused. Not covered:
an attacker running as our user (they can edit the code itself); deleting entries or filling the disk
costs time only: a read-only or full cache (OSError on write) degrades to no caching with one warning.
A cache written by one user is not trusted by another.

Hit/miss counters are per thread; ``stats()`` returns the calling thread's, each sweep point returns
its delta and the sweep driver sums them into the hit rate it reports.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sqlite3
import stat
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from attnsim.core.fileio import InputRefused, read_regular
from attnsim.core.fingerprint import digest_sources

ENV = "ATTNSIM_CACHE_DIR"
_MEMO_MAX = 4096
_MAX_ENTRY_BYTES = 64 << 20  # an entry larger than this is rejected unread (none comes close)
_FORMAT = 1  # entry format (bump if the encoding changes)
_KEY_BYTES = 32
_SETUP_TRIES = 200  # x 50 ms: connection set-up retries on an immediate 'database is locked' (SqliteStore._conn)
# the folders of the attnsim packages (pyproject [tool.setuptools.package-dir]): their .py files are the code
_PACKAGES = ("attnsim", "attnsim.hwmodels", "attnsim.isa", "attnsim.workloads", "attnsim.mapper", "attnsim.configs")

_lock = threading.RLock()
_memo: "OrderedDict[str, Any]" = OrderedDict()
_backends: dict[str, Any] = {}  # location string -> backend, or None once refused
_tls = threading.local()  # per-thread hit/miss counters
_fingerprint: Optional[str] = None


class CacheUnusable(Exception):
    """The location cannot be used (not ours, not writable, ...); the message says why."""


# ---------------------------------------------------------------- keys


def _feed(h, obj) -> None:
    """Feed a canonical, type-tagged encoding of ``obj`` into hash ``h``."""
    t = type(obj)  # the exact built-in types first (the same bytes as the general branches below, fewer checks)
    if t is str:
        h.update(f"s:{len(obj)}:".encode() + obj.encode() + b";")
    elif t is int:
        h.update(f"i:{obj};".encode())
    elif t is float:
        h.update(f"f:{obj.hex()};".encode())
    elif t is dict:
        h.update(f"d:{len(obj)}:".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif t is list or t is tuple:
        h.update(f"l:{len(obj)}:".encode())
        for x in obj:
            _feed(h, x)
    elif obj is None or isinstance(obj, (bool, np.bool_)):
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


def code_fingerprint() -> str:
    """SHA-256 of every .py file of the attnsim packages (relative path + bytes), once per process."""
    global _fingerprint
    if _fingerprint is None:
        import importlib.util

        files: dict[str, tuple[str, Path]] = {}  # resolved path -> (name in the hash, path)
        for pkg in _PACKAGES:
            spec = importlib.util.find_spec(pkg)
            for root in (spec.submodule_search_locations or []) if spec else []:
                for p in sorted(Path(root).rglob("*.py")):
                    if "__pycache__" not in p.parts:
                        files.setdefault(str(p.resolve()), (f"{pkg}/{p.relative_to(root).as_posix()}", p))
        _fingerprint = digest_sources(files.values())
    return _fingerprint


def cache_key(key_parts) -> str:
    """SHA-256 hex digest of the canonical encoding of ``key_parts`` and the code fingerprint."""
    h = hashlib.sha256()
    _feed(h, ("attnsim-code", code_fingerprint(), key_parts))
    return h.hexdigest()


# ---------------------------------------------------------------- values (data only)


def encode_value(v) -> Any:
    """A JSON-able, type-tagged form of a cacheable value (``TypeError`` for anything else)."""
    if isinstance(v, (np.ndarray, np.generic)):  # first: np.float64 is also a float
        a = np.asarray(v)
        if a.dtype.hasobject:
            raise TypeError("cached numpy values need a non-object dtype")
        return [
            "a" if isinstance(v, np.ndarray) else "g",
            np.lib.format.dtype_to_descr(a.dtype),
            list(a.shape),
            base64.b64encode(np.ascontiguousarray(a).tobytes()).decode(),
        ]
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return ["i", str(v)]
    if isinstance(v, float):
        return ["f", v.hex()]
    if isinstance(v, bytes):
        return ["y", base64.b64encode(v).decode()]
    if isinstance(v, (list, tuple)):
        return ["l" if isinstance(v, list) else "t", [encode_value(x) for x in v]]
    if isinstance(v, dict):
        return ["d", [[encode_value(k), encode_value(x)] for k, x in v.items()]]
    raise TypeError(f"cached value of unsupported type {type(v).__name__}")


def decode_value(e) -> Any:
    """Inverse of :func:`encode_value`; ``ValueError`` on anything malformed."""
    if e is None or isinstance(e, (bool, str)):
        return e
    if not isinstance(e, list) or not e or not isinstance(e[0], str):
        raise ValueError("malformed cache value")
    tag, rest = e[0], e[1:]
    if tag in ("i", "f", "y", "l", "t", "d") and len(rest) != 1:
        raise ValueError("malformed cache value")
    if tag == "i" and isinstance(rest[0], str) and len(rest[0]) <= 400:
        return int(rest[0])
    if tag == "f" and isinstance(rest[0], str):
        return float.fromhex(rest[0])
    if tag == "y" and isinstance(rest[0], str):
        return base64.b64decode(rest[0], validate=True)
    if tag in ("l", "t") and isinstance(rest[0], list):
        items = [decode_value(x) for x in rest[0]]
        return items if tag == "l" else tuple(items)
    if tag == "d" and isinstance(rest[0], list):
        out = {}
        for pair in rest[0]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("malformed cache value")
            k = decode_value(pair[0])
            out[k if not isinstance(k, list) else tuple(k)] = decode_value(pair[1])
        return out
    if tag in ("a", "g") and len(rest) == 3 and isinstance(rest[1], list):
        descr, shape, data = rest
        dt = np.lib.format.descr_to_dtype(descr if isinstance(descr, str) else [tuple(x) for x in descr])
        if dt.hasobject or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError("malformed cache array")
        a = np.frombuffer(base64.b64decode(data, validate=True), dtype=dt).reshape(shape).copy()
        return a if tag == "a" else a[()]
    raise ValueError("malformed cache value")


# ---------------------------------------------------------------- authenticated storage


def _load_key(path: Path, create: bool) -> bytes:
    """The HMAC key at ``path`` (created 0600 if missing); refuses a key file that is not ours alone."""
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".key-", dir=path.parent)  # mode 0600
        try:
            os.write(fd, os.urandom(_KEY_BYTES).hex().encode())
            os.fsync(fd)
            os.close(fd)
            try:
                os.link(tmp, path)  # atomic publish; the first of concurrent creators wins
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    try:
        # non-blocking: a FIFO planted as the key file cannot stall the open (fstat then refuses it)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise CacheUnusable(f"cannot open its key file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise CacheUnusable(
                f"its key file {path} is not a private file of this user (mode 0600 expected); "
                "entries cannot be trusted"
            )
        text = os.read(fd, 4 * _KEY_BYTES)
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text.decode())
    except ValueError:
        key = b""
    if len(key) != _KEY_BYTES:
        raise CacheUnusable(f"its key file {path} is malformed")
    return key


class _Store:
    """Authenticated entries: ``mac`` = HMAC(key, k + payload) stored with the payload."""

    def __init__(self, key: bytes):
        self.key = key

    def _mac(self, k: str, payload: bytes) -> str:
        return hmac.new(self.key, k.encode() + b"\n" + payload, hashlib.sha256).hexdigest()

    def pack(self, k: str, value) -> tuple[str, bytes]:
        payload = json.dumps([_FORMAT, encode_value(value)], separators=(",", ":")).encode()
        return self._mac(k, payload), payload

    def unpack(self, k: str, mac: str, payload: bytes):
        """The value, or raises ValueError (bad MAC, format or structure)."""
        if len(payload) > _MAX_ENTRY_BYTES or not hmac.compare_digest(str(mac), self._mac(k, payload)):
            raise ValueError("entry not authentic")
        fmt, enc = json.loads(payload)
        if fmt != _FORMAT:
            raise ValueError("other entry format")
        return decode_value(enc)


class BadEntry(ValueError):
    """An entry that is not a regular file within the size limit (skipped with one warning, then rewritten)."""


class DirStore(_Store):
    """One file per entry: ``<dir>/<k[:2]>/<k>.json`` = MAC line + payload."""

    def __init__(self, root: Path):
        self.root = root
        super().__init__(_load_key(root / ".key", create=True))

    def get(self, k: str):
        """The value of entry ``k``; KeyError if absent, BadEntry if it is not a regular file of at most the
        entry size (a FIFO, a symlink to /dev/zero: opened non-blocking without following links, then fstat'ed
        and read bounded, attnsim.core.fileio), ValueError if it is not authentic."""
        p = self.root / k[:2] / f"{k}.json"
        try:
            data = read_regular(p, limit_bytes=_MAX_ENTRY_BYTES + 100, follow_symlinks=False)
        except InputRefused as exc:
            if exc.missing:
                raise KeyError(k) from None
            raise BadEntry(f"entry {p.relative_to(self.root)}: {exc}") from None
        mac, _, payload = data.partition(b"\n")
        return self.unpack(k, mac.decode("ascii", "replace"), payload)

    def put(self, k: str, value) -> None:
        mac, payload = self.pack(k, value)
        p = self.root / k[:2] / f"{k}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(mac.encode() + b"\n" + payload)
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


class SqliteStore(_Store):
    """One SQLite file in WAL mode (table ``entries(k, mac, payload)``); a connection per process+thread."""

    def __init__(self, path: Path):
        self.path = path
        self._local = threading.local()
        super().__init__(_load_key(path.with_name(path.name + ".key"), create=True))
        try:
            self._conn().commit()
        except sqlite3.Error as exc:
            raise OSError(f"sqlite: {exc}") from None

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or self._local.pid != os.getpid():  # never reuse a connection across fork
            self.path.parent.mkdir(parents=True, exist_ok=True)
            c = sqlite3.connect(self.path, timeout=60.0)
            for attempt in range(_SETUP_TRIES):
                try:
                    c.execute("PRAGMA journal_mode=WAL")
                    c.execute("PRAGMA synchronous=NORMAL")
                    c.execute(
                        "CREATE TABLE IF NOT EXISTS entries (k TEXT PRIMARY KEY, mac TEXT NOT NULL, "
                        "payload BLOB NOT NULL)"
                    )
                    break
                except sqlite3.OperationalError as exc:
                    # SQLite answers "locked" at once, without its busy timeout, while another connection
                    # recovers or checkpoints the WAL (e.g. the last one of finished threads closing): retry
                    if "locked" not in str(exc) or attempt == _SETUP_TRIES - 1:
                        c.close()
                        raise
                    time.sleep(0.05)
            self._local.conn, self._local.pid = c, os.getpid()
        return c

    def get(self, k: str):
        try:
            row = self._conn().execute("SELECT mac, payload FROM entries WHERE k = ?", (k,)).fetchone()
        except sqlite3.Error as exc:
            raise OSError(f"sqlite: {exc}") from None
        if row is None:
            raise KeyError(k)
        if not isinstance(row[1], bytes):
            raise ValueError("malformed entry")
        return self.unpack(k, row[0], row[1])

    def put(self, k: str, value) -> None:
        mac, payload = self.pack(k, value)
        try:
            c = self._conn()
            with c:
                c.execute("INSERT OR REPLACE INTO entries (k, mac, payload) VALUES (?, ?, ?)", (k, mac, payload))
        except sqlite3.Error as exc:
            raise OSError(f"sqlite: {exc}") from None


def _is_sqlite(loc: str) -> bool:
    return loc.startswith("sqlite:") or loc.endswith(".sqlite")


def open_location(loc: str):
    """The store for a location string (folder, ``sqlite:PATH`` or ``*.sqlite``); raises CacheUnusable."""
    try:
        if _is_sqlite(loc):
            path = Path(loc[len("sqlite:") :] if loc.startswith("sqlite:") else loc).absolute()
            if path.exists() and not path.is_file():  # a FIFO would stall sqlite3.connect
                raise CacheUnusable("not a regular file")
            return SqliteStore(path)
        return DirStore(Path(loc).absolute())
    except OSError as exc:
        raise CacheUnusable(f"not usable ({exc.strerror or exc})") from None


def _refuse(loc: str, why: str) -> None:
    with _lock:
        if _backends.get(loc, 0) is not None:
            _backends[loc] = None
            warnings.warn(f"sub-result cache {loc}: {why}; continuing without it", RuntimeWarning, stacklevel=3)


_warned: set = set()


def _warn_once(loc: str, why: str) -> None:
    """One warning per location for entries that are not files (the sweep goes on without them)."""
    with _lock:
        if loc in _warned:
            return
        _warned.add(loc)
    warnings.warn(
        f"sub-result cache {loc}: {why} (further bad entries are skipped silently)", RuntimeWarning, stacklevel=3
    )


def _backend(loc: str):
    with _lock:
        if loc in _backends:
            return _backends[loc]
    try:
        b = open_location(loc)
    except CacheUnusable as exc:
        _refuse(loc, str(exc))
        return None
    with _lock:
        return _backends.setdefault(loc, b)


def check_location(loc: str) -> Optional[str]:
    """None if ``loc`` can be read and written (a probe entry round-trips), else why not (for the driver)."""
    if loc in ("", "off"):
        return None
    try:
        b = open_location(loc)
        b.put("0" * 64, ("probe", 1))
        b.get("0" * 64)
    except CacheUnusable as exc:
        return str(exc)
    except (OSError, ValueError, KeyError) as exc:
        return f"not usable ({getattr(exc, 'strerror', None) or exc})"
    return None


# ---------------------------------------------------------------- the API


def cache_dir() -> Optional[str]:
    """The configured disk location, or None (memo only / off)."""
    d = os.environ.get(ENV, "")
    return None if d in ("", "off") else d


def enabled() -> bool:
    return os.environ.get(ENV, "") != "off"


def _count(name: str) -> None:
    setattr(_tls, name, getattr(_tls, name, 0) + 1)


def cached(key_parts, fn: Callable[[], Any]) -> Any:
    """Return the cached value for ``key_parts``, computing ``fn()`` (and storing it) on a miss."""
    if not enabled():
        return fn()
    k = cache_key(key_parts)
    with _lock:
        if k in _memo:
            _count("hits")
            _memo.move_to_end(k)
            return _memo[k]
    loc = cache_dir()
    b = _backend(loc) if loc is not None else None
    if b is not None:
        try:
            val = b.get(k)
        except KeyError:
            pass
        except OSError as exc:
            _refuse(loc, f"not readable ({exc.strerror or exc})")
            b = None
        except BadEntry as exc:  # a FIFO, a symlink, an oversized file planted as an entry: recompute, replace it
            _warn_once(loc, f"{exc}; skipped and recomputed")
        except (ValueError, TypeError, RecursionError):
            pass  # rejected (forged, tampered, truncated, other format): recompute and overwrite
        else:
            _count("hits")
            _remember(k, val)
            return val
    _count("misses")
    val = fn()
    encode_value(val)  # a value that cannot be stored is a bug of the caller, with or without a disk cache
    _remember(k, val)
    if b is not None:
        try:
            b.put(k, val)
        except OSError as exc:
            _refuse(loc, f"not writable ({exc.strerror or exc})")
    return val


def _remember(k: str, val: Any) -> None:
    with _lock:
        _memo[k] = val
        _memo.move_to_end(k)
        while len(_memo) > _MEMO_MAX:
            _memo.popitem(last=False)


def stats() -> dict:
    """This thread's counters: {'hits': int, 'misses': int}."""
    return {"hits": getattr(_tls, "hits", 0), "misses": getattr(_tls, "misses", 0)}


def reset(memo: bool = True) -> None:
    """Zero this thread's counters (and forget the in-process memo and opened locations)."""
    _tls.hits = _tls.misses = 0
    if memo:
        with _lock:
            _memo.clear()
            _backends.clear()
            _warned.clear()


def hit_rate(hits: int, misses: int) -> float:
    n = hits + misses
    return hits / n if n else float("nan")
