"""Measured mapping from the L0 proxy (relative attention error) to perplexity change.

A small decoder-only transformer (character level, one pre-LN block: causal multi-head
attention + ReLU MLP, learned positions) is written and trained here in numpy (forward,
manual backprop, Adam) on real English text that every Python install ships: the stdlib
``pydoc_data.topics`` help texts (the first ``1 - heldout`` share of the characters trains,
the last share is held out). Its KV cache (keys and values of every position of each
held-out window) is stored with the project's formats (:func:`accuracy.store`: bf16, fp8,
KIVI int8/int4 via quant.py), corrupted by :func:`inject.inject` at a per-bit flip rate
(BER, no ECC: the same error model the planner uses), read back, and the model's held-out
perplexity is measured together with the proxy on the SAME corrupted caches: the mean over
heads and query positions of ``min(||o' - o|| / ||o||, 1)`` of the attention outputs against
the float cache (accuracy.metrics' ``rel_err_clipped``, here with a causal mask).

Catastrophic corruption (non-finite logits at a position) costs that position the uniform
loss ``log(vocab)`` (its prediction is lost), so every measured perplexity is finite.

:func:`fit_mapping` fits ``log(1 + ppl_increase) = s_quant e_quant + s_bit e_bit`` (the proxy
split into its quantization part, the format's error at BER 0, and the bit-error rest) and
reports the residuals; :func:`error_weights` turns a perplexity-increase SLO into weights on
the planner's two error parts (planner.Planner ``error_weights``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnsim.hwmodels.reliability.accuracy import CATASTROPHIC_REL_ERR, store, unstore
from attnsim.hwmodels.reliability.inject import StreamSpec, inject

TEXT_SOURCE = "Python stdlib pydoc_data.topics (the help() topic texts), keys sorted, printable ASCII + newline"


@dataclass(frozen=True)
class LMConfig:
    d_model: int = 48
    n_heads: int = 4
    context: int = 32
    steps: int = 200
    batch: int = 32
    lr: float = 3e-3
    heldout: float = 0.1
    eval_windows: int = 64
    seed: int = 0

    def describe(self) -> str:
        return (
            f"char-level decoder-only transformer, 1 pre-LN block, d_model {self.d_model}, "
            f"{self.n_heads} heads, context {self.context}, ReLU MLP 4x, trained {self.steps} Adam steps "
            f"(batch {self.batch}, lr {self.lr:g}, seed {self.seed}) in numpy"
        )


def load_text() -> str:
    from pydoc_data.topics import topics

    s = "".join(topics[k] for k in sorted(topics))
    return "".join(c for c in s if c == "\n" or " " <= c <= "~")


def split_text(cfg: LMConfig) -> tuple[np.ndarray, np.ndarray, list]:
    text = load_text()
    cut = int(len(text) * (1 - cfg.heldout))
    vocab = sorted(set(text))
    idx = {c: i for i, c in enumerate(vocab)}
    ids = np.array([idx[c] for c in text], dtype=np.int64)
    return ids[:cut], ids[cut:], vocab


# ---------------------------------------------------------------- model


def _ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    s = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mu) / s
    return xh * g + b, (xh, s)


def _ln_back(dy, g, cache):
    xh, s = cache
    dxh = dy * g
    dx = (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True)) / s
    red = tuple(range(dy.ndim - 1))
    return dx, (dy * xh).sum(red), dy.sum(red)


def init_params(vocab: int, cfg: LMConfig) -> dict:
    rng = np.random.default_rng(cfg.seed)
    d = cfg.d_model
    n = lambda *s, std=0.02: (rng.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    return {
        "E": n(vocab, d),
        "P": n(cfg.context, d),
        "g1": np.ones(d, np.float32),
        "b1": np.zeros(d, np.float32),
        "Wqkv": n(d, 3 * d, std=d**-0.5),
        "Wo": n(d, d, std=0.5 * d**-0.5),
        "g2": np.ones(d, np.float32),
        "b2": np.zeros(d, np.float32),
        "W1": n(d, 4 * d, std=d**-0.5),
        "c1": np.zeros(4 * d, np.float32),
        "W2": n(4 * d, d, std=0.5 * (4 * d) ** -0.5),
        "c2": np.zeros(d, np.float32),
        "gf": np.ones(d, np.float32),
        "bf": np.zeros(d, np.float32),
        "U": n(d, vocab, std=d**-0.5),
        "bu": np.zeros(vocab, np.float32),
    }


def _mm(x, W):
    """x (..., n) @ W (n, m) as one 2-D matmul (numpy's stacked matmul is much slower)."""
    return (x.reshape(-1, x.shape[-1]) @ W).reshape(*x.shape[:-1], W.shape[1])


def _heads(x, H):
    B, T, d = x.shape
    return x.reshape(B, T, H, d // H).transpose(0, 2, 1, 3)


def forward(p: dict, X: np.ndarray, H: int, kv: tuple | None = None, keep: bool = False):
    """Logits (B, T, vocab). ``kv``: (K, V) of shape (B, H, T, hd) replacing the computed cache.

    Returns (logits, cache); the cache holds the clean q, K, V and attention output (and, with
    ``keep``, everything the backward pass needs)."""
    B, T = X.shape
    x0 = p["E"][X] + p["P"][:T]
    a, c1 = _ln(x0, p["g1"], p["b1"])
    qkv = _mm(a, p["Wqkv"])
    d = x0.shape[-1]
    q, k, v = (_heads(qkv[..., i * d : (i + 1) * d], H) for i in range(3))
    if kv is not None:
        k, v = kv
    hd = d // H
    with np.errstate(all="ignore"):
        S = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        S = np.where(np.tril(np.ones((T, T), bool)), S, -np.inf)
        S = S - S.max(-1, keepdims=True)
        A = np.exp(S)
        A /= A.sum(-1, keepdims=True)
        O = A @ v
        Oc = O.transpose(0, 2, 1, 3).reshape(B, T, d)
        x1 = x0 + _mm(Oc, p["Wo"])
        m, c2 = _ln(x1, p["g2"], p["b2"])
        hpre = _mm(m, p["W1"]) + p["c1"]
        h = np.maximum(hpre, 0)
        x2 = x1 + _mm(h, p["W2"]) + p["c2"]
        f, c3 = _ln(x2, p["gf"], p["bf"])
        logits = _mm(f, p["U"]) + p["bu"]
    cache = {"q": q, "k": k, "v": v, "O": O}
    if keep:
        cache.update(X=X, a=a, c1=c1, A=A, Oc=Oc, m=m, c2=c2, hpre=hpre, h=h, f=f, c3=c3)
    return logits, cache


def loss_and_grads(p: dict, X: np.ndarray, Y: np.ndarray, H: int):
    logits, c = forward(p, X, H, keep=True)
    B, T, Vn = logits.shape
    z = logits - logits.max(-1, keepdims=True)
    pr = np.exp(z)
    pr /= pr.sum(-1, keepdims=True)
    loss = -np.mean(np.log(pr.reshape(-1, Vn)[np.arange(B * T), Y.ravel()] + 1e-30))
    dl = pr
    dl.reshape(-1, Vn)[np.arange(B * T), Y.ravel()] -= 1
    dl /= B * T
    g = {}
    g["U"] = c["f"].reshape(-1, c["f"].shape[-1]).T @ dl.reshape(-1, Vn)
    g["bu"] = dl.sum((0, 1))
    dx2, g["gf"], g["bf"] = _ln_back(_mm(dl, p["U"].T), p["gf"], c["c3"])
    d = dx2.shape[-1]
    g["W2"] = c["h"].reshape(-1, 4 * d).T @ dx2.reshape(-1, d)
    g["c2"] = dx2.sum((0, 1))
    dhpre = _mm(dx2, p["W2"].T) * (c["hpre"] > 0)
    g["W1"] = c["m"].reshape(-1, d).T @ dhpre.reshape(-1, 4 * d)
    g["c1"] = dhpre.sum((0, 1))
    dm, g["g2"], g["b2"] = _ln_back(_mm(dhpre, p["W1"].T), p["g2"], c["c2"])
    dx1 = dx2 + dm
    g["Wo"] = c["Oc"].reshape(-1, d).T @ dx1.reshape(-1, d)
    dO = _heads(_mm(dx1, p["Wo"].T), H)
    A, q, k, v = c["A"], c["q"], c["k"], c["v"]
    dA = dO @ v.transpose(0, 1, 3, 2)
    dv = A.transpose(0, 1, 3, 2) @ dO
    dS = A * (dA - (dA * A).sum(-1, keepdims=True)) / math.sqrt(d // H)
    dq = dS @ k
    dk = dS.transpose(0, 1, 3, 2) @ q
    merge = lambda t: t.transpose(0, 2, 1, 3).reshape(B, T, d)  # noqa: E731
    dqkv = np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)
    g["Wqkv"] = c["a"].reshape(-1, d).T @ dqkv.reshape(-1, 3 * d)
    da, g["g1"], g["b1"] = _ln_back(_mm(dqkv, p["Wqkv"].T), p["g1"], c["c1"])
    dx0 = dx1 + da
    g["E"] = np.zeros_like(p["E"])
    np.add.at(g["E"], c["X"].ravel(), dx0.reshape(-1, d))
    g["P"] = np.zeros_like(p["P"])
    g["P"][:T] = dx0.sum(0)
    return float(loss), g


def train(cfg: LMConfig = LMConfig()):
    """Train the model on the training text; returns (params, train ids, held-out ids, vocab)."""
    tr, ho, vocab = split_text(cfg)
    p = init_params(len(vocab), cfg)
    rng = np.random.default_rng(cfg.seed + 1)
    mom = {k: np.zeros_like(v) for k, v in p.items()}
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2 = 0.9, 0.99
    T = cfg.context
    for step in range(1, cfg.steps + 1):
        starts = rng.integers(0, tr.size - T - 1, size=cfg.batch)
        X = tr[starts[:, None] + np.arange(T)]
        Y = tr[starts[:, None] + np.arange(1, T + 1)]
        _, g = loss_and_grads(p, X, Y, cfg.n_heads)
        lr = cfg.lr * min(1.0, step / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / cfg.steps)))
        for k in p:
            mom[k] = b1 * mom[k] + (1 - b1) * g[k]
            vel[k] = b2 * vel[k] + (1 - b2) * g[k] ** 2
            p[k] -= (lr * (mom[k] / (1 - b1**step)) / (np.sqrt(vel[k] / (1 - b2**step)) + 1e-8)).astype(np.float32)
    return p, tr, ho, vocab


