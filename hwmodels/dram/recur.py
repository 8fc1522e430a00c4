"""Exact skip-ahead over recurring controller states (the flat scheduler, flat.py; DESIGN.md "Timing").

A stream that repeats itself -- period dn requests with the same banks and kinds, rows shifted by a constant
drow, arrivals shifted by the period's cycles dt, or so long past that they no longer constrain anything --
drives the controller through states that recur. The scheduler compares times, positions and rows but never
uses their values otherwise (translation invariance), so if the whole state at two checkpoints A and B is equal
relative to (last command cycle t, next position, next request's row), and the input is periodic from the
oldest request queued at A on, the run from B over the next m periods is the run from A shifted m times by
(dt, dn, drow) and serves the previous period's requests shifted by dn (so the latency sum is exact too). The state
after m periods is then B's with every time + m dt, every queued position + m dn, every open row + m drow, the
statistics + m (B - A) and the latency sum +
m L + (dt - da) c m (m + 1) / 2 (L, c: latency sum and requests served between A and B; da: the arrivals' shift
per period, dt or less for long-past arrivals). The result is exact: the same cycles, counts and latency as
issuing every command (tests/test_dram_skip.py compares them on periodic streams of every preset, refresh mode
and page policy, on timed streams and across breaks of the period).

Canonical state (``canon``): times relative to t, those old -- more than ``clamp`` cycles (twice the longest
timing distance) before t and before every refresh due of the channel, so every rule they feed is met and a due
refresh finds them earlier than its due -- as one value; refresh dues exact; the horizon of arrival admission
exact, or when old its comparison with the next arrival; rows relative to the next request's row; queue
entries in bank FIFO order (slot numbers are handles).
Recurrences are found with Brent's cycle detection over the checkpoints after each ACT: a signature of a few
fields first, the full state only where it matches, so a stream that never recurs (random) pays a few ns per ACT.
"""

from __future__ import annotations

from attnsim.hwmodels.dram import kernel as K

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these

INF = 1 << 62
SENT = 1 << 50  # marker: closed row, absent candidate, old horizon, no active slot
OLD = -(1 << 55)  # marker: an old cycle
MAX_POWER = 1 << 16  # Brent: the longest recurrence searched, in ACT checkpoints
_H1 = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit multipliers (signature mixing; int64 arithmetic wraps)
_H2 = 0xC2B2AE3D27D4EB4F - (1 << 64)
_H3 = 0x165667B19E3779F9


@K.hot
def clamp_cycles(T):
    """Age beyond which a stored cycle no longer constrains anything: twice the longest timing distance (the
    refresh intervals excepted: they only space the refresh dues, kept exact)."""
    m = 0
    for x in range(K.T_MODE + 1):
        if T[x] > m and x != K.T_REFI and x != K.T_REFIPB:  # refresh intervals only space the (exact) dues
            m = T[x]
    return 2 * m + 64


@K.inline
def _rel(v, t, lo):
    """v relative to t, or one marker for every v <= lo (old: constrains nothing any more)."""
    return v - t if v > lo else OLD


@K.hot
def old_bound(ch, t, clamp, T, RS):
    """Cycles at or before which a stored cycle is old: ``clamp`` before t and before every refresh due of the
    channel (a due refresh compares the banks' cycles with its due)."""
    lo = t - clamp
    if T[K.T_REFMODE] != 0:
        P, R = T[K.T_P], T[K.T_R]
        for r in range(ch * P * R, (ch + 1) * P * R):
            if RS[r, K.R_DUE] - clamp < lo:
                lo = RS[r, K.R_DUE] - clamp
    return lo


