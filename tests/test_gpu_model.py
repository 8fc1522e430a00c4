"""GPU model: calibration against published kernel timings, hand-derived numbers, physical limits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import DeviceModel
from attnsim.hwmodels.gpu import GPUModel, GPUSpec, load_hardware
from attnsim.workloads.optrace import OpTrace

DATA = yaml.safe_load((Path(__file__).parent.parent / "configs" / "validation" / "gpu_calibration.yaml").read_text())
PRESET = {"a100": "a100_80gb_sxm", "h100": "h100_sxm"}
ALL_PRESETS = ("a100_80gb_sxm", "a100_hbm3", "h100_sxm", "h200_sxm")
_MODELS = {}


def gpu(name: str) -> GPUModel:
    if name not in _MODELS:
        _MODELS[name] = load_hardware(name)
    return _MODELS[name]


def trace(rows):
    return OpTrace.from_rows(
        rows,
        phase="decode",
        model="test",
        tp=1,
        query_tokens=np.ones(1, np.int64),
        context_lens=np.ones(1, np.int64),
        groups=[],
    )


def mm_row(m, k, n, op="mm", count=1, batch=1):
    """fp16 (m x k) @ (k x n): weights k*n*2 B, activations in + out."""
    return dict(
        op=op,
        cls="matmul",
        count=count,
        m=m,
        n=n,
        k=k,
        batch=batch,
        flops=2.0 * m * n * k * batch,
        weight_bytes=2.0 * k * n * batch,
        act_bytes=2.0 * m * (k + n) * batch,
    )


def cost_rows(model, rows):
    t = trace(rows)
    return model.cost(t, np.arange(len(t)))


# ------------------------------------------------------------------ calibration (vidur, gpu_calibration.md §4.1)


def _vidur_errors(gpu_key):
    """(keys, per-op relative errors, per-(model, tokens) errors of the sum of the 4 linears)."""
    keys, rows, meas = [], [], []
    for table in DATA["vidur"]["tables"]:
        for tokens, per_gpu in table["us"].items():
            for (op, (k, n)), us in zip(table["shapes"].items(), per_gpu[gpu_key]):
                keys.append((table["model"], int(tokens), op))
                rows.append(mm_row(int(tokens), k, n, op=op))
                meas.append(us * 1e-6)
    pred = cost_rows(gpu(PRESET[gpu_key]), rows).time_s
    meas = np.array(meas)
    err = pred / meas - 1
    sums = {}
    for (model, tokens, _), p, m in zip(keys, pred, meas):
        a = sums.setdefault((model, tokens), [0.0, 0.0])
        a[0] += p
        a[1] += m
    sum_err = {k: v[0] / v[1] - 1 for k, v in sums.items()}
    return keys, err, sum_err


@pytest.mark.parametrize("gpu_key", ["a100", "h100"])
def test_vidur_linear_ops_within_15_percent(gpu_key):
    """Issue bounds: every op within 15 %, every sum of the 4 linears within 10 %. The few rows no tiled model
    can fit (reasons in the data YAML) are asserted at the tightest bound reached instead."""
    outliers = {(m, t, op): b for g, m, t, op, b in DATA["known_outliers"] if g == gpu_key}
    keys, err, sum_err = _vidur_errors(gpu_key)
    for key, e in zip(keys, err):
        limit = outliers.get(key, 0.15)
        assert abs(e) <= limit, f"{gpu_key} {key}: error {e:+.1%} exceeds {limit:.0%}"
        if key in outliers:  # the outlier list is honest: each listed row really misses 15 %
            assert abs(e) > 0.15, f"{gpu_key} {key} is listed as an outlier but is within 15 % ({e:+.1%})"
    assert len(outliers) <= 7 and len(keys) == 60
    assert np.mean(np.abs(err)) < 0.09  # mean |error| over all 60 ops
    for key, e in sum_err.items():
        assert abs(e) <= 0.10, f"{gpu_key} {key}: sum of the 4 linears off by {e:+.1%}"


# ------------------------------------------------------------------ cross-checks (gpu_calibration.md §4.2)


def test_llmcompass_a100_matmul_loose():
    """LLMCompass' PyTorch (eager) A100 GEMMs (not used in the fit): the model must stay conservative (never
    > 10 % faster); within 25 % for K = N >= 4096 (large GEMMs at 86-94 % of peak, compute_eta 0.89 x the
    K-depth factor); K = N <= 1024 are outside the calibrated K range (vidur K >= 2048): 64 / 256 are
    PyTorch-overhead-bound (~30 us), 1024 is over-predicted by ~58 % (k_overhead) and only bounded at 60 %."""
    model = GPUModel(gpu("a100_80gb_sxm").spec.model_copy(update={"software_stack": "eager"}))
    rows = [r for r in DATA["llmcompass_a100_matmul"]["rows"] if r[1] >= 1024]
    pred = cost_rows(model, [mm_row(m, k, n) for m, k, n, _ in rows]).time_s
    meas = np.array([r[3] * 1e-3 for r in rows])
    err = pred / meas - 1
    big = np.array([r[1] >= 4096 for r in rows])
    assert np.all(err > -0.10), err
    assert np.all(err[big] < 0.25), err
    assert np.all(err < 0.60), err


def _gpt3_layer(phase):
    """One GPT-3 175B layer on one of 4 TP ranks, batch 8 (gpu_calibration.md §4.2)."""
    d, heads, hd, b = 12288, 24, 128, 8
    q, ctx = (1, 3072) if phase == "decode" else (2048, 2048)
    m = b * q
    kv = 2.0 * b * ctx * heads * hd
    scores = 2.0 * b * heads * q * ctx
    attn = dict(
        m=q,
        n=b * ctx,
        k=hd,
        batch=heads,
        flops=2.0 * q * b * ctx * hd * heads,
        kv_read_bytes=kv,
        act_bytes=2.0 * m * heads * hd + scores,
        count=1,
    )
    return [
        mm_row(m, d, d // 4, "qkv", count=3),
        dict(op="qk", cls="attn_score", **attn),
        dict(op="softmax", cls="softmax", count=1, flops=2.5 * scores, act_bytes=2 * scores),
        dict(op="av", cls="attn_context", **attn),
        mm_row(m, d // 4, d, "out"),
        mm_row(m, d, d, "w1"),
        dict(op="gelu", cls="elementwise", count=1, flops=8.0 * m * d, act_bytes=4.0 * m * d),
        mm_row(m, d, d, "w2"),
        dict(op="layernorm", cls="elementwise", count=2, flops=8.0 * m * d, act_bytes=4.0 * m * d),
    ]


@pytest.mark.parametrize("phase,key,limit", [("decode", "decode_us", 0.15), ("prefill", "prefill_ms", 0.15)])
def test_gpt3_layer_breakdown_eager(phase, key, limit):
    """Measured with PyTorch eager kernels: the eager stack must reproduce the layer (all-reduces excluded).
    (vidur-fitted presets, not fitted to this layer: decode +5.6 %, prefill +6.1 % at the time of the fit.)"""
    base = gpu("a100_80gb_sxm")
    model = GPUModel(base.spec.model_copy(update={"software_stack": "eager"}))
    rows = _gpt3_layer(phase)
    c = cost_rows(model, rows)
    total = float(np.sum(c.time_s * np.array([r["count"] for r in rows])))
    meas = DATA["gpt3_layer_a100_tp4"][key]
    ref = (meas["total"] - 2 * meas["allreduce"]) * (1e-6 if phase == "decode" else 1e-3)
    assert abs(total / ref - 1) <= limit
    if phase == "decode":  # launch-bound element-wise kernels (~48 us each, §4.2) are labelled as such
        bound = dict(zip([r["op"] for r in rows], c.bound))
        assert bound["gelu"] == "overhead" and bound["layernorm"] == "overhead"
        assert bound["w1"] == "memory"
        fused = cost_rows(base, rows).time_s
        assert np.sum(fused) < np.sum(c.time_s)


# ------------------------------------------------------------------ hand-derived numbers


def test_presets_match_datasheets():
    # devices.md (d) and pim_dram.md b.1
    gib80 = 85.9e9  # "80 GB" parts hold 80 GiB = 85.9e9 B (preset comments)
    expect = {
        "a100_80gb_sxm": (312e12, 2039e9, gib80),
        "a100_hbm3": (312e12, 3352e9, gib80),
        "h100_sxm": (989.4e12, 3350e9, gib80),
        "h200_sxm": (989.4e12, 4800e9, 141e9),
    }
    for name, (flops, bw, cap) in expect.items():
        g = gpu(name)
        assert isinstance(g, DeviceModel)
        assert g.kind == "gpu"
        assert g.peak_flops == pytest.approx(flops)
        assert g.peak_bandwidth_bytes_per_s == pytest.approx(bw)
        assert g.capacity_bytes == pytest.approx(cap)
        assert g.static_power_w == g.spec.idle_power_w > 0
    assert gpu("h100_sxm").peak_flops_for("fp8") == pytest.approx(1979e12)
    assert gpu("a100_80gb_sxm").peak_flops_for("fp8") == pytest.approx(312e12)  # no FP8 tensor cores


def test_memory_efficiency_curve():
    g = gpu("a100_80gb_sxm")
    s = g.spec
    half = s.mem_half_mb * 1e6
    assert g.mem_eta(half) == pytest.approx(s.mem_eta_max / 2)
    eta = g.mem_eta(np.array([10e6, 30e6, 100e6, 300e6, 3e9]))
    assert np.all(np.diff(eta) > 0) and np.all(eta < s.mem_eta_max)
    assert 0.5 < eta[1] < 0.75 and eta[3] > 0.8  # ~0.6 at tens of MB, ~0.85 at hundreds (§7)
    # streaming time = bytes / (BW * eta(bytes))
    assert g.memory_time_s(100e6) == pytest.approx(100e6 / (s.hbm_bandwidth_gbps * 1e9 * g.mem_eta(100e6)))


def test_wave_quantisation_hand_computed():
    spec = gpu("a100_80gb_sxm").spec.model_copy(update={"split_k": False, "tiles": [(128, 128)], "k_overhead": 0.0})
    g = GPUModel(spec)
    k = 4096
    t_tile = 2 * 128 * 128 * k / (312e12 / 108 * spec.compute_eta)
    # 108 tiles of 128x128 fill one wave on 108 SMs; 109 tiles need a second wave
    t108, t109 = g.matmul_compute_time_s([128, 128], [128 * 108, 128 * 109], [k, k])
    assert t108 == pytest.approx(t_tile)
    assert t109 == pytest.approx(2 * t_tile)
    # small M pads to the 16-row MMA granularity, not to the 128-row tile
    t_m1, t_m16, t_m17 = g.matmul_compute_time_s([1, 16, 17], [128, 128, 128], [k, k, k])
    assert t_m1 == pytest.approx(t_m16) == pytest.approx(t_tile / 8)
    assert t_m17 == pytest.approx(t_tile / 4)
    # per-tile prologue/epilogue: K-depth 4096 + 500
    g500 = GPUModel(spec.model_copy(update={"k_overhead": 500.0}))
    assert g500.matmul_compute_time_s(128, 128 * 108, k)[0] == pytest.approx(t_tile * (k + 500) / k)
    # fastest of several tiles: M=128, N=256*108 is one wave of 128x256 tiles or two of 128x128 tiles
    two = GPUModel(spec.model_copy(update={"tiles": [(128, 128), (128, 256)]}))
    assert two.matmul_compute_time_s(128, 256 * 108, k)[0] == pytest.approx(2 * t_tile)
    assert g.matmul_compute_time_s(128, 256 * 108, k)[0] == pytest.approx(2 * t_tile)
    assert two.matmul_compute_time_s(128, 256 * 108 + 128, k)[0] == pytest.approx(3 * t_tile)  # 128x128: 217 tiles


def test_split_k_fills_idle_sms():
    g = GPUModel(gpu("a100_80gb_sxm").spec.model_copy(update={"tiles": [(128, 128)], "k_overhead": 0.0}))
    no_split = GPUModel(g.spec.model_copy(update={"split_k": False}))
    # 8 output tiles on 108 SMs: split-K by up to 13 (108 // 8) but at most 16 and K/256 slices
    a = g.matmul_compute_time_s(128, 1024, 8192)
    b = no_split.matmul_compute_time_s(128, 1024, 8192)
    # best split s=13: waves=1 (104 <= 108), K slice ceil(8192/13)=631
    assert a / b == pytest.approx(631 / 8192)


def test_energy_hand_computed():
    g = gpu("a100_80gb_sxm")
    c = cost_rows(g, [mm_row(1, 8192, 8192)])
    nbytes = 2.0 * 8192 * 8192 + 2.0 * (8192 + 8192)
    dram = c.energy_j["dram_activate"] + c.energy_j["dram_read_write"] + c.energy_j["dram_io"]
    assert dram[0] == pytest.approx(nbytes * 28.72e-12)  # 3.59 pJ/bit (pim_dram.md b.1)
    assert c.energy_j["sram"][0] == pytest.approx(nbytes * (2.4 + 1.28) * 1e-12)
    assert c.energy_j["compute"][0] == pytest.approx(2.0 * 8192 * 8192 * g.spec.compute_pj_per_flop * 1e-12)
    assert c.bytes_by_level["hbm"][0] == pytest.approx(nbytes)
    # issue 12: compute_pj_per_flop is no longer (TDP - idle - HBM at peak) / peak (a bound, and this check
    # was vacuous: pytest.approx's default abs=1e-12 passed any pJ value); SM activity is its own component,
    # sm_active_power_w x occupancy (1 for this split-K GEMV) x kernel-body time (tests/test_gpu_power.py)
    body = c.time_s[0] - g.spec.kernel_overhead_us * 1e-6
    assert c.energy_j["active"][0] == pytest.approx(g.spec.sm_active_power_w * body, rel=1e-9, abs=0)


def test_allreduce_not_costed_and_overheads():
    g = gpu("a100_80gb_sxm")
    rows = [
        dict(op="ar", cls="allreduce", count=1, comm_bytes=1e6),
        dict(op="add", cls="elementwise", count=1, act_bytes=3 * 2 * 4096.0),
    ]
    c = cost_rows(g, rows)
    assert c.time_s[0] == 0 and c.bound[0] == "link" and c.energy_total_j()[0] == 0
    # a 1-token residual add is a launch: ~2 us (vidur §4.1) fused, +45 us eager (LLMCompass §4.2)
    assert c.bound[1] == "overhead"
    assert 2e-6 <= c.time_s[1] < 2.2e-6
    eager = GPUModel(g.spec.model_copy(update={"software_stack": "eager"}))
    assert cost_rows(eager, rows).time_s[1] == pytest.approx(c.time_s[1] + 45e-6)


def test_attention_fused_vs_unfused_bandwidth():
    g = gpu("a100_80gb_sxm")
    kv = 151e6
    row = dict(
        op="qk",
        cls="attn_score",
        count=1,
        m=1,
        n=24576,
        k=128,
        batch=24,
        flops=2.0 * 24576 * 128 * 24,
        kv_read_bytes=kv,
    )
    fused = cost_rows(g, [row]).time_s[0]
    eager = cost_rows(GPUModel(g.spec.model_copy(update={"software_stack": "eager"})), [row]).time_s[0]
    # the 1.5 GFLOP of compute (~10 us at 45-60 % of peak) adds < 0.5 % through the smooth max (p ~ 2)
    assert fused == pytest.approx(2e-6 + kv / (2039e9 * g.spec.attn_mem_eta_fused), rel=5e-3)
    assert eager == pytest.approx(2e-6 + kv / (2039e9 * g.spec.attn_mem_eta_unfused), rel=5e-3)
    assert cost_rows(g, [row]).bound[0] == "memory"


def test_fused_decode_attention_is_one_call_with_fixed_cost():
    """Fused (flash) attention: attn_score + softmax + attn_context = attn_call_us + (KV + q/o) / (BW x
    attn_mem_eta_fused), by hand for the FA3 calibration shape (batch 16, 32/32 heads, ctx 4,000: 567.2 us
    measured); the scores never reach HBM and the softmax row costs nothing of its own. Eager: three kernels,
    scores through HBM."""
    from attnsim.studies.validate import decode_attention_row_dicts

    g = gpu("h100_sxm")
    rows = decode_attention_row_dicts(16, 4000, 32, 32)
    c = cost_rows(g, rows)
    kv, qo = 2 * 2.0 * 16 * 4000 * 32 * 128, 2 * 2.0 * 16 * 32 * 128
    assert c.time_s[1] == 0.0 and c.bytes_by_level["hbm"][1] == 0.0  # softmax inside the kernel
    assert float(np.sum(c.bytes_by_level["hbm"])) == pytest.approx(kv + qo, rel=1e-12)
    hand = g.spec.attn_call_us * 1e-6 + (kv + qo) / (3350e9 * g.spec.attn_mem_eta_fused)
    assert float(np.sum(c.time_s)) == pytest.approx(hand, rel=2e-3)  # + the FLOPs through the smooth max
    assert float(np.sum(c.time_s)) * 1e6 == pytest.approx(567.2, rel=0.01)  # the calibration row itself
    eager = cost_rows(GPUModel(g.spec.model_copy(update={"software_stack": "eager"})), rows)
    assert eager.time_s[1] > 0 and float(np.sum(eager.bytes_by_level["hbm"])) > kv + qo  # scores through HBM
    # a preset without kernel data (A100) keeps one launch per call: kernel_overhead_us on attn_score
    a = gpu("a100_80gb_sxm")
    assert a.spec.attn_call_us is None
    ca = cost_rows(a, rows)
    assert ca.time_s[0] - ca.time_s[2] == pytest.approx(a.spec.kernel_overhead_us * 1e-6, rel=1e-9)


def test_prefill_attention_stays_compute_bound_on_h100():
    """Prefill attention (2,048 queries x 2,048 keys causal, 32 heads), fused: one call = attn_call_us + the
    smooth max of FLOPs / (peak x attn_compute_eta_fused) and (KV + q/o) / (BW x attn_mem_eta_fused); compute
    bound (the 134 MB score matrix an unfused kernel writes is not charged: it made this row memory-bound)."""
    g = gpu("h100_sxm")
    q = ctx = 2048
    pairs = q * (q + 1) // 2
    row = dict(
        op="qk",
        cls="attn_score",
        count=1,
        m=q,
        n=ctx,
        k=128,
        batch=32,
        flops=2.0 * 32 * pairs * 128,
        kv_read_bytes=2.0 * ctx * 32 * 128,
        act_bytes=2.0 * (q * 32 * 128 + 32 * pairs),
    )
    t = cost_rows(g, [row]).time_s[0]
    assert cost_rows(g, [row]).bound[0] == "compute"
    tc = row["flops"] / (989.4e12 * g.spec.attn_compute_eta_fused)
    tm = (row["kv_read_bytes"] + 2.0 * q * 32 * 128) / (3350e9 * g.spec.attn_mem_eta_fused)
    assert tm < tc and t == pytest.approx(g.spec.attn_call_us * 1e-6 + float(g.combine(tc, tm)), rel=1e-9)


# ------------------------------------------------------------------ config errors


def test_bad_config_raises_config_error():
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "hardware" / "a100_80gb_sxm.yaml").read_text())
    bad = dict(data, hbm_bandwidth_gbps=-1.5)
    with pytest.raises(ConfigError, match=r"x.yaml: hbm_bandwidth_gbps: expected a positive number"):
        registry.build(bad, file="x.yaml")
    with pytest.raises(ConfigError, match="x.yaml: bogus_key: unknown key"):
        registry.build(dict(data, bogus_key=1), file="x.yaml")
    with pytest.raises(ConfigError, match="mem_eta_max"):
        registry.build(dict(data, mem_eta_max=1.5), file="x.yaml")
    assert isinstance(registry.build(data), GPUModel)
    assert registry.schema_for("gpu") is GPUSpec


# ------------------------------------------------------------------ properties

dims = st.integers(1, 16384)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(ALL_PRESETS), m=dims, n=dims, k=dims, batch=st.integers(1, 64))
def test_matmul_never_beats_peak(name, m, n, k, batch):
    g = gpu(name)
    c = cost_rows(g, [mm_row(m, k, n, batch=batch)])
    t = c.time_s[0]
    assert t > 0
    assert 2.0 * m * n * k * batch / t <= g.peak_flops * (1 + 1e-9)
    nbytes = 2.0 * (k * n + m * (k + n)) * batch
    assert nbytes / t <= g.peak_bandwidth_bytes_per_s * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(ALL_PRESETS),
    q=st.integers(1, 4096),
    ctx=st.integers(1, 1 << 20),
    heads=st.integers(1, 128),
    cls=st.sampled_from(["attn_score", "attn_context"]),
    eager=st.booleans(),
)
def test_attention_never_beats_peak(name, q, ctx, heads, cls, eager):
    g = gpu(name)
    if eager:
        g = GPUModel(g.spec.model_copy(update={"software_stack": "eager"}))
    kv = 2.0 * ctx * heads * 128
    flops = 2.0 * q * ctx * 128 * heads
    # act_bytes as the trace writes them: query (or output) + the unfused score matrix (heads x q x ctx)
    qo, scores = 2.0 * q * heads * 128, 2.0 * heads * q * ctx
    c = cost_rows(
        g,
        [
            dict(
                op="a",
                cls=cls,
                count=1,
                m=q,
                n=ctx,
                k=128,
                batch=heads,
                flops=flops,
                kv_read_bytes=kv,
                act_bytes=qo + scores,
            )
        ],
    )
    t = c.time_s[0]
    moved = kv + qo + (scores if eager else 0.0)  # a fused (flash) kernel keeps the scores on chip
    assert flops / t <= g.peak_flops and moved / t <= g.peak_bandwidth_bytes_per_s


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(ALL_PRESETS),
    n=st.integers(8, 64).map(lambda x: x * 256),
    k=st.integers(8, 64).map(lambda x: x * 256),
)
def test_gemv_flat_until_ridge_then_grows(name, n, k):
    g = gpu(name)
    ridge = g.peak_flops / g.peak_bandwidth_bytes_per_s  # FLOP/B; an fp16 GEMM with M rows has ~M FLOP/B
    ms = np.array([1, 2, 4, 8, 16, 32])
    t = cost_rows(g, [mm_row(int(m), k, n) for m in ms]).time_s
    assert np.all(t <= t[0] * 1.10), t  # weight streaming dominates far below the ridge point
    big = int(8 * ridge)
    t_big, t_big2 = cost_rows(g, [mm_row(big, k, n), mm_row(2 * big, k, n)]).time_s
    # beyond the ridge, time grows ~linearly with M: doubling M from w >= 2 waves needs >= 2w - 1 waves of
    # one tile shape (>= 1.5x); the fastest-tile choice may switch to a shape with fuller waves, which hypothesis
    # showed can bring the ratio down to ~1.33 (h100_sxm, N 3584, K 2048), so hold it to 1.25
    assert t_big > 2 * t[0] and t_big2 > 1.25 * t_big
    # monotone in M
    m_all = np.unique(np.geomspace(1, 4 * big, 40).astype(int))
    t_all = cost_rows(g, [mm_row(int(m), k, n) for m in m_all]).time_s
    assert np.all(np.diff(t_all) >= -1e-15)


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(ALL_PRESETS),
    m=st.integers(2048, 16384),
    n=st.integers(2048, 16384),
    k=st.integers(2048, 16384),
)
def test_prefill_matmul_is_compute_bound(name, m, n, k):
    c = cost_rows(gpu(name), [mm_row(m, k, n)])
    assert c.bound[0] == "compute"


def test_fused_softmax_is_free_only_beside_its_attention():
    """The softmax row costs nothing on a fused GPU only inside the flash kernel of its layer group's attention on
    the same device; a softmax placed on the GPU while its attention runs elsewhere (a PIM / NPU device) is an
    ordinary bytes-bound kernel: launch + its bytes at the curve's bandwidth."""
    from attnsim.studies.validate import decode_attention_row_dicts

    g = gpu("h100_sxm")
    rows = [dict(r, layer_group=0) for r in decode_attention_row_dicts(16, 4000, 32, 32)]
    sm = rows[1]
    alone = cost_rows(g, [sm])
    assert alone.time_s[0] == pytest.approx(
        g.spec.kernel_overhead_us * 1e-6 + float(g.memory_time_s(sm["act_bytes"])), rel=1e-9
    )
    assert alone.bytes_by_level["hbm"][0] == sm["act_bytes"]
    other = cost_rows(g, [rows[0], dict(sm, layer_group=1)])  # another layer group's attention only
    assert other.time_s[1] == pytest.approx(alone.time_s[0], rel=1e-12)
    assert cost_rows(g, rows).time_s[1] == 0.0
