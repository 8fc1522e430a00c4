"""``attnsim validate``: the bundled validation set, measured vs published, with each row's error.

Every row has a ``role``: ``calibration`` (in-sample: an attnsim parameter was fitted or set from it),
``validation`` (held out: nothing was set from it) or ``limit`` (a physical bound every run must keep).
Sets (each number with its source):
- gpu: GPU linear-op kernel times (vidur profiles, A100 and H100, configs/validation/
  gpu_calibration.yaml) — per op within 15 %, the sum of the four linear ops of a row within 10 %. The
  presets' efficiency curves were fitted to all of these rows, so every one is ``calibration``; held
  out (``validation``): LLMCompass' A100 GEMMs and a GPT-3 layer on 4 x A100 (same data file);
- reproductions (``reproductions/NAME`` for one): each folder of configs/reproductions/ (see
  :mod:`attnsim.studies.reproduce`), rows with the role their reference.yaml gives; ``attacc`` is
  ``reproductions/attacc`` under its old name;
- power: per-GPU power and J/token of vLLM serving on H100 (ML.ENERGY v3, configs/validation/power.yaml)
  as equivalent static batches on ``software: vllm`` systems (configs/validation/power/); Llama-3.1-8B TP1
  is ``calibration`` (the h100_sxm power parameters were fitted to its power), the 70B TP4 rows are held
  out; the J/token rows that miss are the time side (power.yaml lists them);
- nccl: all-reduce time vs nccl-tests on 8 x A100, 4 x A100 and 4 x H100 (configs/validation/nccl.yaml,
  every row 8 B - 1 GB within 15 %; ``calibration``: the link presets' nccl blocks were fitted to them)
  and held-out rows (8 x H100 ring busbw, LLMCompass' 4 x A100 all-reduces, vLLM custom all-reduce);
- mlperf (``mlperf/BENCHMARK`` for one): MLPerf Inference v4.0 / v4.1 closed, NVIDIA DGX-H100 (TensorRT-LLM)
  rows of llama2-70b, gpt-j and mixtral-8x7b served by ``attnsim serve`` on the built-in defaults plus the
  submission's settings (configs/validation/mlperf.yaml, :mod:`attnsim.studies.mlperf`): Offline tokens/s and the
  Server scenario's highest Poisson rate under the benchmark's p99 limits, each within 10 % (``validation``);
- limits: physical limits on every run of the bundled comparison experiments (achieved bandwidth
  never above peak).
"""

from __future__ import annotations

import numpy as np

from attnsim.core.config import CONFIG_ROOT, ConfigError, load_yaml
from attnsim.studies.validation_row import Row  # noqa: F401  (attnsim.studies.validate.Row, its public name)


def _load(name: str) -> dict:
    return load_yaml(CONFIG_ROOT / "validation" / f"{name}.yaml")


def gpu_rows() -> list[Row]:
    """Model vs vidur per-op times; exceptions listed in the data file keep their stated bound. The GPU
    presets' efficiency curve, compute efficiency, tiles and per-tile overhead were fitted to all 60 ops
    per GPU (see the preset YAMLs), so every vidur row is in-sample (``calibration``); the LLMCompass
    rows of :func:`gpu_held_out_rows` follow (``validation``)."""
    from attnsim.hwmodels.gpu import load_hardware
    from attnsim.workloads.optrace import OpTrace

    data = _load("gpu_calibration")["vidur"]
    presets = {"a100": "a100_80gb_sxm", "h100": "h100_sxm"}
    # rows the data file lists as known outliers (with the reason and their own bound)
    exceptions = {(g, m, int(t), op): float(b) for g, m, t, op, b in _load("gpu_calibration").get("known_outliers", [])}
    out = []
    for table in data["tables"]:
        ops = list(table["shapes"])
        for tokens, per_gpu in table["us"].items():
            for key, times in per_gpu.items():
                gpu = load_hardware(presets[key])
                rows = [
                    {
                        "op": op,
                        "cls": "matmul",
                        "layer_group": 0,
                        "count": 1,
                        "m": int(tokens),
                        "n": n,
                        "k": k,
                        "batch": 1,
                        "flops": 2.0 * tokens * n * k,
                        "weight_bytes": 2.0 * n * k,
                        "act_bytes": 2.0 * tokens * (n + k),
                    }
                    for op, (k, n) in table["shapes"].items()
                ]
                tr = OpTrace.from_rows(
                    rows,
                    phase="decode",
                    model=table["model"],
                    tp=table["tp"],
                    query_tokens=np.ones(1, np.int64),
                    context_lens=np.ones(1, np.int64),
                    groups=[],
                )
                t = gpu.cost(tr, np.arange(len(rows))).time_s * 1e6
                for op, tm, pub in zip(ops, t, times):
                    tol = exceptions.get((key, table["model"], int(tokens), op), 0.15)
                    note = " (known outlier, see data file)" if tol > 0.15 else ""
                    out.append(
                        Row(
                            "gpu",
                            f"{key} {table['model']} TP{table['tp']} {op} @{tokens} tok [us]{note}",
                            float(tm),
                            float(pub),
                            tol,
                            role="calibration",
                            system=presets[key],
                        )
                    )
                tol = exceptions.get((key, table["model"], int(tokens), "sum"), 0.10)
                out.append(
                    Row(
                        "gpu",
                        f"{key} {table['model']} TP{table['tp']} sum of 4 @{tokens} tok [us]",
                        float(np.sum(t)),
                        float(np.sum(times)),
                        tol,
                        role="calibration",
                        system=presets[key],
                    )
                )
    return out + gpu_held_out_rows() + decode_attention_rows()


