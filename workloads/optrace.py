"""OpTrace: one step (prefill or decode) of a model as a structure of numpy arrays.

One row per operator class per layer group; ``count`` says how many identical
repeats (layers) the row stands for, so identical layers are simulated once.
All per-row quantities (flops, bytes) are for ONE repeat on ONE tensor-parallel
rank; totals are ``value * count``.

Columns (all numpy arrays of equal length):

=============== ======= ==========================================================
column          dtype   meaning
=============== ======= ==========================================================
op              str     role name, e.g. ``qkv_proj``, ``attn_score`` (breakdown key)
cls             str     compute class a device model dispatches on:
                        ``matmul`` (activations x weights), ``attn_score``,
                        ``attn_context``, ``softmax``, ``elementwise``,
                        ``allreduce``, ``embedding``, ``transfer`` (a
                        point-to-point copy a mapper adds, e.g. q to PIM)
layer_group     int64   index into ``OpTrace.groups`` (-1: not per layer)
count           int64   identical repeats (layers) this row stands for
m, n, k         int64   matmul dims: (m x k) @ (k x n). For attention rows:
                        m = query tokens per (request, head), n = total context
                        tokens read summed over requests, k = head dim
batch           int64   independent matmuls in the row (e.g. heads; experts)
flops           float64 floating-point operations (2 per MAC)
weight_bytes    float64 weight bytes read
act_bytes       float64 activation bytes read + written
kv_read_bytes   float64 KV-cache bytes read
kv_write_bytes  float64 KV-cache bytes written
comm_bytes      float64 bytes each rank sends+receives in a collective, or
                        moves in a transfer
flops_share     float64 uneven tensor parallelism: sum over the tp ranks of this
                        row's FLOPs / (tp x ``flops``); 1 when tp divides the
                        model (and for rows mappers add)
bytes_share     float64 the same for the row's bytes (weight + act + KV + comm)
=============== ======= ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COLUMNS = (
    "op",
    "cls",
    "layer_group",
    "count",
    "m",
    "n",
    "k",
    "batch",
    "flops",
    "weight_bytes",
    "act_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "comm_bytes",
    "flops_share",
    "bytes_share",
)
#: columns whose missing value is not 0
DEFAULTS = {"flops_share": 1.0, "bytes_share": 1.0}
INT_COLUMNS = ("layer_group", "count", "m", "n", "k", "batch")
FLOAT_COLUMNS = (
    "flops",
    "weight_bytes",
    "act_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "comm_bytes",
    "flops_share",
    "bytes_share",
)
OP_CLASSES = ("matmul", "attn_score", "attn_context", "softmax", "elementwise", "allreduce", "embedding", "transfer")


@dataclass
class LayerGroup:
    """Layers that share one attention shape (e.g. Gemma-2 local vs global)."""

    name: str
    num_layers: int
    attention: str  # "global" | "local"
    window: int  # 0 = unlimited
    moe: bool


@dataclass
class OpTrace:
    """One step of one model on one tensor-parallel rank."""

    phase: str  # "prefill" | "decode"
    model: str
    tp: int
    query_tokens: np.ndarray  # per request: tokens processed this step (1 in decode)
    context_lens: np.ndarray  # per request: KV tokens attended to (incl. this step's), before window caps
    groups: list[LayerGroup]
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # heads/kv heads per rank, head dim, dtypes, ...

    def __len__(self) -> int:
        return len(self.cols["op"]) if self.cols else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def total(self, column: str) -> float:
        """Sum of ``column x count`` over all rows (one rank)."""
        return float(np.sum(self.cols[column] * self.cols["count"]))

    def rows(self):
        """Iterate rows as dicts (for reports and tests; not for hot paths)."""
        for i in range(len(self)):
            yield {c: self.cols[c][i] for c in COLUMNS}

    @staticmethod
    def from_rows(rows: list[dict], **kw) -> "OpTrace":
        cols = {}
        for c in COLUMNS:
            d = DEFAULTS.get(c, 0)  # looked up once per column, not per row (a serving run builds ~2 traces per shape)
            vals = [r.get(c, d) for r in rows]
            if c in ("op", "cls"):
                cols[c] = np.array(vals, dtype=object).astype(str)
            elif c in INT_COLUMNS:
                cols[c] = np.array(vals, dtype=np.int64)
            else:
                cols[c] = np.array(vals, dtype=np.float64)
        bad = set(cols["cls"]) - set(OP_CLASSES)
        if bad:
            raise ValueError(f"unknown op classes {sorted(bad)}")
        return OpTrace(cols=cols, **kw)
