"""CENT as CENT built it (issue 11 item 5): the CXL controller's vector units, CENT's energy parameters,
and the CENT systems. Hand-derived numbers follow CENT's cent_power_calculator.py / run_sim.py
(Yufeng98/CENT @ 8c79786; shared/reference/pim_dram.md b.4, reproductions.md "CENT")."""
import numpy as np
import pytest

from attnsim.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels.cxl_controller import kernel_of
from attnsim.isa.lower import lower_fc
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def _hw(name, **over):
    hw = load_yaml(find_config("hardware", name))
    for k, v in over.items():
        hw[k] = v
    return registry.build(hw, file=name)


@pytest.fixture(scope="module")
def ctrl():
    return _hw("cent_controller")


def _ctrl_rows(tr):
    return [i for i in range(len(tr)) if kernel_of(str(tr["op"][i]), str(tr["cls"][i]))]


def _decode(ctx, tp=1, batch=1):
    m = load_model("llama2-7b")
    sc = Scenario(name="x", batch_size=batch, prompt_len=ctx, output_len=2)
    return build_trace(m, sc, "decode", tp=tp, context_lens=np.full(batch, ctx))


def test_controller_kernels_by_hand(ctrl):
    # CENT ACCEL_CYCLE: EXP = 32 x SB_RD + 11 + SB_WR = 44, VEC = 32 x 2 SB_RD + 1 + SB_WR = 66 cycles per
    # 512 elements (32 accelerators x 16 lanes); per head: RED 1 + RV_SFT_CYCLE_PIPELINE (16 + 2/8 + 1)
    e, heads = 512 * 32, 32
    k = ctrl.kernel("softmax", e, heads)
    assert k["cycles"] == pytest.approx(e / 512 * 44 + e / 512 * 66 + heads * (1 + 16 + 2 / 8 + 1))  # 4104
    moved = 2 * e * 2  # scores out, probabilities back, 2 B each
    assert ctrl.kernel_time_s(k) == pytest.approx(4104 / 2e9 + moved / (32 * 32e9))
    # RMSNorm of 4096: 4096 / 16 partials / 512 x 66 + RED (1 + 1 + 1) + RV 26 = 62 cycles (CENT: x 2 per block)
    assert ctrl.kernel("rmsnorm", 4096, 1)["cycles"] == pytest.approx(62)
    # RoPE of q and k (2 x 4096 elements): 3 cycles / 8 cores each = 3072 cycles
    assert ctrl.kernel("rope", 8192, 0)["cycles"] == pytest.approx(3072)
    # CENT's Acc per Llama-2-7B block (run_sim.py calculate_acc_latency): 3.65 us at 512 tokens
    assert (4104 + 2 * 62 + 3072) / 2e9 == pytest.approx(3.65e-6)


def test_trace_rows_on_the_controller_cost_cents_acc_term(ctrl):
    tr = _decode(512)
    rows = _ctrl_rows(tr)
    assert sorted({str(tr["op"][i]) for i in rows}) == ["attn_norm", "ffn_norm", "final_norm", "rope", "softmax"]
    c = ctrl.cost(tr, rows)
    per_layer = sum(t for i, t in zip(rows, c.time_s) if tr["layer_group"][i] >= 0)
    compute = (4104 + 2 * 62 + 3072) / 2e9
    moved = (2 * 512 * 32 * 2 + 2 * (4096 / 16 + 1) * 2 + 2 * 8192 * 2) / (32 * 32e9)
    assert per_layer == pytest.approx(compute + moved)


def test_acc_term_grows_linearly_with_context_through_softmax(ctrl):
    ctxs = [512, 1024, 2048, 4096]
    t = []
    for ctx in ctxs:
        tr = _decode(ctx)
        rows = [i for i in _ctrl_rows(tr) if tr["layer_group"][i] >= 0]
        t.append(float(np.sum(ctrl.cost(tr, rows).time_s)))
    slope = np.diff(t) / np.diff(ctxs)
    # per token of context: 32 heads x (EXP 44 + VEC 66 cycles per 512 scores) + 4 B moved per score
    want = 32 * ((44 + 66) / 512 / 2e9 + 4 / (32 * 32e9))
    assert slope == pytest.approx([want] * 3, rel=1e-9)
    # the softmax row alone carries the growth; norms and RoPE do not depend on the context
    tr1, tr2 = _decode(512), _decode(4096)
    for op in ("attn_norm", "rope"):
        i1 = [i for i in _ctrl_rows(tr1) if tr1["op"][i] == op]
        i2 = [i for i in _ctrl_rows(tr2) if tr2["op"][i] == op]
        assert ctrl.cost(tr1, i1).time_s[0] == ctrl.cost(tr2, i2).time_s[0]


