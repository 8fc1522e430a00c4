"""KV compression policies: eviction / selection budgets, applied per layer.

Each policy maps a request's context (tokens whose KV exists, ``ctx``) and prompt length to

* ``retained_tokens``: KV tokens kept in memory (sets KV capacity use, block-granular upstream);
* ``read_tokens``: KV tokens read by one decode step's attention (sets KV bytes read and the
  attention FLOPs; passed to the trace builder as the step's context length).

The first ``dense_layers`` layers keep and read everything (Quest leaves the first two layers
dense, Tang et al., "Quest", ICML 2024, arXiv 2406.10774 §4); the per-layer values are averaged
over layers, which is exact for costs linear in tokens per layer (memory-bound attention).

| policy | retained | read per decode step | source |
|---|---|---|---|
| none | ctx | ctx | - |
| streaming | min(ctx, sink + window) | same | StreamingLLM, Xiao et al., ICLR 2024, arXiv 2309.17453 (4 sink tokens, §3.3) |
| h2o | min(ctx, heavy + recent) | same | H2O, Zhang et al., NeurIPS 2023, arXiv 2306.14048 (heavy-hitter + recent budget) |
| snapkv | min(prompt, budget) + (ctx - prompt) | same | SnapKV, Li et al., 2024, arXiv 2404.14469 (prompt KV compressed once after prefill, observation window 32) |
| quest | ctx (nothing evicted) | min(ctx, budget) + ceil(ctx / page) | Quest (query-aware top-k pages; per page a min and a max key = one K+V token of metadata) |

Prefill is unchanged (every policy computes full attention over the prompt). KV quantization
(fp8/int8/int4/int2) is the scenario's ``kv_dtype`` (bytes per element in the trace builder);
group scales are not counted (workloads/trace.py).

Accuracy cost: :func:`accuracy_proxy` applies the policy's token selection to synthetic q/K/V
with heavy-tailed attention and sinks (attnsim.hwmodels.reliability.accuracy, the L0 proxy) and
returns the relative attention-output error of one decode query.
"""  # noqa: E501 - the markdown table rows above cannot wrap

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from attnsim.core.config import Plausible, Schema

#: The parameters each policy kind reads (any other one, given explicitly, is refused).
POLICY_FIELDS = {
    "none": (),
    "streaming": ("sink_tokens", "window_tokens", "dense_layers"),
    "h2o": ("heavy_tokens", "recent_tokens", "dense_layers"),
    "snapkv": ("budget_tokens", "observation_tokens", "dense_layers"),
    "quest": ("budget_tokens", "page_tokens", "dense_layers"),
}


class KVPolicySpec(Schema):
    """``serving.kv.policy``."""

    plausible = {"dense_layers": Plausible(0, 4096, "layers (workloads.limits.MAX_LAYERS)")}

    kind: Literal["none", "streaming", "h2o", "snapkv", "quest"] = "none"
    sink_tokens: NonNegativeInt = 4  # StreamingLLM §3.3: four initial tokens as attention sinks
    window_tokens: PositiveInt = 1020  # ASSUMPTION: sink + window = 1024-token cache, a StreamingLLM cache size
    heavy_tokens: PositiveInt = 256  # ASSUMPTION: H2O's 20 % budget split 50/50 heavy/recent, at ~2.5k ctx
    recent_tokens: PositiveInt = 256
    budget_tokens: PositiveInt = 1024  # SnapKV prompt budget / Quest token budget (both papers sweep 1024-4096)
    observation_tokens: PositiveInt = 32  # SnapKV observation window (arXiv 2404.14469 §4)
    page_tokens: PositiveInt = 16  # Quest page size 16 (arXiv 2406.10774 §5)
    dense_layers: NonNegativeInt = Field(0, description="first layers kept dense (Quest: 2)")

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "snapkv" and self.observation_tokens > self.budget_tokens:
            raise ValueError("observation_tokens exceed budget_tokens")
        used = POLICY_FIELDS[self.kind]
        self.refuse_unused(
            [f for f in type(self).model_fields if f != "kind" and f not in used],
            f"by kind: {self.kind} (it reads: {', '.join(used) or 'none'})",
        )
        return self


