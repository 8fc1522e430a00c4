"""AttAcc's two decode optimisations as plan data (``pipeopt``, ``ffopt``); the engine costs them.

Read in the public AttAcc simulator (scale-snu/attacc_simulator @ c600051, ``src/system.py``); the
code here is attnsim's own.

pipeopt (``System.simulate._pipeline``, level=True, system.py:110-167): per decoder layer the GPU's
QKV generation and output projection, the GPU <-> PIM transfers and the PIM attention run as a
pipeline over heads, without splitting the batch and without reading any weight twice. The artefact
sets, with r = 1 / (heads per GPU) (system.py:126) and the three per-layer totals FC = qkv + proj,
X = transfers, A = score + softmax + context::

    layer time = max(FC, X, A) + r x (FC + X + A - max(FC, X, A))

(the four branches of system.py:135-154 reduce to this): the busiest resource sets the time and the
others add the fill and drain of one head's worth of work. (Two quirks attnsim does not copy: after
this the artefact sets the PIM softmax time to 0 (system.py:156), and without --pipeopt it still
overlaps the transfers with the attention, max(A, X) + r min(A, X) (system.py:127-133).) attnsim puts the rows from
``qkv_proj`` to ``out_proj`` of a layer group into one concurrent stage with ``Plan.stage_exposed`` = r, so the engine
computes exactly this, with each resource's time from its own device model. The head is a query head,
as in the artefact: with GQA the PIM passes over a KV head once per query head of its group (one MAC
per column command per query vector), so each query head is one item of the pipeline.

ffopt (``_ff_parallel``, system.py:169-189): the FFN GEMMs are split between the GPU and the PIM
stacks, which compute their share of the output columns at their internal bandwidth. A PIM bank unit
does one MAC per weight element it reads, so a batch of B vectors reads its share B times, while the
GPU reads its share once for the whole batch. The artefact scales the FFN time by
BW_gpu / (BW_gpu + BW_pim / B) (system.py:182-186): the split that makes both finish together,
T = W / (BW_gpu + BW_pim / B). attnsim splits each dense FFN layer the same way, as rows:
``mlp_up`` by output columns and ``mlp_down`` by input rows (the PIM computes one slice of the
intermediate and its partial sum of the output, Megatron style), plus two transfers over the GPU-PIM
link (the FFN input to the PIM, the PIM's partial output back). The share f is chosen from the device
models' own times so that GPU share = PIM share + transfers (one linear step, one correction), and is
capped by the PIM capacity left next to the KV cache: the PIM share of the FFN weights is stored in
the stacks (the GPUs keep every weight: prefill runs the whole FFN on them). All rows of a layer's
FFN form one concurrent stage (no fill: the two shares are independent). Energy is charged where the
bytes are read: the PIM share by the PIM device (its DRAM reads, B passes), the GPU share by the GPU's
HBM, the transfers by the link. (The artefact keeps charging GPU HBM reads for the whole FFN.)
The activation of the PIM share is assumed to run on the PIM buffer die and is not costed (the GPU's
``mlp_act`` row stays whole, an upper bound on the GPU side).
"""

from __future__ import annotations

import numpy as np

from attnsim.mapper.base import transfer_row

FFN_UP, FFN_DOWN = "mlp_up", "mlp_down"


def head_pipeline_stages(trace, stage: np.ndarray, exposed: dict, heads: int, offset: int = 0) -> int:
    """Mark, per layer group, the rows from ``qkv_proj`` to ``out_proj`` as one stage (id offset + 2 g)
    with exposed share 1 / heads. Returns the number of stages marked."""
    ops, grp = trace["op"], trace["layer_group"]
    r = 1.0 / max(1, int(heads))
    marked = 0
    for g in np.unique(grp[grp >= 0]):
        idx = np.nonzero(grp == g)[0]
        q = idx[ops[idx] == "qkv_proj"]
        o = idx[ops[idx] == "out_proj"]
        if len(q) != 1 or len(o) != 1 or o[0] < q[0]:
            continue
        sid = offset + 2 * int(g)
        rows = idx[(idx >= q[0]) & (idx <= o[0])]
        stage[rows] = sid
        exposed[sid] = r
        marked += 1
    return marked


