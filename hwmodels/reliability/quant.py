"""KIVI-style asymmetric KV quantization (KIVI, ICML'24, arXiv 2402.02750; jy-yuan/KIVI).

Keys are quantized per channel (a group = ``group`` consecutive tokens of one channel),
values per token (a group = ``group`` consecutive channels of one token), as in KIVI
(cxl_reliability.md §4.2). Each group stores an fp16 scale and an fp16 zero-point
(the group minimum): ``code = round((x - zero) / scale)``, ``scale = (max - min) / (2^b - 1)``,
``x_hat = code * scale + zero``. Codes, scales and zero-points are separate planes so
bit errors can be injected into each (a scale flip corrupts a whole group, §4.1).
"""

from __future__ import annotations

import numpy as np

from attnsim.hwmodels.reliability.planes import (
    Encoded,
    Plane,
    fp16_bits,
    fp16_value,
    int_field_of_bit,
    scale_field_of_bit,
)


def _grouped(x: np.ndarray, axis: str, group: int) -> tuple[np.ndarray, int]:
    """View x as (n_rows, n_groups, group) with groups along ``axis`` (edge-padded)."""
    T, d = x.shape
    a = x if axis == "token" else x.T  # groups run along the last axis of a
    rows, length = a.shape
    g = min(group, length)
    ng = -(-length // g)
    pad = ng * g - length
    if pad:
        a = np.concatenate([a, np.repeat(a[:, -1:], pad, axis=1)], axis=1)
    return a.reshape(rows, ng, g), ng


def quantize(x: np.ndarray, bits: int, *, axis: str = "token", group: int = 32) -> Encoded:
    """Quantize a (tokens, channels) tensor to ``bits``-bit codes with per-group scale/zero."""
    if axis not in ("token", "channel"):
        raise ValueError(f"axis must be 'token' (per-token, values) or 'channel' (per-channel, keys), got {axis!r}")
    if bits < 1 or bits > 8 or group < 1:
        raise ValueError(f"need 1 <= bits <= 8 and group >= 1, got bits={bits}, group={group}")
    x = np.asarray(x, dtype=np.float32)
    T, d = x.shape
    a, ng = _grouped(x, axis, group)
    lo = a.min(axis=2)
    hi = a.max(axis=2)
    levels = (1 << bits) - 1
    scale = np.where(hi > lo, (hi - lo) / levels, 1.0).astype(np.float32)
    # store scale/zero in fp16 and quantize against the stored values
    scale_w, zero_w = fp16_bits(scale), fp16_bits(lo)
    s16 = fp16_value(scale_w).reshape(scale.shape)
    z16 = fp16_value(zero_w).reshape(lo.shape)
    s16 = np.where(s16 > 0, s16, 1.0)
    codes = np.clip(np.rint((a - z16[..., None]) / s16[..., None]), 0, levels).astype(np.uint8)
    rows = codes.shape[0]
    codes = codes.reshape(rows, -1)[:, : (d if axis == "token" else T)]
    if axis == "channel":
        codes = codes.T  # back to (T, d)
        scale_w = scale_w.reshape(d, ng).T.ravel()  # (ng, d) row-major
        zero_w = zero_w.reshape(d, ng).T.ravel()
    planes = {
        "codes": Plane(np.ascontiguousarray(codes).ravel(), bits, int_field_of_bit(bits)),
        "scale": Plane(scale_w.copy(), 16, scale_field_of_bit()),
        "zero": Plane(zero_w.copy(), 16, scale_field_of_bit()),
    }
    return Encoded(
        f"int{bits}",
        (T, d),
        planes,
        {"bits": bits, "axis": axis, "group": min(group, T if axis == "channel" else d), "n_groups": ng},
    )


def dequantize(enc: Encoded) -> np.ndarray:
    """Codes * scale + zero as float32 (tokens, channels)."""
    T, d = enc.shape
    m = enc.meta
    g, ng = m["group"], m["n_groups"]
    mask = (1 << m["bits"]) - 1
    codes = (enc.planes["codes"].words & mask).astype(np.float32).reshape(T, d)
    s = fp16_value(enc.planes["scale"].words)
    z = fp16_value(enc.planes["zero"].words)
    if m["axis"] == "token":
        s = np.repeat(s.reshape(T, ng), g, axis=1)[:, :d]
        z = np.repeat(z.reshape(T, ng), g, axis=1)[:, :d]
    else:
        s = np.repeat(s.reshape(ng, d), g, axis=0)[:T]
        z = np.repeat(z.reshape(ng, d), g, axis=0)[:T]
    with np.errstate(over="ignore", invalid="ignore"):
        return codes * s + z


def storage_bits_per_element(bits: int, group: int) -> float:
    """Average stored bits per element: code + (fp16 scale + fp16 zero) / group."""
    return bits + 32.0 / group