def eval_windows(ho: np.ndarray, cfg: LMConfig) -> tuple[np.ndarray, np.ndarray]:
    """``eval_windows`` evenly spaced held-out windows of ``context`` inputs and their next characters."""
    T = cfg.context
    starts = np.linspace(0, ho.size - T - 1, cfg.eval_windows).astype(np.int64)
    return ho[starts[:, None] + np.arange(T)], ho[starts[:, None] + np.arange(1, T + 1)]


def perplexity(logits: np.ndarray, Y: np.ndarray) -> float:
    """exp(mean NLL); a position with non-finite logits costs log(vocab) (lost prediction)."""
    lg = np.asarray(logits, np.float64).reshape(-1, logits.shape[-1])
    y = Y.ravel()
    ok = np.all(np.isfinite(lg), axis=1)
    nll = np.full(y.size, np.log(lg.shape[1]))
    z = lg[ok] - lg[ok].max(1, keepdims=True)
    nll[ok] = np.log(np.exp(z).sum(1)) - z[np.arange(z.shape[0]), y[ok]]
    return float(np.exp(np.mean(nll)))


def unigram_perplexity(tr: np.ndarray, Y: np.ndarray, vocab: int) -> float:
    cnt = np.bincount(tr, minlength=vocab) + 1.0
    return float(np.exp(-np.mean(np.log(cnt[Y.ravel()] / cnt.sum()))))