@K.inline
def signature(ch, k, t, r0, qn, nrq, nwq, mode, nwh, clamp, T, BS, RS, US, CS):
    """Cheap function of the canonical state at an ACT checkpoint (k: the ACT's bank): a filter before canon
    (equal canonical states give equal signatures: the data-bus cycle is either recent or old under both)."""
    P = T[K.T_P]
    s = qn + (nrq << 10) + (nwq << 20) + ((mode + 1) << 30) + (nwh << 33)
    s = s * _H1 + _rel(US[ch * P, K.U_DATA], t, t - clamp)
    s = s * _H2 + (CS[ch, K.C_ROWBUS] - t)
    if T[K.T_REFMODE] != 0:
        s = s * _H3 + (RS[ch * P * T[K.T_R], K.R_DUE] - t)
    return s * _H1 + (BS[k, K.B_ROW] - r0)


@K.hot
def canon(
    CV,
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
    harr,
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
):
    """Write the canonical state into CV; returns its length. CV[0] = old_bound - t, CV[12] = the oldest queued
    position - nxt (0 if none)."""
    P, R, G = T[K.T_P], T[K.T_R], T[K.T_G]
    lo = old_bound(ch, t, clamp, T, RS)
    CV[0] = lo - t
    CV[1] = qn
    CV[2] = nrq
    CV[3] = nwq
    CV[4] = mode
    CV[11] = nwh
    if horizon <= lo:  # old: only its comparison with the next arrival matters (recur doc)
        CV[5] = SENT
        CV[6] = 1 if harr <= horizon else 0
    else:
        CV[5] = horizon - t
        CV[6] = 0
    CV[7] = _rel(CS[ch, K.C_ROWBUS], t, lo)
    CV[8] = _rel(CS[ch, K.C_COLBUS], t, lo)
    CV[9] = _rel(CS[ch, K.C_DONE], t, lo)
    CV[10] = _rel(CS[ch, K.C_FIX], t, lo)
    CV[12] = 0
    n = 13
    for u in range(ch * P, ch * P + P):
        for c in range(K.N_U):
            CV[n] = _rel(US[u, c], t, lo)
            n += 1
    for r in range(ch * P * R, (ch + 1) * P * R):
        for c in (K.R_ACT, K.R_RD, K.R_WR):
            CV[n] = _rel(RS[r, c], t, lo)
            n += 1
        for q in range(4):  # the tFAW ring from its oldest entry (the ring index itself is a handle)
            CV[n] = _rel(RS[r, K.R_FAW0 + ((RS[r, K.R_FAWI] + q) & 3)], t, lo)
            n += 1
        CV[n] = 0
        CV[n + 1] = RS[r, K.R_PBNEXT]
        CV[n + 2] = RS[r, K.R_DUE] - t if T[K.T_REFMODE] != 0 else 0
        n += 3
    for g in range(ch * P * R * G, (ch + 1) * P * R * G):
        for c in range(K.N_G):
            CV[n] = _rel(GS[g, c], t, lo)
            n += 1
    cap = T[K.T_PAGECAP] if closed else 0
    for j in range(nbc):
        k = kbase + j
        row = BS[k, K.B_ROW]
        CV[n] = row - r0 if row >= 0 else SENT
        n += 1
        for c in (K.B_ACT, K.B_PRE, K.B_RD, K.B_WR, K.B_ACTT, K.B_MSB):
            CV[n] = _rel(BS[k, c], t, lo)
            n += 1
        na = BS[k, K.B_NACC]  # only read by the closed-page cap
        CV[n] = (na if na < cap else cap) if cap > 0 else 0
        CV[n + 1] = hp[k]
        CV[n + 2] = hpw[k]
        CV[n + 3] = KA[j]
        a = aslot[k]
        CV[n + 4] = spos[a] - nxt if a >= 0 else SENT
        CV[n + 5] = _rel(LA[j], t, lo)
        CV[n + 6] = _rel(LW[j], t, lo)
        n += 7
        for e in (j, nbc + j, 2 * nbc + j):
            if X[e] >= INF:
                CV[n] = SENT
                n += 1
            else:
                CV[n] = _rel(X[e], t, lo)
                CV[n + 1] = SUB[e] - (nxt << eb)
                CV[n + 2] = spos[SLOT[e]] - nxt
                CV[n + 3] = CLS[e]
                n += 4
        m0 = n
        n += 1
        s = bhead[k]
        while s >= 0:
            i = sreq[s]
            CV[n] = spos[s] - nxt
            if CV[n] < CV[12]:
                CV[12] = CV[n]
            CV[n + 1] = rowq[i] - r0
            CV[n + 2] = wq[i]
            CV[n + 3] = _rel(arr[i], t, lo)
            CV[n + 4] = sqc[s]
            CV[n + 5] = sout[s]
            n += 6
            s = snext[s]
        CV[m0] = (n - m0 - 1) // 6
    return n


