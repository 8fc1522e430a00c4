"""Readers for request trace files as their datasets ship them (``serving.trace.file`` + ``format``).

Every reader streams the file row by row (the size is checked before reading), yields
``(line, time_s, prompt_tokens, output_tokens, hash_ids)`` and stops with one ConfigError naming the
file, the line and the column of the first bad row (a bad line is quoted up to ``QUOTE_CHARS``).

* ``azure``: Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset,
  AzureLLMInferenceDataset2023.md / 2024.md, CC-BY 4.0): CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  TIMESTAMP ``2023-11-16 18:15:46.6805900`` (2023: no offset, read as UTC) or
  ``2024-05-10 00:00:00.009930+00:00`` (2024: with offset).
* ``burstgpt``: BurstGPT (HPMLL/BurstGPT README "Schema", CC-BY 4.0): CSV with ``Timestamp`` (s from
  0:00 of the first day), ``Request tokens``, ``Response tokens`` (other columns: Model, Total tokens,
  Log Type, Session ID, Elapsed time, not read). Rows with ``Response tokens`` = 0 are requests that
  failed in production (README: "some failure that Response tokens are 0s"); they are skipped and counted.
* ``mooncake``: Mooncake FAST'25 traces (kvcache-ai/Mooncake FAST25-release/README.md, Apache-2.0): JSONL
  ``{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}``; hash ids name 512-token prefix
  blocks (``MOONCAKE_BLOCK_TOKENS``; equal ids = reusable prefix KV).
* ``csv`` / ``jsonl``: attnsim's own columns ``arrival_s, prompt_tokens, output_tokens[, prefix_id,
  prefix_tokens]`` (attnsim.studies.serve.requests).

Time: trace time 0 is the file's first row for the dataset formats (rows earlier than it are refused) and
``arrival_s`` = 0 for attnsim's csv/jsonl. ``start_s`` / ``duration_s`` keep the rows in [start, start +
duration) of trace time (rows outside are read and dropped, never stored); a kept row arrives at
(trace time - start_s) x ``time_scale`` (0.5 = the same requests twice as fast).

Mooncake prefixes: a request's ``prefix_id`` is the deepest of its hash ids that another kept request
also carries (hash ids are prefix hashes, so that id names the whole shared prefix) and its
``prefix_tokens`` that many blocks x 512 (at most the prompt). attnsim's prefix cache holds one entry per
prefix id (serve/prefix.py), so two requests share KV only when their deepest shared blocks agree: in a
multi-turn conversation turn k + 1 reuses turn k's entry, not turn k - 1's (a block-level radix cache would
reuse both; ``ideal_reuse_tokens`` in the reader's facts is what such a cache would skip, for comparison).
"""

from __future__ import annotations

import calendar
import csv
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from attnsim.core.config import INT_LIMIT, ConfigError
from attnsim.workloads.limits import MAX_REQUESTS, MAX_TOKENS

