"""Mapper policies: placement never changes the model's work, breakdowns explain totals, capacity."""

import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import CapacityError, get_policy, model_totals
from attnsim.sim.engine import cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

SYSTEMS = ["a100_hbm3_x8", "attacc", "attacc_opt", "tiered_attacc", "cxl_pnm", "cxl_aim", "neupims", "offload_host"]


def _exp(systems, model="llama2-7b", batch=4, extra=()):
    return load_experiment(
        None,
        [
            f"experiment.systems={systems}",
            "experiment.baseline=null",
            f"experiment.models=[{model}]",
            f"scenarios.chat.batch_size={batch}",
            "scenarios.chat.prompt_len=512",
            "scenarios.chat.output_len=4",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def built():
    exp = _exp(SYSTEMS)
    return exp, {n: build_system(s, exp.tree.hardware, exp.tree.file_of) for n, s in exp.systems.items()}


def _plan(system, model, sc, phase, options=None):
    tp = system.spec.parallelism.tp
    tr = build_trace(model, sc, phase, tp=tp)
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 1),
        "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 1, tp=tp),
    }
    pol = get_policy(system.spec.mapper.policy)
    return tr, pol(tr, system, mb, options if options is not None else system.spec.mapper.options)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", SYSTEMS)
def test_placement_never_changes_model_flops_or_bytes(built, name, phase):
    exp, systems = built
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    tr, plan = _plan(systems[name], model, sc, phase)
    before, after = model_totals(tr), model_totals(plan.trace, plan.added)
    for k in before:
        assert after[k] == pytest.approx(before[k], rel=1e-9), (name, k)
    assert set(plan.device) <= set(systems[name].pools) | {"link"} | {f"link:{n}" for n in systems[name].links}


def test_each_policy_breakdown_sums_to_total():
    exp = _exp(SYSTEMS, extra=["experiment.generation.mode=exact"])
    docs = run_experiment(exp)
    assert {d["system"] for d in docs} == set(SYSTEMS)
    for d in docs:
        assert d["status"] == "ok", d.get("error")
        for phase in ("prefill", "decode_step"):
            bd = d["breakdown"][phase]
            for table in ("time_s_by_op", "time_s_by_device"):
                assert sum(bd[table].values()) == pytest.approx(bd["time_s"], rel=1e-3), (d["system"], phase, table)
            assert sum(bd["energy_j_by_op"].values()) == pytest.approx(
                bd["energy_j"] - bd["energy_j_by_component"]["static"], rel=1e-3
            )
            assert sum(bd["energy_j_by_component"].values()) == pytest.approx(bd["energy_j"], rel=1e-3)


def test_attention_moves_to_pim_and_io_crosses_the_link(built):
    exp, systems = built
    tr, plan = _plan(systems["attacc"], exp.models["llama2-7b"], exp.scenarios["chat"], "decode")
    dev = dict(zip(plan.trace["op"], plan.device))
    assert dev["attn_score"] == dev["softmax"] == dev["attn_context"] == "pim"
    assert dev["qkv_proj"] == dev["mlp_down"] == "gpu"
    assert dev["pim_send_q_kv"] == dev["pim_recv_out"] == "link:gpu_pim"
    # q (+ the new token's K/V) in and the attention output back, per rank and layer
    meta, b = plan.trace.meta, 4
    send = plan.trace["comm_bytes"][plan.trace["op"] == "pim_send_q_kv"][0]
    kv_new = b * 2 * meta["kv_heads_per_rank"] * meta["head_dim"] * 2
    assert send == pytest.approx(b * meta["heads_per_rank"] * meta["head_dim"] * 2 + kv_new)


