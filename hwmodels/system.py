"""System: named device pools and links built from configs/systems/*.yaml.

A system YAML references hardware configs by name::

    name: dgx_a100
    devices:
      gpu: {hardware: a100_80gb_sxm, count: 8}
    links:
      nvlink: {hardware: nvlink3, connects: [gpu, gpu]}
    parallelism: {tp: 8, replicas: 1}
    mapper: {policy: gpu_only}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from attnsim.core.config import ConfigError, Plausible, Schema
from attnsim.hwmodels import registry


def ref_name(ref: str) -> str:
    """The name a config reference is known by in a ConfigTree: the file stem for a path
    (``./my_gpu.yaml`` -> ``my_gpu``), else the reference itself (a built-in name)."""
    ref = str(ref)
    return Path(ref).stem if ref.endswith((".yaml", ".yml", ".json")) else ref


class DevicePoolSpec(Schema):
    plausible = {
        "count": Plausible(
            1, 1 << 20, "devices of one kind in a system: the largest AI clusters have ~2e5 GPUs (2025); 2^20 is 5x"
        ),
    }

    hardware: str = Field(description="hardware config name or path")
    count: PositiveInt = 1


class LinkSpec(Schema):
    hardware: str
    connects: list[str] = Field(min_length=2, max_length=2, description="two device roles")


class ParallelismSpec(Schema):
    """Tensor x pipeline x data parallelism (pipeline mechanism: attnsim/sim/pipeline.py)."""

    plausible = {
        "*": Plausible(
            1,
            1 << 20,
            "tensor / pipeline / data-parallel degrees, stage counts: bounded by the devices "
            "of a system (<= 2^20, DevicePoolSpec.count)",
        ),
    }

    tp: PositiveInt = 1
    pp: PositiveInt = Field(1, description="pipeline stages (1 .. the model's num_layers)")
    replicas: PositiveInt = 1
    layers_per_stage: Optional[list[PositiveInt]] = Field(
        None, description="layers of each stage (pp entries summing to num_layers); default as even as possible"
    )
    stages_per_device: PositiveInt = Field(1, description="consecutive stages sharing one device group (divides pp)")
    microbatches: Any = Field(
        "auto", description="micro-batches in flight: a positive integer, or auto = min(pp, requests of a replica)"
    )
    pp_link: Optional[str] = Field(None, description="link between stages (default: the compute pool's link to itself)")

    @field_validator("layers_per_stage")
    @classmethod
    def _lps(cls, v, info: ValidationInfo):
        pp = info.data.get("pp")
        if v is not None and pp is not None and len(v) != pp:
            raise ValueError(f"expected pp = {pp} entries, got {len(v)}")
        if v is not None and pp == 1:
            raise ValueError("not used unless pp > 1; remove it")
        return v

    @field_validator("stages_per_device")
    @classmethod
    def _spd(cls, v: int, info: ValidationInfo):
        pp = info.data.get("pp")
        if pp is not None and pp % v:
            raise ValueError(f"expected a divisor of pp = {pp}")
        return v

    @field_validator("microbatches")
    @classmethod
    def _mb(cls, v, info: ValidationInfo):
        if v != "auto" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError("expected 'auto' or a positive integer")
        if v != "auto" and info.data.get("pp") == 1:
            raise ValueError("not used unless pp > 1; remove it")
        return v

    @field_validator("pp_link")
    @classmethod
    def _link(cls, v, info: ValidationInfo):
        if v is not None and info.data.get("pp") == 1:
            raise ValueError("not used unless pp > 1; remove it")
        return v

    @property
    def device_groups(self) -> int:
        """Device groups one replica's pipeline occupies: pp / stages_per_device."""
        return self.pp // self.stages_per_device

    @property
    def devices_per_replica(self) -> int:
        """Devices of a compute (or paired PIM/PNM) pool one replica uses: tp x pp / stages_per_device."""
        return self.tp * self.device_groups

    def device_formula(self) -> str:
        """``tp x pp / stages_per_device x replicas = ... = N`` (or ``tp x replicas`` when pp = 1)."""
        n = self.devices_per_replica * self.replicas
        if self.pp == 1:
            return f"tp x replicas = {self.tp} x {self.replicas} = {n}"
        return (
            f"tp x pp / stages_per_device x replicas = {self.tp} x {self.pp} / {self.stages_per_device} x "
            f"{self.replicas} = {n}"
        )


class MapperSpec(Schema):
    policy: str = "gpu_only"
    options: dict[str, Any] = Field(default_factory=dict)
    attention_on: Optional[str] = Field(
        None,
        description="device role that runs decode attention and holds the KV (an attention-capable memory "
        "device: HBM-PIM, CXL-PNM, NDP) while the GEMMs stay on the GPU/NPU pool (mapper/base.py "
        "place_attention); policies gpu_only and attacc",
    )


