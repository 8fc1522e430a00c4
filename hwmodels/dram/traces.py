"""Request-trace readers for ``attnsim dram --trace``: one compiled pass over the file's bytes (no per-line Python).

Formats (``fmt``; "auto" picks by the first request line, ``.npy`` by the file name):
- ``attnsim``: ``<hex address> <R|W> [<arrival cycle>]``; '#' comments, blank lines.
- ``ramulator``: Ramulator 2.1 LoadStoreTrace ``LD|ST <address>`` (0x-hex or decimal) and ReadWriteTrace
  ``R|W <level,level,...>`` (address vector: channel first, column in columns = bursts x prefetch; the levels
  are those of the spec: Channel, PseudoChannel if > 1, Rank/SID if > 1 (both if both), BankGroup, Bank, Row,
  Column).
- ``dramsim3``: DRAMsim3 ``<0x hex address> <READ|WRITE> <cycle>``.
- ``npy``: a structured array (TRACE_DTYPE) written by ``attnsim dram convert``.
"""

from __future__ import annotations

import mmap
import os
from tokenize import TokenError

import numpy as np
from numba import njit

from attnsim.core import jitcache
from attnsim.core.config import ConfigError

jitcache.ensure()  # attnsim's cache locator before the decorators below

TRACE_DTYPE = np.dtype([("addr", "<u8"), ("write", "u1"), ("arrival", "<i8")])
FORMATS = ("auto", "attnsim", "ramulator", "dramsim3", "npy")
_FMT = {"attnsim": 0, "ramulator": 1, "dramsim3": 2}
# error codes of the kernel -> message
_ERR = {
    1: "expected '<hex address> <R|W> [<arrival cycle>]'",
    2: "expected a hex address of at most 16 digits",
    3: "expected R or W",
    4: "expected a decimal arrival cycle of at most 18 digits",
    5: "expected 'LD|ST <address>' or 'R|W <l0,l1,...>' (Ramulator LoadStoreTrace / ReadWriteTrace)",
    6: "expected a 0x-hex (at most 16 digits) or decimal (at most 18 digits) address",
    7: "expected '<0x hex address> <READ|WRITE> <cycle>' (DRAMsim3; also P_MEM_RD, P_MEM_WR, BOFF)",
    8: "arrival cycles must not decrease (a line without one arrives at cycle 0)",
    9: "address vector: wrong number of levels or a level out of range",
}


@njit(cache=True)
def _skip_sp(b, i, n):
    while i < n and (b[i] == 32 or b[i] == 9 or b[i] == 13):
        i += 1
    return i


@njit(cache=True)
def _tok_end(b, i, n):
    while i < n and b[i] != 32 and b[i] != 9 and b[i] != 13 and b[i] != 10:
        i += 1
    return i


@njit(cache=True)
def _hex(b, i, j):
    """Value of b[i:j] as hex (optional 0x); -1 if malformed or longer than 16 digits."""
    if j - i >= 2 and b[i] == 48 and (b[i + 1] == 120 or b[i + 1] == 88):
        i += 2
    if j <= i or j - i > 16:
        return np.uint64(0), False
    v = np.uint64(0)
    for p in range(i, j):
        c = b[p]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return np.uint64(0), False
        v = (v << np.uint64(4)) | np.uint64(d)
    return v, True


@njit(cache=True)
def _dec(b, i, j):
    if j <= i or j - i > 18:
        return np.int64(0), False
    v = np.int64(0)
    for p in range(i, j):
        c = b[p]
        if not 48 <= c <= 57:
            return np.int64(0), False
        v = v * 10 + (c - 48)
    return v, True


@njit(cache=True)
def _word(b, i, j, word, fold):
    """Whether b[i:j] is ``word`` (ASCII bytes), letters compared case-insensitively when ``fold``."""
    if j - i != len(word):
        return False
    for p in range(j - i):
        c = b[i + p]
        if fold and 65 <= c <= 90:
            c = c | 32
        if c != word[p]:
            return False
    return True


