"""Near-memory sequential read stream (isa/lower.py ``stream_reads``, the CXL-PNM accelerator's and AttAcc's
buffer-die reads) vs the request-level sequential stream through the same DRAM spec (FR-FCFS controller,
the spec's default mapping): achieved / peak per channel with all-bank, per-bank and no refresh, records, wall time.
(Per-bank refresh on HBM3: the in-order stream waits for the refreshed bank while a request queue serves the others,
0.66 vs 0.92: a known gap.)
Prints figures; asserts nothing. Usage: python bench/bench_stream_reads.py [--quick]"""

import sys
import time

import numpy as np

from attnsim.cli.dram import device_spec, warm_up
from attnsim.hwmodels.dram import make_cmds, run_commands, simulate_requests
from attnsim.isa.lower import Org, stream_reads

QUICK = "--quick" in sys.argv
SPECS = ("hbm3_6400", "hbm3_5200_pim", "lpddr5x_8533", "lpddr5_6400")  # sangam / attacc buffer die / cxl_pnm


def as_records(c: dict) -> np.ndarray:
    rec = make_cmds(len(c["op"]))
    for f, v in c.items():
        rec[f] = v
    return rec


def stream_efficiency(spec, nbytes: int, refresh: str):
    """(achieved / peak of one channel, records, engine wall s, lowering wall s) of stream_reads."""
    w0 = time.perf_counter()
    rec = as_records(stream_reads(Org.from_spec(spec), nbytes))
    w1 = time.perf_counter()
    r = run_commands(spec, rec, refresh=refresh)
    peak = spec.peak_bandwidth_gbps * 1e9 / spec.org.channels
    return r.bytes / r.time_s / peak, len(rec), r.sim_wall_s, w1 - w0


def request_efficiency(spec, nbytes: int, refresh: str) -> float:
    """Achieved / peak of the request-level sequential stream (one channel, the slow reference)."""
    one = device_spec(spec.name, channels=1)
    addr = np.arange(nbytes // one.org.burst_bytes, dtype=np.int64) * one.org.burst_bytes
    r = simulate_requests(one, addr, 0, refresh=refresh)
    return r.bandwidth_gbps / r.peak_bandwidth_gbps


def main():
    ref_bytes = 1 << (21 if QUICK else 23)
    for name in SPECS:
        spec = device_spec(name)
        warm_up(spec)
        t = spec.timing
        for refresh in ("none", "ab", "pb"):
            s, n, _, _ = stream_efficiency(spec, ref_bytes, refresh)
            q = request_efficiency(spec, ref_bytes, refresh)
            bound = {"none": 1.0, "ab": 1 - t.nRFC / t.nREFI, "pb": 1.0}[refresh]
            print(
                f"  {name:14s} refresh {refresh:4s} {ref_bytes / 2**20:4.0f} MiB: stream_reads {s:.3f} of peak "
                f"({n:,d} records), request-level sequential {q:.3f}, ratio {s / q:.3f}; "
                f"bound {bound:.3f}"
            )
    for name in ("hbm3_6400", "lpddr5x_8533"):
        spec = device_spec(name)
        nbytes = 100 * 10**6
        s, n, wall, lw = stream_efficiency(spec, nbytes, spec.default_refresh)
        print(
            f"  {name:14s} 100 MB on one channel: {n:,d} records, lowering {lw:.3f} s, engine {wall:.3f} s, "
            f"{s:.3f} of peak"
        )


if __name__ == "__main__":
    main()
