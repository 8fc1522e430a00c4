"""MLPerf Inference as serving validation data (``attnsim validate --set mlperf``).

configs/validation/mlperf.yaml holds NVIDIA's DGX-H100 (8 x H100-SXM, TensorRT-LLM) closed-division rows of
rounds v4.0 and v4.1 for llama2-70b, gpt-j and mixtral-8x7b, each with the path of its
``mlperf_log_summary.txt``, and per benchmark an experiment (configs/validation/mlperf/*.yaml: the model, the
dataset's length distributions, the benchmark's latency constraints) plus the submission's own settings as
named ``assumptions`` (TensorRT-LLM stack, TP x instances, FP8, batch limits), each with its source line.
Everything else is attnsim's built-in defaults (h100_sxm, nvlink4, dgx_h100, the trtllm stack).

- Offline: ``offline_requests`` requests drawn from the dataset's distributions all arrive at t = 0; the row
  compares the steady-state output tokens/s (:func:`steady_tokens_per_s`: tokens generated until the last
  request is admitted, over that time; MLPerf's 200,000-sample runs are that steady state but for a tail
  of < 1 %, while a run of a few thousand requests would spend a large share of its time draining its last
  batch) or samples/s (that / the mean output length). The sampling error of the mean output length,
  ``std / sqrt(n)``, is reported per row.
- Server: :func:`attnsim.studies.rate_search.max_rate_under_slo` on ``server_requests`` Poisson arrivals served by one
  of the submission's k instances (:func:`server_search`), starting from the Offline run's request rate / k.
  MLPerf reports the rate the submitter scheduled (``server_target_qps``) once it passed, not the highest that
  would: the system's maximum lies between that rate and the round's Offline samples/s (the throughput with no
  latency limit). The row (check ``bracket``) compares k x the highest rate meeting the benchmark's limits with
  that interval, within the tolerance of its nearer end.

Runs shared by several rows (the -99 and -99.9 variants, the two rounds' identical settings) run once.
"""

from __future__ import annotations

import json
import math
from typing import ClassVar, Literal, Optional

from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import CONFIG_ROOT, Plausible, Schema, load_yaml, validate
from attnsim.core.outputs import SafeName
from attnsim.studies.validation_row import Row

DATA = CONFIG_ROOT / "validation" / "mlperf.yaml"
SCENARIOS = ("Offline", "Server")
REL_TOL = 0.03  # the Server search stops when its bracket is narrower than 3 % (a third of the 10 % tolerance)


class Assumption(Schema):
    name: SafeName
    title: str = Field(min_length=1)
    source: str = Field(min_length=1)
    set: dict = {}  # --set items for both scenarios
    offline: dict = {}  # --set items for the Offline scenario only
    server: dict = {}  # --set items for the Server scenario only


class Benchmark(Schema):
    plausible: ClassVar[dict] = {
        "offline_requests": Plausible(
            1,
            1e6,
            "requests simulated per Offline row: MLPerf's sample sets hold 24,576 "
            "(llama2-70b) to 15,000 (mixtral) queries; more only costs time",
        ),
        "server_requests": Plausible(1, 1e6, "requests simulated per Server rate probe (as offline_requests)"),
    }
    experiment: str  # relative to configs/validation/
    offline_requests: PositiveInt
    server_requests: PositiveInt
    limits: dict[Literal["ttft_p99", "tpot_p99", "latency_p99"], PositiveFloat] = Field(min_length=1)
    assumptions: list[Assumption] = []


class RowSpec(Schema):
    plausible: ClassVar[dict] = {
        "reference": Plausible(
            1e-3,
            1e7,
            "an MLPerf result: tokens/s, samples/s or queries/s of one 8-GPU node "
            "(DGX-H100 llama2-70b Offline ~2.5e4 tokens/s)",
        ),
        "offline_samples_per_s": Plausible(
            1e-3, 1e6, "an MLPerf Offline samples/s of one 8-GPU node (DGX-H100 gpt-j ~290, llama2-70b ~85)"
        ),
    }
    round: str
    benchmark: str
    variant: str
    scenario: Literal[SCENARIOS]
    metric: Literal["tokens_per_s", "samples_per_s", "rate_per_s"]
    reference: PositiveFloat
    # Server rows: the same round's Offline "Samples per second" (the throughput with no latency limit): the
    # system's highest Server rate lies between the target that passed (reference) and this
    offline_samples_per_s: Optional[PositiveFloat] = None
    role: Literal["calibration", "validation"] = "validation"