def rel_attention_error(O: np.ndarray, O2: np.ndarray) -> float:
    """Mean over (window, head, query position) of min(||o' - o|| / ||o||, 1) (non-finite -> 1)."""
    with np.errstate(all="ignore"):
        O, O2 = np.asarray(O, np.float64), np.asarray(O2, np.float64)
        e = np.linalg.norm(O2 - O, axis=-1) / np.linalg.norm(O, axis=-1)
    e = np.where(np.isfinite(e), e, np.inf)
    return float(np.mean(np.minimum(e, CATASTROPHIC_REL_ERR)))


def corrupt_cache(k: np.ndarray, v: np.ndarray, fmt: str, ber: float, seed: int, group: int = 32):
    """Store K, V (B, H, T, hd) in ``fmt`` (keys per channel, values per token), flip every stored bit
    (data, scales, zero-points) with probability ``ber`` (no ECC), and read them back."""
    B, H, T, hd = k.shape
    out = []
    for i, (x, kind) in enumerate(((k, "k"), (v, "v"))):
        enc = store(x.reshape(B * H, T, hd), fmt, kind, group)
        if ber > 0:
            enc = inject(enc, StreamSpec(p_flip=float(ber)), seed=seed * 2 + i).encoded
        out.append(unstore(enc, B * H).reshape(B, H, T, hd))
    return out[0], out[1]


