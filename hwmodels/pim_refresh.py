"""NewtonSim's refresh guard for PIM operations (NeuPIMs, casys-kaist/NeuPIMs f299af3 extern/NewtonSim).

NewtonSim refreshes one rank every tREFI / ranks CK (DRAMsim3 RANK_LEVEL_STAGGERED, ``refresh.cc``) and a PIM
operation needs every bank of every rank, so the PIM stops for each rank's refresh (the DRAM spec's
``controller: dramsim3`` staggers them on the engine too). Its PIM command queue (``neupims_command_queue.cc``
``GetReadyInPIMQueue`` / ``CanMeetRefreshDeadline``; the same in the npu+pim branch's
``newton_command_queue.cc``) also never starts an operation that might run into the next refresh: before a
GWRITE or a GEMV tile (P_HEADER: G_ACTs, COMPs, READRESes) it estimates the operation's latency
(``channel_state.cc`` ``EstimatePIMOperationLatency``) and starts it only if the cycles left to the next
refresh exceed the estimate; otherwise the PIM waits (``skip_pim_``) until that refresh is issued. The
estimate is conservative (each bank's open PIM row precharged one by one at AL + tRTP, tFAW per pair of
G_ACTs, 2 CK per COMP with the COMP count rounded up to a power of two), so each refresh interval also loses
the slack left at its end.

:func:`guarded_cycles` times one channel's records that way: the channel's engine time without refresh is
apportioned to its operations (record runs ending at a BARRIER or a PIM_PRECHARGE) by each one's engine
time alone (cached by command signature), then the operations are walked against the refresh schedule with
NewtonSim's estimate and start rule; an operation that is not a PIM one (NPU traffic between tiles) is not
guarded and takes the refreshes that fall inside it.
"""

from __future__ import annotations

import numpy as np

from attnsim.isa.lower import CMD_FIELDS, ENGINE_CODES

_BUF, _BARRIER, _PREA = ENGINE_CODES["BUF"], ENGINE_CODES["BARRIER"], ENGINE_CODES["PREA"]
_ACTBG, _MACAB = ENGINE_CODES["ACTBG"], ENGINE_CODES["MACAB"]
_PIM_OPS = (_BUF, _BARRIER, _PREA, _ACTBG, _MACAB)
# NewtonSim configuration.cc: gwrite_delay = (tCCD_S + tCCD_L) x 32 (a 1 KB row into the global buffer)
GWRITE_ROW_UNITS = 32
_DURATIONS: dict = {}  # (DRAM fingerprint, signature) -> engine cycles of the operation alone


def split_units(c: dict) -> list[tuple[int, int]]:
    """(start, end) record ranges of one channel's operations: each ends at a BARRIER or a PIM_PRECHARGE
    (PREA); a BARRIER right after another boundary joins the operation before it."""
    op = np.asarray(c["op"])
    units, lo = [], 0
    for e in np.flatnonzero((op == _PREA) | (op == _BARRIER)).tolist():
        if e == lo and units:
            units[-1] = (units[-1][0], e + 1)
        else:
            units.append((lo, e + 1))
        lo = e + 1
    if lo < len(op):
        units.append((lo, len(op)))
    return units


def _signature(c: dict, lo: int, hi: int) -> tuple:
    return tuple(zip(*(c[k][lo:hi].tolist() for k in ("op", "repeat", "rank", "bg", "cycles"))))


def _features(c: dict, units: list) -> tuple:
    """Per operation: ACTBG count, COMP count (MACAB repeats), BUF records, all-PIM flag."""
    op = np.asarray(c["op"])
    starts = np.array([lo for lo, _ in units], np.int64)
    red = lambda x: np.add.reduceat(x.astype(np.int64), starts) if len(starts) else np.zeros(0, np.int64)
    n = np.array([hi - lo for lo, hi in units], np.int64)
    return (
        red(op == _ACTBG),
        red(np.where(op == _MACAB, np.asarray(c["repeat"]), 0)),
        red(op == _BUF),
        red(np.isin(op, _PIM_OPS)) == n,
    )


