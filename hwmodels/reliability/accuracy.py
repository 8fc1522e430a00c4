"""L0 accuracy proxy: attention with clean vs stored/corrupted K and V (cxl_reliability.md §5(4)).

For q (heads, d) and K, V (heads, tokens, d): ``o = softmax(q K^T / sqrt(d)) V`` per head, and

- ``rel_err``: mean over heads of ||o' - o|| / ||o|| (inf when the output is not finite),
- ``rel_err_clipped``: the same with each head's error capped at 1 (the output is lost),
- ``kl``: mean over heads of KL(a || a') of the attention weights,
- ``iw_value_err``: sum_i a_i ||V'_i - V_i|| / sum_i a_i ||V_i|| (importance-weighted value error).

Synthetic q/K/V (the default) reproduce three properties of real KV caches: heavy-tailed
attention (Student-t logits), attention sinks (the first tokens take a large share of the
mass and carry small values; StreamingLLM [M]) and key channel outliers (a few channels with
much larger magnitude; KIVI / KVQuant, §4.2). Real dumps can be loaded from .npz / .h5 with
datasets ``q``, ``k``, ``v``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.hwmodels.reliability.formats import (
    FIELD_GROUPS,
    FIELDS,
    FLOAT_FORMATS,
    INT_FORMATS,
    Encoded,
    decode,
    encode,
    token_mask_from_elements,
)

CATASTROPHIC_REL_ERR = 1.0  # a head whose output error reaches its norm counts as lost


def synthetic_qkv(
    n_heads: int = 4,
    n_tokens: int = 256,
    head_dim: int = 64,
    *,
    seed: int = 0,
    n_sinks: int = 1,
    sink_mass: float = 0.3,
    tail_df: float = 4.0,
    logit_scale: float = 1.0,
    outlier_channels: int = 4,
    outlier_scale: float = 8.0,
) -> dict:
    """Synthetic per-head q, K, V with heavy-tailed attention, sinks and key channel outliers."""
    rng = np.random.default_rng(seed)
    H, T, d = n_heads, n_tokens, head_dim
    ch_scale = np.ones(d)
    ch_scale[rng.choice(d, size=min(outlier_channels, d), replace=False)] = outlier_scale
    K = rng.standard_normal((H, T, d)) * ch_scale
    q = rng.standard_normal((H, d))
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    z = logit_scale * rng.standard_t(tail_df, size=(H, T))
    if n_sinks:
        rest = np.log(np.exp(z[:, n_sinks:]).sum(axis=1))
        z[:, :n_sinks] = (rest + np.log(sink_mass / (1 - sink_mass)) - np.log(n_sinks))[:, None]
    # move each key along q so that its logit is exactly z
    cur = np.einsum("hd,htd->ht", q, K) / np.sqrt(d)
    K += ((z - cur) * np.sqrt(d) / np.linalg.norm(q, axis=1, keepdims=True))[:, :, None] * qn[:, None, :]
    V = rng.standard_normal((H, T, d))
    V[:, :n_sinks] *= 0.1
    return {"q": q.astype(np.float32), "k": K.astype(np.float32), "v": V.astype(np.float32)}


def load_qkv(path: str | Path) -> dict:
    """Load q (heads, d) and k, v (heads, tokens, d) from .npz or .h5 (extra leading dims are flattened)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=str(path))
    try:
        if path.suffix == ".npz":
            with np.load(path) as f:
                data = {n: np.asarray(f[n]) for n in ("q", "k", "v") if n in f}
        elif path.suffix in (".h5", ".hdf5"):
            import h5py

            with h5py.File(path, "r") as f:
                data = {n: np.asarray(f[n]) for n in ("q", "k", "v") if n in f}
        else:
            raise ConfigError(f"expected a .npz or .h5 file, got {path.suffix!r}", file=str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read KV dump ({exc})", file=str(path)) from None
    for n in ("q", "k", "v"):
        if n not in data:
            raise ConfigError("missing dataset", file=str(path), key=n)
    q, k, v = data["q"], data["k"], data["v"]
    if k.ndim < 3 or k.shape != v.shape or q.shape[-1] != k.shape[-1] or q.shape[:-1] != k.shape[:-2]:
        raise ConfigError(
            f"expected q (..., heads, d) and k, v (..., heads, tokens, d), got q {q.shape}, k {k.shape}, v {v.shape}",
            file=str(path),
        )
    d, T = k.shape[-1], k.shape[-2]
    return {
        "q": q.reshape(-1, d).astype(np.float32),
        "k": k.reshape(-1, T, d).astype(np.float32),
        "v": v.reshape(-1, T, d).astype(np.float32),
    }


def attention(q: np.ndarray, K: np.ndarray, V: np.ndarray, drop: np.ndarray | None = None):
    """Per-head attention output (heads, d) and weights (heads, tokens), in float64."""
    with np.errstate(all="ignore"):
        q, K, V = (np.asarray(a, dtype=np.float64) for a in (q, K, V))
        z = np.einsum("hd,htd->ht", q, K) / np.sqrt(q.shape[-1])
        if drop is not None:
            z = np.where(drop, -np.inf, z)
        zmax = np.max(z, axis=1, keepdims=True)
        e = np.exp(z - zmax)
        a = e / e.sum(axis=1, keepdims=True)
        o = np.einsum("ht,htd->hd", a, V)
    return o, a


def metrics(q, K, V, K2, V2, drop=None) -> dict:
    """Error metrics of attention with (K2, V2, dropped tokens) against (K, V)."""
    o, a = attention(q, K, V)
    o2, a2 = attention(q, K2, V2, drop)
    with np.errstate(all="ignore"):
        e = np.linalg.norm(o2 - o, axis=1) / np.linalg.norm(o, axis=1)
        e = np.where(np.isfinite(e), e, np.inf)
        kl_terms = np.where(a > 0, a * (np.log(a) - np.log(a2)), 0.0)
        kl = np.sum(kl_terms, axis=1)
        kl = np.where(np.isfinite(kl), kl, np.inf)
        dv = np.linalg.norm(np.asarray(V2, np.float64) - V, axis=2)
        iw = np.sum(a * dv) / np.sum(a * np.linalg.norm(V, axis=2))
    return {
        "rel_err": float(np.mean(e)),
        "rel_err_clipped": float(np.mean(np.minimum(e, CATASTROPHIC_REL_ERR))),
        "rel_err_per_head": e,
        "kl": float(np.mean(kl)),
        "iw_value_err": float(iw) if np.isfinite(iw) else np.inf,
    }


# ---------------------------------------------------------------- stored KV


def store(x: np.ndarray, fmt: str, kind: str, group: int = 32) -> Encoded:
    """Store (heads, tokens, d) as one (heads*tokens, d) tensor; keys per channel, values per token (KIVI)."""
    H, T, d = x.shape
    return encode(x.reshape(H * T, d), fmt, axis="channel" if kind == "k" else "token", group=group)


def unstore(enc: Encoded, H: int) -> np.ndarray:
    x = decode(enc)
    return x.reshape(H, -1, x.shape[-1])


def evaluate(
    qkv: dict,
    fmt: str,
    specs_k=(),
    specs_v=(),
    *,
    seed: int = 0,
    due_policy: str = "recompute",
    group: int = 32,
    reference: str = "float",
) -> dict:
    """Store K and V in ``fmt``, inject with the given StreamSpecs, and measure the proxy.

    ``reference``: ``"float"`` compares against the unquantized tensors (quantization and bit
    errors in one error space), ``"stored"`` against the error-free stored tensors (bit errors only).
    ``due_policy``: ``"recompute"`` restores detected-uncorrectable data (a latency cost),
    ``"drop"`` masks the tokens it touches out of the softmax (an accuracy cost).
    """
    if due_policy not in ("recompute", "drop"):
        raise ValueError(f"due_policy must be 'recompute' or 'drop', got {due_policy!r}")
    from attnsim.hwmodels.reliability.inject import inject  # Numba kernels: imported where bit errors are injected

    q, K, V = qkv["q"], qkv["k"], qkv["v"]
    H, T, _ = K.shape
    ek, ev = store(K, fmt, "k", group), store(V, fmt, "v", group)
    rk = inject(ek, list(specs_k), seed=seed * 2 + 0)
    rv = inject(ev, list(specs_v), seed=seed * 2 + 1)
    drop = None
    if due_policy == "drop":
        drop = (token_mask_from_elements(ek, rk.due_masks) | token_mask_from_elements(ev, rv.due_masks)).reshape(H, T)
    if reference == "float":
        Kr, Vr = K, V
    else:
        Kr, Vr = unstore(ek, H), unstore(ev, H)
    out = metrics(q, Kr, Vr, unstore(rk.encoded, H), unstore(rv.encoded, H), drop)
    out["silent_k"], out["silent_v"] = rk.silent_counts, rv.silent_counts
    out["raw_k"], out["raw_v"] = rk.raw_counts, rv.raw_counts
    out["due_units"] = rk.stats["due"] + rv.stats["due"]
    out["dropped_tokens"] = int(drop.sum()) if drop is not None else 0
    return out


# ---------------------------------------------------------------- calibration tables for the planner


@lru_cache(maxsize=64)
def quant_error(fmt: str, group: int = 32, seed: int = 0) -> float:
    """Relative attention error (clipped, mean over heads) of storing K and V in ``fmt`` (no bit errors)."""
    return evaluate(synthetic_qkv(seed=seed), fmt, group=group)["rel_err_clipped"]


@lru_cache(maxsize=64)
def field_sensitivity(fmt: str, kind: str, group: int = 32, trials: int = 64, seed: int = 0) -> dict:
    """Mean clipped per-head relative error caused by ONE flipped bit of each field, in K or V.

    Single bits are flipped at uniformly random elements (random tokens) of the stored
    tensor, one per trial, on synthetic data; the error is the clipped relative error of the
    head(s) it reaches (a scale flip of a per-channel key group can reach only one head).
    """
    H = 4
    qkv = synthetic_qkv(n_heads=H, seed=seed)
    q, K, V = qkv["q"], qkv["k"], qkv["v"]
    x = K if kind == "k" else V
    enc = store(x, fmt, kind, group)
    clean = unstore(enc, H)
    rng = np.random.default_rng(seed + 17)
    out = {}
    for f in FIELDS:
        slots = [
            (name, b) for name, p in enc.planes.items() for b in range(p.elem_bits) if FIELDS[p.field_of_bit[b]] == f
        ]
        if not slots:
            continue
        errs = []
        for _ in range(trials):
            name, b = slots[rng.integers(len(slots))]
            e2 = enc.copy()
            w = e2.planes[name].words
            i = rng.integers(w.size)
            w[i] ^= w.dtype.type(1 << b)
            y = unstore(e2, H)
            Km, Vm = (y, V) if kind == "k" else (K, y)
            Kc, Vc = (clean, V) if kind == "k" else (K, clean)
            e = metrics(q, Kc, Vc, Km, Vm)["rel_err_per_head"]  # only the hit head(s) change
            errs.append(float(np.sum(np.minimum(e, CATASTROPHIC_REL_ERR))))
        out[f] = float(np.mean(errs))
    return out


def field_bits(fmt: str, group: int = 32) -> dict:
    """Stored bits per KV element by field (integer formats: metadata amortised over the group)."""
    if fmt in FLOAT_FORMATS:
        bits, e, m = FLOAT_FORMATS[fmt]
        return {"sign": 1.0, "exp_msb": 1.0, "exp_other": float(e - 1), "mantissa": float(m)}
    b = INT_FORMATS[fmt]
    return {"code_msb": 1.0, "code_low": float(b - 1), "scale": 32.0 / group}


def fields_in(group_name: str) -> tuple:
    if group_name not in FIELD_GROUPS:
        raise ValueError(f"unknown field group {group_name!r} (known: {', '.join(FIELD_GROUPS)})")
    return FIELD_GROUPS[group_name]
