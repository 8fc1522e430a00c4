"""Static power by device and component; host GPUs of a CXL-PNM system free in number."""

from __future__ import annotations

import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram.spec import energy_params
from attnsim.hwmodels.system import build_system
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment

SCEN = "experiment.scenarios={s: {batch_size: 2, prompt_len: 32, output_len: 3}}"


def _exp(system: str, *sets: str):
    return load_experiment(
        None,
        [
            f"experiment.systems=[{system}]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "models.llama2-7b.num_layers=2",
            SCEN,
            "experiment.generation={mode: exact}",
            *sets,
        ],
    )


def _system(exp, name):
    return build_system(exp.systems[name], exp.tree.hardware, exp.tree.file_of)


def test_parts_by_device_sum_to_the_total_and_name_the_right_devices():
    exp = _exp("cxl_pnm")
    system = _system(exp, "cxl_pnm")
    by = system.static_power_by_device_w()
    assert set(by) == {"pnm", "gpu", "link:cxl", "link:host_cxl", "link:nvlink"}
    # PNM device: DRAM background (every channel) + the four parts of configs/hardware/cxl_pnm_lpddr5x.yaml
    pnm = system.pools["pnm"].model
    bg = energy_params(pnm.dram).background_w * pnm.channels
    assert by["pnm"] == pytest.approx(
        {
            "dram_background": 8 * bg,
            "pim_logic": 8 * 5.0,
            "buffers": 8 * 1.0,
            "memory_controllers": 8 * 3.2,
            "cxl": 8 * 4.0,
        }
    )
    assert by["link:cxl"] == {"ports": 8 * 4.0}  # switch: 4 W per x16 port, one port per PNM device
    assert set(by["gpu"]) == {"idle"}  # GPUs: one idle number (hwmodels/gpu.py)
    total = sum(sum(p.values()) for p in by.values())
    assert system.static_power_w() == pytest.approx(total, rel=1e-12)


def test_cent_controller_static_power_is_not_duplicated():
    exp = _exp("cxl_aim")
    by = _system(exp, "cxl_aim").static_power_by_device_w()
    assert set(by["pnm"]) == {"dram_background", "cxl"}  # no controller part on the AiM device ...
    assert by["ctrl"] == pytest.approx({"idle": 16 * 0.02465})  # ... it is the cent_controller pool's


def test_breakdowns_split_static_by_device_with_the_same_total():
    doc = run_experiment(_exp("cxl_pnm"))[0]
    assert doc["status"] == "ok"
    for phase in ("prefill", "decode_step"):
        b = doc["breakdown"][phase]
        static = b["energy_j_by_component"]["static"]
        assert static > 0
        assert sum(b["static_energy_j_by_device"].values()) == pytest.approx(static, rel=1e-12)
        assert sum(b["static_energy_j_by_part"].values()) == pytest.approx(static, rel=1e-12)
        assert b["static_energy_j_by_part"]["pnm.cxl"] == pytest.approx(8 * 4.0 * b["time_s"], rel=1e-12)


def test_pipeline_breakdowns_split_static_too():
    doc = run_experiment(_exp("cent_pp2_tp4"))[0]
    b = doc["breakdown"]["decode_step"]
    assert sum(b["static_energy_j_by_device"].values()) == pytest.approx(
        b["energy_j_by_component"]["static"], rel=1e-12
    )
    assert b["static_energy_j_by_device"]["ctrl"] == pytest.approx(8 * 0.02465 * b["time_s"], rel=1e-12)


def test_static_parts_and_a_device_total_are_refused_together():
    with pytest.raises(ConfigError) as e:
        _exp("cxl_pnm", "hardware.cxl_pnm_lpddr5x.static_power_w=30")
    assert "static" in str(e.value) and "\n" not in str(e.value)


def test_a_device_total_replaces_the_parts():
    exp = _exp("cxl_pnm", "hardware.cxl_pnm_lpddr5x.static={}", "hardware.cxl_pnm_lpddr5x.static_power_w=30")
    assert _system(exp, "cxl_pnm").static_power_by_device_w()["pnm"] == {"device": 240.0}


def test_host_gpu_count_is_free():
    base = run_experiment(_exp("cxl_pnm"))[0]
    two = run_experiment(_exp("cxl_pnm", "systems.cxl_pnm.devices.gpu.count=2"))[0]
    assert two["status"] == "ok"
    exp = _exp("cxl_pnm")
    gpu_w = _system(exp, "cxl_pnm").pools["gpu"].model.static_power_w
    for doc, n in ((base, 8), (two, 2)):
        for phase in ("prefill", "decode_step"):
            b = doc["breakdown"][phase]
            assert b["static_energy_j_by_device"]["gpu"] == pytest.approx(n * gpu_w * b["time_s"], rel=1e-12)
    # prefill tensor parallel over 2 GPUs: each holds half the weights, the PNM devices still an eighth
    mem2, mem8 = two["metrics"]["memory"], base["metrics"]["memory"]
    assert mem2["gpu"]["weights_gb"] == pytest.approx(4 * mem8["gpu"]["weights_gb"], rel=1e-9)
    assert mem2["pnm"]["weights_gb"] == pytest.approx(mem8["pnm"]["weights_gb"], rel=1e-9)
    assert two["metrics"]["ttft_s"] > base["metrics"]["ttft_s"]  # 4x the work per GPU
    # the KV still goes to the PNM devices over the host link: a GPU writes its (4x larger) shard
    kv2 = two["breakdown"]["prefill"]["time_s_by_op"]["pim_write_kv"]
    kv8 = base["breakdown"]["prefill"]["time_s_by_op"]["pim_write_kv"]
    assert kv2 > kv8
    assert two["breakdown"]["decode_step"]["time_s"] == pytest.approx(
        base["breakdown"]["decode_step"]["time_s"], rel=1e-12
    )


def test_host_gpu_count_must_divide_into_replicas():
    exp = _exp(
        "cxl_pnm",
        "systems.cxl_pnm.devices.gpu.count=3",
        "systems.cxl_pnm.devices.pnm.count=16",
        "systems.cxl_pnm.parallelism.replicas=2",
    )
    with pytest.raises(ConfigError) as e:
        run_experiment(exp)
    msg = str(e.value)
    assert "devices.gpu.count" in msg and "multiple of replicas = 2" in msg and "\n" not in msg


def test_host_pool_adds_cpu_and_dram_static_power_only():
    exp = _exp("cxl_pnm_host")
    system = _system(exp, "cxl_pnm_host")
    by = system.static_power_by_device_w()
    assert by["cpu"] == {"cpu": 2 * 90.0, "dram": 80.0}  # configs/hardware/dgx_h100_host.yaml
    (doc,) = run_experiment(exp)
    b = doc["breakdown"]["decode_step"]
    assert b["static_energy_j_by_part"]["cpu.cpu"] == pytest.approx(180.0 * b["time_s"], rel=1e-12)
    assert "cpu" not in b["time_s_by_device"]  # it runs nothing
    with pytest.raises(ConfigError) as e:
        system.pools["cpu"].model.cost(None, [0])
    assert "runs no trace rows" in str(e.value) and "\n" not in str(e.value)
