"""Two-level request queues of DRAMsim3's controller (rules.py ``cmd_queue_entries`` > 0: the ``dramsim3`` preset).

DRAMsim3 @ 2981759 holds a request in a transaction queue only until it moves into the command queue of its
bank (or rank), and schedules commands from the command queues only; per cycle (src/controller.cc:65-149):

1. refresh (src/refresh.cc, kernel.auto_refresh here: a due rank closes its banks and refreshes; its queues wait);
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
address within a queue's reach; refresh PRE/REF take no command slot (kernel.refresh_rank).
The bank timing is kernel.py's (the same earliest-cycle rules as every other scheduler).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram.sched import _emit

INF = 1 << 62
ROW_HIT_LIMIT = 4  # column commands to an open row after which a waiting miss may close it (command_queue.cc:102-104)
DRAIN_IDLE = 8     # writes that start a drain when every command queue is empty (controller.cc:202)
KIND_COL, KIND_ACT, KIND_PRE = 0, 1, 2


@K.hot
def _pick(q, n, CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS):
    """Queue ``q`` (n entries) at cycle t: (position of the first entry whose command is legal at t, or -1; its
    kind; the earliest cycle of any entry's command the arbitration allows)."""
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
            e = K.earliest_pre(k, T, BS, CS)
            kind = KIND_PRE
        if e <= t:
            return j, kind, e
        if e < best:
            best = e
    return -1, 0, best


@njit(cache=True)
def ctrl_kernel_twolevel(order, starts, chans, kq, rowq, wq, arr, rcap, wcap, depth, per_rank, closed, T, BS, GS,
                         RS, US, CS, ST, LAT, E):
    """DRAMsim3's controller (module docstring) over each channel in ``chans``: read queue ``rcap`` and write
    buffer ``wcap`` entries, command queues of ``depth`` per bank (``per_rank``: per rank). Same contract as
    controller.ctrl_kernel_scan (statistics into ST / CS / LAT, E rows emitted with the issue cycle as their
    arrival, REF records at their due); returns the number of emitted commands."""
    nbank = BS.shape[0]
    nbc = nbank // T[K.T_NCH] if T[K.T_NCH] > 0 else nbank
    NB = T[K.T_G] * T[K.T_B]
    rpc = T[K.T_P] * T[K.T_R]
    nq = rpc if per_rank else nbc
    CQ = np.zeros((nq, depth), np.int64)   # command queues: request ids, oldest first
    CF = np.zeros((nq, depth), np.int64)   # per entry: -1 unclassified, else its hit / miss / conflict class
    cqn = np.zeros(nq, np.int64)
    RQ = np.zeros(max(rcap, 1), np.int64)  # read queue (transaction queue), oldest first
    WB = np.zeros(max(wcap, 1), np.int64)  # write buffer
    dual = T[K.T_COLBUS] != K.C_ROWBUS    # separate row / column buses (HBM): dual issue
    ecap = E.shape[0]
    ne = 0
    for ci in range(chans.shape[0]):
        ch = chans[ci]
        nxt = starts[ch]
        end = starts[ch + 1]
        r0 = ch * rpc
        k0 = ch * nbc
        cqn[:] = 0
        nrq = 0
        nwb = 0
        incq = 0
        draining = 0
        qidx = 0
        lat = 0.0
        t = arr[order[nxt]] if nxt < end else 0
        while nxt < end or nrq + nwb + incq > 0:
            # ---- 1. refresh every rank that is due
            if T[K.T_REFMODE] != 0:
                for r in range(r0, r0 + rpc):
                    while RS[r, K.R_DUE] <= t:
                        due = RS[r, K.R_DUE]
                        if T[K.T_REFMODE] == 2:
                            idx = RS[r, K.R_PBNEXT]
                            if ne < ecap:
                                _emit(E, ne, K.REFPB, 0, r * NB + idx, 0, due, T)
                        elif ne < ecap:
                            _emit(E, ne, K.REF, 0, r * NB, 0, due, T)
                        ne += 1
                        K.auto_refresh(r, T, BS, RS, CS, ST, ch)
            # ---- 2. at most one command (two on HBM: a column command and a row command)
            progress = False
            nxt_t = INF
            first_col = -1
            cb = T[K.T_COLBUS]
            bus_r = CS[ch, K.C_ROWBUS]
            bus_c = CS[ch, cb]
            for npass in range(2 if dual else 1):
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
                    j, kind, e = _pick(q, cqn[q], CQ, t, kq, rowq, wq, T, BS, GS, RS, US, CS)
                    if j < 0:
                        if e < nxt_t:
                            nxt_t = e
                        continue
                    found = True
                    qidx = q
                    if first_col >= 0 and (kind == KIND_COL) == (first_col == 1):
                        break  # DRAMsim3 issues the second only if it is of the other kind
                    i = CQ[q, j]
                    k = kq[i]
                    if kind == KIND_PRE:
                        K.commit_pre(k, t, T, BS, CS, ST)
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
            if draining == 0 and nwb > 0 and (nwb >= wcap or (nwb > DRAIN_IDLE and idle) or (idle and nrq == 0 and nxt >= end)):
                draining = nwb
            src_w = draining > 0
            m = nwb if src_w else nrq
            for x in range(m):
                i = WB[x] if src_w else RQ[x]
                q = (kq[i] - k0) // NB if per_rank else kq[i] - k0
                if cqn[q] < depth:
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
