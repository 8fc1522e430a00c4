"""Print the GPU model's calibration errors against configs/validation/gpu_calibration.yaml (vidur §4.1 tables,
LLMCompass A100 GEMMs, GPT-3 layer) and the model's evaluation speed. Usage: python bench/bench_gpu.py"""

from __future__ import annotations

import time

import numpy as np
import yaml

from attnsim.configs import CONFIG_ROOT
from attnsim.hwmodels.gpu import load_hardware
from attnsim.workloads.optrace import OpTrace

DATA = yaml.safe_load((CONFIG_ROOT / "validation" / "gpu_calibration.yaml").read_text())


def mm(m, k, n):
    return dict(
        op="mm",
        cls="matmul",
        count=1,
        m=m,
        n=n,
        k=k,
        batch=1,
        flops=2.0 * m * n * k,
        weight_bytes=2.0 * k * n,
        act_bytes=2.0 * m * (k + n),
    )


def run(rows, model):
    t = OpTrace.from_rows(rows, phase="x", model="x", tp=1, query_tokens=np.ones(1), context_lens=np.ones(1), groups=[])
    return model.cost(t, np.arange(len(t)))


def main():
    for key, preset in (("a100", "a100_80gb_sxm"), ("h100", "h100_sxm")):
        g = load_hardware(preset)
        keys, rows, meas = [], [], []
        for tab in DATA["vidur"]["tables"]:
            for tok, d in tab["us"].items():
                for (op, (k, n)), us in zip(tab["shapes"].items(), d[key]):
                    keys.append((tab["model"], tok, op))
                    rows.append(mm(tok, k, n))
                    meas.append(us)
        c = run(rows, g)
        err = c.time_s * 1e6 / np.array(meas) - 1
        print(
            f"{preset}: vidur {len(err)} ops  mean |err| {np.mean(np.abs(err)):.1%}  max {np.max(np.abs(err)):.1%}"
            f"  >15 %: {int(np.sum(np.abs(err) > 0.15))}"
        )
        for kk, e in zip(keys, err):
            if abs(e) > 0.15:
                print(f"    {kk}: {e:+.1%}")
    g = load_hardware("a100_80gb_sxm")
    eager = type(g)(g.spec.model_copy(update={"software_stack": "eager"}))
    R = DATA["llmcompass_a100_matmul"]["rows"]
    c = run([mm(m, k, n) for m, k, n, _ in R], eager)
    print("LLMCompass A100 GEMMs (eager stack):")
    for (m, k, n, ms), t in zip(R, c.time_s):
        print(f"    M={m:5d} K=N={k:5d}  meas {ms:7.4f} ms  model {t * 1e3:7.4f} ms  {t * 1e3 / ms - 1:+.1%}")
    big = [mm(int(m), 4096, 4096) for m in np.random.default_rng(0).integers(1, 8192, 100_000)]
    t0 = time.perf_counter()
    run(big, g)
    print(f"cost() of 100,000 matmul rows: {time.perf_counter() - t0:.3f} s (incl. OpTrace build)")


if __name__ == "__main__":
    main()