def _ffn_pairs(trace) -> list[tuple[int, int]]:
    """(mlp_up row, mlp_down row) per layer group that has a dense FFN."""
    ops, grp = trace["op"], trace["layer_group"]
    out = []
    for g in np.unique(grp[grp >= 0]):
        up = np.nonzero((grp == g) & (ops == FFN_UP))[0]
        dn = np.nonzero((grp == g) & (ops == FFN_DOWN))[0]
        if len(up) == 1 and len(dn) == 1 and int(trace["k"][dn[0]]) > 0:
            out.append((int(up[0]), int(dn[0])))
    return out


def ffn_weight_bytes(trace) -> float:
    """FFN weight bytes of one rank over all layers (the dense mlp_up + mlp_down rows)."""
    w, cnt = trace["weight_bytes"], trace["count"]
    return float(sum((w[u] + w[d]) * cnt[u] for u, d in _ffn_pairs(trace)))


def _split(row: dict, share: float, dim: str, size: int) -> dict:
    """A copy of ``row`` doing ``share`` of its work, with dimension ``dim`` set to ``size``."""
    out = dict(row)
    for c in ("flops", "weight_bytes", "act_bytes"):
        out[c] = float(row[c]) * share
    out[dim] = int(size)
    return out


def split_ffn(trace, f: float, act_bytes: float):
    """The trace with each dense FFN layer's mlp_up / mlp_down split into a GPU and a PIM share
    (PIM: ``round(f x intermediate)`` intermediate columns) and the two FFN transfer rows added.

    Returns (trace, role per row: "gpu" / "pim" / "link", FFN stage group per row (-1: none),
    added mask, PIM intermediate columns per group)."""
    from attnsim.workloads.optrace import OpTrace

    pairs = dict(_ffn_pairs(trace))
    downs = set(pairs.values())
    b = float(np.sum(trace.query_tokens))
    out, role, group, added, cols = [], [], [], [], {}
    for i, r in enumerate(trace.rows()):
        inter = int(trace["k"][pairs[i]]) if i in pairs else 0
        n_pim = int(round(f * inter)) if i in pairs else 0
        if i in pairs and 0 < n_pim:
            g = int(r["layer_group"])
            cols[g] = n_pim
            hidden = int(r["k"])
            like = {"layer_group": g, "count": r["count"]}
            per = int(r["n"]) // inter  # 2 for a fused gate + up projection
            share = n_pim / inter
            out += [transfer_row("pim_send_ffn_in", like, b * hidden * act_bytes)]
            role += ["link"]
            group += [g]
            added += [True]
            if n_pim < inter:
                out.append(_split(r, 1.0 - share, "n", per * (inter - n_pim)))
                role.append("gpu")
                group.append(g)
                added.append(False)
            out.append(_split(r, share, "n", per * n_pim))
            role.append("pim")
            group.append(g)
            added.append(False)
            continue
        g = int(r["layer_group"])
        if i in downs and g in cols:
            n_pim, inter = cols[g], int(r["k"])
            share = n_pim / inter
            if n_pim < inter:
                out.append(_split(r, 1.0 - share, "k", inter - n_pim))
                role.append("gpu")
                group.append(g)
                added.append(False)
            out.append(_split(r, share, "k", n_pim))
            role.append("pim")
            group.append(g)
            added.append(False)
            like = {"layer_group": g, "count": r["count"]}
            out.append(transfer_row("pim_recv_ffn_partial", like, b * float(r["n"]) * act_bytes))
            role.append("link")
            group.append(g)
            added.append(True)
            continue
        out.append(r)
        role.append("gpu" if i in pairs or i in downs else None)
        group.append(g if (g in cols and str(r["op"]) == "mlp_act") else -1)
        added.append(False)
    new = OpTrace.from_rows(
        out,
        phase=trace.phase,
        model=trace.model,
        tp=trace.tp,
        query_tokens=trace.query_tokens,
        context_lens=trace.context_lens,
        groups=trace.groups,
        meta=dict(trace.meta),
    )
    return new, np.array(role, dtype=object), np.array(group, dtype=np.int64), np.array(added, dtype=bool), cols


