"""Software-stack presets: a system's ``software:`` key (configs/stacks/<name>.yaml or a path).

A serving runtime adds host work that the device models do not see: per engine step the scheduler,
input preparation, sampling and kernel launch (or CUDA-graph replay), per request in the step the
sampler/detokenizer/output bookkeeping, and per request once the tokenizer and API front end. A preset
names those costs (each value with its source in the YAML) and the GPU kernel mode it runs
(``kernels`` sets every GPU pool's ``software_stack``: ``eager`` selects the GPU model's unfused
efficiencies and per-kernel eager launch overheads, hwmodels/gpu.py; null keeps the hardware's) and
whether its tensor-parallel all-reduce is the framework's one-/two-shot kernel (``custom_allreduce: true``
sets ``allreduce: custom`` on every link whose preset has a ``custom_allreduce`` block, i.e. NVLink, as
vLLM does where the GPUs are NVLink-connected; other links keep theirs, as vLLM falls back to NCCL).

Where the costs land (the one mechanism, used by ``attnsim run`` and ``attnsim serve``):

- every step (prefill, each decode step, each serving iteration) gets
  ``step_us + request_step_us x requests in the step`` of host time on the critical path (the devices
  idle: static energy only; under ``async_scheduling`` only the part beyond the step's device time), as
  op ``host_overhead`` on device ``host``; a pipelined (pp > 1) decode in
  ``attnsim run`` puts each micro-batch's share on that micro-batch's chain instead (between its last
  stage and its next first stage: attnsim/sim/pipeline.py ``host_s``; under ``async_scheduling`` only the part
  beyond that chain's device time), so it can hide behind a busier device;
- ``request_us`` once per request, before its first step: ``attnsim run`` adds it to the prefill step
  (op ``host_request``; the batch's requests are tokenized concurrently, so one request's cost), so TTFT
  includes it; ``attnsim serve`` delays each request's entry by it (its TTFT and latency include it).

``sampling`` (GPU work, not host time): the token sampler over the full vocabulary of every sampled token,
a ``sampler`` row after the LM head (workloads/trace.py ``build_trace(sampler=)``), costed by the device
model like any bytes-bound op, so it is in the breakdown, the timeline and the power. Its HBM bytes per
vocabulary entry per token are :data:`SAMPLERS` (pass counts below, each an ASSUMPTION with a range).

``async_scheduling`` (vLLM ``--async-scheduling``): the host prepares step n + 1 while the devices run step
n, so a step's host time is on the critical path only where it exceeds the step's device time:
``max(0, host - device)``; off, all of it is (the devices idle through it). ``attnsim run``'s prefill is the
batch's first step: no earlier step hides its host time, all of it is exposed.

``software: none`` (the default) adds nothing: results are those of the device models alone.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from attnsim.core.config import ConfigError, Schema

# Sampler work per vocabulary entry of one sampled token: (HBM bytes, FLOPs) [M], vLLM v0.11 V1
# sampler (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py; the vLLM source is not mirrored here: the pass
# lists are from its structure as of v0.10-v0.11 and are ASSUMPTIONS, ranges in the comments).
SAMPLERS = {
    "none": (0.0, 0.0),
    # logits.to(fp32) (r 2 + w 4 B), argmax (r 4): 10 B; range 10-14
    "greedy": (10.0, 1.0),
    # forward_native: fp32 cast 6, temperature div_ 8, logits.sort (PyTorch/CUB radix sort of fp32 keys + int64
    # indices: index init 8 + 4 passes x (4 + 8) B read + written = 104), softmax of the sorted logits 12
    # (2 reads + 1 write), cumsum 8, top-p mask 5, masked_fill_ 9, scatter_ back 16 (int64 index + value),
    # softmax 12, exponential_ 4, div_ 12, argmax 4: 200 B; range 150-320 (3-8 radix passes, histogram reads)
    "top_p_sort": (200.0, 20.0),
    # FlashInfer sort-free top-p (top_p_sampling_from_probs): cast 6, temperature 8, softmax 12, rejection
    # rounds reading the probabilities (4 B each, ~4 rounds): 42 B; range 30-160 (1-32 rounds)
    "top_p_flashinfer": (42.0, 12.0),
}
HOST_OP = "host_overhead"
REQUEST_OP = "host_request"
HOST_DEVICE = "host"


class StackSpec(Schema):
    kind: Literal["stack"]
    name: str
    description: str = ""
    source: str = ""
    kernels: Optional[Literal["fused", "eager"]] = Field(
        None, description="GPU kernel mode (every GPU pool's software_stack); null keeps the hardware's"
    )
    step_us: float = Field(0.0, ge=0, description="host time per engine step not overlapped with device work")
    request_step_us: float = Field(
        0.0, ge=0, description="host time per request in a step (sampling, detokenization, output processing)"
    )
    request_us: float = Field(
        0.0, ge=0, description="host time once per request before its first step (tokenization, API front end)"
    )
    custom_allreduce: bool = Field(
        False,
        description="links whose preset has a custom_allreduce block "
        "(NVLink) time all-reduce with it (allreduce: custom)",
    )
    sampling: Literal["none", "greedy", "top_p_sort", "top_p_flashinfer"] = Field(
        "none", description="GPU token sampler per sampled token (SAMPLERS: HBM bytes per vocabulary entry)"
    )
    async_scheduling: bool = Field(
        False,
        description="host step work overlaps the previous step's device "
        "work: only max(0, host - device time) is exposed",
    )


NONE = StackSpec(kind="stack", name="none", description="no software-stack costs")


def load_stack(ref: str, file: str | None = None) -> StackSpec:
    """The preset a system's ``software:`` names (``none``: no costs); ConfigError naming ``file``."""
    if ref == "none":
        return NONE
    from attnsim.core.config import display_path, find_config, load_yaml, validate

    try:
        path = find_config("stacks", ref)
    except ConfigError as e:
        raise ConfigError(e.message, file=file, key="software") from None
    return validate(StackSpec, load_yaml(path), file=display_path(path))