class KVPolicy:
    """Vectorised retained/read token counts for one model (``num_layers`` layers)."""

    def __init__(self, spec: KVPolicySpec, num_layers: int):
        self.spec = spec
        self.kind = spec.kind
        self.dense_frac = min(spec.dense_layers, num_layers) / num_layers

    def _mix(self, full, sparse):
        if self.dense_frac == 0:
            return sparse
        return np.ceil(self.dense_frac * full + (1 - self.dense_frac) * sparse).astype(np.int64)

    def retained_tokens(self, ctx, prompt):
        ctx = np.asarray(ctx, dtype=np.int64)
        s = self.spec
        if self.kind in ("none", "quest"):
            return ctx
        if self.kind == "streaming":
            kept = np.minimum(ctx, s.sink_tokens + s.window_tokens)
        elif self.kind == "h2o":
            kept = np.minimum(ctx, s.heavy_tokens + s.recent_tokens)
        else:  # snapkv
            p = np.minimum(np.asarray(prompt, dtype=np.int64), ctx)
            kept = np.minimum(p, s.budget_tokens) + (ctx - p)
        return self._mix(ctx, kept)

    def read_tokens(self, ctx, prompt):
        ctx = np.asarray(ctx, dtype=np.int64)
        if self.kind != "quest":
            return self.retained_tokens(ctx, prompt)
        s = self.spec
        sel = np.minimum(ctx, s.budget_tokens) + -(-ctx // s.page_tokens)
        return self._mix(ctx, np.minimum(sel, ctx + -(-ctx // s.page_tokens)))

    def max_retained(self, prompt, output):
        """Largest KV a request ever holds (prompt + output - 1 tokens: the last token's KV is never written)."""
        return self.retained_tokens(np.asarray(prompt) + np.asarray(output) - 1, prompt)


def selection_mask(kind: str, spec: KVPolicySpec, q: np.ndarray, K: np.ndarray, prompt: int) -> np.ndarray:
    """Tokens dropped (True) by the policy for one decode query on (heads, tokens, d) keys."""
    H, T, d = K.shape
    drop = np.zeros((H, T), dtype=bool)
    if kind == "none":
        return drop
    logits = np.einsum("hd,htd->ht", q, K) / np.sqrt(d)
    a = np.exp(logits - logits.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    keep = np.zeros((H, T), dtype=bool)
    if kind == "streaming":
        keep[:, : spec.sink_tokens] = True
        keep[:, max(0, T - spec.window_tokens) :] = True
    elif kind == "h2o":
        keep[:, max(0, T - spec.recent_tokens) :] = True
        # heavy hitters: largest accumulated attention (here the query's own scores stand in for the sum)
        score = np.where(keep, -np.inf, a)
        idx = np.argsort(-score, axis=1)[:, : spec.heavy_tokens]
        np.put_along_axis(keep, idx, True, axis=1)
    elif kind == "snapkv":
        p = min(prompt, T)
        keep[:, p:] = True
        # the observation window votes with its attention; SnapKV's premise is that it matches the
        # generation queries' pattern, so the decode query's own attention stands in (optimistic)
        idx = np.argsort(-a[:, :p], axis=1)[:, : spec.budget_tokens - spec.observation_tokens]
        kp = np.zeros((H, p), dtype=bool)
        np.put_along_axis(kp, idx, True, axis=1)
        keep[:, :p] |= kp
        keep[:, max(0, p - spec.observation_tokens) : p] = True
    elif kind == "quest":
        P = spec.page_tokens
        n_pages = -(-T // P)
        pad = n_pages * P - T
        Kp = np.concatenate([K, np.full((H, pad, d), np.nan)], axis=1).reshape(H, n_pages, P, d)
        kmax, kmin = np.nanmax(Kp, axis=2), np.nanmin(Kp, axis=2)
        ub = np.sum(np.maximum(q[:, None, :] * kmax, q[:, None, :] * kmin), axis=2)  # Quest's per-page bound
        k_pages = max(1, spec.budget_tokens // P)
        idx = np.argsort(-ub, axis=1)[:, :k_pages]
        kp = np.zeros((H, n_pages), dtype=bool)
        np.put_along_axis(kp, idx, True, axis=1)
        keep = np.repeat(kp, P, axis=1)[:, :T]
    return ~keep


def accuracy_proxy(spec: KVPolicySpec, tokens: int = 2048, prompt: int | None = None, seed: int = 0) -> dict:
    """Relative attention-output error of one decode query under the policy's selection and the
    attention mass the kept tokens carry, on synthetic q/K/V (reliability L0 proxy; H2O and SnapKV
    scores use the query's own attention, an optimistic stand-in). ``tokens`` is the context."""
    from attnsim.hwmodels.reliability.accuracy import attention, metrics, synthetic_qkv

    qkv = synthetic_qkv(n_heads=4, n_tokens=tokens, head_dim=64, seed=seed)
    q, K, V = qkv["q"], qkv["k"], qkv["v"]
    drop = selection_mask(spec.kind, spec, q, K, tokens if prompt is None else prompt)
    m = metrics(q, K, V, K, V, drop)
    _, a = attention(q, K, V)
    return {
        "rel_err": m["rel_err"],
        "attention_mass_kept": float(np.sum(np.where(drop, 0.0, a)) / a.shape[0]),
        "kept_fraction": float(1 - drop.mean()),
    }
