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
# issue 30's realistic HBM3 streams, held out from the tuned set above (issue 27): the paged-KV decode step of the
# serving allocator (attnsim.studies.serve.paging.decode_step_stream: the one kind make_stream does not build),
# sequential with order jitter, random with 30 % writes (= mixed), strided over FEW_BANKS banks, INTERLEAVED
# interleaved sequential streams
REALISTIC_STREAMS = ("pagedkv", "seqjitter", "mixed", "strided4", "interleaved8")
FEW_BANKS = 4
WRITE_FRACTION = 0.3
JITTER_REQUESTS = 16  # seqjitter: a request moves up to this many places from its seq position (assumed)
INTERLEAVED = 8  # interleaved8: sequential streams (assumed: e.g. 8 tensors read at once)


def stream_options(kind: str) -> dict:
    """Controller options a stream runs with (page policy, refresh) on every simulator."""
    return {"page": "closed" if kind == "closed" else "open", "refresh": "none" if kind == "norefresh" else "ab"}


def make_stream(org, kind: str, n: int, seed: int = 1):
    """(byte address uint64, is_write bool) of stream ``kind`` on one channel of organisation ``org``.

    seq: request i to bank unit i mod K (K = bank units of the channel, pseudo-channel fastest, then bank
    group, rank/SID, bank), the column advancing every K requests, the row after all bursts of a row.
    strided: the same walk with the row advancing every K requests (every request opens a row).
    random: uniform bank unit, row and column. mixed: random with WRITE_FRACTION writes. fewbanks: random
    over the first FEW_BANKS bank units. closed / norefresh: random (closed page / refresh off).
    Realistic (issue 30): seqjitter: seq with each request displaced by up to JITTER_REQUESTS places (sorted by
    position + uniform [0, JITTER_REQUESTS)); strided4: strided over the first FEW_BANKS bank units (every
    request a new row); interleaved8: INTERLEAVED seq walks, each from its own bank unit and 1/INTERLEAVED of
    the rows, the next request taken from a uniformly drawn one (not periodic). pagedkv: see REALISTIC_STREAMS."""
    synthetic = [k for k in STREAMS + REALISTIC_STREAMS if k != "pagedkv"]
    if kind not in synthetic:
        raise ValueError(f"unknown stream {kind!r} (known: {', '.join(synthetic)})")
    P, R, G, B = org.pseudo_channels, org.ranks, org.bank_groups, org.banks_per_group
    K = P * R * G * B
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.int64)
    if kind == "seqjitter":
        i = np.argsort(i + rng.random(n) * JITTER_REQUESTS, kind="stable")
        kind = "seq"
    elif kind == "interleaved8":
        s = rng.integers(0, INTERLEAVED, n)
        j = np.zeros(n, np.int64)  # position of each request within its own walk
        for x in range(INTERLEAVED):
            m = s == x
            j[m] = np.arange(int(m.sum()))
        u = (j + s * (K // INTERLEAVED)) % K
        col = (j // K) % org.columns
        row = (s * (org.rows // INTERLEAVED) + j // (K * org.columns)) % org.rows
    if kind in ("seq", "strided", "strided4"):
        K = FEW_BANKS if kind == "strided4" else K
        u = i % K
        if kind == "seq":
            col = (i // K) % org.columns
            row = (i // (K * org.columns)) % org.rows
        else:
            col = np.zeros(n, np.int64)
            row = (i // K) % org.rows
    elif kind != "interleaved8":
        u = rng.integers(0, FEW_BANKS if kind == "fewbanks" else K, n)
        row = rng.integers(0, org.rows, n)
        col = rng.integers(0, org.columns, n)
    w = rng.random(n) < WRITE_FRACTION if kind == "mixed" else np.zeros(n, bool)
    pc, bg, ra, ba = u % P, (u // P) % G, (u // (P * G)) % R, u // (P * G * R)
    return encode(org, pc, ra, bg, ba, row, col), w


def encode(org, pc, ra, bg, ba, row, col):
    """Byte addresses of the fields in the streams' order (MAPPING: Pc Ra Bg Ba Ro Co, then the burst offset)."""
    addr = np.zeros(np.shape(row), np.uint64)
    for val, size in (
        (pc, org.pseudo_channels),
        (ra, org.ranks),
        (bg, org.bank_groups),
        (ba, org.banks_per_group),
        (row, org.rows),
        (col, org.columns),
    ):
        addr = addr * np.uint64(size) + np.asarray(val).astype(np.uint64)
    return addr * np.uint64(org.burst_bytes)


def refield(org, addr, mapping: str, to: str = MAPPING):
    """Byte addresses of one channel laid out by ``mapping`` (a device's own, e.g. RoRaBaCoBgPcCh) re-encoded in
    the field order ``to`` (default the streams' MAPPING), so every simulator sees the banks, rows and columns
    ``mapping`` gives them. refield(org, refield(org, a, m), MAPPING, m) == a."""
    from attnsim.hwmodels.dram.spec import parse_mapping  # (spec imports nothing of this)

    if org.channels != 1:
        raise ValueError("refield: one channel")
    a = np.asarray(addr, dtype=np.uint64) // np.uint64(org.burst_bytes)
    f = {}
    for name, bits in reversed(parse_mapping(mapping, org)):
        f[name] = a & np.uint64((1 << bits) - 1)
        a = a >> np.uint64(bits)
    if a.any():
        raise ValueError(f"refield: addresses beyond one channel of {mapping}")
    out = np.zeros(a.shape, np.uint64)
    for name, bits in parse_mapping(to, org):
        out = (out << np.uint64(bits)) | f.get(name, np.uint64(0))
    return out * np.uint64(org.burst_bytes)


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
