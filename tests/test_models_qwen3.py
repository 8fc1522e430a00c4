"""Qwen3 dense presets (configs/models/qwen3-*.yaml): the dims give the published parameter counts.

Qwen3 technical report / model cards: Qwen3-8B 8.2 B, Qwen3-14B 14.8 B, Qwen3-32B 32.8 B parameters (untied
embeddings, 151,936-token vocabulary); ML.ENERGY lists them as 8 / 14 / 32 B (nominal)."""

from __future__ import annotations

import pytest

from attnsim.workloads.trace import param_count
from attnsim.workloads.zoo import load_model


@pytest.mark.parametrize("name,billions", [("qwen3-8b", 8.2), ("qwen3-14b", 14.8), ("qwen3-32b", 32.8)])
def test_qwen3_parameter_count(name, billions):
    m = load_model(name)
    # hand formula: embeddings + lm_head (untied) + layers x (q, k, v, o + gated FFN); norms are < 0.01 %
    h, q, kv = m.hidden_size, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    hand = 2 * m.vocab_size * h + m.num_layers * (h * q + 2 * h * kv + q * h + 3 * h * m.intermediate_size)
    assert param_count(m) == pytest.approx(hand, rel=1e-4)
    assert param_count(m) / 1e9 == pytest.approx(billions, abs=0.05)
