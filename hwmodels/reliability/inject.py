"""Bit-exact error injection into stored KV (cxl_reliability.md §5(2)-(3)).

The bits of a plane that belong to a set of fields form a *stream* (element-major, in the
plane's bit order); the stream is cut into ECC codewords of ``k`` data bits, each with
``n - k`` (virtual) check bits, and, for the two-level code, into outer groups. Raw error
positions over the whole virtual stream are drawn by geometric skip sampling (the gap to the
next flip is geometric), so the cost scales with the number of flips, not of bits:

- bidirectional flips (soft, approximate-DRAM) at ``p_flip`` per bit;
- retention candidates at ``p_retention`` per cell, kept only if the cell is charged: a true
  cell (probability ``true_cell_fraction``) holding 1 or an anti cell holding 0. Check bits
  are taken as charged with probability 1/2.
- optional extra positions (permanent faults, see :func:`fault_positions`).

Each codeword with errors is then decoded exactly as the scheme would (Hamming syndrome
decoding with the real parity-check matrix; bounded-distance decoding for symbol codes;
erasure repair for the two-level code). Silent errors are XORed into the integer view of the
data; detected-uncorrectable codewords leave the data untouched and are reported per element
(the DUE policy -- recompute or drop the token -- is applied by the caller). Per-field
counters record raw and silent data-bit flips. Same seed, same flips.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from attnsim.core import jitcache
from attnsim.hwmodels.reliability import ecc as _ecc
from attnsim.hwmodels.reliability.formats import FIELD_ID, FIELDS, Encoded

jitcache.ensure()  # attnsim's cache locator before the decorators below

STAT_NAMES = ("raw_data_flips", "units_with_errors", "corrected", "due", "sdc", "silent_data_flips")


# ---------------------------------------------------------------- kernels


@numba.njit(cache=True)
def _append(buf, count, value):
    if count >= buf.size:
        new = np.empty(2 * buf.size + 16, dtype=buf.dtype)
        new[: buf.size] = buf
        buf = new
    buf[count] = value
    return buf, count + 1


@numba.njit(cache=True)
def _geometric_positions(n_total, p, buf, count):
    """Append the positions in [0, n_total) of independent Bernoulli(p) events."""
    if p <= 0.0 or n_total <= 0:
        return buf, count
    if p >= 1.0:
        for v in range(n_total):
            buf, count = _append(buf, count, v)
        return buf, count
    lq = np.log1p(-p)
    pos = -1.0
    while True:
        u = np.random.random()
        pos += np.floor(np.log1p(-u) / lq) + 1.0  # gap ~ Geometric(p) on {1, 2, ...}
        if pos >= n_total:
            break
        buf, count = _append(buf, count, np.int64(pos))
    return buf, count


@numba.njit(cache=True)
def sample_positions(n_total, p, seed):
    """Positions of Bernoulli(p) events among ``n_total`` bits (seeded; for tests/benchmarks)."""
    np.random.seed(seed)
    buf = np.empty(16, dtype=np.int64)
    buf, c = _geometric_positions(n_total, p, buf, 0)
    return buf[:c].copy()


@numba.njit(cache=True)
def _locate(v, n, k, M, R, n_data_bits):
    """Virtual stream position -> data stream bit index, or -1 for check/parity/padding bits."""
    cw = v // n
    off = v - cw * n
    grp = cw // (M + R)
    idx = cw - grp * (M + R)
    if idx >= M or off >= k:
        return -1
    sb = (grp * M + idx) * k + off
    if sb >= n_data_bits:
        return -1
    return sb


@numba.njit(cache=True)
def _inject_stream(
    words,
    stream_bits,
    field_of_bit,
    n_elems,
    p_flip,
    p_ret,
    true_frac,
    kind,
    n,
    k,
    sym_bits,
    t,
    detect,
    f_mis,
    reports_due,
    lut,
    cols,
    M,
    R,
    extra_pos,
    seed,
    raw_counts,
    silent_counts,
    due_elem,
    stats,
):
    np.random.seed(seed)
    m = stream_bits.size
    n_data = n_elems * m
    n_cw_data = (n_data + k - 1) // k
    n_groups = (n_cw_data + M - 1) // M
    total = n_groups * (M + R) * n
    buf = np.empty(64, dtype=np.int64)
    c = 0
    buf, c = _geometric_positions(total, p_flip, buf, c)
    if p_ret > 0.0:
        cand = np.empty(64, dtype=np.int64)
        cand, nc = _geometric_positions(total, p_ret, cand, 0)
        for i in range(nc):
            v = cand[i]
            sb = _locate(v, n, k, M, R, n_data)
            if sb >= 0:
                val = (words[sb // m] >> stream_bits[sb % m]) & 1
            elif (v % n) >= k and (v // n) % (M + R) < M:
                val = 1 if np.random.random() < 0.5 else 0  # check bit: charged half the time
            elif (v // n) % (M + R) >= M:
                val = 1 if np.random.random() < 0.5 else 0  # outer parity chunk
            else:
                val = 0  # padding (stored zeros)
            true_cell = np.random.random() < true_frac
            if (true_cell and val == 1) or ((not true_cell) and val == 0):
                buf, c = _append(buf, c, v)
    for i in range(extra_pos.size):
        if 0 <= extra_pos[i] < total:
            buf, c = _append(buf, c, extra_pos[i])
    if c == 0:
        return
    srt = np.sort(buf[:c])
    # two events on the same bit cancel (XOR)
    pos = np.empty(c, dtype=np.int64)
    npos = 0
    i = 0
    while i < c:
        j = i
        while j < c and srt[j] == srt[i]:
            j += 1
        if (j - i) % 2 == 1:
            pos[npos] = srt[i]
            npos += 1
        i = j
    # ---- decode every codeword that has errors
    cw_id = np.empty(npos, dtype=np.int64)
    cw_lo = np.empty(npos, dtype=np.int64)
    cw_hi = np.empty(npos, dtype=np.int64)
    outc = np.empty(npos, dtype=np.int8)  # 0 clean, 1 silent, 2 detected (erasure)
    misc = np.empty(npos, dtype=np.int64)  # extra bit toggled by a miscorrection, or -1
    ncw = 0
    i = 0
    while i < npos:
        cw = pos[i] // n
        j = i
        while j < npos and pos[j] // n == cw:
            j += 1
        o = 1
        mc = -1
        if kind == 1:
            s = 0
            for q in range(i, j):
                s ^= cols[pos[q] - cw * n]
            if s == 0:
                o = 1
            else:
                col = lut[s]
                if col >= 0:
                    mc = cw * n + col
                    o = 0 if (j - i == 1 and pos[i] == mc) else 1
                else:
                    o = 2 if reports_due else 1
        elif kind >= 2:
            nsym = 0
            last = -1
            for q in range(i, j):
                sy = (pos[q] - cw * n) // sym_bits
                if sy != last:
                    nsym += 1
                    last = sy
            if nsym <= t:
                o = 0
            elif nsym <= detect:
                o = 2
            else:
                o = 1 if np.random.random() < f_mis else 2
            if o == 2 and not reports_due:
                o = 1
        cw_id[ncw] = cw
        cw_lo[ncw] = i
        cw_hi[ncw] = j
        outc[ncw] = o
        misc[ncw] = mc
        ncw += 1
        i = j
    # ---- outer groups (two-level: repair up to R erasures) and per-unit statistics
    i = 0
    while i < ncw:
        g = cw_id[i] // (M + R)
        j = i
        n_era = 0
        any_sil = False
        while j < ncw and cw_id[j] // (M + R) == g:
            if outc[j] == 2:
                n_era += 1
            if outc[j] == 1:
                any_sil = True
            j += 1
        if kind == 3 and n_era <= R:
            for q in range(i, j):
                if outc[q] == 2:
                    outc[q] = 0
            n_era = 0
        stats[1] += 1
        if any_sil:
            stats[4] += 1
        elif n_era > 0:
            stats[3] += 1
        else:
            stats[2] += 1
        i = j
    # ---- apply
    for q in range(ncw):
        for r in range(cw_lo[q], cw_hi[q]):
            sb = _locate(pos[r], n, k, M, R, n_data)
            if sb >= 0:
                raw_counts[field_of_bit[stream_bits[sb % m]]] += 1
                stats[0] += 1
        if outc[q] == 1:
            mc = misc[q]
            mc_in = False
            for r in range(cw_lo[q], cw_hi[q]):
                if pos[r] == mc:
                    mc_in = True
                    continue
                sb = _locate(pos[r], n, k, M, R, n_data)
                if sb >= 0:
                    e = sb // m
                    b = stream_bits[sb % m]
                    words[e] = words[e] ^ (1 << b)
                    silent_counts[field_of_bit[b]] += 1
                    stats[5] += 1
            if mc >= 0 and not mc_in:
                sb = _locate(mc, n, k, M, R, n_data)
                if sb >= 0:
                    e = sb // m
                    b = stream_bits[sb % m]
                    words[e] = words[e] ^ (1 << b)
                    silent_counts[field_of_bit[b]] += 1
                    stats[5] += 1
        elif outc[q] == 2:
            cw = cw_id[q]
            grp = cw // (M + R)
            idx = cw - grp * (M + R)
            if idx < M:
                sb0 = (grp * M + idx) * k
                sb1 = min(sb0 + k, n_data)
                if sb1 > sb0:
                    for e in range(sb0 // m, (sb1 - 1) // m + 1):
                        due_elem[e] = True


# ---------------------------------------------------------------- Python API


@dataclass(frozen=True)
class StreamSpec:
    """How the bits of some fields are stored: ECC scheme and raw error rates."""

    fields: tuple = FIELDS
    ecc: str = "none"
    p_flip: float = 0.0  # bidirectional per-bit flip probability
    p_retention: float = 0.0  # per charged cell
    true_cell_fraction: float = 0.5


@dataclass
class InjectionResult:
    encoded: Encoded  # corrupted copy
    raw_counts: dict  # field -> raw data-bit flips (before ECC)
    silent_counts: dict  # field -> data-bit flips left in the data
    due_masks: dict  # plane -> bool per element in a DUE codeword
    stats: dict = field(default_factory=dict)


def _scheme_arrays(s: _ecc.EccScheme):
    if s.kind == "bit":
        cols = _ecc.hamming_columns(_ecc._bit_code_name(s)).astype(np.int64)
        lut = _ecc.syndrome_lut(cols.astype(np.uint32)).astype(np.int64)
    else:
        cols = np.zeros(1, dtype=np.int64)
        lut = np.zeros(1, dtype=np.int64)
    return cols, lut


def inject_plane_stream(
    words: np.ndarray,
    elem_bits: int,
    field_of_bit: np.ndarray,
    spec: StreamSpec,
    seed: int,
    extra_pos: np.ndarray | None = None,
):
    """Inject into one plane (in place) for the bits of ``spec.fields``; returns counters."""
    wanted = np.array([FIELD_ID[f] for f in spec.fields], dtype=np.int64)
    stream_bits = np.flatnonzero(np.isin(field_of_bit.astype(np.int64), wanted)).astype(np.int64)
    raw = np.zeros(len(FIELDS), dtype=np.int64)
    sil = np.zeros(len(FIELDS), dtype=np.int64)
    due = np.zeros(words.size, dtype=np.bool_)
    stats = np.zeros(len(STAT_NAMES), dtype=np.int64)
    if stream_bits.size == 0 or words.size == 0:
        return raw, sil, due, stats
    s = _ecc.get_scheme(spec.ecc)
    cols, lut = _scheme_arrays(s)
    extra = np.zeros(0, dtype=np.int64) if extra_pos is None else np.asarray(extra_pos, dtype=np.int64)
    _inject_stream(
        words,
        stream_bits,
        field_of_bit.astype(np.int64),
        words.size,
        float(spec.p_flip),
        float(spec.p_retention),
        float(spec.true_cell_fraction),
        _ecc.KIND_ID[s.kind],
        s.n_bits,
        s.k_bits,
        s.symbol_bits,
        s.t,
        s.detect,
        s.miscorrect_fraction(),
        s.reports_due,
        lut,
        cols,
        s.outer_m,
        s.outer_r,
        extra,
        np.int64(seed),
        raw,
        sil,
        due,
        stats,
    )
    return raw, sil, due, stats


def _seed_for(seed: int, *path: int) -> int:
    return int(np.random.SeedSequence([int(seed), *path]).generate_state(1, dtype=np.uint32)[0])


def inject(enc: Encoded, specs, seed: int = 0) -> InjectionResult:
    """Corrupt a copy of ``enc``. ``specs``: one StreamSpec or a list (each covers some fields)."""
    if isinstance(specs, StreamSpec):
        specs = [specs]
    out = enc.copy()
    raw = np.zeros(len(FIELDS), dtype=np.int64)
    sil = np.zeros(len(FIELDS), dtype=np.int64)
    stats = np.zeros(len(STAT_NAMES), dtype=np.int64)
    due_masks = {}
    for pi, (name, plane) in enumerate(sorted(out.planes.items())):
        due_masks[name] = np.zeros(plane.words.size, dtype=bool)
        for si, spec in enumerate(specs):
            r, s, d, st = inject_plane_stream(
                plane.words, plane.elem_bits, plane.field_of_bit, spec, _seed_for(seed, pi, si)
            )
            raw += r
            sil += s
            stats += st
            due_masks[name] |= d
    return InjectionResult(
        out,
        dict(zip(FIELDS, raw.tolist())),
        dict(zip(FIELDS, sil.tolist())),
        due_masks,
        dict(zip(STAT_NAMES, stats.tolist())),
    )


def monte_carlo_outcomes(scheme: str, p: float, n_units: int, seed: int = 0) -> dict:
    """Monte Carlo outcome counts of ``n_units`` codewords (outer groups for two-level) at BER ``p``.

    Runs the real injection/decoding kernel on an all-zero data stream.
    """
    s = _ecc.get_scheme(scheme)
    n_data_bits = n_units * s.group_data_bits
    words = np.zeros(n_data_bits // 8, dtype=np.uint8)
    fob = np.full(8, FIELD_ID["code_low"], dtype=np.int8)
    _, _, _, st = inject_plane_stream(words, 8, fob, StreamSpec(("code_low",), scheme, p_flip=p), seed)
    st = dict(zip(STAT_NAMES, st.tolist()))
    return {
        "n": n_units,
        "ok": n_units - st["units_with_errors"],
        "corrected": st["corrected"],
        "due": st["due"],
        "sdc": st["sdc"],
        "silent_data_flips": st["silent_data_flips"],
    }


def fault_positions(
    mode: str,
    n_virtual_bits: int,
    rng: np.random.Generator,
    *,
    bus_bits: int = 72,
    device_width: int = 4,
    row_bits: int = 8192,
) -> np.ndarray:
    """Virtual-stream positions corrupted by one permanent fault (each stuck bit differs from the data w.p. 1/2).

    Layout: the stream is striped over a bus of ``bus_bits`` lanes (one codeword beat for
    SECDED, 144 for lockstep chipkill); device ``d`` drives lanes [d w, (d+1) w). A row fault
    covers ``row_bits`` consecutive bits of one device's lanes, a column fault one lane-beat in
    every row, a pin fault one lane everywhere, a chip fault all lanes of one device.
    """
    beats = -(-n_virtual_bits // bus_bits)
    dev = int(rng.integers(bus_bits // device_width))
    lanes = np.arange(dev * device_width, (dev + 1) * device_width)
    if mode == "bit":
        cand = rng.integers(n_virtual_bits, size=1)
    elif mode == "pin":
        lane = int(rng.choice(lanes))
        cand = np.arange(beats) * bus_bits + lane
    elif mode == "chip":
        cand = (np.arange(beats)[:, None] * bus_bits + lanes[None, :]).ravel()
    elif mode in ("row", "column"):
        beats_per_row = max(1, row_bits // device_width)
        if mode == "row":
            b0 = int(rng.integers(max(1, beats - beats_per_row + 1)))
            bs = np.arange(b0, min(beats, b0 + beats_per_row))
        else:
            bs = np.arange(int(rng.integers(beats_per_row)), beats, beats_per_row)
        cand = (bs[:, None] * bus_bits + lanes[None, :]).ravel()
    else:
        raise ValueError(f"unknown fault mode {mode!r} (bit, row, column, pin, chip)")
    cand = cand[cand < n_virtual_bits]
    return np.sort(cand[rng.random(cand.size) < 0.5]).astype(np.int64)
