"""KV-error -> perplexity calibration: the numpy LM's backprop, zero-error identity, and a re-run of the
saved calibration (configs/calibration/kv_error_ppl.yaml, bench/calibrate_perplexity.py)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from attnsim.hwmodels.reliability import perplexity as P

ROOT = Path(__file__).resolve().parent.parent


def test_manual_backprop_matches_finite_differences():
    cfg = P.LMConfig(d_model=8, n_heads=2, context=6)
    rng = np.random.default_rng(0)
    p = {k: v.astype(np.float64) + rng.standard_normal(v.shape) * 0.3 for k, v in P.init_params(5, cfg).items()}
    X, Y = rng.integers(0, 5, (3, 6)), rng.integers(0, 5, (3, 6))
    _, g = P.loss_and_grads(p, X, Y, 2)
    for k in p:
        for _ in range(3):
            i = tuple(rng.integers(0, s) for s in p[k].shape)
            old, h = p[k][i], 1e-6
            p[k][i] = old + h
            lp = P.loss_and_grads(p, X, Y, 2)[0]
            p[k][i] = old - h
            lm = P.loss_and_grads(p, X, Y, 2)[0]
            p[k][i] = old
            num = (lp - lm) / (2 * h)
            assert abs(num - g[k][i]) <= 1e-5 * (abs(num) + abs(g[k][i])) + 1e-9, k


def test_zero_errors_give_zero_change():
    cfg = P.LMConfig(d_model=16, n_heads=2, context=32)
    p = {k: v.astype(np.float64) for k, v in P.init_params(20, cfg).items()}
    rng = np.random.default_rng(1)
    X, Y = rng.integers(0, 20, (4, 32)), rng.integers(0, 20, (4, 32))
    lg, c = P.forward(p, X, 2)
    lg2, c2 = P.forward(p, X, 2, kv=(c["k"], c["v"]))  # the cache read back unchanged
    assert P.perplexity(lg2, Y) == P.perplexity(lg, Y) and P.rel_attention_error(c["O"], c2["O"]) == 0.0
    k1, v1 = P.corrupt_cache(c["k"], c["v"], "int8", 0.0, seed=0)
    k2, v2 = P.corrupt_cache(c["k"], c["v"], "int8", 0.0, seed=7)  # BER 0: the seed changes nothing
    assert np.array_equal(k1, k2) and np.array_equal(v1, v2)
    kb, vb = P.corrupt_cache(c["k"], c["v"], "int8", 1e-2, seed=0)
    assert not np.array_equal(kb, k1)  # and a BER > 0 does flip bits
    lg_nan = lg.copy()
    lg_nan[0, 0] = np.nan  # a lost position costs log(vocab)
    assert np.isfinite(P.perplexity(lg_nan, Y)) and P.perplexity(lg_nan, Y) != P.perplexity(lg, Y)


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppl") / "kv_error_ppl.yaml"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "calibrate_perplexity.py"), "--out", str(out)],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    return yaml.safe_load(out.read_text())


def test_calibration_rerun_agrees_with_saved_data(rerun):
    saved = P.load_calibration()
    assert saved["model"] == rerun["model"] and saved["text_source"] == rerun["text_source"]
    assert rerun["ppl_clean"] == pytest.approx(saved["ppl_clean"], rel=0.02)
    assert rerun["ppl_unigram"] == pytest.approx(saved["ppl_unigram"], rel=1e-9)
    new = {(p["format"], p["ber"]): p for p in rerun["mean_points"]}
    for p in saved["mean_points"]:
        q = new[(p["format"], p["ber"])]
        assert q["ppl_increase"] == pytest.approx(p["ppl_increase"], rel=0.25, abs=2e-3)
        assert q["rel_attention_error"] == pytest.approx(p["rel_attention_error"], rel=0.1, abs=1e-4)
    assert rerun["fit"]["s_bit"] == pytest.approx(saved["fit"]["s_bit"], rel=0.25)


def test_calibration_is_physical(rerun):
    # a real attention LM: held-out perplexity far below the unigram baseline (and above 1)
    assert 1 < rerun["ppl_clean"] < 0.5 * rerun["ppl_unigram"]
    by_fmt = {}
    for p in rerun["mean_points"]:
        by_fmt.setdefault(p["format"], []).append(p)
    assert set(by_fmt) == {"bf16", "fp8_e4m3", "int8", "int4"}
    for fmt, pts in by_fmt.items():
        pts.sort(key=lambda p: p["ber"])
        inc = [p["ppl_increase"] for p in pts]
        err = [p["rel_attention_error"] for p in pts]
        assert all(a < b for a, b in zip(inc, inc[1:])), (fmt, inc)  # perplexity rises with BER (seed mean)
        assert all(a < b for a, b in zip(err, err[1:])), (fmt, err)
        assert inc[-1] > 0.1  # BER 1e-3 without ECC hurts every format
    # quantization alone: fewer bits, larger proxy error (bf16 < fp8; int8 < int4)
    q = {f: pts[0]["rel_attention_error"] for f, pts in by_fmt.items()}
    assert q["bf16"] < q["fp8_e4m3"] and q["int8"] < q["int4"]
    f = rerun["fit"]
    assert f["s_bit"] > 10 * f["s_quant"] >= 0  # sparse bit errors cost far more NLL than diffuse error
    w_q, w_b = P.error_weights(0.01, f)
    assert w_b == pytest.approx(f["s_bit_upper"] / np.log1p(0.01))
    # every measured point inside the converted budget keeps its perplexity increase within 1 %
    for p in rerun["mean_points"]:
        if w_q * p["e_quant"] + w_b * p["e_bit"] <= 1:
            assert p["ppl_increase"] <= 0.01 * (1 + 1e-9)
