"""Uneven tensor parallelism: shard sizes, the largest-shard trace, energy = sum over ranks, errors.

Hand numbers from configs/models/*.yaml: Llama-2-13B (40 heads = 40 KV heads, FFN 13824, vocab
32000), Llama-3-8B (32 heads, 8 KV heads, FFN 14336, vocab 128256).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.mapper.base import get_policy
from attnsim.sim.engine import cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import (
    build_trace,
    kv_cache_bytes,
    kv_heads_by_rank,
    kv_heads_per_rank,
    tp_imbalance,
    tp_shards,
    weight_bytes,
    weight_bytes_per_rank,
)
from attnsim.workloads.zoo import load_model

FP16 = dict(kv_dtype="fp16", weight_dtype="fp16", act_dtype="fp16")
NUMERIC = (
    "layer_group",
    "count",
    "m",
    "n",
    "k",
    "batch",
    "flops",
    "weight_bytes",
    "act_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "comm_bytes",
)


def _row(tr, op):
    return int(np.nonzero(tr["op"] == op)[0][0])


@pytest.mark.parametrize(
    "name,tp",
    [
        ("llama2-7b", 8),
        ("llama2-70b", 16),
        ("llama3-8b", 4),
        ("mixtral-8x7b", 8),
        ("deepseek-v2-lite", 4),
        ("gpt3-175b", 8),
    ],
)
def test_dividing_tp_is_the_old_even_split(name, tp):
    """tp dividing every width: the old arithmetic (heads / tp, KV heads / tp or 1, FFN / tp) and
    shares exactly 1, nothing reported, weights per rank = weights / tp."""
    m = load_model(name)
    sc = Scenario(batch_size=2, prompt_len=64, **FP16)
    tr = build_trace(m, sc, "decode", tp=tp)
    old_kv = 1 if m.mla is not None else (m.num_kv_heads // tp if m.num_kv_heads >= tp else 1)
    assert tr.meta["heads_per_rank"] == m.num_heads // tp and tr.meta["kv_heads_per_rank"] == old_kv
    assert "weights_per_rank_fraction" not in tr.meta and "query_heads_per_kv_head" not in tr.meta
    for op in ("mlp_up", "moe_expert_up"):
        if op in set(tr["op"]):
            inter = m.intermediate_size if op == "mlp_up" else m.moe.expert_intermediate_size
            gated = m.ffn_gated or op == "moe_expert_up"
            assert tr["n"][_row(tr, op)] == (2 if gated else 1) * (inter // tp)
    assert np.all(tr["flops_share"] == 1.0) and np.all(tr["bytes_share"] == 1.0)
    assert weight_bytes_per_rank(m, None, tp) == weight_bytes(m) / tp
    assert tp_imbalance(m, tp) == {} or set(tp_imbalance(m, tp)) == {"vocab_size"}


def test_even_tp_costs_are_bit_identical_without_share_columns():
    """The engine's share factors are exact identities when tp divides the model."""
    exp = load_experiment(None, ["experiment.systems=[dgx_a100]", "experiment.baseline=null"])
    from attnsim.hwmodels.system import build_system

    system = build_system(exp.systems["dgx_a100"], exp.tree.hardware, exp.tree.file_of)
    m, sc = load_model("llama2-13b"), Scenario(batch_size=3, prompt_len=200, **FP16)
    mb = {"weights": weight_bytes(m), "kv": kv_cache_bytes(m, sc, 201), "kv_per_rank": kv_cache_bytes(m, sc, 201, tp=8)}
    tr = build_trace(m, sc, "decode", tp=8)
    plan = get_policy("gpu_only")(tr, system, mb, {})
    a = cost_step(plan, system).breakdown()
    for c in ("flops_share", "bytes_share"):
        del plan.trace.cols[c]
    assert cost_step(plan, system).breakdown() == a


def test_llama2_13b_on_20_ranks_shards_by_hand():
    m = load_model("llama2-13b")
    sc = Scenario(batch_size=2, prompt_len=128, **FP16)
    tr = build_trace(m, sc, "decode", tp=20)
    assert tr.meta["heads_per_rank"] == 2 and tr.meta["kv_heads_per_rank"] == 2
    up, down = _row(tr, "mlp_up"), _row(tr, "mlp_down")
    assert tr["n"][up] == 2 * 692 and tr["k"][down] == 692  # ceil(13824 / 20); 13824 = 4 x 692 + 16 x 691
    assert tr["n"][_row(tr, "lm_head")] == 1600
    share = (4 * 692 + 16 * 691) / (20 * 692)  # = 13824 / 13840
    assert tr["flops_share"][up] == pytest.approx(share, rel=1e-14)
    assert tr["flops_share"][_row(tr, "attn_score")] == 1.0 and tr["flops_share"][_row(tr, "qkv_proj")] == 1.0
    assert tp_imbalance(m, 20) == {
        "intermediate_size": {
            "total": 13824,
            "largest": 692,
            "smallest": 691,
            "padding": pytest.approx(16 / 13824, rel=1e-12),
        }
    }
    # the trace equals the even split of a model 16 FFN columns wider (every rank 692)
    wide = m.model_copy(update={"intermediate_size": 13840})
    ref = build_trace(wide, sc, "decode", tp=20)
    for c in NUMERIC:
        assert np.array_equal(tr[c], ref[c]), c
    # the fullest rank's weights = those of the wider model's (even) rank
    assert weight_bytes_per_rank(m, None, 20) == pytest.approx(weight_bytes(wide) / 20, rel=1e-12)