def test_cxl_aim_device_uses_cents_bank_access_energy():
    dev = _hw("cxl_aim_device")
    assert dev.dram.pim.access_pj_per_bit == pytest.approx(0.321)  # MAC16 = 3 x 438.15 mW x 1 ns / 4096 bit
    hw = load_yaml(find_config("hardware", "cxl_aim_device"))
    hw["dram_overrides"]["pim"]["access_pj_per_bit"] = 0.55  # AttAcc_bank's value (what it used before)
    old = registry.build(hw, file="x")
    low = lower_fc("aim", 4096, 4096, 1, elem_bytes=2.0, n_channels=dev.channels, org=dev.org, pu=dev.pu)
    _, e_new, _ = dev.run(low)
    _, e_old, _ = old.run(low)
    bits = 4096 * 4096 * 2 * 8  # every weight bit reaches a bank PU once
    assert low.pim_bytes * 8 == bits
    assert e_old["dram_read_write"] - e_new["dram_read_write"] == pytest.approx((0.55 - 0.321) * bits * 1e-12)
    assert e_new["dram_read_write"] / e_old["dram_read_write"] < 0.321 / 0.55 * 1.2


def test_phy_and_transaction_energy_per_dram_command():
    dev = _hw("cxl_aim_device")
    hw = load_yaml(find_config("hardware", "cxl_aim_device"))
    hw["pu"]["phy_pj_per_command"] = 0.0
    hw["pu"]["trx_pj_per_command"] = 0.0
    bare = registry.build(hw, file="x")
    low = lower_fc("aim", 4096, 4096, 1, elem_bytes=2.0, n_channels=dev.channels, org=dev.org, pu=dev.pu)
    _, e, cnt = dev.run(low)
    _, e0, _ = bare.run(low)
    mac16 = 4096 * 4096 * 2 / (16 * 32)  # MAC16 commands: 16 banks x 32 B each
    assert cnt["macab_ops"] == mac16
    data = cnt["macab_ops"] + cnt["buf_units"] + cnt["rd_bursts"] + cnt["wr_bursts"]
    cmds = data + cnt["act_cmds"] + cnt["pre_cmds"] + cnt["refs"] + cnt["refpbs"]
    # CENT MEM_CTR: (TRX 267.7 mW x data commands + PHY 381.0 mW x all commands) / 2 channels / 2 GHz
    want = (381.0445262 / 2 / 2e9 * cmds + 267.7082056 / 2 / 2e9 * data) * 1e-3
    assert e["dram_io"] - e0["dram_io"] == pytest.approx(want, rel=1e-3)
    assert want > 0.1 * mac16 * 1314e-12  # ~12 % on top of the MAC16 energy: not negligible


@pytest.fixture(scope="module")
def cent_runs():
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    out = {}
    for pp, tp in ((1, 8), (2, 4), (4, 2), (8, 1), (32, 1)):
        exp = load_experiment(None, [f"experiment.systems=[cent_pp{pp}_tp{tp}]", "experiment.baseline=null",
                                     "experiment.models=[llama2-7b]",
                                     f"experiment.scenarios={{s: {{batch_size: {pp}, prompt_len: 64, output_len: 3}}}}"])
        out[(pp, tp)] = run_experiment(exp)[0]
    return out


def test_cent_systems_run_and_put_the_vector_work_on_the_controller(cent_runs):
    for (pp, tp), doc in cent_runs.items():
        assert doc["status"] == "ok", (pp, tp, doc.get("error"))
        by_dev = doc["breakdown"]["decode_step"]["time_s_by_device"]
        assert by_dev["ctrl"] > 0 and by_dev["pnm"] > by_dev["ctrl"]
        e = doc["breakdown"]["decode_step"]["energy_j_by_component"]
        assert e["dram_io"] > 0 and e["compute"] > 0  # PHY/TRX/DQ and the vector units' dynamic energy