FORMATS = ("azure", "burstgpt", "mooncake", "csv", "jsonl")
MAX_LINE_BYTES = 1 << 20
"""Longest trace line read (1 MiB). ASSUMPTION: a Mooncake row of a 128k-token request lists 256 hash ids (~2 KB),
the widest CSV rows are ~100 B; a longer line is no trace row, and reading it whole would hold it in memory. The
file's size limit is attnsim.core.fileio's ``data`` limit (2 GiB, ATTNSIM_MAX_DATA_MB), like every data reader's."""
LOG = logging.getLogger("attnsim.traces")  # notices on stderr through attnsim.core.notices
QUOTE_CHARS = 80
"""At most this many characters of a bad line are quoted in an error."""
MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per Mooncake hash block (kvcache-ai/Mooncake FAST25-release/README.md: 'The block size is 512 tokens')."""

_AZURE_COLS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST_COLS = ("Timestamp", "Request tokens", "Response tokens")
_NATIVE = ("arrival_s", "prompt_tokens", "output_tokens")
_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)(Z|[+-]\d{2}:?\d{2})?$")


def _quote(line: str) -> str:
    line = line.rstrip("\r\n")
    return repr(line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS] + "...")


def _val(v) -> str:
    """repr of a value, at most QUOTE_CHARS characters of it."""
    r = repr(v)
    return r if len(r) <= QUOTE_CHARS else r[:QUOTE_CHARS] + "..."


def _err(file: str, line: int, col: Optional[str], msg: str) -> ConfigError:
    return ConfigError(msg, file=file, key=f"line {line}" + (f", column {col}" if col else ""))


def check_size(path: Path, file: str) -> None:
    """Refuse a missing file, anything but a regular file (a FIFO would block), or one over the ``data`` size
    limit (attnsim.core.fileio) before reading it."""
    from attnsim.core.fileio import InputRefused, input_limit_bytes, open_regular

    try:
        fd, _ = open_regular(path, input_limit_bytes("data"), kind="data")
    except InputRefused as exc:
        raise ConfigError(str(exc), file=file) from None
    os.close(fd)


def _lines(path: Path, file: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, at most MAX_LINE_BYTES each (check_size refused non-regular files)."""
    offset = 0
    with open(path, "rb") as fh:
        i = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            i += 1
            if len(raw) > MAX_LINE_BYTES:
                start = _quote(raw[:QUOTE_CHARS].decode("utf-8", "replace"))
                raise ConfigError(
                    f"line longer than {MAX_LINE_BYTES} B (traces.MAX_LINE_BYTES), starting {start}",
                    file=file,
                    key=f"line {i}",
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(
                    f"not UTF-8 text: invalid byte 0x{raw[e.start]:02x} at byte offset {offset + e.start}",
                    file=file,
                    key=f"line {i}",
                ) from None
            offset += len(raw)
            yield i, (text[1:] if i == 1 and text.startswith("\ufeff") else text)


def _split(text: str, file: str, line: int) -> list:
    try:
        return next(csv.reader([text]), [])
    except csv.Error as e:
        raise _err(file, line, None, f"expected CSV values, got {e} in {_quote(text)}") from None


def _number(v, file, line, col, text, integer: bool, lo: float, hi: float):
    try:
        if isinstance(v, bool):
            raise TypeError
        x = float(v)
    except (TypeError, ValueError):
        raise _err(file, line, col, f"expected a number, got {_val(v)} in {_quote(text)}") from None
    if not math.isfinite(x):
        raise _err(file, line, col, f"expected a finite number, got {_val(v)}")
    if integer and x != int(x):
        raise _err(file, line, col, f"expected an integer, got {_val(v)}")
    if not lo <= x <= hi:
        raise _err(file, line, col, f"expected a value in [{lo:g}, {hi:g}], got {_val(v)}")
    return int(x) if integer else x


def parse_timestamp(s: str) -> float:
    """Seconds since the epoch of an Azure TIMESTAMP (no offset = UTC). ValueError when malformed."""
    m = _TS.match(s.strip())
    if not m:
        raise ValueError(s)
    y, mo, d, h, mi = (int(m.group(k)) for k in range(1, 6))
    sec = float(m.group(6))
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 61):
        raise ValueError(s)
    off = 0
    tz = m.group(7)
    if tz and tz != "Z":
        tz = tz.replace(":", "")
        off = (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[3:5]) * 60)
    return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) + sec - off


def _csv_rows(path: Path, file: str, need: tuple, fmt: str):
    """(line, row dict, text) of a CSV with a header holding ``need``."""
    lines = _lines(path, file)
    header = None
    for i, text in lines:
        if text.strip():
            header = [h.strip() for h in _split(text, file, i)]
            break
    if header is None:
        raise ConfigError(f"empty file (expected a {fmt} header {','.join(need or _NATIVE)})", file=file)
    missing = [c for c in need if c not in header]
    if missing:
        raise _err(file, i, missing[0], f"expected a {fmt} header with {', '.join(need)}, got {_quote(text)}")
    for j, text in lines:
        if not text.strip():
            continue
        vals = _split(text, file, j)
        if len(vals) != len(header):
            raise _err(
                file, j, None, f"expected {len(header)} values ({fmt} header), got {len(vals)} in {_quote(text)}"
            )
        yield j, dict(zip(header, (v.strip() for v in vals))), text


def _azure(path, file):
    for i, row, text in _csv_rows(path, file, _AZURE_COLS, "azure"):
        try:
            t = parse_timestamp(row["TIMESTAMP"])
        except ValueError:
            raise _err(
                file,
                i,
                "TIMESTAMP",
                f"expected a time like 2023-11-16 18:15:46.68 or "
                f"2024-05-10 00:00:00.009930+00:00, got {_val(row['TIMESTAMP'])}",
            ) from None
        p = _number(row["ContextTokens"], file, i, "ContextTokens", text, True, 1, MAX_TOKENS)
        o = _number(row["GeneratedTokens"], file, i, "GeneratedTokens", text, True, 1, MAX_TOKENS)
        yield i, t, p, o, None


def _burstgpt(path, file, skipped: list):
    for i, row, text in _csv_rows(path, file, _BURST_COLS, "burstgpt"):
        t = _number(row["Timestamp"], file, i, "Timestamp", text, False, 0, INT_LIMIT)
        p = _number(row["Request tokens"], file, i, "Request tokens", text, True, 0, MAX_TOKENS)
        o = _number(row["Response tokens"], file, i, "Response tokens", text, True, 0, MAX_TOKENS)
        if o == 0:  # a failed request (README): not served
            skipped[0] += 1
            continue
        if p < 1:
            raise _err(file, i, "Request tokens", f"expected an integer >= 1, got {_val(row['Request tokens'])}")
        yield i, t, p, o, None


