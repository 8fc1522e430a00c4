"""Benchmark: 10,000 requests at a steady Poisson load through continuous batching.

Prints the wall time of the simulation (one core), simulated requests per wall second, memo
statistics, and checks that a second run with the same seed gives identical per-request results.

    python bench/bench_serve.py                       # attacc system, GPT-3 175B (AttAcc's model)
    python bench/bench_serve.py --system dgx_a100 --model llama2-70b --rate 4
"""
from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from attnsim.serve.metrics import request_table, summarize
from attnsim.serve.requests import TraceSpec, synthetic_trace
from attnsim.serve.run import quick_pool
from attnsim.serve.scheduler import simulate_pool


def run_once(args):
    # lognormal lengths reach 8x the mean: beyond GPT-3's 2048 positions (costs modelled, allowed explicitly)
    pool, _, sv = quick_pool(system=args.system, model=args.model,
                             scenario={"prompt_len": args.prompt, "output_len": args.output, "beyond_max_position": "allow"},
                             serving={"scheduler": {"max_batch": args.max_batch, "max_tokens_per_iter": args.tokens}})
    tr = synthetic_trace(TraceSpec(num_requests=args.requests, rate_per_s=args.rate, seed=args.seed,
                                   prompt={"dist": "lognormal", "mean": args.prompt, "std": args.prompt / 2, "high": 8 * args.prompt},
                                   output={"dist": "lognormal", "mean": args.output, "std": args.output / 2, "high": 8 * args.output}),
                         1, 1)
    t0 = time.perf_counter()
    r = simulate_pool(pool, tr.arrival_s, tr.prompt_tokens, tr.output_tokens)
    wall = time.perf_counter() - t0
    req = request_table(tr.arrival_s, tr.prompt_tokens, tr.output_tokens, r.first_token_s, r.finish_s, r.admit_s,
                        r.energy_j, r.preemptions, r.prefix_hit_tokens)
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(req[k]).tobytes() for k in sorted(req))).hexdigest()
    return wall, r, summarize(req, sv.slo, r.busy_energy_j + r.idle_energy_j, r.in_system_area), digest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="attacc")
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=1.5, help="arrivals per second (attacc + GPT-3: ~2.3/s saturates)")
    ap.add_argument("--prompt", type=int, default=1024, help="mean prompt tokens (lognormal)")
    ap.add_argument("--output", type=int, default=256, help="mean output tokens (lognormal)")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=2048, help="max tokens per iteration")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    wall, r, m, d1 = run_once(args)
    wall2, _, _, d2 = run_once(args)
    print(f"system {args.system}, model {args.model}: {args.requests} requests at {args.rate}/s "
          f"(prompt ~{args.prompt}, output ~{args.output} tokens)")
    print(f"simulated {m['makespan_s']:.1f} s of serving in {wall:.2f} s wall (second run {wall2:.2f} s)")
    print(f"  {args.requests / wall:.0f} requests/s simulated, {r.iterations} iterations, "
          f"{r.iterations / wall:.0f} iterations/s, memo entries {r.stats['memo_entries']}")
    print(f"  throughput {m['throughput_rps']:.2f} req/s, {m['output_tokens_per_s']:.0f} out tok/s, TTFT p50/p99 "
          f"{m['ttft_p50'] * 1e3:.0f}/{m['ttft_p99'] * 1e3:.0f} ms, TPOT p50/p99 {m['tpot_p50'] * 1e3:.1f}/"
          f"{m['tpot_p99'] * 1e3:.1f} ms, preemptions {m['preemptions']}")
    print(f"  Little's law: mean in system {m['mean_in_system']:.2f} vs rate x latency {m['littles_law_rhs']:.2f}")
    print(f"  same seed, same results: {d1 == d2} ({d1[:16]})")


if __name__ == "__main__":
    main()
