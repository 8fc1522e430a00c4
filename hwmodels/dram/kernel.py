"""Numba bank-timing kernel shared by the command-stream engine and the request controller.

State is a handful of int64 arrays (bank, bank group, rank, bus = pseudo-channel, channel); rules are the
JEDEC-style minimum distances of shared/reference/dram_timing.md §1 (Ramulator 2.1 names) and the
all-bank PIM rules of shared/reference/pim_dram.md ("All-bank PIM timing constraints", AttAcc
HBM3-PIM.cpp). Records of a channel issue in order; every primitive computes the earliest legal cycle,
triggers due refreshes of the ranks it touches, then commits. See hwmodels/dram/API.md.
"""

from __future__ import annotations

import threading
import types

import numpy as np

# Two tiers (issue 30). The functions below are plain Python until activate() compiles them with Numba; engine.walk
# runs small command streams through interpreted() (the same functions, rebound to a namespace of plain functions,
# bit-identical: tests/test_dram_tiers.py) and large ones through activate()'s compiled run_kernel. The default
# experiment's walks are small (~1,000 records each), so its runs never import Numba: a first run on an empty
# cache compiled these 24 kernels for ~15-25 s of CPU and a warm one loaded them for ~0.4 s (import numba) + load.
# Hot-path kernels: no NRT (no allocation inside, so no reference counting of the array arguments at every
# call -- it cost ~40 % of the time), numpy error model (no zero-division branches; divisors are validated).
HOT_OPTIONS = {"cache": True, "_nrt": False, "error_model": "numpy"}
INLINE_OPTIONS = {**HOT_OPTIONS, "inline": "always"}  # Numba-IR inlined (few call sites)
_KERNELS: dict[str, object] = {}  # this module's kernels: name -> plain function
# One compiled signature per kernel (issue 30: a first run compiled 36 variants of 24 functions, ~23 s of CPU, where
# 24 do; measured with an empty cache on the default experiment's command streams, 25.5 -> 15.3 s): Numba compiles a
# callee once per distinct argument types, and a constant argument is typed as its literal value (``Literal[int](0)``),
# so mode constants passed to another kernel are written ``np.int64(0)`` (a plain int64), and flags are widened to
# int64 at the call. tests/test_kernel_compile.py checks that a run leaves every kernel with one signature.


def _kernel(f):
    """A kernel of this module: stays a plain function until activate()."""
    _KERNELS[f.__name__] = f
    return f


def _njit(options: dict):
    def deco(f):
        activate()  # Numba with attnsim's cache locator, and this module's kernels compiled (callees of f)
        from numba import njit

        return njit(**options)(f)

    return deco


hot = _njit(HOT_OPTIONS)  # for the other kernel modules (sched_*.py, recur.py): compiled at their import
inline = _njit(INLINE_OPTIONS)


NEG = -(1 << 40)  # "long ago"


