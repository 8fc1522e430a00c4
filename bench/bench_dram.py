"""DRAM engine benchmark: simulated requests/s, achieved/peak bandwidth vs closed forms, PIM throughput,
energy per bit. Prints figures; asserts nothing. Usage: python bench/bench_dram.py [--quick]"""

import os
import resource
import sys
import time

import numpy as np

from attnsim.cli.dram import device_spec, warm_up
from attnsim.hwmodels.dram import F_AP, Op, cmds_from, load_dram_spec, run_commands, simulate_requests

QUICK = "--quick" in sys.argv


RAMULATOR2_REQ_PER_S = 0.3e6  # issue 3: Ramulator 2 runs about 0.3 M requests/s on these machines


def stream(spec, kind, n):
    bb = spec.org.burst_bytes
    if kind == "sequential":
        return np.arange(n, dtype=np.int64) * bb
    if kind == "strided":  # power-of-two stride <= 4 KiB that keeps n requests inside the device (no wrap)
        stride = max(bb, min(4096, 1 << int(np.log2(spec.capacity_bytes // n))))
        return np.arange(n, dtype=np.int64) * stride
    return np.random.default_rng(0).integers(0, spec.capacity_bytes // bb, n) * bb


def rate(name, n, kind, extrapolate=False, skip=True):
    """Simulated requests/s on one core (engine = scheduler kernel, compile excluded; end-to-end incl. decode).
    skip=False: every command issued; True: exact skip-ahead over recurring states (recur.py, same results)."""
    spec = load_dram_spec(name)
    warm_up(spec)
    addr = stream(spec, kind, n)
    t0 = time.perf_counter()
    r = simulate_requests(spec, addr, 0, extrapolate=extrapolate, skip_ahead=None if skip else False)
    wall = time.perf_counter() - t0
    if r.extrapolated:
        how = "extrapolated"
    elif extrapolate:
        how = "full (no steady state)"
    else:
        how = f"skip-ahead {r.skipped_requests / r.requests:.0%}" if skip else "every command"
    print(
        f"  {name:12s} {kind:10s} {n:>10,d} req {how:18s}: engine {r.sim_wall_s:6.3f} s "
        f"({n / r.sim_wall_s / 1e6:7.2f} M req/s, {n / r.sim_wall_s / RAMULATOR2_REQ_PER_S:6.0f}x Ramulator 2), "
        f"end-to-end {wall:6.2f} s ({n / wall / 1e6:6.2f} M req/s), "
        f"{r.bandwidth_gbps / r.peak_bandwidth_gbps:.3f} of peak"
    )
    return r


def extrapolation_error(name, n, kind):
    spec = device_spec(name, channels=1)
    addr = stream(spec, kind, n)
    full = simulate_requests(spec, addr, 0)
    ext = simulate_requests(spec, addr, 0, extrapolate=True)
    if not ext.extrapolated:
        print(f"  {name:12s} {kind:10s} not settled within {ext.steady} windows: simulated in full")
        return
    print(
        f"  {name:12s} {kind:10s} {n:>9,d} req, {ext.steady['simulated_requests']:>8,d} simulated: cycles error "
        f"{100 * (ext.cycles / full.cycles - 1):+.4f} %, "
        f"energy {100 * (ext.energy_total_j / full.energy_total_j - 1):+.4f} %, "
        f"engine {full.sim_wall_s:.3f} -> {ext.sim_wall_s:.3f} s"
    )


def patterns(name, n=200_000):
    spec = device_spec(name, channels=1)
    t, o = spec.timing, spec.org
    seq = np.arange(n, dtype=np.int64) * o.burst_bytes
    rnd = np.random.default_rng(1).integers(0, spec.capacity_bytes // o.burst_bytes, n) * o.burst_bytes
    stride = o.burst_bytes * o.pseudo_channels * o.bank_groups * o.columns * o.banks_per_group * o.ranks
    strd = np.arange(n // 20, dtype=np.int64) * stride
    ideal = n / o.pseudo_channels * t.nBL
    frac = 1 - t.nRFC / t.nREFI
    r = simulate_requests(spec, seq, 0)
    r256 = simulate_requests(spec, seq, 0, queue=256)
    print(
        f"  {name:12s} sequential  {r.bandwidth_gbps / r.peak_bandwidth_gbps:.3f} of peak (queue 32), "
        f"{r256.bandwidth_gbps / r256.peak_bandwidth_gbps:.3f} (queue 256); closed form 1 - nRFC/nREFI = {frac:.3f}; "
        f"cycles {r256.cycles} vs {ideal / frac:.0f} ({100 * (r256.cycles / (ideal / frac) - 1):+.2f} %)"
    )
    r = simulate_requests(spec, rnd, 0)
    print(f"  {name:12s} random      {r.bandwidth_gbps / r.peak_bandwidth_gbps:.3f} of peak, hits {r.row_hits / n:.3f}")
    r = simulate_requests(spec, strd, 0)
    per = max(t.nRC, max(t.nRAS, t.nRCDRD + t.nRTP) + t.nRP)
    cf = (len(strd) - 1) * per / frac
    print(
        f"  {name:12s} strided     {r.bandwidth_gbps / r.peak_bandwidth_gbps:.3f} of peak (same bank, new row each); "
        f"cycles {r.cycles} vs closed form {cf:.0f} ({100 * (r.cycles / cf - 1):+.2f} %)"
    )
    r = simulate_requests(device_spec(name), np.arange(n, dtype=np.int64) * o.burst_bytes, 0)
    print(
        f"  {name:12s} streaming read energy {r.energy_total_j / (8 * r.bytes) * 1e12:.2f} pJ/bit "
        + ", ".join(f"{k} {v / (8 * r.bytes) * 1e12:.2f}" for k, v in r.energy_j.items())
    )


def pim(rows=2000, macs=32):
    out = {}
    for name in ("hbm3_5200_pim", "hbm3_5200_pim_npc"):
        s = load_dram_spec(name)
        t, p = s.timing, s.pim
        c = cmds_from(op=[Op.MACAB] * rows, row=np.arange(rows) % 9 + 1, repeat=macs, flags=F_AP)
        r = run_commands(s, c, multiplicity=s.org.channels)
        span = t.nRCDRD + (macs - 1) * p.nCCDAB
        per = max(max(span + t.nRTP, t.nRAS) + t.nRP, t.nRC)
        ideal_bps = s.banks_per_channel * s.org.channels * 32 / (p.nCCDAB * s.tck_s)
        cf_bps = ideal_bps * (macs * p.nCCDAB / per) * (1 - t.nRFC / t.nREFI)
        got = r.pim_bytes / r.time_s
        out[name] = r.time_s
        print(
            f"  {name:18s} all-bank PIM {got / 1e12:6.2f} TB/s per stack; "
            f"banks x 32 B / nCCDAB = {ideal_bps / 1e12:.2f}; "
            f"closed form with ACT/PRE + refresh overhead {cf_bps / 1e12:.2f} ({100 * (got / cf_bps - 1):+.2f} %)"
        )
    print(
        f"  power-constrained / NPC time ratio: {out['hbm3_5200_pim'] / out['hbm3_5200_pim_npc']:.3f} "
        f"(nCCDAB 6 vs 4: 1.5 without ACT/PRE overhead)"
    )


def main() -> None:
    n_big = 1_000_000 if QUICK else 10_000_000
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (uptime 1/5/15 min) on "
        f"{os.cpu_count()} cores"
    )
    print("compile / cache load:")
    for name in ("hbm3_6400",):
        t0 = time.perf_counter()
        warm_up(load_dram_spec(name))
        print(
            f"  {name}: {time.perf_counter() - t0:.2f} s "
            f"(Numba cache {'warm' if time.perf_counter() - t0 < 3 else 'cold'})"
        )
    print(
        "speed (one core, compile excluded; every command = each request through exact FR-FCFS; skip-ahead: "
        "the same results, recurring states jumped over, share of requests skipped per simulated channel):"
    )
    for name in ("hbm3_6400", "hbm2_2000", "lpddr5_6400"):
        for kind in ("sequential", "strided", "random"):
            rate(name, n_big, kind, skip=False)
        for kind in ("sequential", "strided"):
            rate(name, n_big, kind)
            rate(name, n_big, kind, extrapolate=True)
    print("steady-state extrapolation error vs full simulation (one channel):")
    for name in ("hbm3_6400", "hbm2_2000", "lpddr5_6400"):
        for kind, n in (("sequential", 1_000_000), ("strided", 200_000)):
            extrapolation_error(name, n, kind)
    print("bandwidth vs closed form (one channel of each device, with refresh):")
    for name in ("hbm2_2000", "hbm3_6400", "lpddr5_6400"):
        patterns(name)
    for name in ("lpddr5x_8533", "ddr5_4800", "hbm3e_9600", "gddr6_aim"):
        s = device_spec(name)
        r = simulate_requests(s, np.arange(200_000, dtype=np.int64) * s.org.burst_bytes, 0)
        print(
            f"  {name:12s} sequential {r.bandwidth_gbps / r.peak_bandwidth_gbps:.3f} of peak, "
            f"{r.energy_total_j / (8 * r.bytes) * 1e12:.2f} pJ/bit"
        )
    print("PIM:")
    pim()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
