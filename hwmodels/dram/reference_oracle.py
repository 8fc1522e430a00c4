"""Slow plain-Python reference engine with the same rules as kernel.py, for differential tests only.

Formulated differently on purpose: no running per-bank maxima, no closed-form bursts. Every issued
command is appended to a history; the earliest cycle of a new command is the maximum, over all earlier
history events it relates to (same bank / bank group / rank / pseudo-channel), of event time plus the
minimum distance of the rule table below, plus tFAW over the last four ACTs, the in-order rule and the
command buses. Column records are walked one burst at a time.

Rule table (earlier event -> later command: distance), CK cycles:
  ACT(bank)      -> ACT same bank nRC; ACT same BG nRRD_L; ACT same rank nRRD_S (ACT/ACTBG only)
                 -> PRE nRAS; RD nRCDRD; WR nRCDWR; MAC* nRCDMAC (latest ACT)
  PRE(bank)      -> ACT nRP
  REF(bank)      -> ACT nRFC / nRFCpb
  RD             -> RD/MACSB/MACBG same BG nCCD_L, same rank nCCD_S; WR same rank nRTW; PRE nRTP;
                    RD/WR same pseudo-channel: data end - nCL / - nCWL
  WR             -> WR same BG nCCD_L, same rank nCCD_S; RD-like same BG end+nWTR_L, rank end+nWTR_S;
                    PRE end + nWR
  MACSB          -> MACSB same bank nCCDSB; RD-like BG nCCD_L / rank nCCD_S; PRE nRTP
  MACBG          -> RD-like BG nCCD_L / rank nCCD_S; PRE nRTP
  MACAB          -> MACAB same pseudo-channel nCCDAB; PRE nRTP
"""

from __future__ import annotations

import numpy as np

from attnsim.hwmodels.dram import kernel as K

INF = 1 << 62


class Ev:
    __slots__ = ("t", "kind", "banks", "bgs", "ranks", "pcs", "end", "rfc")

    def __init__(self, t, kind, banks=(), bgs=(), ranks=(), pcs=(), end=0, rfc=0):
        self.t, self.kind, self.end, self.rfc = t, kind, end, rfc
        self.banks, self.bgs, self.ranks, self.pcs = frozenset(banks), frozenset(bgs), frozenset(ranks), frozenset(pcs)


