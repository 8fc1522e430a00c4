"""ECC schemes: codeword structure, closed-form outcome probabilities and costs.

Outcome of one codeword under independent raw bit errors of probability ``p``
(shared/reference/cxl_reliability.md §5(2)): ``ok`` (no error), ``corrected``,
``due`` (detected uncorrectable) or ``sdc`` (silent: the decoder leaves or adds errors
without flagging). Kinds:

- ``none``: 64-bit words, every error is silent.
- ``bit`` (Hamming family, binary parity-check matrix with 8 check bits): SECDED (72,64)
  as a Hsiao code (odd-weight columns) and DDR5/LPDDR5 on-die SEC (136,128) (§3.2). The
  closed form is exact for error weights <= ``EXACT_WEIGHTS``: the number of weight-w error
  patterns with each syndrome is counted by dynamic programming over the columns, and the
  syndrome decoder (syndrome 0 -> undetected, column -> correct that bit, else detect) is
  applied to each class. On-die SEC reports nothing to the host, so its detections are silent.
- ``symbol`` (Reed-Solomon-like, ``symbol_bits``-bit symbols, MDS distance d = n - k + 1):
  <= t symbol errors corrected, <= ``detect`` detected, beyond that a miscorrection with the
  bounded-distance sphere probability sum_{i<=t} C(n,i)(Q-1)^i / Q^(n-k), else detected.
- ``two_level`` (REACH, arXiv 2512.18152, §3.2): an inner symbol code per 32 B chunk corrects
  or flags an erasure; an outer code over ``outer_m`` data + ``outer_r`` parity chunks repairs
  up to ``outer_r`` erasures. Probabilities are per outer group.

Storage overhead, transfer-time overhead (inline ECC), decode latency (cycles) and energy
(pJ per data byte) are carried with each scheme for the timing/energy models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import combinations
from math import comb

import numpy as np

EXACT_WEIGHTS = 12  # bit codes: error weights counted exactly (beyond: parity-matched tail)

KIND_ID = {"none": 0, "bit": 1, "symbol": 2, "two_level": 3}


@dataclass(frozen=True)
class EccOutcome:
    """Per-codeword outcome probabilities and per-data-bit residual rates."""

    ok: float
    corrected: float
    due: float
    sdc: float
    silent_bits_per_data_bit: float  # expected erroneous data bits left silently, per data bit
    due_fraction: float  # probability a data bit lies in a detected-uncorrectable unit


@dataclass(frozen=True)
class EccScheme:
    name: str
    kind: str  # none | bit | symbol | two_level
    n_bits: int  # codeword (inner codeword for two_level) length in bits
    k_bits: int  # data bits per (inner) codeword
    symbol_bits: int = 1
    t: int = 0  # correctable symbols
    detect: int = 0  # every pattern of <= detect symbol errors is detected
    reports_due: bool = True  # False for on-die codes invisible to the host
    outer_m: int = 1  # two_level: data chunks per outer group
    outer_r: int = 0  # two_level: parity chunks per outer group
    hidden: bool = False  # check bits live in extra on-die cells (no visible capacity cost)
    bandwidth_overhead: float = 0.0  # extra transfer time per data byte (inline ECC)
    decode_cycles: int = 0
    decode_clock_hz: float = 1.0e9
    energy_pj_per_byte: float = 0.0

    # ------------------------------------------------------------ structure
    @property
    def storage_overhead(self) -> float:
        """Extra stored bits per data bit (check bits / data bits)."""
        return self.n_bits * (self.outer_m + self.outer_r) / (self.k_bits * self.outer_m) - 1.0

    @property
    def visible_overhead(self) -> float:
        return 0.0 if self.hidden else self.storage_overhead

    @property
    def decode_latency_s(self) -> float:
        return self.decode_cycles / self.decode_clock_hz

    @property
    def n_symbols(self) -> int:
        return self.n_bits // self.symbol_bits

    @property
    def group_data_bits(self) -> int:
        return self.k_bits * self.outer_m

    def miscorrect_fraction(self) -> float:
        """Symbol codes: probability a pattern beyond ``detect`` lands in another decoding sphere."""
        if self.kind not in ("symbol", "two_level"):
            return 0.0
        return _sphere_fraction(self.n_symbols, self.k_bits // self.symbol_bits, 2**self.symbol_bits, self.t)

    # ------------------------------------------------------------ closed form
    def outcome(self, p: float) -> EccOutcome:
        """Closed-form outcome probabilities at raw per-bit error probability ``p``."""
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bit error probability must be in [0, 1], got {p}")
        if self.kind == "none":
            ok = (1.0 - p) ** self.n_bits
            return EccOutcome(ok, 0.0, 0.0, 1.0 - ok, p, 0.0)
        if self.kind == "bit":
            return _bit_outcome(self, p)
        if self.kind == "symbol":
            c0, cor, det, sil, sil_bits = _symbol_chunk(self, p)
            due = det if self.reports_due else 0.0
            sdc = sil + (0.0 if self.reports_due else det)
            if not self.reports_due:
                sil_bits += _detected_symbol_bits(self, p)
            # silent erroneous bits per codeword, a fraction k/n of them in data bits
            return EccOutcome(c0, cor, due, sdc, sil_bits / self.n_bits, due)
        return _two_level_outcome(self, p)


@lru_cache(maxsize=None)
def _sphere_fraction(n: int, k: int, q: int, t: int) -> float:
    """sum_{i<=t} C(n,i)(q-1)^i / q^(n-k), in exact integers (long binary codes overflow floats)."""
    vol = sum(comb(n, i) * (q - 1) ** i for i in range(t + 1))
    return min(1.0, vol / q ** (n - k))


def _binom_pmf(n: int, p: float) -> np.ndarray:
    from scipy.stats import binom  # imported on first use: scipy.stats costs seconds at every CLI start

    return binom.pmf(np.arange(n + 1), n, p)


# ---------------------------------------------------------------- bit codes


@lru_cache(maxsize=None)
def hamming_columns(name: str) -> np.ndarray:
    """Parity-check columns (8-bit syndromes), data bits first, then the 8 check bits."""
    r = 4 if name == "secded_hsiao_8_4" else 8
    unit = [1 << i for i in range(r)]
    by_weight = {w: [sum(1 << i for i in c) for c in combinations(range(r), w)] for w in range(2, r + 1)}
    if name == "secded_hsiao_8_4":
        # extended Hamming (8,4): the 4 weight-3 columns of 4 check bits
        data = by_weight[3]
    elif name == "secded_hsiao_72_64":
        # Hsiao (1970): all columns of odd weight; 56 weight-3 + 8 weight-5 data columns
        data = by_weight[3] + by_weight[5][:8]
    elif name == "sec_136_128":
        # a single-error-correcting code: 128 distinct data columns of weight >= 2
        data = by_weight[2] + by_weight[3] + by_weight[4][:44]
    else:
        raise ValueError(f"unknown bit code {name!r}")
    cols = np.array(data + unit, dtype=np.uint32)
    assert len(set(cols.tolist())) == cols.size
    return cols


def syndrome_lut(cols: np.ndarray) -> np.ndarray:
    lut = np.full(256, -1, dtype=np.int32)
    lut[cols] = np.arange(cols.size, dtype=np.int32)
    return lut


@lru_cache(maxsize=None)
def _weight_syndrome_counts(name: str) -> np.ndarray:
    """counts[w, s] = number of weight-w error patterns with syndrome s (w <= EXACT_WEIGHTS)."""
    cols = hamming_columns(name)
    cnt = np.zeros((EXACT_WEIGHTS + 1, 256))
    cnt[0, 0] = 1.0
    idx = np.arange(256)
    for c in cols:
        for w in range(EXACT_WEIGHTS, 0, -1):
            cnt[w, idx ^ int(c)] += cnt[w - 1, idx]
    return cnt


@lru_cache(maxsize=None)
def _weight_fractions(name: str, reports_due: bool) -> np.ndarray:
    """frac[w] = (corrected, due, sdc, silent bits given sdc) for weight-w errors."""
    cols = hamming_columns(name)
    lut = syndrome_lut(cols)
    cnt = _weight_syndrome_counts(name)
    out = np.zeros((EXACT_WEIGHTS + 1, 4))
    for w in range(1, min(EXACT_WEIGHTS, cols.size) + 1):
        tot = cnt[w].sum()
        zero = cnt[w, 0] / tot
        hit = cnt[w, 1:][lut[1:] >= 0].sum() / tot
        miss = 1.0 - zero - hit
        if w == 1:
            out[w] = (hit, 0.0, 0.0, 0.0)
            continue
        # w >= 2 with a column syndrome: a miscorrection, about w + 1 bits wrong afterwards
        due = miss if reports_due else 0.0
        sdc = zero + hit + (0.0 if reports_due else miss)
        bits = (zero * w + hit * (w + 1) + (0.0 if reports_due else miss * w)) / sdc if sdc > 0 else 0.0
        out[w] = (0.0, due, sdc, bits)
    return out


def _bit_outcome(s: EccScheme, p: float) -> EccOutcome:
    n = s.n_bits
    pmf = _binom_pmf(n, p)
    frac = _weight_fractions(_bit_code_name(s), s.reports_due)
    cor = due = sdc = sbits = 0.0
    for w in range(1, n + 1):
        if pmf[w] == 0.0:
            continue
        if w <= EXACT_WEIGHTS:
            f = frac[w]
            bits = f[3]
        else:  # syndromes of heavy patterns: same parity class as the largest exact weight
            f = frac[EXACT_WEIGHTS - ((EXACT_WEIGHTS - w) % 2)]
            bits = w + 0.5
        cor += pmf[w] * f[0]
        due += pmf[w] * f[1]
        sdc += pmf[w] * f[2]
        sbits += pmf[w] * f[2] * bits
    return EccOutcome(pmf[0], cor, due, sdc, sbits / n, due)


def _bit_code_name(s: EccScheme) -> str:
    return {72: "secded_hsiao_72_64", 136: "sec_136_128", 8: "secded_hsiao_8_4"}[s.n_bits]


# ---------------------------------------------------------------- symbol codes


def _symbol_pmf(s: EccScheme, p: float) -> tuple[np.ndarray, float]:
    q = 1.0 - (1.0 - p) ** s.symbol_bits  # symbol error probability
    return _binom_pmf(s.n_symbols, q), q


def _symbol_chunk(s: EccScheme, p: float):
    """(no error, corrected, detected, silent, silent bits per codeword) of one (inner) codeword."""
    pmf, q = _symbol_pmf(s, p)
    fm = s.miscorrect_fraction()
    c0 = pmf[0]
    cor = pmf[1 : s.t + 1].sum()
    det = pmf[s.t + 1 : s.detect + 1].sum() + (1.0 - fm) * pmf[s.detect + 1 :].sum()
    sil = fm * pmf[s.detect + 1 :].sum()
    bits_per_sym = s.symbol_bits * p / q if q > 0 else 0.0
    j = np.arange(pmf.size)
    sil_bits = fm * float((pmf[s.detect + 1 :] * j[s.detect + 1 :]).sum()) * bits_per_sym
    return c0, cor, det, sil, sil_bits


def _detected_symbol_bits(s: EccScheme, p: float) -> float:
    """Expected erroneous bits per codeword in patterns the code detects but does not correct (they turn
    silent when the code cannot report a DUE, as on-die codes)."""
    pmf, q = _symbol_pmf(s, p)
    fm = s.miscorrect_fraction()
    j = np.arange(pmf.size)
    bits_per_sym = s.symbol_bits * p / q if q > 0 else 0.0
    w = pmf * j
    return float(w[s.t + 1 : s.detect + 1].sum() + (1.0 - fm) * w[s.detect + 1 :].sum()) * bits_per_sym


def _two_level_outcome(s: EccScheme, p: float) -> EccOutcome:
    c0, cor, era, sil, sil_bits = _symbol_chunk(s, p)
    g = s.outer_m + s.outer_r
    rest = c0 + cor
    ok = c0**g
    sdc = 1.0 - (1.0 - sil) ** g
    pe = _binom_pmf(g, era / (era + rest)) if era + rest > 0 else np.zeros(g + 1)
    no_sil = (era + rest) ** g
    due = no_sil * pe[s.outer_r + 1 :].sum()
    e = np.arange(g + 1)
    due_chunks = no_sil * float((pe * e)[s.outer_r + 1 :].sum()) * s.outer_m / g
    corrected = max(0.0, 1.0 - ok - sdc - due)
    # silent data bits per data bit: silent chunks keep their errors (a fraction k/n in data)
    silent = sil_bits * (s.k_bits / s.n_bits) / s.k_bits
    return EccOutcome(ok, corrected, due, sdc, silent, due_chunks / s.outer_m)


# ---------------------------------------------------------------- the schemes

SCHEMES: dict[str, EccScheme] = {
    # no protection
    "none": EccScheme("none", "none", 64, 64),
    # SECDED (72,64): 12.5 % storage, ~1 cycle decode, negligible energy (cxl_reliability.md §3.2 [M]);
    # check bits on the ECC pins / sideband chips, so no transfer-time overhead.
    "secded": EccScheme("secded", "bit", 72, 64, t=1, detect=2, decode_cycles=1),
    # Extended Hamming (8,4) SECDED per 4-bit group: the short-codeword protection of quantized KV in
    # "Stabilizing Quantized KV Caches..." (Hamming/Golay over F2, §3.2 [V]); 100 % storage, inline
    # in this model (transfer overhead = storage overhead), 1 cycle decode [M].
    "secded_8_4": EccScheme("secded_8_4", "bit", 8, 4, t=1, detect=2, bandwidth_overhead=1.0, decode_cycles=1),
    # DDR5/LPDDR5 on-die SEC (136,128): 6.25 % hidden cells, invisible to the host, can turn
    # 2-bit errors into 3-bit errors (§3.2, BEER); decode inside the die (latency [M]: 2 cycles).
    "ondie_sec": EccScheme(
        "ondie_sec", "bit", 136, 128, t=1, detect=1, reports_due=False, hidden=True, decode_cycles=2
    ),
    # Chipkill / SSC-DSD over x4 symbols, (144,128) across two channels in lockstep (§3.2): corrects a
    # single device, detects a double. Lockstep doubles access granularity/power ([M]; modelled as +1 pJ/B [M]).
    "chipkill": EccScheme(
        "chipkill", "symbol", 144, 128, symbol_bits=4, t=1, detect=2, decode_cycles=2, energy_pj_per_byte=1.0
    ),
    # HBM3 mandatory on-die symbol ECC with error reporting (JEDEC, §2/§3.2 [V]); code structure not in
    # the reference: modelled as RS(36,32) over 8-bit symbols, SSC + triple-symbol detect [M].
    "hbm3_ondie": EccScheme(
        "hbm3_ondie", "symbol", 288, 256, symbol_bits=8, t=1, detect=3, hidden=True, decode_cycles=2
    ),
    # REACH two-level RS (arXiv 2512.18152, §3.2 [V]): inner RS per 32 B chunk corrects or flags an
    # erasure (here RS(36,32), 8-bit symbols, t = 2 [M]), outer RS over 1 KB repairs erasures only
    # (32 chunks + 2 parity chunks [M]); chosen so that tokens/s stays flat to raw BER 1e-3 as REACH reports.
    # 79 % of on-die-ECC throughput at BER 0 [V] -> 1/0.79 - 1 = 0.266 transfer overhead [D];
    # 17.5 W at 3.56 TB/s = 4.9 pJ/B [V]; decode latency [M]: 20 cycles.
    "rs2": EccScheme(
        "rs2",
        "two_level",
        288,
        256,
        symbol_bits=8,
        t=2,
        detect=2,
        outer_m=32,
        outer_r=2,
        bandwidth_overhead=1.0 / 0.79 - 1.0,
        decode_cycles=20,
        energy_pj_per_byte=4.9,
    ),
}


# NAND page ECC (hwmodels/flash.py), binary codes as ``symbol`` codes with 1-bit symbols: bounded-distance
# decoding of t bit errors per codeword, detection beyond (miscorrection: the sphere fraction).
# BCH over 1 KB: GF(2^14), t = 40 -> 560 parity bits (6.8 %), the strength class of MLC/TLC controllers [M];
# hard-decision decode 2 us per codeword [M], 1.5 pJ/B [M].
SCHEMES["bch_nand"] = EccScheme(
    "bch_nand",
    "symbol",
    8192 + 14 * 40,
    8192,
    symbol_bits=1,
    t=40,
    detect=40,
    decode_cycles=2000,
    energy_pj_per_byte=1.5,
)
# LDPC over 4 KB + 512 B parity (rate 0.89) [M]: soft-decision LDPC of 3D NAND corrects raw BER up to
# ~5e-3..1e-2 [M]; modelled as a bounded-distance code correcting t = 300 bits per codeword (0.8 %, its
# hard-equivalent strength [M]); the extra soft sensing reads are not modelled; decode 4 us [M], 5 pJ/B [M].
SCHEMES["ldpc_nand"] = EccScheme(
    "ldpc_nand", "symbol", 36864, 32768, symbol_bits=1, t=300, detect=300, decode_cycles=4000, energy_pj_per_byte=5.0
)


def get_scheme(name: str) -> EccScheme:
    if name not in SCHEMES:
        raise ValueError(f"unknown ECC scheme {name!r} (known: {', '.join(SCHEMES)})")
    return SCHEMES[name]


def inline(scheme: EccScheme) -> EccScheme:
    """The same code stored inline (LPDDR/CXL carve-out, §3.2): check bits cost capacity and transfer time."""
    return replace(scheme, name=scheme.name + "_inline", hidden=False, bandwidth_overhead=scheme.storage_overhead)
