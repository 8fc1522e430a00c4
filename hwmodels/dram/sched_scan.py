"""Queue-scan FR-FCFS request scheduler (Numba): the plain formulation the faster schedulers are tested against.

For every command it scans the whole queue of the channel (O(queue) per command) for the command that can issue
earliest; ties go to row hits, then to the oldest (controller.py's module doc gives the policy). The heap
(sched_heap.py), flat (sched_flat.py) and two-level queue (sched_cmdqueue.py) schedulers keep its selection order
(differential tests in tests/test_dram_sched.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram.sched_heap import drain_mode, gap_refresh, in_refresh, room

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these


@njit(cache=True)
def _emit(E, ne, op, flags, k, row, arrival, T):
    if ne >= E.shape[0]:
        return ne + 1
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
    return ne + 1


@njit(cache=True)
def ctrl_kernel_scan(order, starts, chans, kq, rowq, wq, arr, qcap, closed, T, BS, GS, RS, US, CS, ST, LAT, E):
    """Reference FR-FCFS: scans the whole queue for every command (O(queue) per command). Over each channel
    in ``chans``; returns the number of emitted commands (E rows). sched.ctrl_kernel_fast gives the same
    order (tests/test_dram_sched.py)."""
    NB = T[K.T_G] * T[K.T_B]
    hp = np.zeros(BS.shape[0], np.int64)  # queued hits to the open row, per bank
    drain = T[K.T_WQ] > 0  # read + write queues, write drain (rules.py)
    eh = np.zeros(BS.shape[0], np.int64)  # drain: queued hits the current mode may serve, per bank
    areq = np.full(BS.shape[0], -1, np.int64)  # drain: the request whose ACT opened the bank's row
    nbc = BS.shape[0] // T[K.T_NCH] if T[K.T_NCH] > 0 else BS.shape[0]
    scap = qcap + T[K.T_WQ] + (nbc if drain else 0)  # drain: reads + writes + the active buffer
    q = np.empty(scap, np.int64)
    qc = np.empty(scap, np.int64)  # classification per slot: -1 none yet
    qo = np.zeros(scap, np.int64)  # drain: 1 = in the active buffer (out of its read/write queue)
    ne = 0
    INF = 1 << 62
    for ci in range(chans.shape[0]):
        ch = chans[ci]
        nxt = starts[ch]
        end = starts[ch + 1]
        qn = 0
        nrq = 0
        nwq = 0
        mode = 0 if drain else -1
        horizon = CS[ch, K.C_LAST]
        lat = 0.0
        while nxt < end or qn > 0:
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
                q[qn] = i
                qc[qn] = -1
                qo[qn] = 0
                qn += 1
                nxt += 1
                if BS[kq[i], K.B_ROW] == rowq[i]:
                    hp[kq[i]] += 1
            if drain:  # the mode's eligible requests: its class, plus the one whose ACT opened a row
                mode = drain_mode(mode, nrq, nwq, T)
                for e in range(qn):
                    eh[kq[q[e]]] = 0
                for e in range(qn):
                    i = q[e]
                    if BS[kq[i], K.B_ROW] == rowq[i] and (wq[i] == mode or areq[kq[i]] == i):
                        eh[kq[i]] += 1
            best = -1
            bt = INF
            bkind = 3
            for e in range(qn):
                i = q[e]
                k = kq[i]
                if drain and wq[i] != mode and areq[k] != i:
                    continue
                cur = BS[k, K.B_ROW]
                if cur == rowq[i]:
                    kind = 0
                    t = K.earliest_col(k, wq[i], T, BS, GS, RS, US, CS)
                elif cur < 0:
                    if areq[k] >= 0 and areq[k] != i:  # a refresh closed the row of the bank's active request:
                        continue  # its ACT again (the active buffer first)
                    kind = 1
                    t = K.earliest_act(k, T, BS, GS, RS, CS)
                else:
                    if T[K.T_PREHOLD] == 1:
                        if (eh[k] if drain else hp[k]) > 0:
                            continue
                    elif areq[k] >= 0 and rowq[areq[k]] == cur:  # the row's active request is pending
                        continue
                    kind = 2
                    t = K.earliest_pre(k, T, BS, CS)
                if arr[i] > t:
                    t = arr[i]
                if t < bt or (t == bt and kind == 0 and bkind != 0):
                    best = e
                    bt = t
                    bkind = kind
            if nxt < end and room(order[nxt], qn, nrq, nwq, qcap, scap, wq, T) and arr[order[nxt]] <= bt:
                horizon = bt
                continue
            i = q[best]
            k = kq[i]
            r = k // NB
            due = K.due_of(r, T, RS)
            if bt >= due and T[K.T_REFACTIVE] == 1:  # the refresh's banks with a pending active request: its
                ba = -1  # column command first (the earliest, then the oldest)
                ta = INF
                for e in range(qn):
                    j = q[e]
                    kk = kq[j]
                    if kk // NB == r and areq[kk] == j and BS[kk, K.B_ROW] == rowq[j] and in_refresh(kk, r, T, RS):
                        t = K.earliest_col(kk, wq[j], T, BS, GS, RS, US, CS)
                        if arr[j] > t:
                            t = arr[j]
                        if t < ta:
                            ba = e
                            ta = t
                if ba >= 0:
                    best = ba
                    bt = ta
                    bkind = 0
                    i = q[best]
                    k = kq[i]
                    due = INF
            if bt >= due:
                ng = 0
                if bt - due >= K.ref_period(T):  # at least two refreshes due: an idle gap
                    ng, ne = gap_refresh(r, arr[q[0]], T, BS, RS, ST, ch, E, ne)  # q[0]: the oldest queued request
                if ng > 0:  # idle rank: its refreshes in closed form (banks closed: no queued hits)
                    continue
                if T[K.T_REFMODE] == 2:
                    idx = RS[r, K.R_PBNEXT]
                    ne = _emit(E, ne, K.REFPB, 0, r * NB + idx, 0, due, T)
                    stride = NB // T[K.T_PBG]
                    for j in range(T[K.T_PBG]):
                        hp[r * NB + idx + j * stride] = 0
                else:
                    ne = _emit(E, ne, K.REF, 0, r * NB, 0, due, T)
                    for j in range(NB):
                        hp[r * NB + j] = 0
                K.auto_refresh(r, T, BS, RS, CS, ST, ch)
                continue
            if bkind == 2:
                K.commit_pre(k, bt, T, BS, CS, ST)
                hp[k] = 0
                areq[k] = -1
                if qc[best] < 0:
                    qc[best] = 2
                    ST[ch, K.S_CONF] += 1
                ne = _emit(E, ne, K.PRE, 0, k, 0, arr[i], T)
            elif bkind == 1:
                K.commit_act(k, rowq[i], bt, T, BS, GS, RS, CS, ST)
                areq[k] = i
                if drain and qo[best] == 0:  # to the active buffer: leaves its read/write queue
                    qo[best] = 1
                    if wq[i] == 1:
                        nwq -= 1
                    else:
                        nrq -= 1
                c = 0
                for e in range(qn):
                    j = q[e]
                    if kq[j] == k and rowq[j] == rowq[i]:
                        c += 1
                hp[k] = c
                if qc[best] < 0:
                    qc[best] = 1
                    ST[ch, K.S_MISS] += 1
                ne = _emit(E, ne, K.ACT, 0, k, rowq[i], arr[i], T)
            else:
                K.commit_col(k, wq[i], bt, 1, T, BS, GS, RS, US, CS, ST)
                hp[k] -= 1
                if qo[best] == 0:
                    if wq[i] == 1:
                        nwq -= 1
                    else:
                        nrq -= 1
                if areq[k] == i:
                    areq[k] = -1
                if qc[best] < 0:
                    ST[ch, K.S_HIT] += 1
                fl = 0
                if closed and (hp[k] == 0 if T[K.T_PAGECAP] == 0 else BS[k, K.B_NACC] >= T[K.T_PAGECAP]):
                    K.auto_pre(k, T, BS, ST, ch)
                    fl = K.F_AP
                    hp[k] = 0  # the row's queued hits (cap rule) are misses now
                ne = _emit(E, ne, K.WR if wq[i] == 1 else K.RD, fl, k, rowq[i], arr[i], T)
                done = bt + (T[K.T_CWL] if wq[i] == 1 else T[K.T_CL]) + T[K.T_BL]
                lat += done - arr[i]
                for e in range(best, qn - 1):
                    q[e] = q[e + 1]
                    qc[e] = qc[e + 1]
                    qo[e] = qo[e + 1]
                qn -= 1
        LAT[ch] = lat
    return ne
