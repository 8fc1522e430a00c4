"""Request traces: synthetic (seeded arrivals + length distributions) or read from a user file.

A trace is a :class:`RequestTrace` of numpy arrays sorted by arrival time. Synthetic arrivals:

* ``poisson``: exponential inter-arrival times with mean 1 / rate (a Poisson process);
* ``gamma``: Gamma inter-arrival times with mean 1 / rate and coefficient of variation ``cv``
  (shape k = 1 / cv^2; cv > 1 is burstier than Poisson, cv = 1 is Poisson);
* ``constant``: evenly spaced arrivals 1 / rate apart.

Lengths: ``fixed`` (mean), ``uniform`` (low..high inclusive), ``lognormal`` (arithmetic mean and
std, optionally clipped to low/high). Every draw comes from one ``numpy.random.default_rng(seed)``
in a fixed order (arrivals, prompts, outputs, prefixes), so a seed gives identical traces.

Files: CSV with a header or JSON Lines, columns ``arrival_s, prompt_tokens, output_tokens`` and
optionally ``prefix_id`` (an integer >= 0 naming a shared prompt prefix) and ``prefix_tokens``
(its length; default ``trace.prefix_tokens``), or a public dataset as it ships (``format: azure |
burstgpt | mooncake``; serve/traces.py). A bad row raises ConfigError naming ``line N``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from attnsim.core.config import Plausible, Schema, not_physical
from attnsim.workloads.limits import MAX_REQUESTS, MAX_TOKENS
from attnsim.workloads.scenario import Tokens


class LengthDist(Schema):
    """A token-length distribution (prompt or output)."""

    plausible = {"*": Plausible(0, 1 << 24, "tokens (workloads.limits.MAX_TOKENS)")}

    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: Optional[float] = Field(None, gt=0, le=MAX_TOKENS)
    std: Optional[float] = Field(None, ge=0, le=MAX_TOKENS)
    low: Optional[Tokens] = None
    high: Optional[Tokens] = None

    @model_validator(mode="after")
    def _params(self):
        need = {"fixed": ("mean",), "uniform": ("low", "high"), "lognormal": ("mean", "std")}[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"distribution '{self.dist}' needs {', '.join(missing)}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low ({self.low}) exceeds high ({self.high})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "fixed":
            x = np.full(n, self.mean)
        elif self.dist == "uniform":
            x = rng.integers(self.low, self.high + 1, size=n)
        else:  # lognormal with the given arithmetic mean and std
            sigma2 = np.log1p(self.std**2 / self.mean**2)
            x = rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
        # clip in floating point before the integer cast (a huge draw must not wrap around int64)
        return np.clip(np.rint(x), self.low or 1, self.high or MAX_TOKENS).astype(np.int64)


class PrefixSpec(Schema):
    """Synthetic shared prefixes: a fraction of requests start with one of ``num_prefixes``
    system prompts of ``tokens`` tokens each (chosen uniformly)."""

    plausible = {
        "num_prefixes": Plausible(1, 1 << 20, "distinct shared prefixes (<= requests, workloads.limits.MAX_REQUESTS)"),
    }

    num_prefixes: int = Field(1, gt=0, le=MAX_REQUESTS)
    tokens: Tokens = 512
    fraction: float = Field(1.0, ge=0, le=1)


class TraceSpec(Schema):
    """``serving.trace``: synthetic load or a file. Lengths default to the scenario's
    prompt_len / output_len (fixed) when not given."""

    plausible = {
        "num_requests": Plausible(1, 1 << 20, "requests (workloads.limits.MAX_REQUESTS)"),
        "cv": Plausible(
            0.01,
            100,
            "coefficient of variation of inter-arrival times: production LLM traces show "
            "~1-5 (Azure LLM traces, Splitwise ISCA 2024); 0.01 is near-periodic, 100 a few bursts",
        ),
        "rate_per_s": Plausible(
            1e-6,
            1e7,
            "requests per second: LLM services see ~1-1000 req/s per deployment (Azure "
            "LLM inference traces 2023, Splitwise ISCA 2024); 1e7 is 10^4x",
        ),
        "seed": not_physical("a random seed"),
        "time_scale": Plausible(
            1e-6,
            1e6,
            "a trace's arrival-time factor: x0.1 replays an hour in 6 minutes; 1e-6 / "
            "1e6 would squeeze a day into 0.1 s / stretch a second past 11 days",
        ),
        "start_s": Plausible(
            0,
            3.2e7,
            "trace time in seconds: the public traces span an hour (Azure 2023) to a week "
            "(Azure 2024); 3.2e7 s is a year",
        ),
        "duration_s": Plausible(1e-3, 3.2e7, "a window of a trace in seconds (as start_s)"),
    }

    file: Optional[str] = Field(None, description="CSV or JSONL of requests (overrides synthetic)")
    num_requests: int = Field(
        100, gt=0, le=MAX_REQUESTS, description="synthetic requests (workloads.limits.MAX_REQUESTS)"
    )
    rate_per_s: Optional[float] = Field(None, gt=0, description="mean arrival rate; null = all arrive at t=0")
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    cv: float = Field(1.0, gt=0, description="gamma inter-arrival coefficient of variation")
    prompt: Optional[LengthDist] = None
    output: Optional[LengthDist] = None
    prefix: Optional[PrefixSpec] = None
    prefix_tokens: Tokens = Field(512, description="file rows with a prefix_id but no prefix_tokens")
    format: Optional[Literal["azure", "burstgpt", "mooncake", "csv", "jsonl"]] = Field(
        None, description="trace file format (serve/traces.py); default: jsonl for .jsonl/.ndjson/.json, else csv"
    )
    time_scale: float = Field(1.0, gt=0, description="trace file: arrivals x this (0.5 = twice the rate)")
    start_s: float = Field(0.0, ge=0, description="trace file: keep requests from this trace time (s)")
    duration_s: Optional[float] = Field(None, gt=0, description="trace file: keep this many seconds from start_s")
    seed: int = 0

    @model_validator(mode="after")
    def _unused(self):
        if self.file is not None:
            self.refuse_unused(
                ["num_requests", "rate_per_s", "arrival", "cv", "prompt", "output", "prefix", "seed"],
                "with a trace file (the file gives every request)",
            )
        else:
            self.refuse_unused(
                ["prefix_tokens", "format", "time_scale", "start_s", "duration_s"], "without a trace file"
            )
            if self.rate_per_s is None:
                self.refuse_unused(["arrival", "cv"], "without rate_per_s (every request arrives at t=0)")
            elif self.arrival != "gamma":
                self.refuse_unused(["cv"], f"with arrival: {self.arrival} (only gamma arrivals have a cv)")
        return self


@dataclass
class RequestTrace:
    """Requests sorted by arrival. prefix_id -1 = none; prefix_tokens <= prompt_tokens."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray
    prefix_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    def subset(self, idx) -> "RequestTrace":
        return RequestTrace(
            *(
                a[idx]
                for a in (self.arrival_s, self.prompt_tokens, self.output_tokens, self.prefix_id, self.prefix_tokens)
            )
        )

    @classmethod
    def from_arrays(cls, arrival_s, prompt_tokens, output_tokens, prefix_id=None, prefix_tokens=None) -> "RequestTrace":
        a = np.asarray(arrival_s, dtype=np.float64)
        n = len(a)
        pid = np.full(n, -1, np.int64) if prefix_id is None else np.asarray(prefix_id, dtype=np.int64)
        ptok = np.zeros(n, np.int64) if prefix_tokens is None else np.asarray(prefix_tokens, dtype=np.int64)
        order = np.argsort(a, kind="stable")
        return cls(
            a[order],
            np.asarray(prompt_tokens, np.int64)[order],
            np.asarray(output_tokens, np.int64)[order],
            pid[order],
            np.where(pid >= 0, ptok, 0)[order],
        )