def decode_attention_row_dicts(batch: int, ctx: int, heads: int, kv_heads: int, head_dim: int = 128) -> list[dict]:
    """The three attention rows of one decode (q = 1) kernel call, bf16, as the trace builder writes them
    (KV already cached: a kernel benchmark does not write it)."""
    pairs, kv = batch * ctx, 2.0 * batch * ctx * kv_heads * head_dim
    base = dict(
        m=1,
        n=pairs,
        batch=heads,
        flops=2.0 * heads * pairs * head_dim,
        count=1,
        act_bytes=2.0 * (batch * heads * head_dim + heads * pairs),
        kv_read_bytes=kv,
    )
    return [
        dict(op="attn_score", cls="attn_score", k=head_dim, **base),
        dict(
            op="softmax",
            cls="softmax",
            k=0,
            m=1,
            n=pairs,
            batch=heads,
            count=1,
            flops=5.0 * heads * pairs,
            act_bytes=4.0 * heads * pairs,
        ),
        dict(op="attn_context", cls="attn_context", k=head_dim, **base),
    ]


def decode_attention_rows() -> list[Row]:
    """H100 decode attention kernel times (FA3 / FA2 / ONNX Runtime) vs the fused attention rows of one
    call on h100_sxm; roles and per-row bounds from the data file (default 15 %)."""
    from attnsim.hwmodels.gpu import load_hardware

    data = _load("gpu_calibration")["decode_attention_h100"]
    gpu = load_hardware("h100_sxm")
    out = []
    for kernel, b, ctx, hq, hkv, us, role, *tol in data["rows"]:
        t = float(np.sum(_cost_us(gpu, decode_attention_row_dicts(int(b), int(ctx), int(hq), int(hkv)))))
        out.append(
            Row(
                "gpu",
                f"h100 decode attention {kernel} batch {b} ctx {ctx} {hq}/{hkv} heads [us]",
                t,
                float(us),
                float(tol[0]) if tol else 0.15,
                role=role,
                system="h100_sxm",
                source=data["source"],
            )
        )
    return out


def _cost_us(gpu, rows: list[dict]) -> np.ndarray:
    from attnsim.workloads.optrace import OpTrace

    tr = OpTrace.from_rows(
        [{"layer_group": 0, "batch": 1, "count": 1, **r} for r in rows],
        phase="decode",
        model="validation",
        tp=1,
        query_tokens=np.ones(1, np.int64),
        context_lens=np.ones(1, np.int64),
        groups=[],
    )
    return gpu.cost(tr, np.arange(len(rows))).time_s * 1e6


def _mm(m: int, k: int, n: int, op: str = "mm", count: int = 1) -> dict:
    """fp16 (m x k) @ (k x n): weights k n 2 B, activations in + out."""
    return {
        "op": op,
        "cls": "matmul",
        "count": count,
        "m": m,
        "n": n,
        "k": k,
        "flops": 2.0 * m * n * k,
        "weight_bytes": 2.0 * k * n,
        "act_bytes": 2.0 * m * (k + n),
    }


