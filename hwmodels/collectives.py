"""Collectives as NCCL times them: protocols (LL, LL128, Simple) x algorithms (ring, tree, NVLS), a tuner
that picks the fastest per message size, and a framework one-shot / two-shot all-reduce.

Structure (NCCL tuning model, src/graph/tuning.cc: a latency per algorithm and protocol plus a
per-step hardware latency, and a bus bandwidth per protocol, LL and LL128 a fraction of Simple's):

* ``t(coll, algo, proto, S, n) = call + base[proto] + steps(coll, algo, n) x step[proto]
  + bus_factor(coll, n) x S / (B x bus_efficiency x bw_fraction[proto] x algo_factor)``
* ``steps``: ring all-reduce 2(n-1), all-gather / reduce-scatter n-1, send/recv 1; tree all-reduce
  within one node is a chain, 2(n-1) steps (NCCL: 2 x (ranks per node - 1) intra-node steps) at
  ``TREE_BW_FACTOR`` of the ring bandwidth, so one node's tuner keeps the ring (as NCCL does);
* ``bus_factor`` (nccl-tests doc/PERFORMANCE.md, NVIDIA/nccl-tests @a0b82b2): all-reduce 2(n-1)/n,
  all-gather and reduce-scatter (n-1)/n of the total buffer, send/recv 1;
* NVLS (NVLink SHARP, NVSwitch gen 3 = H100/H200 HGX; all-reduce only, Simple): the switch reduces and
  multicasts, each GPU moves ``S`` bytes per direction: ``t = call + nvls.base + S / (B x nvls.bus_efficiency)``;
* the tuner (``algorithm=None``, ``protocol=None``) takes the minimum over what the hardware has, as
  NCCL's ``ncclTopoGetAlgoTime`` does; the result is monotone in ``S`` (a minimum of increasing lines);
* framework custom all-reduce (vLLM ``custom_all_reduce``, TensorRT-LLM ``customAllReduce``; peer-to-peer
  loads over NVLink, CUDA-graph launched): one-shot reads the n-1 peers' whole buffers,
  ``sync + (n-1) S / (B x eff)``; two-shot reduce-scatters then all-gathers, ``2 sync + 2(n-1)/n S / (B x eff)``;
  the faster of the two up to ``max_bytes``, NCCL's tuner above.

``B`` is the link's per-direction bandwidth (``LinkSpec.bandwidth_gbps``). Parameters per link preset
(configs/hardware/nvlink*.yaml) with their sources; values fitted to calibration/nccl_allreduce.csv
are marked there.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, PositiveFloat, field_validator

from attnsim.core.config import Schema

PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "sendrecv")
ALGORITHMS = ("ring", "tree", "nvls")
TREE_BW_FACTOR = 0.92  # NCCL tuning model: tree bus bandwidth x 0.92 of the ring's (src/graph/tuning.cc)


class ProtocolSpec(Schema):
    """One NCCL protocol: fixed latency, latency per ring step, bandwidth as a fraction of Simple's."""

    base_us: float = Field(ge=0, description="fixed latency of one call with this protocol (us)")
    step_us: float = Field(ge=0, description="latency per algorithm step (us)")
    bw_fraction: float = Field(gt=0, le=1, description="bus bandwidth as a fraction of Simple's")


class NVLSSpec(Schema):
    """NVLink SHARP all-reduce (in-switch reduction), where the NVSwitch has it."""

    base_us: float = Field(ge=0, description="fixed latency of one NVLS all-reduce (us)")
    bus_efficiency: float = Field(
        gt=0, le=1, description="achieved fraction of the per-direction bandwidth (each GPU moves S bytes each way)"
    )


class NCCLSpec(Schema):
    """NCCL-like collectives on one link type (``allreduce: nccl`` or ``custom``)."""

    source: str = ""
    call_us: float = Field(0.0, ge=0, description="per-call software cost added to every protocol (us)")
    bus_efficiency: float = Field(gt=0, le=1, description="Simple protocol's bus bandwidth / link bandwidth")
    protocols: dict[Literal["LL", "LL128", "Simple"], ProtocolSpec]
    nvls: Optional[NVLSSpec] = Field(None, description="NVLS all-reduce (NVSwitch gen 3); null: none")

    @field_validator("protocols")
    @classmethod
    def _all_three(cls, v):
        missing = [p for p in PROTOCOLS if p not in v]
        if missing:
            raise ValueError(f"expected the protocols {', '.join(PROTOCOLS)}, missing {', '.join(missing)}")
        return v


class CustomAllReduceSpec(Schema):
    """Framework one-shot / two-shot all-reduce (``allreduce: custom``); NCCL above ``max_bytes``."""

    source: str = ""
    max_bytes: PositiveFloat = Field(description="largest message the custom kernel takes (bytes)")
    sync_us: float = Field(ge=0, description="launch + cross-GPU barrier per stage (us)")


def steps(coll: str, algo: str, n) -> np.ndarray:
    """Latency steps of ``coll`` with ``algo`` over ``n`` ranks (one node)."""
    n = np.asarray(n, dtype=np.float64)
    if coll == "sendrecv":
        return np.ones_like(n)
    if coll == "allreduce":
        return 2.0 * (n - 1.0)  # ring, and the one-node tree chain (up and down)
    return n - 1.0