class RoundSpec(Schema):
    repo: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")


class MLPerfSpec(Schema):
    plausible: ClassVar[dict] = {"tolerance": Plausible(0, 1, "a relative error bound (issue 29: 10 %)")}
    source: str
    rounds: dict[str, RoundSpec]
    tolerance: PositiveFloat
    benchmarks: dict[str, Benchmark]
    rows: list[RowSpec] = Field(min_length=1)


def load(path=DATA) -> MLPerfSpec:
    """The checked data file (every row's round and benchmark must be listed)."""
    from attnsim.core.config import ConfigError, display_path

    file = display_path(path)
    spec = validate(MLPerfSpec, load_yaml(path), file=file)
    for i, r in enumerate(spec.rows):
        if r.round not in spec.rounds:
            raise ConfigError(
                f"expected one of {', '.join(spec.rounds)}, got {r.round!r}", file=file, key=f"rows.{i}.round"
            )
        if r.benchmark not in spec.benchmarks:
            raise ConfigError(
                f"expected one of {', '.join(spec.benchmarks)}, got {r.benchmark!r}",
                file=file,
                key=f"rows.{i}.benchmark",
            )
        if (r.scenario == "Server") != (r.offline_samples_per_s is not None) or (
            r.offline_samples_per_s is not None and r.offline_samples_per_s < r.reference
        ):
            raise ConfigError(
                f"expected an offline_samples_per_s >= the reference on Server rows only, got "
                f"{r.offline_samples_per_s} on a {r.scenario} row of reference {r.reference:g}",
                file=file,
                key=f"rows.{i}.offline_samples_per_s",
            )
        if (r.scenario == "Server") != (r.metric == "rate_per_s"):
            raise ConfigError(
                f"expected rate_per_s for Server rows and a throughput for Offline rows, got "
                f"{r.metric} for {r.scenario}",
                file=file,
                key=f"rows.{i}.metric",
            )
    return spec


def summary_path(r: RowSpec) -> str:
    return (
        f"closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/{r.variant}/{r.scenario}/performance/run_1/"
        f"mlperf_log_summary.txt"
    )


def scenario_sets(b: Benchmark, scenario: str, requests: Optional[int] = None) -> list[str]:
    """``--set`` items of the benchmark's assumptions for ``scenario`` (plus the request count)."""
    items: dict = {}
    for a in b.assumptions:
        items.update(a.set)
        items.update(a.offline if scenario == "Offline" else a.server)
    n = requests or (b.offline_requests if scenario == "Offline" else b.server_requests)
    items["experiment.serving.trace.num_requests"] = n
    return [f"{k}={json.dumps(v)}" for k, v in items.items()]


def offline_run(b: Benchmark, requests: Optional[int] = None) -> dict:
    """The Offline run document: every request at t = 0 (no rate)."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    exp, sv = load_serving_experiment(CONFIG_ROOT / "validation" / b.experiment, scenario_sets(b, "Offline", requests))
    (doc,) = serve_experiment(exp, sv)
    return doc


def _parallelism(b: Benchmark, key: str) -> int:
    vals = [int(v) for a in b.assumptions for k, v in a.set.items() if k.endswith(f".parallelism.{key}")]
    return vals[-1] if vals else 1


def instances(b: Benchmark) -> int:
    """The submission's independent instances (``systems.<name>.parallelism.replicas`` its assumptions set)."""
    return _parallelism(b, "replicas")


def server_search(b: Benchmark, start: float, requests: Optional[int] = None, rel_tol: float = REL_TOL):
    """(RateSearch of one instance, instances): the search serves ONE of the k instances at rate / k; the
    system's rate is k x the instance's. A rate only fails once the queue has built up, and that takes about
    the time a request spends in the system (15-45 s here), so the trace must span several of those: on one
    instance the same requests span k x longer (mixtral: 10,000 requests at 348 req/s over 8 instances are
    19 s of arrivals, on one instance 230 s). Assumption: each instance sees a Poisson stream of rate / k (a
    round-robin split of one Poisson stream has Erlang-k gaps, smoother: this is the conservative side)."""
    from attnsim.studies.rate_search import max_rate_under_slo

    k = instances(b)
    sets = scenario_sets(b, "Server", requests) + [
        "systems.dgx_h100.parallelism.replicas=1",
        f"systems.dgx_h100.devices.gpu.count={_parallelism(b, 'tp')}",
    ]
    (s,) = max_rate_under_slo(
        CONFIG_ROOT / "validation" / b.experiment, sets, start=start / k, rel_tol=rel_tol, limits=dict(b.limits)
    )
    return s, k


