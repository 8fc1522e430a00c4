"""Accuracy proxy: published qualitative findings on synthetic q/K/V (cxl_reliability.md §5(6))."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.reliability import accuracy as A
from attnsim.hwmodels.reliability.errors import RawErrorModel
from attnsim.hwmodels.reliability.inject import StreamSpec


@pytest.fixture(scope="module")
def qkv():
    return A.synthetic_qkv(n_heads=4, n_tokens=256, head_dim=64, seed=0)


def test_synthetic_has_sinks_and_heavy_tail(qkv):
    _, a = A.attention(qkv["q"], qkv["k"], qkv["v"])
    assert np.allclose(a[:, 0], 0.3, atol=1e-3)  # sink mass
    top = np.sort(a[:, 1:], axis=1)[:, ::-1]
    assert np.all(top[:, :10].sum(axis=1) > 5 * 0.7 * 10 / 255)  # top 10 tokens: > 5x a uniform share


def test_attention_metrics_by_hand():
    q = np.array([[1.0, 0.0]])
    K = np.array([[[0.0, 0.0], [0.0, 0.0]]])
    V = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    o, a = A.attention(q, K, V)
    assert np.allclose(a, 0.5) and np.allclose(o, [[0.5, 0.5]])
    m = A.metrics(q, K, V, K, V, drop=np.array([[False, True]]))  # drop token 1 -> o' = V0
    assert m["rel_err"] == pytest.approx(np.linalg.norm([0.5, -0.5]) / np.linalg.norm([0.5, 0.5]))
    assert m["kl"] == np.inf


def test_k_exponent_msb_dominates_and_low_mantissa_is_free(qkv):
    spec = lambda f: [StreamSpec(fields=(f,), p_flip=2e-4)]  # noqa: E731
    err = {
        f: np.mean(
            [A.evaluate(qkv, "bf16", spec(f), (), seed=s, reference="stored")["rel_err_clipped"] for s in range(3)]
        )
        for f in ("exp_msb", "exp_other", "sign", "mantissa")
    }
    assert err["exp_msb"] > 0.2
    assert err["exp_msb"] > 20 * max(err["sign"], err["mantissa"])
    assert err["mantissa"] < 0.02 * err["exp_msb"]
    # the low mantissa bits (0-3 of bf16) are practically free: 100 such flips in K (1 in 650 elements)
    enc = A.store(qkv["k"], "bf16", "k")
    rng = np.random.default_rng(0)
    w = enc.copy()
    idx = rng.choice(w.planes["data"].words.size, 100, replace=False)
    w.planes["data"].words[idx] ^= (1 << rng.integers(0, 4, size=100)).astype(np.uint16)
    m = A.metrics(qkv["q"], A.unstore(enc, 4), qkv["v"], A.unstore(w, 4), qkv["v"])
    assert m["rel_err"] < 0.1 * A.quant_error("bf16")  # a tenth of bf16 rounding itself
    sens = A.field_sensitivity("bf16", "k")
    assert sens["exp_msb"] > 100 * sens["mantissa"] and sens["exp_msb"] > sens["exp_other"] > sens["mantissa"]


@pytest.mark.parametrize("fmt", ["int4", "int2"])
def test_quantized_kv_at_ber_1e2_protected_vs_unprotected(qkv, fmt):
    def run(ecc):
        s = [StreamSpec(ecc=ecc, p_flip=1e-2)]
        return np.mean([A.evaluate(qkv, fmt, s, s, seed=k, reference="stored")["rel_err_clipped"] for k in range(4)])

    bare, hamming = run("none"), run("secded_8_4")
    assert bare > 0.9  # every head's output is lost
    assert hamming < 0.2 * bare  # Hamming-protected KV keeps most heads intact


def test_field_fit_rates_for_seconds_are_negligible(qkv):
    p = RawErrorModel().p_bit(residency_s=10.0, interval_ms=64.0)
    assert 0 < p < 1e-12
    r = A.evaluate(qkv, "bf16", [StreamSpec(p_flip=p)], [StreamSpec(p_flip=p)], seed=1, reference="stored")
    assert r["rel_err"] < 1e-6


def test_zero_rates_equal_error_free_storage(qkv):
    clean = A.evaluate(qkv, "int4")
    zero = A.evaluate(qkv, "int4", [StreamSpec(ecc="secded")], [StreamSpec(ecc="secded")], seed=9)
    assert clean["rel_err"] == zero["rel_err"] and np.array_equal(clean["rel_err_per_head"], zero["rel_err_per_head"])


def test_kivi_quantization_error_ordering():
    assert A.quant_error("int8") < A.quant_error("int4") < A.quant_error("int2")
    assert A.quant_error("bf16") < A.quant_error("int8")


def test_load_qkv_roundtrip_and_errors(tmp_path, qkv):
    p = tmp_path / "kv.npz"
    np.savez(p, q=qkv["q"][None], k=qkv["k"][None], v=qkv["v"][None])  # extra layer dim
    got = A.load_qkv(p)
    assert np.array_equal(got["k"], qkv["k"]) and got["q"].shape == (4, 64)
    bad = tmp_path / "bad.npz"
    np.savez(bad, q=qkv["q"], k=qkv["k"])
    with pytest.raises(ConfigError, match="v"):
        A.load_qkv(bad)
    with pytest.raises(ConfigError):
        A.load_qkv(tmp_path / "missing.h5")
