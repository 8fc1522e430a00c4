"""Samsung CXL-PNM preset (Park et al., HPCA'24): hand-derived bandwidth, capacity, peak and idle power,
and the GPU-free platform's plan (prefill and decode on the controller accelerators)."""

import numpy as np
import pytest

from attnsim.core.config import find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def device(name):
    return registry.build(load_yaml(find_config("hardware", name)), file=name)


def test_preset_numbers_by_hand():
    d, generic = device("samsung_cxl_pnm"), device("cxl_pnm_lpddr5x")
    # 16 x64 packages = 64 x16 LPDDR5X-8533 channels x 8533 MT/s x 2 B = 1092.2 GB/s; 16 x 32 GB = 512 GB
    assert d.peak_bandwidth_bytes_per_s == pytest.approx(64 * 8533e6 * 2, rel=1e-3)
    assert d.capacity_bytes == pytest.approx(512e9)
    assert d.peak_flops == pytest.approx(16e12)
    # idle: LPDDR5X background (as the generic device) + one controller SoC 4 + 1 + 3.2 + 2 = 10.2 W,
    # 3.0 W below the generic device's separate accelerator die + CXL controller (13.2 W)
    parts = d.static_power_parts_w
    assert parts["dram_background"] == pytest.approx(generic.static_power_parts_w["dram_background"])
    assert d.static_power_w - parts["dram_background"] == pytest.approx(10.2)
    assert generic.static_power_w - d.static_power_w == pytest.approx(3.0)


def test_prefill_row_is_a_roofline_over_the_device():
    d = device("samsung_cxl_pnm")
    tr = build_trace(load_model("opt-66b"), Scenario(batch_size=2, prompt_len=256), "prefill", tp=8)
    i = int(np.nonzero(tr["op"] == "mlp_up")[0][0])
    c = tr.cols
    nbytes = float(c["weight_bytes"][i] + c["act_bytes"][i] + c["kv_read_bytes"][i] + c["kv_write_bytes"][i])
    want = max(nbytes / (64 * 8533e6 * 2), float(c["flops"][i]) / 16e12)
    assert d.cost(tr, [i]).time_s[0] == pytest.approx(want, rel=1e-3)


def test_platform_runs_everything_on_the_pnm_devices():
    from attnsim.hwmodels.system import build_system
    from attnsim.mapper.base import get_policy
    from attnsim.sim.experiment import load_experiment
    from attnsim.workloads.trace import kv_cache_bytes, weight_bytes

    exp = load_experiment("samsung_cxl_pnm", sets=["models.opt-66b.num_layers=2"])
    system = build_system(exp.systems["samsung_cxl_pnm"], exp.tree.hardware, exp.tree.file_of)
    model, sc = exp.models["opt-66b"], exp.scenarios["b32"]
    ctx = sc.prompt_lens() + sc.output_len
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, ctx),
        "kv_per_rank": kv_cache_bytes(model, sc, ctx, tp=8),
    }
    for phase in ("prefill", "decode"):
        plan = get_policy("cxl_pnm")(build_trace(model, sc, phase, tp=8), system, mb, {})
        assert set(plan.device) <= {"pnm", "link"}
        assert [m.role for m in plan.memory] == ["pnm"]
        assert plan.memory[0].weights_bytes == pytest.approx(mb["weights"] / 8, rel=0.01)