def calibrate(
    cfg: LMConfig = LMConfig(),
    formats=("bf16", "fp8_e4m3", "int8", "int4"),
    bers=(0.0, 1e-5, 1e-4, 1e-3),
    seeds=(0, 1, 2),
    group: int = 32,
) -> dict:
    """Train, then measure (proxy error, perplexity increase) per format, BER and seed."""
    p, tr, ho, vocab = train(cfg)
    X, Y = eval_windows(ho, cfg)
    pd = {k: v.astype(np.float64) for k, v in p.items()}
    logits, c = forward(pd, X, cfg.n_heads)
    ppl0 = perplexity(logits, Y)
    points = []
    for fmt in formats:
        for ber in bers:
            for s in seeds if ber > 0 else seeds[:1]:  # no flips: the seed changes nothing
                k2, v2 = corrupt_cache(c["k"], c["v"], fmt, ber, s, group)
                with np.errstate(invalid="ignore", over="ignore"):
                    kv = (k2.astype(np.float64), v2.astype(np.float64))
                lg2, c2 = forward(pd, X, cfg.n_heads, kv=kv)
                ppl = perplexity(lg2, Y)
                O2 = np.where(np.isfinite(c2["O"]), c2["O"], np.inf)
                points.append(
                    {
                        "format": fmt,
                        "ber": float(ber),
                        "seed": int(s),
                        "ppl": ppl,
                        "ppl_increase": ppl / ppl0 - 1,
                        "rel_attention_error": rel_attention_error(c["O"], O2),
                    }
                )
    return {
        "model": cfg.describe(),
        "text_source": TEXT_SOURCE,
        "vocab": len(vocab),
        "train_chars": int(tr.size),
        "heldout_chars": int(ho.size),
        "eval_tokens": int(Y.size),
        "ppl_clean": ppl0,
        "ppl_unigram": unigram_perplexity(tr, Y, len(vocab)),
        "quant_group": group,
        "seeds": list(seeds),
        "points": points,
    }


def mean_points(points: list) -> list:
    """Mean over seeds per (format, ber), with the error split into its quantization part ``e_quant``
    (the format's error at BER 0) and its bit-error part ``e_bit`` (the rest)."""
    groups: dict = {}
    for pt in points:
        groups.setdefault((pt["format"], pt["ber"]), []).append(pt)
    out = [
        {
            "format": f,
            "ber": b,
            "ppl_increase": float(np.mean([p["ppl_increase"] for p in g])),
            "rel_attention_error": float(np.mean([p["rel_attention_error"] for p in g])),
        }
        for (f, b), g in groups.items()
    ]
    clean = {p["format"]: p["rel_attention_error"] for p in out if p["ber"] == 0}
    for p in out:
        if p["format"] not in clean:
            raise ValueError(f"format {p['format']} has no BER 0 point (its quantization error)")
        p["e_quant"] = clean[p["format"]]
        p["e_bit"] = max(p["rel_attention_error"] - p["e_quant"], 0.0)
    return out