def test_tiered_extremes_equal_gpu_only_and_attacc(built):
    exp, systems = built
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    sysm = systems["tiered_attacc"]
    _, hot = _plan(sysm, model, sc, "decode", {"hot_fraction": 1.0})
    _, gpu = _plan(systems["a100_hbm3_x8"], model, sc, "decode")
    assert cost_step(hot, sysm).time_s == pytest.approx(cost_step(gpu, systems["a100_hbm3_x8"]).time_s, rel=1e-9)
    _, cold = _plan(sysm, model, sc, "decode", {"hot_fraction": 0.0})
    _, att = _plan(systems["attacc"], model, sc, "decode", {})
    assert cost_step(cold, sysm).time_s == pytest.approx(cost_step(att, systems["attacc"]).time_s, rel=1e-9)
    _, mid = _plan(sysm, model, sc, "decode", {"hot_fraction": 0.5})
    t_mid = cost_step(mid, sysm)
    # the far part runs concurrently with the hot part: its energy counts, its time may be hidden
    assert t_mid.energy_j_by_op["attn_score_far"] > 0 and t_mid.energy_j_by_device["pim"] > 0
    assert t_mid.time_s_by_op["attn_score"] + t_mid.time_s_by_op["attn_score_far"] > 0
    assert t_mid.time_s_by_op["softmax_merge"] > 0 and t_mid.time_s_by_device["link:gpu_pim"] > 0


def test_offload_decode_is_bound_by_the_link(built):
    exp, systems = built
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    sysm = systems["offload_host"]
    tr, plan = _plan(sysm, model, sc, "decode")
    step = cost_step(plan, sysm)
    kv = tr.total("kv_read_bytes")
    link = sysm.links["pcie"]
    assert step.time_s >= kv / link.bandwidth_bytes_per_s
    _, half = _plan(sysm, model, sc, "decode", {"topk_fraction": 0.5, "offload_weights": False, "overlap": True})
    assert cost_step(half, sysm).time_s < step.time_s


def test_pipelined_step_period_is_max_of_device_and_chain_totals(built):
    """AttAcc pipelining: per layer max(sum over sub-batches per device, sum over devices per sub-batch)."""
    from attnsim.sim.engine import cost_rows, cost_step_pipelined

    exp, systems = built
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    sysm = systems["attacc_opt"]
    subs = [
        _plan(sysm, model, sc.model_copy(update={"batch_size": 2}), "decode", {"pipeline": False})[1] for _ in range(2)
    ]
    piped = cost_step_pipelined(subs, sysm)
    t = cost_rows(subs[0], sysm)[0]
    layer = subs[0].trace["layer_group"] >= 0
    per_dev = {d: t[layer & (subs[0].device == d)].sum() for d in set(subs[0].device[layer])}
    expect_layers = max(max(2 * v for v in per_dev.values()), sum(per_dev.values()))
    expect = expect_layers + 2 * t[~layer].sum()
    assert piped.time_s == pytest.approx(expect, rel=1e-9)


def test_throughput_rises_with_batch_until_capacity_and_limit_is_reported():
    exp = load_experiment(
        "attacc_gpt3_175b",
        ["experiment.systems=[attacc]", "experiment.baseline=null", "experiment.generation.samples=2"],
    )
    docs = sorted(run_experiment(exp), key=lambda d: d["scenario"]["batch_size"])
    ok = [d for d in docs if d["status"] == "ok"]
    thr = [d["metrics"]["decode_tokens_per_s"] for d in ok]
    assert thr == sorted(thr) and len(ok) >= 4
    over = [d for d in docs if d["status"] == "does_not_fit"]
    assert over and over[0]["scenario"]["batch_size"] > ok[-1]["scenario"]["batch_size"]
    assert "pim: weights 0.0 GB + KV" in over[0]["error"] and "exceed its capacity" in over[0]["error"]


def test_capacity_error_says_what_and_by_how_much(built):
    exp, systems = built
    model = exp.models["llama2-7b"]
    sc = exp.scenarios["chat"].model_copy(update={"batch_size": 4096})
    tr, plan = _plan(systems["a100_hbm3_x8"], model, sc, "decode")
    with pytest.raises(CapacityError, match=r"gpu: weights .* GB \+ KV .* GB = .* exceed its capacity .* by .* GB"):
        plan.check_capacity()


def test_policy_option_errors(built):
    exp, systems = built
    with pytest.raises(ConfigError, match="unknown option"):
        _plan(systems["attacc"], exp.models["llama2-7b"], exp.scenarios["chat"], "decode", {"bogus": 1})
    with pytest.raises(ConfigError, match="hot_fraction"):
        _plan(systems["tiered_attacc"], exp.models["llama2-7b"], exp.scenarios["chat"], "decode", {"hot_fraction": 2})
