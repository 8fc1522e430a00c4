"""Fast FR-FCFS request scheduler (Numba): per-bank FIFOs + a lazy min-heap of per-bank candidates.

Same selection order as the queue-scan scheduler ``sched_scan.ctrl_kernel_scan`` (differential test in
tests/test_dram_sched.py), which scans the whole queue for every command. Here:

- Every bank keeps its queued requests in a FIFO (doubly linked slots, oldest first). The scan's candidates
  of one bank reduce to at most two: the oldest read hit and the oldest write hit to the open row (if the
  bank has queued hits), else the oldest request (ACT if the bank is closed, PRE if another row is open).
  Without the PRE hold-back (rules.py pre_holdback False) a bank with hits has a third: the PRE for its oldest
  other-row request, unless the request whose ACT opened the row has not issued its column command yet.
  Arrival cycles are non-decreasing in queue order, so the oldest of a class is also its earliest.
- The best candidate of each bank sits in a binary min-heap keyed by (cycle, not-a-hit, age), the scan's
  tie order. Keys are lower bounds: every "earliest legal cycle" of the kernel only grows while a bank is
  not itself touched (bank-group/rank/bus/channel state is max-updated, the data bus end strictly grows),
  so a popped key that still equals the bank's recomputed key is the global minimum. A touched bank
  (enqueue, command, refresh) is recomputed and pushed with a new version; stale entries are dropped.

Optional steady-state recording: at every multiple of ``win`` cycles the kernel records the number of
requests served and the channel statistics, and stops the channel after ``maxw`` windows (steady.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from attnsim.hwmodels.dram import kernel as K

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these

INF = 1 << 62
AGE_BITS = 40  # heap sub-key = not_hit << 40 | age (position in the channel's request order)


@K.inline
def _less(t1, s1, t2, s2):
    return t1 < t2 or (t1 == t2 and s1 < s2)


@K.inline
def _hpush(H, n, t, s, b, v):
    """Push (t, s, bank, version) onto the heap rows H[0:n]; returns the new size."""
    j = n
    while j > 0:
        par = (j - 1) >> 1
        if _less(t, s, H[par, 0], H[par, 1]):
            H[j, 0] = H[par, 0]
            H[j, 1] = H[par, 1]
            H[j, 2] = H[par, 2]
            H[j, 3] = H[par, 3]
            j = par
        else:
            break
    H[j, 0] = t
    H[j, 1] = s
    H[j, 2] = b
    H[j, 3] = v
    return n + 1


@K.inline
def _hpop(H, n):
    """Remove the root (caller read it first); returns the new size."""
    n -= 1
    if n == 0:
        return 0
    t, s, b, v = H[n, 0], H[n, 1], H[n, 2], H[n, 3]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and _less(H[c + 1, 0], H[c + 1, 1], H[c, 0], H[c, 1]):
            c += 1
        if _less(H[c, 0], H[c, 1], t, s):
            H[j, 0] = H[c, 0]
            H[j, 1] = H[c, 1]
            H[j, 2] = H[c, 2]
            H[j, 3] = H[c, 3]
            j = c
        else:
            break
    H[j, 0] = t
    H[j, 1] = s
    H[j, 2] = b
    H[j, 3] = v
    return n


@K.inline
def drain_mode(mode, nrq, nwq, T):
    """Read/write queue mode after a change of the queued reads / writes (rules.py write drain; -1: one mixed
    queue). 0 -> 1 (drain writes) above T_WQHI queued writes or with no read queued; 1 -> 0 below T_WQLO (or
    no write) once a read is queued (Ramulator 2.1 controller_base.cpp set_write_mode)."""
    if mode == 0:
        if nwq > T[K.T_WQHI] or nrq == 0:
            return 1
    elif mode == 1:
        if (nwq < T[K.T_WQLO] or nwq == 0) and nrq != 0:
            return 0
    return mode


@K.inline
def room(i, qn, nrq, nwq, qcap, scap, wq, T):
    """Whether request i fits: one mixed queue of qcap entries, or (write drain) qcap reads + T_WQ writes; there
    a request whose ACT issued has left its queue for the active buffer (scap slots in all; Ramulator 2.1
    controller_base.cpp:250-257 promote_to_active, :68 one active entry per bank)."""
    if T[K.T_WQ] == 0:
        return qn < qcap
    if qn >= scap:
        return False
    if wq[i] == 1:
        return nwq < T[K.T_WQ]
    return nrq < qcap


@K.inline
def eligible_hits(k, cur, mode, aslot, hp, hpw, sreq, rowq, wq):
    """(read hits, write hits) of bank k that the mode may serve: all (mode -1), those of the mode's class, plus
    the request whose ACT opened the row (aslot: Ramulator's active buffer)."""
    if mode < 0:
        return hp[k] - hpw[k], hpw[k]
    a = aslot[k]
    ah = a >= 0 and cur >= 0 and rowq[sreq[a]] == cur
    aw = 1 if ah and wq[sreq[a]] == 1 else 0
    ar = 1 if ah and aw == 0 else 0
    if mode == 0:
        return hp[k] - hpw[k], aw
    return ar, hpw[k]


@K.inline
def first_eligible(s, k, mode, aslot, snext, sreq, wq):
    """First slot from s (bank FIFO order) whose request the mode may serve; -1 if none."""
    while s >= 0 and not (mode < 0 or wq[sreq[s]] == mode or aslot[k] == s):
        s = snext[s]
    return s


@K.inline
def bank_candidates(s, k, cur, er, ew, mode, aslot, snext, sreq, rowq, wq, T):
    """Slots of bank k's oldest eligible read hit (if ``er``), write hit (if ``ew``) and, without the PRE
    hold-back, its oldest other-row request (unless the row's active request is pending), walking the bank's
    queue from slot ``s`` in age order; -1 where none. Shared by the heap and flat schedulers."""
    need_r = er > 0
    need_w = ew > 0
    a = aslot[k]  # pre_holdback off: a PRE for the oldest other-row request unless the row's active one is pending
    need_p = T[K.T_PREHOLD] == 0 and not (a >= 0 and rowq[sreq[a]] == cur)
    sr = -1
    sw = -1
    sp = -1
    while s >= 0 and (need_r or need_w or need_p):
        i = sreq[s]
        if mode < 0 or wq[i] == mode or aslot[k] == s:
            if rowq[i] != cur:
                if need_p:
                    sp = s
                    need_p = False
            elif wq[i] == 1:
                if need_w:
                    sw = s
                    need_w = False
            elif need_r:
                sr = s
                need_r = False
        s = snext[s]
    return sr, sw, sp


@K.inline
def _best(k, bhead, snext, sreq, spos, hp, hpw, rowq, wq, arr, T, BS, GS, RS, US, CS, mode, aslot):
    """Best candidate of bank k: (cycle, sub-key, slot, kind 0 hit / 1 ACT / 2 PRE); cycle INF if none.
    ``mode``/``aslot``: write drain (drain_mode, eligible_hits)."""
    s = bhead[k]
    if s < 0:
        return INF, 0, -1, 0
    cur = BS[k, K.B_ROW]
    er, ew = eligible_hits(k, cur, mode, aslot, hp, hpw, sreq, rowq, wq)
    if cur < 0 or er + ew == 0:
        # a refresh closed the row of the bank's active request (aslot): its ACT again (the active buffer first)
        s = aslot[k] if cur < 0 and aslot[k] >= 0 else first_eligible(s, k, mode, aslot, snext, sreq, wq)
        if s < 0:
            return INF, 0, -1, 0
        i = sreq[s]
        if cur < 0:
            t = K.earliest_act_i(k, T, BS, GS, RS, CS)
            kind = 1
        else:
            t = K.earliest_pre_i(k, T, BS, CS)
            kind = 2
        if arr[i] > t:
            t = arr[i]
        return t, (1 << AGE_BITS) | spos[s], s, kind
    sr, sw, sp = bank_candidates(s, k, cur, er, ew, mode, aslot, snext, sreq, rowq, wq, T)
    bt = INF
    bs = 0
    bsl = -1
    if sr >= 0:
        t = K.earliest_col_i(k, 0, T, BS, GS, RS, US, CS)
        i = sreq[sr]
        if arr[i] > t:
            t = arr[i]
        bt = t
        bs = spos[sr]
        bsl = sr
    if sw >= 0:
        t = K.earliest_col_i(k, 1, T, BS, GS, RS, US, CS)
        i = sreq[sw]
        if arr[i] > t:
            t = arr[i]
        if _less(t, spos[sw], bt, bs):
            bt = t
            bs = spos[sw]
            bsl = sw
    kind = 0
    if sp >= 0:
        t = K.earliest_pre_i(k, T, BS, CS)
        i = sreq[sp]
        if arr[i] > t:
            t = arr[i]
        if _less(t, (1 << AGE_BITS) | spos[sp], bt, bs):
            bt = t
            bs = (1 << AGE_BITS) | spos[sp]
            bsl = sp
            kind = 2
    return bt, bs, bsl, kind


@K.hot
def _emit(E, ne, op, flags, k, row, arrival, T):
    B, G, R, P = T[K.T_B], T[K.T_G], T[K.T_R], T[K.T_P]
    E[ne, 0] = op
    E[ne, 1] = flags
    E[ne, 2] = k // (B * G * R * P)
    E[ne, 3] = (k // (B * G * R)) % P
    E[ne, 4] = (k // (B * G)) % R
    E[ne, 5] = (k // B) % G
    E[ne, 6] = k % B
    E[ne, 7] = row
    E[ne, 8] = arrival


@K.hot
def gap_refresh(r, t, T, BS, RS, ST, ch, E, ne):
    """kernel.refresh_gap of rank ``r`` up to cycle ``t`` with its REF/REFPB records emitted (as many as E holds).

    Schedulers pass t = the arrival of the oldest queued request: no command issues before it, so the walk would
    perform every refresh due by then (before the rank's next command or as idle-tail refreshes). Returns
    (refreshes done, emitted-record count)."""
    due = RS[r, K.R_DUE]
    idx = RS[r, K.R_PBNEXT]
    n = K.refresh_gap(r, t, T, BS, RS, ST, ch)
    NB = T[K.T_G] * T[K.T_B]
    pb = T[K.T_REFMODE] == 2
    per = T[K.T_REFIPB] if pb else T[K.T_REFI]
    ng = NB // T[K.T_PBG]
    j = 0
    while j < n and ne < E.shape[0]:
        if pb:
            _emit(E, ne, K.REFPB, 0, r * NB + (idx + j) % ng, 0, due + j * per, T)
        else:
            _emit(E, ne, K.REF, 0, r * NB, 0, due + j * per, T)
        ne += 1
        j += 1
    return n, ne + (n - j)


@K.inline
def in_refresh(k, r, T, RS):
    """Whether bank k (of rank r) is refreshed by the rank's due refresh (all-bank, or its per-bank group)."""
    if T[K.T_REFMODE] != 2:
        return True
    NB = T[K.T_G] * T[K.T_B]
    return (k % NB) % (NB // T[K.T_PBG]) == RS[r, K.R_PBNEXT]


@K.inline
def pending_active(r, T, BS, GS, RS, US, CS, aslot, sreq, spos, rowq, wq, arr):
    """rules.py refresh_waits_active: of the banks that rank r's due refresh closes, those whose open row was
    activated for a request that has not issued its column command (aslot); the column command of the earliest
    (then the oldest) of them: (cycle, slot, bank), slot -1 if none."""
    NB = T[K.T_G] * T[K.T_B]
    lo = 0
    cnt = NB
    stride = 1
    if T[K.T_REFMODE] == 2:
        stride = NB // T[K.T_PBG]
        lo = RS[r, K.R_PBNEXT]
        cnt = T[K.T_PBG]
    bt = INF
    bs = -1
    bk = -1
    for j in range(cnt):
        k = r * NB + lo + j * stride
        a = aslot[k]
        if a >= 0 and BS[k, K.B_ROW] >= 0 and rowq[sreq[a]] == BS[k, K.B_ROW]:
            i = sreq[a]
            t = K.earliest_col_i(k, wq[i], T, BS, GS, RS, US, CS)
            if arr[i] > t:
                t = arr[i]
            if t < bt or (t == bt and spos[a] < spos[bs]):
                bt = t
                bs = a
                bk = k
    return bt, bs, bk


@K.inline
def oldest_arrival(k0, k1, bhead, sreq, arr):
    """Arrival of the oldest queued request of banks [k0, k1) (arrivals grow with queue age)."""
    a = INF
    for kk in range(k0, k1):
        s = bhead[kk]
        if s >= 0 and arr[sreq[s]] < a:
            a = arr[sreq[s]]
    return a


@njit(cache=True)
def ctrl_kernel_fast(
    order,
    starts,
    chans,
    kq,
    rowq,
    wq,
    arr,
    qcap,
    closed,
    T,
    BS,
    GS,
    RS,
    US,
    CS,
    ST,
    LAT,
    E,
    limit,
    win,
    maxw,
    WN,
    WR,
    WS,
    WL,
    WF,
):
    """FR-FCFS over each channel in ``chans`` (same contract as sched_scan.ctrl_kernel_scan).

    ``limit``: at most this many requests per channel (<0: all). ``win``/``maxw`` > 0: record (served, ST, LAT)
    at every multiple of ``win`` cycles into WR/WS/WL[ci, j] (WF[ci, j]: cycles from that boundary to the first
    column command after it) and stop the channel after ``maxw`` windows;
    WN[ci] = windows recorded, WN[ci] = -1 if the channel ran to its end. Returns the number of emitted commands
    (E rows; only as many as fit are written).
    """
    nbank = BS.shape[0]
    nbc = nbank // T[K.T_NCH] if T[K.T_NCH] > 0 else nbank
    BQ = np.zeros((7, nbank), np.int64)  # per bank: hp, hpw, head, tail, version, dirty mark, active slot
    BQ[2:4] = -1
    BQ[6] = -1
    scap = qcap + T[K.T_WQ] + (nbc if T[K.T_WQ] > 0 else 0)  # slots: one mixed queue, or reads + writes + active
    SQ = np.zeros((7, scap), np.int64)  # per slot: next, prev, request, age, class, free stack, active
    H = np.zeros((4 * (scap + nbc) + 64, 4), np.int64)
    dirty = np.zeros(nbc + 2, np.int64)
    return _ctrl_core(
        order,
        starts,
        chans,
        kq,
        rowq,
        wq,
        arr,
        qcap,
        closed,
        T,
        BS,
        GS,
        RS,
        US,
        CS,
        ST,
        LAT,
        E,
        limit,
        win,
        maxw,
        WN,
        WR,
        WS,
        WL,
        WF,
        nbc,
        BQ[0],
        BQ[1],
        BQ[2],
        BQ[3],
        BQ[4],
        BQ[5],
        SQ[0],
        SQ[1],
        SQ[2],
        SQ[3],
        SQ[4],
        SQ[5],
        H,
        dirty,
        BQ[6],
        SQ[6],
    )


@K.hot
def _ctrl_core(
    order,
    starts,
    chans,
    kq,
    rowq,
    wq,
    arr,
    qcap,
    closed,
    T,
    BS,
    GS,
    RS,
    US,
    CS,
    ST,
    LAT,
    E,
    limit,
    win,
    maxw,
    WN,
    WR,
    WS,
    WL,
    WF,
    nbc,
    hp,
    hpw,
    bhead,
    btail,
    bver,
    dmark,
    snext,
    sprev,
    sreq,
    spos,
    sqc,
    free,
    H,
    dirty,
    aslot,
    sout,
):
    NB = T[K.T_G] * T[K.T_B]
    drain = T[K.T_WQ] > 0
    scap = sout.shape[0]
    hcap = H.shape[0]
    ecap = E.shape[0]
    ne = 0
    pbg = T[K.T_PBG]
    for ci in range(chans.shape[0]):
        ch = chans[ci]
        nxt = starts[ch]
        end = starts[ch + 1]
        if limit >= 0 and end - nxt > limit:
            end = nxt + limit
        nfree = scap
        for x in range(scap):
            free[x] = x
        for kk in range(ch * nbc, (ch + 1) * nbc):
            aslot[kk] = -1
        qn = 0
        nrq = 0
        nwq = 0
        mode = 0 if drain else -1
        hn = 0
        nd = 0
        horizon = CS[ch, K.C_LAST]
        lat = 0.0
        served = 0
        nw = 0
        bound = win if maxw > 0 else INF
        stopped = False
        fpend = -1
        while nxt < end or qn > 0:
            # ---- admit requests (arrival order) while there is room
            while (
                nxt < end
                and room(order[nxt], qn, nrq, nwq, qcap, scap, wq, T)
                and (qn == 0 or arr[order[nxt]] <= horizon)
            ):
                i = order[nxt]
                if wq[i] == 1:
                    nwq += 1
                else:
                    nrq += 1
                nfree -= 1
                s = free[nfree]
                sreq[s] = i
                spos[s] = nxt
                sqc[s] = -1
                sout[s] = 0
                k = kq[i]
                snext[s] = -1
                sprev[s] = btail[k]
                if btail[k] >= 0:
                    snext[btail[k]] = s
                else:
                    bhead[k] = s
                btail[k] = s
                qn += 1
                nxt += 1
                if BS[k, K.B_ROW] == rowq[i]:
                    hp[k] += 1
                    if wq[i] == 1:
                        hpw[k] += 1
                if dmark[k] == 0:
                    dmark[k] = 1
                    dirty[nd] = k
                    nd += 1
            if drain:  # write drain: a mode switch changes every bank's candidates
                nm = drain_mode(mode, nrq, nwq, T)
                if nm != mode:
                    mode = nm
                    for kk in range(ch * nbc, (ch + 1) * nbc):
                        if bhead[kk] >= 0 and dmark[kk] == 0:
                            dmark[kk] = 1
                            dirty[nd] = kk
                            nd += 1
            # ---- select: refresh changed banks, then pop until the root's key is still exact. All candidate
            # evaluations go through the one _best call below (validation of a popped bank vb included).
            vb = -1
            t0 = 0
            s0 = 0
            while True:
                if hn + nd + 1 >= hcap:  # heap full of stale entries: rebuild from the live banks
                    hn = 0
                    for kk in range(ch * nbc, (ch + 1) * nbc):
                        if bhead[kk] >= 0 and dmark[kk] == 0 and kk != vb:
                            dmark[kk] = 1
                            dirty[nd] = kk
                            nd += 1
                if nd > 0:
                    nd -= 1
                    kb = dirty[nd]
                    if kb != vb:
                        dmark[kb] = 0
                        bver[kb] += 1
                    ct, cs, cslot, ckind = _best(
                        kb, bhead, snext, sreq, spos, hp, hpw, rowq, wq, arr, T, BS, GS, RS, US, CS, mode, aslot
                    )
                    if kb == vb:
                        vb = -1
                        if ct == t0 and cs == s0:
                            break
                    if ct < INF:
                        hn = _hpush(H, hn, ct, cs, kb, bver[kb])
                    continue
                t0 = H[0, 0]
                s0 = H[0, 1]
                b = H[0, 2]
                v = H[0, 3]
                hn = _hpop(H, hn)
                if v == bver[b]:
                    vb = b
                    dirty[nd] = b
                    nd += 1
            bt = ct
            slot = cslot
            kind = ckind
            k = kb
            if nxt < end and room(order[nxt], qn, nrq, nwq, qcap, scap, wq, T) and arr[order[nxt]] <= bt:
                horizon = bt
                dmark[k] = 1
                dirty[nd] = k
                nd += 1
                continue
            # ---- steady-state windows
            while bt >= bound:
                WR[ci, nw] = served
                WL[ci, nw] = lat
                WF[ci, nw] = 0
                fpend = nw
                for x in range(ST.shape[1]):
                    WS[ci, nw, x] = ST[ch, x]
                nw += 1
                bound += win
                if nw >= maxw:
                    stopped = True
                    break
            if stopped:
                break
            i = sreq[slot]
            r = BS[k, K.B_R]
            due = K.due_of(r, T, RS)
            if bt >= due and T[K.T_REFACTIVE] == 1:  # a pending active request of the refresh's banks first
                ta, sa, ka = pending_active(r, T, BS, GS, RS, US, CS, aslot, sreq, spos, rowq, wq, arr)
                if sa >= 0:
                    if ka != k:  # the popped bank keeps its candidate: back to the heap
                        dmark[k] = 1
                        dirty[nd] = k
                        nd += 1
                    bt = ta
                    slot = sa
                    kind = 0
                    k = ka
                    i = sreq[slot]
                    due = INF
            if bt >= due:
                ng = 0
                if bt - due >= K.ref_period(T):  # at least two refreshes due: an idle gap
                    ng, ne = gap_refresh(
                        r, oldest_arrival(ch * nbc, (ch + 1) * nbc, bhead, sreq, arr), T, BS, RS, ST, ch, E, ne
                    )
                if ng > 0:  # idle rank: its refreshes in closed form; every bank of the rank changed
                    for kk in range(r * NB, (r + 1) * NB):
                        if bhead[kk] >= 0 and dmark[kk] == 0:
                            dmark[kk] = 1
                            dirty[nd] = kk
                            nd += 1
                    continue
                if T[K.T_REFMODE] == 2:
                    idx = RS[r, K.R_PBNEXT]
                    if ne < ecap:
                        _emit(E, ne, K.REFPB, 0, r * NB + idx, 0, due, T)
                    stride = NB // pbg
                    lo, cnt = idx, pbg
                else:
                    if ne < ecap:
                        _emit(E, ne, K.REF, 0, r * NB, 0, due, T)
                    lo, cnt, stride = 0, NB, 1
                ne += 1
                K.auto_refresh(r, T, BS, RS, CS, ST, ch)
                for j in range(cnt):
                    kk = r * NB + lo + j * stride
                    hp[kk] = 0
                    hpw[kk] = 0
                    if bhead[kk] >= 0 and dmark[kk] == 0:
                        dmark[kk] = 1
                        dirty[nd] = kk
                        nd += 1
                if dmark[k] == 0:
                    dmark[k] = 1
                    dirty[nd] = k
                    nd += 1
                continue
            if kind == 2:
                K.commit_pre_i(k, bt, T, BS, CS, ST)
                hp[k] = 0
                hpw[k] = 0
                aslot[k] = -1
                if sqc[slot] < 0:
                    sqc[slot] = 2
                    ST[ch, K.S_CONF] += 1
                if ne < ecap:
                    _emit(E, ne, K.PRE, 0, k, 0, arr[i], T)
            elif kind == 1:
                row = rowq[i]
                K.commit_act_i(k, row, bt, T, BS, GS, RS, CS, ST)
                aslot[k] = slot
                if drain and sout[slot] == 0:  # to the active buffer: leaves its read/write queue
                    sout[slot] = 1
                    if wq[i] == 1:
                        nwq -= 1
                    else:
                        nrq -= 1
                c = 0
                cw = 0
                s = bhead[k]
                while s >= 0:
                    j = sreq[s]
                    if rowq[j] == row:
                        c += 1
                        if wq[j] == 1:
                            cw += 1
                    s = snext[s]
                hp[k] = c
                hpw[k] = cw
                if sqc[slot] < 0:
                    sqc[slot] = 1
                    ST[ch, K.S_MISS] += 1
                if ne < ecap:
                    _emit(E, ne, K.ACT, 0, k, row, arr[i], T)
            else:
                w = wq[i]
                K.commit_col_i(k, w, bt, 1, T, BS, GS, RS, US, CS, ST)
                hp[k] -= 1
                if w == 1:
                    hpw[k] -= 1
                if sout[slot] == 0:
                    if w == 1:
                        nwq -= 1
                    else:
                        nrq -= 1
                if aslot[k] == slot:
                    aslot[k] = -1
                if sqc[slot] < 0:
                    ST[ch, K.S_HIT] += 1
                fl = 0
                if closed and (hp[k] == 0 if T[K.T_PAGECAP] == 0 else BS[k, K.B_NACC] >= T[K.T_PAGECAP]):
                    K.auto_pre_i(k, T, BS, ST, ch)
                    fl = K.F_AP
                    hp[k] = 0  # the row's queued hits (cap rule) are misses now
                    hpw[k] = 0
                if ne < ecap:
                    _emit(E, ne, K.WR if w == 1 else K.RD, fl, k, rowq[i], arr[i], T)
                done = bt + (T[K.T_CWL] if w == 1 else T[K.T_CL]) + T[K.T_BL]
                lat += done - arr[i]
                served += 1
                if fpend >= 0:
                    WF[ci, fpend] = bt - (fpend + 1) * win
                    fpend = -1
                pv = sprev[slot]
                nx = snext[slot]
                if pv >= 0:
                    snext[pv] = nx
                else:
                    bhead[k] = nx
                if nx >= 0:
                    sprev[nx] = pv
                else:
                    btail[k] = pv
                free[nfree] = slot
                nfree += 1
                qn -= 1
            ne += 1
            dmark[k] = 1
            dirty[nd] = k
            nd += 1
        LAT[ch] = lat
        WN[ci] = nw if stopped else -1
        for x in range(nd):  # leave the scratch state clean for the next channel
            dmark[dirty[x]] = 0
        if stopped:
            for kk in range(ch * nbc, (ch + 1) * nbc):
                bhead[kk] = -1
                btail[kk] = -1
    return ne
