"""mapper/tiered.py against hand-derived numbers: the far tier's KV bytes, q / partial-output transfers, merge cost,
memory placement, and prefill left unsplit (issue 28 §5: these were unasserted, 48 % of mutants survived).

Setup (derivation inputs): tiered_attacc (tp = 8, hot_fraction 0.25 unless stated), llama3-8b (32 layers, 32 query
heads, 8 KV heads (GQA), head_dim 128, fp16 KV and activations: configs/models/llama3-8b.yaml), batch 4, prompt 512.
Per TP rank: 32 / 8 = 4 query heads, 8 / 8 = 1 KV head. A decode step attends over 512 prompt tokens + the new one
= 513 tokens per request, 4 x 513 = 2052 tokens in all. GQA makes heads (4) != KV heads (1), so a mutant that swaps
them changes every number below; fp16 = 2 B, so a dropped dtype factor halves them.
"""

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import get_policy, model_totals
from attnsim.sim.experiment import load_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

B, PROMPT, LAYERS, TP = 4, 512, 32, 8
HEADS, KV_HEADS, DH, FP16 = 32 // TP, 8 // TP, 128, 2  # per rank; fp16 = 2 bytes
TOKENS = B * (PROMPT + 1)  # 2052 tokens attended per decode step (prompt + new)
F = 0.25  # tiered_attacc's hot_fraction (configs/systems)


def _setup(model_name="llama3-8b", batch=B, prompt=PROMPT):
    exp = load_experiment(
        None,
        [
            "experiment.systems=[tiered_attacc]",
            "experiment.baseline=null",
            f"experiment.models=[{model_name}]",
            f"scenarios.chat.batch_size={batch}",
            f"scenarios.chat.prompt_len={prompt}",
            "scenarios.chat.output_len=4",
        ],
    )
    system = build_system(exp.systems["tiered_attacc"], exp.tree.hardware, exp.tree.file_of)
    return system, exp.models[model_name], exp.scenarios["chat"]


@pytest.fixture(scope="module")
def llama():
    return _setup()


def _plan(setup, phase, options):
    system, model, sc = setup
    tr = build_trace(model, sc, phase, tp=TP)
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 1),
        "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 1, tp=TP),
    }
    return tr, get_policy("tiered")(tr, system, mb, options)


def _rows(plan, op):
    """Layer-group-0 rows named op, as dicts (with device and stage)."""
    out = []
    for i, r in enumerate(plan.trace.rows()):
        if r["op"] == op and r["layer_group"] == 0:
            out.append(
                {
                    **r,
                    "device": plan.device[i],
                    "stage": int(plan.stage[i]) if plan.stage is not None else None,
                    "added": bool(plan.added[i]) if plan.added is not None else False,
                }
            )
    assert len(out) == 1, (op, len(out))
    return out[0]


def test_far_tier_reads_its_share_of_k_and_v_per_decode_step(llama):
    _, plan = _plan(llama, "decode", {"hot_fraction": F})
    # attn_score reads K, attn_context reads V: tokens x KV heads x head_dim x 2 B each
    k_bytes = TOKENS * KV_HEADS * DH * FP16  # 2052 x 1 x 128 x 2 = 525,312 B
    assert k_bytes == 525_312
    for op in ("attn_score", "attn_context"):
        far, hot = _rows(plan, op + "_far"), _rows(plan, op)
        assert far["kv_read_bytes"] == pytest.approx((1 - F) * k_bytes)  # 393,984 B on the far tier
        assert hot["kv_read_bytes"] == pytest.approx(F * k_bytes)  # 131,328 B in GPU HBM
        # the far part covers round(0.75 x 2052) = 1539 of the 2052 tokens, the hot part 513
        assert (far["n"], hot["n"]) == (1539, 513)
        assert (far["device"], hot["device"]) == ("pim", "gpu")
        # both halves run concurrently in the layer's stage (0), not serialised (-1)
        assert far["stage"] == hot["stage"] == 0
        # FLOPs split like the tokens: 2 x tokens x heads x head_dim per matmul (QK^T or PV), 0.75 of it far
        assert far["flops"] == pytest.approx((1 - F) * 2 * TOKENS * HEADS * DH)  # 1,575,936
        assert hot["flops"] + far["flops"] == pytest.approx(2 * TOKENS * HEADS * DH)
    # K and V over all layers: the far tier streams 2 x 0.75 x 525,312 x 32 = 25,214,976 B per decode step
    far_kv = sum(r["kv_read_bytes"] * r["count"] for r in plan.trace.rows() if str(r["op"]).endswith("_far"))
    assert far_kv == pytest.approx(2 * (1 - F) * k_bytes * LAYERS) == 25_214_976