def decode_ffn_probe(trace):
    """A decode-shaped trace of the dense FFN rows (one token per request): what ffopt balances.

    A decode trace's own rows; for a prefill trace its FFN rows with m = requests (FLOPs and
    activation bytes scaled), so the prefill plan places the same PIM share as decode."""
    from attnsim.workloads.optrace import OpTrace

    reqs = len(trace.query_tokens)
    rows = []
    for u, d in _ffn_pairs(trace):
        for i in (u, d):
            r = {c: trace.cols[c][i] for c in trace.cols}
            if trace.phase != "decode":
                s = reqs / max(int(r["m"]), 1)
                r["m"] = reqs
                r["flops"] = float(r["flops"]) * s
                r["act_bytes"] = float(r["act_bytes"]) * s
            rows.append(r)
    return OpTrace.from_rows(
        rows,
        phase="decode",
        model=trace.model,
        tp=trace.tp,
        query_tokens=np.ones(reqs, np.int64),
        context_lens=np.ones(reqs, np.int64),
        groups=trace.groups,
        meta=dict(trace.meta),
    )


def _side_times(system, trace, role, gpu, pim, link) -> dict:
    """Time of the GPU share, the PIM share and the transfers of a split FFN trace, all layers."""
    cnt = trace["count"].astype(float)
    out = {}
    for side, dev in (
        ("gpu", system.pools[gpu].model),
        ("pim", system.pools[pim].model),
        ("link", system.links[link.split(":", 1)[1]]),
    ):
        rows = np.nonzero(role == side)[0]
        out[side] = float(np.sum(np.asarray(dev.cost(trace, rows).time_s) * cnt[rows])) if len(rows) else 0.0
    return out


_BALANCE_MEMO: dict = {}


def balance_share(system, probe, gpu, pim, link, act_bytes: float, cap: float) -> float:
    """Share f in [0, cap] of the FFN on the PIM stacks that minimises max(GPU share, PIM share +
    transfers), both from the device models. The PIM share is a whole number of rows per PIM channel
    (a multiple of its channel count: a partial row leaves channels idle for the same step time);
    bisection on that number for the point where the two sides meet (the PIM's time grows and the
    GPU's shrinks with f), from the linear balance f = (G - L) / (G + P) (G, P: the whole FFN on the
    GPU / on the PIM, L: the transfers). Memoised per system, FFN shape and cap (serving reuses it)."""
    pairs = _ffn_pairs(probe)
    if cap <= 0 or not pairs:
        return 0.0
    c = probe.cols
    key = (
        id(system),
        gpu,
        pim,
        link,
        float(act_bytes),
        float(cap),
        len(probe.query_tokens),
        tuple(
            (int(c["m"][i]), int(c["n"][i]), int(c["k"][i]), float(c["weight_bytes"][i]), int(c["count"][i]))
            for u, d in pairs
            for i in (u, d)
        ),
    )
    hit = _BALANCE_MEMO.get(key)
    if hit is not None and hit[0] is system:  # the entry holds the system, so its id is not reused
        return hit[1]
    inter = int(probe["k"][pairs[0][1]])
    step = max(1, min(inter, int(getattr(system.pools[pim].model, "channels", 1))))

    def sides(n):
        t = _side_times(system, *split_ffn(probe, n / inter, act_bytes)[:2], gpu, pim, link)
        return t["gpu"], t["pim"] + t["link"]

    G, _ = sides(0)
    t1 = _side_times(system, *split_ffn(probe, 1.0, act_bytes)[:2], gpu, pim, link)  # all on the PIM
    P, L = t1["pim"], t1["link"]
    top = int(np.floor(cap * inter + 1e-9))
    cands = sorted({min(j * step, top) for j in range(1, top // step + 2)} - {0})
    best = (G, 0)  # (time, PIM columns)
    if cands and G > L:
        guess = min(cap, max(0.0, (G - L) / (G + P))) * inter
        lo, hi = 0, len(cands) - 1
        j = int(np.clip(np.searchsorted(cands, guess), lo, hi))
        while lo <= hi:
            g, p = sides(cands[j])
            best = min(best, (max(g, p), cands[j]))
            if p > g:
                hi = j - 1
            else:
                lo = j + 1
            j = (lo + hi) // 2
    f = best[1] / inter
    if len(_BALANCE_MEMO) > 4096:
        _BALANCE_MEMO.clear()
    _BALANCE_MEMO[key] = (system, f)
    return f