def estimate_cycles(t, n_gact: int, comps: int, n_buf: int, pim: bool, open_banks: int) -> int | None:
    """NewtonSim's EstimatePIMOperationLatency of an operation with ``n_gact`` G_ACTs, ``comps`` COMPs and
    ``n_buf`` GWRITE / READRES records (``t``: DRAM timing; ``open_banks``: banks whose PIM row is still
    open, each precharged in turn); None: not a PIM operation."""
    if not pim:
        return None
    if n_gact:  # GEMV tile (P_HEADER)
        comps = 1 << max(0, comps - 1).bit_length()  # the header carries log2(num_comps), rounded up
        return (
            open_banks * t.nRTP
            + t.nFAW * (n_gact // 2 - 1)
            + t.nRCDRD
            + max(t.nBL, t.nCCD_S) * max(comps, 6)
            + max(t.nBL, t.nCCD_L) * max(n_buf - 1, 0)
        )
    if n_buf:  # GWRITE into the global buffer (its bank closed after a refresh: ACT first)
        return t.nRP + t.nRCDRD + (t.nCCD_S + t.nCCD_L) * GWRITE_ROW_UNITS
    return None


def guarded_cycles(dram, c: dict, total: float, run, staggered: bool = True) -> int:
    """Cycles of one channel's records ``c`` under the refresh schedule (one rank every nREFI / ranks when
    ``staggered``, else every rank every nREFI) with NewtonSim's refresh guard on its PIM operations.
    ``total``: the engine's cycles for ``c`` without refresh (and without arrivals); ``run(records) -> cycles``: the
    engine on one channel without refresh, used once per distinct operation (cached) to apportion ``total`` to them.
    Records with an ``arrival`` (the NPU issue port, isa/lower_newton.py) start an operation no earlier than its first
    record's arrival and end it no earlier than its last one's; refreshes due while the channel waits cost nothing."""
    t, org = dram.timing, dram.org
    period = t.nREFI // org.ranks if staggered else t.nREFI
    banks_per_rank = org.bank_groups * org.banks_per_group
    fp = (dram.name, repr(dram.timing), repr(dram.pim), repr(dram.org))
    units = split_units(c)
    alone = []
    for lo, hi in units:
        key = (fp, _signature(c, lo, hi))
        if key not in _DURATIONS:
            _DURATIONS[key] = run({k: np.asarray(c[k])[lo:hi] for k in CMD_FIELDS})
        alone.append(_DURATIONS[key])
    scale = total / max(sum(alone), 1.0)  # operations back to back overlap a little (tFAW windows, tRP)
    now, due, open_ranks = 0.0, period, 0
    stall = t.nRP + t.nRFC  # PIM rows of the rank closed, REF, tRFC before its next G_ACT
    n_gact, comps, n_buf, pim = (x.tolist() for x in _features(c, units))
    arrival = np.asarray(c["arrival"], np.int64) if "arrival" in c else None
    for j, a in enumerate(alone):
        lo, hi = units[j]
        if arrival is not None and arrival[lo] > now:  # the NPU issue port has not sent it yet: idle until then,
            rel = int(arrival[lo])  # the refreshes due in the gap done there (PIM rows closed),
            if due <= rel - stall:  # counted in closed form (a slow port leaves long gaps)
                k = (rel - stall - due) // period + 1
                due += k * period
                open_ranks = max(0, open_ranks - k)
            now = float(rel)
        est = estimate_cycles(t, n_gact[j], comps[j], n_buf[j], pim[j], open_ranks * banks_per_rank)
        if est is not None:
            while due - now - est <= 0:  # CanMeetRefreshDeadline: the remaining slack must stay > 0
                now = max(now, due) + stall
                due += period
                open_ranks = max(0, open_ranks - 1)
        d = a * scale
        while est is None and due <= now + d:  # not guarded: the refreshes falling inside it
            d += stall
            due += period
        now += d
        if arrival is not None:  # not done before its last instruction arrived
            now = max(now, float(arrival[lo:hi].max()))
        if n_gact[j]:
            open_ranks = org.ranks
    return int(round(now))
