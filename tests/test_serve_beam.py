"""Beam search in attnsim serve (a scenario's beam_width; attnsim.studies.serve.scheduler): B beams share the
prompt's KV and grow their own, every decode step runs B sequences of the request, one output is returned.
Hand-derived: the iteration times, the KV blocks held, the decode FLOPs; refusals where it is not modelled."""

import math

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.core.config import ConfigError, validate
from attnsim.studies.serve.run import quick_pool
from attnsim.studies.serve.scheduler import beam_tokens, simulate_pool
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace, kv_bytes_per_token_per_layer, param_count

EXACT = {"memo": {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}}
P, O = 300, 6  # prompt and output tokens of the one request


def _one(beams, reads="per_beam"):
    pool, _, _ = quick_pool(scenario={"beam_width": beams, "beam_prompt_reads": reads}, serving=EXACT)
    return pool, simulate_pool(pool, np.zeros(1), np.array([P]), np.array([O]))


def test_beam_tokens_by_hand():
    # prompt 100 shared by 4 beams, 10 generated tokens each: 100 + 4 x 10
    assert int(beam_tokens(110, 100, 4)) == 140
    assert int(beam_tokens(90, 100, 4)) == 90  # still in prefill: the prompt's tokens only
    assert int(beam_tokens(110, 100, 1)) == 110


def test_a_beam_request_is_one_prefill_then_b_decodes_per_step():
    B = 4
    pool, r = _one(B)
    c = pool.coster
    t = c.exact([P], [P]).time_s  # the prompt is prefilled once (its KV shared by the beams)
    assert r.first_token_s[0] == pytest.approx(t, rel=1e-12)
    for j in range(1, O):  # step j: B sequences, each attending to the prompt + its own j tokens
        t += c.exact([P + j] * B, [1] * B).time_s
    assert r.finish_s[0] == pytest.approx(t, rel=1e-12)
    assert r.iterations == O  # one prefill + O - 1 decode steps: one output of O tokens


def test_prompt_read_once_is_b_query_rows_over_the_shared_kv():
    """beam_prompt_reads: once (XQA-style kernels): step j is B query rows over prompt + B x j tokens of KV."""
    B = 4
    pool, r = _one(B, "once")
    c = pool.coster
    t = c.exact([P], [P]).time_s
    for j in range(1, O):
        t += c.exact([int(beam_tokens(P + j, P, B))], [B], "decode").time_s
    assert r.finish_s[0] == pytest.approx(t, rel=1e-12)
    # KV bytes one decode step reads (all layers, one rank): the prompt once + each beam's j tokens, against
    # every beam reading its whole context (per_beam); llama3-8b fp16 KV: 2 x 8 kv heads x 128 x 2 B x 32 layers
    m, sc = pool.model, pool.sc
    per_tok = kv_bytes_per_token_per_layer(m, sc.kv_dtype) * m.num_layers
    assert per_tok == 2 * 8 * 128 * 2 * 32
    j = 3
    once = build_trace(m, sc, "decode", context_lens=[P + B * j], query_tokens=[B]).total("kv_read_bytes")
    per_beam = build_trace(m, sc, "decode", context_lens=[P + j] * B, query_tokens=[1] * B).total("kv_read_bytes")
    assert once == (P + B * j) * per_tok  # 312 tokens
    assert per_beam == B * (P + j) * per_tok  # 1,212 tokens


def test_beams_share_the_prompt_kv_and_grow_their_own():
    # the last KV written is token P + O - 1 (the last emitted token's KV is never written): the prompt's P
    # tokens once, the O - 1 generated ones per beam; blocks of 16 tokens (serving.kv.block_tokens default)
    for B in (1, 4):
        _, r = _one(B)
        assert r.stats["peak_kv_blocks"] == math.ceil((P + B * (O - 1)) / 16)  # B=1: 306 -> 20; B=4: 320 -> 20
    pool = quick_pool(scenario={"beam_width": 8}, serving=EXACT)[0]
    r = simulate_pool(pool, np.zeros(1), np.array([P]), np.array([40]))
    assert r.stats["peak_kv_blocks"] == math.ceil((P + 8 * 39) / 16)  # 612 tokens -> 39 blocks (vs 339 -> 22)


def test_beam_decode_flops_by_hand():
    """Decode FLOPs of B beams = B x one sequence's; one sequence's per token ~ 2 x the non-embedding
    parameters (every weight a multiply-add) + 4 x L x q_heads x head_dim x context (QK^T and PV)."""
    B = 4
    flops = {}
    for beams in (1, B):
        pool, _ = _one(beams)
        prefill = pool.coster.exact([P], [P]).flops
        flops[beams] = pool.coster.total().flops - prefill
    assert flops[B] == pytest.approx(B * flops[1], rel=1e-9)
    m = pool.model
    linear = 2 * (param_count(m) - m.vocab_size * m.hidden_size)  # lm_head counted, the input embedding not
    attn = sum(4 * m.num_layers * m.num_heads * m.head_dim * (P + j) for j in range(1, O))
    hand = (O - 1) * linear + attn
    assert flops[1] == pytest.approx(hand, rel=0.01)  # norms, activations, softmax, sampling: < 1 %


def test_beam_width_refused_where_not_modelled(capsys):
    with pytest.raises(ConfigError, match="beam_width"):
        validate(Scenario, {"beam_width": 0})
    with pytest.raises(ConfigError, match="beam_prompt_reads"):  # one beam: nothing shared, no effect
        validate(Scenario, {"beam_prompt_reads": "once"})
    with pytest.raises(ConfigError, match="speculative"):
        validate(Scenario, {"beam_width": 2, "speculative": {"draft_model": "llama3-8b"}})
    # attnsim run (a static batch) does not model beams: refused, not ignored
    rc = main(["run", "--set", "experiment.systems=[dgx_h100]", "--set", "experiment.scenarios.chat.beam_width=4"])
    err = capsys.readouterr().err
    assert rc != 0 and "beam_width" in err and err.startswith("error: ")
    # a KV policy that drops tokens: beams are modelled on the full cache only
    rc = main(["serve", "serve_eviction", "--set", "experiment.scenarios.long.beam_width=4"])
    err = capsys.readouterr().err
    assert rc != 0 and "beam_width" in err and "snapkv" in err
