"""Memory-controller front end for request streams: address mapping, open/closed page, FR-FCFS.

Each channel has one bounded request queue of ``queue`` entries per pseudo-channel (default 32,
DRAMsim3's trans queue size, dram_timing.md §1; HBM pseudo-channels have their own data buses). Scheduling is
event-driven FR-FCFS: among queued requests the next command (PRE, ACT or the column command) that can issue earliest
goes first; ties go to row hits, then to
the oldest. A PRE that would close a row still wanted by a queued hit is held back (rules.py pre_holdback; the
``ramulator2`` preset holds it back only for the request whose ACT opened the row, and lets such requests issue
their column commands before a due refresh: refresh_waits_active). Closed page:
auto-precharge after the last queued hit of the row. Requests enter the queue in arrival order,
when there is room, once their arrival cycle is reached. A rule set with ``write_queue_entries`` (rules.py,
``ramulator2``) gives writes their own queue per channel and serves reads and writes in turns between the
write-queue watermarks (write drain). Timing rules and refresh are those of the
command engine (kernel.py), so the emitted command stream replays to the same cycles.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram import steady
from attnsim.hwmodels.dram.engine import CMD_DTYPE, CommandResult, summarize, timing_vector
from attnsim.hwmodels.dram.rules import MAX_QUEUE, controller_rules, refuse_unread_by_stream
from attnsim.hwmodels.dram.sched_cmdqueue import ctrl_kernel_twolevel
from attnsim.hwmodels.dram.sched_flat import AGE_LIMIT, MAX_BANKS, ctrl_kernel_flat
from attnsim.hwmodels.dram.sched_heap import ctrl_kernel_fast
from attnsim.hwmodels.dram.sched_scan import ctrl_kernel_scan
from attnsim.hwmodels.dram.spec import DRAMSpec, load_dram_spec, parse_mapping

K.activate()  # Numba with attnsim's cache locator; kernel.py's kernels compiled, as callees of these

DEFAULT_QUEUE = 32  # DRAMsim3 HBM2 config: trans queue 32 (dram_timing.md §1)
MAX_EMIT = 1 << 25  # emitted command records (emit=True): 2.4 GB


def decode(spec: DRAMSpec, addr: np.ndarray, mapping: str | None = None):
    """Byte addresses -> (channel, flat bank index, row) int32 arrays using the mapping string (API.md). int32
    holds every validated org (spec.py: <= 2**20 banks, <= 2**30 rows) and halves the memory the stream's pages
    cost (a 10M-request stream: 80 MB instead of 160 MB written). ``addr`` may be a strided view (the fields of
    a memory-mapped .npy trace): it is read in place, not copied."""
    o = spec.org
    sh, mk = _fields(spec, mapping)
    a = _addresses(addr)
    n = a.shape[0]
    k, row = np.empty(n, np.int32), np.empty(n, np.int32)
    if mk[0] == 0:  # one channel: all zeros, not written (calloc'd pages: a 10M-request trace saves ~0.1-0.2 s)
        ch = np.zeros(n, np.int32)
        _decode_kernel(a, sh, mk, o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group, ch[:0], k, row)
    else:
        ch = np.empty(n, np.int32)
        _decode_kernel(a, sh, mk, o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group, ch, k, row)
    return ch, k, row


def _fields(spec: DRAMSpec, mapping: str | None):
    """Shift and mask of the Ch, Pc, Ra, Bg, Ba, Ro fields of a byte address (mask 0: the field is absent)."""
    o = spec.org
    try:
        parts = parse_mapping(mapping or spec.default_mapping, o)
    except ValueError as exc:
        raise ConfigError(str(exc), key="mapping") from None
    shift = int(np.log2(o.burst_bytes))
    names = ("Ch", "Pc", "Ra", "Bg", "Ba", "Ro")
    sh = np.zeros(6, np.uint64)
    mk = np.zeros(6, np.uint64)
    for name, bits in reversed(parts):
        if name in names:
            sh[names.index(name)] = shift
            mk[names.index(name)] = (1 << bits) - 1
        shift += bits
    return sh, mk


def _addresses(addr) -> np.ndarray:
    """A 1-D uint64 array of the addresses: the caller's own (a strided view too) when it is one."""
    a = np.asarray(addr)
    if a.dtype != np.uint64 or a.ndim != 1:
        a = np.ascontiguousarray(a.astype(np.uint64, copy=False)).reshape(-1)
    return a


