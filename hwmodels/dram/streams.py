"""Cross-check request streams (bench/crosscheck_dram.py, tests/test_dram_golden.py).

One channel, requests as bank-level fields encoded into flat byte addresses with the field order
``Pc Ra Bg Ba Ro Co`` (most to least significant, then the burst offset). That is the order of the
levels of Ramulator 2.1's ChRaBaRoCo mapper below the channel (HBM3: PseudoChannel, Sid, BankGroup, Bank,
Row, Column; HBM2 has no Sid, LPDDR5/DDR5 no PseudoChannel: size-1 fields take no bits), so the same
addresses mean the same banks to both simulators.
"""
from __future__ import annotations

import hashlib

import numpy as np

MAPPING = "PcRaBgBaRoCo"  # attnsim mapping string of the stream addresses (one channel)
STREAMS = ("seq", "random", "strided", "mixed", "fewbanks", "closed", "norefresh")
FEW_BANKS = 4
WRITE_FRACTION = 0.3


def stream_options(kind: str) -> dict:
    """Controller options a stream runs with (page policy, refresh) on every simulator."""
    return {"page": "closed" if kind == "closed" else "open", "refresh": "none" if kind == "norefresh" else "ab"}


def make_stream(org, kind: str, n: int, seed: int = 1):
    """(byte address uint64, is_write bool) of stream ``kind`` on one channel of organisation ``org``.

    seq: request i to bank unit i mod K (K = bank units of the channel, pseudo-channel fastest, then bank
    group, rank/SID, bank), the column advancing every K requests, the row after all bursts of a row.
    strided: the same walk with the row advancing every K requests (every request opens a row).
    random: uniform bank unit, row and column. mixed: random with WRITE_FRACTION writes. fewbanks: random
    over the first FEW_BANKS bank units. closed / norefresh: random (closed page / refresh off)."""
    if kind not in STREAMS:
        raise ValueError(f"unknown stream {kind!r} (known: {', '.join(STREAMS)})")
    P, R, G, B = org.pseudo_channels, org.ranks, org.bank_groups, org.banks_per_group
    K = P * R * G * B
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.int64)
    if kind in ("seq", "strided"):
        u = i % K
        if kind == "seq":
            col = (i // K) % org.columns
            row = (i // (K * org.columns)) % org.rows
        else:
            col = np.zeros(n, np.int64)
            row = (i // K) % org.rows
    else:
        u = rng.integers(0, FEW_BANKS if kind == "fewbanks" else K, n)
        row = rng.integers(0, org.rows, n)
        col = rng.integers(0, org.columns, n)
    w = rng.random(n) < WRITE_FRACTION if kind == "mixed" else np.zeros(n, bool)
    pc, bg, ra, ba = u % P, (u // P) % G, (u // (P * G)) % R, u // (P * G * R)
    addr = np.zeros(n, np.uint64)
    for val, size in ((pc, P), (ra, R), (bg, G), (ba, B), (row, org.rows), (col, org.columns)):
        addr = addr * np.uint64(size) + val.astype(np.uint64)
    return addr * np.uint64(org.burst_bytes), w


def stream_digest(addr, is_write) -> str:
    """sha256 (first 16 hex digits) of a stream: golden data records it to prove the same stream is replayed."""
    h = hashlib.sha256(np.ascontiguousarray(addr, dtype="<u8").tobytes())
    h.update(np.ascontiguousarray(is_write, dtype=np.uint8).tobytes())
    return h.hexdigest()[:16]