def _run(model, extra=(), doc=False):
    exp = load_experiment(
        None,
        [
            "experiment.systems=[dgx_a100]",
            "experiment.baseline=null",
            f"experiment.models=[{model}]",
            "scenarios.chat.batch_size=4",
            "scenarios.chat.prompt_len=256",
            "scenarios.chat.output_len=3",
            "systems.dgx_a100.devices.gpu.count=20",
            "systems.dgx_a100.parallelism.tp=20",
            *extra,
        ],
    )
    d = run_experiment(exp)[0]
    assert d["status"] == "ok", d.get("error")
    return d if doc else d["metrics"]


def _per_access_j(doc, phase):
    """Dynamic energy of a phase without the SM-activity component (per-access energies only)."""
    comp = doc["breakdown"][phase]["energy_j_by_component"]
    return sum(v for k, v in comp.items() if k not in ("static", "active"))


def test_llama2_13b_tp20_runs_time_of_largest_shard_energy_of_all_ranks():
    """Time = the rank with 692 FFN columns (a model whose every rank has 692); dynamic energy =
    4 ranks of 692 + 16 ranks of 691 columns (models whose every rank has 692 / 691)."""
    u = _run("llama2-13b")
    r692 = _run("llama2-13b", ["models.llama2-13b.intermediate_size=13840"])
    r691 = _run("llama2-13b", ["models.llama2-13b.intermediate_size=13820"])
    assert u["ttft_s"] == r692["ttft_s"] and u["tpot_s"] == r692["tpot_s"]
    assert u["tpot_s"] > r691["tpot_s"]
    for k in ("dynamic_energy_per_token_j", "decode_dynamic_energy_per_token_j"):
        # the GPU's SM-activity energy (component ``active``: kernel time x power) is scaled by the bytes
        # share, which approximates each rank's own kernel time to ~1e-4 here (wave quantisation makes 691
        # and 692 columns' times not exactly proportional); the per-access energies are exact (below)
        assert u[k] == pytest.approx((4 * r692[k] + 16 * r691[k]) / 20, rel=1e-3), k
    docs = {
        n: _run("llama2-13b", extra, doc=True)
        for n, extra in (
            ("u", ()),
            ("692", ["models.llama2-13b.intermediate_size=13840"]),
            ("691", ["models.llama2-13b.intermediate_size=13820"]),
        )
    }
    for phase in ("prefill", "decode_step"):
        e = {n: _per_access_j(d, phase) for n, d in docs.items()}
        assert e["u"] == pytest.approx((4 * e["692"] + 16 * e["691"]) / 20, rel=1e-9), phase
        assert e["691"] < e["u"] < e["692"]
    assert u["memory"]["gpu"]["weights_gb"] == pytest.approx(r692["memory"]["gpu"]["weights_gb"], rel=1e-12)
    assert u["tp_imbalance"]["intermediate_size"]["largest"] == 692 and r692["tp_imbalance"] == {}


def test_gqa_kv_heads_follow_the_query_heads_of_each_rank():
    m = load_model("llama3-8b")  # 32 query heads, 8 KV heads: groups of 4
    # tp=3: query heads 0-10, 11-21, 22-31 -> KV heads 0-2, 2-5, 5-7
    assert list(kv_heads_by_rank(m, 3)) == [3, 4, 3] and kv_heads_per_rank(m, 3) == 4
    # tp=6: 6, 6, 5, 5, 5, 5 heads: 0-5, 6-11, 12-16, 17-21, 22-26, 27-31 -> two KV heads each
    assert list(kv_heads_by_rank(m, 6)) == [2] * 6
    s3, s6 = tp_shards(m, 3), tp_shards(m, 6)
    assert s3["num_heads"] == {"total": 32, "largest": 11, "smallest": 10, "padding": pytest.approx(1 / 32)}
    assert s3["num_kv_heads"] == {"total": 8, "largest": 4, "smallest": 3, "padding": pytest.approx(0.5)}
    assert s3["intermediate_size"]["largest"] == 4779 and s3["intermediate_size"]["smallest"] == 4778
    assert s6["num_kv_heads"] == {"total": 8, "largest": 2, "smallest": 2, "padding": pytest.approx(0.5)}
    assert s6["intermediate_size"]["padding"] == pytest.approx(6 * 2390 / 14336 - 1)
    assert set(tp_imbalance(m, 6)) == {"num_heads", "num_kv_heads", "intermediate_size"}  # vocab 6 x 21376
    assert tp_imbalance(m, 16) == {} and tp_imbalance(m, 8) == {}  # 1 replicated / 1 split KV head per rank
    sc = Scenario(batch_size=2, prompt_len=100, **FP16)
    assert kv_cache_bytes(m, sc, 300, tp=3) == pytest.approx(kv_cache_bytes(m, sc, 300) * 4 / 8, rel=1e-12)
    tr = build_trace(m, sc, "decode", tp=3)
    assert tr.meta["heads_per_rank"] == 11 and tr.meta["query_heads_per_kv_head"] == 4
    i = _row(tr, "attn_score")
    # attn_score bytes per rank = heads x A + KV heads x K (decode: T = 2 tokens, 2 x 101 keys)
    T, keys, d = 2, 202, 128
    A, K = (T * d + keys) * 2.0, (keys + T) * d * 2.0
    assert tr["act_bytes"][i] + tr["kv_read_bytes"][i] + tr["kv_write_bytes"][i] == 11 * A + 4 * K
    assert tr["bytes_share"][i] == pytest.approx((32 * A + 10 * K) / (3 * (11 * A + 4 * K)), rel=1e-12)
    assert tr["flops_share"][i] == pytest.approx(32 / 33, rel=1e-12)


