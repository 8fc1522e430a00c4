"""ML.ENERGY v3 power rows under `attnsim serve`, measured over the steady-state window
(docs/validation/gpu-power-collectives.md, "GPU power").

The check behind the GPU power page's "the serving equivalent is not the cause": each selected row of
configs/validation/power.yaml is served with vLLM's scheduler settings as ML.ENERGY ran them (max_batch =
max_num_seqs, 8,192 tokens per iteration (max-num-batched-tokens), chunked prefill), prompts of the file's
prompt_len, output lengths lognormal with the row's mean and spread (std from E[L^2] = len_weighted_output_len x
mean), all requests at t = 0 (ML.ENERGY floods the server and measures the steady state). The window: the
iterations with the batch full (running = max_batch), the first tenth dropped (ramp), as ML.ENERGY's
steady-state window. Printed per row: per-GPU power, J/token, median iteration time vs median ITL, output
tokens/s, each measured / attnsim (error).

Run: python bench/bench_power_serve.py [--models Llama-3.1-8B-Instruct,Llama-3.1-70B-Instruct]
     [--batches 8,32,96] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import yaml

from attnsim.studies.serve.run import load_serving_experiment, serve_experiment
from attnsim.studies.timeline_serve import LOG_FIELDS, recording
from attnsim.studies.validate import CONFIG_ROOT, _load

F = {k: i for i, k in enumerate(LOG_FIELDS)}


def experiment(row: dict, prompt_len: int) -> dict:
    b, mean, lw = int(row["max_num_seqs"]), float(row["avg_output_len"]), float(row["len_weighted_output_len"])
    std = math.sqrt(max(mean * (lw - mean), 1.0))  # E[L^2] = lw x mean
    return {
        "name": "power_serve",
        "description": "an ML.ENERGY row under attnsim serve",
        "systems": [row["system"]],
        "models": [row["model"]],
        "scenarios": {
            "chat": {
                "prompt_len": prompt_len,
                "output_len": int(round(mean)),
                "kv_dtype": "bf16",
                "weight_dtype": "bf16",
                "act_dtype": "bf16",
            }
        },
        "serving": {
            "trace": {
                "num_requests": max(400, 8 * b),
                "prompt": {"dist": "fixed", "mean": prompt_len},
                "output": {"dist": "lognormal", "mean": mean, "std": std, "high": 8000},
                "seed": 1,
            },
            "scheduler": {
                "max_batch": b,
                "max_tokens_per_iter": 8192,
                "chunked_prefill": True,
                "preemption": "recompute",
            },
        },
    }


def steady(row: dict, prompt_len: int, sets: list[str], tmp: Path) -> dict:
    """Steady-window power per GPU, J/token, median iteration (ms) and output tokens/s of one row under serve."""
    path = tmp / "power_serve.yaml"
    path.write_text(yaml.safe_dump(experiment(row, prompt_len)))
    exp, serving = load_serving_experiment(path, sets)
    with recording() as rec:
        serve_experiment(exp, serving)
    log = np.asarray(rec[0]["log"], np.float64).reshape(-1, len(LOG_FIELDS))
    full = np.flatnonzero(log[:, F["running"]] >= row["max_num_seqs"])
    w = log[full[len(full) // 10] : full[-1] + 1]
    dur, energy = w[:, F["dur_s"]].sum(), w[:, F["energy_j"]].sum()
    tokens = w[:, F["decodes"]].sum() + w[:, F["prefills"]].sum()  # a decode and a finished prefill emit a token
    par = next(iter(exp.systems.values())).parallelism
    gpus = par.tp * par.pp  # the pool's iterations are one replica's (as attnsim.studies.validate.power_runs)
    return {
        "power_w_per_gpu": energy / dur / gpus,
        "energy_per_token_j": energy / tokens,
        "itl_ms": float(np.median(w[:, F["dur_s"]])) * 1e3,
        "tok_per_s": tokens / dur,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="Llama-3.1-8B-Instruct,Llama-3.1-70B-Instruct")
    ap.add_argument("--batches", default="8,32,96", help="max_num_seqs values (comma-separated; 'all')")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    a = ap.parse_args()
    data = _load("power")
    models = set(a.models.split(","))
    batches = None if a.batches == "all" else {int(x) for x in a.batches.split(",")}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for f in (CONFIG_ROOT / "validation" / "power").glob("h100_x*.yaml"):  # the rows' systems, by file name
            shutil.copy(f, tmp / f.name)
        for r in data["rows"]:
            name = r["model_id"].split("/")[-1]
            if name not in models or (batches is not None and int(r["max_num_seqs"]) not in batches):
                continue
            m = steady(r, int(data["prompt_len"]), a.sets, tmp)
            cell = lambda meas, mod: f"{meas:9.4g} / {mod:9.4g} ({mod / meas - 1:+6.1%})"  # noqa: E731
            print(
                f"{name:24s} b{int(r['max_num_seqs']):4d}  W/GPU {cell(r['avg_power_w_per_gpu'], m['power_w_per_gpu'])}"
                f"  J/tok {cell(r['energy_per_token_j'], m['energy_per_token_j'])}"
                f"  ITL ms {cell(r['median_itl_ms'], m['itl_ms'])}"
                f"  tok/s {cell(r['output_tok_per_s'], m['tok_per_s'])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
