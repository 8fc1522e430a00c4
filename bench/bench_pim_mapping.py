"""Benchmark the PIM mapping search (hwmodels/pim_mapping.py; prints figures, not a test).

Decode attention of one step (score, softmax, context of every layer) on one AttAcc board (5 HBM3-PIM stacks,
80 channels, attacc_hbm3_pim_5stack) for a small sweep of points (model, tensor-parallel width 8, batch,
context): wall time per point of
- ``channels_per_item: 1`` (a fixed mapping: one lowering per row),
- ``auto``, exhaustive (every candidate lowered and simulated: the search before the bound),
- ``auto`` (candidates ordered by their closed-form lower bound; one that cannot beat the best simulated
  time is not lowered),
each with the sub-result cache off (ATTNSIM_CACHE_DIR=off) and every point in a fresh device, so nothing
is reused between points or modes (best of 5); the rows lowered and simulated per point (a count that does
not depend on the machine's load); and the choice of the two searches (equal by construction, asserted).

Then the same three modes per sweep point of ``attnsim run`` (run_experiment of attacc_h100: prefill and
the sampled decode steps, GPU and link costs included), best of 3.

Run: python bench/bench_pim_mapping.py
"""

from __future__ import annotations

import os
import time

os.environ["ATTNSIM_CACHE_DIR"] = "off"

import numpy as np  # noqa: E402

POINTS = [
    ("llama2-70b", 16, 2048),
    ("llama2-70b", 64, 4096),
    ("llama3-70b", 4, 32768),
    ("llama3-70b", 16, 8192),
    ("llama3-8b", 2, 2048),
]
ATTN = ("attn_score", "softmax", "attn_context")
REPEAT = 5


def device(cpi, exhaustive=False):
    from attnsim.core.config import find_config, load_yaml
    from attnsim.hwmodels import registry

    hw = load_yaml(find_config("hardware", "attacc_hbm3_pim_5stack"))
    hw["channels_per_item"] = cpi
    dev = registry.build(hw, file="attacc_hbm3_pim_5stack")
    dev.exhaustive_search = exhaustive
    return dev


LOWERED = [0]


def _count_lowerings():
    from attnsim.hwmodels.pim import PIMDevice

    orig = PIMDevice._lowered_cost

    def counted(self, *a):
        LOWERED[0] += 1
        return orig(self, *a)

    PIMDevice._lowered_cost = counted


def point(model, batch, ctx, cpi, exhaustive=False):
    """(wall s, simulated PIM s per step, channels_per_item chosen, rows lowered) of one point."""
    from attnsim.workloads.scenario import Scenario
    from attnsim.workloads.trace import build_trace
    from attnsim.workloads.zoo import load_model

    tr = build_trace(
        load_model(model), Scenario(batch_size=batch, prompt_len=ctx, beyond_max_position="allow"), "decode", tp=8
    )
    rows = np.flatnonzero(np.isin(tr["cls"], ATTN))
    wall = []
    LOWERED[0] = 0
    for _ in range(REPEAT):  # best of REPEAT, each in a fresh device (this machine's CPUs are shared)
        dev = device(cpi, exhaustive)
        t0 = time.perf_counter()
        c = dev.cost(tr, rows)
        wall.append(time.perf_counter() - t0)
    return (
        min(wall),
        float(np.sum(c.time_s * tr["count"][rows])),
        c.mapping[0]["channels_per_item"],
        LOWERED[0] // REPEAT,
    )


def main() -> None:
    _count_lowerings()
    point("llama3-8b", 1, 64, 1)  # JIT compile / cache load outside the timings
    print(
        f"{'model':<11} {'batch':>5} {'ctx':>6} | {'cpi=1 s':>8} {'auto old s':>10} {'auto new s':>10} "
        f"{'old/fixed':>9} {'new/fixed':>9} | {'lowered 1/old/new':>17} | {'PIM ms cpi=1':>12} {'PIM ms auto':>11} "
        f"{'cpi':>4}"
    )
    tot = np.zeros(3)
    low = np.zeros(3, int)
    for model, b, ctx in POINTS:
        fixed = point(model, b, ctx, 1)
        old = point(model, b, ctx, "auto", exhaustive=True)
        new = point(model, b, ctx, "auto")
        assert old[1:3] == new[1:3], (old, new)  # the pruned search picks what the exhaustive one picks
        tot += [fixed[0], old[0], new[0]]
        low += [fixed[3], old[3], new[3]]
        lows = f"{fixed[3]}/{old[3]}/{new[3]}"
        print(
            f"{model:<11} {b:>5} {ctx:>6} | {fixed[0]:8.4f} {old[0]:10.4f} {new[0]:10.4f} {old[0] / fixed[0]:9.2f} "
            f"{new[0] / fixed[0]:9.2f} | {lows:>17} | {fixed[1] * 1e3:12.3f} {new[1] * 1e3:11.3f} {new[2]:>4}"
        )
    lows = f"{low[0]}/{low[1]}/{low[2]}"
    print(
        f"{'total':<24} | {tot[0]:8.4f} {tot[1]:10.4f} {tot[2]:10.4f} {tot[1] / tot[0]:9.2f} {tot[2] / tot[0]:9.2f} | "
        f"{lows:>17} |"
    )

    print("\nwhole runs (attacc_h100, sampled decode), wall s per sweep point:")
    print(
        f"{'model':<11} {'batch':>5} {'ctx':>6} | {'cpi=1 s':>8} {'auto old s':>10} {'auto new s':>10} "
        f"{'old/fixed':>9} {'new/fixed':>9} | {'TPOT ms cpi=1':>13} {'TPOT ms auto':>12}"
    )
    tot = np.zeros(3)
    for model, b, ctx in POINTS:
        r = [run(model, b, ctx, 1), run(model, b, ctx, "auto", True), run(model, b, ctx, "auto")]
        assert r[1][1] == r[2][1]
        tot += [x[0] for x in r]
        print(
            f"{model:<11} {b:>5} {ctx:>6} | {r[0][0]:8.3f} {r[1][0]:10.3f} {r[2][0]:10.3f} {r[1][0] / r[0][0]:9.2f} "
            f"{r[2][0] / r[0][0]:9.2f} | {r[0][1] * 1e3:13.3f} {r[2][1] * 1e3:12.3f}"
        )
    print(f"{'total':<24} | {tot[0]:8.3f} {tot[1]:10.3f} {tot[2]:10.3f} {tot[1] / tot[0]:9.2f} {tot[2] / tot[0]:9.2f}")


def run(model, batch, ctx, cpi, exhaustive=False):
    """(best wall s of 3, TPOT s) of run_experiment of attacc_h100 at one point."""
    from attnsim.hwmodels.pim import PIMDevice
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    PIMDevice.exhaustive_search = exhaustive
    try:
        exp = load_experiment(
            None,
            [
                "experiment.systems=[attacc_h100]",
                "experiment.baseline=null",
                f"experiment.models=[{model}]",
                f"scenarios.chat.batch_size={batch}",
                f"scenarios.chat.prompt_len={ctx}",
                "scenarios.chat.beyond_max_position=allow",
                f"hardware.attacc_hbm3_pim_5stack.channels_per_item={cpi}",
            ],
        )
        wall = []
        for _ in range(3):
            t0 = time.perf_counter()
            d = run_experiment(exp)[0]
            wall.append(time.perf_counter() - t0)
    finally:
        PIMDevice.exhaustive_search = False
    return min(wall), d["metrics"]["tpot_s"]


if __name__ == "__main__":
    main()
