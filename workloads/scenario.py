"""Scenario: what is being served in one run (batch, lengths, dtypes)."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

import numpy as np
from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from attnsim.core.config import Plausible, Schema, not_physical
from attnsim.workloads.limits import MAX_BATCH, MAX_TOKENS
from attnsim.workloads.model import DType
from attnsim.workloads.speculative import SpeculativeSpec

Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]  # a positive token count within workloads.limits


# plausible ranges shared by this module's schemas (attnsim.core.config.plausible_range)
_POSITIONS = Plausible(0, 1 << 24, "tokens (workloads.limits.MAX_TOKENS)")
# beams per request: a bound against typos, not a mechanism (MLPerf gpt-j decodes with 4, NVIDIA v4.1
# code/gptj/tensorrt/generation_config.json runtime_beam_width)
MAX_BEAM_WIDTH = 64


class LengthDistribution(Schema):
    """A named, seeded distribution of per-request prompt (context) lengths."""

    plausible = {
        "*": Plausible(0, 1 << 24, "tokens (workloads.limits.MAX_TOKENS)"),
        "seed": not_physical("a random seed"),
    }

    dist: Literal["fixed", "uniform", "normal", "lognormal"]
    mean: Optional[float] = Field(None, gt=0, le=MAX_TOKENS)
    std: Optional[float] = Field(None, ge=0, le=MAX_TOKENS)
    low: Optional[Tokens] = None
    high: Optional[Tokens] = None
    seed: int = 0

    @model_validator(mode="after")
    def _params(self):
        need = {"fixed": ("mean",), "uniform": ("low", "high"), "normal": ("mean", "std"), "lognormal": ("mean", "std")}
        missing = [k for k in need[self.dist] if getattr(self, k) is None]
        if missing:
            raise ValueError(f"distribution '{self.dist}' needs {', '.join(missing)}")
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"low ({self.low}) exceeds high ({self.high})")
        return self


def _lens_kind(v) -> str:
    return "function-list" if isinstance(v, list) else "function-distribution"


# A list or a distribution, chosen by the input's type so that errors come from that branch only.
# The tags start with "function-", which attnsim.core.config drops from error key paths.
LengthsSpec = Annotated[
    Union[Annotated[list[Tokens], Tag("function-list")], Annotated[LengthDistribution, Tag("function-distribution")]],
    Discriminator(_lens_kind),
]


class Scenario(Schema):
    """Batch, lengths and storage formats of one run.

    Per-request prompt lengths come from ``context_lens`` (a list of length
    ``batch_size``, or a distribution) or, if absent, ``prompt_len`` for all. Sizes are bounded
    by attnsim.workloads.limits; ``prompt + output_len`` by the model's context window
    (``ModelSpec.max_positions``) unless ``beyond_max_position: allow``.
    """

    plausible = {
        "batch_size": Plausible(1, 1 << 20, "requests (workloads.limits.MAX_BATCH)"),
        "beam_width": Plausible(1, 64, "beams per request (TensorRT-LLM max_beam_width; MLPerf gpt-j decodes with 4)"),
        "*": _POSITIONS,
    }

    name: str = "scenario"
    batch_size: int = Field(1, gt=0, le=MAX_BATCH)
    prompt_len: Tokens = 2048
    context_lens: Optional[LengthsSpec] = None
    output_len: Tokens = 128
    beyond_max_position: Literal["refuse", "allow"] = Field(
        "refuse",
        description="prompt + output beyond the model's max_position_embeddings: refuse the run, "
        "or allow it (extrapolation; the run document's notes say so)",
    )
    kv_dtype: DType = "fp16"
    weight_dtype: Optional[DType] = Field(None, description="storage dtype of the weights (default: the model's dtype)")
    act_dtype: DType = "fp16"
    reliability: Optional[dict] = None  # overrides merged onto the experiment's reliability section
    # speculative decoding: draft model, draft tokens per target step, acceptance rate (workloads/speculative.py)
    speculative: Optional[SpeculativeSpec] = None
    # beam search (attnsim serve; attnsim.studies.serve.scheduler): B sequences per request share the prompt's KV
    beam_width: int = Field(
        1,
        ge=1,
        le=MAX_BEAM_WIDTH,
        description="beams per request: every decode step runs this many sequences per request, which share the "
        "prompt's KV and grow their own; one sequence is returned (attnsim serve only)",
    )
    beam_prompt_reads: Literal["per_beam", "once"] = Field(
        "per_beam",
        description="how often a decode step reads the prompt's KV that the beams share: per_beam (every beam's "
        "attention reads the whole context: TensorRT-LLM's masked MHA kernel, which runs MHA models) or once (the "
        "beams' query rows share each K/V tile load: TensorRT-LLM's XQA kernel for MQA/GQA, cpp/kernels/xqa/mha.cu "
        "nbValidRows = headGrpSize * beamWidth; shared-prefix kernels)",
    )

    @model_validator(mode="after")
    def _beams(self):
        if self.beam_width > 1 and self.speculative is not None:
            raise ValueError("beam_width > 1 with speculative decoding is not modelled: set one of them")
        if self.beam_width == 1 and self.beam_prompt_reads != "per_beam":  # no shared prompt to read: no effect
            raise ValueError(f"expected beam_width > 1 with beam_prompt_reads {self.beam_prompt_reads!r}, got 1")
        return self

    @field_validator("context_lens")
    @classmethod
    def _lens(cls, v, info: ValidationInfo):  # a field validator so the error names `context_lens`
        b = info.data.get("batch_size")
        if isinstance(v, list) and b is not None and len(v) != b:
            raise ValueError(f"context_lens has {len(v)} entries, expected batch_size = {b}")
        return v

    def prompt_lens(self) -> np.ndarray:
        """Per-request prompt lengths (int64, length batch_size), deterministic for a seed."""
        n = self.batch_size
        c = self.context_lens
        if c is None:
            return np.full(n, self.prompt_len, dtype=np.int64)
        if isinstance(c, list):
            return np.asarray(c, dtype=np.int64)
        rng = np.random.default_rng(c.seed)
        if c.dist == "fixed":
            x = np.full(n, c.mean)
        elif c.dist == "uniform":
            x = rng.integers(c.low, c.high + 1, size=n)
        elif c.dist == "normal":
            x = rng.normal(c.mean, c.std, size=n)
        else:  # lognormal with the given arithmetic mean and std
            var = c.std**2
            sigma2 = np.log1p(var / c.mean**2)
            mu = np.log(c.mean) - sigma2 / 2
            x = rng.lognormal(mu, np.sqrt(sigma2), size=n)
        # clip in floating point before the integer cast (a huge draw must not wrap around int64)
        return np.clip(np.rint(x), c.low or 1, c.high or MAX_TOKENS).astype(np.int64)


def context_window(model, sc: Scenario, need: int | None = None) -> tuple[bool, str | None]:
    """Does the longest sequence (``need`` tokens; default the scenario's longest prompt +
    output_len) fit ``model``'s window? Rule of vLLM's max_model_len: prompt + output <= window.

    Returns (accepted, note): not accepted when it exceeds ``model.max_positions`` and
    ``beyond_max_position`` is ``refuse``; the note (for the run document) says when rope_scaling
    is applied or positions are extrapolated, else None. Raises nothing."""
    need = int(sc.prompt_lens().max()) + sc.output_len if need is None else int(need)
    rs, limit = model.rope_scaling, model.max_positions
    base = (rs.original_max_position_embeddings or model.max_position_embeddings) if rs else limit
    if need > limit:
        return (
            sc.beyond_max_position == "allow",
            f"prompt + output = {need} tokens exceed model {model.name}'s {limit} positions "
            f"(beyond_max_position: allow): positions are extrapolated; costs are modelled, quality is not",
        )
    if need > base:
        return True, (
            f"prompt + output = {need} tokens > {base} original positions: rope_scaling {rs.type} "
            f"x{rs.factor:g} applied (model {model.name} used up to {limit} positions)"
        )
    return True, None
