"""Two-level request queues of DRAMsim3's controller (rules.py ``cmd_queue_entries`` > 0: the ``dramsim3`` preset).

DRAMsim3 @ 2981759 holds a request in a transaction queue only until it moves into the command queue of its
bank (or rank), and schedules commands from the command queues only; per cycle (src/controller.cc:65-149):

1. refresh (src/refresh.cc): from its due a rank's command queues wait, and the refresh takes the cycle's command
   for a PRE of each open bank, then the REF (_refresh_step; per-bank refresh: kernel.auto_refresh, out of band);
2. one command: the command queues in round robin, starting after the queue that issued last
   (command_queue.cc:36-54, 138-144); in a queue the first entry, in queue order, whose next command (ACT,
   PRE or the column command) is legal now (command_queue.cc:178-196, channel_state.cc:76-115). A PRE only
   for the oldest entry of its bank, and only if no queued entry hits the open row or the row already served
   ``ROW_HIT_LIMIT`` column commands (command_queue.cc:77-110 ArbitratePrecharge). HBM (separate row and
   column buses): a second command in the same cycle if one is a column command and the other is not
   (controller.cc:84-92, enable_hbm_dual_cmd);
3. one transaction moves into its command queue: the oldest in the read queue (or, while writes drain, the
   write buffer) whose command queue has room (controller.cc:207-226). Writes drain when the write buffer is
   full or holds more than ``DRAIN_IDLE`` writes while every command queue is empty, for as many writes as it
   held then (controller.cc:199-205); here also at the end of the stream (DRAMsim3 would keep the last few);
4. the front end offers one request per cycle, in order; it waits while the read queue / write buffer of its
   kind is full (cpu.cc:73-90, controller.cc:151-159).

Closed page: every column command auto-precharges (controller.cc:271-277 READ_PRECHARGE / WRITE_PRECHARGE).
Not modelled: merging of same-address writes and reads served from the write buffer (controller.cc:166-192),
the write-after-read hold to one address (command_queue.cc:218-230): the cross-check streams do not repeat an
address within a queue's reach.
The bank timing is kernel.py's (the same earliest-cycle rules as every other scheduler).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram.sched_heap import _emit

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these

INF = 1 << 62
ROW_HIT_LIMIT = 4  # column commands to an open row after which a waiting miss may close it (command_queue.cc:102-104)
DRAIN_IDLE = 8  # writes that start a drain when every command queue is empty (controller.cc:202)
KIND_COL, KIND_ACT, KIND_PRE = 0, 1, 2


@K.hot
def _pick(q, n, CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS, rtrs, drank, ppd, lastpre):
    """Queue ``q`` (n entries) at cycle t: (position of the first entry whose command is legal at t, or -1; its
    kind; the earliest cycle of any entry's command the arbitration allows). ``rtrs``: data-bus cycles added when
    the last burst of the pseudo-channel (``drank[u]``: its rank, -1 none; ``drank[U + u]`` 1 if a write) came
    from another rank, unless both are writes (DRAMsim3 @ 2981759 timing.cc:15-30: read_to_read_o,
    read_to_write_o, write_to_read_o add tRTRS, write_to_write_o does not). ``ppd``: PRE -> PRE within a rank
    (``lastpre``: last PRE per rank; DRAMsim3 timing.cc:211-221 tPPD for LPDDR4 / GDDR)."""
    best = INF
    for j in range(n):
        i = CQ[q, j]
        k = kq[i]
        cur = BS[k, K.B_ROW]
        if cur < 0:
            e = K.earliest_act(k, T, BS, GS, RS, CS)
            kind = KIND_ACT
        elif cur == rowq[i]:
            e = K.earliest_col(k, wq[i], T, BS, GS, RS, US, CS)
            u = BS[k, K.B_U]
            if (
                rtrs > 0
                and drank[u] >= 0
                and drank[u] != BS[k, K.B_R]
                and not (drank[u + US.shape[0]] == 1 and wq[i] == 1)
            ):  # rank switch
                d = US[u, K.U_DATA] - (T[K.T_CWL] if wq[i] == 1 else T[K.T_CL]) + rtrs
                if d > e:
                    e = d
            kind = KIND_COL
        else:  # PRE: only for the bank's oldest entry, and no pending hit unless the row reached the limit
            ok = True
            for jj in range(j):
                if kq[CQ[q, jj]] == k:
                    ok = False
                    break
            if ok and BS[k, K.B_NACC] < ROW_HIT_LIMIT:
                for jj in range(j + 1, n):
                    ii = CQ[q, jj]
                    if kq[ii] == k and rowq[ii] == cur:
                        ok = False
                        break
            if not ok:
                continue
            e = _pre_e(k, T, BS, CS, ppd, lastpre)
            kind = KIND_PRE
        if e <= t:
            return j, kind, e
        if e < best:
            best = e
    return -1, 0, best


@K.inline
def _pre_e(k, T, BS, CS, ppd, lastpre):
    """The pickers' earliest cycle of a PRE to bank k: its own timing and ``ppd`` after its rank's last PRE."""
    e = K.earliest_pre(k, T, BS, CS)
    if lastpre[BS[k, K.B_R]] + ppd > e:
        e = lastpre[BS[k, K.B_R]] + ppd
    return e


@K.hot
def _col_e(k, w, T, BS, GS, RS, US, CS, rtrs, drank):
    """_pick's earliest cycle of the column command (w: 1 write, 0 read) to the open row of bank k."""
    e = K.earliest_col(k, w, T, BS, GS, RS, US, CS)
    u = BS[k, K.B_U]
    if rtrs > 0 and drank[u] >= 0 and drank[u] != BS[k, K.B_R] and not (drank[u + US.shape[0]] == 1 and w == 1):
        d = US[u, K.U_DATA] - (T[K.T_CWL] if w == 1 else T[K.T_CL]) + rtrs
        if d > e:
            e = d
    return e


@K.hot
def _pick_bank(q, n, CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS, rtrs, drank, ppd, lastpre):
    """_pick for a per-bank command queue (every entry the same bank): the same result, with each distinct
    earliest cycle (ACT; PRE; RD; WR) computed once instead of once per entry. Only the queue's first entry can
    be the bank's oldest (a PRE)."""
    k = kq[CQ[q, 0]]
    cur = BS[k, K.B_ROW]
    if cur < 0:  # every entry's command is the same ACT
        e = K.earliest_act(k, T, BS, GS, RS, CS)
        if e <= t:
            return 0, KIND_ACT, e
        return -1, 0, e
    best = INF
    er = INF
    ew = INF
    have_r = False
    have_w = False
    for j in range(n):
        i = CQ[q, j]
        if rowq[i] == cur:
            if wq[i] == 1:
                if not have_w:
                    ew = _col_e(k, 1, T, BS, GS, RS, US, CS, rtrs, drank)
                    have_w = True
                e = ew
            else:
                if not have_r:
                    er = _col_e(k, 0, T, BS, GS, RS, US, CS, rtrs, drank)
                    have_r = True
                e = er
            kind = KIND_COL
        else:
            if j > 0:
                continue  # a PRE only for the bank's oldest entry
            if BS[k, K.B_NACC] < ROW_HIT_LIMIT:
                hit = False
                for jj in range(1, n):
                    if rowq[CQ[q, jj]] == cur:
                        hit = True
                        break
                if hit:
                    continue
            e = _pre_e(k, T, BS, CS, ppd, lastpre)
            kind = KIND_PRE
        if e <= t:
            return j, kind, e
        if e < best:
            best = e
    return -1, 0, best


@K.hot
def _refresh_step(r0, rpc, t, NB, T, BS, RS, CS, ST, ch, E, ne, ppd, lastpre):
    """All-bank refresh as DRAMsim3 sequences it (controller.cc:71-78, command_queue.cc:56-75, channel_state.cc:78-
    101): from its due a rank's queues wait; each cycle the refresh takes the command slot for one PRE (the first
    open bank, in bank order, whose PRE is legal) or, all banks closed and ready, the REF. Returns (emitted count,
    whether a command issued, the next cycle the refresh can act at)."""
    te = INF
    for r in range(r0, r0 + rpc):
        due = RS[r, K.R_DUE]
        if due > t:
            if due < te:
                te = due
            continue
        ready = t
        pre = -1
        for k in range(r * NB, (r + 1) * NB):
            if BS[k, K.B_ROW] >= 0:
                e = K.earliest_pre(k, T, BS, CS)
                if lastpre[r] + ppd > e:
                    e = lastpre[r] + ppd
                if e <= t:
                    pre = k
                    break
                if e < te:
                    te = e
                ready = INF
            elif BS[k, K.B_ACT] > ready:
                ready = BS[k, K.B_ACT]
        if pre >= 0:
            K.commit_pre(pre, t, T, BS, CS, ST)
            lastpre[r] = t
            if ne < E.shape[0]:
                _emit(E, ne, K.PRE, 0, pre, 0, t, T)
            return ne + 1, True, te
        if ready < INF:
            if CS[ch, K.C_ROWBUS] > ready:
                ready = CS[ch, K.C_ROWBUS]
            if ready <= t:
                K.refresh_rank(r, t, -1, T, BS, CS, ST, ch)
                RS[r, K.R_DUE] = due + T[K.T_REFI]
                CS[ch, K.C_LAST] = t
                CS[ch, K.C_ROWBUS] = t + T[K.T_ROWCMD]
                if ne < E.shape[0]:
                    _emit(E, ne, K.REF, 0, r * NB, 0, t, T)
                return ne + 1, True, te
            if ready < te:
                te = ready
    return ne, False, te


@njit(cache=True)
def ctrl_kernel_twolevel(
    order,
    starts,
    chans,
    kq,
    rowq,
    wq,
    arr,
    rcap,
    wcap,
    depth,
    per_rank,
    closed,
    rtrs,
    ppd,
    T,
    BS,
    GS,
    RS,
    US,
    CS,
    ST,
    LAT,
    E,
):
    """DRAMsim3's controller (module docstring) over each channel in ``chans``: read queue ``rcap`` and write
    buffer ``wcap`` entries, command queues of ``depth`` per bank (``per_rank``: per rank), rank switch ``rtrs``
    and PRE -> PRE ``ppd`` (spec timing.nRTRS, nPPD; _pick). Same contract as
    sched_scan.ctrl_kernel_scan (statistics into ST / CS / LAT, E rows emitted with the issue cycle as their
    arrival, REF records at their due); returns the number of emitted commands."""
    nbank = BS.shape[0]
    nbc = nbank // T[K.T_NCH] if T[K.T_NCH] > 0 else nbank
    NB = T[K.T_G] * T[K.T_B]
    rpc = T[K.T_P] * T[K.T_R]
    nq = rpc if per_rank else nbc
    CQ = np.zeros((nq, depth), np.int64)  # command queues: request ids, oldest first
    CF = np.zeros((nq, depth), np.int64)  # per entry: -1 unclassified, else its hit / miss / conflict class
    cqn = np.zeros(nq, np.int64)
    # per queue: a cycle before which none of its commands can be legal (0: unknown). Valid while the queue's
    # entries and their banks do not change: other banks' commands only push earliest cycles later (kernel.py's
    # last-command times), so _pick is skipped for a queue whose bound lies ahead (cycles unchanged: golden tests)
    LB = np.zeros(nq, np.int64)
    RQ = np.zeros(max(rcap, 1), np.int64)  # read queue (transaction queue), oldest first
    WB = np.zeros(max(wcap, 1), np.int64)  # write buffer
    dual = T[K.T_COLBUS] != K.C_ROWBUS  # separate row / column buses (HBM): dual issue
    drank = np.full(2 * US.shape[0], -1, np.int64)  # per pseudo-channel: rank of the last burst; then: a write
    lastpre = np.full(RS.shape[0], K.NEG, np.int64)  # per rank: cycle of the last PRE
    ecap = E.shape[0]
    ne = 0
    for ci in range(chans.shape[0]):
        ch = chans[ci]
        nxt = starts[ch]
        end = starts[ch + 1]
        r0 = ch * rpc
        k0 = ch * nbc
        cqn[:] = 0
        LB[:] = 0
        nrq = 0
        nwb = 0
        incq = 0
        draining = 0
        qidx = 0
        lat = 0.0
        t = arr[order[nxt]] if nxt < end else 0
        while nxt < end or nrq + nwb + incq > 0:
            cb = T[K.T_COLBUS]
            bus_r = CS[ch, K.C_ROWBUS]  # command buses before this cycle's first command (dual issue below)
            bus_c = CS[ch, cb]
            # ---- 1. refresh (per-bank refresh: kernel.auto_refresh, out of band)
            nxt_t = INF
            refcmd = False
            if T[K.T_REFMODE] == 2:
                for r in range(r0, r0 + rpc):
                    while RS[r, K.R_DUE] <= t:
                        idx = RS[r, K.R_PBNEXT]
                        if ne < ecap:
                            _emit(E, ne, K.REFPB, 0, r * NB + idx, 0, RS[r, K.R_DUE], T)
                        ne += 1
                        K.auto_refresh(r, T, BS, RS, CS, ST, ch)
                        LB[:] = 0
            elif T[K.T_REFMODE] == 1:
                ne, refcmd, te = _refresh_step(r0, rpc, t, NB, T, BS, RS, CS, ST, ch, E, ne, ppd, lastpre)
                if refcmd:  # a refresh PRE / REF changes banks of some queues
                    LB[:] = 0
                if te < nxt_t:
                    nxt_t = te
            # ---- 2. at most one command (two on HBM: a column command and a row command)
            progress = refcmd
            first_col = 0 if refcmd else -1
            for npass in range(2 if dual else 1):
                if refcmd and npass == 0:
                    continue  # the refresh took the cycle's first command
                found = False
                if npass == 1:  # DRAMsim3 has no command-bus state: the second pick sees the bus of the first
                    # command free (a same-kind pick then only moves the round robin)
                    bus_r, CS[ch, K.C_ROWBUS] = CS[ch, K.C_ROWBUS], bus_r
                    bus_c, CS[ch, cb] = CS[ch, cb], bus_c
                col1 = first_col
                for jq in range(1, nq + 1):
                    q = (qidx + jq) % nq
                    if cqn[q] == 0:
                        continue
                    if LB[q] > t:
                        if LB[q] < nxt_t:
                            nxt_t = LB[q]
                        continue
                    if T[K.T_REFMODE] == 1 and RS[r0 + (q if per_rank else q // NB), K.R_DUE] <= t:
                        continue  # its rank waits for its refresh (command_queue.cc:40-43)
                    if per_rank:
                        j, kind, e = _pick(
                            q, cqn[q], CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS, rtrs, drank, ppd, lastpre
                        )
                    else:
                        j, kind, e = _pick_bank(
                            q, cqn[q], CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS, rtrs, drank, ppd, lastpre
                        )
                    if j < 0:
                        LB[q] = e
                        if e < nxt_t:
                            nxt_t = e
                        continue
                    found = True
                    qidx = q
                    if first_col >= 0 and (kind == KIND_COL) == (first_col == 1):
                        break  # DRAMsim3 issues the second only if it is of the other kind
                    i = CQ[q, j]
                    k = kq[i]
                    LB[q] = 0
                    if kind == KIND_PRE:
                        K.commit_pre(k, t, T, BS, CS, ST)
                        lastpre[BS[k, K.B_R]] = t
                        if CF[q, j] < 0:
                            CF[q, j] = 2
                            ST[ch, K.S_CONF] += 1
                        if ne < ecap:
                            _emit(E, ne, K.PRE, 0, k, 0, t, T)
                    elif kind == KIND_ACT:
                        K.commit_act(k, rowq[i], t, T, BS, GS, RS, CS, ST)
                        if CF[q, j] < 0:
                            CF[q, j] = 1
                            ST[ch, K.S_MISS] += 1
                        if ne < ecap:
                            _emit(E, ne, K.ACT, 0, k, rowq[i], t, T)
                    else:
                        w = wq[i]
                        K.commit_col(k, w, t, 1, T, BS, GS, RS, US, CS, ST)
                        drank[BS[k, K.B_U]] = BS[k, K.B_R]
                        drank[BS[k, K.B_U] + US.shape[0]] = w
                        if CF[q, j] < 0:
                            ST[ch, K.S_HIT] += 1
                        fl = 0
                        if closed:
                            K.auto_pre(k, T, BS, ST, ch)
                            fl = K.F_AP
                        if ne < ecap:
                            _emit(E, ne, K.WR if w == 1 else K.RD, fl, k, rowq[i], t, T)
                        lat += t + (T[K.T_CWL] if w == 1 else T[K.T_CL]) + T[K.T_BL] - arr[i]
                        for jj in range(j, cqn[q] - 1):
                            CQ[q, jj] = CQ[q, jj + 1]
                            CF[q, jj] = CF[q, jj + 1]
                        cqn[q] -= 1
                        incq -= 1
                    ne += 1
                    progress = True
                    first_col = 1 if kind == KIND_COL else 0
                    break
                if npass == 1:  # the buses as the issued commands left them
                    if col1 == 1:  # the first command's bus
                        CS[ch, cb] = bus_c
                    else:
                        CS[ch, K.C_ROWBUS] = bus_r
                if not found:
                    break
            # ---- 3. one transaction into its command queue
            idle = incq == 0
            if (
                draining == 0
                and nwb > 0
                and (nwb >= wcap or (nwb > DRAIN_IDLE and idle) or (idle and nrq == 0 and nxt >= end))
            ):
                draining = nwb
            src_w = draining > 0
            m = nwb if src_w else nrq
            for x in range(m):
                i = WB[x] if src_w else RQ[x]
                q = (kq[i] - k0) // NB if per_rank else kq[i] - k0
                if cqn[q] < depth:
                    LB[q] = 0
                    CQ[q, cqn[q]] = i
                    CF[q, cqn[q]] = -1
                    cqn[q] += 1
                    incq += 1
                    if src_w:
                        draining -= 1
                        for y in range(x, nwb - 1):
                            WB[y] = WB[y + 1]
                        nwb -= 1
                    else:
                        for y in range(x, nrq - 1):
                            RQ[y] = RQ[y + 1]
                        nrq -= 1
                    progress = True
                    break
            # ---- 4. the front end offers the next request
            if nxt < end:
                i = order[nxt]
                if arr[i] <= t:
                    if wq[i] == 1 and nwb < wcap:
                        WB[nwb] = i
                        nwb += 1
                        nxt += 1
                        progress = True
                    elif wq[i] == 0 and nrq < rcap:
                        RQ[nrq] = i
                        nrq += 1
                        nxt += 1
                        progress = True
                elif arr[i] < nxt_t and (nwb < wcap if wq[i] == 1 else nrq < rcap):
                    nxt_t = arr[i]
            if progress or nxt_t <= t:
                t += 1
            elif nxt_t < INF:
                t = nxt_t
            else:
                break  # nothing can ever issue (not reached: every non-empty queue has an allowed command)
        LAT[ch] = lat
    return ne
