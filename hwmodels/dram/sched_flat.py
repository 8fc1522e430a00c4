"""Flat FR-FCFS request scheduler (Numba): exact per-bank candidate keys kept up to date eagerly, one linear
min-scan per command. Same selection order as the queue scan ``sched_scan.ctrl_kernel_scan`` and the heap
scheduler ``sched.ctrl_kernel_fast`` (differential tests in tests/test_dram_sched.py).

Every bank of the channel has at most two candidates (as in sched.py): the primary one (oldest read hit to the
open row, else ACT / PRE for the oldest request) and the oldest write hit; without the PRE hold-back (rules.py
pre_holdback False) a third, the PRE for the oldest other-row request of a bank with hits (its x = max(bank's
earliest PRE, arrival) changes only with the bank). The earliest legal cycle of a
candidate is max(x, C), where C is the channel-level term (last command cycle and the row / column command bus)
and x all the rest (bank, bank group, rank, pseudo-channel terms and the arrival). x is stored per candidate and
recomputed eagerly when its inputs change: a bank's own candidates when the bank is touched (enqueue, command,
refresh); after an ACT the ACT candidates of that rank (nRRD, tFAW); after a RD/WR the hit candidates of that
pseudo-channel (data bus, nCCD, nWTR, nRTW), found through per-bank bitmasks. No other command changes any x.
The RD/WR update is incremental: only that commit changed the hit candidates' inputs and each only grows (the
data-bus end strictly, rank and bank-group terms are max-updated), so x = max(x, rank term) per rank of the
pseudo-channel and max(x, group term) for the committed bank's group -- equal to the full recomputation (issue 13:
~10 % of the seq stream's engine time).
The selection is then one branch-free (vectorised) scan over the 2 (3) x banks candidates of the key
min(max(x, C) - base, sat) << (31 + eb) | not_hit << (30 + eb) | age << eb | index: the queue scan's order
(cycle, then row hits, then the oldest), with the winner's index in the low eb bits. A saturated cycle field
(every candidate >= 2**(32 - eb) cycles ahead, only after long arrival gaps) falls back to an exact two-key scan.
Ages are positions in the channel order (< 2**30) and eb = ceil(log2(2 (3) x banks)) <= 13; the caller uses the
heap scheduler beyond those limits.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram import recur
from attnsim.hwmodels.dram.sched_heap import (
    _emit,
    bank_candidates,
    drain_mode,
    eligible_hits,
    first_eligible,
    gap_refresh,
    oldest_arrival,
    pending_active,
    room,
)

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these

INF = 1 << 62
KEYMAX = (1 << 63) - 1  # above every key (ages < AGE_LIMIT - 1)
AGE_LIMIT = 1 << 30  # ages (positions) take 30 bits of the key
MAX_BANKS = 1 << 11  # banks per channel: the candidate index takes <= 13 bits, leaving >= 19 for the cycle
KA_HIT, KA_ACT, KA_PRE, KA_NONE = 0, 2, 3, 4


@intrinsic
def _cttz(typingctx, x):
    """Count of trailing zero bits of an int64 (LLVM cttz; x != 0)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(1)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.cttz.i64")
        v = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.call(fn, [v, ir.Constant(ir.IntType(1), 1)])

    return types.int64(types.int64), codegen


@K.inline
def _range_word(M, w, lo, hi):
    """Bits of word w of bitmask M that lie in [lo, hi)."""
    m = M[w]
    if w == lo >> 6:
        m &= ~((1 << (lo & 63)) - 1)
    if w == (hi - 1) >> 6 and ((hi - 1) & 63) < 63:
        m &= (1 << (((hi - 1) & 63) + 1)) - 1
    return m