_READ, _WRITE = np.frombuffer(b"read", np.uint8).copy(), np.frombuffer(b"write", np.uint8).copy()
_P_MEM_RD, _P_MEM_WR, _BOFF = (np.frombuffer(w, np.uint8).copy() for w in (b"P_MEM_RD", b"P_MEM_WR", b"BOFF"))


@njit(cache=True)
def _ds3_kind(b, i, j):
    """A DRAMsim3 command word: 0 read (READ, read, any case; P_MEM_RD), 1 write (WRITE any case; P_MEM_WR, BOFF:
    DRAMsim3's write set, common.cc operator>>), -1 anything else (DRAMsim3 reads every other word as a read;
    refused here, a typo must not become a read)."""
    if _word(b, i, j, _READ, True) or _word(b, i, j, _P_MEM_RD, False):
        return 0
    if _word(b, i, j, _WRITE, True) or _word(b, i, j, _P_MEM_WR, False) or _word(b, i, j, _BOFF, False):
        return 1
    return -1


@njit(cache=True)
def _parse(b, fmt, nlev, lev_size, addr, wr, arr, vec, store):
    """Parse the byte buffer; returns (requests, error code, error line). ``arr`` must be zeroed: only non-zero
    arrival cycles are written (a trace without cycles touches none of its pages). vec: (cap, nlev) address vectors;
    ``store`` False: the first request is a flat address, so vectors are not stored and one is error 11."""
    n = b.shape[0]
    mixed = False
    i = 0
    line = 0
    k = 0
    last = np.int64(0)
    while i < n:
        line += 1
        i = _skip_sp(b, i, n)
        e = i
        while e < n and b[e] != 10:
            e += 1
        if i == e or b[i] == 35:  # blank or comment
            i = e + 1
            continue
        if k >= addr.shape[0]:
            return k, 10, line
        t0 = i
        t1 = _tok_end(b, t0, e)
        t2 = _skip_sp(b, t1, e)
        t3 = _tok_end(b, t2, e)
        t4 = _skip_sp(b, t3, e)
        t5 = _tok_end(b, t4, e)
        rest = _skip_sp(b, t5, e)
        tm = np.int64(0)
        if fmt == 0 or fmt == 2:
            if t2 == t3 or rest != e or (fmt == 2 and t4 == t5):
                return k, 1 if fmt == 0 else 7, line
            a, ok = _hex(b, t0, t1)
            if not ok:
                return k, 2, line
            ln = t3 - t2
            c0 = b[t2] | 32
            if fmt == 0:
                if ln != 1 or (c0 != 114 and c0 != 119):
                    return k, 3, line
                w = c0 == 119
            else:
                kind = _ds3_kind(b, t2, t3)
                if kind < 0:
                    return k, 7, line
                w = kind == 1
            if t4 != t5:
                tm, ok = _dec(b, t4, t5)
                if not ok:
                    return k, 4, line
            if tm < last:  # a line without a cycle arrives at 0
                return k, 8, line
            last = tm
        else:
            if t2 == t3 or t4 != t5:
                return k, 5, line
            ln = t1 - t0
            c0 = b[t0]
            if ln == 2 and c0 == 76 and b[t0 + 1] == 68:
                w = False
            elif ln == 2 and c0 == 83 and b[t0 + 1] == 84:
                w = True
            elif ln == 1 and (c0 == 82 or c0 == 87):
                w = c0 == 87
                # address vector
                p = t2
                lv = 0
                while p < t3:
                    q = p
                    while q < t3 and b[q] != 44:
                        q += 1
                    x, ok = _dec(b, p, q)
                    if not ok or lv >= nlev or x >= lev_size[lv]:
                        return k, 9, line
                    if store:
                        vec[k, lv] = x
                    lv += 1
                    p = q + 1
                if lv != nlev:
                    return k, 9, line
                mixed = mixed or not store
                wr[k] = w  # arrival 0: arr is zeroed (calloc'd pages, untouched)
                k += 1
                i = e + 1
                continue
            else:
                return k, 5, line
            if t3 - t2 >= 2 and b[t2] == 48 and (b[t2 + 1] | 32) == 120:
                a, ok = _hex(b, t2, t3)
            else:
                d, ok = _dec(b, t2, t3)
                a = np.uint64(d)
            if not ok:
                return k, 6, line
        addr[k] = a
        wr[k] = w
        if tm != 0:  # arr is zeroed: a trace without cycles touches none of its pages
            arr[k] = tm
        k += 1
        i = e + 1
    return k, 11 if mixed else 0, line