def _gpt3_layer(phase: str) -> list[dict]:
    """One GPT-3 175B layer on one of 4 TP ranks, batch 8 (gpu_calibration.yaml gpt3_layer_a100_tp4)."""
    d, heads, hd, b = 12288, 24, 128, 8
    q, ctx = (1, 3072) if phase == "decode" else (2048, 2048)
    m = b * q
    scores = 2.0 * b * heads * q * ctx
    attn = dict(
        m=q,
        n=b * ctx,
        k=hd,
        batch=heads,
        flops=2.0 * q * b * ctx * hd * heads,
        kv_read_bytes=2.0 * b * ctx * heads * hd,
        act_bytes=2.0 * m * heads * hd + scores,
        count=1,
    )
    elem = dict(cls="elementwise", flops=8.0 * m * d, act_bytes=4.0 * m * d)
    return [
        _mm(m, d, d // 4, "qkv", count=3),
        dict(op="qk", cls="attn_score", **attn),
        dict(op="softmax", cls="softmax", count=1, flops=2.5 * scores, act_bytes=2 * scores),
        dict(op="av", cls="attn_context", **attn),
        _mm(m, d // 4, d, "out"),
        _mm(m, d, d, "w1"),
        dict(op="gelu", count=1, **elem),
        _mm(m, d, d, "w2"),
        dict(op="layernorm", count=2, **elem),
    ]


def gpu_held_out_rows() -> list[Row]:
    """Held-out GPU rows (no preset parameter was fitted to them): LLMCompass' PyTorch-eager A100 GEMMs
    with K >= 1,024 (K = N <= 256 are PyTorch-overhead-bound and not compared; K = 1,024 is below the
    fitted K range, vidur K >= 2,048, and held to 60 %) and one GPT-3-175B layer on 4 x A100 (TP 4,
    batch 8, eager, the two all-reduces excluded)."""
    from attnsim.hwmodels.gpu import GPUModel, load_hardware

    data = _load("gpu_calibration")
    a100 = load_hardware("a100_80gb_sxm")
    eager = GPUModel(a100.spec.model_copy(update={"software_stack": "eager"}))
    out = []
    gemms = [r for r in data["llmcompass_a100_matmul"]["rows"] if r[1] >= 1024]
    for (m, k, n, ms), us in zip(gemms, _cost_us(eager, [_mm(int(m), int(k), int(n)) for m, k, n, _ in gemms])):
        out.append(
            Row(
                "gpu",
                f"a100 LLMCompass GEMM {m}x{k}x{n} (eager) [us]",
                float(us),
                ms * 1e3,
                0.25 if k >= 4096 else 0.60,
                role="validation",
                system="a100_80gb_sxm",
                source=data["llmcompass_a100_matmul"]["source"],
            )
        )
    layer = data["gpt3_layer_a100_tp4"]
    for phase, key, unit in (("decode", "decode_us", 1.0), ("prefill", "prefill_ms", 1e3)):
        rows = _gpt3_layer(phase)
        total = float(np.sum(_cost_us(eager, rows) * np.array([r["count"] for r in rows])))
        ref = (layer[key]["total"] - 2 * layer[key]["allreduce"]) * unit
        out.append(
            Row(
                "gpu",
                f"a100 GPT-3 layer TP4 batch 8 {phase}, no all-reduce (eager) [us]",
                total,
                ref,
                0.15,
                role="validation",
                system="a100_80gb_sxm",
                source=layer["source"],
            )
        )
    return out


def reproduction_rows(name: str | None = None, label: str | None = None) -> list[Row]:
    """Rows of reproduction ``name`` (every folder of configs/reproductions/ when None); each folder is
    loaded and checked before anything is simulated."""
    from attnsim.studies import reproduce

    reps = [reproduce.load(p) for p in ([reproduce.find(name)] if name else reproduce.folders())]
    return [row for rep in reps for row in reproduce.run_rows(rep, set_name=label)]


def limit_rows() -> list[Row]:
    """Achieved bandwidth / peak <= 1 for every run of the bundled comparison experiments."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    out = []
    for name in ("default", "systems_compare"):
        for d in run_experiment(
            load_experiment(name, ["experiment.generation.mode=sampled", "experiment.generation.samples=2"])
        ):
            if d["status"] != "ok":
                continue
            for dev, bw in d["metrics"]["bandwidth"].items():
                out.append(
                    Row(
                        "limits",
                        f"{name}: {d['system']} {dev} bandwidth / peak",
                        bw["utilization"],
                        1.0,
                        0.0,
                        check="upper_bound",
                        role="limit",
                        system=d["system"],
                    )
                )
    return out


def power_runs(sets: tuple = (), roles: tuple = ("calibration", "validation")) -> list[dict]:
    """Each row of configs/validation/power.yaml as its serving equivalent (batch n = round(avg batch),
    the file's prompt_len P, L = round(avg_output_len) tokens per request): one prefill of the batch plus
    L - 1 decode steps at the TOKEN-WEIGHTED mean context P + E[L^2] / 2E[L] (``len_weighted_output_len``
    / 2: under continuous batching a request of L tokens sits in L steps, so long requests fill the
    steps; a static batch of mean-length requests would attend over P + L/2). Two runs: (P, 2 tokens)
    for the prefill, (that context, 2 tokens) for the decode step (decode cost is linear in the context,
    so one step at the mean is the mean step). Returns measured and modelled per-GPU power, J/token,
    step per output token and the decode step vs median ITL. ``sets``: extra ``--set`` overrides,
    applied last (e.g. a fit or a prompt length)."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    data = _load("power")
    exp = CONFIG_ROOT / "validation" / data["experiment"]

    def run(r, prompt: int) -> dict:
        (d,) = run_experiment(
            load_experiment(
                exp,
                [
                    f"experiment.systems=[{r['system']}]",
                    f"experiment.models=[{r['model']}]",
                    f"scenarios.chat.batch_size={max(1, round(r['avg_batch_size']))}",
                    f"scenarios.chat.prompt_len={prompt}",
                    "scenarios.chat.output_len=2",
                    *sets,
                ],
            )
        )
        if d["status"] != "ok":
            raise ConfigError(
                f"a run that completes, got {d['status']} at batch {r['avg_batch_size']}",
                file="configs/validation/power.yaml",
                key=f"rows.{r['model_id']}",
            )
        return d

    out = []
    for r in (r for r in data["rows"] if r["role"] in roles):
        n_out = max(1, round(r["avg_output_len"]))
        pre = run(r, data["prompt_len"])
        ctx = data["prompt_len"] + max(0, round(r["len_weighted_output_len"] / 2))
        dec = run(r, ctx)
        p, s = pre["breakdown"]["prefill"], dec["breakdown"]["decode_step"]
        time_s = p["time_s"] + (n_out - 1) * s["time_s"]
        energy_j = p["energy_j"] + (n_out - 1) * s["energy_j"]
        m = pre["metrics"]
        gpus = m["tp"] * m.get("pp", 1)  # the breakdown's steps are one replica's (engine.cost_step, set_static)
        out.append(
            {
                **r,
                "source": data["source"],
                "tolerance": data["tolerance"],
                "decode_context": ctx,
                "model_power_w_per_gpu": energy_j / time_s / gpus,
                "model_energy_per_token_j": energy_j / (m["batch_per_replica"] * n_out),
                "model_tpot_ms": s["time_s"] * 1e3,
                "model_step_ms": time_s / n_out * 1e3,
            }
        )
    return out


def power_rows() -> list[Row]:
    """Per-GPU power and J/token vs ML.ENERGY v3 (H100, vLLM, chat), per row of :func:`power_runs`."""
    rows = []
    for r in power_runs():
        tag = f"{r['model_id'].split('/')[-1]} batch {r['avg_batch_size']:g}"
        for what, mod, ref in (
            ("W per GPU", "model_power_w_per_gpu", "avg_power_w_per_gpu"),
            ("J/token", "model_energy_per_token_j", "energy_per_token_j"),
        ):
            rows.append(
                Row(
                    "power",
                    f"{tag} {what}",
                    float(r[mod]),
                    float(r[ref]),
                    float(r["tolerance"]),
                    role=r["role"],
                    system=str(r["system"]).removesuffix(".yaml"),
                    source=r["source"],
                )
            )
    return rows


def nccl_rows() -> list[Row]:
    """All-reduce time vs nccl-tests (configs/validation/nccl.yaml: every row of calibration/
    nccl_allreduce.csv from 8 B to 1 GB, ``calibration``: the link presets' nccl blocks were fitted to
    them) and held-out rows (8 x H100 ring busbw, LLMCompass' 4 x A100 all-reduces, vLLM custom
    all-reduce), through the presets' :mod:`attnsim.hwmodels.collectives` model."""
    from attnsim.hwmodels import collectives
    from attnsim.hwmodels.gpu import load_hardware
    from attnsim.hwmodels.links import LinkModel

    data = _load("nccl")

    def link(name: str, nvls: bool = True, allreduce: str | None = None) -> LinkModel:
        spec = load_hardware(name).spec
        upd = {} if nvls else {"nccl": spec.nccl.model_copy(update={"nvls": None})}
        return LinkModel(spec.model_copy(update={**upd, **({"allreduce": allreduce} if allreduce else {})}))

    out = []
    for key, topo in data["topologies"].items():
        model = link(topo["link"], bool(topo["nvls"]))
        sizes = np.array([r[0] for r in topo["rows"]], dtype=np.float64)
        t, choice = model.collective("allreduce", sizes, int(topo["gpus"]))
        for s, tm, c, (_, pub) in zip(sizes, t, choice, topo["rows"]):
            out.append(
                Row(
                    "nccl",
                    f"{key} {topo['gpus']} GPUs all-reduce {int(s)} B ({c}) [us]",
                    float(tm) * 1e6,
                    float(pub),
                    float(data["tolerance"]),
                    role=topo["role"],
                    system=topo["link"],
                    source=topo["source"],
                )
            )
    for h in data["held_out"]:
        model = link(h["link"], allreduce=h.get("allreduce"))
        if "algorithm" in h:  # one algorithm, the tuner over its protocols
            t = min(
                float(
                    collectives.algo_time_s(
                        model.spec.nccl,
                        model.peak_bandwidth_bytes_per_s,
                        "allreduce",
                        h["bytes"],
                        h["gpus"],
                        h["algorithm"],
                        p,
                    )
                )
                for p in collectives.PROTOCOLS
            )
        else:
            t = float(model.collective("allreduce", h["bytes"], h["gpus"])[0])
        if "busbw_gbps" in h:
            measured, published = (
                float(collectives.bus_bandwidth_bytes_per_s("allreduce", h["bytes"], h["gpus"], t)) / 1e9,
                h["busbw_gbps"],
            )
        else:
            measured, published = t * 1e6, h["time_us"]
        out.append(
            Row(
                "nccl",
                h["name"],
                measured,
                float(published),
                float(h["tolerance"]),
                role="validation",
                system=h["link"],
                source=h["source"],
            )
        )
    return out


def mlperf_rows(benchmark: str | None = None) -> list[Row]:
    """MLPerf Inference DGX-H100 rows (configs/validation/mlperf.yaml; ``benchmark``: only that one)."""
    from attnsim.studies import mlperf

    return mlperf.rows(benchmarks=[benchmark] if benchmark else None)


SETS = {
    "gpu": gpu_rows,
    "reproductions": reproduction_rows,
    "nccl": nccl_rows,
    "power": power_rows,
    "mlperf": mlperf_rows,
    "limits": limit_rows,
}
ALIASES = {"attacc": "reproductions/attacc"}  # the set's name before configs/reproductions/ (users' scripts)


def _job(name: str):
    target = ALIASES.get(name, name)
    if target.startswith("reproductions/"):
        from attnsim.studies import reproduce

        sub = target.split("/", 1)[1]
        reproduce.find(sub)  # an unknown name is refused before anything runs
        return lambda: reproduction_rows(sub, label=name if name in ALIASES else None)
    if target.startswith("mlperf/"):
        from attnsim.studies import mlperf

        sub = target.split("/", 1)[1]
        known = list(mlperf.load().benchmarks)
        if sub not in known:
            raise ConfigError(
                f"expected mlperf/BENCHMARK with BENCHMARK one of {', '.join(known)}, got {name!r}", file="--set"
            )
        return lambda: mlperf_rows(sub)
    if target in SETS:
        return SETS[target]
    raise ConfigError(
        f"expected one of {', '.join([*SETS, *ALIASES])}, reproductions/NAME or mlperf/BENCHMARK, got {name!r}",
        file="--set",
    )


def run(sets=None) -> list[Row]:
    """Rows of ``sets`` (default all): names of :data:`SETS`, ``reproductions/NAME`` or an alias."""
    jobs = [_job(name) for name in sets or SETS]
    return [row for job in jobs for row in job()]


def reproductions_in(sets=None) -> list[str]:
    """Names of the reproduction folders ``sets`` select (each once, in order)."""
    from attnsim.studies import reproduce

    out: list[str] = []
    for name in sets or SETS:
        target = ALIASES.get(name, name)
        if target == "reproductions" and "reproductions" in SETS:
            out += [p.name for p in reproduce.folders()]
        elif target.startswith("reproductions/"):
            out.append(target.split("/", 1)[1])
    return list(dict.fromkeys(out))
