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


# DRAMsim3 configurations (its configs/*.ini, one channel) and the attnsim spec that mirrors each: a built-in
# preset with the .ini's organisation and timings (tCK cycles; burst = BL / 2 CK; RD->WR = RL + BL/2 - WL + tRTRS,
# DRAMsim3 timing.cc:16-17, tRTRS 1 in the LPDDR4 .ini, default 2 without one, configuration.cc:306;
# ranks = channel_size / MB per rank as configuration.cc:48-60 derives them;
# LPDDR4: 2 KiB rows (1024 x 16 bit) x 64 Ki rows x 8 banks x 4 devices = 4 GiB per rank, 8192 MB: two ranks)
DRAMSIM3_STANDARDS = {
    "hbm2": {
        "ini": "HBM2_8Gb_x128.ini",
        "base": "hbm2_2000",
        # HBM: DRAMsim3 doubles the .ini columns (configuration.cc:141-149): 128 x 128 bit = 2 KiB rows of 32
        # BL4 bursts; 64 MiB banks x 16 = the whole 1024 MB channel: one rank
        "org": dict(
            channels=1,
            pseudo_channels=1,
            ranks=1,
            bank_groups=4,
            banks_per_group=4,
            rows=32768,
            columns=32,
            burst_bytes=64,
            channel_width_bits=128,
        ),
        # nRTP: DRAMsim3 reads the key tRTP, absent from the .ini (it has tRTP_L / tRTP_S): its default 5
        # (configuration.cc:307)
        "timing": dict(
            nBL=2,
            nCL=14,
            nCWL=4,
            nRCDRD=14,
            nRCDWR=14,
            nRP=14,
            nRAS=34,
            nRC=48,
            nWR=16,
            nRTP=5,
            nCCD_S=1,
            nCCD_L=2,
            nRRD_S=4,
            nRRD_L=6,
            nFAW=30,
            nWTR_S=6,
            nWTR_L=8,
            nRTW=14,
            nRFC=260,
            nREFI=3900,
        ),
    },
    "lpddr4": {
        "ini": "LPDDR4_8Gb_x16_2400.ini",
        "base": "lpddr5_6400",
        "org": dict(
            channels=1,
            pseudo_channels=1,
            ranks=2,
            bank_groups=2,
            banks_per_group=4,
            rows=65536,
            columns=64,
            burst_bytes=128,
            channel_width_bits=64,
            data_rate_mtps=2400,
            tck_ns=0.83,
        ),
        "timing": dict(
            nBL=8,
            nCL=17,
            nCWL=14,
            nRCDRD=15,
            nRCDWR=15,
            nRP=15,
            nRAS=32,
            nRC=47,
            nWR=30,
            nRTP=12,
            nCCD_S=4,
            nCCD_L=6,
            nRRD_S=8,
            nRRD_L=8,
            nFAW=32,
            nWTR_S=8,
            nWTR_L=16,
            nRTW=12,
            nRFC=392,
            nREFI=8660,
            nRTRS=1,
            nPPD=2,
            # one command per cycle: DRAMsim3 issues two in a cycle only on HBM
            # (configuration.cc:107-109, controller.cc:84-92)
            separate_row_col_bus=False,
        ),
    },
}


def dramsim3_spec(std: str):
    """attnsim spec mirroring DRAMsim3's ``DRAMSIM3_STANDARDS[std]`` .ini (one channel)."""
    from attnsim.hwmodels.dram.spec import load_dram_spec, spec_from_dict  # (spec imports nothing of this)

    s = DRAMSIM3_STANDARDS[std]
    d = load_dram_spec(s["base"]).model_dump()
    d["name"] = f"dramsim3_{std}"
    d.pop("timing_ns", None)
    d["org"].pop("transfers_per_ck", None)
    d["org"].update(s["org"])
    d["timing"].update(s["timing"])
    d["default_mapping"] = MAPPING
    return spec_from_dict(d, file=f"DRAMsim3 {s['ini']}")