def test_moe_and_mla_uneven():
    mx = load_model("mixtral-8x7b")  # expert FFN 14336 over 3 ranks: 4779, 4779, 4778
    tr = build_trace(mx, Scenario(batch_size=2, prompt_len=64, **FP16), "decode", tp=3)
    i = _row(tr, "moe_expert_down")
    assert tr["k"][i] == 4779 and tr["flops_share"][i] == pytest.approx(14336 / (3 * 4779), rel=1e-12)
    ds = load_model("deepseek-v2-lite")  # MLA: 16 heads over 3 ranks (6, 5, 5), latent replicated
    tr = build_trace(ds, Scenario(batch_size=2, prompt_len=64, **FP16), "decode", tp=3)
    assert tr.meta["heads_per_rank"] == 6 and tr.meta["kv_heads_per_rank"] == 1
    assert "num_kv_heads" not in tp_shards(ds, 3)
    assert tr["flops_share"][_row(tr, "attn_score")] == pytest.approx(16 / 18, rel=1e-12)
    assert tr["flops_share"][_row(tr, "kv_norm")] == 1.0  # replicated
    assert tp_imbalance(ds, 3)["moe.expert_intermediate_size"]["largest"] == 470  # ceil(1408 / 3)


@pytest.mark.parametrize("tp", [3, 5, 7, 12, 20, 40])
def test_fullest_rank_weights_between_even_share_and_total(tp):
    for name in ("llama2-13b", "llama3-8b", "mixtral-8x7b", "deepseek-v2-lite"):
        m = load_model(name)
        if tp > m.num_heads:
            continue
        w = weight_bytes_per_rank(m, None, tp)
        assert weight_bytes(m) / tp <= w * (1 + 1e-12) and w < weight_bytes(m), (name, tp)


def test_tp_beyond_heads_is_refused():
    m = load_model("llama2-13b")
    sc = Scenario(**FP16)
    msg = (
        "parallelism.tp: expected at most num_heads = 40 ranks for model llama2-13b (a rank would hold no "
        "attention heads), got 41"
    )
    for call in (
        lambda: build_trace(m, sc, "decode", tp=41),
        lambda: kv_cache_bytes(m, sc, 10, tp=41),
        lambda: tp_shards(m, 41),
    ):
        with pytest.raises(ConfigError) as e:
            call()
        assert str(e.value) == msg
    for bad in (0, -2, True, 2.0):
        with pytest.raises(ConfigError, match="parallelism.tp: expected a positive integer"):
            build_trace(m, sc, "decode", tp=bad)


def test_fast_even_path_agrees_with_the_rank_split():
    """build_trace's integer test for 'every rank alike' = no head/FFN entry in tp_imbalance, and
    then the old per-rank sizes are the contiguous split's."""
    from attnsim.workloads.trace import _rank_shards, _uneven

    for name in ("llama2-13b", "llama3-8b", "mixtral-8x7b", "deepseek-v2-lite", "gemma2-9b", "qwen2.5-7b"):
        m = load_model(name)
        for tp in range(1, m.num_heads + 1):
            uneven = any(k != "vocab_size" for k in tp_imbalance(m, tp))
            assert _uneven(m, tp) == uneven, (name, tp)
            if not uneven:
                s = _rank_shards(m, tp)
                kv = 1 if m.mla is not None or m.num_kv_heads < tp else m.num_kv_heads // tp
                assert np.all(s == s[0]) and tuple(s[0, :2]) == (m.num_heads // tp, kv), (name, tp)


def test_run_refuses_tp_beyond_heads_naming_the_system_file():
    exp = load_experiment(
        None,
        [
            "experiment.systems=[dgx_a100]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "systems.dgx_a100.devices.gpu.count=64",
            "systems.dgx_a100.parallelism.tp=64",
        ],
    )
    with pytest.raises(ConfigError) as e:
        run_experiment(exp)
    assert e.value.file is not None and "dgx_a100" in e.value.file
    assert str(e.value) == (
        f"{e.value.file}: parallelism.tp: expected at most num_heads = 32 ranks for model "
        "llama2-7b (a rank would hold no attention heads), got 64"
    )