def _arrivals(spec: TraceSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    if spec.rate_per_s is None:
        return np.zeros(n)
    mean = 1.0 / spec.rate_per_s
    if spec.arrival == "constant":
        gaps = np.full(n, mean)
    elif spec.arrival == "poisson":
        gaps = rng.exponential(mean, size=n)
    else:
        k = 1.0 / spec.cv**2
        gaps = rng.gamma(k, mean / k, size=n)
    t = np.cumsum(gaps)
    return t - t[0]  # the first request arrives at t = 0


def synthetic_trace(spec: TraceSpec, default_prompt: int, default_output: int) -> RequestTrace:
    """Draw a seeded synthetic trace (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.num_requests
    arr = _arrivals(spec, rng, n)
    prompt = (spec.prompt or LengthDist(dist="fixed", mean=default_prompt)).sample(rng, n)
    output = (spec.output or LengthDist(dist="fixed", mean=default_output)).sample(rng, n)
    pid = np.full(n, -1, np.int64)
    ptok = np.zeros(n, np.int64)
    if spec.prefix is not None:
        p = spec.prefix
        shared = rng.random(n) < p.fraction
        which = rng.integers(0, p.num_prefixes, size=n)
        pid = np.where(shared, which, -1)
        ptok = np.where(shared, p.tokens, 0)
        prompt = np.where(shared, prompt + p.tokens, prompt)  # the prefix comes before the request's own tokens
    return RequestTrace.from_arrays(arr, prompt, output, pid, ptok)


def read_trace(
    path: str | Path,
    fmt: Optional[str] = None,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: Optional[float] = None,
    default_prefix: int = 512,
) -> tuple[RequestTrace, dict]:
    """(RequestTrace, facts) of a request file: attnsim csv/jsonl or a dataset format (attnsim.studies.serve.traces)."""
    from attnsim.studies.serve.traces import read_rows

    *cols, facts = read_rows(path, fmt, time_scale, start_s, duration_s, default_prefix)
    return RequestTrace.from_arrays(*cols), facts


def read_trace_file(
    path: str | Path,
    default_prefix: int = 512,
    fmt: Optional[str] = None,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: Optional[float] = None,
) -> RequestTrace:
    """Read a request file (see :func:`read_trace`)."""
    return read_trace(path, fmt, time_scale, start_s, duration_s, default_prefix)[0]


def build_request_trace(
    spec: TraceSpec, default_prompt: int, default_output: int, base: Optional[Path] = None
) -> RequestTrace:
    if spec.file is not None:
        p = Path(spec.file)
        if not p.is_absolute() and base is not None and not p.exists():
            p = base / p
        return read_trace_file(p, spec.prefix_tokens, spec.format, spec.time_scale, spec.start_s, spec.duration_s)
    return synthetic_trace(spec, default_prompt, default_output)
