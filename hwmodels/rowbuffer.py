"""PIM and NPU traffic in the same HBM banks: single vs dual row buffer (NeuPIMs, ASPLOS'24).

NeuPIMs' PIM is the NPU's main memory: while the PIM runs one sub-batch's attention GEMVs, the NPU
streams the weights of the other sub-batch's GEMMs and writes its new K/V tokens into the same
banks. NewtonSim (casys-kaist/NeuPIMs f299af3 extern/NewtonSim src/timing.cc) times both in one
controller:

* single row buffer (``pim_type = SINGLE``, the npu+pim baseline, casys-kaist/NeuPIMs e51a4af
  extern/NewtonSim src/newton_controller.cc, newton_command_queue.cc): PIM and normal accesses share each
  bank's row buffer, and the controller keeps them apart per channel: PIM transactions and the NPU's reads
  share one in-order transaction queue; a GEMV tile (P_HEADER .. last READRES) runs in "PIM mode", during
  which no other DRAM command issues, and starts only when every normal command queue is empty (the NPU's
  traffic goes first). Here the NPU's records are placed between the PIM tiles (spread evenly over the
  PIM_PRECHARGEs) with a BARRIER on both sides, and the merged stream runs in ONE engine call: the two
  streams take turns on the channel and every switch re-opens the other's rows. With the NPU first, its
  traffic keeps arriving while the PIM op runs: an op of ``t_pim`` alone meets ``f x T`` of NPU memory time
  in its duration T (f = the NPU's memory time / its compute time), so T = t_pim / (1 - f) while the NPU
  stage lasts, the share of the NPU's bytes that fall inside it ``min(1, t_pim / ((1 - f) t_npu))``.
* dual row buffer (``pim_type = DUAL``): the PIM has its own row buffer (``read_to_pim_read_same_bk
  = 0``, ``pim_to_precharge = 0``): the two streams overlap and only share the channel's command
  slots (one row and one column command per CK). Time = max(PIM alone, NPU alone, command slots).

The NPU's traffic arrives at its own rate (bytes / the NPU's time for those GEMMs, recorded by the
mapper): the share inside the PIM op's time (x min(1, t_pim / t_npu)) is what meets the PIM commands.
Energy charged to the PIM: its own stream's (dual), or the merged stream's minus the NPU stream
alone (single: the extra activations of the row conflicts); the NPU's own traffic energy is the
NPU model's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from attnsim.isa.lower import CMD_FIELDS, ENGINE_CODES, Lowered, Org, _Cmds

MODES = ("single", "dual")
NPU_ROW0_FRACTION = 0.5  # NPU records use the upper half of the rows (weights), the PIM's KV rows the lower


def npu_stream(org: Org, read_bytes: float, write_bytes: float, row0: int = 0) -> dict[str, np.ndarray]:
    """One channel's NPU traffic: whole-row RD (weights) then WR (new K/V) macro records rotating over
    ranks, bank groups and banks (bank-level parallelism), rows from ``row0``; each row's ACT is issued
    one record ahead (as a controller opens the next bank while the current one streams: ~83 % of the
    channel's peak on neupims_hbm2, where in-order ACT + RD records reach ~57 %)."""
    recs = []
    nb = org.ranks * org.bank_groups * org.banks_per_group
    k = 0
    for op, nbytes in (("RD", read_bytes), ("WR", write_bytes)):
        bursts = int(math.ceil(max(nbytes, 0.0) / org.burst_bytes))
        while bursts > 0:
            n = min(org.columns, bursts)
            r, g = k % org.ranks, (k // org.ranks) % org.bank_groups
            b = (k // (org.ranks * org.bank_groups)) % org.banks_per_group
            recs.append((op, r, g, b, (row0 + k // nb) % org.rows, n))
            bursts -= n
            k += 1
    cmd = _Cmds()
    for j in range(len(recs) + 1):
        if j < len(recs):
            _, r, g, b, row, _ = recs[j]
            cmd.add("ACT", pch=0, rank=r, bg=g, bank=b, row=row)
        if j > 0:
            op, r, g, b, row, n = recs[j - 1]
            cmd.add(op, pch=0, rank=r, bg=g, bank=b, row=row, repeat=n)
    return cmd.arrays()


def interleave(
    pim: dict[str, np.ndarray], npu: dict[str, np.ndarray], exclusive: bool = False
) -> dict[str, np.ndarray]:
    """``npu`` records spread evenly over ``pim``'s tile boundaries (after each PREA; appended at the end
    when there is none): the order one in-order channel sees them in. ``exclusive``: each NPU segment between
    BARRIERs (the channel serves one stream at a time: NewtonSim's single-row-buffer PIM mode)."""
    n_npu = len(npu["op"])
    if n_npu == 0:
        return {k: v.copy() for k, v in pim.items()}
    n = len(pim["op"])
    cuts = np.flatnonzero(pim["op"] == ENGINE_CODES["PREA"]) + 1
    if not len(cuts):
        cuts = np.array([n])
    bounds = np.linspace(0, n_npu, len(cuts) + 1).round().astype(np.int64)
    fields = CMD_FIELDS + (("arrival",) if "arrival" in pim else ())  # NPU issue port: PIM records' arrivals
    npu = dict(npu, arrival=np.zeros(n_npu, np.int64)) if "arrival" in pim else npu
    barrier = {f: np.zeros(1, np.int64) for f in fields}
    barrier["op"][0] = ENGINE_CODES["BARRIER"]
    # merged order: PIM records up to cut j, then NPU records bounds[j]:bounds[j+1], ...
    pieces, lo = [], 0
    for j, cut in enumerate(cuts.tolist()):
        pieces.append({f: pim[f][lo:cut] for f in fields})
        lo = cut
        seg = {f: npu[f][bounds[j] : bounds[j + 1]] for f in fields}
        pieces += [barrier, seg, barrier] if exclusive and bounds[j + 1] > bounds[j] else [seg]
    pieces.append({f: pim[f][lo:] for f in fields})
    return {f: np.concatenate([np.asarray(p[f], np.int64) for p in pieces]) for f in fields}


def command_slots(c: dict[str, np.ndarray], row_cmd_cycles: int) -> int:
    """CK cycles the records need on the channel's command pins (row and column buses separate):
    max(row commands x row_cmd_cycles, column commands); a RD/WR record adds its row's PRE."""
    op, rep = c["op"], c["repeat"]
    col = int(
        rep[np.isin(op, [ENGINE_CODES[o] for o in ("RD", "WR", "MACAB", "MACBG", "MACSB")])].sum()
        + np.count_nonzero(op == ENGINE_CODES["BUF"])
    )
    rows = int(
        np.count_nonzero(np.isin(op, [ENGINE_CODES[o] for o in ("ACT", "ACTAB", "ACTBG", "PRE", "PREA")]))
        + np.count_nonzero(np.isin(op, [ENGINE_CODES["RD"], ENGINE_CODES["WR"]]))
    )
    return max(rows * row_cmd_cycles, col)


def run_window(device, low: Lowered):
    """``low`` with the NPU traffic of ``low.meta["rowbuffer"]`` (bytes per channel over ``npu_time_s``):
    the share that falls inside the PIM op's time shares the banks: dual, bytes x min(1, t_pim / t_npu);
    single (NPU first), bytes x min(1, t_pim / ((1 - f) t_npu)), f = the NPU stream's engine time / t_npu."""
    rb = low.meta["rowbuffer"]
    plain = dataclasses.replace(low, meta={k: v for k, v in low.meta.items() if k != "rowbuffer"})
    t_pim = device.run(plain)[0]
    row0 = int(device.org.rows * NPU_ROW0_FRACTION)
    window = t_pim
    if rb["mode"] == "single":  # the NPU goes first: the op stretches by the NPU memory time it meets
        full = npu_stream(device.org, rb["read_bytes"], rb["write_bytes"], row0=row0)
        t_mem = device.run(
            dataclasses.replace(
                plain, commands=[full], programs=[None], multiplicity=np.array([plain.channels_used], np.int64)
            )
        )[0]
        busy = min(t_mem / rb["npu_time_s"], 1.0)
        window = t_pim / (1.0 - busy) if busy < 1.0 else math.inf
    share = min(rb.get("weight", 1.0), window / rb["npu_time_s"])
    npu = npu_stream(device.org, rb["read_bytes"] * share, rb["write_bytes"] * share, row0=row0)
    return run_shared(device, plain, rb["mode"], npu, t_pim=t_pim)


def run_shared(device, low: Lowered, mode: str, npu: dict[str, np.ndarray], t_pim: float | None = None):
    """(time s, energy J by component, counts) of ``low`` on ``device`` (a PIMDevice) while every used
    channel also serves ``npu`` (one channel's NPU records), with a single or dual row buffer
    (``t_pim``: the time of ``low`` alone, when known)."""
    if mode not in MODES:
        raise ValueError(f"row buffer mode {mode!r}")
    plain = dataclasses.replace(low, meta={k: v for k, v in low.meta.items() if k != "rowbuffer"})
    alone = dataclasses.replace(
        plain, commands=[npu], multiplicity=np.array([plain.channels_used], np.int64), programs=[None]
    )
    t_npu, e_npu, c_npu = device.run(alone)
    if mode == "single":
        merged = dataclasses.replace(plain, commands=[interleave(c, npu, exclusive=True) for c in plain.commands])
        t, e, cnt = device.run(merged)
        # the banks serve both streams: never faster than either alone (the in-order merged walk can come
        # out a few refreshes below the NPU stream alone, < 1 %, where the refreshes fall differently)
        t = max(t, t_npu, device.run(plain)[0] if t_pim is None else t_pim)
        e = {k: max(0.0, v - e_npu.get(k, 0.0)) for k, v in e.items()}
        cnt = {k: v - c_npu.get(k, 0) for k, v in cnt.items()}
        return t, e, cnt
    t_alone, e, cnt = device.run(plain)
    row_cc = device.dram.pim.row_cmd_cycles if device.dram.pim is not None else 1
    slots = max(command_slots(c, row_cc) for c in plain.commands) + command_slots(npu, row_cc)
    return max(t_alone, t_npu, slots * device.tck_s), e, cnt


# ---------------------------------------------------------------- PIMDevice (isa: newton) glue


def phase_weight(phase: str, lens, org: Org, *, heads: int, dhead: int, elem_bytes: float) -> float:
    """This GEMV's share of the MHA's GEMV tiles (logit vs attend row openings, isa/lower_newton.py
    request_load): the most of one NPU stage's traffic it can meet, so the shares of a layer's ops sum to <= 1."""
    page = max(1, int(org.columns * org.burst_bytes // elem_bytes))
    t = np.asarray(lens, np.int64)
    k = float(np.sum(-(-heads * dhead // page) * (-(-t // org.banks))))
    v = float(np.sum(heads * (-(-t // page)) * (-(-dhead // org.banks))))
    return (k if phase == "score" else v) / max(k + v, 1.0)


def _request_items(device, trace, i: int):
    """(tokens per request, KV heads per request, dhead, query heads per KV head, element bytes) of attention
    row i (one entry per (request, head) when the heads differ in length: heads 1)."""
    tokens, k, group, eb = device._items(trace, i)
    n_req = max(1, len(trace.context_lens))
    kvh = max(1, len(tokens) // n_req)
    if len(tokens) == n_req * kvh:
        return np.asarray(tokens, np.int64).reshape(n_req, kvh)[:, 0], kvh, k, group, eb
    return tokens, 1, k, group, eb


def newton_request_channels(device, trace, i: int) -> np.ndarray | None:
    """The channel of each request of attention row i, placed as :func:`lower_newton_row` places them
    (the device's ``channel_assignment``); None when the row's items are not one per request."""
    from attnsim.isa.lower_newton import placement_load, request_channels

    lens, heads, k, _, eb = _request_items(device, trace, i)
    if len(lens) != len(trace.context_lens):
        return None
    assign = device.spec.channel_assignment
    load = placement_load(assign, device.org, heads=heads, dhead=k, elem_bytes=eb)
    return request_channels(lens, device.channels, assign, load)


def lower_newton_row(device, trace, i: int) -> Lowered:
    """Row i of ``trace`` lowered for a Newton/NeuPIMs device; the NPU traffic the mapper recorded as
    concurrent with this row (``trace.meta["neupims_rowbuffer"]``) attached for :func:`run_shared`."""
    from attnsim.core.config import ConfigError
    from attnsim.isa.lower_newton import lower_newton

    cls = str(trace.cols["cls"][i])
    assign = device.spec.channel_assignment
    port = dict(
        port_interval_cycles=device.port_interval_cycles,  # the NPU's PIM-instruction issue port
        comp_instructions=device.spec.comp_instructions,
    )
    if cls in ("attn_score", "attn_context", "softmax"):
        lens, heads, k, group, eb = _request_items(device, trace, i)
        phase = {"attn_score": "score", "attn_context": "context", "softmax": "softmax"}[cls]
        # a sub-batch of a per-channel split (mapper neupims subbatch_split): its requests keep the channels
        # the whole batch was placed on
        assign = trace.meta.get("channel_assignment", assign)
        low = lower_newton(
            phase,
            lens,
            heads=heads,
            dhead=k,
            group=group,
            elem_bytes=eb,
            n_channels=device.channels,
            org=device.org,
            pu=device.pu,
            assignment=assign,
            **port,
        )
    elif cls == "matmul":  # FC GEMV: output rows as "tokens" of one head of k_in elements
        c = trace.cols
        m, n, k, b = (int(c[x][i]) for x in ("m", "n", "k", "batch"))
        wb = float(c["weight_bytes"][i]) / max(n * k * b, 1) or 2.0
        per = -(-n * b // device.channels)
        active = -(-n * b // per)
        outs = [per] * (active - 1) + [n * b - per * (active - 1)]
        low = lower_newton(
            "score",
            outs,
            heads=1,
            dhead=k,
            group=m,
            elem_bytes=wb,
            n_channels=device.channels,
            org=device.org,
            pu=device.pu,
            assignment=assign if isinstance(assign, str) else "greedy",
            **port,
        )
        low.phase = "fc"
        return low
    else:
        raise ConfigError(
            f"PIM device {device.name!r} cannot run op class {cls!r} "
            "(supported by isa newton: attn_score, attn_context, matmul)",
            key=str(trace.cols["op"][i]),
        )
    rb = trace.meta.get("neupims_rowbuffer")
    if rb:
        g = int(trace.cols["layer_group"][i])
        rd = float(rb["npu_read_bytes"].get(g, 0.0)) / device.channels
        wr = float(rb["npu_write_bytes"].get(g, 0.0)) / device.channels
        t_npu = float(rb["npu_time_s"].get(g, 0.0))
        if rd + wr > 0 and t_npu > 0:
            w = phase_weight(phase, lens, device.org, heads=heads, dhead=k, elem_bytes=eb)
            low.meta["rowbuffer"] = {
                "mode": rb["mode"],
                "read_bytes": rd,
                "write_bytes": wr,
                "npu_time_s": t_npu,
                "weight": w,
            }
            low.meta["rowbuffer_key"] = (rb["mode"], rd, wr, t_npu, w)
    return low
