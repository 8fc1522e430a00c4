"""KV storage formats as bit layouts: float (bf16, fp16, fp8 E4M3/E5M2) and integer codes.

A stored tensor is an :class:`Encoded`: one or more *planes*, each a flat array of
fixed-width elements (``uint16`` or ``uint8`` words, ``elem_bits`` meaningful bits)
plus a map bit position -> field. Integer codes are stored one per byte with only the
low ``elem_bits`` bits meaningful, which is bit-for-bit equivalent to a packed layout
(the plane's bit stream is element-major, LSB first). Fields, in the vocabulary of
shared/reference/cxl_reliability.md §4.1/§5(3): sign, exponent MSB, other exponent bits,
mantissa, integer code MSB / low code bits, and ``scale`` (per-group scale and zero-point
metadata, both fp16).

FP8 encodings follow the OCP FP8 spec used by vLLM/SGLang (cxl_reliability.md §4.2,
"FP8 KV"): E4M3 bias 7, no infinities, max 448; E5M2 bias 15, IEEE-like, max 57344.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from attnsim.hwmodels.reliability.planes import (  # noqa: F401 (formats.X keeps these names)
    FIELD_GROUPS,
    FIELD_ID,
    FIELDS,
    FLOAT_FORMATS,
    FORMAT_BITS,
    FORMATS,
    INT_FORMATS,
    LOW_FIELDS,
    Encoded,
    Plane,
    float_field_of_bit,
    fp16_bits,
    fp16_value,
    int_field_of_bit,
    scale_field_of_bit,
)


def bf16_encode(x: np.ndarray) -> np.ndarray:
    """float -> bf16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_decode(w: np.ndarray) -> np.ndarray:
    return (w.astype(np.uint32) << 16).view(np.float32)


@lru_cache(maxsize=None)
def fp8_table(fmt: str) -> np.ndarray:
    """Value of each of the 256 FP8 codes (NaN for NaN codes, +-inf for E5M2 infinities)."""
    _, e, m = FLOAT_FORMATS[fmt]
    bias = (1 << (e - 1)) - 1
    vals = np.empty(256, dtype=np.float64)
    for c in range(256):
        s = -1.0 if c >> 7 else 1.0
        ex = (c >> m) & ((1 << e) - 1)
        man = c & ((1 << m) - 1)
        if fmt == "fp8_e4m3" and ex == 15 and man == 7:
            v = np.nan
        elif fmt == "fp8_e5m2" and ex == 31:
            v = np.inf if man == 0 else np.nan
        elif ex == 0:
            v = man / (1 << m) * 2.0 ** (1 - bias)
        else:
            v = (1 + man / (1 << m)) * 2.0 ** (ex - bias)
        vals[c] = s * v
    return vals


@lru_cache(maxsize=None)
def _fp8_sorted(fmt: str):
    t = fp8_table(fmt)
    codes = np.array([c for c in range(256) if np.isfinite(t[c]) and not (c == 0x80)], dtype=np.int64)
    order = np.argsort(t[codes], kind="stable")
    return t[codes][order], codes[order]


def fp8_encode(x: np.ndarray, fmt: str) -> np.ndarray:
    """float -> nearest finite FP8 code (saturating; ties to the even code)."""
    vals, codes = _fp8_sorted(fmt)
    x = np.clip(np.asarray(x, dtype=np.float64), vals[0], vals[-1])
    hi = np.clip(np.searchsorted(vals, x), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = x - vals[lo], vals[hi] - x
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    return np.where(pick_hi, codes[hi], codes[lo]).astype(np.uint8)


def float_encode(x: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "bf16":
        return bf16_encode(x)
    if fmt == "fp16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)
    return fp8_encode(x, fmt)


def float_decode(w: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "bf16":
        return bf16_decode(w)
    if fmt == "fp16":
        return w.view(np.float16).astype(np.float32)
    return fp8_table(fmt)[w].astype(np.float32)


# ---------------------------------------------------------------- tensors


def encode(x: np.ndarray, fmt: str, *, axis: str = "token", group: int = 32) -> Encoded:
    """Store a (tokens, channels) tensor in ``fmt``.

    Integer formats use KIVI-style asymmetric quantization (see :mod:`.quant`): ``axis``
    ``"channel"`` = per-channel groups of ``group`` tokens (keys), ``"token"`` = per-token
    groups of ``group`` channels (values).
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected a (tokens, channels) array, got shape {x.shape}")
    if fmt in FLOAT_FORMATS:
        w = float_encode(x.ravel(), fmt)
        return Encoded(fmt, x.shape, {"data": Plane(w, FLOAT_FORMATS[fmt][0], float_field_of_bit(fmt))})
    if fmt in INT_FORMATS:
        from attnsim.hwmodels.reliability.quant import quantize

        return quantize(x, INT_FORMATS[fmt], axis=axis, group=group)
    raise ValueError(f"unknown KV format {fmt!r} (known: {', '.join(FORMATS)})")


def decode(enc: Encoded) -> np.ndarray:
    """Stored form -> float32 (tokens, channels)."""
    if enc.fmt in FLOAT_FORMATS:
        return float_decode(enc.planes["data"].words, enc.fmt).reshape(enc.shape)
    from attnsim.hwmodels.reliability.quant import dequantize

    return dequantize(enc)


def token_mask_from_elements(enc: Encoded, bad: dict[str, np.ndarray]) -> np.ndarray:
    """Tokens touched by bad (e.g. detected-uncorrectable) elements of any plane."""
    T, d = enc.shape
    mask = np.zeros(T, dtype=bool)
    for name, b in bad.items():
        idx = np.flatnonzero(b)
        if idx.size == 0:
            continue
        if name in ("data", "codes"):
            mask[idx // d] = True
        else:  # scale / zero planes: a bad group hits every token of the group
            g = enc.meta["group"]
            if enc.meta["axis"] == "token":
                mask[idx // enc.meta["n_groups"]] = True
            else:
                for tg in np.unique(idx // d):
                    mask[tg * g : (tg + 1) * g] = True
    return mask
