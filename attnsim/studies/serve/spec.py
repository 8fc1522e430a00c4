"""``serving:`` section of an experiment (validated here, not by ExperimentSpec).

Defaults that come from a serving system are marked with their source; the rest are knobs.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from attnsim.core.config import HARDWARE_COUNT, Plausible, Schema, not_physical
from attnsim.studies.serve.kvpolicy import KVPolicySpec
from attnsim.studies.serve.requests import TraceSpec


class SchedulerSpec(Schema):
    plausible = {
        "max_batch": Plausible(1, 1 << 20, "requests per iteration (workloads.limits.MAX_BATCH)"),
        "max_tokens_per_iter": Plausible(1, 1 << 30, "tokens per iteration (MAX_BATCH x 2^10)"),
    }

    max_batch: PositiveInt = 256  # vLLM max_num_seqs default (vllm/config.py, ASSUMPTION: v0.6 default)
    max_tokens_per_iter: PositiveInt = 2048  # vLLM max_num_batched_tokens default with chunked prefill (same source)
    chunked_prefill: bool = True  # Sarathi-Serve style mixed batches (Agrawal et al., OSDI 2024)
    preemption: Literal["recompute", "swap"] = "recompute"  # vLLM's two preemption modes (Kwon et al., SOSP 2023 §4.5)
    swap_link: str = Field("pcie5_x16", description="hardware link (kind: link) between device and host for swap")
    memory_fraction: float = Field(
        0.9, gt=0, le=1
    )  # vLLM gpu_memory_utilization default 0.9 (ASSUMPTION: activations in the rest)

    @model_validator(mode="after")
    def _unused(self):
        if self.preemption == "recompute":
            self.refuse_unused(["swap_link"], "with preemption: recompute")
        return self


class KVSpec(Schema):
    block_tokens: PositiveInt = 16  # vLLM default block size 16 tokens (Kwon et al., SOSP 2023 §7)
    layout: Literal["paged", "contiguous"] = "paged"
    reserve_tokens: Optional[PositiveInt] = Field(
        None,
        description=(
            "contiguous layout: tokens reserved per request beyond its prompt (default: the trace's longest output)"
        ),
    )
    policy: KVPolicySpec = KVPolicySpec()
    prefix_caching: bool = False
    locality_dram: Optional[str] = Field(
        None, description="DRAM preset: replay the longest request's block list vs a contiguous layout on it"
    )

    @model_validator(mode="after")
    def _unused(self):
        if self.layout == "paged":
            self.refuse_unused(["reserve_tokens"], "with layout: paged (blocks are allocated as tokens arrive)")
        return self


class MemoSpec(Schema):
    plausible = {"*": not_physical("a memoisation bucket of the simulator (accuracy vs speed), not hardware")}
    context_bucket: PositiveInt = 32  # decode context grid (tokens); costing.py documents the error
    token_bucket: PositiveInt = 16  # prefill chunk grid (tokens)
    relative_bucket: float = Field(
        0.125, ge=0, le=0.5, description="geometric grid: points per octave = 1 / this; 0 = uniform"
    )
    batch_relative_bucket: float = Field(
        0.0, ge=0, le=0.5, description="geometric grid for the decode count (0 = exact)"
    )


class SLOSpec(Schema):
    ttft_s: PositiveFloat = 2.0  # ASSUMPTION: chat-style targets in the range DistServe uses (Zhong et al., OSDI 2024)
    tpot_s: PositiveFloat = 0.1


class DisaggSpec(Schema):
    """A prefill pool and a decode pool (two systems of the experiment) joined by a link."""

    plausible = {"parallel_links": HARDWARE_COUNT}

    name: Optional[str] = None
    prefill: str
    decode: str
    link: str = Field(description="hardware link config (kind: link) carrying the KV")
    layerwise_overlap: bool = True  # layer-by-layer KV streaming during prefill (DistServe/Splitwise)
    parallel_links: Optional[PositiveInt] = Field(
        None, description="links used in parallel (default: prefill tp x pp device groups)"
    )


class KVPoolServingSpec(Schema):
    """A KV pool tier shared by the data-parallel replicas (instances) of a colocated system
    (hwmodels/kv_pool.py): a local prefix miss looks the prefix up in the pool."""

    hardware: str = Field(description="hardware config (kind: kv_pool)")
    systems: list[str] = Field(
        default_factory=list, description="experiment systems whose replicas share a pool (default: every system)"
    )


class ServingSpec(Schema):
    plausible = {
        "replications": Plausible(1, 1 << 16, "simulated replications of a trace"),
        "confidence": Plausible(0, 1, "a confidence level"),
    }

    trace: TraceSpec = TraceSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    kv: KVSpec = KVSpec()
    memo: MemoSpec = MemoSpec()
    slo: SLOSpec = SLOSpec()
    colocated: bool = Field(True, description="serve every experiment system on its own (continuous batching)")
    disaggregation: list[DisaggSpec] = Field(default_factory=list)
    kv_pool: Optional[KVPoolServingSpec] = None
    accuracy_proxy: bool = Field(True, description="estimate the KV policy's attention error (reliability L0 proxy)")
    replications: PositiveInt = Field(
        1,
        le=1000,
        description="independently seeded traces per run (seeds trace.seed + r); "
        "metrics are means with bootstrap confidence intervals (serve/replicate.py)",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="confidence level of the replications' intervals")

    @model_validator(mode="after")
    def _check(self):
        if self.kv.prefix_caching and self.kv.policy.kind not in ("none", "quest"):
            raise ValueError("prefix caching with an evicting KV policy is not modelled (use kind none or quest)")
        if self.kv_pool is not None and self.kv.policy.kind not in ("none", "quest"):
            raise ValueError("a KV pool with an evicting KV policy is not modelled (use kind none or quest)")
        if not self.kv.prefix_caching:  # the pool serves local prefix misses: without prefix caching it is never read
            self.refuse_unused(["kv_pool"], "without kv.prefix_caching: true (the pool serves prefix lookups)")
        if self.kv_pool is not None and not self.colocated:
            raise ValueError("kv_pool is shared by the replicas of colocated runs: set colocated: true")
        if self.replications == 1:
            self.refuse_unused(["confidence"], "with replications: 1 (intervals need several replications)")
        if self.replications > 1 and self.trace.file is not None:
            raise ValueError(
                "replications > 1 need a synthetic trace (a trace file replays the same requests in every replication)"
            )
        if not self.colocated and not self.disaggregation:
            raise ValueError("nothing to run: colocated is false and no disaggregation pairs are given")
        return self
