"""Sangam-style chiplet CXL-PIM (hwmodels/systolic.py on the CXL-PNM path): systolic tile cycles and
utilisation by hand, the SRAM re-read rule, and the device's use of both."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels import systolic as S
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def device(**over):
    hw = load_yaml(find_config("hardware", "sangam_chiplet"))
    hw.update(over)
    return registry.build(hw, file="sangam_chiplet")


ONE = S.SystolicSpec(arrays=1, rows=128, cols=128, clock_mhz=1000, sram_mb=4)


def test_tile_cycles_and_utilisation_by_hand():
    # 256^3 GEMM on one 128 x 128 array: 2 x 2 = 4 weight tiles
    # pipelined: 4 x max(M=256, rows=128) + 128 + 128 = 1280 cycles; util = 256^3 / (16384 x 1280) = 0.8
    assert S.matmul_time_s(ONE, 256, 256, 256) == pytest.approx(1280e-9)
    assert S.utilisation(ONE, 256, 256, 256) == pytest.approx(0.8)
    # the NPU's per-tile fill and drain (hwmodels/npu.py): 4 x (256 + 256) = 2048 cycles -> 0.5
    npu_like = ONE.model_copy(update={"tile_overlap": False})
    assert S.matmul_time_s(npu_like, 256, 256, 256) == pytest.approx(2048e-9)
    assert S.utilisation(npu_like, 256, 256, 256) == pytest.approx(0.5)
    # decode GEMV (M = 16 requests) is weight-load bound: util -> M / rows = 1/8 for many tiles
    # 4096 x 4096: 32 x 32 = 1024 tiles x 128 cycles + 256 -> 16 x 4096^2 / (16384 x 131328)
    assert S.utilisation(ONE, 16, 4096, 4096) == pytest.approx(16 * 4096**2 / (16384 * 131328))
    assert S.utilisation(ONE, 16, 4096, 4096) < 16 / 128
    # tiles spread over arrays: 16 arrays run the 1024 tiles in ceil(1024 / 16) = 64 rounds
    sixteen = ONE.model_copy(update={"arrays": 16})
    assert S.matmul_time_s(sixteen, 16, 4096, 4096) == pytest.approx((64 * 128 + 256) * 1e-9)


def test_sram_rereads_by_hand():
    # inputs that fit the 4 MB buffer are read once
    assert S.input_rereads(ONE, 4e6, 100_000) == 0.0
    # 10 MB of inputs, N = 4096 outputs, one array of 128 columns: 32 passes -> 31 extra reads
    assert S.input_rereads(ONE, 10e6, 4096) == pytest.approx(31 * 10e6)
    sixteen = ONE.model_copy(update={"arrays": 16})  # 16 x 128 = 2048 columns per pass: 2 passes
    assert S.input_rereads(sixteen, 10e6, 4096) == pytest.approx(10e6)


def test_preset_peak_and_refusals():
    d = device()
    assert d.peak_flops == pytest.approx(2 * 16 * 128 * 128 * 1e9)
    assert d.peak_bandwidth_bytes_per_s == pytest.approx(8 * 819.2e9)
    assert d.capacity_bytes == pytest.approx(128e9)
    with pytest.raises(ConfigError, match="pu.tflops"):  # one compute model: the arrays set the peak
        device(pu={"tflops": 16})
    hw = load_yaml(find_config("hardware", "attacc_hbm3_pim_stack"))
    hw["systolic"] = dict(arrays=1, rows=8, cols=8, clock_mhz=1000, sram_mb=1)
    with pytest.raises(ConfigError, match="systolic"):
        registry.build(hw, file="x")


def test_prefill_gemm_costs_the_tiles_and_the_rereads():
    model = load_model("llama2-7b")
    tr = build_trace(model, Scenario(batch_size=4, prompt_len=1024), "prefill")
    i = int(np.nonzero(tr["op"] == "mlp_up")[0][0])
    c = tr.cols
    m, n, k = int(c["m"][i]), int(c["n"][i]), int(c["k"][i])
    small = device(systolic=dict(arrays=16, rows=128, cols=128, clock_mhz=1000, sram_mb=1))
    big = device(systolic=dict(arrays=16, rows=128, cols=128, clock_mhz=1000, sram_mb=1000))
    act, wb = float(c["act_bytes"][i]), float(c["weight_bytes"][i])
    assert act > 1e6  # inputs of 4 x 1024 tokens x 4096 do not fit 1 MB
    passes = -(-n // (16 * 128))
    a, b = small.cost(tr, [i]), big.cost(tr, [i])
    assert a.bytes_by_level["dram_bank"][0] == pytest.approx(wb + act * passes)
    assert b.bytes_by_level["dram_bank"][0] == pytest.approx(wb + act)
    t_tiles = S.matmul_time_s(big.spec.systolic, m, n, k, int(c["batch"][i]))
    assert b.time_s[0] == pytest.approx(max(t_tiles, (wb + act) / big.peak_bandwidth_bytes_per_s))
    assert a.time_s[0] >= b.time_s[0]


def test_decode_gemv_is_bounded_by_the_arrays_weight_load():
    model = load_model("llama2-7b")
    d = device()
    tr = build_trace(model, Scenario(batch_size=16, prompt_len=512), "decode")
    i = int(np.nonzero(tr["op"] == "mlp_up")[0][0])
    c = tr.cols
    t_tiles = S.matmul_time_s(d.spec.systolic, int(c["m"][i]), int(c["n"][i]), int(c["k"][i]), int(c["batch"][i]))
    cost = d.cost(tr, [i])
    assert cost.time_s[0] >= t_tiles
    assert cost.time_s[0] >= float(c["weight_bytes"][i]) / d.peak_bandwidth_bytes_per_s