# hex digit values (-1: not a hex digit), for the fast parser
_HEXVAL = np.full(256, -1, np.int64)
_HEXVAL[48:58] = np.arange(10)
_HEXVAL[97:103] = np.arange(10, 16)
_HEXVAL[65:71] = np.arange(10, 16)


@njit(cache=True)
def _parse_fast(b, fmt, hexval, addr, wr, arr):
    """One pass over the bytes for the canonical line shapes only (tokens separated by one space, lines ended by
    '\n', no blank or comment line): ``LD|ST <0x hex | decimal>`` (ramulator), ``<hex> <R|W>[ <decimal>]``
    (attnsim), ``<0x hex> <READ|WRITE> <decimal>`` (dramsim3), arrival cycles not decreasing. Returns the number
    of requests, or -1 at the first line of any other shape: the general parser (``_parse``) then reads the file
    and accepts it or names the line (so every error message is the general parser's). ``arr`` zeroed (as _parse)."""
    n = b.shape[0]
    cap = addr.shape[0]
    i = 0
    k = 0
    last = np.int64(0)
    while i < n:
        if k >= cap:
            return -1
        w = False
        if fmt == 1:  # LD / ST
            if i + 3 >= n or b[i + 2] != 32:
                return -1
            c0, c1 = b[i], b[i + 1]
            if c0 == 76 and c1 == 68:
                w = False
            elif c0 == 83 and c1 == 84:
                w = True
            else:
                return -1
            i += 3
        # the address
        v = np.uint64(0)
        nd = 0
        if fmt == 1 and not (i + 1 < n and b[i] == 48 and (b[i + 1] | 32) == 120):
            while i < n and 48 <= b[i] <= 57:  # decimal, at most 18 digits (as _dec)
                if nd == 18:
                    return -1
                v = v * np.uint64(10) + np.uint64(b[i] - 48)
                nd += 1
                i += 1
        else:
            if i + 1 < n and b[i] == 48 and (b[i + 1] | 32) == 120:
                i += 2
            elif fmt != 0:
                return -1
            while i < n:
                d = hexval[b[i]]
                if d < 0:
                    break
                if nd == 16:
                    return -1
                v = (v << np.uint64(4)) | np.uint64(d)
                nd += 1
                i += 1
        if nd == 0:
            return -1
        tm = np.int64(0)
        if fmt == 0 or fmt == 2:
            if i + 1 >= n or b[i] != 32:
                return -1
            c = b[i + 1] | 32
            if fmt == 0:
                if i + 2 < n and b[i + 2] != 32 and b[i + 2] != 10:
                    return -1
                if c == 114:
                    w = False
                elif c == 119:
                    w = True
                else:
                    return -1
                i += 2
            else:
                if c == 114 and i + 5 < n and b[i + 2] == 69 and b[i + 3] == 65 and b[i + 4] == 68:
                    w = False
                    i += 5
                elif c == 119 and i + 6 < n and b[i + 2] == 82 and b[i + 3] == 73 and b[i + 4] == 84 and b[i + 5] == 69:
                    w = True
                    i += 6
                else:
                    return -1
            if i < n and b[i] == 32:  # arrival cycle (dramsim3: required)
                i += 1
                nd = 0
                while i < n and 48 <= b[i] <= 57:
                    if nd == 18:
                        return -1
                    tm = tm * 10 + (b[i] - 48)
                    nd += 1
                    i += 1
                if nd == 0:
                    return -1
            elif fmt == 2:
                return -1
            if tm < last:  # (a line without a cycle arrives at 0)
                return -1
            last = tm
        if i < n:
            if b[i] != 10:
                return -1
            i += 1
        addr[k] = v
        wr[k] = w
        if tm != 0:  # arr is zeroed (see _parse)
            arr[k] = tm
        k += 1
    return k