def test_uneven_split_rounds_tokens_and_keeps_bytes_exact(llama):
    # hot_fraction 0.3: 0.3 x 2052 = 615.6 tokens -> 616 hot (rounded to whole tokens), 1436 far; bytes and FLOPs
    # are not rounded: 0.3 x 525,312 = 157,593.6 B of K hot, 367,718.4 B far
    _, plan = _plan(llama, "decode", {"hot_fraction": 0.3})
    hot, far = _rows(plan, "attn_score"), _rows(plan, "attn_score_far")
    assert (hot["n"], far["n"]) == (616, 1436)
    assert isinstance(hot["n"], (int, np.integer)) and isinstance(far["n"], (int, np.integer))
    assert hot["kv_read_bytes"] == pytest.approx(157_593.6, rel=1e-12)
    assert far["kv_read_bytes"] == pytest.approx(367_718.4, rel=1e-12)


def test_new_tokens_kv_is_written_to_the_hot_tier_only(llama):
    _, plan = _plan(llama, "decode", {"hot_fraction": F})
    # one new token per request: B x KV heads x head_dim x 2 B = 4 x 1 x 128 x 2 = 1024 B per op (K or V)
    for op in ("attn_score", "attn_context"):
        assert _rows(plan, op)["kv_write_bytes"] == B * KV_HEADS * DH * FP16 == 1024
        assert _rows(plan, op + "_far")["kv_write_bytes"] == 0.0
    # ... and the far tier's share of it (1 - F) leaves the sliding hot window over the link each step:
    # (1 - 0.25) x (1024 + 1024) = 1536 B per layer, after the context op and before the partials come back
    mig = _rows(plan, "far_migrate_kv")
    assert mig["comm_bytes"] == (1 - F) * 2 * B * KV_HEADS * DH * FP16 == 1536
    assert (mig["cls"], mig["device"], mig["stage"], mig["added"], mig["count"]) == (
        "transfer",
        "link:gpu_pim",
        -1,
        True,
        LAYERS,
    )
    ops = [str(o) for o, g in zip(plan.trace["op"], plan.trace["layer_group"]) if g == 0]
    assert ops.index("attn_context_far") < ops.index("far_migrate_kv") < ops.index("far_partial_out")


def test_q_transfer_partial_outputs_and_merge_cost(llama):
    _, plan = _plan(llama, "decode", {"hot_fraction": F})
    send, part, merge = _rows(plan, "far_send_q"), _rows(plan, "far_partial_out"), _rows(plan, "softmax_merge")
    # q of the new token: B x query heads x head_dim x 2 B = 4 x 4 x 128 x 2 = 4096 B (query heads, not KV heads)
    assert send["comm_bytes"] == B * HEADS * DH * FP16 == 4096
    # partial output (head_dim) + running max and sum (2 values) per query head: 4 x 4 x (128 + 2) x 2 = 4160 B
    assert part["comm_bytes"] == B * HEADS * (DH + 2) * FP16 == 4160
    for row in (send, part):
        assert (row["cls"], row["device"], row["stage"], row["added"]) == ("transfer", "link:gpu_pim", -1, True)
        assert row["count"] == LAYERS  # once per layer
    # merge (FlashAttention partial-softmax rescale): per output element 2 rescales, 1 add, 1 divide = 4 FLOPs;
    # reads both partial blocks and writes one: 3 x B x heads x (head_dim + 2) x 2 B
    assert merge["flops"] == 4 * B * HEADS * DH == 8192
    assert merge["act_bytes"] == 3 * B * HEADS * (DH + 2) * FP16 == 12_480
    assert (merge["m"], merge["n"]) == (B, HEADS * DH)  # (4, 512): one row per request
    assert merge["kv_read_bytes"] == merge["kv_write_bytes"] == merge["weight_bytes"] == merge["comm_bytes"] == 0.0
    assert (merge["k"], merge["batch"], merge["cls"]) == (0, 1, "elementwise")  # one elementwise pass
    assert (merge["device"], merge["stage"], merge["added"]) == ("gpu", -1, True)
    # order: q goes before the score, partials come back after the context op, then the merge
    ops = [str(o) for o, g in zip(plan.trace["op"], plan.trace["layer_group"]) if g == 0]
    i = ops.index
    assert (
        i("far_send_q")
        < i("attn_score")
        < i("attn_score_far")
        < i("attn_context_far")
        < i("far_partial_out")
        < i("softmax_merge")
        < i("out_proj")
    )


def test_mla_q_uses_score_dim_and_partials_use_context_dim():
    # deepseek-v2-lite (MLA): 16 heads / tp 8 = 2 per rank; q . latent over attn_score_dim = kv_lora_rank 512 +
    # rope 64 = 576; the output lives in attn_context_dim = 512 (configs/models/deepseek-v2-lite.yaml)
    setup = _setup("deepseek-v2-lite", batch=2, prompt=100)
    tr, plan = _plan(setup, "decode", {"hot_fraction": F})
    assert (tr.meta["attn_score_dim"], tr.meta["attn_context_dim"], tr.meta["heads_per_rank"]) == (576, 512, 2)
    assert _rows(plan, "far_send_q")["comm_bytes"] == 2 * 2 * 576 * FP16 == 4608
    assert _rows(plan, "far_partial_out")["comm_bytes"] == 2 * 2 * (512 + 2) * FP16 == 4112
    merge = _rows(plan, "softmax_merge")
    assert (merge["flops"], merge["act_bytes"], merge["n"]) == (4 * 2 * 2 * 512, 3 * 2 * 2 * 514 * FP16, 2 * 512)