def step_overhead_s(stack: StackSpec, requests: int) -> float:
    """Host seconds of one step running ``requests`` requests."""
    return (stack.step_us + stack.request_step_us * requests) * 1e-6


def add_host_time(step, system, seconds: float, op: str = HOST_OP):
    """``step`` with ``seconds`` of host time added to its critical path (static energy of every
    device over it, no dynamic energy); unchanged (the same object) when ``seconds`` is 0."""
    if seconds <= 0.0:
        return step
    from attnsim.hwmodels.base import set_static

    step.time_s += seconds
    step.time_s_by_op[op] = step.time_s_by_op.get(op, 0.0) + seconds
    step.time_s_by_device[HOST_DEVICE] = step.time_s_by_device.get(HOST_DEVICE, 0.0) + seconds
    set_static(step, system, step.time_s)
    return step


def sampler_cost(system) -> tuple | None:
    """``build_trace(sampler=)`` of the system's stack: (HBM bytes, FLOPs) per vocabulary entry per
    sampled token, or None (no sampler row)."""
    stack = getattr(system, "stack", None) or NONE
    return None if stack.sampling == "none" else SAMPLERS[stack.sampling]


def exposed_host_s(stack: StackSpec, host_s: float, device_s: float) -> float:
    """Host seconds on a step's critical path: all of them, or under async scheduling the part the
    step's ``device_s`` does not hide."""
    return max(0.0, host_s - device_s) if stack.async_scheduling else host_s


def add_step_overhead(step, system, requests: int, first_step: bool = False):
    """A step of ``requests`` requests with the system's stack costs (``first_step``: also the
    per-request cost, for ``attnsim run``'s prefill; its host time is exposed in full even under async
    scheduling: there is no earlier device step to prepare it behind)."""
    stack = getattr(system, "stack", NONE)
    host_s = step_overhead_s(stack, requests)
    step = add_host_time(step, system, host_s if first_step else exposed_host_s(stack, host_s, step.time_s))
    if first_step:
        step = add_host_time(step, system, stack.request_us * 1e-6, REQUEST_OP)
    return step
