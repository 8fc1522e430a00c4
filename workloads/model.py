"""ModelSpec: the dimensions of one LLM, as data (configs/models/*.yaml or a HF config.json)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from attnsim.core.config import Plausible, Schema
from attnsim.workloads.limits import MAX_LAYERS, MAX_TOKENS

DTYPE_BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "int2": 0.25,
}
#: Activations the FLOP count knows (HF ``hidden_act`` / ``activation_function`` names, transformers.activations
#: ACT2FN; counted by workloads.trace.activation_flops: relu* 1, gelu* 9, the others as silu 4).
KNOWN_ACTIVATIONS = (
    "relu",
    "relu2",
    "relu6",
    "leaky_relu",
    "silu",
    "swish",
    "quick_gelu",
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_accurate",
    "gelu_python",
)
#: Decoder architectures whose structure attnsim models (HF ``architectures[0]``; workloads.hf maps their
#: config.json, configs/models/ holds the others' dimensions).
KNOWN_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "MixtralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Gemma2ForCausalLM",
    "OPTForCausalLM",
    "GPT2LMHeadModel",
    "DeepseekV2ForCausalLM",
    "GPTJForCausalLM",
)  # GPT-J: attention and MLP in parallel, same ops
DType = Literal["fp32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2"]


# plausible ranges shared by this module's schemas (attnsim.core.config.plausible_range)
_DIM = Plausible(1, 1 << 22, "model dimensions: hidden <= 16,384 (Llama-3.1-405B), FFN <= 73,728 (PaLM); 2^22 is 50x")
_HEADS = Plausible(1, 1 << 14, "attention heads: <= 128 published (Llama-3.1-405B, DeepSeek-V3); 2^14 is 128x")
_POSITIONS = Plausible(0, 1 << 24, "tokens (workloads.limits.MAX_TOKENS)")


class MoESpec(Schema):
    """Mixture-of-experts FFN (Mixtral, DeepSeek)."""

    plausible = {
        "*": Plausible(0, 1 << 16, "experts: <= 256 routed in published models (DeepSeek-V3); 2^16 is 256x"),
        "expert_intermediate_size": _DIM,
    }

    num_experts: PositiveInt
    experts_per_token: PositiveInt
    expert_intermediate_size: PositiveInt
    num_shared_experts: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN of intermediate_size")

    @field_validator("experts_per_token")
    @classmethod
    def _topk(cls, v: int, info: ValidationInfo):
        e = info.data.get("num_experts")
        if e is not None and v > e:
            raise ValueError(f"experts_per_token ({v}) exceeds num_experts ({e})")
        return v


class MLASpec(Schema):
    """Multi-head latent attention (DeepSeek-V2): the KV cache holds the latent + rope key."""

    plausible = {"*": _DIM}

    kv_lora_rank: PositiveInt
    q_lora_rank: Optional[PositiveInt] = None
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class RopeScalingSpec(Schema):
    """RoPE context extension (HF ``rope_scaling``): the model is used up to ``factor`` x
    ``original_max_position_embeddings`` (default: ``max_position_embeddings``) positions."""

    plausible = {
        "factor": Plausible(1, 1 << 24, "context extension factor (<= MAX_TOKENS positions)"),
        "original_max_position_embeddings": _POSITIONS,
    }

    type: str = Field(description="HF rope_type / type: linear, dynamic, yarn, llama3, longrope, ...")
    factor: float = Field(ge=1, le=MAX_TOKENS)
    original_max_position_embeddings: Optional[int] = Field(None, gt=0, le=MAX_TOKENS)


_LAYER_KINDS: dict = {}  # id(model) -> (model, its layer kinds): ModelSpec.layer_kinds


def memo_per_object(memo: dict, obj, compute):
    """``compute(obj)`` memoised in ``memo`` per object identity, for frozen schemas (the object is kept with its
    value, so a recycled id never hits; at most 256 entries, then the memo starts over)."""
    hit = memo.get(id(obj))
    if hit is None or hit[0] is not obj:
        hit = (obj, compute(obj))
        if len(memo) >= 256:
            memo.clear()
        memo[id(obj)] = hit
    return hit[1]


class ModelSpec(Schema):
    """One decoder-only transformer. Field names follow HF config.json where one exists.

    ``head_dim`` is the q/k head dimension (for MLA: qk_nope_head_dim + qk_rope_head_dim; the
    trace builder uses the ``mla`` dims for MLA models). ``intermediate_size`` is the dense FFN
    size (for MoE models without dense layers, e.g. Mixtral, the per-expert size as in HF).
    """

    plausible = {
        "*": _DIM,
        "num_layers": Plausible(1, 4096, "layers (workloads.limits.MAX_LAYERS)"),
        "num_heads": _HEADS,
        "num_kv_heads": _HEADS,
        "vocab_size": Plausible(1, 1 << 24, "tokens in a vocabulary: <= 262,144 published (Gemma); 2^24 is 64x"),
        "max_position_embeddings": _POSITIONS,
        "sliding_window": _POSITIONS,
    }

    name: str
    architecture: str = "LlamaForCausalLM"
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate_size: PositiveInt
    ffn_gated: bool = True
    activation: str = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    vocab_size: PositiveInt
    max_position_embeddings: int = Field(4096, gt=0, le=MAX_TOKENS)
    rope_scaling: Optional[RopeScalingSpec] = None
    position: Literal["rope", "learned", "alibi"] = "rope"
    tie_word_embeddings: bool = False
    bias: bool = False  # bias on every linear layer (GPT-3, OPT)
    qkv_bias: bool = False  # bias on the q/k/v projections only (Qwen2); implied by ``bias``
    dtype: DType = "bf16"
    sliding_window: Optional[PositiveInt] = None
    layer_pattern: list[Literal["global", "local"]] = Field(
        default_factory=lambda: ["global"],
        description="attention type per layer, repeated cyclically; 'local' layers read at most sliding_window tokens",
    )
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = None
    source: str = ""

    # field validators (not one model validator) so that errors carry the key path
    @field_validator("architecture")
    @classmethod
    def _architecture(cls, v: str):
        if v not in KNOWN_ARCHITECTURES:
            raise ValueError(f"expected one of {', '.join(KNOWN_ARCHITECTURES)}")  # validate() appends ", got <v>"
        return v

    @field_validator("activation")
    @classmethod
    def _activation(cls, v: str):
        if v not in KNOWN_ACTIVATIONS:
            raise ValueError(f"expected one of {', '.join(KNOWN_ACTIVATIONS)}")  # validate() appends ", got <v>"
        return v

    @field_validator("num_kv_heads")
    @classmethod
    def _gqa(cls, v: int, info: ValidationInfo):
        h = info.data.get("num_heads")
        if h is not None and h % v:
            raise ValueError(f"num_heads ({h}) must be a multiple of num_kv_heads ({v})")
        return v

    @field_validator("layer_pattern")
    @classmethod
    def _pattern(cls, v: list, info: ValidationInfo):
        if not v:
            raise ValueError("layer_pattern must not be empty")
        if "local" in v and info.data.get("sliding_window") is None:
            raise ValueError("layer_pattern has 'local' layers but sliding_window is not set")
        return v

    @field_validator("moe")
    @classmethod
    def _dense_layers(cls, v, info: ValidationInfo):
        n = info.data.get("num_layers")
        if v is not None and n is not None and v.first_dense_layers > n:
            raise ValueError(f"moe.first_dense_layers ({v.first_dense_layers}) exceeds num_layers ({n})")
        return v

    @property
    def max_positions(self) -> int:
        """Longest sequence (prompt + output tokens) the model is used for: max_position_embeddings,
        or with rope_scaling factor x original_max_position_embeddings if that is larger."""
        rs = self.rope_scaling
        if rs is None:
            return self.max_position_embeddings
        base = rs.original_max_position_embeddings or self.max_position_embeddings
        return max(self.max_position_embeddings, int(rs.factor * base))

    def layer_kinds(self) -> list[str]:
        """'global' or 'local' for each layer index (a new list; memoised per model object: a frozen schema)."""

        def kinds(m):
            p = m.layer_pattern
            return tuple(p[i % len(p)] for i in range(m.num_layers))

        return list(memo_per_object(_LAYER_KINDS, self, kinds))
