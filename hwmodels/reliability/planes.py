"""Bit layout vocabulary of stored KV tensors: the fields, the formats and their widths, the planes of an
:class:`Encoded` tensor and fp16 words (module doc of formats.py). Shared by the float formats (formats.py) and
the integer quantizer (quant.py), so quant.py need not import formats.py, which dispatches to it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FIELDS = ("sign", "exp_msb", "exp_other", "mantissa", "code_msb", "code_low", "scale")
FIELD_ID = {name: i for i, name in enumerate(FIELDS)}
# Low-significance fields: candidates for relaxed refresh (SHIELD / Kelle 2DRP, cxl_reliability.md §4.1).
LOW_FIELDS = ("mantissa", "code_low")
# field groups named in configs / the planner
FIELD_GROUPS = {
    "all": FIELDS,
    "low": LOW_FIELDS,
    "high": tuple(f for f in FIELDS if f not in LOW_FIELDS),
    "sign_exp": ("sign", "exp_msb", "exp_other"),
    "scale": ("scale",),
}

# name -> (total bits, exponent bits, mantissa bits)
FLOAT_FORMATS = {"bf16": (16, 8, 7), "fp16": (16, 5, 10), "fp8_e4m3": (8, 4, 3), "fp8_e5m2": (8, 5, 2)}
INT_FORMATS = {"int8": 8, "int4": 4, "int2": 2}
FORMATS = tuple(FLOAT_FORMATS) + tuple(INT_FORMATS)
FORMAT_BITS = {**{k: v[0] for k, v in FLOAT_FORMATS.items()}, **INT_FORMATS}


def float_field_of_bit(fmt: str) -> np.ndarray:
    """Field id of each bit (index 0 = LSB) of a float format."""
    bits, e, m = FLOAT_FORMATS[fmt]
    f = np.empty(bits, dtype=np.int8)
    f[:m] = FIELD_ID["mantissa"]
    f[m : m + e - 1] = FIELD_ID["exp_other"]
    f[m + e - 1] = FIELD_ID["exp_msb"]
    f[bits - 1] = FIELD_ID["sign"]
    return f


def int_field_of_bit(bits: int) -> np.ndarray:
    f = np.full(bits, FIELD_ID["code_low"], dtype=np.int8)
    f[bits - 1] = FIELD_ID["code_msb"]
    return f


def scale_field_of_bit() -> np.ndarray:
    return np.full(16, FIELD_ID["scale"], dtype=np.int8)


@dataclass
class Plane:
    """A flat array of stored elements and the field of each of their bits."""

    words: np.ndarray  # uint16 or uint8, 1-D
    elem_bits: int
    field_of_bit: np.ndarray  # int8, (elem_bits,)

    def copy(self) -> "Plane":
        return Plane(self.words.copy(), self.elem_bits, self.field_of_bit)

    @property
    def n_bits(self) -> int:
        return int(self.words.size) * self.elem_bits


@dataclass
class Encoded:
    """A (tokens, channels) tensor in storage form. ``meta`` holds format parameters."""

    fmt: str
    shape: tuple
    planes: dict[str, Plane]
    meta: dict = field(default_factory=dict)

    def copy(self) -> "Encoded":
        return Encoded(self.fmt, self.shape, {k: p.copy() for k, p in self.planes.items()}, dict(self.meta))

    @property
    def n_bits(self) -> int:
        return sum(p.n_bits for p in self.planes.values())


# ---------------------------------------------------------------- float codecs


def fp16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16).ravel()


def fp16_value(w: np.ndarray) -> np.ndarray:
    return w.view(np.float16).astype(np.float32)
