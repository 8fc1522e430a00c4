"""Steady-state extrapolation of periodic request streams over whole refresh windows (DESIGN.md "Timing").

A periodic stream (addresses an arithmetic progression, one R/W kind, one arrival cycle) is simulated window by
window (window = one refresh period: nREFI, or nREFIpb x refresh groups for per-bank refresh, so every window
holds the same refresh work). The scheduler records the requests served and the statistics at every window
boundary and stops after ``windows`` windows; after a warm-up quarter, the served-per-window sequence must
either repeat exactly with some period p (then whole periods are used) or give the same rate in both halves
within boundary jitter (one request per boundary). The remainder of the stream is then extrapolated linearly:
cycles, statistics (hits, misses, ACTs, refreshes, ...) and latency. Otherwise the caller simulates in full.
The error against full simulation is measured in tests/test_dram_sched.py and bench/bench_dram.py.
"""

from __future__ import annotations

import numpy as np

from attnsim.hwmodels.dram import kernel as K

DEFAULT_WINDOWS = 64
REL_TOL = 1e-3
# refreshes are not extrapolated linearly: every rank (also the idle ones) refreshes once per period up to the
# end, which engine.summarize -> kernel.tail_refreshes counts from the rank's next due cycle
REFRESH_COLS = np.array(
    [K.S_REF, K.S_REFPB, K.S_REFBANKCYC]
)  # rate agreement between the two halves of the steady region (beyond boundary jitter)


def window_cycles(T: np.ndarray) -> int:
    """One refresh period of the kernel's refresh mode (cycles); nREFI when refresh is off."""
    if T[K.T_REFMODE] == 2:
        return int(T[K.T_REFIPB] * ((T[K.T_G] * T[K.T_B]) // T[K.T_PBG]))
    return int(T[K.T_REFI])


def is_periodic(addr: np.ndarray, w: np.ndarray, arr: np.ndarray) -> bool:
    """Affine address stream with one access kind and one arrival cycle (timing then depends only on the
    request index modulo the mapping's period)."""
    n = addr.shape[0]
    if n < 2:
        return False
    a = addr.astype(np.int64, copy=False)
    return bool(np.all(np.diff(a) == a[1] - a[0]) and np.all(w == w[0]) and np.all(arr == arr[0]))


def steady_region(served: np.ndarray):
    """(start, end, period) record indices of the steady region, or None if the rate has not settled.
    ``served[j]``: requests served before boundary j+1."""
    nw = served.shape[0]
    if nw < 8:
        return None
    d = np.diff(served)  # d[j-1] = served in window j
    j0 = nw // 4
    e = nw - 1
    seg = d[j0:]
    for p in range(1, (e - j0) // 2 + 1):  # at least two whole periods seen
        if np.array_equal(seg[p:], seg[:-p]):
            s = e - p * ((e - j0) // p)
            return s, e, p
    m = (j0 + e) // 2
    la, lb = m - j0, e - m
    ra = (served[m] - served[j0]) / la
    rb = (served[e] - served[m]) / lb
    if rb > 0 and abs(ra - rb) <= 2.0 / la + 2.0 / lb + REL_TOL * rb:
        return j0, e, 0
    return None


def extrapolate_channel(served, stats, lat, first, n_req, win, tail_cycles, arrival0):
    """Extrapolate one channel from its window records to ``n_req`` requests.

    Window model: after each boundary the refresh stalls service for ``stall`` cycles (mean of ``first`` over
    the steady region), then requests are served at the busy rate. The remaining requests fill whole windows
    and a last partial one (so a refresh falling in the tail is charged in full). Returns (cycles, stats row
    (int64), latency sum, info dict) or None if not settled."""
    reg = steady_region(served)
    if reg is None:
        return None
    s, e, p = reg
    dr = int(served[e] - served[s])
    if dr <= 0:
        return None
    if p:
        per_win = dr / (e - s)  # requests per window over whole periods
    else:  # least-squares rate over the region (averages the jitter)
        x = np.arange(s, e + 1, dtype=np.float64)
        per_win = float(np.polyfit(x, served[s : e + 1].astype(np.float64), 1)[0])
    stall = float(np.mean(first[s:e]))
    busy = per_win / (win - stall)  # requests per busy cycle
    rem = n_req - int(served[e])
    t_e = (e + 1) * win  # boundary cycle of record e
    whole = int(np.ceil(rem / per_win)) - 1 if rem > 0 else 0
    last = rem - whole * per_win  # requests in the final (partial) window, > 0
    cycles = int(round(t_e + whole * win + stall + last / busy + tail_cycles))
    st = stats[e] + np.rint((stats[e] - stats[s]).astype(np.float64) * (rem / dr)).astype(np.int64)
    st[REFRESH_COLS] = stats[e][REFRESH_COLS]  # refreshes: counted from the refresh clock (tail_refreshes)
    per_req = win / per_win
    lat_sum = float(lat[e]) + rem * (t_e + stall + tail_cycles - arrival0) + per_req * rem * (rem + 1) / 2.0
    info = {
        "windows": int(e + 1),
        "window_cycles": int(win),
        "period_windows": int(p),
        "simulated_requests": int(served[e]),
        "cycles_per_request": per_req,
        "refresh_stall_cycles": stall,
    }
    return cycles, st, lat_sum, info
