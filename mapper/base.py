"""Plan and the mapper-policy registry.

A policy places each op of an OpTrace on a device role of a System and places
weights and KV in memory; it never computes a time (device models do).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attnsim.config import ConfigError


class CapacityError(ConfigError):
    """Weights + KV do not fit the devices a plan puts them on."""


@dataclass
class MemoryPlacement:
    """Bytes placed on ONE device of a role."""

    role: str
    weights_bytes: float
    kv_bytes: float
    capacity_bytes: float

    @property
    def used_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.capacity_bytes


@dataclass
class Plan:
    """Where each op of a trace runs, and how many devices run it in parallel.

    ``device[i]`` is the role that runs row i (allreduce rows name the link);
    ``parallel[i]`` is how many devices of that role run their own copy (TP ranks).
    """

    policy: str
    trace: Any  # OpTrace
    device: np.ndarray  # str per row
    parallel: np.ndarray  # int per row
    memory: list[MemoryPlacement] = field(default_factory=list)
    programs: dict = field(default_factory=dict)  # PIM/PNM isa programs per row (later policies)
    notes: list[str] = field(default_factory=list)

    def check_capacity(self) -> None:
        for mp in self.memory:
            if not mp.fits:
                gb = 1e9
                raise CapacityError(
                    f"{mp.role}: weights {mp.weights_bytes / gb:.1f} GB + KV {mp.kv_bytes / gb:.1f} GB = "
                    f"{mp.used_bytes / gb:.1f} GB per device exceed its capacity {mp.capacity_bytes / gb:.1f} GB "
                    f"by {(mp.used_bytes - mp.capacity_bytes) / gb:.1f} GB")


_POLICIES: dict[str, Callable] = {}


def register(name: str):
    def deco(fn):
        _POLICIES[name] = fn
        return fn
    return deco


def get_policy(name: str, file: str | None = None) -> Callable:
    import attnsim.mapper.gpu_only  # noqa: F401  (registers built-in policies)
    if name not in _POLICIES:
        raise ConfigError(f"expected one of {', '.join(sorted(_POLICIES))}, got {name!r}", file=file, key="mapper.policy")
    return _POLICIES[name]


def policies() -> list[str]:
    import attnsim.mapper.gpu_only  # noqa: F401
    return sorted(_POLICIES)