def decode_by_channel(spec: DRAMSpec, addr, w, arr, mapping: str | None = None):
    """The stream decoded straight into channel-contiguous order (stable within a channel): (starts, bank, row,
    write, arrival), starts[c]..starts[c + 1] being channel c's requests. One counting pass and one scatter
    pass over the addresses, so a multi-channel stream writes no more pages than a one-channel one (no order
    array, no decoded copy to permute); ``arr`` is permuted only when it has a non-zero cycle (else zeros)."""
    o = spec.org
    n_ch = o.channels
    if n_ch == 1:
        _, k, row = decode(spec, addr, mapping)
        return np.array([0, k.shape[0]], np.int64), k, row, w, arr
    sh, mk = _fields(spec, mapping)
    a = _addresses(addr)
    n = a.shape[0]
    starts = _channel_starts(a, sh[0], mk[0], n_ch)
    k, row, w2 = np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int8)
    timed = bool(arr.any())
    arr2 = np.empty(n, np.int64) if timed else np.zeros(n, np.int64)
    _decode_scatter(
        a, sh, mk, o.pseudo_channels, o.ranks, o.bank_groups, o.banks_per_group, starts, w, arr, timed, k, row, w2, arr2
    )
    return starts, k, row, w2, arr2


@njit(cache=True)
def _channel_starts(a, s0, m0, n_ch):
    """starts[c] = the number of requests of channels < c (n_ch + 1 entries)."""
    cnt = np.zeros(n_ch + 1, np.int64)
    for i in range(a.shape[0]):
        cnt[np.int64((a[i] >> s0) & m0) + 1] += 1
    for c in range(n_ch):
        cnt[c + 1] += cnt[c]
    return cnt


@K.inline
def _address_fields(x, s, m, P, R, G, B):
    """(channel, flat bank index, row) of byte address x; s / m: the Ch Pc Ra Bg Ba Ro shifts and masks as
    tuples (read once by the caller: stores into the outputs may alias arrays)."""
    c = np.int64((x >> s[0]) & m[0])
    k = (
        ((c * P + np.int64((x >> s[1]) & m[1])) * R + np.int64((x >> s[2]) & m[2])) * G + np.int64((x >> s[3]) & m[3])
    ) * B + np.int64((x >> s[4]) & m[4])
    return c, k, np.int64((x >> s[5]) & m[5])


@njit(cache=True)
def _decode_scatter(a, sh, mk, P, R, G, B, starts, w, arr, timed, k, row, w2, arr2):
    """_decode_kernel writing request i at its channel-contiguous position (a stable counting sort)."""
    s = (sh[0], sh[1], sh[2], sh[3], sh[4], sh[5])
    m = (mk[0], mk[1], mk[2], mk[3], mk[4], mk[5])
    pos = starts[:-1].copy()
    for i in range(a.shape[0]):
        c, kk, r = _address_fields(a[i], s, m, P, R, G, B)
        j = pos[c]
        pos[c] = j + 1
        k[j] = kk
        row[j] = r
        w2[j] = w[i]
        if timed:
            arr2[j] = arr[i]