@K.inline
def _raise_hits(MH, MW, X, lo, hi, nbc, vr, vw):
    """X[q] = max(X[q], vr) for the read hit candidates q in [lo, hi) (bitmask MH), and likewise vw for the
    write hit candidates (MW, stored at nbc + q): one input of their issue times grew."""
    for wd in range(lo >> 6, ((hi - 1) >> 6) + 1):
        mm = _range_word(MH, wd, lo, hi)
        while mm != 0:
            q = (wd << 6) + _cttz(mm)
            mm &= mm - 1
            if vr > X[q]:
                X[q] = vr
        mm = _range_word(MW, wd, lo, hi)
        while mm != 0:
            q = nbc + (wd << 6) + _cttz(mm)
            mm &= mm - 1
            if vw > X[q]:
                X[q] = vw


@K.inline
def _s_act(k, T, BS, GS, RS):
    """Rank/bank-group part of the earliest ACT of bank k."""
    g = BS[k, K.B_G]
    r = BS[k, K.B_R]
    s = GS[g, K.G_ACT]
    if RS[r, K.R_ACT] > s:
        s = RS[r, K.R_ACT]
    f = RS[r, K.R_FAW0 + RS[r, K.R_FAWI]] + T[K.T_FAW]
    if f > s:
        s = f
    return s


@K.inline
def _s_rd(k, T, BS, GS, RS, US):
    g = BS[k, K.B_G]
    r = BS[k, K.B_R]
    s = US[BS[k, K.B_U], K.U_DATA] - T[K.T_CL]
    if GS[g, K.G_RD] > s:
        s = GS[g, K.G_RD]
    if RS[r, K.R_RD] > s:
        s = RS[r, K.R_RD]
    return s


@K.inline
def _s_wr(k, T, BS, GS, RS, US):
    g = BS[k, K.B_G]
    r = BS[k, K.B_R]
    s = GS[g, K.G_WR]
    if RS[r, K.R_WR] > s:
        s = RS[r, K.R_WR]
    d = US[BS[k, K.B_U], K.U_DATA] - T[K.T_CWL]
    if d > s:
        s = d
    return s


@K.inline
def _bank(
    k,
    j,
    nbc,
    eb,
    bhead,
    snext,
    sreq,
    spos,
    hp,
    hpw,
    rowq,
    wq,
    arr,
    T,
    BS,
    GS,
    RS,
    US,
    X,
    SUB,
    CLS,
    SLOT,
    KA,
    LA,
    LW,
    MA,
    MH,
    MW,
    mode,
    aslot,
):
    """Choose bank k's candidates (local index j) and compute their x; returns the change in the number of
    write-hit and PRE candidates (the second and third sets). ``mode``/``aslot``: write drain (sched.drain_mode,
    sched.eligible_hits). pre_holdback off (T_PREHOLD 0): the third candidate, the PRE for the oldest other-row
    request of a bank with hits unless the request that activated the row is pending (as sched._best)."""
    jw = nbc + j
    was_w = 1 if X[jw] < INF else 0
    X[jw] = INF
    jp = 2 * nbc + j
    if T[K.T_PREHOLD] == 0 and X[jp] < INF:
        X[jp] = INF
        was_w += 1
    wj = j >> 6
    bj = 1 << (j & 63)
    MA[wj] &= ~bj
    MH[wj] &= ~bj
    MW[wj] &= ~bj
    s = bhead[k]
    if s < 0:
        X[j] = INF
        KA[j] = KA_NONE
        return -was_w
    cur = BS[k, K.B_ROW]
    er, ew = eligible_hits(k, cur, mode, aslot, hp, hpw, sreq, rowq, wq)
    if cur < 0 or er + ew == 0:  # a refresh closed the row of the active request (aslot): its ACT again
        s = aslot[k] if cur < 0 and aslot[k] >= 0 else first_eligible(s, k, mode, aslot, snext, sreq, wq)
        if s < 0:
            X[j] = INF
            KA[j] = KA_NONE
            return -was_w
        i = sreq[s]
        a = arr[i]
        if cur < 0:
            KA[j] = KA_ACT
            MA[wj] |= bj
            la = BS[k, K.B_ACT]
            if a > la:
                la = a
            LA[j] = la
            x = _s_act(k, T, BS, GS, RS)
            X[j] = la if la > x else x
        else:
            KA[j] = KA_PRE
            la = BS[k, K.B_PRE]
            if a > la:
                la = a
            LA[j] = la
            X[j] = la
        SUB[j] = (((1 << 30) | spos[s]) << eb) | j
        CLS[j] = 0
        SLOT[j] = s
        return -was_w
    sr, sw, sp = bank_candidates(s, k, cur, er, ew, mode, aslot, snext, sreq, rowq, wq, T)
    if sp >= 0:
        la = BS[k, K.B_PRE]
        a = arr[sreq[sp]]
        if a > la:
            la = a
        X[jp] = la
        SUB[jp] = (((1 << 30) | spos[sp]) << eb) | jp
        CLS[jp] = 0
        SLOT[jp] = sp
        was_w -= 1
    if sr >= 0:
        KA[j] = KA_HIT
        MH[wj] |= bj
        la = BS[k, K.B_RD]
        a = arr[sreq[sr]]
        if a > la:
            la = a
        LA[j] = la
        x = _s_rd(k, T, BS, GS, RS, US)
        X[j] = la if la > x else x
        SUB[j] = (spos[sr] << eb) | j
        CLS[j] = 1
        SLOT[j] = sr
    else:
        KA[j] = KA_NONE
        X[j] = INF
    if sw >= 0:
        lw = BS[k, K.B_WR]
        a = arr[sreq[sw]]
        if a > lw:
            lw = a
        LW[j] = lw
        MW[wj] |= bj
        x = _s_wr(k, T, BS, GS, RS, US)
        X[jw] = lw if lw > x else x
        SUB[jw] = (spos[sw] << eb) | jw
        SLOT[jw] = sw
        return 1 - was_w
    return -was_w