def test_memory_placement_splits_kv_by_hot_fraction(llama):
    system, model, sc = llama
    _, plan = _plan(llama, "decode", {"hot_fraction": F})
    # KV per rank: 4 requests x 513 tokens x 32 layers x 2 (K, V) x 1 KV head x 128 x 2 B = 33,619,968 B
    kv_rank = B * (PROMPT + 1) * LAYERS * 2 * KV_HEADS * DH * FP16
    assert kv_rank == 33_619_968
    gpu, far = plan.memory
    assert (gpu.role, far.role) == ("gpu", "pim")
    assert gpu.kv_bytes == pytest.approx(F * kv_rank)  # 8,404,992 B
    assert far.kv_bytes == pytest.approx((1 - F) * kv_rank)  # 25,214,976 B
    assert far.weights_bytes == 0.0
    assert gpu.weights_bytes == pytest.approx(weight_bytes(model, sc.weight_dtype) / TP)


def test_model_work_is_conserved_and_only_attention_moves(llama):
    tr, plan = _plan(llama, "decode", {"hot_fraction": F})
    before, after = model_totals(tr), model_totals(plan.trace, plan.added)
    for k in before:
        assert after[k] == pytest.approx(before[k], rel=1e-12), k
    # 3 attention ops split in two + q send + K/V migration + partials + merge = 3 + 4 rows added per layer group
    assert len(plan.trace) == len(tr) + 7
    on_far = {str(o) for o, d in zip(plan.trace["op"], plan.device) if d == "pim"}
    assert on_far == {"attn_score_far", "softmax_far", "attn_context_far"}
    dev = dict(zip(plan.trace["op"], plan.device))
    assert dev["attn_allreduce"] == dev["mlp_allreduce"] == "link"
    assert dev["qkv_proj"] == dev["mlp_down"] == dev["lm_head"] == "gpu"


def test_prefill_stays_unsplit_on_the_gpu(llama):
    tr, plan = _plan(llama, "prefill", {"hot_fraction": F})
    ops = [str(o) for o in plan.trace["op"]]
    assert not any(o.endswith("_far") or o.startswith("far_") or o == "softmax_merge" for o in ops)
    dev = dict(zip(ops, plan.device))
    assert dev["attn_score"] == dev["softmax"] == dev["attn_context"] == "gpu"
    assert dev["attn_allreduce"] == "link"
    orig = {str(r["op"]): r for r in tr.rows() if r["layer_group"] == 0}  # attention rows untouched
    for op in ("attn_score", "softmax", "attn_context"):
        new = _rows(plan, op)
        for c in ("n", "flops", "kv_read_bytes", "kv_write_bytes", "act_bytes"):
            assert new[c] == orig[op][c], (op, c)
    # one write of the prompt's K/V to the far tier per layer, over the GPU <-> PIM link; the prompt's KV
    # per rank and layer is 2048 tokens x 2 (K, V) x 1 KV head x 128 x 2 B = 1,048,576 B; only the far share
    # crosses (the recent F stays in HBM): 0.75 x 1,048,576 = 786,432 B
    w = _rows(plan, "pim_write_kv")
    full = B * PROMPT * 2 * KV_HEADS * DH * FP16
    assert full == 1_048_576
    assert w["device"] == "link:gpu_pim" and w["count"] == LAYERS
    assert w["comm_bytes"] == (1 - F) * full == 786_432
    assert len(plan.trace) == len(tr) + 1  # the write-back row only


def test_hot_fraction_one_keeps_everything_on_the_gpu(llama):
    tr, plan = _plan(llama, "decode", {"hot_fraction": 1.0})
    assert len(plan.trace) == len(tr)  # nothing split, nothing added
    assert set(plan.device) == {"gpu", "link"}
    gpu, far = plan.memory
    assert far.kv_bytes == 0.0 and gpu.kv_bytes == pytest.approx(B * (PROMPT + 1) * LAYERS * 2 * KV_HEADS * DH * FP16)


def test_hot_fraction_zero_is_the_attacc_placement(llama):
    system, model, sc = llama
    tr, plan = _plan(llama, "decode", {"hot_fraction": 0.0})
    assert plan.policy == "tiered"
    dev = dict(zip(plan.trace["op"], plan.device))
    assert dev["attn_score"] == dev["attn_context"] == "pim"
    assert "attn_score_far" not in dev and "softmax_merge" not in dev
    assert plan.memory[0].kv_bytes == 0.0
    assert plan.memory[1].kv_bytes == pytest.approx(B * (PROMPT + 1) * LAYERS * 2 * KV_HEADS * DH * FP16)


@pytest.mark.parametrize("bad", [-0.01, 1.01])
def test_hot_fraction_outside_unit_interval_refused(llama, bad):
    with pytest.raises(ConfigError, match="hot_fraction"):
        _plan(llama, "decode", {"hot_fraction": bad})
