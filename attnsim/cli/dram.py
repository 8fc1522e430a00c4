"""``attnsim dram``: run a DRAM device spec on a synthetic pattern or a request trace."""

from __future__ import annotations

import os
import re
import time

import numpy as np

from attnsim.core.config import INT_LIMIT, ConfigError, check_int

_MAX_LINE_BYTES = 4096  # a request line is "<hex address> <R|W> [<arrival cycle>]": under 64 B plus a comment
MAX_REQUESTS = 1 << 25  # pattern length / trace requests: about 80 B of memory per request in the engine
PATTERN_DEFAULTS = {"requests": 100_000, "stride": 4096, "write_fraction": 0.0, "seed": 0}
JSON_KEYS = (
    "cycles",
    "clock_domain",
    "tck_s",
    "time_s",
    "bytes",
    "bandwidth_gbps",
    "peak_bandwidth_gbps",
    "row_hits",
    "row_misses",
    "row_conflicts",
    "refresh_time_s",
    "energy_j",
    "sim_wall_s",
    "compile_s",
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dram",
        help="time a request stream on a DRAM device (bank-level engine)",
        description="Run a DRAM preset (name) or spec (YAML) on a synthetic pattern or a "
        "trace (one request a line: <hex address> <R|W> [<arrival cycle>]; "
        "arrival cycles non-decreasing, in [0, 2**53]; idle gaps cost no "
        "simulation time).",
    )
    p.add_argument("--device", required=True, help="preset name (e.g. hbm3_6400) or path to a kind: dram YAML")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pattern", choices=("sequential", "random", "strided"), default="sequential")
    src.add_argument(
        "--trace",
        help="request trace file (attnsim text, Ramulator LD/ST or R/W address vectors, "
        "DRAMsim3 '<hex> READ|WRITE <cycle>', or .npy from 'attnsim dram convert')",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("convert",),
        help="convert: write --trace as the binary .npy trace form to --out (nothing is simulated)",
    )
    p.add_argument("--out", help="output .npy of 'attnsim dram convert'")
    p.add_argument(
        "--trace-format",
        choices=("auto", "attnsim", "ramulator", "dramsim3", "npy"),
        help="trace format (default auto: .npy by name, else by the first request line)",
    )
    p.add_argument(
        "--requests",
        type=int,
        help=f"number of requests of the pattern (default {PATTERN_DEFAULTS['requests']}, at most {MAX_REQUESTS})",
    )
    p.add_argument("--stride", type=int, help="bytes between requests (strided pattern; default 4096)")
    p.add_argument("--channels", type=int, help="override the number of channels")
    p.add_argument("--banks", type=int, help="override banks per rank (bank groups x banks per group)")
    p.add_argument(
        "--write-fraction", type=float, help="probability that a request of the pattern is a write (default 0)"
    )
    p.add_argument("--no-refresh", action="store_true", help="disable refresh")
    p.add_argument("--refresh", choices=("ab", "pb"), help="all-bank (default of the preset) or per-bank refresh")
    p.add_argument("--seed", type=int, help="random pattern / write choice seed (default 0)")
    p.add_argument("--mapping", help="address mapping, fields MSB..LSB from Ro Ra Bg Ba Co Pc Ch (e.g. RoBaBgCoCh)")
    p.add_argument("--page", choices=("open", "closed"), help="row policy (default open)")
    p.add_argument(
        "--queue",
        type=int,
        help="controller queue entries per pseudo-channel (default: the "
        "controller preset's: ramulator2 32 per channel, ideal and dramsim3 32 "
        "per pseudo-channel)",
    )
    p.add_argument(
        "--controller",
        metavar="{ramulator2,ideal,dramsim3}",  # checked by rules.controller_rules
        help="controller rule set (default: the spec's controller: key, else ramulator2, within 3 %% of "
        "Ramulator 2.1 on every recorded stream; ideal: the optimistic end, formerly 'attnsim'; "
        "dramsim3): scope of the nRRD_S/tFAW window and of read/write turnarounds, queues, page "
        "closing (hwmodels/dram/rules.py)",
    )
    p.add_argument(
        "--closed-cap",
        type=int,
        metavar="N",
        help="with --page closed: close a row after N column accesses since its ACT (Ramulator's "
        "ClosedCAP cap; 0: after the last queued hit; default the preset's: ramulator2 4, ideal 0)",
    )
    p.add_argument(
        "--no-extrapolate",
        action="store_true",
        help="simulate periodic patterns (sequential, strided) in full instead of extrapolating the "
        "steady state over whole refresh windows",
    )
    p.add_argument(
        "--no-skip-ahead",
        action="store_true",
        help="issue every command instead of jumping over exactly recurring controller states "
        "(identical results; hwmodels/dram/recur.py)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="threads over groups of channels (default 1; at most the device's "
        "channels; channels are independent: identical results)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_dram)


_HEX = re.compile(r"^(0[xX])?[0-9a-fA-F]{1,16}$")


def device_spec(ref: str, channels: int | None = None, banks: int | None = None):
    """Load a spec and apply --channels/--banks overrides (re-validated, within the spec's legal range)."""
    from attnsim.hwmodels.dram.spec import MAX_BANKS_PER_CHANNEL, load_dram_spec, spec_from_dict

    spec = load_dram_spec(ref)
    if channels is None and banks is None:
        return spec
    d = spec.model_dump()
    if channels is not None:
        check_int(channels, key="--channels", lo=1, hi=1 << 12)
        d["org"]["channels"] = channels
    if banks is not None:
        top = MAX_BANKS_PER_CHANNEL // (spec.org.pseudo_channels * spec.org.ranks)
        if not 1 <= banks <= top or banks & (banks - 1):
            raise ConfigError(
                f"expected a power of two in [1, {top}] (banks per channel = pseudo-channels x ranks "
                f"x banks <= {MAX_BANKS_PER_CHANNEL}), got {banks}",
                key="--banks",
            )
        bpg = min(d["org"]["banks_per_group"], banks)
        d["org"]["banks_per_group"] = bpg
        d["org"]["bank_groups"] = banks // bpg
    return spec_from_dict(d, file=f"{ref} (with --channels/--banks)")


def with_closed_cap(spec, args):
    """The spec with --closed-cap N set over its controller rules (refused with open page, and under a rule set that
    does not read it: rules.override_error)."""
    from attnsim.hwmodels.dram.rules import RuleOverrides, controller_rules, given_overrides, override_error

    if (args.page or "open") != "closed":
        raise ConfigError("has no effect with open page (add --page closed)", key="--closed-cap")
    check_int(args.closed_cap, key="--closed-cap", lo=0, hi=1 << 24)
    name = getattr(args, "controller", None) or spec.controller
    controller_rules(name)  # an unknown or renamed preset name first
    given = {**given_overrides(spec), "closed_cap": args.closed_cap}
    bad = override_error(name, given, spec)
    if bad and bad[0] == "closed_cap":
        raise ConfigError(bad[1], key="--closed-cap")
    return spec.model_copy(update=dict(controller_rules=RuleOverrides(**given)))


def pattern(spec, kind: str, n: int, stride: int, write_fraction: float, seed: int):
    """Synthetic request stream: byte addresses and is_write flags (all arriving at cycle 0)."""
    check_int(n, key="--requests", lo=1, hi=MAX_REQUESTS)
    check_int(seed, key="--seed", lo=0)
    if not 0.0 <= write_fraction <= 1.0:
        raise ConfigError(f"expected a value in [0, 1], got {write_fraction}", key="--write-fraction")
    rng = np.random.default_rng(seed)
    bb = spec.org.burst_bytes
    cap = spec.capacity_bytes  # a power of two: products wrap modulo 2**64, so modulo cap they are exact
    if kind == "sequential":
        addr = (np.arange(n, dtype=np.uint64) * np.uint64(bb)) % np.uint64(cap)
    elif kind == "random":
        addr = rng.integers(0, cap // bb, n, dtype=np.int64) * bb
    else:
        if not 0 < stride <= cap or stride % bb:
            raise ConfigError(
                f"expected a positive multiple of the burst size ({bb} B) up to the capacity ({cap} B), got {stride}",
                key="--stride",
            )
        addr = (np.arange(n, dtype=np.uint64) * np.uint64(stride)) % np.uint64(cap)
    w = rng.random(n) < write_fraction if write_fraction > 0 else np.zeros(n, bool)
    return addr.astype(np.int64), w


def read_trace(path: str, capacity_bytes: int | None = None, max_arrival: int = INT_LIMIT):
    """Parse a trace: ``<hex address> <R|W> [<arrival cycle>]`` per line; '#' comments and blank lines skipped.

    Errors name the file and ``line N``: malformed lines, addresses beyond ``capacity_bytes``, arrival cycles
    outside [0, max_arrival] or decreasing (refused, not sorted: a decreasing trace is usually two traces
    concatenated), more than MAX_REQUESTS requests, non-UTF-8 bytes (byte offset)."""
    from attnsim.core.fileio import InputRefused, input_limit_bytes, open_regular, quote_prefix

    limit = 64 * MAX_REQUESTS
    try:
        kind = "data" if input_limit_bytes("data") < limit else None
        fd, _ = open_regular(path, input_limit_bytes("data") if kind else limit, kind=kind)
    except InputRefused as exc:
        if "larger than" in str(exc) and not exc.file:
            raise ConfigError(f"{exc}: more than a {MAX_REQUESTS}-request trace", file=path) from None
        raise ConfigError(str(exc), file=exc.file or path, key=exc.key) from None
    addrs, ws, arrs = [], [], []
    top = None if capacity_bytes is None else capacity_bytes - 1
    last = offset = 0
    with os.fdopen(fd, "rb") as fh:  # streamed: one line of at most _MAX_LINE_BYTES in memory at a time
        for no in range(1, 4 * MAX_REQUESTS + 2):
            raw = fh.readline(_MAX_LINE_BYTES + 1)
            if not raw:
                break
            if no > 4 * MAX_REQUESTS:
                raise ConfigError(
                    f"trace has more than {4 * MAX_REQUESTS} lines, the limit ({MAX_REQUESTS} requests)", file=path
                )
            where = f"line {no}"
            if len(raw) > _MAX_LINE_BYTES:
                raise ConfigError(
                    f"line longer than {_MAX_LINE_BYTES} B, starting {quote_prefix(raw)}", file=path, key=where
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"not UTF-8 text: invalid byte 0x{raw[exc.start]:02x} at byte offset {offset + exc.start}",
                    file=path,
                ) from None
            if no == 1 and line.startswith("\ufeff"):
                line = line[1:]
            offset += len(raw)
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            parts = s.split()
            if len(parts) not in (2, 3):
                raise ConfigError(
                    f"expected '<hex address> <R|W> [<arrival cycle>]', got {quote_prefix(s)}", file=path, key=where
                )
            if not _HEX.match(parts[0]):
                raise ConfigError(
                    f"expected a hex address of at most 64 bits, got {quote_prefix(parts[0], 40)}", file=path, key=where
                )
            a = int(parts[0], 16)
            if top is not None and a > top:
                raise ConfigError(
                    f"address 0x{a:x} beyond the device capacity ({capacity_bytes} B: at most 0x{top:x})",
                    file=path,
                    key=where,
                )
            rw = parts[1].upper()
            if rw not in ("R", "W"):
                raise ConfigError(f"expected R or W, got {quote_prefix(parts[1], 40)}", file=path, key=where)
            t = 0  # a line without an arrival cycle arrives at 0
            if len(parts) == 3:
                t = check_int(parts[2], file=path, key=f"{where}: arrival cycle", lo=0, hi=max_arrival)
            if t < last:
                raise ConfigError(
                    f"arrival cycles must not decrease ({t} < {last}"
                    f"{'' if len(parts) == 3 else ': a line without one arrives at cycle 0'})",
                    file=path,
                    key=where,
                )
            last = t
            if len(addrs) >= MAX_REQUESTS:
                raise ConfigError(f"trace has more than {MAX_REQUESTS} requests (the limit)", file=path, key=where)
            addrs.append(a)
            ws.append(rw == "W")
            arrs.append(t)
    if not addrs:
        raise ConfigError("trace has no requests", file=path)
    return np.array(addrs, dtype=np.uint64), np.array(ws), np.array(arrs, dtype=np.int64)


def _refuse_ignored(args) -> None:
    """Options that would have no effect are refused (every setting takes effect or is refused)."""
    if args.no_refresh and args.refresh:
        raise ConfigError("--refresh has no effect with --no-refresh", key="--refresh")
    if getattr(args, "trace_format", None) and not args.trace:
        raise ConfigError("--trace-format has no effect without --trace", key="--trace-format")
    given = [k for k in PATTERN_DEFAULTS if getattr(args, k, None) is not None]
    if args.trace and given:
        raise ConfigError("pattern option has no effect with --trace", key="--" + given[0].replace("_", "-"))
    if (
        getattr(args, "seed", None) is not None
        and not args.trace
        and args.pattern != "random"
        and not getattr(args, "write_fraction", None)
    ):
        raise ConfigError(f"--seed has no effect on --pattern {args.pattern} without --write-fraction", key="--seed")
    if getattr(args, "no_skip_ahead", False):
        if not args.trace and args.pattern != "random" and not getattr(args, "no_extrapolate", False):
            raise ConfigError(
                f"--no-skip-ahead has no effect on --pattern {args.pattern} while it is extrapolated "
                "(add --no-extrapolate)",
                key="--no-skip-ahead",
            )
    if getattr(args, "stride", None) is not None and args.pattern != "strided":
        raise ConfigError(
            f"--stride has no effect with --pattern {args.pattern} (use --pattern strided)", key="--stride"
        )


def _check_before_compile(spec, args) -> None:
    """The address mapping and the controller preset are checked before the kernels compile (a cold
    Numba cache takes about a minute: a bad flag must not wait for it)."""
    from attnsim.hwmodels.dram.rules import controller_rules, refuse_unread_by_stream
    from attnsim.hwmodels.dram.spec import parse_mapping

    if args.mapping is not None:
        try:
            parse_mapping(args.mapping, spec.org)
        except ValueError as exc:
            raise ConfigError(str(exc), key="mapping") from None
    rules = controller_rules(getattr(args, "controller", None), spec)
    refresh = "none" if args.no_refresh else (args.refresh or spec.default_refresh)
    refuse_unread_by_stream(spec, args.page or "open", refresh, args.queue, file=args.device)
    if getattr(args, "threads", None) is not None:
        from attnsim.hwmodels.dram.controller import check_threads

        check_threads(args.threads, spec.org.channels, "fast", False, rules, key="--threads")
    if getattr(args, "no_skip_ahead", False) and rules.cmd_queue_entries:
        raise ConfigError(
            "--no-skip-ahead has no effect under the dramsim3 controller preset (its two-level queues "
            "issue every command)",
            key="--no-skip-ahead",
        )


def warm_up(spec) -> float:
    """Compile (or load from Numba's cache) the kernels on a tiny stream; returns seconds. Also the decoder's
    variant for a .npy trace's address field (a read-only strided view of the mapped records)."""
    from attnsim.hwmodels.dram.controller import decode_by_channel, simulate_requests
    from attnsim.hwmodels.dram.traces import TRACE_DTYPE

    t0 = time.perf_counter()
    spec = spec.model_copy(update=dict(controller_rules=None))  # the same kernels, whatever the overrides read
    simulate_requests(spec, np.arange(8, dtype=np.int64) * spec.org.burst_bytes, np.arange(8) % 2 == 1)
    view = np.zeros(8, TRACE_DTYPE)["addr"]
    view.flags.writeable = False
    decode_by_channel(spec, view, np.zeros(8, np.int8), np.zeros(8, np.int64))
    return time.perf_counter() - t0


def warm_all(device: str = "hbm3_6400") -> None:
    """Compile (or load) every kernel an `attnsim dram` run reaches, for `attnsim warmup`: the flat scheduler
    and the decoders on one and several channels (contiguous addresses and a .npy field view), the dramsim3
    preset's two-level queues, steady-state extrapolation (patterns), the trace parsers (the fast one and the
    general one). Not the heap scheduler (only beyond 2**30 requests or 2048 banks per channel)."""
    import tempfile

    from attnsim.hwmodels.dram.controller import simulate_requests
    from attnsim.hwmodels.dram.traces import read_trace_any

    for channels in (1, 2):
        spec = device_spec(device, channels)
        warm_up(spec)
        simulate_requests(spec, np.arange(8, dtype=np.int64) * spec.org.burst_bytes, False, controller="dramsim3")
    spec = device_spec(device, 1)
    simulate_requests(spec, np.arange(4096, dtype=np.int64) * spec.org.burst_bytes, False, extrapolate=True)
    lines = {
        "ramulator": "LD 0x0\nST 0x40\n",
        "dramsim3": "0x0 READ 0\n0x40 WRITE 3\n",
        "attnsim": "# general parser\n0x0 R\n0x40 W 2\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, text in lines.items():
            path = os.path.join(tmp, fmt + ".trace")
            with open(path, "w") as f:
                f.write(text)
            read_trace_any(path, spec, fmt)


def simulate(args) -> dict:
    from attnsim.hwmodels.dram.controller import MAX_QUEUE, simulate_requests

    spec = device_spec(args.device, args.channels, args.banks)
    if args.queue is not None:
        check_int(args.queue, key="--queue", lo=1, hi=MAX_QUEUE)
    if getattr(args, "closed_cap", None) is not None:
        spec = with_closed_cap(spec, args)
    _refuse_ignored(args)
    _check_before_compile(spec, args)
    for k, v in PATTERN_DEFAULTS.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if args.trace:
        addr, w, arr = load_trace(args, spec)
    else:
        addr, w = pattern(spec, args.pattern, args.requests, args.stride, args.write_fraction, args.seed)
        arr = None
    compile_s = warm_up(spec)
    refresh = "none" if args.no_refresh else (args.refresh or spec.default_refresh)
    extrapolate = not args.trace and not getattr(args, "no_extrapolate", False)
    r = simulate_requests(
        spec,
        addr,
        w,
        arr,
        mapping=args.mapping,
        page=args.page or "open",
        queue=args.queue,
        refresh=refresh,
        extrapolate=extrapolate,
        controller=getattr(args, "controller", None),
        skip_ahead=False if getattr(args, "no_skip_ahead", False) else None,
        threads=getattr(args, "threads", None) or 1,
    )
    out = {
        "device": spec.name,
        "requests": int(r.requests),
        "cycles": int(r.cycles),
        "clock_domain": r.clock_domain,
        "tck_s": r.tck_s,
        "time_s": r.time_s,
        "bytes": int(r.bytes),
        "bandwidth_gbps": r.bandwidth_gbps,
        "peak_bandwidth_gbps": r.peak_bandwidth_gbps,
        "row_hits": r.row_hits,
        "row_misses": r.row_misses,
        "row_conflicts": r.row_conflicts,
        "refresh_time_s": r.refresh_time_s,
        "energy_j": r.energy_j,
        "energy_pj_per_bit": r.energy_total_j / (8 * r.bytes) * 1e12 if r.bytes else 0.0,
        "mean_latency_cycles": r.mean_latency_cycles,
        "sim_wall_s": r.sim_wall_s,
        "compile_s": compile_s,
        # steady-state extrapolation (periodic patterns; --no-extrapolate to simulate in full)
        "extrapolated": bool(r.extrapolated),
        "steady": ({k: v for k, v in r.steady.items() if k != "channels"} if r.extrapolated else None),
        # exact skip-ahead over recurring controller states (--no-skip-ahead to issue every command)
        "skipped_requests": int(r.skipped_requests),
        "skip_jumps": int(r.skip_jumps),
    }
    out["energy_j"] = {k: float(v) for k, v in out["energy_j"].items()}
    for k, v in out.items():
        if isinstance(v, (np.floating, np.integer)):
            out[k] = v.item()
    return out


def load_trace(args, spec):
    """Any supported format through the compiled parser (hwmodels/dram/traces.py); attnsim-format traces the fast
    parser refuses go through read_trace, which accepts them or names the problem. A pipe (``--trace <(zcat
    t.gz)``, a FIFO) cannot be read twice (format detection, then the parsers), so it is read once, bounded like a
    file, into a private temporary file that the same path then reads; errors name the pipe."""
    import os
    import stat
    import tempfile

    try:
        fifo = stat.S_ISFIFO(os.stat(args.trace).st_mode)
    except OSError:
        fifo = False  # the readers name the problem
    if not fifo:
        return _load_trace_file(args, spec)
    from attnsim.hwmodels.dram.traces import MAX_TRACE_BYTES_PER_REQUEST, read_text_bounded

    data = read_text_bounded(args.trace, MAX_TRACE_BYTES_PER_REQUEST * MAX_REQUESTS, MAX_REQUESTS)
    with tempfile.TemporaryDirectory(prefix="attnsim-trace-") as tmp:
        copy = os.path.join(tmp, "trace" + (".npy" if args.trace.endswith(".npy") else ".txt"))
        with open(copy, "wb") as f:
            f.write(data)
        try:
            return _load_trace_file(_namespace_with(args, trace=copy), spec)
        except ConfigError as e:
            if e.file == copy:
                raise ConfigError(e.message, file=args.trace, key=e.key) from None
            raise


def _namespace_with(args, **changes):
    """A copy of an argparse namespace with some attributes changed."""
    import argparse

    return argparse.Namespace(**{**vars(args), **changes})


def _load_trace_file(args, spec):
    from attnsim.hwmodels.dram.kernel import max_cycle
    from attnsim.hwmodels.dram.traces import detect_format, read_trace_any

    fmt = args.trace_format or "auto"
    if fmt == "auto":
        from attnsim.core.fileio import InputRefused, read_head

        try:
            fmt = detect_format(args.trace, read_head(args.trace, 4096))
        except InputRefused:
            fmt = "attnsim"  # read_trace names the problem
    top = max_cycle(spec.banks_per_channel)
    try:
        addr, w, arr = read_trace_any(args.trace, spec, fmt, MAX_REQUESTS, args.mapping)
        if arr.shape[0] and int(arr.max()) > top:
            raise ConfigError(f"arrival cycle {int(arr.max())} beyond [0, {top}]", file=args.trace)
    except ConfigError:
        if fmt != "attnsim":
            raise
        return read_trace(args.trace, spec.capacity_bytes, top)
    return addr, w, arr


# options that only a simulation reads (refused by convert)
_SIMULATION_ONLY = (
    "queue",
    "page",
    "controller",
    "closed_cap",
    "no_refresh",
    "refresh",
    "no_extrapolate",
    "no_skip_ahead",
    "threads",
    "json",
)


def convert(args) -> int:
    """attnsim dram convert --device D --trace IN --out OUT.npy: the binary trace form (traces.TRACE_DTYPE)."""
    from attnsim.hwmodels.dram.traces import write_npy

    if not args.trace or not args.out:
        raise ConfigError("convert needs --trace IN and --out OUT.npy", key="--out" if args.trace else "--trace")
    if not args.out.endswith(".npy"):
        raise ConfigError(f"expected a file name ending in .npy, got {args.out!r}", key="--out")
    for name in _SIMULATION_ONLY + tuple(PATTERN_DEFAULTS):  # convert simulates nothing: they would be ignored
        v = getattr(args, name, None)
        if v is not None and v is not False:
            raise ConfigError("has no effect with 'convert' (nothing is simulated)", key="--" + name.replace("_", "-"))
    spec = device_spec(args.device, args.channels, args.banks)
    t0 = time.perf_counter()
    addr, w, arr = load_trace(args, spec)
    parse_s = time.perf_counter() - t0
    write_npy(args.out, np.array(addr), w, arr)  # a copy: a .npy input is a view of its file, which --out may be
    print(
        f"{args.out}: {addr.shape[0]} requests (parsed in {parse_s:.3f} s, "
        f"{addr.shape[0] / max(parse_s, 1e-9) / 1e6:.1f} M lines/s)"
    )
    return 0


def _skip_blas_probe() -> None:
    """Numba's first kernel load (from the cache too) imports numba.np.arraymath, whose BLAS probe imports
    scipy.linalg: ~0.4-0.8 s of an `attnsim dram` process. No DRAM kernel calls BLAS, so the probe is answered
    'absent' for this process only (numba then uses its own loop for np.dot-based inner products, the same
    results); later imports of scipy work as usual."""
    import sys

    if "numba.np.arraymath" in sys.modules or "scipy.linalg.cython_blas" in sys.modules:
        return
    sys.modules["scipy.linalg.cython_blas"] = None  # import -> ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg.cython_blas"]


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def run_dram(args) -> int:
    import gc

    from attnsim.cli import settle_gc, skip_final_collection

    collecting = gc.isenabled()
    gc.disable()
    _skip_blas_probe()
    import attnsim.hwmodels.dram.controller  # noqa: F401 - the engine's modules (numba), collector paused
    import attnsim.hwmodels.dram.traces  # noqa: F401

    settle_gc(collecting)
    skip_final_collection()  # stdout is flushed by cli.main, np.save closes its file: no buffered file is left
    if args.action == "convert":
        return convert(args)
    if args.out:
        raise ConfigError("--out has no effect without 'convert'", key="--out")
    out = simulate(args)
    if args.json:  # strict JSON as attnsim.sim.results.dumps, without its imports (h5py, ~0.2 s)
        import json

        print(json.dumps(out, default=_json_default, allow_nan=False))
        return 0
    rows = [
        ("device", out["device"]),
        ("requests", out["requests"]),
        ("cycles", f"{out['cycles']} ({out['clock_domain']})"),
        ("time", f"{out['time_s'] * 1e6:.3f} us"),
        ("bytes", out["bytes"]),
        (
            "bandwidth",
            f"{out['bandwidth_gbps']:.2f} GB/s of {out['peak_bandwidth_gbps']:.2f} "
            f"({100 * out['bandwidth_gbps'] / out['peak_bandwidth_gbps']:.1f} %)",
        ),
        ("row hits / misses / conflicts", f"{out['row_hits']} / {out['row_misses']} / {out['row_conflicts']}"),
        ("refresh time", f"{out['refresh_time_s'] * 1e6:.3f} us"),
        ("mean latency", f"{out['mean_latency_cycles']:.1f} cycles"),
        ("energy", f"{sum(out['energy_j'].values()) * 1e6:.3f} uJ ({out['energy_pj_per_bit']:.2f} pJ/bit)"),
    ]
    rows += [(f"  {k}", f"{v * 1e6:.3f} uJ") for k, v in out["energy_j"].items()]
    if out["extrapolated"]:
        st = out["steady"]
        rows.append(
            (
                "steady state",
                f"extrapolated after {st['windows']} refresh windows "
                f"({st['simulated_requests']} requests per channel simulated)",
            )
        )
    if out["skipped_requests"]:
        rows.append(
            (
                "skip-ahead",
                f"{out['skipped_requests']} requests in {out['skip_jumps']} jumps over recurring "
                "controller states (exact)",
            )
        )
    rows += [
        ("sim wall (compile excluded)", f"{out['sim_wall_s']:.3f} s"),
        ("compile / cache load", f"{out['compile_s']:.2f} s"),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    return 0