def _line_text(b: np.ndarray, line: int, width: int = 60, chunk: int = 1 << 24) -> str:
    """Line ``line`` (1-based) of the byte buffer, stripped and cut to ``width`` characters (for error messages).
    Bounded memory whatever the buffer: newlines are found chunk by chunk, at most 4 x width bytes are copied."""
    lo, seen = 0, 0
    if line >= 2:
        for i in range(0, b.shape[0], chunk):
            ends = np.flatnonzero(b[i : i + chunk] == 10)
            if seen + len(ends) >= line - 1:
                lo = i + int(ends[line - 2 - seen]) + 1
                break
            seen += len(ends)
        else:
            return ""
    head = bytes(b[lo : lo + 4 * width + 4]).split(b"\n", 1)[0]
    text = head.decode("utf-8", "replace").strip()
    return text if len(text) <= width else text[:width] + "..."


def _first_is_vector(data: bytes) -> bool:
    """Whether the first request line (within the first 4 KiB; True if none is complete there) is an R/W
    address vector: only then are vectors stored (a (requests x levels) array)."""
    head = data[:4096]
    for raw in head.split(b"\n")[:-1] if len(data) > 4096 else head.split(b"\n"):
        tok = raw.lstrip(b" \t\r")
        if not tok or tok[:1] == b"#":
            continue
        return tok.split()[0] in (b"R", b"W")
    return True


