"""PIM device model on the DRAM engine: closed-form all-bank throughput, power-constraint ratio,
attention costs against physical limits, and clear errors."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels.pim import allbank_closed_form
from attnsim.isa.lower import ENGINE_CODES
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def device(name, **over):
    hw = load_yaml(find_config("hardware", name))
    hw.update(over)
    return registry.build(hw, file=name)


def allbank_stream(rows, macs_per_row):
    from attnsim.hwmodels.dram.engine import make_cmds

    cmds = make_cmds(3 * rows)
    cmds["op"][0::3] = ENGINE_CODES["ACTAB"]
    cmds["row"][0::3] = np.arange(rows) % 1024
    cmds["op"][1::3] = ENGINE_CODES["MACAB"]
    cmds["row"][1::3] = np.arange(rows) % 1024
    cmds["repeat"][1::3] = macs_per_row
    cmds["op"][2::3] = ENGINE_CODES["PREA"]
    return cmds


def test_engine_op_codes_match_the_lowering_table():
    from attnsim.hwmodels.dram.engine import Op

    for name, code in ENGINE_CODES.items():
        assert int(Op[name]) == code


@pytest.mark.parametrize("name", ["attacc_hbm3_pim_stack", "attacc_hbm3_pim_npc_stack"])
def test_allbank_throughput_matches_closed_form(name):
    from attnsim.hwmodels.dram.engine import run_commands

    dev = device(name)
    d = dev.dram
    rows = 3000  # ~ 0.7 M cycles: > 100 refresh intervals
    res = run_commands(d, allbank_stream(rows, d.org.columns), refresh="ab")
    got = rows * d.org.columns * dev.org.banks * d.org.burst_bytes / res.time_s
    cf = allbank_closed_form(d, d.org.columns)
    assert got <= cf["ideal_bytes_per_s"]  # never above banks x 32 B / nCCDAB
    assert got == pytest.approx(cf["bytes_per_s"], rel=0.03)


def test_power_constrained_preset_is_slower_by_the_ccdab_ratio():
    from attnsim.hwmodels.dram.engine import run_commands

    pc, npc = device("attacc_hbm3_pim_stack"), device("attacc_hbm3_pim_npc_stack")
    assert pc.dram.pim.nCCDAB == 6 and npc.dram.pim.nCCDAB == 4  # pim_dram.md b.1
    macs = 256  # long MAC streams per row (e.g. 8 GQA query passes over 32 columns)
    t_pc = run_commands(pc.dram, allbank_stream(400, macs)).time_s
    t_npc = run_commands(npc.dram, allbank_stream(400, macs)).time_s
    cf = (
        allbank_closed_form(pc.dram, 32, macs)["row_period_cycles"]
        / allbank_closed_form(npc.dram, 32, macs)["row_period_cycles"]
    )
    assert 1.4 < t_pc / t_npc < 1.5  # -> 6/4 = 1.5 as rows get longer; ACT/PRE overhead shrinks it
    assert t_pc / t_npc == pytest.approx(cf, rel=0.03)


@pytest.fixture(scope="module")
def llama70b_trace():
    model = load_model("llama2-70b")
    return build_trace(model, Scenario(batch_size=64, prompt_len=4096), "decode")


def attn_rows(trace):
    return np.flatnonzero(np.isin(trace["cls"], ["attn_score", "softmax", "attn_context"]))


def test_llama70b_attention_on_40_stacks_within_physical_limits(llama70b_trace):
    dev = device("attacc_hbm3_pim_40stack")
    tr = llama70b_trace
    rows = attn_rows(tr)
    cost = dev.cost(tr, rows)
    cls = list(tr["cls"][rows])
    s, c = cls.index("attn_score"), cls.index("attn_context")
    # 512 (request, KV head) items on 640 channels: one item per channel; per channel 4097 tokens x 128 x 8
    # MACs over 64 banks x 16 MACs per MACAB -> >= 4097*128*8/1024 MACABs x nCCDAB (6) cycles
    macab_cycles = np.ceil(4097 / 16) * 2 * 8 * 6
    lower = macab_cycles * dev.tck_s
    for j in (s, c):
        assert cost.time_s[j] >= lower
        assert cost.time_s[j] <= 1.35 * lower  # ACT/PRE per 32-column row + refresh + buffer moves
        assert cost.flops[j] / cost.time_s[j] <= dev.peak_flops
        assert cost.energy_j["pim_compute"][j] == pytest.approx(cost.flops[j] / 2 * 0.32e-12)
        assert cost.energy_j["dram_read_write"][j] > 0 and cost.energy_j["dram_activate"][j] > 0
    assert 0 < cost.time_s[cls.index("softmax")] < cost.time_s[s]


def test_more_stacks_never_slower_and_npc_faster(llama70b_trace):
    tr = llama70b_trace
    rows = attn_rows(tr)
    t = [device("attacc_hbm3_pim_stack", units=u).cost(tr, rows).time_s.sum() for u in (8, 16, 40)]
    assert t[0] >= t[1] >= t[2]
    t_npc = device("attacc_hbm3_pim_npc_stack", units=40).cost(tr, rows).time_s.sum()
    assert t_npc < t[2]


@pytest.mark.parametrize("name", ["fimdram_hbm2", "aim_gddr6_channel", "neupims_hbm2_pim", "cxl_pnm_lpddr5x"])
def test_other_devices_cost_attention_within_their_bandwidth(name):
    model = load_model("llama2-7b")
    tr = build_trace(model, Scenario(batch_size=4, prompt_len=1024), "decode")
    dev = device(name)
    rows = attn_rows(tr)
    if (
        name == "neupims_hbm2_pim"
    ):  # NeuPIMs: softmax on the NPU (isa newton refuses it, tests/test_neupims_faithful.py)
        rows = rows[tr["cls"][rows] != "softmax"]
    cost = dev.cost(tr, rows)
    assert np.all(cost.time_s > 0)
    kv = tr["kv_read_bytes"][rows]
    # bytes over time never above the device's internal (PU-side) bandwidth
    assert np.all(kv / cost.time_s <= dev.peak_bandwidth_bytes_per_s * 1.0001)


def test_bad_pim_configs_are_rejected():
    with pytest.raises(ConfigError, match="partition"):
        device("attacc_hbm3_pim_stack", partition="attacc_rank")
    with pytest.raises(ConfigError, match="no pim timing block"):
        device("attacc_hbm3_pim_stack", dram="ddr5_4800")
    with pytest.raises(ConfigError, match="pu.macs_per_command"):
        device("attacc_hbm3_pim_stack", pu={"macs_per_command": 0})
    model = load_model("llama2-7b")
    tr = build_trace(model, Scenario(batch_size=1, prompt_len=16), "decode")
    with pytest.raises(ConfigError, match="cannot run op class 'elementwise'"):
        device("attacc_hbm3_pim_stack").cost(tr, np.flatnonzero(tr["cls"] == "elementwise")[:1])


def test_cxl_pnm_device_has_its_published_bandwidth_and_capacity():
    """Samsung's LPDDR5X CXL-PNM: 16 x64 packages = 64 x16 channels, ~1.1 TB/s internal, 512 GB
    (cxl_reliability.md 1.1). A units count that multiplied the preset's 4 channels per package again
    once made it a 4.4 TB/s device."""
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry

    dev = registry.build(load_yaml(find_config("hardware", "cxl_pnm_lpddr5x")), file="cxl_pnm_lpddr5x")
    assert dev.channels == 64
    assert dev.peak_bandwidth_bytes_per_s == pytest.approx(64 * 8533e6 * 2, rel=1e-4)  # x16 at 8533 MT/s: 17.07 GB/s
    assert 1.05e12 < dev.peak_bandwidth_bytes_per_s < 1.15e12
    assert dev.capacity_bytes == pytest.approx(512e9)
