"""CENT as CENT built it (issue 11 item 5): the CXL controller's vector units, CENT's energy parameters,
and the CENT systems. Hand-derived numbers follow CENT's cent_power_calculator.py / run_sim.py
(Yufeng98/CENT @ 8c79786; shared/reference/pim_dram.md b.4, reproductions.md "CENT")."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
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
    # the scores' trips between banks and controller are the PIM device's softmax_io row, not moved here
    assert k["bytes"] == 0 and ctrl.kernel_time_s(k) == pytest.approx(4104 / 2e9)
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
    moved = (2 * (4096 / 16 + 1) * 2 + 2 * 8192 * 2) / (32 * 32e9)  # norm partials + scale, q/k for RoPE
    assert per_layer == pytest.approx(compute + moved)


def test_acc_term_grows_linearly_with_context_through_softmax(ctrl):
    ctxs = [512, 1024, 2048, 4096]
    t = []
    for ctx in ctxs:
        tr = _decode(ctx)
        rows = [i for i in _ctrl_rows(tr) if tr["layer_group"][i] >= 0]
        t.append(float(np.sum(ctrl.cost(tr, rows).time_s)))
    slope = np.diff(t) / np.diff(ctxs)
    # per token of context: 32 heads x (EXP 44 + VEC 66 cycles per 512 scores); the scores move on the PIM side
    want = 32 * ((44 + 66) / 512 / 2e9)
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
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    out = {}
    for pp, tp in ((1, 8), (2, 4), (4, 2), (8, 1), (32, 1)):
        exp = load_experiment(
            None,
            [
                f"experiment.systems=[cent_pp{pp}_tp{tp}]",
                "experiment.baseline=null",
                "experiment.models=[llama2-7b]",
                f"experiment.scenarios={{s: {{batch_size: {pp}, prompt_len: 64, output_len: 3}}}}",
            ],
        )
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
    from attnsim.hwmodels.system import build_system
    from attnsim.sim.experiment import load_experiment

    exp = load_experiment(
        None, ["experiment.systems=[cent_pp8_tp1]", "experiment.baseline=null", "experiment.models=[llama2-7b]"]
    )
    spec = exp.systems["cent_pp8_tp1"]
    system = build_system(spec, exp.tree.hardware, exp.tree.file_of)
    ctrl_w = system.pools["ctrl"].count * system.pools["ctrl"].model.static_power_w
    # CENT: GB 0.0670 x 32 + SB 0.692 + IB 18.82 + leakage + DV_CTR 2.99 mW per device
    assert ctrl_w == pytest.approx(8 * 0.02465)
    dram_w = 8 * 32 * 527.5 / 2 * 1e-3  # ACT_STBY per channel
    assert system.static_power_w() == pytest.approx(dram_w + ctrl_w + (system.static_power_w() - dram_w - ctrl_w))
    assert system.static_power_w() >= dram_w + ctrl_w


def test_controller_count_must_match_the_pnm_devices():
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(
        None,
        [
            "experiment.systems=[cent_pp1_tp8]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "systems.cent_pp1_tp8.devices.ctrl.count=4",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 16, output_len: 2}}",
        ],
    )
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
    low = lower_attention(
        "aim", "score", [1024], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu
    )
    c = low.programs[0].counts()
    assert c["MAC_ABK"] == c["RD_MAC"] == c["WR_BIAS"] == 64 and c["WR_GB"] == 1
    rec = low.commands[0]
    assert int(np.sum(rec["op"] == ENGINE_CODES["ACTAB"])) == 64 // 8  # the row stays open for its 8 dot products
    assert int(np.sum(rec["repeat"][rec["op"] == ENGINE_CODES["MACAB"]])) == 64 * 8
    # context: 1024 probabilities fill the 2 KB GB once; 128 dims / 16 banks = 8 dims per bank, each a
    # dot product over the 1024 tokens = 64 MAC16 (a whole row)
    ctx = lower_attention(
        "aim", "context", [1024], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu
    )
    c = ctx.programs[0].counts()
    assert c["WR_GB"] == 1 and c["MAC_ABK"] == c["RD_MAC"] == c["WR_BIAS"] == 8
    # two register-mode switches (TMOD, nMODCH = 32 cycles) per dot product bind the 8-MAC16 score dot
    # products: 64 x 2 x 32 cycles > 64 x 8 MAC16 x nCCDL (2)
    t, _, _ = dev.run(low)
    assert t >= 64 * 2 * 32 * 0.5e-9
    assert t < 1.25 * (64 * (2 * 32 + 8 * 2 + 2 * 2) + 8 * (56 + 32)) * 0.5e-9


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
    assert ta[0] == pytest.approx(t1[0] / 8, rel=0.1)  # score: 8x the channels, ~8x faster
    assert ma[1]["merge_s"] > 0 and t1[1] / ta[1] > 4  # context: faster, merge included


# ---------------------------------------------------------------- CENT's command stream, round 2
# aim_simulator @ 2eb1ee0 (CENT's submodule): AiM_dram_controller.cpp issues TMOD (nMODCH) whenever the next
# ISR enters or leaves the register-RW mode (WR_GB, WR_BIAS, RD_MAC, RD_AF); aim_DRAM_system.cpp decodes one
# host request per clock. CENT's trace generator (Yufeng98/CENT @ 8c79786 TransformerBlock.py / Llama.py).


def _modes(low):
    from attnsim.isa.lower import ENGINE_CODES

    return int(np.sum(low.commands[0]["op"] == ENGINE_CODES["MODE"]))


def test_aim_mode_switch_per_register_isr_boundary():
    from attnsim.isa.lower import lower_attention

    dev = _hw("cxl_aim_device")
    one = lower_attention("aim", "score", [16], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu)
    two = lower_attention("aim", "score", [32], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu)
    # WR_GB (enter), WR_BIAS, MAC_ABK (leave), RD_MAC (enter): 3 switches; each further dot product 2 more
    assert list(one.programs[0].mnemonics()) == ["WR_GB", "WR_BIAS", "MAC_ABK", "RD_MAC", "EOC"]
    assert _modes(one) == 3 and _modes(two) == 5
    t1, t2 = dev.run(one)[0], dev.run(two)[0]
    n_modch = dev.dram.pim.mode_switch_cycles
    assert n_modch == 32  # GDDR6_AiM_timing nMODCH
    # the extra dot product: 2 x nMODCH + 8 MAC16 nCCDL apart + the WR_BIAS / RD_MAC register accesses (2 x nBL)
    assert 2 * n_modch + 7 * 2 <= (t2 - t1) / 0.5e-9 <= 2 * n_modch + 8 * 2 + 2 * 2 + 4


def test_aim_fc_keeps_mac_registers_in_flight_per_gb_fill():
    from attnsim.isa.lower import lower_fc

    dev = _hw("cxl_aim_device")
    assert dev.pu.mac_registers == 32  # CENT --reuse-size 32
    # 640 outputs on one channel = 40 per bank; k = 1024 x 2 B = one 64-column GB fill; 40 over 32 registers
    # = 2 groups of 20: WR_BIAS x 20, MAC_ABK x 20, RD_MAC x 20, twice (CENT reuse-GB)
    low = lower_fc("aim", 640, 1024, 1, elem_bytes=2.0, n_channels=1, org=dev.org, pu=dev.pu)
    mns = list(low.programs[0].mnemonics())
    assert mns == ["WR_GB"] + (["WR_BIAS"] * 20 + ["MAC_ABK"] * 20 + ["RD_MAC"] * 20) * 2 + ["EOC"]
    assert _modes(low) == 1 + 2 * 2
    hw = load_yaml(find_config("hardware", "cxl_aim_device"))
    hw["pu"]["mac_registers"] = 1  # one output per GB fill at a time: 2 switches per output
    one = registry.build(hw, file="x")
    low1 = lower_fc("aim", 640, 1024, 1, elem_bytes=2.0, n_channels=1, org=one.org, pu=one.pu)
    assert _modes(low1) == 1 + 2 * 40
    assert dev.run(low)[0] < one.run(low1)[0]
    hw = load_yaml(find_config("hardware", "cxl_pnm_lpddr5x"))
    hw.setdefault("pu", {})["mac_registers"] = 4
    with pytest.raises(ConfigError, match=r"pu.mac_registers: expected 1 \(mac_registers applies to isa aim\)"):
        registry.build(hw, file="x")


def test_softmax_io_is_cents_score_trips_through_the_banks():
    from attnsim.isa.lower import host_requests, lower_attention

    dev = _hw("cxl_aim_device")
    # one head, 1024 scores x 2 B = 64 columns: twice (scale scores, scale exponentials) 2 x 64 writes (the
    # vector and the scale operand), one EWMUL row, 64 reads, SYNC
    low = lower_attention(
        "aim", "softmax_io", [1024], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu
    )
    p = low.programs[0]
    mns = list(p.mnemonics())
    assert mns == ["WR_SBK", "WR_SBK", "EWMUL", "RD_SBK", "SYNC"] * 2 + ["EOC"]
    assert list(p["opsize"][:4]) == [64, 64, 64, 64]
    assert low.macs == 0 and low.pim_bytes == 0
    assert host_requests(low) == 6 * 64 + 5
    # 32 heads on 32 channels: the device's one-request-per-clock stream, not the channels, binds
    low32 = lower_attention(
        "aim", "softmax_io", [1024] * 32, dhead=128, group=1, elem_bytes=2, n_channels=32, org=dev.org, pu=dev.pu
    )
    assert host_requests(low32) == 32 * 6 * 64 + 5
    t_engine = dev.run(low32)[0]
    assert t_engine < host_requests(low32) * 0.5e-9
    with pytest.raises(ConfigError, match="softmax_io: isa aim"):
        lower_attention(
            "attacc", "softmax_io", [16], dhead=128, group=1, elem_bytes=2, n_channels=1, org=dev.org, pu=dev.pu
        )


def _tp8_run(opt):
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(
        None,
        [
            "experiment.systems=[cent_pp1_tp8]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            f"systems.cent_pp1_tp8.mapper.options.tp_vector_ops={opt}",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 256, output_len: 2}}",
        ],
    )
    return run_experiment(exp)[0]


def test_tp_vector_ops_replicated_runs_all_heads_on_every_device():
    rep, split = _tp8_run("replicated"), _tp8_run("split")
    ops_r = rep["breakdown"]["decode_step"]["time_s_by_op"]
    ops_s = split["breakdown"]["decode_step"]["time_s_by_op"]
    # controller softmax and RoPE: every term linear in heads -> exactly 8x the rank's share
    assert ops_r["softmax"] == pytest.approx(8 * ops_s["softmax"], rel=1e-9)
    assert ops_r["rope"] == pytest.approx(8 * ops_s["rope"], rel=1e-9)
    # the score trips: 8x the single-bank accesses on the device's request stream (the ISRs once); the rank's
    # share alone is short enough for the channels' own command timing to show
    assert 4.0 < ops_r["softmax_io"] / ops_s["softmax_io"] <= 8.0
    for op in ("qkv_proj", "attn_score", "attn_context", "mlp_up", "mlp_down"):  # split as before
        assert ops_r[op] == ops_s[op]
    assert rep["metrics"]["memory"] == split["metrics"]["memory"]  # the caches stay split: no extra capacity
    # CENT's energy counts the vector work once (run_sim.py energy_main + energy_FC x (FC_devices - 1)):
    # all heads on one device = the rank's share on 8 (softmax, RoPE linear in heads); the norms (the whole
    # vector on every rank when split) once
    e_r, e_s = (d["breakdown"]["decode_step"]["energy_j_by_op"] for d in (rep, split))
    for op in ("softmax", "rope"):
        assert e_r[op] == pytest.approx(e_s[op], rel=1e-9) and e_r[op] > 0
    assert e_r["attn_norm"] == pytest.approx(e_s["attn_norm"] / 8, rel=1e-9) and e_r["attn_norm"] > 0


def test_tp_vector_ops_bad_value_is_refused():
    with pytest.raises(
        ConfigError, match=r"mapper.options.tp_vector_ops: expected one of split, replicated, got 'all'"
    ):
        _tp8_run("all")


def _pp_decode(stack):
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(
        None,
        [
            "experiment.systems=[cent_pp2_tp4]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            f"systems.cent_pp2_tp4.software={stack}",
            "experiment.generation={mode: exact}",
            "experiment.scenarios={s: {batch_size: 2, prompt_len: 64, output_len: 2}}",
        ],
    )
    (doc,) = run_experiment(exp)
    assert doc["status"] == "ok", doc.get("error")
    return doc["pipeline"], doc["metrics"]


def test_cent_stack_samples_once_per_token_on_the_pipeline_chain(tmp_path):
    """configs/stacks/cent.yaml: CENT's InOut_latency (utils.py:7, 0.15 ms of host top-k per token,
    run_sim.py:203 token_latency) once per request per step; under PP on each micro-batch's chain, so
    period = max(busiest device group's load, chain + h, the host's M x h), by hand from the stack-free run."""
    from attnsim.hwmodels.stack import load_stack

    assert load_stack("cent").request_step_us == 150.0 and load_stack("cent").step_us == 0.0
    p0, m0 = _pp_decode("none")
    load, chain = p0["decode_max_group_load_s"], p0["decode_chain_s"]  # 2 micro-batches of 1 request
    big = tmp_path / "big.yaml"
    big.write_text("kind: stack\nname: big\nrequest_step_us: 20000\n")  # host-bound: 2 x 20 ms > chain + 20 ms
    for stack, h in (("cent", 150e-6), (str(big), 20e-3)):
        p1, m1 = _pp_decode(stack)
        assert p1["decode_chain_s"] == pytest.approx(chain + h, rel=1e-12)
        assert m1["tpot_s"] == pytest.approx(max(load, chain + h, 2 * h), rel=1e-12)
        assert m1["decode_dynamic_energy_per_token_j"] == pytest.approx(
            m0["decode_dynamic_energy_per_token_j"], rel=1e-12
        )
    assert max(load, chain + 150e-6) > max(load, chain)  # the CENT case shows (not hidden by the load)


def test_vector_io_is_cents_norm_rope_and_act_traffic_through_the_banks():
    """CENT's Llama.py trace_only, one AiM device of 32 channels x 16 banks (B = 512), bursts of 16 bf16."""
    from attnsim.isa.lower import host_requests, lower_aim_vector_io

    dev = _hw("cxl_aim_device")

    def low(op, n, k=0, reps=1):
        return lower_aim_vector_io(op, n, k, reps, n_channels=32, org=dev.org, pu=dev.pu)

    # RMSNorm of 4096: neighbour banks 2 x 256 banks x 1 burst, EWMUL operands 2 x 128 banks x 2 bursts,
    # result 128 x 2 = 1280 W/R MEM; ISRs: WR_BIAS, MAC_ABK, RD_MAC, 2 EWMUL, 4 x (COPY_BKGB, COPY_GBBK), SYNC, EOC
    norm = low("attn_norm", 4096)
    mns = list(norm.programs[0].mnemonics())
    assert mns.count("COPY_BKGB") == mns.count("COPY_GBBK") == 4 and mns.count("EWMUL") == 2
    assert host_requests(norm) == 1280 + 15
    assert norm.channels_used == 32 and norm.macs == 0
    # RoPE, q = k = 4096: xq, xk stored (128 banks x 4 bursts each) and read back: 2048; EWMUL of 256
    # columns each = 4 rows of 64; + EOC
    assert host_requests(low("rope", 4096, 4096)) == 2048 + 9
    # GQA 4: xk 64 // 4 = 16 elements = 1 burst per bank: 2 x (512 + 128); EWMUL 4 + 1 rows
    assert host_requests(low("rope", 4096, 1024)) == 2 * (512 + 128) + 5 + 1
    # FFN activation of 11008: ceil(11008 / 128) = 86 per bank -> 128 banks x 6 bursts = 768, 4 times
    assert host_requests(low("mlp_act", 11008)) == 4 * 768 + 2 + 8 + 1 + 1
    assert host_requests(low("attn_norm", 4096, reps=3)) == 3 * (1280 + 14) + 1  # one per token, one EOC