@K.hot
def same(A, B, n):
    for x in range(n):
        if A[x] != B[x]:
            return False
    return True


@K.hot
def periodic_extent(kq, rowq, wq, arr, q0, na, dn, drow, dt, lo_a, horizon_old, end):
    """Largest L such that for every offset o < L the request at na + o + dn (< end) is the one at na + o with
    the row + drow and the arrival + da -- and so is every request from q0 (A's oldest queued position) on, so
    that each request served over a period is the previous period's shifted by (dn, da): the latency sum then
    grows by (dt - da) per request and period exactly. da is the same for all: da = dt (arrivals shift with the
    period; A's horizon recent), or 0 <= da < dt with the arrivals up to na + dn old at A (<= lo_a: they stay
    old; da > 0 only with a recent horizon, which every old arrival precedes). 0 if none holds."""
    da = arr[q0 + dn] - arr[q0]
    if da == dt:
        ok = not horizon_old
    else:
        ok = 0 <= da < dt and arr[na + dn] <= lo_a and (da == 0 or not horizon_old)
    if not ok:
        return 0
    x = q0
    while x + dn < end:
        y = x + dn
        if kq[y] != kq[x] or wq[y] != wq[x] or rowq[y] - rowq[x] != drow or arr[y] - arr[x] != da:
            break
        x += 1
    return x - na if x > na else 0


@K.hot
def jump(m, dt, dn, drow, ch, kbase, nbc, eb, T, BS, GS, RS, US, CS, ST, dST, bhead, snext, sreq, spos, X, SUB, LA, LW):
    """Advance channel ch's state by m periods of (dt cycles, dn positions, drow rows): see the module doc."""
    P, R, G = T[K.T_P], T[K.T_R], T[K.T_G]
    mt = m * dt
    for k in range(kbase, kbase + nbc):
        for c in (K.B_ACT, K.B_PRE, K.B_RD, K.B_WR, K.B_ACTT, K.B_MSB):
            BS[k, c] += mt
        if BS[k, K.B_ROW] >= 0:
            BS[k, K.B_ROW] += m * drow
        s = bhead[k]
        while s >= 0:
            spos[s] += m * dn
            sreq[s] = spos[s]  # requests stored in position order (flat.py)
            s = snext[s]
    for g in range(ch * P * R * G, (ch + 1) * P * R * G):
        for c in range(K.N_G):
            GS[g, c] += mt
    for r in range(ch * P * R, (ch + 1) * P * R):
        for c in (K.R_ACT, K.R_RD, K.R_WR, K.R_FAW0, K.R_FAW0 + 1, K.R_FAW0 + 2, K.R_FAW0 + 3, K.R_DUE):
            RS[r, c] += mt
    for u in range(ch * P, ch * P + P):
        for c in range(K.N_U):
            US[u, c] += mt
    for c in range(K.N_C):
        CS[ch, c] += mt
    for c in range(ST.shape[1]):
        ST[ch, c] += m * dST[c]
    for e in range(X.shape[0]):
        if X[e] < INF:
            X[e] += mt
            SUB[e] += (m * dn) << eb
    for j in range(nbc):
        LA[j] += mt
        LW[j] += mt