@njit(cache=True)
def _decode_kernel(a, sh, mk, P, R, G, B, ch, k, row):
    """One pass over the addresses (the mapping as shift/mask per field; mask 0 = field absent). An empty ``ch``:
    the channel is 0 and not stored."""
    s = (sh[0], sh[1], sh[2], sh[3], sh[4], sh[5])
    m = (mk[0], mk[1], mk[2], mk[3], mk[4], mk[5])
    wch = ch.shape[0] > 0
    for i in range(a.shape[0]):
        c, k[i], row[i] = _address_fields(a[i], s, m, P, R, G, B)
        if wch:
            ch[i] = c


@dataclass
class RequestResult(CommandResult):
    requests: int = 0
    bandwidth_gbps: float = 0.0
    peak_bandwidth_gbps: float = 0.0
    mean_latency_cycles: float = 0.0
    commands: np.ndarray | None = None  # emitted command stream (emit=True)
    extrapolated: bool = False  # steady-state extrapolation used (extrapolate=True on a periodic stream)
    skipped_requests: int = 0  # requests served by exact skip-ahead over recurring states (recur.py)
    skip_jumps: int = 0  # number of such jumps
    steady: dict | None = None  # its details (windows, period, simulated requests per channel)


def _symmetric(k, row, w, arr, starts, n_ch, spec) -> bool:
    """True if every channel gets the same local request sequence (bank within channel, row, R/W, arrival);
    the arrays are channel-contiguous (decode_by_channel)."""
    cnt = np.diff(starts)
    if n_ch < 2 or np.any(cnt != cnt[0]) or cnt[0] == 0:
        return False
    return bool(_same_channels(starts, k, row, w, arr, spec.banks_per_channel))


@njit(cache=True)
def _same_channels(starts, k, row, w, arr, bpc):
    m = starts[1] - starts[0]
    for c in range(1, starts.shape[0] - 1):
        for j in range(m):
            i0 = starts[0] + j
            i = starts[c] + j
            if k[i] % bpc != k[i0] % bpc or row[i] != row[i0] or w[i] != w[i0] or arr[i] != arr[i0]:
                return False
    return True


MAX_THREADS = 1024


