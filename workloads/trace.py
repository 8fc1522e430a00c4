"""Build the OpTrace of one step (prefill or decode) of a model on one tensor-parallel rank.

Rows per layer group (layers sharing attention type and dense/MoE FFN), ``count`` = layers:
attn_norm, qkv_proj, [MLA: kv_norm, mla_q_absorb], rope, attn_score, softmax, attn_context,
[MLA: mla_v_up], out_proj, [attn_allreduce], attn_residual, ffn_norm, then either
mlp_up, mlp_act, mlp_down or moe_router, moe_expert_up, moe_act, moe_expert_down
[, moe_shared_up, moe_shared_act, moe_shared_down], then [mlp_allreduce], ffn_residual.
Once per step (layer_group -1): embedding, final_norm, lm_head.

Modelling choices (each documented where it is made):

* Attention rows: ``m`` = query tokens per request (mean, rounded up), ``n`` = KV tokens read
  summed over requests, ``k`` = head dim, ``batch`` = query heads on this rank. ``flops`` count
  only the causal triangle: query position p sees min(p + 1, window) keys. ``kv_read_bytes``
  count each visible KV token once per step (the HBM traffic of a fused / flash-attention
  kernel that reuses K/V on chip across the query tokens of a request); in decode both views
  coincide. A local (sliding-window) layer reads min(context, query_tokens + window - 1) tokens.
* ``act_bytes`` of attention rows assume unfused kernels (scores and probabilities written and
  read once); a device model with fused attention may ignore them.
* KV written by this step is on attn_score (K, or the MLA latent) and attn_context (V).
* MLA (DeepSeek-V2, arXiv 2405.04434 §2.1.3) uses the weight-absorbed form of DeepSeek
  inference: W_UK is applied to the query (``mla_q_absorb``: per head nope -> kv_lora_rank),
  scores are taken against the cached latent + rope key (k = kv_lora_rank + qk_rope_head_dim,
  one latent shared by all heads, i.e. MQA over the latent), the context is accumulated in the
  latent space (k = kv_lora_rank) and W_UV maps it back per head (``mla_v_up``). The latent is
  read once per step, counted on attn_score (attn_context reads 0 KV bytes). The kv down
  projection (and q down projection when q_lora_rank is set) is replicated on every TP rank.
* Tensor parallelism (Megatron style): heads, FFN intermediate (per expert too) and the
  vocabulary (padded up to a multiple of tp) are split; norms, residual adds, embedding gathers,
  the MoE router and the MLA down projections are replicated. KV heads are split, or
  replicated (one per rank) when num_kv_heads < tp. Ring all-reduce after out_proj and after
  the FFN: each rank sends + receives 2 (tp-1)/tp x tokens x hidden x act bytes.
* Uneven TP (tp does not divide the heads or an FFN width): each dimension is split into
  contiguous shards as evenly as possible (the first ``total % tp`` ranks hold one more); a
  rank holds every KV head its query-head range touches (GQA groups are contiguous). Ranks run
  in lock-step, so the trace is that of the largest shard of every dimension (the slowest rank;
  its capacity is the fullest device's). Columns ``flops_share`` / ``bytes_share`` hold, per
  row, sum over ranks / (tp x this trace's value) of the row's FLOPs / bytes: the engine scales
  the dynamic energy (and FLOPs) of the tp copies by them, so energy counts the work done, not
  tp x the largest shard. They are exactly 1 when tp divides everything (see tp_shards).
* MoE: tokens choose top-k of E experts uniformly; the expected number of distinct experts
  touched by T tokens is E (1 - (1 - k/E)^T) (weights read = that many experts; ``batch`` is it
  rounded); ``m`` = average tokens per touched expert. Router softmax/top-k and the weighted
  combine of expert outputs are not counted.
* Quantisation scales (per-group scale/zero of int4/fp8 KV or weights) are ignored: bytes are
  elements x dtype bytes (attnsim.workloads.model.DTYPE_BYTES).
* lm_head runs on the last token of each request in prefill, on every token in decode; with a
  serving stack's sampler (``sampler=``), a ``sampler`` row follows it: the stack's HBM bytes and FLOPs
  per vocabulary entry of each sampled token (full vocabulary: the logits are gathered on every rank).
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.workloads.model import DTYPE_BYTES, ModelSpec, memo_per_object
from attnsim.workloads.optrace import LayerGroup, OpTrace
from attnsim.workloads.scenario import Scenario

# FLOPs per element of elementwise ops, counting each primitive (add, mul, max, exp, tanh,
# rsqrt, div) as one FLOP. These are counting conventions derived from the formulas:
NORM_FLOPS = {
    "rmsnorm": 4,  # x^2, sum, x * rsqrt(mean), * gamma
    "layernorm": 7,  # sum, x - mean, ^2, sum, * rsqrt(var), * gamma, + beta
}
ROPE_FLOPS = 3  # x * cos + rotate(x) * sin: 2 mul + 1 add
SOFTMAX_FLOPS = 5  # max, x - max, exp, sum, divide
RESIDUAL_FLOPS = 1  # one add
GATE_FLOPS = 1  # act(gate) * up


def activation_flops(name: str) -> int:
    """FLOPs per element of an activation: relu 1 (max), silu 4 (neg, exp, add, div),
    gelu 9 (tanh form: x^3 (2), mul, add, mul, tanh, add, mul, mul; the erf form is taken equal).
    Unknown names count as silu."""
    n = name.lower()
    if "relu" in n:
        return 1
    if n.startswith("gelu"):
        return 9
    return 4


# ---------------------------------------------------------------- sizes


def param_count(model: ModelSpec) -> int:
    """Total parameters: layers (attention, norms, FFN/MoE, biases), embeddings, lm_head."""
    h, L, H, Hkv, d = model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim
    norm = h * (2 if model.norm == "layernorm" else 1)
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = h * H * qk if a.q_lora_rank is None else h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * H * qk
        attn = (
            q
            + h * (a.kv_lora_rank + a.qk_rope_head_dim)
            + a.kv_lora_rank
            + a.kv_lora_rank * H * (a.qk_nope_head_dim + a.v_head_dim)
            + H * a.v_head_dim * h
        )
    else:
        attn = h * (H + 2 * Hkv) * d + H * d * h
        if model.bias or model.qkv_bias:
            attn += (H + 2 * Hkv) * d
        if model.bias:
            attn += h
    n_mats = 3 if model.ffn_gated else 2

    def dense_ffn(inter: int) -> int:
        p = n_mats * h * inter
        if model.bias:
            p += (n_mats - 1) * inter + h
        return p

    n_moe = 0 if model.moe is None else L - model.moe.first_dense_layers
    per_layer_common = attn + 2 * norm
    total = L * per_layer_common + (L - n_moe) * dense_ffn(model.intermediate_size)
    if model.moe is not None:
        e = model.moe
        moe = h * e.num_experts + (e.num_experts + e.num_shared_experts) * 3 * h * e.expert_intermediate_size
        total += n_moe * moe
    total += model.vocab_size * h + norm  # token embedding + final norm
    if model.position == "learned":
        total += model.max_position_embeddings * h
    if not model.tie_word_embeddings:
        total += model.vocab_size * h
    return int(total)


def weight_bytes(model: ModelSpec, dtype: str | None = None) -> float:
    """Bytes of all parameters stored in ``dtype`` (default: the model's dtype); scales ignored."""
    return param_count(model) * DTYPE_BYTES[dtype or model.dtype]


def _split(total: int, tp: int) -> np.ndarray:
    """Contiguous shard sizes of ``total`` over ``tp`` ranks, as even as possible (first ranks larger)."""
    return np.array([total // tp + (1 if r < total % tp else 0) for r in range(tp)], dtype=np.int64)


def kv_heads_by_rank(model: ModelSpec, tp: int = 1) -> np.ndarray:
    """KV heads each rank holds: those its contiguous query-head range needs (GQA: query head i
    reads KV head i // (num_heads / num_kv_heads)). Split when num_kv_heads >= tp and tp divides
    it, one per rank (replicated) when tp is a multiple of num_kv_heads, else the touched groups.
    MLA: 1 (the latent is shared by all heads and replicated on every rank)."""
    check_tp(model, tp)
    if model.mla is not None:
        return np.ones(tp, dtype=np.int64)
    g = model.num_heads // model.num_kv_heads
    ends = np.cumsum(_split(model.num_heads, tp))
    starts = ends - _split(model.num_heads, tp)
    return (ends - 1) // g - starts // g + 1


def kv_heads_per_rank(model: ModelSpec, tp: int = 1) -> int:
    """KV heads held by the fullest rank (see kv_heads_by_rank)."""
    return int(kv_heads_by_rank(model, tp).max())


def tp_shards(model: ModelSpec, tp: int) -> dict:
    """Per sharded dimension: {total, largest, smallest, padding} over the tp ranks, padding =
    tp x largest / total - 1 (the extra work of lock-step ranks that all take the largest shard's
    time; for KV heads it includes replication). Dimensions: num_heads, num_kv_heads (not MLA),
    intermediate_size (dense FFN layers), moe.expert_intermediate_size, vocab_size."""
    check_tp(model, tp)
    dims = {"num_heads": (model.num_heads, _split(model.num_heads, tp))}
    if model.mla is None:
        dims["num_kv_heads"] = (model.num_kv_heads, kv_heads_by_rank(model, tp))
    if model.moe is None or model.moe.first_dense_layers > 0:
        dims["intermediate_size"] = (model.intermediate_size, _split(model.intermediate_size, tp))
    if model.moe is not None:
        ei = model.moe.expert_intermediate_size
        dims["moe.expert_intermediate_size"] = (ei, _split(ei, tp))
    v = model.vocab_size
    dims["vocab_size"] = (v, np.full(tp, -(-v // tp)))  # padded: every rank computes ceil(V / tp) rows
    return {
        k: {
            "total": int(t),
            "largest": int(s.max()),
            "smallest": int(s.min()),
            "padding": tp * float(s.max()) / t - 1.0,
        }
        for k, (t, s) in dims.items()
    }


def _even(model: ModelSpec, name: str, entry: dict, tp: int) -> bool:
    """Whether a tp_shards entry is an even split (KV heads: also one replicated head per rank)."""
    if name == "vocab_size":
        return entry["total"] % tp == 0
    if name == "num_kv_heads" and entry["total"] < tp:
        return tp % entry["total"] == 0 and entry["largest"] == entry["smallest"] == 1
    return entry["largest"] == entry["smallest"] and entry["largest"] * tp == entry["total"]


def tp_imbalance(model: ModelSpec, tp: int) -> dict:
    """The uneven entries of tp_shards (run documents' ``metrics.tp_imbalance``); {} when tp
    divides every dimension."""
    return {k: v for k, v in tp_shards(model, tp).items() if not _even(model, k, v, tp)}


def _uneven(model: ModelSpec, tp: int) -> bool:
    """tp does not split heads, KV heads (or replicate one per rank) and FFN widths evenly: the
    non-vocabulary entries of tp_imbalance (integer tests, for the hot path)."""
    if model.num_heads % tp:
        return True
    kv = model.num_kv_heads
    if model.mla is None and ((kv >= tp and kv % tp) or (kv < tp and tp % kv)):
        return True
    if (model.moe is None or model.moe.first_dense_layers > 0) and model.intermediate_size % tp:
        return True
    return model.moe is not None and model.moe.expert_intermediate_size % tp != 0


def weight_bytes_per_rank(model: ModelSpec, dtype: str | None, tp: int) -> float:
    """Weight bytes on the fullest rank: weight_bytes / tp when tp divides every dimension; else
    the params of the largest head / KV-head / FFN / expert shards, plus 1/tp of the rest (norms,
    embeddings, router, MLA down projections), like the even case."""
    total = weight_bytes(model, dtype)
    if not _uneven(model, tp):
        return total / tp
    h, d = model.hidden_size, model.head_dim
    H, Hkv = model.num_heads, model.num_kv_heads
    hr, kvr = _split(H, tp).astype(float), kv_heads_by_rank(model, tp).astype(float)
    n_mats = 3 if model.ffn_gated else 2
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        per_head = (
            (h * qk if a.q_lora_rank is None else a.q_lora_rank * qk)
            + a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim)
            + a.v_head_dim * h
        )
        attn_sharded, attn_total = hr * per_head, H * per_head
    else:
        bias = 1 if (model.bias or model.qkv_bias) else 0
        attn_sharded = (hr + 2 * kvr) * d * (h + bias) + hr * d * h
        attn_total = (H + 2 * Hkv) * d * (h + bias) + H * d * h
    n_moe = 0 if model.moe is None else model.num_layers - model.moe.first_dense_layers
    n_dense = model.num_layers - n_moe
    ffn_per_col = n_mats * h + (n_mats - 1 if model.bias else 0)
    sharded = model.num_layers * attn_sharded
    sharded_total = model.num_layers * attn_total
    if n_dense:
        sharded = sharded + n_dense * ffn_per_col * _split(model.intermediate_size, tp)
        sharded_total += n_dense * ffn_per_col * model.intermediate_size
    if n_moe:
        e = model.moe
        per_col = (e.num_experts + e.num_shared_experts) * 3 * h
        sharded = sharded + n_moe * per_col * _split(e.expert_intermediate_size, tp)
        sharded_total += n_moe * per_col * e.expert_intermediate_size
    b = DTYPE_BYTES[dtype or model.dtype]
    return float(np.max(sharded)) * b + (total - sharded_total * b) / tp


def kv_bytes_per_token_per_layer(model: ModelSpec, kv_dtype: str, tp: int = 1) -> float:
    """K and V bytes of one token in one layer on one rank: 2 x kv_heads x head_dim x bytes
    (MLA: (kv_lora_rank + qk_rope_head_dim) x bytes, one latent shared by K and V)."""
    b = DTYPE_BYTES[kv_dtype]
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * b
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * b


def kv_cache_bytes(model: ModelSpec, scenario: Scenario, tokens, tp: int = 1) -> float:
    """KV-cache bytes for ``tokens`` cached tokens per request (int or per-request array), all
    layers, in scenario.kv_dtype; local (sliding-window) layers keep at most the window.
    tp = 1: the whole cache; tp > 1: what the fullest rank holds (kv_heads_per_rank)."""
    check_tp(model, tp)
    t = np.atleast_1d(np.asarray(tokens, dtype=np.int64))
    per = kv_bytes_per_token_per_layer(model, scenario.kv_dtype, tp)
    kinds = model.layer_kinds()
    n_local = kinds.count("local")
    n_global = len(kinds) - n_local
    held = n_global * float(t.sum())
    if n_local:
        held += n_local * float(np.minimum(t, model.sliding_window).sum())
    return held * per


# ---------------------------------------------------------------- groups and attention counts


_GROUP_COUNTS: dict = {}  # id(model) -> (model, {(attention, moe): layers}): layer_groups


def layer_groups(model: ModelSpec) -> list[LayerGroup]:
    """Distinct (attention type, MoE) combinations with their layer counts, in first-seen order (new objects;
    the counts are memoised per model object, a frozen schema)."""

    def group_counts(m) -> dict[tuple[str, bool], int]:
        first_dense = 0 if m.moe is None else m.moe.first_dense_layers
        counts: dict[tuple[str, bool], int] = {}
        for i, kind in enumerate(m.layer_kinds()):
            key = (kind, m.moe is not None and i >= first_dense)
            counts[key] = counts.get(key, 0) + 1
        return counts

    counts = memo_per_object(_GROUP_COUNTS, model, group_counts)
    return [
        LayerGroup(
            name=f"{kind}_{'moe' if moe else 'dense'}",
            num_layers=n,
            attention=kind,
            window=(model.sliding_window or 0) if kind == "local" else 0,
            moe=moe,
        )
        for (kind, moe), n in counts.items()
    ]


def _tri(n: np.ndarray, w: int) -> np.ndarray:
    """sum_{j=1..n} min(j, w) (w = 0: unlimited), elementwise over int64 n >= 0."""
    n = np.asarray(n, dtype=np.int64)
    full = n * (n + 1) // 2
    if w <= 0:
        return full
    capped = w * (w + 1) // 2 + (n - w) * w
    return np.where(n <= w, full, capped)


def attention_pairs(context_lens: np.ndarray, query_tokens: np.ndarray, window: int = 0) -> int:
    """(query, key) pairs of causal attention: new tokens at positions c-q .. c-1 (0-based) each
    see min(pos + 1, window) keys; summed over requests. window 0 = unlimited."""
    c = np.asarray(context_lens, dtype=np.int64)
    q = np.asarray(query_tokens, dtype=np.int64)
    return int(np.sum(_tri(c, window) - _tri(c - q, window)))


def kv_tokens_read(context_lens: np.ndarray, query_tokens: np.ndarray, window: int = 0) -> int:
    """Distinct KV tokens visible to the new tokens, summed over requests: min(c, q + w - 1)."""
    c = np.asarray(context_lens, dtype=np.int64)
    if window <= 0:
        return int(c.sum())
    q = np.asarray(query_tokens, dtype=np.int64)
    return int(np.minimum(c, q + window - 1).sum())


def expected_experts(tokens: int, num_experts: int, top_k: int) -> float:
    """Expected distinct experts chosen by ``tokens`` tokens each picking top_k of E uniformly:
    E (1 - (1 - k/E)^T)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


# ---------------------------------------------------------------- trace


def check_tp(model: ModelSpec, tp: int, file: str | None = None) -> None:
    """tp must be a positive integer no larger than any split dimension (no rank without heads);
    ``file``: the system file named in the error."""
    if not isinstance(tp, (int, np.integer)) or isinstance(tp, bool) or tp < 1:
        raise ConfigError(f"expected a positive integer, got {tp!r}", file=file, key="parallelism.tp")
    dims = [("num_heads", model.num_heads, "attention heads")]
    if model.moe is None or model.moe.first_dense_layers > 0:
        dims.append(("intermediate_size", model.intermediate_size, "FFN columns"))
    if model.moe is not None:
        dims.append(("moe.expert_intermediate_size", model.moe.expert_intermediate_size, "expert FFN columns"))
    for name, n, what in dims:
        if tp > n:
            raise ConfigError(
                f"expected at most {name} = {n} ranks for model {model.name} (a rank would hold no {what}), got {tp}",
                file=file,
                key="parallelism.tp",
            )


def _lengths(scenario: Scenario, phase: str, context_lens, query_tokens) -> tuple[np.ndarray, np.ndarray]:
    if phase not in ("prefill", "decode"):
        raise ConfigError(f"expected one of ('prefill', 'decode'), got {phase!r}", key="phase")
    c = None if context_lens is None else np.atleast_1d(np.asarray(context_lens, dtype=np.int64))
    q = None if query_tokens is None else np.atleast_1d(np.asarray(query_tokens, dtype=np.int64))
    if phase == "decode":
        if c is None:
            c = scenario.prompt_lens() + 1
        if q is None:
            q = np.ones_like(c)
    else:
        if c is None and q is None:
            c = scenario.prompt_lens()
        if c is None:
            c = q.copy()
        if q is None:
            q = c.copy()
    if c.ndim != 1 or q.shape != c.shape:
        raise ConfigError(
            f"query_tokens ({q.shape}) and context_lens ({c.shape}) must be 1-D arrays of one length",
            key="query_tokens",
        )
    if len(c) == 0 or q.min() < 1:
        raise ConfigError("expected at least one request with >= 1 query token", key="query_tokens")
    if np.any(c < q):
        raise ConfigError(
            "context_lens must be >= query_tokens (the context includes this step's tokens)", key="context_lens"
        )
    return c, q


class _Rows:
    """Collects rows; small helpers fill flops/bytes from shapes."""

    def __init__(self, w: float, a: float):
        self.rows: list[dict] = []
        self.w, self.a = w, a

    def add(self, **r) -> None:
        self.rows.append(r)

    def matmul(self, op, group, count, m, n, k, batch=1, bias=False, weight_batch=None, tokens_m=None):
        """(m x k) @ (k x n) x batch; weight_batch = (fractional) weight matrices read;
        tokens_m = exact total rows over the batch (MoE) when m is an average."""
        wb = batch if weight_batch is None else weight_batch
        rows_total = m * batch if tokens_m is None else tokens_m
        flops = 2.0 * rows_total * n * k + (rows_total * n if bias else 0.0)
        self.add(
            op=op,
            cls="matmul",
            layer_group=group,
            count=count,
            m=m,
            n=n,
            k=k,
            batch=batch,
            flops=flops,
            weight_bytes=wb * (k * n + (n if bias else 0)) * self.w,
            act_bytes=rows_total * (k + n) * self.a,
        )

    def elementwise(self, op, group, count, elements, flops_per, reads=1, writes=1, weights=0, m=0, n=0):
        self.add(
            op=op,
            cls="elementwise",
            layer_group=group,
            count=count,
            m=m,
            n=n,
            batch=1,
            flops=float(elements) * flops_per,
            weight_bytes=weights * self.w,
            act_bytes=float(elements) * (reads + writes) * self.a,
        )


def build_trace(
    model: ModelSpec,
    scenario: Scenario,
    phase: str,
    tp: int = 1,
    context_lens: np.ndarray | None = None,
    query_tokens: np.ndarray | None = None,
    sampler: tuple | None = None,
) -> OpTrace:
    """One step of ``model`` on one of ``tp`` ranks (see the module docstring for the rows).

    decode: each request processes query_tokens (default 1) token(s) and attends to context_lens
    tokens (default scenario.prompt_lens() + 1: the first decode step). prefill: each request
    processes its prompt (query_tokens = context_lens = prompt lengths by default) causally.
    Uneven tp: the rank of the largest shards, with flops_share / bytes_share per row.
    ``sampler`` = (HBM bytes, FLOPs) per vocabulary entry per sampled token: a ``sampler`` row after the LM
    head (a serving stack's sampling, :func:`attnsim.hwmodels.stack.sampler_cost`); None: no row.
    """
    check_tp(model, tp)
    c, q = _lengths(scenario, phase, context_lens, query_tokens)
    if not _uneven(model, tp):  # every rank alike
        kv = 1 if model.mla is not None or model.num_kv_heads < tp else model.num_kv_heads // tp
        return _trace(
            model,
            phase,
            tp,
            c,
            q,
            *_step_rows(
                model,
                scenario,
                phase,
                tp,
                (
                    model.num_heads // tp,
                    kv,
                    model.intermediate_size // tp,
                    model.moe.expert_intermediate_size // tp if model.moe else 0,
                ),
                c,
                q,
                sampler,
            ),
        )
    shards = _rank_shards(model, tp)
    largest = tuple(int(x) for x in shards.max(axis=0))
    rows, meta = _step_rows(model, scenario, phase, tp, largest, c, q, sampler)
    meta = {**meta, **_uneven_meta(model, tp)}
    flops_sum, bytes_sum = np.zeros(len(rows)), np.zeros(len(rows))
    shapes, mult = np.unique(shards, axis=0, return_counts=True)
    for shape, k in zip(shapes, mult):
        rk = _step_rows(model, scenario, phase, tp, tuple(int(x) for x in shape), c, q, sampler)[0]
        flops_sum += k * np.array([r.get("flops", 0.0) for r in rk])
        bytes_sum += k * np.array([_row_bytes(r) for r in rk])
    top_f = np.array([r.get("flops", 0.0) for r in rows])
    top_b = np.array([_row_bytes(r) for r in rows])
    for r, fs, bs, f, b in zip(rows, flops_sum, bytes_sum, top_f, top_b):
        r["flops_share"] = fs / (tp * f) if f > 0 else 1.0
        r["bytes_share"] = bs / (tp * b) if b > 0 else 1.0
    return _trace(model, phase, tp, c, q, rows, meta)


def _trace(model, phase, tp, c, q, rows, meta) -> OpTrace:
    return OpTrace.from_rows(
        rows,
        phase=phase,
        model=model.name,
        tp=int(tp),
        query_tokens=q,
        context_lens=c,
        groups=layer_groups(model),
        meta=meta,
    )


def _rank_shards(model: ModelSpec, tp: int) -> np.ndarray:
    """(tp, 4) int array: per rank its query heads, KV heads, FFN columns, expert FFN columns
    (0 for a width the model does not have)."""
    zero = np.zeros(tp, dtype=np.int64)
    dense = model.moe is None or model.moe.first_dense_layers > 0
    return np.stack(
        [
            _split(model.num_heads, tp),
            kv_heads_by_rank(model, tp),
            _split(model.intermediate_size, tp) if dense else zero,
            _split(model.moe.expert_intermediate_size, tp) if model.moe else zero,
        ],
        axis=1,
    )


def _row_bytes(r: dict) -> float:
    return float(
        sum(r.get(k, 0.0) for k in ("weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes", "comm_bytes"))
    )


def _uneven_meta(model: ModelSpec, tp: int) -> dict:
    """Trace meta of an uneven split: the fullest rank's weight fraction (mappers' capacity), the
    GQA group of the largest shard (query heads sharing one KV head, for PIM items)."""
    w = weight_bytes(model)
    g = model.num_heads // (model.num_kv_heads if model.mla is None else 1)
    return {
        "weights_per_rank_fraction": weight_bytes_per_rank(model, None, tp) / w if w else 1.0 / tp,
        "query_heads_per_kv_head": min(g, int(_split(model.num_heads, tp).max())),
    }


def _step_rows(
    model: ModelSpec,
    scenario: Scenario,
    phase: str,
    tp: int,
    shard: tuple,
    c: np.ndarray,
    q: np.ndarray,
    sampler: tuple | None = None,
) -> tuple[list[dict], dict]:
    """Rows and meta of one rank holding ``shard`` = (query heads, KV heads, FFN columns, expert FFN columns)."""
    B, T = len(c), int(q.sum())
    w_dtype = scenario.weight_dtype or model.dtype
    wd, ad, kd = DTYPE_BYTES[w_dtype], DTYPE_BYTES[scenario.act_dtype], DTYPE_BYTES[scenario.kv_dtype]
    h = model.hidden_size
    H, Hkv, inter_rank, ei_rank = shard
    mla = model.mla
    if mla is not None:
        d_qk = mla.kv_lora_rank + mla.qk_rope_head_dim  # absorbed score dim
        d_ctx = mla.kv_lora_rank  # context accumulated in latent space
        kv_tok = (mla.kv_lora_rank + mla.qk_rope_head_dim) * kd
        k_tok, v_tok = kv_tok, 0.0  # latent counted once, on attn_score
        o_in = H * mla.v_head_dim
    else:
        d_qk = d_ctx = model.head_dim
        k_tok = v_tok = Hkv * model.head_dim * kd
        kv_tok = k_tok + v_tok
        o_in = H * model.head_dim
    norm_w = h * (2 if model.norm == "layernorm" else 1)
    nf = NORM_FLOPS[model.norm]
    m_attn = -(-T // B)
    comm = 2.0 * (tp - 1) / tp * T * h * ad
    R = _Rows(wd, ad)
    groups = layer_groups(model)
    moe_meta = {}

    for gi, g in enumerate(groups):
        n = g.num_layers
        R.elementwise("attn_norm", gi, n, T * h, nf, weights=norm_w, m=T, n=h)
        if mla is None:
            R.matmul("qkv_proj", gi, n, T, (H + 2 * Hkv) * model.head_dim, h, bias=model.bias or model.qkv_bias)
        else:
            qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            q_out = H * qk if mla.q_lora_rank is None else mla.q_lora_rank
            # q projection (or q down-projection) fused with the kv down-projection kv_a
            R.matmul("qkv_proj", gi, n, T, q_out + mla.kv_lora_rank + mla.qk_rope_head_dim, h)
            if mla.q_lora_rank is not None:
                R.elementwise(
                    "q_norm",
                    gi,
                    n,
                    T * mla.q_lora_rank,
                    NORM_FLOPS["rmsnorm"],
                    weights=mla.q_lora_rank,
                    m=T,
                    n=mla.q_lora_rank,
                )
                R.matmul("q_up", gi, n, T, H * qk, mla.q_lora_rank)
            R.elementwise(
                "kv_norm",
                gi,
                n,
                T * mla.kv_lora_rank,
                NORM_FLOPS["rmsnorm"],
                weights=mla.kv_lora_rank,
                m=T,
                n=mla.kv_lora_rank,
            )
            R.matmul("mla_q_absorb", gi, n, T, mla.kv_lora_rank, mla.qk_nope_head_dim, batch=H)
        if model.position == "rope":
            if mla is None:
                el = T * (H + Hkv) * model.head_dim
            else:
                el = T * (H + 1) * mla.qk_rope_head_dim
            R.elementwise("rope", gi, n, el, ROPE_FLOPS)
        pairs = attention_pairs(c, q, g.window)
        uniq = kv_tokens_read(c, q, g.window)
        R.add(
            op="attn_score",
            cls="attn_score",
            layer_group=gi,
            count=n,
            m=m_attn,
            n=uniq,
            k=d_qk,
            batch=H,
            flops=2.0 * H * pairs * d_qk,
            act_bytes=(T * H * d_qk + H * pairs) * ad,
            kv_read_bytes=uniq * k_tok,
            kv_write_bytes=T * k_tok,
        )
        R.add(
            op="softmax",
            cls="softmax",
            layer_group=gi,
            count=n,
            m=m_attn,
            n=uniq,
            k=0,
            batch=H,
            flops=float(SOFTMAX_FLOPS * H * pairs),
            act_bytes=2.0 * H * pairs * ad,
        )
        R.add(
            op="attn_context",
            cls="attn_context",
            layer_group=gi,
            count=n,
            m=m_attn,
            n=uniq,
            k=d_ctx,
            batch=H,
            flops=2.0 * H * pairs * d_ctx,
            act_bytes=(H * pairs + T * H * d_ctx) * ad,
            kv_read_bytes=uniq * v_tok,
            kv_write_bytes=T * v_tok,
        )
        if mla is not None:
            R.matmul("mla_v_up", gi, n, T, mla.v_head_dim, mla.kv_lora_rank, batch=H)
        R.matmul("out_proj", gi, n, T, h, o_in, bias=model.bias)
        if tp > 1:
            R.add(op="attn_allreduce", cls="allreduce", layer_group=gi, count=n, m=T, n=h, batch=1, comm_bytes=comm)
        R.elementwise("attn_residual", gi, n, T * h, RESIDUAL_FLOPS, reads=2, m=T, n=h)
        R.elementwise("ffn_norm", gi, n, T * h, nf, weights=norm_w, m=T, n=h)
        act_f = activation_flops(model.activation)
        if not g.moe:
            inter = inter_rank
            up = inter * (2 if model.ffn_gated else 1)
            R.matmul("mlp_up", gi, n, T, up, h, bias=model.bias)
            R.elementwise(
                "mlp_act",
                gi,
                n,
                T * inter,
                act_f + (GATE_FLOPS if model.ffn_gated else 0),
                reads=2 if model.ffn_gated else 1,
                m=T,
                n=inter,
            )
            R.matmul("mlp_down", gi, n, T, h, inter, bias=model.bias)
        else:
            e = model.moe
            ei = ei_rank
            routed = T * e.experts_per_token
            touched = expected_experts(T, e.num_experts, e.experts_per_token)
            nb = max(1, int(round(touched)))
            m_exp = -(-routed // nb)
            moe_meta = {"experts_touched": touched, "experts_batch": nb}
            R.matmul("moe_router", gi, n, T, e.num_experts, h)
            R.matmul("moe_expert_up", gi, n, m_exp, 2 * ei, h, batch=nb, weight_batch=touched, tokens_m=routed)
            R.elementwise("moe_act", gi, n, routed * ei, act_f + GATE_FLOPS, reads=2, m=routed, n=ei)
            R.matmul("moe_expert_down", gi, n, m_exp, h, ei, batch=nb, weight_batch=touched, tokens_m=routed)
            if e.num_shared_experts:
                si = e.num_shared_experts * ei  # shared experts run as one wider MLP (DeepSeek-V2)
                R.matmul("moe_shared_up", gi, n, T, 2 * si, h)
                R.elementwise("moe_shared_act", gi, n, T * si, act_f + GATE_FLOPS, reads=2, m=T, n=si)
                R.matmul("moe_shared_down", gi, n, T, h, si)
        if tp > 1:
            R.add(op="mlp_allreduce", cls="allreduce", layer_group=gi, count=n, m=T, n=h, batch=1, comm_bytes=comm)
        R.elementwise("ffn_residual", gi, n, T * h, RESIDUAL_FLOPS, reads=2, m=T, n=h)

    # once per step
    learned = model.position == "learned"
    R.add(
        op="embedding",
        cls="embedding",
        layer_group=-1,
        count=1,
        m=T,
        n=h,
        batch=1,
        flops=float(T * h) if learned else 0.0,  # learned: token + position embedding add
        weight_bytes=T * h * wd * (2 if learned else 1),
        act_bytes=T * h * ad,
    )
    R.elementwise("final_norm", -1, 1, T * h, nf, weights=norm_w, m=T, n=h)
    last = B if phase == "prefill" else T
    R.matmul("lm_head", -1, 1, last, -(-model.vocab_size // tp), h)
    if sampler is not None:  # every rank samples the gathered full-vocabulary logits (attnsim.hwmodels.stack)
        logits = float(last) * model.vocab_size
        R.add(
            op="sampler",
            cls="elementwise",
            layer_group=-1,
            count=1,
            m=last,
            n=model.vocab_size,
            batch=1,
            flops=logits * sampler[1],
            act_bytes=logits * sampler[0],
        )

    meta = {
        "heads_per_rank": H,
        "kv_heads_per_rank": Hkv,
        "head_dim": model.head_dim,
        "attn_score_dim": d_qk,
        "attn_context_dim": d_ctx,
        "kv_bytes_per_token_per_layer": kv_tok,
        "weight_dtype": w_dtype,
        "act_dtype": scenario.act_dtype,
        "kv_dtype": scenario.kv_dtype,
        "hidden_size": h,
        "num_layers": model.num_layers,
        "num_heads": model.num_heads,
        "num_kv_heads": model.num_kv_heads,
        "intermediate_size": model.intermediate_size,
        "vocab_size": model.vocab_size,
        "mla": mla is not None,
        "moe": model.moe is not None,
        "batch_size": B,
        "tokens": T,
        **moe_meta,
    }
    return R.rows, meta
