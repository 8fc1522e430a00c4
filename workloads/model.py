"""ModelSpec: the dimensions of one LLM, as data (configs/models/*.yaml or a HF config.json)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from attnsim.config import Schema

DTYPE_BYTES = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
    "int8": 1.0, "int4": 0.5, "int2": 0.25,
}
DType = Literal["fp32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2"]


class MoESpec(Schema):
    """Mixture-of-experts FFN (Mixtral, DeepSeek)."""

    num_experts: PositiveInt
    experts_per_token: PositiveInt
    expert_intermediate_size: PositiveInt
    num_shared_experts: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN of intermediate_size")

    @model_validator(mode="after")
    def _topk(self):
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds num_experts ({self.num_experts})")
        return self


class MLASpec(Schema):
    """Multi-head latent attention (DeepSeek-V2): the KV cache holds the latent + rope key."""

    kv_lora_rank: PositiveInt
    q_lora_rank: Optional[PositiveInt] = None
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class ModelSpec(Schema):
    """One decoder-only transformer. Field names follow HF config.json where one exists."""

    name: str
    architecture: str = "LlamaForCausalLM"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate_size: PositiveInt
    ffn_gated: bool = True
    activation: str = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt = 4096
    position: Literal["rope", "learned", "alibi"] = "rope"
    tie_word_embeddings: bool = False
    bias: bool = False
    dtype: DType = "bf16"
    sliding_window: Optional[PositiveInt] = None
    layer_pattern: list[Literal["global", "local"]] = Field(
        default_factory=lambda: ["global"],
        description="attention type per layer, repeated cyclically; 'local' layers read at most sliding_window tokens")
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = None
    source: str = ""

    @model_validator(mode="after")
    def _consistent(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if "local" in self.layer_pattern and self.sliding_window is None:
            raise ValueError("layer_pattern has 'local' layers but sliding_window is not set")
        if not self.layer_pattern:
            raise ValueError("layer_pattern must not be empty")
        return self

    def layer_kinds(self) -> list[str]:
        """'global' or 'local' for each layer index."""
        p = self.layer_pattern
        return [p[i % len(p)] for i in range(self.num_layers)]
