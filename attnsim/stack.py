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
  idle: static energy only), as op ``host_overhead`` on device ``host``; a pipelined (pp > 1) decode in
  ``attnsim run`` puts each micro-batch's share on that micro-batch's chain instead (between its last
  stage and its next first stage: attnsim/pipeline.py ``host_s``), so it can hide behind a busier device;
- ``request_us`` once per request, before its first step: ``attnsim run`` adds it to the prefill step
  (op ``host_request``; the batch's requests are tokenized concurrently, so one request's cost), so TTFT
  includes it; ``attnsim serve`` delays each request's entry by it (its TTFT and latency include it).

``software: none`` (the default) adds nothing: results are those of the device models alone.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from attnsim.config import ConfigError, Schema

HOST_OP = "host_overhead"
REQUEST_OP = "host_request"
HOST_DEVICE = "host"


class StackSpec(Schema):
    kind: Literal["stack"]
    name: str
    description: str = ""
    source: str = ""
    kernels: Optional[Literal["fused", "eager"]] = Field(
        None, description="GPU kernel mode (every GPU pool's software_stack); null keeps the hardware's")
    step_us: float = Field(0.0, ge=0, description="host time per engine step not overlapped with device work")
    request_step_us: float = Field(0.0, ge=0, description="host time per request in a step (sampling, "
                                                          "detokenization, output processing)")
    request_us: float = Field(0.0, ge=0, description="host time once per request before its first step "
                                                     "(tokenization, API front end)")
    custom_allreduce: bool = Field(False, description="links whose preset has a custom_allreduce block "
                                                      "(NVLink) time all-reduce with it (allreduce: custom)")


NONE = StackSpec(kind="stack", name="none", description="no software-stack costs")


def load_stack(ref: str, file: str | None = None) -> StackSpec:
    """The preset a system's ``software:`` names (``none``: no costs); ConfigError naming ``file``."""
    if ref == "none":
        return NONE
    from attnsim.config import display_path, find_config, load_yaml, validate
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
    from attnsim.engine import set_static
    step.time_s += seconds
    step.time_s_by_op[op] = step.time_s_by_op.get(op, 0.0) + seconds
    step.time_s_by_device[HOST_DEVICE] = step.time_s_by_device.get(HOST_DEVICE, 0.0) + seconds
    set_static(step, system, step.time_s)
    return step


def add_step_overhead(step, system, requests: int, first_step: bool = False):
    """A step of ``requests`` requests with the system's stack costs (``first_step``: also the
    per-request cost, for ``attnsim run``'s prefill)."""
    stack = getattr(system, "stack", NONE)
    step = add_host_time(step, system, step_overhead_s(stack, requests))
    if first_step:
        step = add_host_time(step, system, stack.request_us * 1e-6, REQUEST_OP)
    return step
