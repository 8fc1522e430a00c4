"""Transparent in-device compression (CXL-NDP, arXiv 2509.03377; cxl_reliability.md §1.1).

Mechanism, measured rather than assumed:

* layout: a tensor is stored in blocks of ``BLOCK_VALUES`` 16-bit values (4 KB, one DRAM-page-sized unit of
  random access [M]); each block is bit-plane transposed (plane ``b`` = bit ``b`` of every value), so the
  few highly redundant exponent bits of bf16/fp16 values line up in their own planes;
* coder: each plane of each block is deflated on its own (``zlib`` raw deflate, level 6: an LZ77 + Huffman
  coder in the class of a hardware LZ engine [M]) and stored raw when that does not shrink it, plus
  ``PLANE_HEADER_BYTES`` per plane (its length / raw flag [M]); a block stores its planes as they are or
  XORed with the next plane up (BPC's XOR step), whichever is smaller;
* data: weights ~ Gaussian (std 0.02, trained-LLM weight scale [M]); KV = the project's synthetic K and V
  (hwmodels/reliability/accuracy.py ``synthetic_qkv``: key channel outliers, attention sinks) rounded to
  the dtype.

``measured_ratio(kind, dtype)`` = stored bytes / raw bytes (<= 1 + header), computed once per process and
kept in the sub-result cache. The engine (``ENGINES``) streams every byte it (de)compresses at its rate;
a device with a ``compression`` section (hwmodels/pim.py, mapper/cxl_pnm.py) scales the bytes it stores
and streams from DRAM by the ratio and adds the engine's time and energy.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Literal, Union

import numpy as np
from pydantic import Field, field_validator

from attnsim.core.config import ConfigError, Plausible, Schema

BLOCK_VALUES = 2048  # 4 KB of 16-bit values per compressed block [M]
PLANE_HEADER_BYTES = 1  # per plane per block: compressed length / raw flag [M]
SAMPLE_VALUES = (
    1 << 17
)  # values measured per tensor kind (256 KB of 16-bit values, 64 blocks; ratio within 0.1 % of 4x more)
ZLIB_LEVEL = 6

# engine presets: throughput (bytes/s of uncompressed data), energy (pJ per uncompressed byte), area
ENGINES = {
    # CXL-NDP: "compression engine for 2 TB/s takes 5.7 mm^2 in 7 nm" [V] (cxl_reliability.md §1.1). Energy
    # not published: 5.7 mm^2 x 0.5 W/mm^2 (busy 7 nm datapath + SRAM, ASSUMPTION [M]) = 2.85 W at 2 TB/s
    # -> 1.4 pJ/B [M]
    "cxl_ndp": {"bytes_per_s": 2.0e12, "pj_per_byte": 1.4, "area_mm2": 5.7},
}
KINDS = ("weights", "kv")
DTYPES = ("bf16", "fp16")


RATIO_RANGE = Plausible(
    0.01,
    64,
    "stored / original bytes: int2 over fp16 is 0.125, sparse + quantised weights "
    "~0.05 (Deep Compression, Han ICLR 2016: 35-49x over fp32); above 1 is expansion (ECC, metadata)",
)


class CompressionSpec(Schema):
    """``compression:`` section of a CXL-PNM device (``kind: pim``, ``isa: cxl_pnm``)."""

    plausible = {"ratio": RATIO_RANGE, "kv_ratio": RATIO_RANGE}

    engine: Literal[tuple(ENGINES)] = "cxl_ndp"
    kv: bool = Field(True, description="compress the KV cache (stored and streamed)")
    weights: bool = Field(True, description="compress the weights (stored and streamed)")
    ratio: Union[Literal["measured"], float] = Field(
        "measured", description="stored / raw bytes: measured (bit-plane + deflate on synthetic data) or a number"
    )
    kv_ratio: Union[None, Literal["measured"], float] = Field(
        None,
        description="stored / raw bytes of the KV cache where it differs from the weights' (a paper measured on "
        "real tensors: CXL-NDP 0.531 KV vs 0.748 weights); null: ratio",
    )
    overlap: bool = Field(
        True,
        description="the engine streams between DRAM and the accelerator (time = max of "
        "the two); false: its time adds to the row's",
    )
    link: bool = Field(
        False, description="KV written over the CXL link travels compressed (needs an engine at the host end too [M])"
    )

    @field_validator("ratio", "kv_ratio")
    @classmethod
    def _ratio(cls, v):
        if v is not None and v != "measured" and not 0.0 < float(v) <= 1.0:
            raise ValueError("expected 'measured' or a number in (0, 1]")
        return v

    def ratio_for(self, kind: str, dtype: str = "bf16") -> float:
        """Stored / raw bytes of a tensor of ``kind`` (weights | kv); 1 when that kind is not compressed."""
        if not (self.kv if kind == "kv" else self.weights):
            return 1.0
        own = kind == "kv" and self.kv_ratio is not None
        ratio = self.kv_ratio if own else self.ratio
        if ratio != "measured":
            return float(ratio)
        if dtype not in DTYPES:
            raise ConfigError(
                f"expected a number for {kind} in {dtype} (the coder is measured on 16-bit "
                f"{' / '.join(DTYPES)} values), got 'measured'",
                key="compression.kv_ratio" if own else "compression.ratio",
            )
        return measured_ratio(kind, dtype)

    @property
    def bytes_per_s(self) -> float:
        return ENGINES[self.engine]["bytes_per_s"]

    @property
    def pj_per_byte(self) -> float:
        return ENGINES[self.engine]["pj_per_byte"]


def to_bits16(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values -> their 16-bit patterns (bf16: round to nearest even of the float32 top half)."""
    if dtype == "fp16":
        return np.asarray(x, np.float16).view(np.uint16)
    if dtype != "bf16":
        raise ConfigError(f"expected one of {', '.join(DTYPES)}, got {dtype!r}", key="dtype")
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bit_planes(u16: np.ndarray, block: int = BLOCK_VALUES) -> np.ndarray:
    """(blocks, 16, block / 8) uint8: plane b of block i = bit b of its values, packed (block divides len)."""
    b = np.asarray(u16, np.uint16).reshape(-1, block)
    bits = ((b[:, :, None] >> np.arange(16, dtype=np.uint16)) & 1).astype(np.uint8)
    return np.packbits(bits.transpose(0, 2, 1), axis=2)