def bus_factor(coll: str, n) -> np.ndarray:
    """nccl-tests' bus bandwidth correction: bytes each rank sends per byte of ``S``."""
    n = np.asarray(n, dtype=np.float64)
    if coll == "allreduce":
        return 2.0 * (n - 1.0) / n
    if coll == "sendrecv":
        return np.ones_like(n)
    return (n - 1.0) / n


def _check(coll: str, algo: Optional[str], proto: Optional[str]) -> None:
    if coll not in COLLECTIVES:
        raise ValueError(f"collective: expected one of {', '.join(COLLECTIVES)}, got {coll!r}")
    if algo is not None and algo not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {', '.join(ALGORITHMS)}, got {algo!r}")
    if proto is not None and proto not in PROTOCOLS:
        raise ValueError(f"protocol: expected one of {', '.join(PROTOCOLS)}, got {proto!r}")


def candidates(spec: NCCLSpec, coll: str, n: int) -> list[tuple[str, str]]:
    """(algorithm, protocol) pairs NCCL would consider for ``coll`` on this hardware."""
    out = [("ring", p) for p in PROTOCOLS]
    if coll == "allreduce" and n > 2:
        out += [("tree", p) for p in PROTOCOLS]
        if spec.nvls is not None:
            out.append(("nvls", "Simple"))
    return out


def algo_time_s(
    spec: NCCLSpec, bandwidth_bytes_per_s: float, coll: str, nbytes, n: int, algo: str, proto: str
) -> np.ndarray:
    """Time of one ``coll`` of ``nbytes`` (the per-rank buffer: nccl-tests' size) with ``algo`` / ``proto``."""
    _check(coll, algo, proto)
    s = np.asarray(nbytes, dtype=np.float64)
    if algo == "nvls":
        if spec.nvls is None or coll != "allreduce" or proto != "Simple":
            raise ValueError("algorithm nvls: expected an all-reduce with protocol Simple on a link with nvls")
        bw = bandwidth_bytes_per_s * spec.nvls.bus_efficiency
        return (spec.call_us + spec.nvls.base_us) * 1e-6 + s / bw
    if algo == "tree" and coll != "allreduce":
        raise ValueError(f"algorithm tree: NCCL's tree is an all-reduce algorithm, got {coll!r}")
    p = spec.protocols[proto]
    bw = bandwidth_bytes_per_s * spec.bus_efficiency * p.bw_fraction * (TREE_BW_FACTOR if algo == "tree" else 1.0)
    lat_us = spec.call_us + p.base_us + steps(coll, algo, n) * p.step_us
    return lat_us * 1e-6 + bus_factor(coll, n) * s / bw


def tuned(spec: NCCLSpec, bandwidth_bytes_per_s: float, coll: str, nbytes, n: int):
    """(time_s, choice): the fastest (algorithm, protocol) per size, as NCCL's tuner picks;
    ``choice`` holds "algo/proto" labels. One rank: no communication (0 s)."""
    _check(coll, None, None)
    s = np.asarray(nbytes, dtype=np.float64)
    if n <= 1 and coll != "sendrecv":
        return np.zeros_like(s), np.full(s.shape, "none", dtype=object)
    pairs = candidates(spec, coll, n)
    times = np.stack(
        [np.broadcast_to(algo_time_s(spec, bandwidth_bytes_per_s, coll, s, n, a, p), s.shape) for a, p in pairs]
    )
    best = np.argmin(times, axis=0)
    labels = np.array([f"{a}/{p}" for a, p in pairs], dtype=object)
    return np.min(times, axis=0), labels[best]


def custom_allreduce_time_s(custom: CustomAllReduceSpec, spec: NCCLSpec, bandwidth_bytes_per_s: float, nbytes, n: int):
    """(time_s, choice): framework one-shot / two-shot all-reduce up to ``max_bytes``, NCCL above."""
    s = np.asarray(nbytes, dtype=np.float64)
    if n <= 1:
        return np.zeros_like(s), np.full(s.shape, "none", dtype=object)
    bw = bandwidth_bytes_per_s * spec.bus_efficiency
    one = custom.sync_us * 1e-6 + (n - 1.0) * s / bw
    two = 2.0 * custom.sync_us * 1e-6 + 2.0 * (n - 1.0) / n * s / bw
    nccl_t, nccl_c = tuned(spec, bandwidth_bytes_per_s, "allreduce", s, n)
    small = s <= custom.max_bytes
    t = np.where(small, np.minimum(one, two), nccl_t)
    choice = np.where(small, np.where(one <= two, "custom/one_shot", "custom/two_shot"), nccl_c)
    return t, choice.astype(object)


def bus_bandwidth_bytes_per_s(coll: str, nbytes, n: int, time_s) -> np.ndarray:
    """nccl-tests' busbw of a measured or modelled time: bus_factor x S / t."""
    return bus_factor(coll, n) * np.asarray(nbytes, dtype=np.float64) / np.asarray(time_s, dtype=np.float64)