class SystemSpec(Schema):
    name: str
    description: str = ""
    devices: dict[str, DevicePoolSpec]
    links: dict[str, LinkSpec] = Field(default_factory=dict)
    parallelism: ParallelismSpec = ParallelismSpec()
    mapper: MapperSpec = MapperSpec()
    software: str = Field(
        "none",
        description="software-stack preset (configs/stacks/<name>.yaml or a path; "
        "hwmodels/stack.py): host costs per step / request, GPU kernel mode",
    )
    source: str = ""

    # field validators (not one model validator) so that errors carry the key path
    @field_validator("devices")
    @classmethod
    def _devices(cls, v: dict):
        if not v:
            raise ValueError("expected at least one device pool")
        return v

    @field_validator("links")
    @classmethod
    def _roles(cls, v: dict, info: ValidationInfo):
        devices = info.data.get("devices") or {}
        for lname, link in v.items():
            for role in link.connects:
                if devices and role not in devices:
                    raise ValueError(
                        f"link '{lname}' connects unknown device role '{role}' (roles: {', '.join(devices)})"
                    )
        return v


@dataclass
class DevicePool:
    role: str
    count: int
    model: Any  # a DeviceModel
    hardware_name: str


@dataclass
class System:
    """Instantiated system: device models per role, link models, parallelism, mapper choice."""

    spec: SystemSpec
    pools: dict[str, DevicePool]
    links: dict[str, Any] = field(default_factory=dict)
    link_roles: dict[str, tuple[str, str]] = field(default_factory=dict)
    stack: Any = None  # attnsim.hwmodels.stack.StackSpec of spec.software (None: no costs)

    @property
    def name(self) -> str:
        return self.spec.name

    def link_between(self, a: str, b: str) -> Optional[Any]:
        for name, roles in self.link_roles.items():
            if set(roles) == {a, b} or (a == b and roles == (a, a)):
                return self.links[name]
        return None

    def static_power_w(self) -> float:
        """Idle power of every device and every link port: the sum of :meth:`static_power_by_device_w`
        (pools, then link ports)."""
        by = self.static_power_by_device_w()
        pools = sum(sum(by[r].values()) for r in self.pools)
        return float(pools + sum(sum(by[f"link:{n}"].values()) for n in self.link_roles))

    def static_power_by_device_w(self) -> dict[str, dict[str, float]]:
        """Static power (W) of the whole system, {device: {component: W}}: each pool (``role``: count x the
        model's ``static_power_parts_w`` if it has one, else ``{"idle": static_power_w}``) and each link
        (``link:<name>``: its ``static_power_w`` per port x one port per device of the larger of the two
        pools it connects, component ``ports``)."""
        out: dict[str, dict[str, float]] = {}
        for role, p in self.pools.items():
            parts = getattr(p.model, "static_power_parts_w", None) or {"idle": p.model.static_power_w}
            out[role] = {k: float(p.count * v) for k, v in parts.items()}
        for n, (a, b) in self.link_roles.items():
            out[f"link:{n}"] = {
                "ports": float(max(self.pools[a].count, self.pools[b].count) * self.links[n].static_power_w)
            }
        return out


def build_system(spec: SystemSpec, hardware: dict[str, dict], file_of) -> System:
    """Build device and link models; ``hardware`` maps hardware name (``ref_name`` of the
    system's references) -> config dict. The ``software`` preset's ``kernels`` (if set) is every GPU
    pool's ``software_stack``; its ``custom_allreduce`` sets ``allreduce: custom`` on links that have the block."""
    from attnsim.hwmodels.stack import load_stack

    stack = load_stack(spec.software, file=file_of("systems", spec.name))
    pools = {}
    for role, pool in spec.devices.items():
        name = ref_name(pool.hardware)
        hw = hardware[name]
        if stack.kernels is not None and isinstance(hw, dict) and hw.get("kind") == "gpu":
            hw = {**hw, "software_stack": stack.kernels}
        pools[role] = DevicePool(
            role, pool.count, registry.build(hw, file=file_of("hardware", name), hardware=hardware), name
        )
    links, roles = {}, {}
    for lname, link in spec.links.items():
        name = ref_name(link.hardware)
        hw = hardware[name]
        if stack.custom_allreduce and isinstance(hw, dict) and hw.get("custom_allreduce") is not None:
            hw = {**hw, "allreduce": "custom"}  # the stack's framework all-reduce (hwmodels/stack.py)
        links[lname] = registry.build(hw, file=file_of("hardware", name))
        roles[lname] = (link.connects[0], link.connects[1])
    return System(spec, pools, links, roles, stack)


def check_parallelism(spec: SystemSpec, role: str, file: str) -> None:
    """The compute pool must hold tp x pp / stages_per_device x replicas devices."""
    par = spec.parallelism
    need = par.devices_per_replica * par.replicas
    have = spec.devices[role].count
    if have != need:
        f = (
            par.device_formula()
            if par.pp > 1
            else f"tp x pp x replicas = {par.tp} x {par.pp} x {par.replicas} = {need}"
        )
        raise ConfigError(f"expected {f} devices, got {have}", file=file, key=f"devices.{role}.count")
