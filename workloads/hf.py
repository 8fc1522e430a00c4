"""Map a HuggingFace ``config.json`` onto a :class:`ModelSpec`.

Supported ``architectures[0]``: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM,
Qwen2ForCausalLM, Gemma2ForCausalLM, OPTForCausalLM, DeepseekV2ForCausalLM and GPT-2 style
files (GPT2LMHeadModel; used by reference/hf_configs/gpt3-175b.json). Field semantics follow
the HF transformers configuration classes of those models; the defaults used when a field is
absent are the class defaults (e.g. ``num_key_value_heads`` = heads, GPT-2 ``n_inner`` = 4 x
``n_embd``, Gemma-2 ``tie_word_embeddings`` true). ``torch_dtype`` float32 maps to bf16 (the
published fp32 Gemma-2 weights are served in bf16, reference/models.md §1); a missing
``torch_dtype`` maps to fp16.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from attnsim.core.config import ConfigError, display_path, read_text_file, validate
from attnsim.workloads.model import ModelSpec

_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "bf16", "fp16": "fp16", "bf16": "bf16"}

# architecture -> (family, required HF fields)
_LLAMA_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
ARCHITECTURES = {
    "LlamaForCausalLM": ("llama", _LLAMA_FIELDS),
    "MistralForCausalLM": ("llama", _LLAMA_FIELDS),
    "Qwen2ForCausalLM": ("llama", _LLAMA_FIELDS),
    "MixtralForCausalLM": ("llama", _LLAMA_FIELDS + ("num_local_experts", "num_experts_per_tok")),
    "Gemma2ForCausalLM": ("llama", _LLAMA_FIELDS),
    "OPTForCausalLM": ("opt", ("hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim", "vocab_size")),
    "GPT2LMHeadModel": ("gpt2", ("n_embd", "n_layer", "n_head", "vocab_size")),
    "DeepseekV2ForCausalLM": (
        "deepseek",
        _LLAMA_FIELDS
        + (
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
        ),
    ),
}


def _div(a, b):
    """a // b; non-integers pass through for the schema to reject."""
    return a // b if isinstance(a, int) and isinstance(b, int) and b > 0 else a


def _head_dim(cfg: dict, hidden, heads, file: str, keys: tuple[str, str]):
    """``head_dim`` if the config gives it, else hidden / heads, refused when not a whole number (it was truncated,
    issue 31): ``keys`` are the config's names of hidden size and heads."""
    if cfg.get("head_dim") is not None:
        return cfg["head_dim"]
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
        raise ConfigError(
            f"expected {keys[0]} divisible by {keys[1]} ({heads}; head_dim = {keys[0]} / {keys[1]}), or "
            f"head_dim given explicitly, got {hidden}",
            file=file,
            key=keys[0],
        )
    return _div(hidden, heads)


def _name(path: Path, cfg: dict) -> str:
    """The model's name: the last part of ``_name_or_path`` (``meta-llama/Llama-2-7b-hf`` ->
    ``Llama-2-7b-hf``), else the folder of a ``config.json``, else the file stem; characters
    other than letters, digits, ``._-`` become ``-``."""
    raw = str(cfg.get("_name_or_path") or "").replace("\\", "/").rstrip("/").split("/")[-1]
    if not raw.strip("."):
        raw = path.resolve().parent.name if path.name == "config.json" else path.stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-") or "model"


def _dtype(cfg: dict, file: str) -> str:
    raw = cfg.get("torch_dtype") or "float16"
    if not isinstance(raw, str) or raw not in _DTYPES:
        raise ConfigError(f"expected one of {sorted(_DTYPES)}, got {raw!r}", file=file, key="torch_dtype")
    return _DTYPES[raw]


def _llama_like(arch: str, cfg: dict, file: str) -> dict:
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    d = {
        "num_layers": cfg["num_hidden_layers"],
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": _head_dim(cfg, hidden, heads, file, ("hidden_size", "num_attention_heads")),
        "intermediate_size": cfg["intermediate_size"],
        "ffn_gated": True,
        "activation": cfg.get("hidden_activation") or cfg.get("hidden_act", "silu"),
        "norm": "rmsnorm",
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg.get("max_position_embeddings", 4096),
        "position": "rope",
        "rope_scaling": _rope_scaling(cfg),
        "tie_word_embeddings": cfg.get("tie_word_embeddings", arch == "Gemma2ForCausalLM"),
    }
    if arch == "Qwen2ForCausalLM":
        d["qkv_bias"] = True  # HF modeling_qwen2: q/k/v projections always carry a bias
        if cfg.get("use_sliding_window"):
            mwl = cfg.get("max_window_layers", d["num_layers"])
            if isinstance(mwl, int) and isinstance(d["num_layers"], int) and mwl < d["num_layers"]:
                raise ConfigError(
                    "use_sliding_window with max_window_layers < num_hidden_layers (mixed layers) is not supported",
                    file=file,
                    key="use_sliding_window",
                )
    elif arch in ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"):
        if cfg.get("attention_bias") and cfg.get("mlp_bias"):
            d["bias"] = True
        elif cfg.get("attention_bias"):
            d["qkv_bias"] = True  # approximation: the o_proj bias (hidden values) is ignored
    if arch in ("MistralForCausalLM", "MixtralForCausalLM") and cfg.get("sliding_window"):
        d["sliding_window"] = cfg["sliding_window"]
        d["layer_pattern"] = ["local"]
    if arch == "Gemma2ForCausalLM":
        # even layer_idx use the sliding window (HF modeling_gemma2.py; reference/models.md §2.3)
        d["sliding_window"] = cfg.get("sliding_window", 4096)
        d["layer_pattern"] = ["local", "global"]
    if arch == "MixtralForCausalLM":
        d["moe"] = {
            "num_experts": cfg["num_local_experts"],
            "experts_per_token": cfg["num_experts_per_tok"],
            "expert_intermediate_size": cfg["intermediate_size"],
        }
    return d