def test_cxl_pnm_adds_the_bank_side_rows_in_decode_only():
    from attnsim.hwmodels.cxl_controller import NORM_OPS
    from attnsim.mapper.cxl_pnm import softmax_io_rows

    tr = _decode(512, tp=8)
    for replicated, q, act in ((True, 4096, 11008), (False, 512, 1376)):
        out, added = softmax_io_rows(tr, replicated=replicated)
        ops = [str(o) for o in out["op"]]
        io = {o: i for i, o in enumerate(ops) if o.endswith("_io")}
        assert set(io) == {"softmax_io", "rope_io", "mlp_act_io"} | {f"{o}_io" for o in NORM_OPS if o in ops}
        assert int(added.sum()) == len([o for o in ops if o.endswith("_io")])
        assert out["n"][io["rope_io"]] == q and out["k"][io["rope_io"]] == q  # llama2-7b: MHA
        assert out["n"][io["mlp_act_io"]] == act and out["n"][io["attn_norm_io"]] == 4096
    m = load_model("llama2-7b")
    pre = build_trace(m, Scenario(name="x", batch_size=1, prompt_len=64, output_len=2), "prefill", tp=8)
    ops = [str(o) for o in softmax_io_rows(pre)[0]["op"]]
    assert "softmax_io" in ops and not any(o.endswith("_io") and o != "softmax_io" for o in ops)