@njit(cache=True, nogil=True)
def ctrl_kernel_flat(
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
    skip,
    SKO,
):
    """FR-FCFS over each channel in ``chans``; same contract and results as sched.ctrl_kernel_fast, for requests
    stored channel-contiguous in arrival order (the request at position x is x: no order array). ``skip``:
    jump over exactly recurring states (recur.py; off while emitting commands or recording steady windows);
    SKO[0] += requests skipped, SKO[1] += jumps. Releases the GIL: calls on disjoint channel sets run in
    parallel threads (controller.simulate_requests threads=; a channel's state rows are its own)."""
    nbank = BS.shape[0]
    nbc = nbank // T[K.T_NCH] if T[K.T_NCH] > 0 else nbank
    BQ = np.zeros((5, nbank), np.int64)  # per bank: hp, hpw, head, tail, active slot (write drain)
    BQ[2:5] = -1
    scap = qcap + T[K.T_WQ] + (nbc if T[K.T_WQ] > 0 else 0)  # slots: one mixed queue, or reads + writes + active
    SQ = np.zeros((7, scap), np.int64)  # per slot: next, prev, request, age, class, free stack, active
    CA = np.zeros((4, 3 * nbc), np.int64)  # per candidate: x, sub-key, class (0 row, 1 column), slot
    CB = np.zeros((3, nbc), np.int64)  # per bank: primary kind, its local part, the write hit's local part
    CM = np.zeros((3, (nbc + 63) // 64), np.int64)  # bitmasks over the banks: ACT candidate, read hit, write hit
    P, R, G = T[K.T_P], T[K.T_R], T[K.T_G]
    ncv = 16 + 3 * P + 10 * P * R + 3 * P * R * G + 32 * nbc + 6 * scap  # recur.canon's length bound
    CV = np.zeros((2, ncv), np.int64)  # skip-ahead: the saved and the current canonical state
    SV = np.zeros(K.N_S, np.int64)  # statistics at the saved state
    sk = skip and E.shape[0] == 0 and maxw == 0
    return _flat_core(
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
        SQ[0],
        SQ[1],
        SQ[2],
        SQ[3],
        SQ[4],
        SQ[5],
        CA[0],
        CA[1],
        CA[2],
        CA[3],
        CB[0],
        CB[1],
        CB[2],
        CM[0],
        CM[1],
        CM[2],
        BQ[4],
        SQ[6],
        sk,
        recur.clamp_cycles(T),
        CV[0],
        CV[1],
        SV,
        SKO,
    )


@K.hot
def _flat_core(
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
    snext,
    sprev,
    sreq,
    spos,
    sqc,
    free,
    X,
    SUB,
    CLS,
    SLOT,
    KA,
    LA,
    LW,
    MA,
    MH,
    MW,
    aslot,
    sout,
    skip,
    clamp,
    CV0,
    CV1,
    SV,
    SKO,
):
    NB = T[K.T_G] * T[K.T_B]
    drain = T[K.T_WQ] > 0
    scap = sout.shape[0]
    ecap = E.shape[0]
    ne = 0
    pbg = T[K.T_PBG]
    cb = T[K.T_COLBUS]
    nbr = NB  # banks per rank
    ncs = 2 if T[K.T_PREHOLD] == 1 else 3  # candidate sets: primary, write hit (, PRE: pre_holdback off)
    eb = 1  # bits of the candidate index in the key
    while (1 << eb) < ncs * nbc:
        eb += 1
    emask = (1 << eb) - 1
    yshift = 31 + eb
    ysat = (1 << (63 - yshift)) - 1
    B = T[K.T_B]
    R = T[K.T_R]
    for ci in range(chans.shape[0]):
        ch = chans[ci]
        kbase = ch * nbc
        for j in range(X.shape[0]):
            X[j] = INF
            SUB[j] = 0
            CLS[j] = 1
        for j in range(nbc):  # as a fresh call: the ACT/PRE and write-hit floors enter recur.canon for every bank
            KA[j] = KA_NONE  # (a previous channel's left its state unmatched: no skip on later channels)
            LA[j] = 0
            LW[j] = 0
        for j in range(MA.shape[0]):
            MA[j] = 0
            MH[j] = 0
            MW[j] = 0
        nwh = 0  # write-hit and PRE candidates (second and third sets)
        nxt = starts[ch]
        end = starts[ch + 1]
        if limit >= 0 and end - nxt > limit:
            end = nxt + limit
        nfree = scap
        for x in range(scap):
            free[x] = x
        for kk in range(kbase, kbase + nbc):
            aslot[kk] = -1
        qn = 0
        nrq = 0
        nwq = 0
        mode = 0 if drain else -1
        horizon = CS[ch, K.C_LAST]
        lat = 0.0
        served = 0
        nw = 0
        bound = win if maxw > 0 else INF
        stopped = False
        fpend = -1
        bpow = 1  # skip-ahead (recur.py): Brent's power and step count, the saved state
        blam = 0
        sv_n = -1
        sv_sig = 0
        sv_t = 0
        sv_nxt = 0
        sv_row = 0
        sv_served = 0
        sv_lat = 0.0
        sv_ne = 0
        sv_hold = False
        sv_lo = 0
        sv_q0 = 0
        while nxt < end or qn > 0:
            # ---- admit requests (arrival order) while there is room
            while nxt < end and room(nxt, qn, nrq, nwq, qcap, scap, wq, T) and (qn == 0 or arr[nxt] <= horizon):
                i = nxt
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
                first = btail[k] < 0
                if not first:
                    snext[btail[k]] = s
                else:
                    bhead[k] = s
                btail[k] = s
                qn += 1
                nxt += 1
                hit = BS[k, K.B_ROW] == rowq[i]
                if hit:
                    hp[k] += 1
                    if wq[i] == 1:
                        hpw[k] += 1
                # the bank's candidates change only if it was empty or the request is a hit it lacked
                j = k - kbase
                if drain or first or (hit and ((wq[i] == 1 and X[nbc + j] == INF) or (wq[i] != 1 and KA[j] != KA_HIT))):
                    nwh += _bank(
                        k,
                        j,
                        nbc,
                        eb,
                        bhead,
                        snext,
                        sreq,
                        spos,
                        hp,
                        hpw,
                        rowq,
                        wq,
                        arr,
                        T,
                        BS,
                        GS,
                        RS,
                        US,
                        X,
                        SUB,
                        CLS,
                        SLOT,
                        KA,
                        LA,
                        LW,
                        MA,
                        MH,
                        MW,
                        mode,
                        aslot,
                    )
            if drain:  # write drain: a mode switch changes every bank's candidates
                nm = drain_mode(mode, nrq, nwq, T)
                if nm != mode:
                    mode = nm
                    for q in range(nbc):
                        nwh += _bank(
                            kbase + q,
                            q,
                            nbc,
                            eb,
                            bhead,
                            snext,
                            sreq,
                            spos,
                            hp,
                            hpw,
                            rowq,
                            wq,
                            arr,
                            T,
                            BS,
                            GS,
                            RS,
                            US,
                            X,
                            SUB,
                            CLS,
                            SLOT,
                            KA,
                            LA,
                            LW,
                            MA,
                            MH,
                            MW,
                            mode,
                            aslot,
                        )
            # ---- select: min over candidates of (max(x, C) - base) << (31 + eb) | sub << eb | index
            c_row = CS[ch, K.C_LAST]
            if CS[ch, K.C_ROWBUS] > c_row:
                c_row = CS[ch, K.C_ROWBUS]
            c_col = CS[ch, K.C_LAST]
            if CS[ch, cb] > c_col:
                c_col = CS[ch, cb]
            base = c_row if c_row < c_col else c_col
            dr = c_row - base
            dc = c_col - base
            m = KEYMAX
            ncand = ncs * nbc if nwh > 0 else nbc
            for e in range(ncand):
                y = X[e] - base
                c = dc if CLS[e] == 1 else dr
                if c > y:
                    y = c
                if y > ysat:
                    y = ysat
                v = (y << yshift) | SUB[e]
                if v < m:
                    m = v
            if (m >> yshift) < ysat:
                e = m & emask
                bt = base + (m >> yshift)
            else:  # every candidate >= 2**ybits cycles ahead: exact two-key scan
                e = -1
                bt = INF
                bs = 0
                for q in range(ncand):
                    if X[q] == INF:
                        continue
                    t = X[q]
                    c = c_col if CLS[q] == 1 else c_row
                    if c > t:
                        t = c
                    if t < bt or (t == bt and SUB[q] < bs):
                        bt = t
                        bs = SUB[q]
                        e = q
            if e < nbc:
                j = e
                kind = 0 if KA[j] == KA_HIT else (1 if KA[j] == KA_ACT else 2)
            elif e < 2 * nbc:
                j = e - nbc
                kind = 0
            else:
                j = e - 2 * nbc
                kind = 2
            slot = SLOT[e]
            k = kbase + j
            if nxt < end and room(nxt, qn, nrq, nwq, qcap, scap, wq, T) and arr[nxt] <= bt:
                horizon = bt
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
                    bt = ta
                    slot = sa
                    kind = 0
                    k = ka
                    j = k - kbase
                    i = sreq[slot]
                    due = INF
            if bt >= due:
                ng = 0
                if bt - due >= K.ref_period(T):  # at least two refreshes due: an idle gap
                    ng, ne = gap_refresh(
                        r, oldest_arrival(kbase, kbase + nbc, bhead, sreq, arr), T, BS, RS, ST, ch, E, ne
                    )
                if ng > 0:  # idle rank: its refreshes in closed form; every bank of the rank changed
                    for kk in range(r * NB, (r + 1) * NB):
                        nwh += _bank(
                            kk,
                            kk - kbase,
                            nbc,
                            eb,
                            bhead,
                            snext,
                            sreq,
                            spos,
                            hp,
                            hpw,
                            rowq,
                            wq,
                            arr,
                            T,
                            BS,
                            GS,
                            RS,
                            US,
                            X,
                            SUB,
                            CLS,
                            SLOT,
                            KA,
                            LA,
                            LW,
                            MA,
                            MH,
                            MW,
                            mode,
                            aslot,
                        )
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
                for q in range(cnt):
                    kk = r * NB + lo + q * stride
                    hp[kk] = 0
                    hpw[kk] = 0
                    nwh += _bank(
                        kk,
                        kk - kbase,
                        nbc,
                        eb,
                        bhead,
                        snext,
                        sreq,
                        spos,
                        hp,
                        hpw,
                        rowq,
                        wq,
                        arr,
                        T,
                        BS,
                        GS,
                        RS,
                        US,
                        X,
                        SUB,
                        CLS,
                        SLOT,
                        KA,
                        LA,
                        LW,
                        MA,
                        MH,
                        MW,
                        mode,
                        aslot,
                    )
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
                    q = sreq[s]
                    if rowq[q] == row:
                        c += 1
                        if wq[q] == 1:
                            cw += 1
                    s = snext[s]
                hp[k] = c
                hpw[k] = cw
                if sqc[slot] < 0:
                    sqc[slot] = 1
                    ST[ch, K.S_MISS] += 1
                if ne < ecap:
                    _emit(E, ne, K.ACT, 0, k, row, arr[i], T)
                # nRRD / tFAW moved: the ACT candidates of this rank
                s_r = RS[r, K.R_FAW0 + RS[r, K.R_FAWI]] + T[K.T_FAW]
                if RS[r, K.R_ACT] > s_r:
                    s_r = RS[r, K.R_ACT]
                lo = r * nbr - kbase
                hi = lo + nbr
                if T[K.T_ACTSCOPE] == 1:  # the window is shared by the ranks/SIDs of the pseudo-channel
                    lo -= (r % T[K.T_R]) * nbr
                    hi = lo + T[K.T_R] * nbr
                for wd in range(lo >> 6, ((hi - 1) >> 6) + 1):
                    mm = _range_word(MA, wd, lo, hi)
                    while mm != 0:
                        q = (wd << 6) + _cttz(mm)
                        mm &= mm - 1
                        s_g = GS[BS[kbase + q, K.B_G], K.G_ACT]
                        if s_r > s_g:
                            s_g = s_r
                        X[q] = LA[q] if LA[q] > s_g else s_g
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
                # data bus / nCCD / nWTR / nRTW moved: the hit candidates of this pseudo-channel. Only this commit
                # changed their inputs and every input only grows (the data-bus end strictly, the rank and group
                # terms are max-updated), so x = max(x, rank term) per rank, and the group term for bank k's group:
                # the same value as recomputing max(LA, data bus, rank, group) with four loads per candidate
                u = BS[k, K.B_U]
                d = US[u, K.U_DATA]
                for rr in range(u * R, u * R + R):
                    vr = d - T[K.T_CL]
                    if RS[rr, K.R_RD] > vr:
                        vr = RS[rr, K.R_RD]
                    vw = d - T[K.T_CWL]
                    if RS[rr, K.R_WR] > vw:
                        vw = RS[rr, K.R_WR]
                    lo = rr * nbr - kbase
                    _raise_hits(MH, MW, X, lo, lo + nbr, nbc, vr, vw)
                g = BS[k, K.B_G]
                vr = GS[g, K.G_RD]
                vw = GS[g, K.G_WR]
                lo = g * B - kbase
                _raise_hits(MH, MW, X, lo, lo + B, nbc, vr, vw)
            ne += 1
            nwh += _bank(
                k,
                j,
                nbc,
                eb,
                bhead,
                snext,
                sreq,
                spos,
                hp,
                hpw,
                rowq,
                wq,
                arr,
                T,
                BS,
                GS,
                RS,
                US,
                X,
                SUB,
                CLS,
                SLOT,
                KA,
                LA,
                LW,
                MA,
                MH,
                MW,
                mode,
                aslot,
            )
            if skip and kind == 1 and nxt < end:  # ACT checkpoint: Brent's cycle detection (recur.py)
                t = CS[ch, K.C_LAST]
                r0 = rowq[nxt]
                sig = recur.signature(ch, k, t, r0, qn, nrq, nwq, mode, nwh, clamp, T, BS, RS, US, CS)
                save = False
                if sv_n > 0 and sig == sv_sig:
                    ncv = recur.canon(
                        CV1,
                        ch,
                        kbase,
                        nbc,
                        nxt,
                        t,
                        r0,
                        clamp,
                        eb,
                        qn,
                        nrq,
                        nwq,
                        mode,
                        nwh,
                        horizon,
                        arr[nxt],
                        closed,
                        T,
                        BS,
                        GS,
                        RS,
                        US,
                        CS,
                        bhead,
                        snext,
                        sreq,
                        spos,
                        sqc,
                        sout,
                        hp,
                        hpw,
                        X,
                        SUB,
                        CLS,
                        SLOT,
                        KA,
                        LA,
                        LW,
                        aslot,
                        rowq,
                        wq,
                        arr,
                    )
                    if ncv == sv_n and recur.same(CV0, CV1, ncv):
                        dn = nxt - sv_nxt
                        dt = t - sv_t
                        drow = r0 - sv_row
                        ext = (
                            recur.periodic_extent(kq, rowq, wq, arr, sv_q0, sv_nxt, dn, drow, dt, sv_lo, sv_hold, end)
                            if dn > 0 and dt > 0
                            else 0
                        )
                        mj = (ext - 1) // dn if ext > 0 else 0
                        if mj > 0:
                            for x in range(ST.shape[1]):
                                SV[x] = ST[ch, x] - SV[x]
                            recur.jump(
                                mj,
                                dt,
                                dn,
                                drow,
                                ch,
                                kbase,
                                nbc,
                                eb,
                                T,
                                BS,
                                GS,
                                RS,
                                US,
                                CS,
                                ST,
                                SV,
                                bhead,
                                snext,
                                sreq,
                                spos,
                                X,
                                SUB,
                                LA,
                                LW,
                            )
                            c = served - sv_served
                            dl = lat - sv_lat
                            da = arr[sv_nxt + dn] - arr[sv_nxt]  # < dt: latencies grow per period
                            lat += mj * dl + float(dt - da) * c * (mj * (mj + 1) // 2)
                            served += mj * c
                            ne += mj * (ne - sv_ne)
                            nxt += mj * dn
                            if horizon > t + CV1[0]:  # recent: shifts; old: only its comparison with the
                                horizon += mj * dt  # (constant) arrivals counts, kept by leaving it
                            SKO[0] += mj * dn
                            SKO[1] += 1
                            bpow = 1
                            save = True
                blam += 1
                if blam >= bpow or save:  # a new saved state (Brent: at powers of two; after a jump)
                    t = CS[ch, K.C_LAST]
                    r0 = rowq[nxt]
                    sv_n = recur.canon(
                        CV0,
                        ch,
                        kbase,
                        nbc,
                        nxt,
                        t,
                        r0,
                        clamp,
                        eb,
                        qn,
                        nrq,
                        nwq,
                        mode,
                        nwh,
                        horizon,
                        arr[nxt],
                        closed,
                        T,
                        BS,
                        GS,
                        RS,
                        US,
                        CS,
                        bhead,
                        snext,
                        sreq,
                        spos,
                        sqc,
                        sout,
                        hp,
                        hpw,
                        X,
                        SUB,
                        CLS,
                        SLOT,
                        KA,
                        LA,
                        LW,
                        aslot,
                        rowq,
                        wq,
                        arr,
                    )
                    sv_sig = recur.signature(ch, k, t, r0, qn, nrq, nwq, mode, nwh, clamp, T, BS, RS, US, CS)
                    sv_t = t
                    sv_nxt = nxt
                    sv_row = r0
                    sv_served = served
                    sv_lat = lat
                    sv_ne = ne
                    sv_lo = t + CV0[0]
                    sv_q0 = nxt + CV0[12]
                    sv_hold = horizon <= sv_lo
                    for x in range(ST.shape[1]):
                        SV[x] = ST[ch, x]
                    if not save and bpow < recur.MAX_POWER:
                        bpow *= 2
                    blam = 0
        LAT[ch] = lat
        WN[ci] = nw if stopped else -1
        if stopped:
            for kk in range(kbase, kbase + nbc):
                bhead[kk] = -1
                btail[kk] = -1
    return ne
