"""Speculative decoding as a workload (Leviathan et al., ICML'23; SpecPIM, Li et al., ASPLOS'24).

A scenario's ``speculative: {draft_model, draft_tokens, acceptance_rate}``: per target step the draft
model decodes ``gamma = draft_tokens`` tokens one at a time (GEMV-shaped steps), then the target verifies
them in ONE step over gamma + 1 query tokens per request (the last accepted token + the drafts: a small
"mini-prefill" on the KV, GEMM-shaped). With i.i.d. acceptance of probability ``alpha`` the expected
tokens produced per target step are (Leviathan et al., eq. 1)

    E = (1 - alpha^(gamma + 1)) / (1 - alpha)      (E = gamma + 1 at alpha = 1),

between 1 (alpha = 0: only the target's own token) and gamma + 1. attnsim uses this expectation
(no sampled acceptances): a generation of N output tokens takes (N - 1) / E target steps after the
prefill (the prefill gives the first token), and the serving simulator advances each request by E
tokens per iteration (attnsim.studies.serve).
"""

from __future__ import annotations

from pydantic import Field

from attnsim.core.config import ConfigError, Plausible, Schema

MAX_DRAFT_TOKENS = 64  # gamma: SpecPIM / Leviathan explore 1-10; beyond 64 the verify is a prefill


class SpeculativeSpec(Schema):
    """``speculative:`` of a scenario."""

    plausible = {"acceptance_rate": Plausible(0, 1, "a probability")}

    draft_model: str = Field(description="the draft model: a model config name (configs/models) or a path")
    draft_tokens: int = Field(
        4, gt=0, le=MAX_DRAFT_TOKENS, description="gamma: tokens the draft proposes per target step"
    )
    acceptance_rate: float = Field(
        0.8, ge=0, le=1, description="alpha: probability that the target accepts a draft token"
    )


def expected_tokens(gamma: int, alpha: float) -> float:
    """Expected tokens per target step (Leviathan et al. eq. 1), 1 <= E <= gamma + 1."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def load_draft(spec: SpeculativeSpec, file: str | None = None, key: str = "speculative.draft_model"):
    """The draft's ModelSpec (workloads.zoo.load_model); a missing / bad model is a ConfigError at ``key``."""
    from attnsim.workloads.zoo import load_model

    try:
        return load_model(spec.draft_model)
    except ConfigError as e:
        raise ConfigError(
            f"expected a model config name or path ({e}), got {spec.draft_model!r}", file=file, key=key
        ) from None


def check_pair(target, spec: SpeculativeSpec, file: str | None = None, key: str = "speculative") -> None:
    """The draft must share the target's vocabulary (its tokens are the target's); returns the draft's ModelSpec."""
    draft = load_draft(spec, file, f"{key}.draft_model")
    if draft.vocab_size != target.vocab_size:
        raise ConfigError(
            f"expected a draft with the target's vocabulary ({target.name}: {target.vocab_size} "
            f"tokens), got {draft.name} with {draft.vocab_size}",
            file=file,
            key=f"{key}.draft_model",
        )
    return draft
