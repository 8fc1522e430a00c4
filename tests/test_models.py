"""Model zoo, HF config loader and parameter / KV-size hand calculations.

Published numbers: shared/reference/models.md §1 (dims, derived KV sizes per token) and
the task brief's published model sizes (Llama-2 paper arXiv 2307.09288: 7B / 70B; GPT-3 paper
arXiv 2005.14165 Table 2.1: 175.0B; Mixtral paper arXiv 2401.04088: 46.7B total).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnsim.core.config import ConfigError
from attnsim.workloads.hf import model_from_hf_config
from attnsim.workloads.model import ModelSpec
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import kv_cache_bytes, param_count, weight_bytes
from attnsim.workloads.zoo import list_models, load_model

HF_DIR = Path(__file__).parent / "data" / "hf_configs"
HF_TO_ZOO = {
    "Llama-2-7b-hf.json": "llama2-7b",
    "Llama-2-13b-hf.json": "llama2-13b",
    "Llama-2-70b-hf.json": "llama2-70b",
    "Meta-Llama-3-8B.json": "llama3-8b",
    "Meta-Llama-3-70B.json": "llama3-70b",
    "Llama-3.1-405B.json": "llama3.1-405b",
    "Mistral-7B-v0.1.json": "mistral-7b",
    "Mixtral-8x7B-v0.1.json": "mixtral-8x7b",
    "gpt3-175b.json": "gpt3-175b",
    "opt-66b.json": "opt-66b",
    "gemma-2-9b.json": "gemma2-9b",
    "DeepSeek-V2-Lite.json": "deepseek-v2-lite",
    "Qwen2.5-7B.json": "qwen2.5-7b",
}
ZOO = sorted(HF_TO_ZOO.values())


def test_zoo_lists_every_model_and_names_match_files():
    names = list_models()
    for name in ZOO:
        assert name in names
        m = load_model(name)
        assert m.name == name
        assert "models.md" in m.source or "hf_configs" in m.source


def test_every_hf_config_is_copied_and_mapped():
    assert sorted(p.name for p in HF_DIR.glob("*.json")) == sorted(HF_TO_ZOO)


@pytest.mark.parametrize("fname", sorted(HF_TO_ZOO))
def test_hf_config_equals_zoo_yaml(fname):
    hf = model_from_hf_config(HF_DIR / fname)
    zoo = load_model(HF_TO_ZOO[fname])
    skip = {"name", "source"}
    a = {k: v for k, v in hf.model_dump().items() if k not in skip}
    b = {k: v for k, v in zoo.model_dump().items() if k not in skip}
    assert a == b


def test_load_model_accepts_paths(tmp_path):
    js = load_model(str(HF_DIR / "Llama-2-7b-hf.json"))
    assert js.num_layers == 32 and js.name == "Llama-2-7b-hf"
    y = tmp_path / "tiny.yaml"
    y.write_text(
        "name: tiny\nnum_layers: 2\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 2\nhead_dim: 16\n"
        "intermediate_size: 128\nvocab_size: 100\n"
    )
    assert load_model(str(y)).num_kv_heads == 2


# ------------------------------------------------------------------ published sizes


def test_llama2_7b_param_count_by_hand():
    h, inter, L, V = 4096, 11008, 32, 32000
    per_layer = 4 * h * h + 3 * h * inter + 2 * h  # q,k,v,o + gate,up,down + 2 RMSNorm
    assert param_count(load_model("llama2-7b")) == L * per_layer + 2 * V * h + h


@pytest.mark.parametrize(
    "name,published",
    [
        ("llama2-7b", 6.74e9),
        ("llama2-70b", 6.9e10),
        ("gpt3-175b", 1.75e11),
        ("mixtral-8x7b", 4.67e10),
    ],
)
def test_param_count_matches_published(name, published):
    assert param_count(load_model(name)) == pytest.approx(published, rel=0.02)


def test_weight_bytes_scale_with_dtype():
    m = load_model("llama2-70b")
    assert weight_bytes(m, "fp16") == 2 * param_count(m)
    assert weight_bytes(m, "int4") == 0.5 * param_count(m)
    assert weight_bytes(m) == weight_bytes(m, "fp16")  # published dtype float16


@pytest.mark.parametrize(
    "name,kib",
    [  # reference/models.md §1 "Derived KV-cache size per token" (16-bit)
        ("llama2-7b", 512),
        ("llama2-13b", 800),
        ("llama2-70b", 320),
        ("llama3-8b", 128),
        ("llama3-70b", 320),
        ("llama3.1-405b", 504),
        ("mistral-7b", 128),
        ("mixtral-8x7b", 128),
        ("opt-66b", 2304),
        ("gemma2-9b", 336),
        ("qwen2.5-7b", 56),
        ("gpt3-175b", 4608),
    ],
)
def test_kv_bytes_per_token_match_reference_table(name, kib):
    assert kv_cache_bytes(load_model(name), Scenario(kv_dtype="fp16"), 1) == kib * 1024


def test_kv_bytes_hand_values():
    fp16 = Scenario(kv_dtype="fp16")
    assert kv_cache_bytes(load_model("llama2-70b"), fp16, 1) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_cache_bytes(load_model("deepseek-v2-lite"), fp16, 1) == (512 + 64) * 2 * 27 == 31_104


def test_kv_cache_window_caps_local_layers():
    fp16 = Scenario(kv_dtype="fp16")
    mistral, gemma = load_model("mistral-7b"), load_model("gemma2-9b")
    per_tok = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(mistral, fp16, 8192) == per_tok * 4096
    # Gemma-2: 21 global layers keep 8192 tokens, 21 local layers 4096 (2 x 8 x 256 x 2 B per layer)
    assert kv_cache_bytes(gemma, fp16, [8192]) == 2 * 8 * 256 * 2 * (21 * 8192 + 21 * 4096)


def test_model_structure_flags():
    assert load_model("gemma2-9b").layer_kinds()[:4] == ["local", "global", "local", "global"]
    assert set(load_model("mistral-7b").layer_kinds()) == {"local"}
    ds = load_model("deepseek-v2-lite")
    assert ds.mla.kv_lora_rank == 512 and ds.moe.first_dense_layers == 1 and ds.mla.q_lora_rank is None
    g = load_model("gpt3-175b")
    assert (g.ffn_gated, g.norm, g.position, g.bias) == (False, "layernorm", "learned", True)


# ------------------------------------------------------------------ bad configs


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = (
    "name: bad\nnum_layers: 2\nhidden_size: 64\nnum_heads: 4\nhead_dim: 16\nintermediate_size: 128\nvocab_size: 100\n"
)


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("num_kv_heads: 3\n", "num_kv_heads", "multiple"),
        ("num_kv_heads: 4\nlayer_pattern: [local]\n", "layer_pattern", "sliding_window"),
        (
            "num_kv_heads: 4\nmoe: {num_experts: 4, experts_per_token: 6, expert_intermediate_size: 8}\n",
            "moe.experts_per_token",
            "exceeds",
        ),
        ("num_kv_heads: 4\nwidth: 3\n", "width", "unknown key"),
        ("num_kv_heads: -1\n", "num_kv_heads", "positive"),
    ],
)
def test_bad_yaml_names_file_and_key(tmp_path, extra, key, words):
    p = _write(tmp_path, "bad.yaml", BASE + extra)
    with pytest.raises(ConfigError) as ei:
        load_model(str(p))
    assert ei.value.file and ei.value.file.endswith("bad.yaml")
    assert ei.value.key == key
    assert words in str(ei.value)


def test_hf_missing_fields_named(tmp_path):
    cfg = json.loads((HF_DIR / "Llama-2-7b-hf.json").read_text())
    del cfg["hidden_size"], cfg["num_hidden_layers"]
    p = tmp_path / "foo" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as ei:
        model_from_hf_config(p)
    assert str(ei.value).endswith(
        "config.json: hidden_size, num_hidden_layers: missing required field(s) for architecture LlamaForCausalLM"
    )
    assert "foo" in ei.value.file


def test_hf_unknown_architecture_and_bad_json(tmp_path):
    p = _write(tmp_path, "x.json", json.dumps({"architectures": ["FalconForCausalLM"], "hidden_size": 8}))
    with pytest.raises(ConfigError, match="x.json: architectures: unknown architecture 'FalconForCausalLM'"):
        load_model(str(p))
    q = _write(tmp_path, "y.json", "{not json")
    with pytest.raises(ConfigError, match="y.json: invalid JSON"):
        model_from_hf_config(q)


def test_hf_bad_value_names_file_and_key(tmp_path):
    cfg = json.loads((HF_DIR / "Meta-Llama-3-8B.json").read_text())
    cfg["num_key_value_heads"] = 5
    p = _write(tmp_path, "l3.json", json.dumps(cfg))
    with pytest.raises(ConfigError) as ei:
        model_from_hf_config(p)
    assert ei.value.file.endswith("l3.json") and ei.value.key == "num_kv_heads"


def test_hf_derived_fields():
    m = model_from_hf_config(HF_DIR / "gpt3-175b.json")
    assert m.intermediate_size == 4 * 12288 and m.num_kv_heads == 96 and m.head_dim == 128
    q = model_from_hf_config(HF_DIR / "Qwen2.5-7B.json")
    assert q.sliding_window is None and q.layer_pattern == ["global"]  # use_sliding_window false


def test_unknown_zoo_name_lists_available():
    with pytest.raises(ConfigError, match="unknown models config 'llama9'.*llama2-7b"):
        load_model("llama9")


def test_modelspec_schema_direct():
    with pytest.raises(Exception):
        ModelSpec(
            name="x",
            num_layers=1,
            hidden_size=8,
            num_heads=3,
            num_kv_heads=2,
            head_dim=4,
            intermediate_size=8,
            vocab_size=10,
        )