def max_cycle(banks_per_channel: int) -> int:
    """Largest accepted arrival cycle: 2**53, less where per-channel statistics (refresh bank-cycles, up to
    cycles x banks) could leave int64."""
    return min(1 << 53, (1 << 62) // max(1, int(banks_per_channel)))


# ---- op codes (API.md table; values stable)
NOP, ACT, PRE, PREA, RD, WR, REF, REFPB, ACTAB, MACAB, MACSB, ACTBG, MACBG, BUF, FIX, BARRIER, MODE = range(17)
N_OPS = 17
F_AP = 1
F_IL = 2  # RD only: the record's bursts go round robin over the banks of its scope (prim_il)

# ---- timing parameter vector T (filled by engine.timing_vector)
(
    T_BL,
    T_CL,
    T_CWL,
    T_RCDRD,
    T_RCDWR,
    T_RP,
    T_RAS,
    T_RC,
    T_WR,
    T_RTP,
    T_CCDS,
    T_CCDL,
    T_RRDS,
    T_RRDL,
    T_FAW,
    T_WTRS,
    T_WTRL,
    T_RTW,
    T_RFC,
    T_RFCPB,
    T_REFI,
    T_REFIPB,
    T_ROWCMD,
    T_COLBUS,
    T_CCDAB,
    T_CCDSB,
    T_RCDMAC,
    T_PIMROW,
    T_BUFSETUP,
    T_BUFUNIT,
    T_BUFUNITBG,
    T_MODE,
    T_PBG,
    T_P,
    T_R,
    T_G,
    T_B,
    T_REFMODE,
    T_NCH,
    T_IDLESKIP,
    T_ACTBGFAW,
    T_ACTSCOPE,
    T_ROWCMDACT,
    T_CCDR,
    T_TASCOPE,
    T_PAGECAP,
    T_WQ,
    T_WQHI,
    T_WQLO,
    T_REFSTAGGER,
    T_PREHOLD,
    T_REFACTIVE,
    T_RREFD,
) = range(53)
N_T = 53  # T_IDLESKIP: 1 = refreshes over idle gaps in closed form (refresh_gap), 0 = one by one (tests)
# controller rule set (rules.py): T_ACTSCOPE 1 = nRRD_S/tFAW per pseudo-channel (all ranks/SIDs of
# it), 0 = per rank/SID; T_ROWCMDACT: row-bus cycles of an ACT (PRE/REF: T_ROWCMD); T_CCDR: RD->RD to another
# SID of the pseudo-channel (0 = none); T_TASCOPE 1 = RD->WR / WR->RD turnarounds per pseudo-channel, 0 = per rank;
# T_PAGECAP: closed page closes a row after this many column ops since its ACT (0: after the last queued hit)
# T_WQ: write-queue entries per channel (0: one mixed request queue); then reads have their own queue and the
# scheduler drains writes (write mode) from more than T_WQHI queued writes (or no queued read) down to fewer
# than T_WQLO (rules.py, sched.drain_mode)
# T_REFSTAGGER 1: the ranks of a pseudo-channel refresh in turn, rank r first due at (r + 1) x period / ranks
# (then every period), instead of all at the period (rules.py refresh_stagger)
# T_PREHOLD 1: a PRE waits while a hit to the open row is queued; 0: only while the request whose ACT opened the
# row has not issued its column command (rules.py pre_holdback). T_REFACTIVE 1: a due refresh first lets those
# requests of its banks issue their column commands (rules.py refresh_waits_active)
# T_RREFD: REFpb -> REFpb of a rank, spacing the per-bank refreshes of a round pulled in by scope_refresh
# T_ACTBGFAW: ACTs one ACTBG record counts in a rank's tFAW window (1..4; NewtonSim G_ACT = 4)

# ---- state columns
B_ROW, B_ACT, B_PRE, B_RD, B_WR, B_ACTT, B_MSB, B_G, B_R, B_U, B_CH, B_NACC = range(12)
N_B = 12  # B_G..B_CH: the bank's bank-group/rank/pseudo-channel/channel index (constant; saves divisions)
# B_NACC: column ops since the bank's last ACT (closed page with a cap, T_PAGECAP)
G_ACT, G_RD, G_WR = range(3)
N_G = 3
R_ACT, R_RD, R_WR, R_FAW0, R_FAW1, R_FAW2, R_FAW3, R_FAWI, R_DUE, R_PBNEXT = range(10)
N_R = 10
U_DATA, U_BUF, U_MAC = range(3)
N_U = 3
C_LAST, C_ROWBUS, C_COLBUS, C_DONE, C_FIX = range(5)
N_C = 5

# ---- statistics per channel
(
    S_ACT,
    S_ACTCMD,
    S_PRE,
    S_PRECMD,
    S_RD,
    S_WR,
    S_MACAB,
    S_MACBANK,
    S_MACSB,
    S_MACBG,
    S_BUFU,
    S_FIXC,
    S_REF,
    S_REFPB,
    S_REFBANKCYC,
    S_HIT,
    S_MISS,
    S_CONF,
    S_MODE,
    S_BARRIER,
) = range(20)
N_S = 20
STAT_NAMES = (
    "bank_acts",
    "act_cmds",
    "bank_pres",
    "pre_cmds",
    "rd_bursts",
    "wr_bursts",
    "macab_ops",
    "mac_bank_ops",
    "macsb_ops",
    "macbg_ops",
    "buf_units",
    "fix_cycles",
    "refs",
    "refpbs",
    "refresh_bank_cycles",
    "row_hits",
    "row_misses",
    "row_conflicts",
    "mode_switches",
    "barriers",
)


def first_due(r, T):
    """First refresh due of rank(s) r: the period (nREFIpb / nREFI), staggered by rank when T_REFSTAGGER."""
    per = int(T[T_REFIPB] if T[T_REFMODE] == 2 else T[T_REFI])
    if T[T_REFSTAGGER] == 0:
        return per + 0 * r
    R = int(T[T_R])
    return (r % R + 1) * per // R


def new_state(n_ch: int, T: np.ndarray):
    """Fresh state arrays for ``n_ch`` channels (all banks closed, first refresh due at nREFI/nREFIpb)."""
    P, R, G, B = int(T[T_P]), int(T[T_R]), int(T[T_G]), int(T[T_B])
    nu = n_ch * P
    nr = nu * R
    ng = nr * G
    nb = ng * B
    BS = np.full((nb, N_B), 0, np.int64)
    BS[:, B_ROW] = -1
    BS[:, B_ACTT] = NEG
    BS[:, B_MSB] = 0
    k = np.arange(nb)
    BS[:, B_G] = k // B
    BS[:, B_R] = k // (G * B)
    BS[:, B_U] = k // (R * G * B)
    BS[:, B_CH] = k // (P * R * G * B)
    GS = np.zeros((ng, N_G), np.int64)
    RS = np.zeros((nr, N_R), np.int64)
    RS[:, R_FAW0 : R_FAW3 + 1] = NEG
    RS[:, R_DUE] = first_due(np.arange(nr), T)
    US = np.zeros((nu, N_U), np.int64)
    CS = np.zeros((n_ch, N_C), np.int64)
    ST = np.zeros((n_ch, N_S), np.int64)
    return BS, GS, RS, US, CS, ST


# ============================================================== refresh


@_kernel
def refresh_rank(r, due, pb_idx, T, BS, CS, ST, ch):
    """Refresh rank ``r`` (all-bank, or the per-bank group ``pb_idx`` if pb_idx >= 0) no earlier than ``due``.

    Out of band: no command-bus slot, does not block other ranks; open banks are precharged first.
    """
    NB = T[T_G] * T[T_B]
    base = r * NB
    if pb_idx < 0:
        lo, n, stride = 0, NB, 1
        rfc = T[T_RFC]
    else:
        stride = NB // T[T_PBG]
        lo, n = pb_idx, T[T_PBG]
        rfc = T[T_RFCPB]
    tp = due
    anyopen = False
    for j in range(n):
        k = base + lo + j * stride
        if BS[k, B_ROW] >= 0:
            anyopen = True
            if BS[k, B_PRE] > tp:
                tp = BS[k, B_PRE]
    if anyopen:
        for j in range(n):
            k = base + lo + j * stride
            if BS[k, B_ROW] >= 0:
                BS[k, B_ROW] = -1
                ST[ch, S_PRE] += 1
                if tp + T[T_RP] > BS[k, B_ACT]:
                    BS[k, B_ACT] = tp + T[T_RP]
    tr = due
    for j in range(n):
        k = base + lo + j * stride
        if BS[k, B_ACT] > tr:
            tr = BS[k, B_ACT]
    for j in range(n):
        k = base + lo + j * stride
        BS[k, B_ACT] = tr + rfc
    if pb_idx < 0:
        ST[ch, S_REF] += 1
    else:
        ST[ch, S_REFPB] += 1
    ST[ch, S_REFBANKCYC] += rfc * n
    return tr


@_kernel
def auto_refresh(r, T, BS, RS, CS, ST, ch):
    """Perform the refresh of rank ``r`` that is due (auto mode); returns its REF cycle."""
    due = RS[r, R_DUE]
    if T[T_REFMODE] == 2:
        idx = RS[r, R_PBNEXT]
        tr = refresh_rank(r, due, idx, T, BS, CS, ST, ch)
        RS[r, R_PBNEXT] = (idx + 1) % ((T[T_G] * T[T_B]) // T[T_PBG])
        RS[r, R_DUE] = due + T[T_REFIPB]
    else:
        tr = refresh_rank(r, due, np.int64(-1), T, BS, CS, ST, ch)
        RS[r, R_DUE] = due + T[T_REFI]
    return tr


@_kernel
def scope_refresh(r, T, BS, RS, CS, ST, ch):
    """The due refresh of rank ``r`` met by a command over several banks (ACTAB/MACAB/PREA, bank-group PIM ops).

    All-bank refresh: the due REFab (auto_refresh). Per-bank refresh: the rank's whole round, every per-bank group
    once in round order after one precharge of its open banks, each REFpb nRREFD after the previous one, pulled in
    at the due; the next due is one round
    later, so every bank is still refreshed once per round. Walking the round one REFpb per nREFIpb instead never
    leaves a window in which all banks are free when nRFCpb > nREFIpb (HBM3: 260 > 159 cycles): an all-bank command
    would wait forever. JEDEC lets a controller pull refreshes in ahead of their due (DDR4 JESD79-4 / LPDDR4
    JESD209-4: up to 8 REFab-equivalents; a round of REFpb is one); an HBM-PIM controller running all-bank commands
    has to. Returns the cycle of the round's last REFpb."""
    if T[T_REFMODE] != 2:
        return auto_refresh(r, T, BS, RS, CS, ST, ch)
    due = RS[r, R_DUE]
    NB = T[T_G] * T[T_B]
    ng = NB // T[T_PBG]
    idx = RS[r, R_PBNEXT]
    tp = due  # the rank's open banks are precharged together first (refresh_rank then finds them closed)
    for k in range(r * NB, r * NB + NB):
        if BS[k, B_ROW] >= 0 and BS[k, B_PRE] > tp:
            tp = BS[k, B_PRE]
    for k in range(r * NB, r * NB + NB):
        if BS[k, B_ROW] >= 0:
            BS[k, B_ROW] = -1
            ST[ch, S_PRE] += 1
            if tp + T[T_RP] > BS[k, B_ACT]:
                BS[k, B_ACT] = tp + T[T_RP]
    at = due
    tr = due
    for j in range(ng):
        tr = refresh_rank(r, at, (idx + j) % ng, T, BS, CS, ST, ch)
        at = tr + T[T_RREFD]
    RS[r, R_DUE] = due + ng * T[T_REFIPB]
    return tr


@_kernel
def ref_period(T):
    """Cycles between two refreshes of a rank (0: refresh off)."""
    if T[T_REFMODE] == 0:
        return 1 << 62
    return T[T_REFIPB] if T[T_REFMODE] == 2 else T[T_REFI]


@_kernel
def refresh_gap(r, t, T, BS, RS, ST, ch):
    """Every refresh of rank ``r`` due at or before cycle ``t`` in closed form, when the rank is idle over them.

    Idle: all banks of the rank closed and each bank ready (B_ACT) by the due of its next refresh; then every
    refresh happens exactly at its due (nRFC < nREFI), so N = (t - due) // period + 1 refreshes leave each
    refreshed bank ready at (its last due) + nRFC, and the counts and statistics of N auto_refresh calls. The
    caller guarantees that the walk would perform all of them (no command to the rank before cycle t).
    Returns N, or 0 (nothing done) when the rank is not idle or T_IDLESKIP is off: the caller then walks.
    """
    due = RS[r, R_DUE]
    if T[T_IDLESKIP] == 0 or T[T_REFMODE] == 0 or t < due:
        return 0
    NB = T[T_G] * T[T_B]
    base = r * NB
    pb = T[T_REFMODE] == 2
    per = T[T_REFIPB] if pb else T[T_REFI]
    n = (t - due) // per + 1
    if n < 2:
        return 0
    if pb:
        ng = NB // T[T_PBG]  # per-bank refresh groups, refreshed round robin
        rfc = T[T_RFCPB]
        if rfc > ng * per:
            return 0
        idx = RS[r, R_PBNEXT]
        for k in range(base, base + NB):
            off = ((k - base) % ng - idx) % ng  # position of the bank's group in the round
            if BS[k, B_ROW] >= 0 or (off < n and BS[k, B_ACT] > due + off * per):
                return 0
        for k in range(base, base + NB):
            off = ((k - base) % ng - idx) % ng
            if off < n:
                BS[k, B_ACT] = due + (off + ((n - 1 - off) // ng) * ng) * per + rfc
        RS[r, R_PBNEXT] = (idx + n) % ng
        ST[ch, S_REFPB] += n
        ST[ch, S_REFBANKCYC] += n * rfc * T[T_PBG]
    else:
        rfc = T[T_RFC]
        for k in range(base, base + NB):
            if BS[k, B_ROW] >= 0 or BS[k, B_ACT] > due:
                return 0
        for k in range(base, base + NB):
            BS[k, B_ACT] = due + (n - 1) * per + rfc
        ST[ch, S_REF] += n
        ST[ch, S_REFBANKCYC] += n * rfc * NB
    RS[r, R_DUE] = due + n * per
    return n


# ============================================================== single-bank primitives


@_kernel
def earliest_act(k, T, BS, GS, RS, CS):
    g = BS[k, B_G]
    r = BS[k, B_R]
    ch = BS[k, B_CH]
    t = BS[k, B_ACT]
    if GS[g, G_ACT] > t:
        t = GS[g, G_ACT]
    if RS[r, R_ACT] > t:
        t = RS[r, R_ACT]
    f = RS[r, R_FAW0 + RS[r, R_FAWI]] + T[T_FAW]
    if f > t:
        t = f
    if CS[ch, C_LAST] > t:
        t = CS[ch, C_LAST]
    if CS[ch, C_ROWBUS] > t:
        t = CS[ch, C_ROWBUS]
    return t


@_kernel
def commit_act(k, row, t, T, BS, GS, RS, CS, ST):
    g = BS[k, B_G]
    r = BS[k, B_R]
    ch = BS[k, B_CH]
    BS[k, B_ROW] = row
    BS[k, B_ACT] = t + T[T_RC]
    if t + T[T_RAS] > BS[k, B_PRE]:
        BS[k, B_PRE] = t + T[T_RAS]
    BS[k, B_RD] = t + T[T_RCDRD]
    BS[k, B_WR] = t + T[T_RCDWR]
    BS[k, B_ACTT] = t
    BS[k, B_NACC] = 0
    if t + T[T_RRDL] > GS[g, G_ACT]:
        GS[g, G_ACT] = t + T[T_RRDL]
    r0 = r
    nr = 1
    if T[T_ACTSCOPE] == 1:  # one nRRD_S / tFAW window per pseudo-channel: kept identical in all its ranks
        r0 = BS[k, B_U] * T[T_R]  # its first rank (= r - r % R, without a division on the hot path)
        nr = T[T_R]
    for rr in range(r0, r0 + nr):
        if t + T[T_RRDS] > RS[rr, R_ACT]:
            RS[rr, R_ACT] = t + T[T_RRDS]
        i = RS[rr, R_FAWI]
        RS[rr, R_FAW0 + i] = t
        RS[rr, R_FAWI] = (i + 1) & 3
    CS[ch, C_LAST] = t
    CS[ch, C_ROWBUS] = t + T[T_ROWCMDACT]
    ST[ch, S_ACT] += 1
    ST[ch, S_ACTCMD] += 1


@_kernel
def earliest_pre(k, T, BS, CS):
    ch = BS[k, B_CH]
    t = BS[k, B_PRE]
    if CS[ch, C_LAST] > t:
        t = CS[ch, C_LAST]
    if CS[ch, C_ROWBUS] > t:
        t = CS[ch, C_ROWBUS]
    return t


@_kernel
def commit_pre(k, t, T, BS, CS, ST):
    ch = BS[k, B_CH]
    BS[k, B_ROW] = -1
    if t + T[T_RP] > BS[k, B_ACT]:
        BS[k, B_ACT] = t + T[T_RP]
    CS[ch, C_LAST] = t
    CS[ch, C_ROWBUS] = t + T[T_ROWCMD]
    ST[ch, S_PRE] += 1
    ST[ch, S_PRECMD] += 1


@_kernel
def auto_pre(k, T, BS, ST, ch):
    """Auto-precharge (RDA/WRA): at the bank's earliest PRE, no command slot."""
    if BS[k, B_ROW] < 0:
        return
    tp = BS[k, B_PRE]
    BS[k, B_ROW] = -1
    if tp + T[T_RP] > BS[k, B_ACT]:
        BS[k, B_ACT] = tp + T[T_RP]
    ST[ch, S_PRE] += 1


@_kernel
def earliest_col(k, is_wr, T, BS, GS, RS, US, CS):
    """Earliest RD (is_wr=0), WR (1) or MACSB (2) to bank k (row assumed open)."""
    g = BS[k, B_G]
    r = BS[k, B_R]
    u = BS[k, B_U]
    ch = BS[k, B_CH]
    if is_wr == 1:
        t = BS[k, B_WR]
        if GS[g, G_WR] > t:
            t = GS[g, G_WR]
        if RS[r, R_WR] > t:
            t = RS[r, R_WR]
        d = US[u, U_DATA] - T[T_CWL]
        if d > t:
            t = d
    else:
        if is_wr == 0:
            t = BS[k, B_RD]
            d = US[u, U_DATA] - T[T_CL]
            if d > t:
                t = d
        else:
            t = BS[k, B_ACTT] + T[T_RCDMAC]
            if BS[k, B_MSB] > t:
                t = BS[k, B_MSB]
        if GS[g, G_RD] > t:
            t = GS[g, G_RD]
        if RS[r, R_RD] > t:
            t = RS[r, R_RD]
    if CS[ch, C_LAST] > t:
        t = CS[ch, C_LAST]
    cb = T[T_COLBUS]
    if CS[ch, cb] > t:
        t = CS[ch, cb]
    return t


@_kernel
def col_spacing(is_wr, T):
    sp = T[T_CCDL]
    if is_wr == 2:
        if T[T_CCDSB] > sp:
            sp = T[T_CCDSB]
    elif T[T_BL] > sp:
        sp = T[T_BL]
    return sp


@_kernel
def commit_col(k, is_wr, t, m, T, BS, GS, RS, US, CS, ST):
    """Commit m column ops to bank k, the first at t, spaced by col_spacing (same bank)."""
    g = BS[k, B_G]
    r = BS[k, B_R]
    u = BS[k, B_U]
    ch = BS[k, B_CH]
    tl = t + (m - 1) * col_spacing(is_wr, T)
    BS[k, B_NACC] += m
    if is_wr == 1:
        v = tl + T[T_CCDL]
        if v > GS[g, G_WR]:
            GS[g, G_WR] = v
        v = tl + T[T_CCDS]
        if v > RS[r, R_WR]:
            RS[r, R_WR] = v
        end = tl + T[T_CWL] + T[T_BL]
        v = end + T[T_WTRL]
        if v > GS[g, G_RD]:
            GS[g, G_RD] = v
        v = end + T[T_WTRS]
        if T[T_TASCOPE] == 1:  # WR->RD turnaround per pseudo-channel (its ranks u * R ..: no division)
            for rr in range(u * T[T_R], u * T[T_R] + T[T_R]):
                if v > RS[rr, R_RD]:
                    RS[rr, R_RD] = v
        elif v > RS[r, R_RD]:
            RS[r, R_RD] = v
        US[u, U_DATA] = end
        v = end + T[T_WR]
        if v > BS[k, B_PRE]:
            BS[k, B_PRE] = v
        ST[ch, S_WR] += m
    else:
        v = tl + T[T_CCDL]
        if v > GS[g, G_RD]:
            GS[g, G_RD] = v
        v = tl + T[T_CCDS]
        if v > RS[r, R_RD]:
            RS[r, R_RD] = v
        end = tl + T[T_CL] + T[T_BL]
        v = tl + T[T_RTP]
        if v > BS[k, B_PRE]:
            BS[k, B_PRE] = v
        if is_wr == 0:
            v = tl + T[T_RTW]
            if T[T_TASCOPE] == 1 or T[T_CCDR] > 0:  # RD->WR per pseudo-channel; nCCDR to the other SIDs
                vr = tl + T[T_CCDR]
                for rr in range(u * T[T_R], u * T[T_R] + T[T_R]):
                    if T[T_TASCOPE] == 1 and v > RS[rr, R_WR]:
                        RS[rr, R_WR] = v
                    if rr != r and vr > RS[rr, R_RD]:
                        RS[rr, R_RD] = vr
            if v > RS[r, R_WR]:
                RS[r, R_WR] = v
            US[u, U_DATA] = end
            ST[ch, S_RD] += m
        else:
            BS[k, B_MSB] = tl + T[T_CCDSB]
            ST[ch, S_MACSB] += m
            ST[ch, S_MACBANK] += m
    if end > CS[ch, C_DONE]:
        CS[ch, C_DONE] = end
    CS[ch, C_LAST] = tl
    CS[ch, T[T_COLBUS]] = tl + 1


@_kernel
def due_of(r, T, RS):
    if T[T_REFMODE] == 0:
        return 1 << 62
    return RS[r, R_DUE]


@_kernel
def prim_pre(k, T, BS, GS, RS, CS, ST):
    """Explicit/implicit PRE of bank k (no-op if closed)."""
    NB = T[T_G] * T[T_B]
    r = k // NB
    ch = r // (T[T_R] * T[T_P])
    while True:
        if BS[k, B_ROW] < 0:
            return
        t = earliest_pre(k, T, BS, CS)
        if t >= due_of(r, T, RS):
            auto_refresh(r, T, BS, RS, CS, ST, ch)
            continue
        commit_pre(k, t, T, BS, CS, ST)
        return


@_kernel
def prim_act(k, row, arrival, T, BS, GS, RS, CS, ST):
    """ACT bank k to row (precharging an open bank first)."""
    NB = T[T_G] * T[T_B]
    r = k // NB
    ch = r // (T[T_R] * T[T_P])
    if BS[k, B_ROW] >= 0:
        prim_pre(k, T, BS, GS, RS, CS, ST)
    while True:
        t = earliest_act(k, T, BS, GS, RS, CS)
        if arrival > t:
            t = arrival
        if t >= due_of(r, T, RS):
            if refresh_gap(r, t, T, BS, RS, ST, ch) == 0:  # t only grows in this loop: exact
                auto_refresh(r, T, BS, RS, CS, ST, ch)
            continue
        commit_act(k, row, t, T, BS, GS, RS, CS, ST)
        return


@_kernel
def prim_col(k, row, is_wr, n, flags, arrival, T, BS, GS, RS, US, CS, ST):
    """n column ops (RD=0, WR=1, MACSB=2) to (bank k, row): implicit PRE/ACT, closed-form bursts between refreshes."""
    NB = T[T_G] * T[T_B]
    r = k // NB
    ch = r // (T[T_R] * T[T_P])
    cls = 0
    if BS[k, B_ROW] != row:
        cls = 2 if BS[k, B_ROW] >= 0 else 1
        prim_act(k, row, arrival, T, BS, GS, RS, CS, ST)
    sp = col_spacing(is_wr, T)
    i = 0
    while i < n:
        if BS[k, B_ROW] != row:  # closed by a refresh
            cls = 1
            prim_act(k, row, arrival, T, BS, GS, RS, CS, ST)
        t = earliest_col(k, is_wr, T, BS, GS, RS, US, CS)
        if arrival > t:
            t = arrival
        due = due_of(r, T, RS)
        if t >= due:
            auto_refresh(r, T, BS, RS, CS, ST, ch)
            continue
        m = n - i
        lim = (due - t + sp - 1) // sp
        if lim < m:
            m = lim
        commit_col(k, is_wr, t, m, T, BS, GS, RS, US, CS, ST)
        if cls == 0:
            ST[ch, S_HIT] += m
        else:
            ST[ch, S_HIT] += m - 1
            ST[ch, S_MISS + cls - 1] += 1
        cls = 0
        i += m
    if flags & F_AP:
        auto_pre(k, T, BS, ST, ch)


# ============================================================== scopes (all-bank / bank-group ops)


@_kernel
def make_scope(ch, pch, rank, bg, bank, T, banks, ranks, bgs, pcs):
    """Fill index lists of the scope (-1 = all at that level); returns (n_banks, n_ranks, n_bgs, n_pcs)."""
    P, R, G, B = T[T_P], T[T_R], T[T_G], T[T_B]
    p0, p1 = (0, P) if pch < 0 else (pch, pch + 1)
    r0, r1 = (0, R) if rank < 0 else (rank, rank + 1)
    g0, g1 = (0, G) if bg < 0 else (bg, bg + 1)
    b0, b1 = (0, B) if bank < 0 else (bank, bank + 1)
    nb = 0
    nr = 0
    ng = 0
    npc = 0
    for p in range(p0, p1):
        u = ch * P + p
        pcs[npc] = u
        npc += 1
        for rr in range(r0, r1):
            ri = u * R + rr
            ranks[nr] = ri
            nr += 1
            for gg in range(g0, g1):
                gi = ri * G + gg
                bgs[ng] = gi
                ng += 1
                for bb in range(b0, b1):
                    banks[nb] = gi * B + bb
                    nb += 1
    return nb, nr, ng, npc


@_kernel
def scope_due(nr, ranks, T, RS):
    """Index into ranks[] of the rank with the smallest refresh due, and that due."""
    best = 0
    d = due_of(ranks[0], T, RS)
    for i in range(1, nr):
        v = due_of(ranks[i], T, RS)
        if v < d:
            d = v
            best = i
    return best, d


@_kernel
def prim_prea(ch, nb, banks, nr, ranks, T, BS, RS, CS, ST):
    """PREA over the scope banks (no-op if all closed)."""
    while True:
        t = -1
        for i in range(nb):
            k = banks[i]
            if BS[k, B_ROW] >= 0 and BS[k, B_PRE] > t:
                t = BS[k, B_PRE]
        if t < 0:
            return
        if CS[ch, C_LAST] > t:
            t = CS[ch, C_LAST]
        if CS[ch, C_ROWBUS] > t:
            t = CS[ch, C_ROWBUS]
        j, d = scope_due(nr, ranks, T, RS)
        if t >= d:
            scope_refresh(ranks[j], T, BS, RS, CS, ST, ch)
            continue
        for i in range(nb):
            k = banks[i]
            if BS[k, B_ROW] >= 0:
                BS[k, B_ROW] = -1
                if t + T[T_RP] > BS[k, B_ACT]:
                    BS[k, B_ACT] = t + T[T_RP]
                ST[ch, S_PRE] += 1
        CS[ch, C_LAST] = t
        CS[ch, C_ROWBUS] = t + T[T_PIMROW]
        ST[ch, S_PRECMD] += 1
        return


@_kernel
def prim_actx(ch, row, bgmode, arrival, nb, banks, nr, ranks, ng, bgs, T, BS, GS, RS, CS, ST):
    """ACTAB (bgmode=0: no tRRD/tFAW) or ACTBG (bgmode=1: tRRD_S/L + tFAW, one ACT per BG) over the scope."""
    anyopen = False
    for i in range(nb):
        if BS[banks[i], B_ROW] >= 0:
            anyopen = True
    if anyopen:
        prim_prea(ch, nb, banks, nr, ranks, T, BS, RS, CS, ST)
    while True:
        t = arrival
        for i in range(nb):
            if BS[banks[i], B_ACT] > t:
                t = BS[banks[i], B_ACT]
        if bgmode == 1:
            for i in range(ng):
                if GS[bgs[i], G_ACT] > t:
                    t = GS[bgs[i], G_ACT]
            for i in range(nr):
                r = ranks[i]
                if RS[r, R_ACT] > t:
                    t = RS[r, R_ACT]
                # all BGs of the scope in this rank open at t: tFAW over the ACTs so far + these
                # (the record counts T_ACTBGFAW ACTs: the T_ACTBGFAW-th oldest of the last four bounds it)
                f = RS[r, R_FAW0 + ((RS[r, R_FAWI] + T[T_ACTBGFAW] - 1) & 3)] + T[T_FAW]
                if f > t:
                    t = f
        if CS[ch, C_LAST] > t:
            t = CS[ch, C_LAST]
        if CS[ch, C_ROWBUS] > t:
            t = CS[ch, C_ROWBUS]
        j, d = scope_due(nr, ranks, T, RS)
        if t >= d:
            # t only grows in this loop: the closed form is exact; not under per-bank refresh, whose closed form
            # walks REFpb one per nREFIpb and so never frees every bank of a scope (scope_refresh)
            if T[T_REFMODE] == 2 or refresh_gap(ranks[j], t, T, BS, RS, ST, ch) == 0:
                scope_refresh(ranks[j], T, BS, RS, CS, ST, ch)
            continue
        break
    for i in range(nb):
        k = banks[i]
        BS[k, B_ROW] = row
        BS[k, B_ACT] = t + T[T_RC]
        if t + T[T_RAS] > BS[k, B_PRE]:
            BS[k, B_PRE] = t + T[T_RAS]
        BS[k, B_RD] = t + T[T_RCDRD]
        BS[k, B_WR] = t + T[T_RCDWR]
        BS[k, B_ACTT] = t
    if bgmode == 1:
        for i in range(ng):
            if t + T[T_RRDL] > GS[bgs[i], G_ACT]:
                GS[bgs[i], G_ACT] = t + T[T_RRDL]
        for i in range(nr):
            r = ranks[i]
            if t + T[T_RRDS] > RS[r, R_ACT]:
                RS[r, R_ACT] = t + T[T_RRDS]
            for _ in range(T[T_ACTBGFAW]):
                w = RS[r, R_FAWI]
                RS[r, R_FAW0 + w] = t
                RS[r, R_FAWI] = (w + 1) & 3
    CS[ch, C_LAST] = t
    CS[ch, C_ROWBUS] = t + T[T_PIMROW]
    ST[ch, S_ACT] += nb
    ST[ch, S_ACTCMD] += 1


@_kernel
def prim_macx(ch, row, bgmode, n, flags, arrival, nb, banks, nr, ranks, ng, bgs, npc, pcs, T, BS, GS, RS, US, CS, ST):
    """MACAB (bgmode=0, spacing nCCDAB per pseudo-channel) or MACBG (bgmode=1, nCCD_L/nCCD_S) x n."""
    cls = 0
    nopen = 0
    for i in range(nb):
        if BS[banks[i], B_ROW] == row:
            nopen += 1
    if nopen != nb:
        anyopen = False
        for i in range(nb):
            if BS[banks[i], B_ROW] >= 0:
                anyopen = True
        cls = 2 if anyopen else 1
        prim_actx(ch, row, bgmode, arrival, nb, banks, nr, ranks, ng, bgs, T, BS, GS, RS, CS, ST)
    sp = T[T_CCDAB] if bgmode == 0 else T[T_CCDL]
    i = 0
    while i < n:
        closed = False
        for q in range(nb):
            if BS[banks[q], B_ROW] != row:
                closed = True
        if closed:
            cls = 1
            prim_actx(ch, row, bgmode, arrival, nb, banks, nr, ranks, ng, bgs, T, BS, GS, RS, CS, ST)
        t = arrival
        for q in range(nb):
            v = BS[banks[q], B_ACTT] + T[T_RCDMAC]
            if v > t:
                t = v
        if bgmode == 0:
            for q in range(npc):
                if US[pcs[q], U_MAC] > t:
                    t = US[pcs[q], U_MAC]
        else:
            for q in range(ng):
                if GS[bgs[q], G_RD] > t:
                    t = GS[bgs[q], G_RD]
            for q in range(nr):
                if RS[ranks[q], R_RD] > t:
                    t = RS[ranks[q], R_RD]
        if CS[ch, C_LAST] > t:
            t = CS[ch, C_LAST]
        cb = T[T_COLBUS]
        if CS[ch, cb] > t:
            t = CS[ch, cb]
        j, due = scope_due(nr, ranks, T, RS)
        if t >= due:
            scope_refresh(ranks[j], T, BS, RS, CS, ST, ch)
            continue
        m = n - i
        lim = (due - t + sp - 1) // sp
        if lim < m:
            m = lim
        tl = t + (m - 1) * sp
        for q in range(nb):
            k = banks[q]
            if tl + T[T_RTP] > BS[k, B_PRE]:
                BS[k, B_PRE] = tl + T[T_RTP]
        if bgmode == 0:
            for q in range(npc):
                US[pcs[q], U_MAC] = tl + T[T_CCDAB]
            ST[ch, S_MACAB] += m
        else:
            for q in range(ng):
                if tl + T[T_CCDL] > GS[bgs[q], G_RD]:
                    GS[bgs[q], G_RD] = tl + T[T_CCDL]
            for q in range(nr):
                if tl + T[T_CCDS] > RS[ranks[q], R_RD]:
                    RS[ranks[q], R_RD] = tl + T[T_CCDS]
            ST[ch, S_MACBG] += m
        ST[ch, S_MACBANK] += m * nb
        end = tl + T[T_CL] + T[T_BL]
        if end > CS[ch, C_DONE]:
            CS[ch, C_DONE] = end
        CS[ch, C_LAST] = tl
        CS[ch, cb] = tl + 1
        if cls == 0:
            ST[ch, S_HIT] += m
        else:
            ST[ch, S_HIT] += m - 1
            ST[ch, S_MISS + cls - 1] += 1
        cls = 0
        i += m
    if flags & F_AP:
        for q in range(nb):
            auto_pre(banks[q], T, BS, ST, ch)


@_kernel
def prim_il(ch, row, n, flags, arrival, nb, banks, nr, ranks, ng, bgs, npc, pcs, T, BS, GS, RS, US, CS, ST, scratch):
    """F_IL read record: n bursts to ``row`` round robin over the nb scope banks (rotation order: pseudo-channel
    fastest, then bank group, bank, rank), each burst a repeat-1 RD (prim_col). Before a burst to a closed bank
    (record start, after a refresh) every scope bank that is closed and still has bursts in the record is
    opened, in rotation order from that bank, by in-order ACTs (a controller re-activating the stream's rows
    together); a refresh that a burst would meet is performed first. F_AP: each bank precharges after its last
    burst of the record.

    Closed form (T_IDLESKIP on): the rotation is a max-plus homogeneous map of the state it reads (the
    scope's data buses U_DATA, bank-group and rank RD spacings, C_LAST and the column bus) once the banks'
    constant ACT->RD bounds lie behind the bursts. When a rotation without ACT or refresh advances every
    burst and every such state value by the same d cycles, each later rotation does the same (F(x + d) =
    F(x) + d), so the whole rotations up to the next refresh due are committed at once: every bank's last
    burst at its time + J x d (then F_AP where it was the bank's last), counts x J. Equal to the walk (tested)."""
    PS = npc
    RSz = nr // npc
    GSz = ng // nr
    BSz = nb // ng
    tcur = scratch[5]
    xu = scratch[6]
    xg = scratch[7]
    xr = scratch[8]
    pos = scratch[9]
    mcls = scratch[10]
    for p in range(nb):  # rotation position -> index into banks[] (make_scope order: pch, rank, bg, bank)
        pc = p % PS
        g = (p // PS) % GSz
        b = (p // (PS * GSz)) % BSz
        r = p // (PS * GSz * BSz)
        pos[p] = ((pc * RSz + r) * GSz + g) * BSz + b
        mcls[p] = 0
    NBr = T[T_G] * T[T_B]
    cb = T[T_COLBUS]
    jump = T[T_IDLESKIP] == 1
    for q in range(npc):  # the state the first rotation starts from
        xu[q] = US[pcs[q], U_DATA]
    for q in range(ng):
        xg[q] = GS[bgs[q], G_RD]
    for q in range(nr):
        xr[q] = RS[ranks[q], R_RD]
    xlast = CS[ch, C_LAST]
    xcb = CS[ch, cb]
    have = True
    ev0 = ST[ch, S_ACT] + ST[ch, S_REF] + ST[ch, S_REFPB]  # ACTs and refreshes before this rotation
    j = 0
    while j < n:
        p = j % nb
        k = banks[pos[p]]
        if BS[k, B_ROW] != row:
            for q0 in range(nb):
                if j + q0 >= n:
                    break
                q = (p + q0) % nb
                kq = banks[pos[q]]
                if BS[kq, B_ROW] != row:
                    mcls[q] = 2 if BS[kq, B_ROW] >= 0 else 1
                    prim_act(kq, row, arrival, T, BS, GS, RS, CS, ST)
            if BS[k, B_ROW] != row:  # closed again by a refresh its rank met during the ACTs
                continue
        r = k // NBr
        t = earliest_col(k, np.int64(0), T, BS, GS, RS, US, CS)
        if arrival > t:
            t = arrival
        if t >= due_of(r, T, RS):
            auto_refresh(r, T, BS, RS, CS, ST, ch)
            continue
        fl = flags & F_AP if j + nb >= n else 0
        prim_col(k, row, np.int64(0), np.int64(1), np.int64(fl), arrival, T, BS, GS, RS, US, CS, ST)
        if mcls[p] > 0:
            ST[ch, S_HIT] -= 1
            ST[ch, S_MISS + mcls[p] - 1] += 1
            mcls[p] = 0
        tcur[p] = CS[ch, C_LAST]
        j += 1
        if p != nb - 1 or not jump:
            continue
        ev = ST[ch, S_ACT] + ST[ch, S_REF] + ST[ch, S_REFPB]
        if ev != ev0:  # the rotation met an ACT or a refresh: not the homogeneous map
            ev0 = ev
            have = False
            continue
        if have:
            d = CS[ch, C_LAST] - xlast
            good = d > 0 and CS[ch, cb] - xcb == d
            for q in range(nb):  # the banks' ACT->RD bounds behind the rotation: never binding again
                if BS[banks[pos[q]], B_RD] > xlast:
                    good = False
            for q in range(npc):
                if US[pcs[q], U_DATA] - xu[q] != d:
                    good = False
            for q in range(ng):
                if GS[bgs[q], G_RD] - xg[q] != d:
                    good = False
            for q in range(nr):
                if RS[ranks[q], R_RD] - xr[q] != d:
                    good = False
            if good:
                J = (n - j) // nb  # whole rotations left
                for q in range(nb):
                    lim = (due_of(banks[pos[q]] // NBr, T, RS) - 1 - tcur[q]) // d
                    if lim < J:
                        J = lim
                if J >= 1:
                    for q in range(nb):
                        kq = banks[pos[q]]
                        tcur[q] += J * d
                        commit_col(kq, np.int64(0), tcur[q], np.int64(1), T, BS, GS, RS, US, CS, ST)
                        BS[kq, B_NACC] += J - 1
                    ST[ch, S_RD] += nb * (J - 1)
                    ST[ch, S_HIT] += nb * J
                    j += J * nb
                    if flags & F_AP:  # banks whose last burst was jumped over
                        for q in range(nb):
                            if j + q >= n:
                                auto_pre(banks[pos[q]], T, BS, ST, ch)
                    have = False
                    continue
        for q in range(npc):
            xu[q] = US[pcs[q], U_DATA]
        for q in range(ng):
            xg[q] = GS[bgs[q], G_RD]
        for q in range(nr):
            xr[q] = RS[ranks[q], R_RD]
        xlast = CS[ch, C_LAST]
        xcb = CS[ch, cb]
        have = True


# ============================================================== the record walker


@_kernel
def run_kernel(op, flags, chn, pch, rank, bg, bank, row, rep, cyc, arr, T, BS, GS, RS, US, CS, ST, scratch):
    """Walk command records in order. Record arrays are plain numpy arrays (see API.md)."""
    P, R, G, B = T[T_P], T[T_R], T[T_G], T[T_B]
    NB = G * B
    banks = scratch[0]
    ranks = scratch[1]
    bgs = scratch[2]
    pcs = scratch[3]
    for i in range(op.shape[0]):
        o = op[i]
        ch = np.int64(chn[i])
        a = arr[i]
        if a > CS[ch, C_LAST] and o != REF and o != REFPB:  # not-before cycle: in-order time moves up
            CS[ch, C_LAST] = a  # (REF/REFPB: out of band, arrival = due)
        if o == NOP:
            continue
        if o == RD and flags[i] & F_IL:
            nb, nr, ng, npc = make_scope(
                ch, np.int64(pch[i]), np.int64(rank[i]), np.int64(bg[i]), np.int64(bank[i]), T, banks, ranks, bgs, pcs
            )
            prim_il(
                ch,
                np.int64(row[i]),
                np.int64(rep[i]),
                flags[i],
                a,
                nb,
                banks,
                nr,
                ranks,
                ng,
                bgs,
                npc,
                pcs,
                T,
                BS,
                GS,
                RS,
                US,
                CS,
                ST,
                scratch,
            )
            continue
        if o == ACT or o == PRE or o == RD or o == WR or o == MACSB or o == REFPB:
            k = (((ch * P + pch[i]) * R + rank[i]) * G + bg[i]) * B + bank[i]
            if o == RD or o == WR or o == MACSB:
                w = np.int64(0) if o == RD else (np.int64(1) if o == WR else np.int64(2))  # one prim_col variant
                prim_col(k, np.int64(row[i]), w, np.int64(rep[i]), np.int64(flags[i]), a, T, BS, GS, RS, US, CS, ST)
            elif o == ACT:
                prim_act(k, np.int64(row[i]), a, T, BS, GS, RS, CS, ST)
            elif o == PRE:
                prim_pre(k, T, BS, GS, RS, CS, ST)
            else:  # REFPB: the per-bank refresh group holding this bank
                rr = k // NB
                stride = NB // T[T_PBG]
                refresh_rank(rr, a, (k % NB) % stride, T, BS, CS, ST, ch)
            continue
        if o == FIX:
            t = CS[ch, C_LAST]
            if a > t:
                t = a
            CS[ch, C_LAST] = t
            if CS[ch, C_FIX] > t:
                t = CS[ch, C_FIX]
            CS[ch, C_FIX] = t + cyc[i]
            if t + cyc[i] > CS[ch, C_DONE]:
                CS[ch, C_DONE] = t + cyc[i]
            ST[ch, S_FIXC] += cyc[i]
            continue
        if o == BARRIER or o == MODE:
            t = CS[ch, C_LAST]
            if o == BARRIER and CS[ch, C_DONE] > t:  # MODE: dead time after the last issue, no drain
                t = CS[ch, C_DONE]
            if a > t:
                t = a
            if o == MODE:
                t += T[T_MODE]
                ST[ch, S_MODE] += 1
                if t > CS[ch, C_DONE]:
                    CS[ch, C_DONE] = t
            else:
                ST[ch, S_BARRIER] += 1
            CS[ch, C_LAST] = t
            continue
        nb, nr, ng, npc = make_scope(
            ch, np.int64(pch[i]), np.int64(rank[i]), np.int64(bg[i]), np.int64(bank[i]), T, banks, ranks, bgs, pcs
        )
        if o == PREA:
            prim_prea(ch, nb, banks, nr, ranks, T, BS, RS, CS, ST)
        elif o == ACTAB or o == ACTBG:
            prim_actx(
                ch, np.int64(row[i]), 1 if o == ACTBG else 0, a, nb, banks, nr, ranks, ng, bgs, T, BS, GS, RS, CS, ST
            )
        elif o == MACAB or o == MACBG:
            prim_macx(
                ch,
                np.int64(row[i]),
                1 if o == MACBG else 0,
                np.int64(rep[i]),
                flags[i],
                a,
                nb,
                banks,
                nr,
                ranks,
                ng,
                bgs,
                npc,
                pcs,
                T,
                BS,
                GS,
                RS,
                US,
                CS,
                ST,
            )
        elif o == REF:
            for q in range(nr):
                refresh_rank(ranks[q], a, np.int64(-1), T, BS, CS, ST, ch)
        elif o == BUF:
            t = CS[ch, C_LAST]
            if a > t:
                t = a
            cb = T[T_COLBUS]
            if CS[ch, cb] > t:
                t = CS[ch, cb]
            CS[ch, C_LAST] = t
            CS[ch, cb] = t + 1
            unit = T[T_BUFUNITBG] if bg[i] >= 0 else T[T_BUFUNIT]
            for q in range(npc):
                u = pcs[q]
                s = t
                if US[u, U_BUF] > s:
                    s = US[u, U_BUF]
                e = s + T[T_BUFSETUP] + rep[i] * unit
                US[u, U_BUF] = e
                if e > CS[ch, C_DONE]:
                    CS[ch, C_DONE] = e
            ST[ch, S_BUFU] += rep[i] * npc
    return 0


@_kernel
def tail_refreshes(T, RS, CS, ST):
    """Count (for energy only) refreshes that fall in idle time up to each channel's end."""
    if T[T_REFMODE] == 0:
        return
    per = T[T_REFIPB] if T[T_REFMODE] == 2 else T[T_REFI]
    rpc = T[T_R] * T[T_P]
    for r in range(RS.shape[0]):
        ch = r // rpc
        end = CS[ch, C_DONE]
        if CS[ch, C_LAST] > end:
            end = CS[ch, C_LAST]
        due = RS[r, R_DUE]
        if due <= end:
            nref = (end - due) // per + 1
            if T[T_REFMODE] == 2:
                ST[ch, S_REFPB] += nref
                ST[ch, S_REFBANKCYC] += nref * T[T_RFCPB] * T[T_PBG]
            else:
                ST[ch, S_REF] += nref
                ST[ch, S_REFBANKCYC] += nref * T[T_RFC] * T[T_G] * T[T_B]


# Numba-IR inlined copies of the per-command primitives for the request scheduler's hot loop (sched_heap.py): a
# Numba call passes every array as ~7 scalars on the stack and is not inlined by LLVM, which dominated there.
_INLINED = ("earliest_act", "earliest_pre", "earliest_col", "commit_act", "commit_pre", "commit_col", "auto_pre")
_active = False
_marked = False
_ACTIVATE_LOCK = threading.RLock()  # RLock: the decorators of modules imported here call activate() again


def activate():
    """Compile this module's kernels on first use (Numba imported here, with attnsim's cache locator): the module's
    attributes become Numba dispatchers, so compiled callers (``K.prim_col`` in sched_*.py, ``prim_col`` here)
    resolve to compiled callees; ``<name>_i`` are the inlined copies. Returns the compiled ``run_kernel``."""
    global _active
    with _ACTIVATE_LOCK:  # threads of a sweep point may walk at once: one set of dispatchers
        if not _active:
            from attnsim.core import jitcache

            jitcache.ensure()
            from numba import njit

            g = globals()
            for name, f in _KERNELS.items():
                g[name] = njit(**HOT_OPTIONS)(f)
            for name in _INLINED:
                g[name + "_i"] = njit(**INLINE_OPTIONS)(_KERNELS[name])
            _active = True
    return globals()["run_kernel"]


def compiled_active() -> bool:
    """Whether this process has activated the compiled tier (its kernels then serve every walk)."""
    return _active


def compiled_cached() -> bool:
    """Whether the kernel cache holds this module's compiled kernels for its current sources (no Numba import)."""
    from attnsim.core import jitcache

    return jitcache.group_warm(__file__)


def mark_compiled_cached() -> None:
    """After a compiled walk: the cache holds this module's kernels (once per process)."""
    global _marked
    if not _marked:
        from attnsim.core import jitcache

        jitcache.mark_group_warm(__file__)
        _marked = True


def _interpreted_namespace() -> dict:
    """This module's globals with every kernel rebound to it: an interpreted walk calls plain functions only, also
    after activate() replaced the module's attributes by dispatchers."""
    ns = dict(globals())
    for name, f in _KERNELS.items():
        ns[name] = types.FunctionType(f.__code__, ns, name, f.__defaults__, f.__closure__)
    return ns


INTERPRETED = _interpreted_namespace()  # the plain tier: INTERPRETED["run_kernel"](...), same arguments