def vector_levels(org):
    """Ramulator address-vector levels (attnsim field letters, sizes in Ramulator units) for an organisation."""
    prefetch = max(1, org.burst_bytes * 8 * org.pseudo_channels // org.channel_width_bits)
    lv = [("Ch", org.channels)]
    if org.pseudo_channels > 1:
        lv.append(("Pc", org.pseudo_channels))
    if org.ranks > 1 or org.pseudo_channels == 1:
        lv.append(("Ra", org.ranks))
    lv += [("Bg", org.bank_groups), ("Ba", org.banks_per_group), ("Ro", org.rows), ("Co", org.columns * prefetch)]
    return lv, prefetch


def encode(spec, fields: dict, mapping: str | None = None) -> np.ndarray:
    """Byte addresses of field arrays {letter: int array} under ``mapping`` (inverse of controller.decode)."""
    from attnsim.hwmodels.dram.spec import parse_mapping

    parts = parse_mapping(mapping or spec.default_mapping, spec.org)
    n = len(next(iter(fields.values())))
    a = np.zeros(n, np.uint64)
    for name, bits in parts:
        a = (a << np.uint64(bits)) | fields.get(name, np.zeros(n, np.int64)).astype(np.uint64)
    return a * np.uint64(spec.org.burst_bytes)


def detect_format(path: str, head: bytes) -> str:
    if path.endswith(".npy"):
        return "npy"
    for raw in head.splitlines():
        s = raw.split(b"#", 1)[0].split()
        if not s:
            continue
        if s[0] in (b"LD", b"ST", b"R", b"W"):
            return "ramulator"
        if len(s) >= 2 and s[1] in (b"READ", b"WRITE"):
            return "dramsim3"
        return "attnsim"
    return "attnsim"


def read_trace_any(path: str, spec=None, fmt: str = "auto", max_requests: int = 1 << 25, mapping: str | None = None):
    """(addr uint64, is_write bool, arrival int64) of a trace in any supported format; ConfigError names
    the file and line."""
    if fmt not in FORMATS:
        raise ConfigError(f"expected one of {', '.join(FORMATS)}, got {fmt!r}", key="--trace-format")
    limit_bytes = MAX_TRACE_BYTES_PER_REQUEST * max_requests
    if fmt == "auto":
        fmt = detect_format(path, _head(path))
    if fmt == "npy":
        _head(path)  # a regular file within the data limit (np.load would block on a FIFO)
        return _read_npy(path, max_requests)
    b = _map_text(path, limit_bytes, max_requests)
    store = fmt == "ramulator" and _first_is_vector(b[:4097].tobytes())
    # room for every request: address vectors (np.full below touches its pages) by the line count; flat
    # addresses by the bytes (a request line has >= 4, "0 R\n"; np.empty's untouched pages cost nothing, and
    # counting the lines took 0.1 s of a 10M-line trace). Arrivals: zeroed pages, written only where non-zero
    cap = min(max_requests, (_count_lines(b) if store else b.shape[0] // 4) + 1)
    addr = np.empty(cap, np.uint64)
    wr = np.empty(cap, np.bool_)
    arr = np.zeros(cap, np.int64)
    lv, prefetch = vector_levels(spec.org) if spec is not None else ([("Ch", 1)], 1)
    sizes = np.array([s for _, s in lv], np.int64)
    vec = np.full((cap if store else 1, len(lv)), -1, np.int64)
    k = -1 if store else _parse_fast(b, _FMT[fmt], _HEXVAL, addr, wr, arr)
    err = line = 0
    if k < 0:  # a line of another shape: the general parser accepts it or names it
        k, err, line = _parse(b, _FMT[fmt], len(lv), sizes, addr, wr, arr, vec, store)
    if err == 11:  # a flat address first, an address vector later
        raise ConfigError("mixes address vectors and flat addresses", file=path, key="request 1")
    if err == 10:
        raise ConfigError(f"trace has more than {max_requests} requests (the limit)", file=path, key=f"line {line}")
    if err:
        raise ConfigError(f"{_ERR[err]} ({fmt} format), got {_line_text(b, line)!r}", file=path, key=f"line {line}")
    if k == 0:
        raise ConfigError("trace has no requests", file=path)
    addr, wr, arr = addr[:k], wr[:k], arr[:k]
    isv = vec[:k, 0] >= 0 if store else np.zeros(1, bool)
    if isv.any():
        if not isv.all():
            raise ConfigError(
                "mixes address vectors and flat addresses", file=path, key=f"request {int(np.argmin(isv)) + 1}"
            )
        v = vec[:k]
        fields = {name: v[:, j] for j, (name, _) in enumerate(lv)}
        fields["Co"] = fields["Co"] // prefetch
        addr = encode(spec, fields, mapping)
    if spec is not None and k and int(addr.max()) >= spec.capacity_bytes:
        i = int(np.argmax(addr >= np.uint64(spec.capacity_bytes)))
        raise ConfigError(
            f"address 0x{int(addr[i]):x} beyond the device capacity ({spec.capacity_bytes} B)",
            file=path,
            key=f"request {i + 1}",
        )
    return addr, wr, arr


def _head(path: str) -> bytes:
    """The first 4 KiB of the trace (to detect its format): a regular file within the data size limit
    (attnsim.core.fileio), else one ConfigError."""
    from attnsim.core.fileio import InputRefused, read_head

    try:
        return read_head(path, 4096)
    except InputRefused as exc:
        raise ConfigError(f"cannot read the trace ({exc})", file=exc.file or path, key=exc.key) from None


MAX_TRACE_BYTES_PER_REQUEST = 64  # a text trace's size bound: 64 B per request it may hold


def read_text_bounded(path: str, limit_bytes: int, max_requests: int) -> bytes:
    """A text trace's bytes (a pipe read once), bounded as by :func:`read_trace_any`; ConfigError names the path."""
    return _map_text(path, limit_bytes, max_requests).tobytes()


def _map_text(path: str, limit_bytes: int, max_requests: int) -> np.ndarray:
    """The text trace's bytes as a uint8 view of the file mapped read-only (the page cache's pages: no copy; a
    bytes copy of a 10M-line trace wrote 137 MB of fresh pages). A regular file sized before anything is read, or
    a pipe read up to the limit (attnsim.core.fileio.open_regular); devices (/dev/zero) and sockets are refused."""
    from attnsim.core.fileio import InputRefused, input_limit_bytes, open_regular

    try:
        data_limit = input_limit_bytes("data")
    except InputRefused as exc:
        raise ConfigError(str(exc), file=exc.file) from None
    try:
        if data_limit < limit_bytes:
            fd, size = open_regular(path, data_limit, kind="data", allow_fifo=True)
        else:
            fd, size = open_regular(path, limit_bytes, allow_fifo=True)
    except InputRefused as exc:
        if "larger than" in str(exc) and data_limit >= limit_bytes:
            raise ConfigError(
                f"trace of more than {limit_bytes} B (the limit for {max_requests} requests)", file=path
            ) from None
        raise ConfigError(f"cannot read the trace ({exc})", file=exc.file or path, key=exc.key) from None
    try:
        if size > 0:
            try:
                return np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ), np.uint8)
            except (OSError, ValueError):  # a file system without mmap: read it (bounded by the size check)
                pass
        bound = min(data_limit, limit_bytes)
        with os.fdopen(os.dup(fd), "rb") as f:  # a pipe (size -1) or an empty file: at most bound + 1 bytes
            data = f.read(bound + 1 if size < 0 else size + 1)
        if len(data) > bound:
            raise ConfigError(f"trace of more than {bound} B (the limit for {max_requests} requests)", file=path)
        return np.frombuffer(data, np.uint8)
    except OSError as exc:
        raise ConfigError(f"cannot read the trace ({exc.strerror})", file=path) from None
    finally:
        os.close(fd)


def _count_lines(b: np.ndarray, chunk: int = 1 << 24) -> int:
    """Newlines in b, counted in chunks (one bounded temporary)."""
    return sum(int(np.count_nonzero(b[i : i + chunk] == 10)) for i in range(0, b.shape[0], chunk))


def _read_npy(path: str, max_requests: int):
    """The .npy trace: header checked first (memory-mapped, nothing read beyond it). The addresses stay a view of
    the mapped file (decoded in place: a copy cost ~0.2 s of fresh pages at 10M requests); the write flags and
    non-zero arrivals are copied. The file must not change while the run reads it."""
    try:
        t = np.load(path, mmap_mode="r", allow_pickle=False)
    except OSError as exc:
        if exc.strerror:
            raise ConfigError(f"cannot read the trace ({exc.strerror})", file=path) from None
        raise ConfigError(f"expected a .npy trace written by 'attnsim dram convert' ({exc})", file=path) from None
    except (ValueError, SyntaxError, TokenError, EOFError) as exc:  # numpy parses the header with tokenize + ast
        raise ConfigError(f"expected a .npy trace written by 'attnsim dram convert' ({exc})", file=path) from None
    if t.dtype != TRACE_DTYPE or t.ndim != 1:
        raise ConfigError(f"expected a 1-D array of {TRACE_DTYPE.descr}, got {t.dtype} x {t.shape}", file=path)
    if t.shape[0] > max_requests:
        raise ConfigError(f"trace has more than {max_requests} requests (the limit)", file=path)
    addr = t["addr"]  # a strided view of the mapped file: decoded in place (controller.decode), never copied
    if not t["arrival"].any():  # all at cycle 0 (the common case): calloc'd zeros, no 8 B/request copy (~0.3 s at 10M)
        return addr, t["write"] != 0, np.zeros(t.shape[0], np.int64)
    arr = np.array(t["arrival"])
    if arr.shape[0] and (arr[0] < 0 or bool((arr[1:] < arr[:-1]).any())):
        raise ConfigError("arrival cycles must be >= 0 and not decrease", file=path)
    return addr, t["write"] != 0, arr


def write_npy(path: str, addr, is_write, arrival=None) -> None:
    t = np.zeros(len(addr), TRACE_DTYPE)
    t["addr"] = addr
    t["write"] = is_write
    t["arrival"] = 0 if arrival is None else arrival
    np.save(path, t, allow_pickle=False)