def check_threads(threads, n_ch: int, scheduler: str, emit: bool, rules, key: str = "threads") -> None:
    """``threads`` takes effect or is refused: an integer in [1, MAX_THREADS], at most the device's channels (a
    thread runs at least one); > 1 only where channel groups can run apart (the fast scheduler, no command
    emission, no two-level queues)."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"expected an integer in [1, {MAX_THREADS}], got {threads!r}", key=key)
    if threads == 1:
        return
    if threads > n_ch:  # one rule for every device: a thread runs at least one channel (1 channel: no threads)
        raise ConfigError(
            f"threads run channels apart: expected at most {n_ch} (the device's channels), got {threads}", key=key
        )
    if scheduler != "fast" or emit or rules.cmd_queue_entries:
        raise ConfigError(
            "threads > 1 run only in the fast scheduler without command emission or the dramsim3 "
            f"preset's two-level queues; expected 1 here, got {threads}",
            key=key,
        )


def _flat_in_threads(threads: int, counts: np.ndarray, args: tuple, windows: tuple, skip: bool, SKO: np.ndarray) -> int:
    """ctrl_kernel_flat over groups of the channels in parallel threads (it releases the GIL). A channel's
    state rows, statistics and latency slot are its own, so each group writes only its own; the per-channel
    window records (WN..WF, rows by position in ``chans``) are per group and copied back. Groups are balanced
    by request count (longest first onto the least loaded group). ``args``: ctrl_kernel_flat's arguments up to
    the window records, ``windows``: (WN, WR, WS, WL, WF)."""
    from concurrent.futures import ThreadPoolExecutor

    chans = args[1]
    groups = [[] for _ in range(min(threads, chans.shape[0]))]
    load = [0] * len(groups)
    for i in np.argsort(-counts, kind="stable"):
        g = load.index(min(load))
        groups[g].append(int(i))
        load[g] += int(counts[i])

    def run(idx):
        idx = np.array(sorted(idx), np.int64)
        w = [a[idx] for a in windows]
        sko = np.zeros_like(SKO)
        ne = ctrl_kernel_flat(args[0], chans[idx], *args[2:], *w, skip, sko)
        return idx, w, sko, ne

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        done = list(pool.map(run, groups))
    total = 0
    for idx, w, sko, ne in done:
        for full, part in zip(windows, w):
            full[idx] = part
        SKO += sko
        total += ne
    return total


def simulate_requests(
    spec,
    addr,
    is_write,
    arrival=None,
    *,
    mapping: str | None = None,
    page: str = "open",
    queue: int | None = None,
    refresh: str | None = None,
    symmetry: bool = True,
    emit: bool = False,
    scheduler: str = "fast",
    extrapolate: bool = False,
    steady_windows: int = steady.DEFAULT_WINDOWS,
    idle_skip: bool = True,
    controller: str | None = None,
    skip_ahead: bool | None = None,
    threads: int = 1,
) -> RequestResult:
    """Run a request stream through the controller + engine (API.md). Arrays: byte address, is_write, arrival.

    ``scheduler``: "fast" (exact per-bank candidate keys + one min-scan per command, flat.py), "heap" (per-bank
    FIFOs + lazy heap, sched.py) or "scan" (reference queue scan); all three give the same results.
    ``extrapolate``: on a periodic stream (steady.is_periodic), simulate ``steady_windows`` refresh windows per
    channel and extrapolate the rest (steady.py); ignored otherwise (``.extrapolated`` says which was used).
    Idle gaps cost nothing: the scheduler jumps to the next arrival and refreshes an idle rank in closed form
    (kernel.refresh_gap; ``idle_skip=False`` walks them one by one, same results, for tests).
    ``controller``: rule-set preset (rules.py; default the spec's ``controller``); ``queue`` (entries per
    pseudo-channel) defaults to the preset's depth. ``skip_ahead``: jump over exactly recurring controller states
    (recur.py: identical results); None = wherever the scheduler has it (``fast`` without command emission or
    extrapolation), True = required (refused elsewhere), False = issue every command. ``threads``: channels are
    independent, so the ``fast`` scheduler runs groups of them in this many threads (identical results; refused
    with another scheduler, command emission, the dramsim3 preset's two-level queues or a one-channel device)."""
    spec = load_dram_spec(spec)
    rules = controller_rules(controller, spec)
    for name in ("nRTRS", "nPPD"):  # only the two-level queue kernel (cmdqueue.py) applies them
        if getattr(spec.timing, name) and not rules.cmd_queue_entries:
            raise ConfigError(
                f"0 unless the controller preset is dramsim3 (only its two-level queues apply it), "
                f"got {getattr(spec.timing, name)} under controller {controller or spec.controller!r}",
                key=f"timing.{name}",
            )
    refresh = spec.default_refresh if refresh is None else refresh
    refuse_unread_by_stream(spec, page, refresh, queue)  # the spec's controller_rules: fields this run does not read
    if queue is None:
        queue = rules.queue_per_pseudo_channel(spec.org.pseudo_channels)
    addr = np.asarray(addr)
    n = addr.shape[0]
    wb = np.asarray(is_write)  # int8 0/1, read only by the kernels: a bool array's own bytes (no copy)
    if wb.dtype != np.bool_:
        wb = np.asarray(wb, dtype=np.int64) != 0
    if wb.shape != (n,):
        wb = np.broadcast_to(wb, (n,))
    if not (wb.flags.c_contiguous and wb.flags.writeable):  # one kernel signature: writable C arrays
        wb = wb.copy()
    w = wb.view(np.int8)
    arr = np.zeros(n, np.int64) if arrival is None else np.ascontiguousarray(np.asarray(arrival, dtype=np.int64))
    top = K.max_cycle(spec.banks_per_channel)
    if arr.shape != (n,) or (n and (arr.min() < 0 or arr.max() > top)):
        raise ConfigError(f"expected one arrival cycle in [0, {top}] per request", key="arrival")
    if n > 1 and bool((arr[1:] < arr[:-1]).any()):  # no n-element temporaries beyond one bool mask
        order = np.argsort(arr, kind="stable")
        addr, w, arr = addr[order], w[order], arr[order]
    if page not in ("open", "closed"):
        raise ConfigError(f"expected open or closed, got {page!r}", key="page")
    if not isinstance(queue, (int, np.integer)) or not 1 <= queue <= MAX_QUEUE:
        raise ConfigError(f"expected an integer in [1, {MAX_QUEUE}], got {queue!r}", key="queue")
    if scheduler not in ("fast", "heap", "scan"):
        raise ConfigError(f"expected fast, heap or scan, got {scheduler!r}", key="scheduler")
    big = n >= AGE_LIMIT or spec.banks_per_channel > MAX_BANKS  # beyond the flat scheduler's key fields (flat.py)
    check_threads(threads, spec.org.channels, "heap" if scheduler == "fast" and big else scheduler, emit, rules)
    T = timing_vector(spec, refresh, idle_skip, rules)
    n_ch = spec.org.channels
    # channel-contiguous (the scheduler reads each channel's requests sequentially, by position)
    starts, k, row, w_ch, arr_ch = decode_by_channel(spec, addr, w, arr, mapping)
    present = np.diff(starts) > 0
    mult = np.ones(n_ch)
    chans = np.flatnonzero(present).astype(np.int64)
    if symmetry and not emit and _symmetric(k, row, w_ch, arr_ch, starts, n_ch, spec):
        chans = chans[:1]
        mult[:] = 0
        mult[0] = n_ch
        present = np.zeros(n_ch, bool)
        present[0] = True
    if scheduler == "fast" and big:
        scheduler = "heap"
    periodic = (
        extrapolate
        and not emit
        and scheduler != "scan"
        and steady_windows >= 8
        and not rules.cmd_queue_entries
        and steady.is_periodic(addr, w, arr)
    )
    can_skip = scheduler == "fast" and not rules.cmd_queue_entries and not emit
    if skip_ahead is True and (not can_skip or extrapolate):
        raise ConfigError(
            "skip-ahead runs only in the fast scheduler without the two-level queues of the dramsim3 "
            "preset, command emission or steady-state extrapolation; expected skip_ahead None or "
            "False here",
            key="skip_ahead",
        )
    if skip_ahead not in (None, True, False):
        raise ConfigError(f"expected None, True or False, got {skip_ahead!r}", key="skip_ahead")
    w, arr = w_ch, arr_ch
    order = None  # the identity: only the heap / scan / two-level kernels read one (the flat scheduler needs none)
    if scheduler != "fast" or rules.cmd_queue_entries:
        order = np.arange(n, dtype=np.int64)
    qcap = int(queue) * spec.org.pseudo_channels
    cap = 3 * n + 64 if emit else 0
    wall = 0.0
    while True:  # at most twice: emission buffer too small, or the stream did not settle
        BS, GS, RS, US, CS, ST = K.new_state(n_ch, T)
        LAT = np.zeros(n_ch)
        E = np.zeros((cap, 9), np.int64)
        nc = chans.shape[0]
        maxw = steady_windows if periodic else 0
        WN = np.zeros(nc, np.int64)
        WR = np.zeros((nc, max(maxw, 1)), np.int64)
        WS = np.zeros((nc, max(maxw, 1), K.N_S), np.int64)
        WL = np.zeros((nc, max(maxw, 1)))
        WF = np.zeros((nc, max(maxw, 1)), np.int64)
        win = steady.window_cycles(T)
        skip = can_skip and skip_ahead is not False and not periodic
        SKO = np.zeros(2, np.int64)
        w0 = time.perf_counter()
        if rules.cmd_queue_entries > 0:  # two-level queues (cmdqueue.py): one implementation for every scheduler
            ne = ctrl_kernel_twolevel(
                order,
                starts,
                chans,
                k,
                row,
                w,
                arr,
                qcap,
                rules.write_queue_entries,
                rules.cmd_queue_entries,
                rules.cmd_queue_scope == "rank",
                page == "closed",
                spec.timing.nRTRS,
                spec.timing.nPPD,
                T,
                BS,
                GS,
                RS,
                US,
                CS,
                ST,
                LAT,
                E,
            )
        elif scheduler == "scan":
            ne = ctrl_kernel_scan(
                order, starts, chans, k, row, w, arr, qcap, page == "closed", T, BS, GS, RS, US, CS, ST, LAT, E
            )
        else:
            head = (
                starts,
                chans,
                k,
                row,
                w,
                arr,
                qcap,
                page == "closed",
                T,
                BS,
                GS,
                RS,
                US,
                CS,
                ST,
                LAT,
                E,
                -1,
                win,
                maxw,
            )
            args = head + (WN, WR, WS, WL, WF)
            if scheduler == "fast" and threads > 1 and nc > 1:
                ne = _flat_in_threads(threads, np.diff(starts)[chans], head, (WN, WR, WS, WL, WF), skip, SKO)
            else:
                ne = ctrl_kernel_flat(*args, skip, SKO) if scheduler == "fast" else ctrl_kernel_fast(order, *args)
        info = None
        if periodic and np.any(WN >= 0):
            info = _extrapolate(T, chans, starts, WN, WR, WS, WL, WF, win, w[0], arr[0], ST, CS, RS, LAT)
        wall += time.perf_counter() - w0
        if emit and ne > cap:
            if ne > MAX_EMIT:
                raise ConfigError(
                    f"the emitted command stream would hold {ne} records (limit {MAX_EMIT}; "
                    "refreshes of long idle gaps count)",
                    key="emit",
                )
            cap = ne
            continue
        if periodic and np.any(WN >= 0) and info is None:
            periodic = False
            continue
        break
    base = summarize(spec, T, RS, CS, ST, mult, present, wall)
    res = RequestResult(**base.__dict__)
    res.requests = n
    res.peak_bandwidth_gbps = spec.peak_bandwidth_gbps
    res.bandwidth_gbps = res.bytes / res.time_s / 1e9 if res.cycles else 0.0
    res.mean_latency_cycles = float((LAT * mult).sum() / n) if n else 0.0
    res.extrapolated = info is not None
    res.skipped_requests = int(SKO[0])
    res.skip_jumps = int(SKO[1])
    res.steady = info
    if emit:
        res.commands = _to_cmds(E[:ne])
    return res


def _extrapolate(T, chans, starts, WN, WR, WS, WL, WF, win, w0, a0, ST, CS, RS, LAT):
    """Apply steady.extrapolate_channel to every channel that stopped early; None if one did not settle."""
    tail = int((T[K.T_CWL] if w0 else T[K.T_CL]) + T[K.T_BL])
    per = {}
    for ci, c in enumerate(chans):
        nw = int(WN[ci])
        if nw < 0:
            continue
        ex = steady.extrapolate_channel(
            WR[ci, :nw], WS[ci, :nw], WL[ci, :nw], WF[ci, :nw], int(starts[c + 1] - starts[c]), win, tail, int(a0)
        )
        if ex is None:
            return None
        cyc, st, lat, inf = ex
        ST[c] = st
        CS[c, K.C_DONE] = cyc
        CS[c, K.C_LAST] = cyc - tail
        LAT[c] = lat
        per[int(c)] = inf
    first = next(iter(per.values()))
    return {**first, "channels": per}


def _to_cmds(E: np.ndarray) -> np.ndarray:
    c = np.zeros(E.shape[0], CMD_DTYPE)
    for j, f in enumerate(("op", "flags", "ch", "pch", "rank", "bg", "bank", "row", "arrival")):
        c[f] = E[:, j]
    c["repeat"] = 1
    return c
