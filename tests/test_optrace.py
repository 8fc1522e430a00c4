"""Op-trace builder: hand calculations, conservation laws and differential checks.

Dims from configs/models/*.yaml (reference/models.md §1). Hand formulas are written out here
independently of workloads/trace.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.workloads.optrace import OP_CLASSES
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import (
    attention_pairs,
    build_trace,
    expected_experts,
    kv_tokens_read,
    layer_groups,
    param_count,
)
from attnsim.workloads.zoo import load_model

FP16 = dict(kv_dtype="fp16", weight_dtype="fp16", act_dtype="fp16")


def rows(tr, op):
    return np.flatnonzero(tr["op"] == op)


def tot(tr, col, ops=None, cls=None):
    """Sum of col x count over rows whose op is in ops / whose cls is cls."""
    sel = np.ones(len(tr), bool)
    if ops is not None:
        sel &= np.isin(tr["op"], list(ops))
    if cls is not None:
        sel &= tr["cls"] == cls
    return float(np.sum(tr[col][sel] * tr["count"][sel]))


# ------------------------------------------------------------------ hand calculations


def test_llama2_7b_decode_by_hand():
    m = load_model("llama2-7b")
    tr = build_trace(m, Scenario(batch_size=1, prompt_len=2048, **FP16), "decode")
    L, h, inter, V, H, d, ctx = 32, 4096, 11008, 32000, 32, 128, 2049
    mm_params = L * (4 * h * h + 3 * h * inter) + V * h
    assert tot(tr, "flops", cls="matmul") == 2 * mm_params
    assert tot(tr, "flops", ops=["attn_score", "attn_context"]) == L * 2 * (2 * H * d * ctx)
    assert tot(tr, "kv_read_bytes") == L * 2 * H * d * 2 * ctx
    assert tot(tr, "kv_write_bytes") == L * 2 * H * d * 2
    # a decode step reads every weight once, plus the one embedding row of the token
    assert tot(tr, "weight_bytes") == 2 * (param_count(m) - V * h) + h * 2
    assert list(tr["cls"][rows(tr, "lm_head")]) == ["matmul"] and tr["m"][rows(tr, "lm_head")][0] == 1
    assert "allreduce" not in set(tr["cls"])
    assert set(tr["cls"]) <= set(OP_CLASSES)


def test_llama2_70b_decode_kv_and_flops():
    m = load_model("llama2-70b")
    sc = Scenario(batch_size=8, prompt_len=4095, **FP16)
    tr = build_trace(m, sc, "decode")
    assert tr.meta["kv_bytes_per_token_per_layer"] * 80 == 327_680
    assert tot(tr, "kv_read_bytes") == 327_680 * 4096 * 8
    # decode FLOPs per token ~ 2 x (params without the embedding table) + attention
    attn = 80 * 2 * 2 * 64 * 128 * 4096
    expect = 2 * (param_count(m) - 32000 * 8192) + attn
    assert tr.total("flops") / 8 == pytest.approx(expect, rel=0.01)
    assert tr.total("flops") / 8 > expect  # elementwise ops add a little, never subtract


def test_gpt3_decode_by_hand():
    m = load_model("gpt3-175b")
    tr = build_trace(m, Scenario(batch_size=1, prompt_len=2047, **FP16), "decode")
    h, L, V = 12288, 96, 50257
    assert "rope" not in set(tr["op"])  # learned positions
    per_layer = 12 * h * h  # qkv 3h^2 + out h^2 + MLP 8h^2
    bias_adds = L * (3 * h + h + 4 * h + h)  # one add per bias output
    assert tot(tr, "flops", cls="matmul") == 2 * (L * per_layer + V * h) + bias_adds
    assert tot(tr, "kv_read_bytes") == L * 2 * 96 * 128 * 2 * 2048
    assert tot(tr, "weight_bytes", ops=["embedding"]) == 2 * h * 2  # token + position row
    # tied lm_head reads the embedding matrix; every other weight read once
    assert tot(tr, "weight_bytes") - 2 * h * 2 == 2 * (param_count(m) - 2048 * h)


def test_prefill_causal_triangle():
    m = load_model("llama2-7b")
    tr = build_trace(m, Scenario(batch_size=2, prompt_len=2048, **FP16), "prefill")
    pairs = 2 * 2048 * 2049 // 2
    assert tot(tr, "flops", ops=["attn_score"]) == 32 * 2 * 32 * 128 * pairs
    assert tot(tr, "flops", ops=["softmax"]) == 32 * 5 * 32 * pairs
    assert tot(tr, "kv_write_bytes") == 32 * 2 * 32 * 128 * 2 * 4096
    assert tr["m"][rows(tr, "lm_head")][0] == 2  # last token of each request only
    assert tr["m"][rows(tr, "qkv_proj")][0] == 4096


def test_every_zoo_model_reads_each_weight_once_in_decode():
    """Independent paths: param_count (formulas) vs the trace rows (shapes), batch 1 decode."""
    for name in (
        "llama2-13b",
        "llama3-8b",
        "mistral-7b",
        "mixtral-8x7b",
        "opt-66b",
        "gemma2-9b",
        "deepseek-v2-lite",
        "qwen2.5-7b",
    ):
        m = load_model(name)
        tr = build_trace(m, Scenario(batch_size=1, prompt_len=100, **FP16), "decode")
        h = m.hidden_size
        expect = param_count(m) - (0 if m.tie_word_embeddings else m.vocab_size * h)
        if m.position == "learned":
            expect -= m.max_position_embeddings * h
        if m.moe is not None:  # one token touches top-k of the routed experts
            e = m.moe
            expect -= (
                (m.num_layers - e.first_dense_layers)
                * (e.num_experts - e.experts_per_token)
                * 3
                * h
                * e.expert_intermediate_size
            )
        emb = tot(tr, "weight_bytes", ops=["embedding"])
        assert tot(tr, "weight_bytes") - emb == pytest.approx(2 * expect, rel=1e-12), name


def test_mixtral_moe_rows():
    m = load_model("mixtral-8x7b")
    tr = build_trace(m, Scenario(batch_size=1, prompt_len=10, **FP16), "decode")
    up = rows(tr, "moe_expert_up")[0]
    assert tr["batch"][up] == 2 and tr["count"][up] == 32
    assert tr["weight_bytes"][up] == pytest.approx(2 * 4096 * 2 * 14336 * 2)
    assert tr["flops"][up] == 2 * 2 * 4096 * 2 * 14336
    # a big batch touches every expert
    big = build_trace(m, Scenario(batch_size=256, prompt_len=10, **FP16), "decode")
    up = rows(big, "moe_expert_up")[0]
    assert big["batch"][up] == 8
    assert big["weight_bytes"][up] == pytest.approx(8 * 4096 * 2 * 14336 * 2)
    assert big["flops"][up] == 2 * 256 * 2 * 4096 * 2 * 14336  # FLOPs follow tokens, not experts


def test_expected_experts_matches_monte_carlo():
    rng = np.random.default_rng(1)
    E, k, T, trials = 16, 2, 5, 4000
    seen = [len({e for _ in range(T) for e in rng.choice(E, size=k, replace=False)}) for _ in range(trials)]
    assert np.mean(seen) == pytest.approx(expected_experts(T, E, k), abs=0.1)
    assert expected_experts(1, 64, 6) == pytest.approx(6)
    assert expected_experts(10_000, 64, 6) == pytest.approx(64)


def test_deepseek_mla_trace():
    m = load_model("deepseek-v2-lite")
    tr = build_trace(m, Scenario(batch_size=1, prompt_len=999, **FP16), "decode")
    assert [(g.name, g.num_layers) for g in tr.groups] == [("global_dense", 1), ("global_moe", 26)]
    assert tot(tr, "kv_read_bytes", ops=["attn_score"]) == 31_104 * 1000  # latent read once
    assert tot(tr, "kv_read_bytes", ops=["attn_context"]) == 0
    assert tot(tr, "kv_write_bytes") == 31_104
    s = rows(tr, "attn_score")[0]
    assert (tr["k"][s], tr["batch"][s]) == (512 + 64, 16)
    assert tot(tr, "flops", ops=["attn_score"]) == 27 * 2 * 16 * 576 * 1000
    assert tot(tr, "flops", ops=["attn_context"]) == 27 * 2 * 16 * 512 * 1000
    # shared experts run on every token: 2 x 1408 wide
    sh = rows(tr, "moe_shared_up")[0]
    assert tr["n"][sh] == 2 * 2 * 1408 and tr["count"][sh] == 26


# ------------------------------------------------------------------ tensor parallelism

SHARDED = (
    "qkv_proj",
    "rope",
    "attn_score",
    "softmax",
    "attn_context",
    "out_proj",
    "mlp_up",
    "mlp_act",
    "mlp_down",
    "lm_head",
    "moe_expert_up",
    "moe_act",
    "moe_expert_down",
)
REPLICATED = ("attn_norm", "ffn_norm", "attn_residual", "ffn_residual", "embedding", "final_norm", "moe_router")


@pytest.mark.parametrize("name,tp", [("llama2-70b", 2), ("llama2-70b", 8), ("mixtral-8x7b", 4), ("llama2-7b", 4)])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_tp_conserves_sharded_totals(name, tp, phase):
    m = load_model(name)
    sc = Scenario(batch_size=3, context_lens=[100, 257, 31], **FP16)
    one = build_trace(m, sc, phase)
    part = build_trace(m, sc, phase, tp=tp)
    # (act_bytes are not conserved: every rank reads the whole input of a column-parallel matmul)
    for col in ("flops", "weight_bytes", "kv_read_bytes", "kv_write_bytes"):
        for op in SHARDED:
            assert tp * tot(part, col, ops=[op]) == pytest.approx(tot(one, col, ops=[op]), rel=1e-12), (op, col)
        for op in REPLICATED:
            assert tot(part, col, ops=[op]) == pytest.approx(tot(one, col, ops=[op]), rel=1e-12), (op, col)
    T = 388 if phase == "prefill" else 3
    ar = rows(part, "attn_allreduce")
    assert part["comm_bytes"][ar][0] == pytest.approx(2 * (tp - 1) / tp * T * m.hidden_size * 2)
    assert tot(part, "comm_bytes") == pytest.approx(2 * m.num_layers * part["comm_bytes"][ar][0])
    assert part.meta["heads_per_rank"] == m.num_heads // tp


def test_kv_heads_replicated_when_fewer_than_tp():
    m = load_model("llama2-70b")  # 8 KV heads
    sc = Scenario(batch_size=1, prompt_len=1000, **FP16)
    t16 = build_trace(m, sc, "decode", tp=16)
    one = build_trace(m, sc, "decode")
    assert t16.meta["kv_heads_per_rank"] == 1 and t16.meta["heads_per_rank"] == 4
    assert 16 * t16.total("kv_read_bytes") == 2 * one.total("kv_read_bytes")


def test_bad_tp_and_inputs():
    m = load_model("llama2-7b")
    sc = Scenario(**FP16)
    with pytest.raises(
        ConfigError,
        match="parallelism.tp: expected at most num_heads = 32 ranks for model "
        "llama2-7b .a rank would hold no attention heads., got 33",
    ):
        build_trace(m, sc, "decode", tp=33)
    with pytest.raises(ConfigError, match="phase"):
        build_trace(m, sc, "training")
    with pytest.raises(ConfigError, match="context_lens"):
        build_trace(m, sc, "decode", context_lens=np.array([4]), query_tokens=np.array([8]))
    with pytest.raises(ConfigError, match="query_tokens"):
        build_trace(m, sc, "decode", context_lens=np.array([4, 5]), query_tokens=np.array([1]))


# ------------------------------------------------------------------ KV shrinking


def test_gqa_and_mqa_shrink_kv_reads_not_flops():
    mha = load_model("llama2-70b").model_copy(update={"num_kv_heads": 64})
    gqa = load_model("llama2-70b")
    mqa = gqa.model_copy(update={"num_kv_heads": 1})
    sc = Scenario(batch_size=2, prompt_len=3000, **FP16)
    tr = {k: build_trace(mm, sc, "decode") for k, mm in (("mha", mha), ("gqa", gqa), ("mqa", mqa))}
    kv = {k: t.total("kv_read_bytes") for k, t in tr.items()}
    assert kv["mha"] == 8 * kv["gqa"] == 64 * kv["mqa"]
    f = {k: tot(t, "flops", ops=["attn_score", "attn_context"]) for k, t in tr.items()}
    assert f["mha"] == f["gqa"] == f["mqa"]


@pytest.mark.parametrize("dtype,ratio", [("fp8", 0.5), ("int8", 0.5), ("int4", 0.25)])
def test_quantised_kv_shrinks_bytes(dtype, ratio):
    m = load_model("llama3-8b")
    base = build_trace(m, Scenario(batch_size=4, prompt_len=500, **FP16), "decode")
    q = build_trace(
        m, Scenario(batch_size=4, prompt_len=500, kv_dtype=dtype, weight_dtype="fp16", act_dtype="fp16"), "decode"
    )
    for col in ("kv_read_bytes", "kv_write_bytes"):
        assert q.total(col) == ratio * base.total(col)
    assert q.total("weight_bytes") == base.total("weight_bytes")


# ------------------------------------------------------------------ sliding windows


def test_mistral_window_caps_reads_at_4096():
    mis, l3 = load_model("mistral-7b"), load_model("llama3-8b")  # same attention dims, l3 global
    sc = Scenario(batch_size=1, prompt_len=8191, **FP16)
    tm, tl = build_trace(mis, sc, "decode"), build_trace(l3, sc, "decode")
    assert tm["n"][rows(tm, "attn_score")][0] == 4096
    assert tl["n"][rows(tl, "attn_score")][0] == 8192
    assert tot(tm, "kv_read_bytes") == 32 * 2 * 8 * 128 * 2 * 4096
    assert 2 * tot(tm, "kv_read_bytes") == tot(tl, "kv_read_bytes")
    short = Scenario(batch_size=1, prompt_len=1000, **FP16)  # below the window nothing changes
    assert build_trace(mis, short, "decode").total("kv_read_bytes") == build_trace(l3, short, "decode").total(
        "kv_read_bytes"
    )


def test_gemma2_mixes_local_and_global():
    g = load_model("gemma2-9b")
    assert [(x.attention, x.num_layers, x.window) for x in layer_groups(g)] == [("local", 21, 4096), ("global", 21, 0)]
    tr = build_trace(g, Scenario(batch_size=1, prompt_len=8191, **FP16), "decode")
    s = rows(tr, "attn_score")
    assert sorted(tr["n"][s]) == [4096, 8192]
    per_layer_tok = 8 * 256 * 2  # K only
    assert tot(tr, "kv_read_bytes", ops=["attn_score"]) == 21 * per_layer_tok * (4096 + 8192)


def _pairs_slow(c, q, w):
    tot_ = 0
    for ci, qi in zip(c, q):
        for pos in range(ci - qi, ci):
            tot_ += min(pos + 1, w) if w else pos + 1
    return tot_


def _uniq_slow(c, q, w):
    tot_ = 0
    for ci, qi in zip(c, q):
        seen = set()
        for pos in range(ci - qi, ci):
            lo = max(0, pos + 1 - w) if w else 0
            seen.update(range(lo, pos + 1))
        tot_ += len(seen)
    return tot_


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 300), st.integers(0, 299)), min_size=1, max_size=4),
    st.sampled_from([0, 1, 7, 64, 500]),
)
def test_attention_counts_match_slow_reference(reqs, w):
    c = np.array([a for a, _ in reqs])
    q = np.array([max(1, min(a, b)) for a, b in reqs])
    assert attention_pairs(c, q, w) == _pairs_slow(c, q, w)
    assert kv_tokens_read(c, q, w) == _uniq_slow(c, q, w)


def test_chunked_prefill_halves_add_up():
    """Two prefill chunks of 1024 cost the same attention FLOPs as one 2048 prefill."""
    m = load_model("mistral-7b")
    sc = Scenario(batch_size=1, prompt_len=6000, **FP16)
    full = build_trace(m, sc, "prefill")
    a = build_trace(m, sc, "prefill", context_lens=np.array([3000]), query_tokens=np.array([3000]))
    b = build_trace(m, sc, "prefill", context_lens=np.array([6000]), query_tokens=np.array([3000]))
    f = lambda t: tot(t, "flops", ops=["attn_score", "attn_context", "softmax"])  # noqa: E731
    assert f(a) + f(b) == f(full)


def test_meta_fields():
    tr = build_trace(load_model("qwen2.5-7b"), Scenario(batch_size=2, prompt_len=64, kv_dtype="int4"), "decode", tp=2)
    for k in (
        "heads_per_rank",
        "kv_heads_per_rank",
        "head_dim",
        "kv_bytes_per_token_per_layer",
        "kv_dtype",
        "weight_dtype",
        "act_dtype",
        "hidden_size",
        "num_layers",
    ):
        assert k in tr.meta
    assert tr.meta["kv_bytes_per_token_per_layer"] == 2 * 2 * 128 * 0.5
    assert list(tr.context_lens) == [65, 65] and list(tr.query_tokens) == [1, 1]


def test_deepseek_tp_splits_heads_and_experts_but_replicates_latent():
    m = load_model("deepseek-v2-lite")
    sc = Scenario(batch_size=2, prompt_len=300, **FP16)
    one, two = build_trace(m, sc, "decode"), build_trace(m, sc, "decode", tp=2)
    for op in (
        "mla_q_absorb",
        "mla_v_up",
        "attn_score",
        "attn_context",
        "out_proj",
        "moe_expert_up",
        "moe_expert_down",
        "moe_shared_up",
        "moe_shared_down",
        "mlp_up",
        "mlp_down",
    ):
        assert 2 * tot(two, "flops", ops=[op]) == pytest.approx(tot(one, "flops", ops=[op]), rel=1e-12), op
    # the latent cache is shared by all heads: every rank reads all of it
    assert tot(two, "kv_read_bytes") == tot(one, "kv_read_bytes")
