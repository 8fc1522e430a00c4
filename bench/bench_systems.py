"""Benchmark: one full generation of GPT-3-175B at batch 64 (2048 + 128 tokens) on the attacc system,
every decode step simulated (exact mode), one core, after JIT compile. Target (issue 6): < 30 s.

Prints wall time (compile/warm-up excluded), steps simulated and the per-step cost.
Run: python bench/bench_systems.py
"""

import os
import time

os.environ.setdefault("ATTNSIM_CACHE_DIR", "off")  # measure the engine, not the sub-result cache
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

from attnsim.sim.experiment import load_experiment  # noqa: E402
from attnsim.sim.runner import run_experiment  # noqa: E402


def main() -> None:
    sets = [
        "experiment.systems=[attacc]",
        "experiment.baseline=null",
        "experiment.scenarios={b64: {batch_size: 64, prompt_len: 2048, output_len: 128}}",
    ]
    t0 = time.perf_counter()
    run_experiment(load_experiment("attacc_gpt3_175b", sets + ["experiment.scenarios.b64.output_len=2"]))
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    (doc,) = run_experiment(load_experiment("attacc_gpt3_175b", sets + ["experiment.generation.mode=exact"]))
    wall = time.perf_counter() - t0
    m = doc["metrics"]
    print(f"warm-up (JIT compile / cache load): {warm:.2f} s")
    print(
        f"GPT-3-175B, batch 64, 2048+128 tokens on attacc, exact: {m['decode_steps_simulated']} decode steps "
        f"+ prefill in {wall:.2f} s ({wall / (m['decode_steps_simulated'] + 1) * 1e3:.1f} ms per step); target < 30 s "
        f"-> {30 / wall:.0f}x headroom"
    )
    print(f"simulated TPOT {m['tpot_s'] * 1e3:.2f} ms, TTFT {m['ttft_s']:.2f} s, {m['tokens_per_s']:.0f} tokens/s")


if __name__ == "__main__":
    main()