def _jsonl(path, file):
    for i, text in _lines(path, file):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise _err(file, i, None, f"invalid JSON ({e.msg}): expected a JSON object, got {_quote(text)}") from None
        if not isinstance(obj, dict):
            raise _err(file, i, None, f"expected a JSON object, got {_quote(text)}")
        yield i, obj, text


def _mooncake(path, file):
    for i, obj, text in _jsonl(path, file):
        for k in ("timestamp", "input_length", "output_length", "hash_ids"):
            if k not in obj:
                raise _err(
                    file,
                    i,
                    k,
                    f"expected a mooncake row with timestamp, input_length, output_length, "
                    f"hash_ids, got {_quote(text)}",
                )
        t = _number(obj["timestamp"], file, i, "timestamp", text, False, 0, INT_LIMIT) / 1000.0  # ms
        p = _number(obj["input_length"], file, i, "input_length", text, True, 1, MAX_TOKENS)
        o = _number(obj["output_length"], file, i, "output_length", text, True, 1, MAX_TOKENS)
        h = obj["hash_ids"]
        if not isinstance(h, list) or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < INT_LIMIT for x in h
        ):
            raise _err(file, i, "hash_ids", f"expected a list of integers >= 0, got {str(h)[:QUOTE_CHARS]!r}")
        if len(h) > -(-p // MOONCAKE_BLOCK_TOKENS):
            raise _err(
                file,
                i,
                "hash_ids",
                f"expected at most ceil(input_length / {MOONCAKE_BLOCK_TOKENS}) = "
                f"{-(-p // MOONCAKE_BLOCK_TOKENS)} hash ids, got {len(h)}",
            )
        yield i, t, p, o, tuple(h)


def _native(path, file, fmt, default_prefix):
    if fmt == "jsonl":
        for i, obj, _ in _jsonl(path, file):
            yield (i,) + _parse_row(obj, file, i, default_prefix)
        return
    for i, row, _ in _csv_rows(path, file, (), "csv"):  # columns checked per row (_parse_row: line and column)
        yield (i,) + _parse_row(row, file, i, default_prefix)


_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens")
_REQUIRED = _COLUMNS[:3]


def _parse_row(row: dict, file: str, line: int, default_prefix: int) -> tuple:
    unknown = [k for k in row if k not in _COLUMNS]
    if unknown:
        raise ConfigError(
            f"unknown column {unknown[0]!r} (expected {', '.join(_COLUMNS)})", file=file, key=f"line {line}"
        )
    out = []
    for k in _COLUMNS:
        v = row.get(k)
        if v is None or v == "":
            if k in _REQUIRED:
                raise ConfigError(f"missing {k}", file=file, key=f"line {line}")
            out.append(None)
            continue
        try:
            if isinstance(v, bool):  # JSON true/false: float() would read 1/0
                raise TypeError
            x = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{k}: expected a number, got {v!r}", file=file, key=f"line {line}") from None
        if not np.isfinite(x):
            raise ConfigError(f"{k}: expected a finite number, got {v!r}", file=file, key=f"line {line}")
        if k == "arrival_s":
            if x < 0:
                raise ConfigError(f"arrival_s: expected a value >= 0, got {v!r}", file=file, key=f"line {line}")
        else:
            if x != int(x):
                raise ConfigError(f"{k}: expected an integer, got {v!r}", file=file, key=f"line {line}")
            lo, hi = (0, np.iinfo(np.int64).max) if k == "prefix_id" else (1, MAX_TOKENS)
            if not lo <= x <= hi:
                want = f">= {lo}" if x < lo else f"<= {hi}"
                raise ConfigError(f"{k}: expected an integer {want}, got {v!r}", file=file, key=f"line {line}")
            x = int(x)
        out.append(x)
    arr, prompt, output, pid, ptok = out
    if pid is None:
        pid, ptok = -1, 0
    elif ptok is None:
        ptok = default_prefix
    if pid >= 0 and ptok > prompt:
        raise ConfigError(f"prefix_tokens ({ptok}) exceed prompt_tokens ({prompt})", file=file, key=f"line {line}")
    return arr, prompt, output, pid, ptok


def format_of(path: Path, fmt: Optional[str]) -> str:
    """The format: as given, else jsonl for .jsonl/.ndjson/.json files and csv otherwise (attnsim's columns)."""
    if fmt is not None:
        return fmt
    return "jsonl" if path.suffix.lower() in (".jsonl", ".ndjson", ".json") else "csv"


def read_rows(
    path,
    fmt: Optional[str] = None,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: Optional[float] = None,
    default_prefix: int = 512,
):
    """Read a trace file: (arrival_s, prompt, output, prefix_id, prefix_tokens, facts), rows in file order
    (None prefix arrays: no prefixes); facts counts the rows read, kept, skipped.
    attnsim.studies.serve.requests.read_trace makes a RequestTrace of it."""
    p = Path(path)
    file = str(path)
    check_size(p, file)
    fmt = format_of(p, fmt)
    if fmt not in FORMATS:
        raise ConfigError(f"expected one of {', '.join(FORMATS)}, got {fmt!r}", key="serving.trace.format")
    skipped = [0]
    if fmt in ("csv", "jsonl"):
        rows = _native(p, file, fmt, default_prefix)
    else:
        rows = {
            "azure": lambda: _azure(p, file),
            "burstgpt": lambda: _burstgpt(p, file, skipped),
            "mooncake": lambda: _mooncake(p, file),
        }[fmt]()
    native = fmt in ("csv", "jsonl")
    origin = 0.0 if native else None
    end = math.inf if duration_s is None else start_s + duration_s
    kept: list = []
    n_read = 0
    last = 0.0
    for row in rows:
        n_read += 1
        line, t = row[0], row[1]
        if origin is None:  # dataset formats: trace time 0 = the file's first row
            origin = t
        rel = t - origin
        if rel < 0 and not native:
            raise _err(file, line, None, f"expected rows at or after the first row's time, got {-rel:.6g} s before it")
        last = max(last, rel)
        if not start_s <= rel < end:
            continue
        kept.append(((rel - start_s) * time_scale,) + tuple(row[2:]))
        if len(kept) > MAX_REQUESTS:
            raise _err(
                file,
                line,
                None,
                f"expected at most {MAX_REQUESTS} requests (workloads.limits.MAX_REQUESTS)"
                f", got more: narrow the window (start_s / duration_s)",
            )
    if n_read == 0:
        raise ConfigError("no requests in file", file=file)
    if not kept:
        raise ConfigError(
            f"expected requests in the window [{start_s:g}, {end:g}) s, got none (the file's rows "
            f"span 0 .. {last:.6g} s of trace time)",
            file=file,
            key="serving.trace.start_s",
        )
    arrival = np.array([r[0] for r in kept])
    prompt = np.array([r[1] for r in kept], np.int64)
    output = np.array([r[2] for r in kept], np.int64)
    n_read += skipped[0]  # the skipped rows were read too
    facts = {"format": fmt, "rows_read": n_read, "requests": len(kept), "skipped_failed": skipped[0]}
    if skipped[0]:
        LOG.info(
            "%s: %d of %d rows skipped: failed requests (Response tokens 0, BurstGPT README)", file, skipped[0], n_read
        )
    pid = ptok = None
    if native:
        pid = np.array([r[3] for r in kept], np.int64)
        ptok = np.array([r[4] for r in kept], np.int64)
    elif fmt == "mooncake":
        order = np.argsort(arrival, kind="stable")
        hashes = [kept[k][3] for k in order]
        pid_o, ptok_o, facts["ideal_reuse_tokens"] = mooncake_prefixes(hashes, prompt[order])
        pid = np.empty(len(kept), np.int64)
        ptok = np.empty(len(kept), np.int64)
        pid[order], ptok[order] = pid_o, ptok_o
    return arrival, prompt, output, pid, ptok, facts


def mooncake_prefixes(hashes: list, prompt: np.ndarray):
    """(prefix_id, prefix_tokens, ideal reuse tokens) of Mooncake requests in arrival order (module docstring).

    Ideal reuse: per request the tokens of its leading hash blocks some earlier request carried (what an
    unbounded block-level prefix cache would skip), summed."""
    count: dict = {}
    for h in hashes:
        for x in set(h):
            count[x] = count.get(x, 0) + 1
    n = len(hashes)
    pid = np.full(n, -1, np.int64)
    ptok = np.zeros(n, np.int64)
    for i, h in enumerate(hashes):
        k = 0
        while k < len(h) and count[h[k]] > 1:
            k += 1
        if k:
            pid[i] = h[k - 1]
            ptok[i] = min(k * MOONCAKE_BLOCK_TOKENS, int(prompt[i]))
    seen: set = set()
    ideal = 0
    for i, h in enumerate(hashes):
        k = 0
        while k < len(h) and h[k] in seen:
            k += 1
        ideal += min(k * MOONCAKE_BLOCK_TOKENS, int(prompt[i]) - 1) if k else 0
        seen.update(h)
    return pid, ptok, int(ideal)


__all__ = [
    "FORMATS",
    "MAX_LINE_BYTES",
    "MOONCAKE_BLOCK_TOKENS",
    "read_rows",
    "parse_timestamp",
    "check_size",
    "format_of",
    "mooncake_prefixes",
]