class RefEngine:
    def __init__(self, T, n_ch):
        self.T = [int(x) for x in T]
        T = self.T
        self.P, self.R, self.G, self.B = T[K.T_P], T[K.T_R], T[K.T_G], T[K.T_B]
        self.NB = self.G * self.B
        self.H = []  # history of events
        self.row = {}  # bank -> open row
        self.last = [0] * n_ch
        self.rowbus = [0] * n_ch
        self.colbus = [0] * n_ch
        self.done = [0] * n_ch
        self.fix = [0] * n_ch
        self.buf = {}
        mode = T[K.T_REFMODE]
        first = T[K.T_REFIPB] if mode == 2 else T[K.T_REFI]
        self.due = {}
        self.first_due = first
        self.pbnext = {}
        self.st = np.zeros((n_ch, K.N_S), np.int64)

    # ---- index helpers
    def g_of(self, k):
        return k // self.B

    def r_of(self, k):
        return k // self.NB

    def u_of(self, k):
        return k // (self.NB * self.R)

    def ch_of_r(self, r):
        return r // (self.R * self.P)

    def get_due(self, r):
        if self.T[K.T_REFMODE] == 0:
            return INF
        return self.due.get(r, int(K.first_due(r, self.T)))

    def mx(self, *vals):
        m = -INF
        for v in vals:
            if v > m:
                m = v
        return m

    def colbus_of(self, ch):
        return self.colbus[ch] if self.T[K.T_COLBUS] == K.C_COLBUS else self.rowbus[ch]

    def set_colbus(self, ch, v):
        if self.T[K.T_COLBUS] == K.C_COLBUS:
            self.colbus[ch] = v
        else:
            self.rowbus[ch] = v

    # ---- rule evaluation over the history
    def act_bank_ready(self, k):
        T = self.T
        v = -INF
        for e in self.H:
            if k in e.banks:
                if e.kind in ("ACT", "ACTAB", "ACTBG"):
                    v = max(v, e.t + T[K.T_RC])
                elif e.kind == "PRE":
                    v = max(v, e.t + T[K.T_RP])
                elif e.kind == "REF":
                    v = max(v, e.t + e.rfc)
        return v

    def pre_ready(self, k):
        T = self.T
        v = -INF
        for e in self.H:
            if k not in e.banks:
                continue
            if e.kind in ("ACT", "ACTAB", "ACTBG"):
                v = max(v, e.t + T[K.T_RAS])
            elif e.kind in ("RD", "MACSB", "MACBG", "MACAB"):
                v = max(v, e.t + T[K.T_RTP])
            elif e.kind == "WR":
                v = max(v, e.end + T[K.T_WR])
        return v

    def last_act(self, k):
        v = -(1 << 40)
        for e in self.H:
            if k in e.banks and e.kind in ("ACT", "ACTAB", "ACTBG"):
                v = max(v, e.t)
        return v

    def grp(self, rset, flag):
        """Ranks sharing a rule with ``rset``: all ranks of their pseudo-channel when T[flag] is 1."""
        if not self.T[flag]:
            return set(rset)
        return {q for r in rset for q in range(r - r % self.R, r - r % self.R + self.R)}

    def rrd_faw(self, gset, rset, acts=1):
        """Earliest cycle for ``acts`` more ACTs in ranks ``rset`` / BGs ``gset`` (an ACTBG counts T_ACTBGFAW)."""
        T = self.T
        v = -INF
        for r in rset:
            times = []
            for e in self.H:
                if (e.kind == "ACT" and self.grp({r}, K.T_ACTSCOPE) & set(e.ranks)) or (
                    e.kind == "ACTBG" and r in e.ranks
                ):
                    v = max(v, e.t + T[K.T_RRDS])
                    times += [e.t] * (int(T[K.T_ACTBGFAW]) if e.kind == "ACTBG" else 1)
            if len(times) >= 5 - acts:
                v = max(v, sorted(times)[-(5 - acts)] + T[K.T_FAW])
        for g in gset:
            for e in self.H:
                if e.kind in ("ACT", "ACTBG") and g in e.bgs:
                    v = max(v, e.t + T[K.T_RRDL])
        return v

    def rdlike_ready(self, gset, rset):
        T = self.T
        v = -INF
        for e in self.H:
            if e.kind in ("RD", "MACSB", "MACBG"):
                if e.bgs & gset:
                    v = max(v, e.t + T[K.T_CCDL])
                if e.ranks & rset:
                    v = max(v, e.t + T[K.T_CCDS])
                elif e.kind == "RD" and T[K.T_CCDR] and e.ranks & self.grp(rset, K.T_CCDR):
                    v = max(v, e.t + T[K.T_CCDR])  # nCCDR: RD to another SID of the pseudo-channel
            elif e.kind == "WR":
                if e.bgs & gset:
                    v = max(v, e.end + T[K.T_WTRL])
                if e.ranks & self.grp(rset, K.T_TASCOPE):
                    v = max(v, e.end + T[K.T_WTRS])
        return v

    def data_end(self, u):
        v = -INF
        for e in self.H:
            if e.kind in ("RD", "WR") and u in e.pcs:
                v = max(v, e.end)
        return v

    # ---- refresh
    def refresh(self, r, due, idx, ch):
        T = self.T
        base = r * self.NB
        if idx < 0:
            group = [base + j for j in range(self.NB)]
            rfc = T[K.T_RFC]
        else:
            stride = self.NB // T[K.T_PBG]
            group = [base + idx + j * stride for j in range(T[K.T_PBG])]
            rfc = T[K.T_RFCPB]
        openb = [k for k in group if self.row.get(k, -1) >= 0]
        if openb:
            tp = self.mx(due, *[self.pre_ready(k) for k in openb])
            for k in openb:
                self.row[k] = -1
            self.H.append(Ev(tp, "PRE", banks=openb))
            self.st[ch, K.S_PRE] += len(openb)
        tr = self.mx(due, *[self.act_bank_ready(k) for k in group])
        self.H.append(Ev(tr, "REF", banks=group, rfc=rfc))
        self.st[ch, K.S_REF if idx < 0 else K.S_REFPB] += 1
        self.st[ch, K.S_REFBANKCYC] += rfc * len(group)
        return tr

    def scope_refresh(self, r, ch):
        """kernel.scope_refresh: under per-bank refresh a command over several banks pulls in the rank's whole
        round (each group once, nRREFD after the previous REFpb); all-bank refresh: the due REFab."""
        T = self.T
        if T[K.T_REFMODE] != 2:
            self.auto_refresh(r, ch)
            return
        due = self.get_due(r)
        ng = self.NB // T[K.T_PBG]
        idx = self.pbnext.get(r, 0)
        openb = [k for k in range(r * self.NB, (r + 1) * self.NB) if self.row.get(k, -1) >= 0]
        if openb:  # one precharge of the rank's open banks first
            tp = self.mx(due, *[self.pre_ready(k) for k in openb])
            for k in openb:
                self.row[k] = -1
            self.H.append(Ev(tp, "PRE", banks=openb))
            self.st[ch, K.S_PRE] += len(openb)
        at = due
        for j in range(ng):
            at = self.refresh(r, at, (idx + j) % ng, ch) + T[K.T_RREFD]
        self.due[r] = due + ng * T[K.T_REFIPB]

    def auto_refresh(self, r, ch):
        T = self.T
        due = self.get_due(r)
        if T[K.T_REFMODE] == 2:
            idx = self.pbnext.get(r, 0)
            self.refresh(r, due, idx, ch)
            self.pbnext[r] = (idx + 1) % (self.NB // T[K.T_PBG])
            self.due[r] = due + T[K.T_REFIPB]
        else:
            self.refresh(r, due, -1, ch)
            self.due[r] = due + T[K.T_REFI]

    def min_due(self, rset):
        best, d = None, INF + 1
        for r in rset:  # rset is ordered (list)
            if self.get_due(r) < d:
                best, d = r, self.get_due(r)
        return best, d

    # ---- primitives
    def pre(self, k, ch):
        T = self.T
        r = self.r_of(k)
        while True:
            if self.row.get(k, -1) < 0:
                return
            t = self.mx(self.pre_ready(k), self.last[ch], self.rowbus[ch])
            if t >= self.get_due(r):
                self.auto_refresh(r, ch)
                continue
            self.row[k] = -1
            self.H.append(Ev(t, "PRE", banks=[k]))
            self.last[ch] = t
            self.rowbus[ch] = t + T[K.T_ROWCMD]
            self.st[ch, K.S_PRE] += 1
            self.st[ch, K.S_PRECMD] += 1
            return

    def act(self, k, row, arrival, ch):
        T = self.T
        r = self.r_of(k)
        if self.row.get(k, -1) >= 0:
            self.pre(k, ch)
        while True:
            t = self.mx(
                self.act_bank_ready(k), self.rrd_faw({self.g_of(k)}, {r}), self.last[ch], self.rowbus[ch], arrival
            )
            if t >= self.get_due(r):
                self.auto_refresh(r, ch)
                continue
            self.row[k] = row
            self.H.append(Ev(t, "ACT", banks=[k], bgs=[self.g_of(k)], ranks=[r]))
            self.last[ch] = t
            self.rowbus[ch] = t + T[K.T_ROWCMDACT]
            self.st[ch, K.S_ACT] += 1
            self.st[ch, K.S_ACTCMD] += 1
            return

    def col(self, k, row, kind, n, flags, arrival, ch):
        """kind 0 RD, 1 WR, 2 MACSB; one burst per iteration."""
        T = self.T
        r, g, u = self.r_of(k), self.g_of(k), self.u_of(k)
        cls = 0
        if self.row.get(k, -1) != row:
            cls = 2 if self.row.get(k, -1) >= 0 else 1
            self.act(k, row, arrival, ch)
        for _ in range(n):
            while True:
                if self.row.get(k, -1) != row:
                    cls = 1
                    self.act(k, row, arrival, ch)
                if kind == 1:
                    ready = self.mx(self.last_act(k) + T[K.T_RCDWR], self.wr_ready(g, r), self.data_end(u) - T[K.T_CWL])
                elif kind == 0:
                    ready = self.mx(
                        self.last_act(k) + T[K.T_RCDRD], self.rdlike_ready({g}, {r}), self.data_end(u) - T[K.T_CL]
                    )
                else:
                    ready = self.mx(
                        self.last_act(k) + T[K.T_RCDMAC],
                        self.rdlike_ready({g}, {r}),
                        *[e.t + T[K.T_CCDSB] for e in self.H if e.kind == "MACSB" and k in e.banks],
                    )
                t = self.mx(ready, self.last[ch], self.colbus_of(ch), arrival)
                if t >= self.get_due(r):
                    self.auto_refresh(r, ch)
                    continue
                break
            if kind == 1:
                end = t + T[K.T_CWL] + T[K.T_BL]
                self.H.append(Ev(t, "WR", banks=[k], bgs=[g], ranks=[r], pcs=[u], end=end))
                self.st[ch, K.S_WR] += 1
            else:
                end = t + T[K.T_CL] + T[K.T_BL]
                self.H.append(
                    Ev(
                        t,
                        "RD" if kind == 0 else "MACSB",
                        banks=[k],
                        bgs=[g],
                        ranks=[r],
                        pcs=[u] if kind == 0 else [],
                        end=end,
                    )
                )
                if kind == 0:
                    self.st[ch, K.S_RD] += 1
                else:
                    self.st[ch, K.S_MACSB] += 1
                    self.st[ch, K.S_MACBANK] += 1
            self.done[ch] = max(self.done[ch], end)
            self.last[ch] = t
            self.set_colbus(ch, t + 1)
            self.st[ch, K.S_HIT if cls == 0 else K.S_MISS + cls - 1] += 1
            cls = 0
        if flags & K.F_AP:
            self.auto_pre([k], ch)

    def interleaved(self, ch, row, n, flags, arrival, pch, rank, bg, bank):
        """F_IL read: n bursts round robin over the scope banks, pseudo-channel fastest, then bank group, bank,
        rank; a burst to a closed bank first opens every closed scope bank with bursts left (rotation order
        from it); a refresh the burst would meet is done first."""
        T = self.T
        P, R, G, B = (
            (self.P if pch < 0 else 1),
            (self.R if rank < 0 else 1),
            (self.G if bg < 0 else 1),
            (self.B if bank < 0 else 1),
        )
        banks = self.scope(ch, pch, rank, bg, bank)[0]
        order = [
            banks[((p % P * R + p // (P * G * B)) * G + p // P % G) * B + p // (P * G) % B] for p in range(len(banks))
        ]
        nb, miss, j = len(order), {}, 0
        while j < n:
            k = order[j % nb]
            if self.row.get(k, -1) != row:
                for q in range(min(nb, n - j)):
                    kq = order[(j + q) % nb]
                    if self.row.get(kq, -1) != row:
                        miss[kq] = 2 if self.row.get(kq, -1) >= 0 else 1
                        self.act(kq, row, arrival, ch)
                continue
            g, r, u = self.g_of(k), self.r_of(k), self.u_of(k)
            t = self.mx(
                self.last_act(k) + T[K.T_RCDRD],
                self.rdlike_ready({g}, {r}),
                self.data_end(u) - T[K.T_CL],
                self.last[ch],
                self.colbus_of(ch),
                arrival,
            )
            if t >= self.get_due(r):
                self.auto_refresh(r, ch)
                continue
            self.col(k, row, 0, 1, flags & K.F_AP if j + nb >= n else 0, arrival, ch)
            if k in miss:
                self.st[ch, K.S_HIT] -= 1
                self.st[ch, K.S_MISS + miss.pop(k) - 1] += 1
            j += 1

    def wr_ready(self, g, r):
        T = self.T
        v = -INF
        for e in self.H:
            if e.kind == "WR":
                if g in e.bgs:
                    v = max(v, e.t + T[K.T_CCDL])
                if r in e.ranks:
                    v = max(v, e.t + T[K.T_CCDS])
            elif e.kind == "RD" and self.grp({r}, K.T_TASCOPE) & e.ranks:
                v = max(v, e.t + T[K.T_RTW])
        return v

    def auto_pre(self, banks, ch):
        for k in banks:
            if self.row.get(k, -1) < 0:
                continue
            tp = self.pre_ready(k)
            self.row[k] = -1
            self.H.append(Ev(tp, "PRE", banks=[k]))
            self.st[ch, K.S_PRE] += 1

    # ---- scope ops
    def scope(self, ch, pch, rank, bg, bank):
        P, R, G, B = self.P, self.R, self.G, self.B
        banks, ranks, bgs, pcs = [], [], [], []
        for p in range(P) if pch < 0 else [pch]:
            u = ch * P + p
            pcs.append(u)
            for rr in range(R) if rank < 0 else [rank]:
                ri = u * R + rr
                ranks.append(ri)
                for gg in range(G) if bg < 0 else [bg]:
                    gi = ri * G + gg
                    bgs.append(gi)
                    for bb in range(B) if bank < 0 else [bank]:
                        banks.append(gi * B + bb)
        return banks, ranks, bgs, pcs

    def prea(self, ch, banks, ranks):
        T = self.T
        while True:
            openb = [k for k in banks if self.row.get(k, -1) >= 0]
            if not openb:
                return
            t = self.mx(*[self.pre_ready(k) for k in openb], self.last[ch], self.rowbus[ch], -1)
            r, d = self.min_due(ranks)
            if t >= d:
                self.scope_refresh(r, ch)
                continue
            for k in openb:
                self.row[k] = -1
            self.H.append(Ev(t, "PRE", banks=openb))
            self.st[ch, K.S_PRE] += len(openb)
            self.st[ch, K.S_PRECMD] += 1
            self.last[ch] = t
            self.rowbus[ch] = t + T[K.T_PIMROW]
            return

    def actx(self, ch, row, bgmode, arrival, banks, ranks, bgs):
        T = self.T
        if any(self.row.get(k, -1) >= 0 for k in banks):
            self.prea(ch, banks, ranks)
        while True:
            t = self.mx(arrival, *[self.act_bank_ready(k) for k in banks], self.last[ch], self.rowbus[ch])
            if bgmode:
                t = self.mx(t, self.rrd_faw(set(bgs), set(ranks), int(T[K.T_ACTBGFAW])))
            r, d = self.min_due(ranks)
            if t >= d:
                self.scope_refresh(r, ch)
                continue
            break
        for k in banks:
            self.row[k] = row
        self.H.append(
            Ev(t, "ACTBG" if bgmode else "ACTAB", banks=banks, bgs=bgs if bgmode else (), ranks=ranks if bgmode else ())
        )
        self.last[ch] = t
        self.rowbus[ch] = t + T[K.T_PIMROW]
        self.st[ch, K.S_ACT] += len(banks)
        self.st[ch, K.S_ACTCMD] += 1

    def macx(self, ch, row, bgmode, n, flags, arrival, banks, ranks, bgs, pcs):
        T = self.T
        cls = 0
        if not all(self.row.get(k, -1) == row for k in banks):
            cls = 2 if any(self.row.get(k, -1) >= 0 for k in banks) else 1
            self.actx(ch, row, bgmode, arrival, banks, ranks, bgs)
        for _ in range(n):
            while True:
                if not all(self.row.get(k, -1) == row for k in banks):
                    cls = 1
                    self.actx(ch, row, bgmode, arrival, banks, ranks, bgs)
                t = self.mx(arrival, *[self.last_act(k) + T[K.T_RCDMAC] for k in banks])
                if bgmode == 0:
                    t = self.mx(t, *[e.t + T[K.T_CCDAB] for e in self.H if e.kind == "MACAB" and e.pcs & set(pcs)])
                else:
                    t = self.mx(t, self.rdlike_ready(set(bgs), set(ranks)))
                t = self.mx(t, self.last[ch], self.colbus_of(ch))
                r, d = self.min_due(ranks)
                if t >= d:
                    self.scope_refresh(r, ch)
                    continue
                break
            if bgmode == 0:
                self.H.append(Ev(t, "MACAB", banks=banks, pcs=pcs))
                self.st[ch, K.S_MACAB] += 1
            else:
                self.H.append(Ev(t, "MACBG", banks=banks, bgs=bgs, ranks=ranks))
                self.st[ch, K.S_MACBG] += 1
            self.st[ch, K.S_MACBANK] += len(banks)
            self.done[ch] = max(self.done[ch], t + T[K.T_CL] + T[K.T_BL])
            self.last[ch] = t
            self.set_colbus(ch, t + 1)
            self.st[ch, K.S_HIT if cls == 0 else K.S_MISS + cls - 1] += 1
            cls = 0
        if flags & K.F_AP:
            self.auto_pre(banks, ch)

    # ---- records
    def run(self, cmds):
        T = self.T
        for c in cmds:
            o = int(c["op"])
            ch = int(c["ch"])
            a = int(c["arrival"])
            if o not in (K.REF, K.REFPB):
                self.last[ch] = max(self.last[ch], a)
            pch, rank, bg, bank = int(c["pch"]), int(c["rank"]), int(c["bg"]), int(c["bank"])
            row, rep, fl = int(c["row"]), int(c["repeat"]), int(c["flags"])
            if o == K.NOP:
                continue
            if o == K.RD and fl & K.F_IL:
                self.interleaved(ch, row, rep, fl, a, pch, rank, bg, bank)
                continue
            if o in (K.ACT, K.PRE, K.RD, K.WR, K.MACSB, K.REFPB):
                k = (((ch * self.P + pch) * self.R + rank) * self.G + bg) * self.B + bank
                if o == K.ACT:
                    self.act(k, row, a, ch)
                elif o == K.PRE:
                    self.pre(k, ch)
                elif o == K.REFPB:
                    stride = self.NB // T[K.T_PBG]
                    self.refresh(self.r_of(k), a, (k % self.NB) % stride, ch)
                else:
                    self.col(k, row, {K.RD: 0, K.WR: 1, K.MACSB: 2}[o], rep, fl, a, ch)
                continue
            if o == K.FIX:
                t = self.last[ch]
                s = max(t, self.fix[ch])
                self.fix[ch] = s + int(c["cycles"])
                self.done[ch] = max(self.done[ch], s + int(c["cycles"]))
                self.st[ch, K.S_FIXC] += int(c["cycles"])
                continue
            if o in (K.BARRIER, K.MODE):
                t = max(self.last[ch], self.done[ch]) if o == K.BARRIER else self.last[ch]
                if o == K.MODE:  # dead time after the last issued command (no drain)
                    t += T[K.T_MODE]
                    self.done[ch] = max(self.done[ch], t)
                    self.st[ch, K.S_MODE] += 1
                else:
                    self.st[ch, K.S_BARRIER] += 1
                self.last[ch] = t
                continue
            banks, ranks, bgs, pcs = self.scope(ch, pch, rank, bg, bank)
            if o == K.PREA:
                self.prea(ch, banks, ranks)
            elif o in (K.ACTAB, K.ACTBG):
                self.actx(ch, row, 1 if o == K.ACTBG else 0, a, banks, ranks, bgs)
            elif o in (K.MACAB, K.MACBG):
                self.macx(ch, row, 1 if o == K.MACBG else 0, rep, fl, a, banks, ranks, bgs, pcs)
            elif o == K.REF:
                for r in ranks:
                    self.refresh(r, a, -1, ch)
            elif o == K.BUF:
                t = max(self.last[ch], self.colbus_of(ch))
                self.last[ch] = t
                self.set_colbus(ch, t + 1)
                unit = T[K.T_BUFUNITBG] if bg >= 0 else T[K.T_BUFUNIT]
                for u in pcs:
                    s = max(t, self.buf.get(u, 0))
                    e = s + T[K.T_BUFSETUP] + rep * unit
                    self.buf[u] = e
                    self.done[ch] = max(self.done[ch], e)
                self.st[ch, K.S_BUFU] += rep * len(pcs)
        return self

    def cycles_per_channel(self):
        return np.array([max(d, l) for d, l in zip(self.done, self.last)], np.int64)


def reference_run(spec, cmds, refresh: str | None = None):
    """Run ``cmds`` on the reference engine; returns (cycles per channel, stats array [ch, N_S])."""
    from attnsim.hwmodels.dram.engine import timing_vector
    from attnsim.hwmodels.dram.spec import load_dram_spec

    spec = load_dram_spec(spec)
    T = timing_vector(spec, spec.default_refresh if refresh is None else refresh)
    eng = RefEngine(T, spec.org.channels).run(cmds)
    return eng.cycles_per_channel(), eng.st