def steady_tokens_per_s(req: dict) -> tuple[float, float]:
    """(output tokens/s, seconds) of an Offline run (every arrival at 0) until T, the last admission: after T
    the queue is empty and the batches drain. A request finished by T counts all its tokens; one running at T
    its first token plus (T - first token) / its TPOT; one admitted at T none."""
    import numpy as np

    arrival = np.asarray(req["arrival_s"], dtype=float)
    admit = arrival + np.asarray(req["queue_s"], dtype=float)
    first = arrival + np.asarray(req["ttft_s"], dtype=float)
    finish = arrival + np.asarray(req["latency_s"], dtype=float)
    out = np.asarray(req["output_tokens"], dtype=float)
    tpot = np.asarray(req["tpot_s"], dtype=float)
    t_end = float(admit.max())
    if t_end <= 0:
        raise ValueError("every request was admitted at t = 0: no steady state (more requests than the batch limit)")
    with np.errstate(invalid="ignore", divide="ignore"):
        partial = np.where(first <= t_end, 1.0 + np.where(tpot > 0, (t_end - first) / tpot, 0.0), 0.0)
    tokens = np.where(finish <= t_end, out, np.minimum(out, partial))
    return float(tokens.sum() / t_end), t_end


def _output_sampling_error(doc: dict) -> float:
    """Relative standard error of the mean output length of the run's requests (std / sqrt(n) / mean)."""
    import numpy as np

    out = np.asarray(doc["_requests"]["output_tokens"], dtype=float)
    return float(out.std(ddof=1) / math.sqrt(len(out)) / out.mean()) if len(out) > 1 else float("nan")


def rows(spec: Optional[MLPerfSpec] = None, benchmarks: Optional[list] = None) -> list[Row]:
    """One :class:`Row` per data-file row (``benchmarks``: only those)."""
    from attnsim.core.config import ConfigError

    spec = spec or load()
    offline: dict = {}
    server: dict = {}
    out = []
    for r in spec.rows:
        if benchmarks and r.benchmark not in benchmarks:
            continue
        b = spec.benchmarks[r.benchmark]
        if r.benchmark not in offline:
            offline[r.benchmark] = offline_run(b)
        off = offline[r.benchmark]
        if off["status"] != "ok":
            raise ConfigError(
                f"expected the Offline run of {r.benchmark} to complete, got {off['status']} ({off.get('error', '')})",
                file="configs/validation/mlperf.yaml",
            )
        rnd = spec.rounds[r.round]
        src = f"{rnd.repo} @ {rnd.commit[:7]} {summary_path(r)}"
        tag = f"{r.round} {r.variant} {r.scenario}"
        if r.scenario == "Offline":
            import numpy as np

            tok_s, t_end = steady_tokens_per_s(off["_requests"])
            val = tok_s if r.metric == "tokens_per_s" else tok_s / float(np.mean(off["_requests"]["output_tokens"]))
            err = _output_sampling_error(off)
            name = (
                f"{tag} {'output tokens/s' if r.metric == 'tokens_per_s' else 'samples/s'} "
                f"(steady {t_end:.0f} s of {b.offline_requests} requests, +-{100 * err:.1f} % sampling; whole run "
                f"{off['metrics']['output_tokens_per_s']:.0f} tok/s)"
            )
        else:
            if r.benchmark not in server:
                import numpy as np

                tok_s, _ = steady_tokens_per_s(off["_requests"])
                start = tok_s / float(np.mean(off["_requests"]["output_tokens"]))  # the Offline request rate
                server[r.benchmark] = server_search(b, start=start)
            s, k = server[r.benchmark]
            val = k * s.rate_per_s
            lim = ", ".join(f"{m} <= {v:g} s" for m, v in b.limits.items())
            name = (
                f"{tag} max Poisson rate [req/s] under {lim} vs [target that passed, Offline samples/s] "
                f"({k} x one instance's, search bracket {k * s.bracket_per_s[0]:.3g}-{k * s.bracket_per_s[1]:.3g}, "
                f"{b.server_requests} requests)"
            )
        out.append(
            Row(
                "mlperf",
                name,
                float(val),
                r.reference,
                spec.tolerance,
                check="bracket" if r.scenario == "Server" else "relative",
                published_high=r.offline_samples_per_s,
                role=r.role,
                system="dgx_h100",
                source=src,
            )
        )
    return out