def test_controller_static_power_is_in_the_system():
    from attnsim.experiment import load_experiment
    from attnsim.hwmodels.system import build_system
    exp = load_experiment(None, ["experiment.systems=[cent_pp8_tp1]", "experiment.baseline=null",
                                 "experiment.models=[llama2-7b]"])
    spec = exp.systems["cent_pp8_tp1"]
    system = build_system(spec, exp.tree.hardware, exp.tree.file_of)
    ctrl_w = system.pools["ctrl"].count * system.pools["ctrl"].model.static_power_w
    # CENT: GB 0.0670 x 32 + SB 0.692 + IB 18.82 + leakage + DV_CTR 2.99 mW per device
    assert ctrl_w == pytest.approx(8 * 0.02465)
    dram_w = 8 * 32 * 527.5 / 2 * 1e-3  # ACT_STBY per channel
    assert system.static_power_w() == pytest.approx(dram_w + ctrl_w + (system.static_power_w() - dram_w - ctrl_w))
    assert system.static_power_w() >= dram_w + ctrl_w


def test_controller_count_must_match_the_pnm_devices():
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    exp = load_experiment(None, ["experiment.systems=[cent_pp1_tp8]", "experiment.baseline=null",
                                 "experiment.models=[llama2-7b]", "systems.cent_pp1_tp8.devices.ctrl.count=4",
                                 "experiment.scenarios={s: {batch_size: 1, prompt_len: 16, output_len: 2}}"])
    with pytest.raises(ConfigError, match=r"devices.ctrl.count: expected one controller per PNM device \(8\), got 4"):
        run_experiment(exp)


def test_controller_refuses_rows_it_does_not_run(ctrl):
    tr = _decode(64)
    i = [j for j in range(len(tr)) if tr["op"][j] == "qkv_proj"][0]
    with pytest.raises(ConfigError, match="not a controller op"):
        ctrl.cost(tr, [i])


def test_aim_mac_registers_are_read_out_per_dot_product():
    from attnsim.isa.lower import ENGINE_CODES, lower_attention
    dev = _hw("cxl_aim_device")
    # score: 1024 tokens of one head on one channel = 64 dot products (one token per bank) of 128 x 2 B / 32 B
    # = 8 MAC16 each, 8 per 64-column row: WR_GB once, then WR_BIAS + MAC_ABK(8) + RD_MAC per dot product
    low = lower_attention("aim", "score", [1024], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org,
                          pu=dev.pu)
    c = low.programs[0].counts()
    assert c["MAC_ABK"] == c["RD_MAC"] == c["WR_BIAS"] == 64 and c["WR_GB"] == 1
    rec = low.commands[0]
    assert int(np.sum(rec["op"] == ENGINE_CODES["ACTAB"])) == 64 // 8  # the row stays open for its 8 dot products
    assert int(np.sum(rec["repeat"][rec["op"] == ENGINE_CODES["MACAB"]])) == 64 * 8
    # context: 1024 probabilities fill the 2 KB GB once; 128 dims / 16 banks = 8 dims per bank, each a
    # dot product over the 1024 tokens = 64 MAC16 (a whole row)
    ctx = lower_attention("aim", "context", [1024], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org,
                          pu=dev.pu)
    c = ctx.programs[0].counts()
    assert c["WR_GB"] == 1 and c["MAC_ABK"] == c["RD_MAC"] == c["WR_BIAS"] == 8
    # the register path (setup nCWL + nBL + nWTRS - 2 = 15 cycles + one 2-cycle unit per access, twice per dot
    # product) binds the 8-MAC16 score dot products: 64 x 2 x 17 cycles > 64 x 8 MAC16 x nCCDL (2)
    t, _, _ = dev.run(low)
    assert t >= 64 * 2 * 17 * 0.5e-9
    assert t < 1.5 * (64 * 2 * 17 + 8 * (56 + 32)) * 0.5e-9


def test_aim_attention_spreads_over_all_channels_at_batch_1():
    # Llama-2-7B at TP 8: 4 KV heads per device, 32 channels; the mapping search splits each item over 8
    # channels (tokens), costing the partial-softmax merge on the context row
    tr = _decode(4096, tp=8)
    rows = [i for i in range(len(tr)) if tr["cls"][i] in ("attn_score", "attn_context")]
    t = {}
    for cpi in (1, "auto"):
        hw = load_yaml(find_config("hardware", "cxl_aim_device"))
        hw["channels_per_item"] = cpi
        c = registry.build(hw, file="x").cost(tr, rows)
        t[cpi] = (c.time_s, c.mapping)
    (t1, m1), (ta, ma) = t[1], t["auto"]
    assert [m["channels_used"] for m in m1] == [4, 4]
    assert [m["channels_used"] for m in ma] == [32, 32] and [m["channels_per_item"] for m in ma] == [8, 8]
    assert ta[0] == pytest.approx(t1[0] / 8, rel=0.1)          # score: 8x the channels, ~8x faster
    assert ma[1]["merge_s"] > 0 and t1[1] / ta[1] > 4          # context: faster, merge included