def fit_mapping(points: list, floor: float = 1e-3) -> dict:
    """Fit log(1 + ppl_increase) = s_quant e_quant + s_bit e_bit over the seed-mean points.

    Perplexity is exp(mean NLL) and the proxy a mean over positions, so the NLL change is taken
    additive in the two error parts; they get separate slopes because a diffuse quantization
    error and sparse bit errors (a few positions lost) cost the model very differently.
    Least squares on the relative residual (y - fit) / max(|y|, floor), so the small increases
    that SLOs are about weigh as much as the catastrophic ones; slopes >= 0. Residuals reported
    relative (``residual_*``) per the same definition."""
    pts = mean_points(points)
    A = np.array([[p["e_quant"], p["e_bit"]] for p in pts])
    y = np.log1p(np.array([p["ppl_increase"] for p in pts]))
    w = 1.0 / np.maximum(np.abs(y), floor)
    Aw, yw = A * w[:, None], y * w
    s, *_ = np.linalg.lstsq(Aw, yw, rcond=None)
    for i in range(2):  # non-negative least squares for two columns: refit the other one alone
        if s[i] < 0:
            j = 1 - i
            s = np.zeros(2)
            s[j] = max(0.0, float(Aw[:, j] @ yw / max(Aw[:, j] @ Aw[:, j], 1e-300)))
    res = (y - A @ s) * w
    # upper envelope: the largest measured slope of each part (quantization-only points; then the
    # bit-error points after the fitted quantization share), for SLOs that must hold at every point
    q_up = max([yi / a[0] for yi, a in zip(y, A) if a[1] == 0 and a[0] > 0 and yi > 0], default=float(s[0]))
    b_up = max([(yi - s[0] * a[0]) / a[1] for yi, a in zip(y, A) if a[1] > 0], default=float(s[1]))
    return {
        "s_quant": float(s[0]),
        "s_bit": float(s[1]),
        "s_quant_upper": float(max(q_up, s[0])),
        "s_bit_upper": float(max(b_up, s[1])),
        "n": len(pts),
        "floor": floor,
        "residual_rms": float(np.sqrt(np.mean(res**2))),
        "residual_max": float(np.max(res)),
        "residual_min": float(np.min(res)),
    }


def ppl_increase(e_quant: float, e_bit: float, fit: dict) -> float:
    """Predicted relative perplexity increase of a proxy error split into its two parts."""
    return float(np.expm1(fit["s_quant"] * e_quant + fit["s_bit"] * e_bit))


def error_weights(max_ppl_increase: float, fit: dict, conservative: bool = True) -> tuple[float, float]:
    """(w_quant, w_bit) such that w_quant e_quant + w_bit e_bit <= 1 keeps the perplexity increase
    within ``max_ppl_increase``: with the upper-envelope slopes (every measured point would hold)
    unless ``conservative`` is False (the central fit)."""
    if not max_ppl_increase > 0:
        raise ValueError(f"expected a perplexity increase > 0, got {max_ppl_increase!r}")
    b = float(np.log1p(max_ppl_increase))
    sq, sb = (fit["s_quant_upper"], fit["s_bit_upper"]) if conservative else (fit["s_quant"], fit["s_bit"])
    return sq / b, sb / b


def calibration_path():
    from pathlib import Path

    import attnsim.configs

    return Path(attnsim.configs.__file__).parent / "calibration" / "kv_error_ppl.yaml"


def load_calibration(path=None) -> dict:
    """The saved calibration (bench/calibrate_perplexity.py) with its fit."""
    from attnsim.core.config import ConfigError, check_float, check_numbers, display_path, load_yaml

    p = calibration_path() if path is None else path
    doc = load_yaml(p)  # a missing / non-YAML file: one ConfigError naming the file (and line)
    if not isinstance(doc, dict) or "fit" not in doc or "model" not in doc or not isinstance(doc["fit"], dict):
        raise ConfigError(
            f"expected a KV error -> perplexity calibration (keys model, fit), got keys "
            f"{sorted(map(str, doc)) if isinstance(doc, dict) else type(doc).__name__}",
            file=display_path(p),
        )
    check_numbers(doc, display_path(p))  # no NaN / inf anywhere (issue 31: a NaN slope planned silently)
    for key in FIT_SLOPES:
        check_float(doc["fit"].get(key), display_path(p), f"fit.{key}", lo=0.0, hi=MAX_SLOPE)
    return doc


#: The slopes a calibration's fit must hold: ln(ppl / ppl_base) per unit of KV error (module docstring).
FIT_SLOPES = ("s_quant", "s_bit", "s_quant_upper", "s_bit_upper")
#: Plausible bound of a slope: measured 0.02-18 (configs/calibration/kv_error_ppl.yaml); 1e4 is 500x the largest.
MAX_SLOPE = 1e4