def unbit_planes(planes: np.ndarray) -> np.ndarray:
    """Inverse of :func:`bit_planes` (flat uint16)."""
    bits = np.unpackbits(planes, axis=2).transpose(0, 2, 1).astype(np.uint16)
    return (bits << np.arange(16, dtype=np.uint16)).sum(axis=2, dtype=np.uint16).reshape(-1)


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, -15)  # raw deflate: no zlib header / checksum
    return c.compress(data) + c.flush()


def xor_planes(planes: np.ndarray) -> np.ndarray:
    """Plane b XOR plane b + 1 (b < 15; the top plane kept): the bit-plane XOR step of BPC (Kim et al., ISCA'16
    "Bit-Plane Compression"). It turns a carry across the exponent (bf16 127 = 0b01111111 -> 128 = 0b10000000,
    values around 1.0: all exponent planes flip) into constant planes. Its own inverse from the top down."""
    out = planes.copy()
    out[..., :15, :] = planes[..., :15, :] ^ planes[..., 1:16, :]
    return out


def _plane_bytes(blk: np.ndarray) -> int:
    return sum(min(len(_deflate(p.tobytes())), p.nbytes) + PLANE_HEADER_BYTES for p in blk)


def compressed_bytes(u16: np.ndarray, block: int = BLOCK_VALUES, bitplane: bool = True) -> int:
    """Stored bytes of ``u16`` (len a multiple of ``block``): per block, each bit plane deflated or kept raw,
    whichever is smaller, + its header; the block's planes as they are or XORed (``xor_planes``), whichever
    stores smaller (the choice rides in the plane headers). Without ``bitplane``: each block deflated as is."""
    if not bitplane:
        blocks = np.asarray(u16, np.uint16).reshape(-1, block)
        return sum(min(len(_deflate(b.tobytes())), b.nbytes) + PLANE_HEADER_BYTES for b in blocks)
    planes = bit_planes(u16, block)
    return sum(min(_plane_bytes(blk), _plane_bytes(xblk)) for blk, xblk in zip(planes, xor_planes(planes)))


def sample(kind: str, dtype: str, n: int = SAMPLE_VALUES, seed: int = 0) -> np.ndarray:
    """``n`` 16-bit patterns of synthetic ``kind`` data (see module doc)."""
    rng = np.random.default_rng(seed)
    if kind == "weights":
        x = rng.standard_normal(n) * 0.02
    elif kind == "kv":
        from attnsim.hwmodels.reliability.accuracy import synthetic_qkv

        heads, d = 8, 128
        tokens = -(-n // (2 * heads * d))
        qkv = synthetic_qkv(n_heads=heads, n_tokens=tokens, head_dim=d, seed=seed)
        # stored as written: per token all heads' K, then V (a token-major paged layout)
        x = np.concatenate([qkv["k"].transpose(1, 0, 2).reshape(-1), qkv["v"].transpose(1, 0, 2).reshape(-1)])[:n]
    else:
        raise ConfigError(f"expected one of {', '.join(KINDS)}, got {kind!r}", key="kind")
    return to_bits16(x, dtype)


@lru_cache(maxsize=None)
def measured_ratio(kind: str, dtype: str = "bf16", bitplane: bool = True) -> float:
    """Stored / raw bytes of synthetic ``kind`` data in ``dtype`` (cached: process memo + sub-result cache)."""
    from attnsim.core.cache import cached

    def run() -> float:
        u = sample(kind, dtype)
        return float(compressed_bytes(u, bitplane=bitplane)) / float(u.nbytes)

    return float(
        cached(
            (
                "compression.measured_ratio",
                kind,
                dtype,
                bitplane,
                BLOCK_VALUES,
                SAMPLE_VALUES,
                ZLIB_LEVEL,
                PLANE_HEADER_BYTES,
            ),
            run,
        )
    )


def engine_time_s(spec: CompressionSpec, raw_bytes: float) -> float:
    """Time of the engine (de)compressing ``raw_bytes`` of uncompressed data."""
    return float(raw_bytes) / spec.bytes_per_s


def engine_energy_j(spec: CompressionSpec, raw_bytes: float) -> float:
    return float(raw_bytes) * spec.pj_per_byte * 1e-12