def _rope_scaling(cfg: dict):
    """HF ``rope_scaling`` -> RopeScalingSpec fields (None when absent); the type-specific
    parameters (beta_fast, low_freq_factor, ...) do not change costs and are not kept."""
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, dict):
        return rs  # None, or a value the schema rejects
    if rs.get("factor") is None:  # e.g. rope_type "default": nothing scaled
        return None
    out = {"type": rs.get("rope_type") or rs.get("type") or "linear", "factor": rs["factor"]}
    if rs.get("original_max_position_embeddings") is not None:
        out["original_max_position_embeddings"] = rs["original_max_position_embeddings"]
    return out


def _deepseek(cfg: dict, file: str) -> dict:
    d = _llama_like("DeepseekV2ForCausalLM", cfg, file)
    if cfg.get("moe_layer_freq", 1) != 1:
        raise ConfigError("only moe_layer_freq 1 is supported", file=file, key="moe_layer_freq")
    nope, rope = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
    d["head_dim"] = nope + rope if isinstance(nope, int) and isinstance(rope, int) else nope  # q/k head dim
    d["mla"] = {
        "kv_lora_rank": cfg["kv_lora_rank"],
        "q_lora_rank": cfg.get("q_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": cfg["v_head_dim"],
    }
    d["moe"] = {
        "num_experts": cfg["n_routed_experts"],
        "experts_per_token": cfg["num_experts_per_tok"],
        "expert_intermediate_size": cfg["moe_intermediate_size"],
        "num_shared_experts": cfg.get("n_shared_experts") or 0,
        "first_dense_layers": cfg.get("first_k_dense_replace", 0),
    }
    return d


def _opt(cfg: dict, file: str) -> dict:
    proj = cfg.get("word_embed_proj_dim", cfg["hidden_size"])
    if proj != cfg["hidden_size"]:
        raise ConfigError(
            f"word_embed_proj_dim != hidden_size ({cfg['hidden_size']}) is not supported, got {proj!r}",
            file=file,
            key="word_embed_proj_dim",
        )
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    return {
        "num_layers": cfg["num_hidden_layers"],
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": _head_dim(cfg, hidden, heads, file, ("hidden_size", "num_attention_heads")),
        "intermediate_size": cfg["ffn_dim"],
        "ffn_gated": False,
        "activation": cfg.get("activation_function", "relu"),
        "norm": "layernorm",
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg.get("max_position_embeddings", 2048),
        "position": "learned",
        "tie_word_embeddings": cfg.get("tie_word_embeddings", True),
        "bias": cfg.get("enable_bias", True),
    }


def _gpt2(cfg: dict, file: str) -> dict:
    heads, hidden = cfg["n_head"], cfg["n_embd"]
    return {
        "num_layers": cfg["n_layer"],
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": _head_dim(cfg, hidden, heads, file, ("n_embd", "n_head")),
        "intermediate_size": cfg.get("n_inner") or _div(4 * hidden, 1),  # GPT2Config: None -> 4 x n_embd
        "ffn_gated": False,
        "activation": cfg.get("activation_function", "gelu_new"),
        "norm": "layernorm",
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg.get("n_positions", 1024),
        "position": "learned",
        "tie_word_embeddings": cfg.get("tie_word_embeddings", True),
        "bias": True,
    }


_BUILDERS = {"llama": None, "opt": _opt, "gpt2": _gpt2, "deepseek": _deepseek}


def model_from_hf_config(path: str | os.PathLike) -> ModelSpec:
    """Read a HF ``config.json`` and return the equivalent ModelSpec.

    Raises ConfigError naming the file for unreadable JSON, unknown architectures, missing
    required fields and values the ModelSpec schema rejects.
    """
    path = Path(path)
    file = display_path(path)
    text = read_text_file(path, file=file, kind="document")  # a regular file within the size limit
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON ({exc})", file=file) from None
    except RecursionError:  # the json decoder recurses per nesting level (a 100k-deep file, issue 31)
        raise ConfigError("invalid JSON (nested too deeply)", file=file) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"expected a JSON object at the top level, got {type(cfg).__name__}", file=file)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise ConfigError(
            f"missing required field (supported: {', '.join(ARCHITECTURES)})", file=file, key="architectures"
        )
    arch = archs[0]
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ConfigError(
            f"unknown architecture {arch!r} (supported: {', '.join(ARCHITECTURES)})", file=file, key="architectures"
        )
    family, required = ARCHITECTURES[arch]
    missing = [f for f in required if cfg.get(f) is None]
    if missing:
        raise ConfigError(f"missing required field(s) for architecture {arch}", file=file, key=", ".join(missing))
    builder = _BUILDERS[family]
    data = _llama_like(arch, cfg, file) if builder is None else builder(cfg, file)
    data.update(name=_name(path, cfg), architecture=arch, dtype=_dtype(cfg, file), source=f"HF config.json {file}")
    return validate(ModelSpec, data, file=file)
