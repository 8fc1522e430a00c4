"""Bit-exact injection: zero rates, seeding, geometric sampling, retention direction, fields, faults."""

import numpy as np
import pytest
from scipy import stats

from attnsim.hwmodels.reliability import formats as F
from attnsim.hwmodels.reliability.inject import (
    StreamSpec,
    fault_positions,
    inject,
    inject_plane_stream,
    sample_positions,
)


def _x(seed=0, T=64, d=32):
    return np.random.default_rng(seed).standard_normal((T, d)).astype(np.float32)


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_zero_rates_change_nothing(fmt):
    enc = F.encode(_x(), fmt, axis="channel")
    for e in ("none", "secded", "chipkill", "rs2"):
        r = inject(enc, [StreamSpec(ecc=e)], seed=3)
        for name, plane in enc.planes.items():
            assert np.array_equal(plane.words, r.encoded.planes[name].words)
        assert sum(r.raw_counts.values()) == 0
        assert np.array_equal(F.decode(enc), F.decode(r.encoded), equal_nan=True)


def test_same_seed_same_flips():
    enc = F.encode(_x(), "bf16")
    a = inject(enc, [StreamSpec(p_flip=1e-3, p_retention=1e-3)], seed=11)
    b = inject(enc, [StreamSpec(p_flip=1e-3, p_retention=1e-3)], seed=11)
    c = inject(enc, [StreamSpec(p_flip=1e-3, p_retention=1e-3)], seed=12)
    assert np.array_equal(a.encoded.planes["data"].words, b.encoded.planes["data"].words)
    assert not np.array_equal(a.encoded.planes["data"].words, c.encoded.planes["data"].words)


def test_geometric_sampling_distribution():
    n, p = 20000, 2e-3
    counts = np.array([sample_positions(n, p, s).size for s in range(400)])
    assert abs(counts.mean() - n * p) < 4 * np.sqrt(n * p * (1 - p) / counts.size)
    assert 0.75 < counts.var() / (n * p * (1 - p)) < 1.3
    pos = np.concatenate([sample_positions(n, p, s) for s in range(200)])
    assert np.all(pos >= 0) and np.all(pos < n)
    hist = np.bincount(pos * 10 // n, minlength=10)
    assert stats.chisquare(hist).pvalue > 1e-4
    for s in range(20):  # strictly increasing, no duplicates
        q = sample_positions(n, 0.3, s)
        assert np.all(np.diff(q) > 0)


def test_retention_flips_are_one_directional():
    ones = np.full(4096, 0xFFFF, dtype=np.uint16)
    fob = F.float_field_of_bit("fp16")
    w = ones.copy()
    inject_plane_stream(w, 16, fob, StreamSpec(p_retention=0.05, true_cell_fraction=1.0), seed=1)
    assert np.all((w & ~ones) == 0) and np.any(w != ones)  # only 1 -> 0
    z = np.zeros(4096, dtype=np.uint16)
    inject_plane_stream(z, 16, fob, StreamSpec(p_retention=0.05, true_cell_fraction=1.0), seed=1)
    assert np.all(z == 0)  # true cells holding 0 never flip
    z = np.zeros(4096, dtype=np.uint16)
    inject_plane_stream(z, 16, fob, StreamSpec(p_retention=0.05, true_cell_fraction=0.0), seed=1)
    assert np.any(z != 0)  # anti cells: 0 -> 1


def test_field_selective_streams_and_counters():
    enc = F.encode(_x(), "bf16")
    r = inject(enc, [StreamSpec(fields=("mantissa",), p_flip=0.05)], seed=5)
    diff = enc.planes["data"].words ^ r.encoded.planes["data"].words
    assert np.all(diff & ~np.uint16(0x7F) == 0) and diff.any()
    assert r.silent_counts["mantissa"] == int(sum(bin(int(v)).count("1") for v in diff))
    assert sum(v for k, v in r.silent_counts.items() if k != "mantissa") == 0


def test_chip_fault_chipkill_vs_secded():
    rng = np.random.default_rng(0)
    fob = F.int_field_of_bit(8)
    data_bits = 128 * 512
    pos = fault_positions("chip", data_bits // 128 * 144, rng, bus_bits=144, device_width=4)
    w = np.zeros(data_bits // 8, dtype=np.uint8)
    raw, sil, due, st = inject_plane_stream(w, 8, fob, StreamSpec(("code_low", "code_msb"), "chipkill"), 0, pos)
    assert st[1] > 0 and st[3] == 0 and st[4] == 0 and np.all(w == 0)  # every codeword corrected
    pos = fault_positions("chip", data_bits // 64 * 72, np.random.default_rng(0), bus_bits=72, device_width=4)
    w = np.zeros(data_bits // 8, dtype=np.uint8)
    raw, sil, due, st = inject_plane_stream(w, 8, fob, StreamSpec(("code_low", "code_msb"), "secded"), 0, pos)
    assert st[3] + st[4] > 0  # x4 chip: SECDED fails some words
