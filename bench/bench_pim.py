"""Benchmark the PIM device model (prints figures; not a test).

1. All-bank PIM throughput on the engine vs the closed form banks x bytes / nCCDAB minus ACT and
   refresh overhead, for hbm3_5200_pim (nCCDAB 6) and hbm3_5200_pim_npc (4), and their ratio.
2. Llama-2-70B decode attention (batch 64, 4096-token contexts, 80 layers) on the 40-stack
   AttAcc HBM3-PIM system: cold (first call, JIT compile or cache load) and warm wall time, peak
   resident memory, and the simulated step time / energy.

Run: python bench/bench_pim.py
"""

from __future__ import annotations

import resource
import time

import numpy as np


def allbank(dev, rows, macs):
    from attnsim.hwmodels.dram.engine import make_cmds, run_commands
    from attnsim.isa.lower import ENGINE_CODES

    c = make_cmds(3 * rows)
    c["op"][0::3] = ENGINE_CODES["ACTAB"]
    c["row"][0::3] = np.arange(rows) % 1024
    c["op"][1::3] = ENGINE_CODES["MACAB"]
    c["row"][1::3] = np.arange(rows) % 1024
    c["repeat"][1::3] = macs
    c["op"][2::3] = ENGINE_CODES["PREA"]
    t0 = time.perf_counter()
    res = run_commands(dev.dram, c, refresh="ab")
    return res, time.perf_counter() - t0


def cold_compile_s() -> float:
    """Wall time of the 70B attention step in a fresh process with an empty Numba cache."""
    import os
    import subprocess
    import sys
    import tempfile

    code = "import time; t=time.perf_counter(); import bench_pim as b; b.step70b(); print(time.perf_counter()-t)"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            check=True,
        )
    return float(out.stdout.strip().splitlines()[-1])


def device(name, **kw):
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry

    hw = load_yaml(find_config("hardware", name))
    hw.update(kw)
    return registry.build(hw, file=name)


def step70b():
    from attnsim.workloads.scenario import Scenario
    from attnsim.workloads.trace import build_trace
    from attnsim.workloads.zoo import load_model

    model = load_model("llama2-70b")
    trace = build_trace(model, Scenario(batch_size=64, prompt_len=4096), "decode")
    rows = np.flatnonzero(np.isin(trace["cls"], ["attn_score", "softmax", "attn_context"]))
    return trace, rows, device("attacc_hbm3_pim_40stack").cost(trace, rows)


def main() -> None:
    print("== Llama-2-70B decode attention, batch 64, 4096-token contexts, 40 x HBM3-PIM (AttAcc_bank)")
    t0 = time.perf_counter()
    trace, rows, cost = step70b()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace, rows, cost = step70b()
    warm = time.perf_counter() - t0
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    counts = trace["count"][rows]
    step = float(np.sum(cost.time_s * counts))
    energy = float(np.sum(cost.energy_total_j() * counts))
    for j, i in enumerate(rows):
        print(
            f"  {trace['op'][i]:13s} x{counts[j]}  {cost.time_s[j] * 1e6:8.2f} us/layer  "
            f"{cost.energy_total_j()[j] * 1e3:8.3f} mJ/layer"
        )
    print(f"attention step {step * 1e3:.3f} ms, {energy:.3f} J (dynamic)")
    print(
        f"wall: first call in this process {cold:.2f} s (Numba cache load), warm {warm:.3f} s "
        f"(trace + lowering + engine); peak RSS {rss_gb:.2f} GB"
    )
    print(f"wall with an empty Numba cache (fresh process, compile included): {cold_compile_s():.1f} s")
    from attnsim.hwmodels.pim import allbank_closed_form

    print("== all-bank PIM throughput per channel (engine vs closed form, refresh on)")
    times = {}
    for name in ("attacc_hbm3_pim_stack", "attacc_hbm3_pim_npc_stack"):
        dev = device(name)
        for macs in (32, 256):
            res, wall = allbank(dev, 3000, macs)
            got = 3000 * macs * dev.org.banks * 32 / res.time_s
            cf = allbank_closed_form(dev.dram, 32, macs)
            times[(name, macs)] = res.time_s
            print(
                f"{name:28s} MACAB/row={macs:4d}  engine {got / 1e9:8.1f} GB/s  closed form "
                f"{cf['bytes_per_s'] / 1e9:8.1f} GB/s  ({got / cf['bytes_per_s'] - 1:+.2%})  ideal "
                f"{cf['ideal_bytes_per_s'] / 1e9:7.1f} GB/s  sim {wall * 1e3:.1f} ms"
            )
    for macs in (32, 256):
        r = times[("attacc_hbm3_pim_stack", macs)] / times[("attacc_hbm3_pim_npc_stack", macs)]
        print(f"power-constrained / NPC time ratio, {macs} MACAB per row: {r:.3f} (nCCDAB ratio 1.5)")


if __name__ == "__main__":
    main()
