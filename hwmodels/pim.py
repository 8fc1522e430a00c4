"""PIM device model (YAML ``kind: pim``): lowers attention/GEMV ops onto a PIM ISA and times the
resulting command streams on the DRAM bank-timing engine (hwmodels/dram, API.md).

A device references a DRAM preset by name (``dram: hbm3_5200_pim``; ``dram_overrides`` are
merged into that YAML, e.g. to add PIM timings) and adds processing-unit parameters. ``units``
DRAM-spec instances (HBM stacks, GDDR6 chips, LPDDR5X packages) form one device; their channels
all run the lowered programs. Per op row: lower (isa/lower.py) -> distinct channel workloads ->
engine (``run_commands`` with symmetric-channel multiplicity) -> time = slowest channel, energy
= engine DRAM components + ``pim_compute`` (MACs x pJ/MAC) + ``sram`` (buffer bytes x pJ/B).
Bank-level PU arithmetic is inside the MAC command timing (one MAC command = ``macs_per_command``
MACs per bank); a CXL-PNM accelerator is decoupled from memory: time = max(stream, compute).

Softmax is a fixed-latency unit op (FIX) at ``softmax_gbps_per_unit`` bytes/s per unit spread
over its channels (AttAcc: 670.4 GB/s per HBM on the buffer die, pim_dram.md b.1). Score,
softmax and context are timed as separate ops (no cross-head overlap: an upper bound on
AttAcc's two-heads-in-flight pipelining, b.6).
"""

from __future__ import annotations

import copy
import math
from typing import Literal, Optional, Union

import numpy as np
from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from attnsim.core.config import HARDWARE_COUNT, ConfigError, Plausible, Schema
from attnsim.hwmodels.base import OpCost, request_kv_tokens
from attnsim.hwmodels.compression import CompressionSpec, engine_energy_j
from attnsim.hwmodels.pim_mapping import (
    ISA_PARTITIONS,
    MERGE_SITE,
    NO_MERGE,
    PARTITION_NAMES,
    allowed_partitions,
    cpi_candidates,
    merge_cost,
)
from attnsim.hwmodels.systolic import SystolicSpec
from attnsim.isa.lower import (
    ENGINE_CODES,
    PARTITIONS,
    PU,
    Lowered,
    Org,
    get_partition,
    lower_attention,
    lower_fc,
    stream_reads,
)


class PUParams(Schema):
    """Processing-unit parameters (defaults: AttAcc bank PU, pim_dram.md b.1)."""

    plausible = {
        "macs_per_command": Plausible(
            1, 1 << 20, "MACs per PIM command: 16-512 (AiM 16 per bank, FIMDRAM 16 lanes x 8 banks)"
        ),
        "mac_registers": Plausible(1, 1 << 20, "accumulator registers per unit (FIMDRAM GRF: 16)"),
    }

    macs_per_command: PositiveInt = 16  # n_mac (b.1)
    column_bytes: PositiveInt = 32  # prefetch_size (b.1)
    acc_bytes: PositiveInt = 2  # FP16 results
    pj_per_mac: float = Field(0.32, ge=0)  # ALU 0.32 pJ/MAC (b.1 energy table)
    sram_pj_per_byte: float = Field(0.0034, ge=0)  # PIM SRAM buffer (b.1 energy table)
    softmax_gbps_per_unit: float = Field(670.4, gt=0)  # buffer-die softmax = 670.4 GB/s per HBM (b.1)
    gb_bytes: PositiveInt = 2048  # AiM global buffer 2 KB (b.4)
    # AiM: MAC result registers per bank; an FC keeps up to this many outputs per bank in flight per GB
    # fill (CENT's reuse-GB order, isa/lower.py); other ISAs: 1 (refused otherwise)
    mac_registers: PositiveInt = 1
    tflops: Optional[float] = Field(None, gt=0)  # decoupled accelerator peak (CXL-PNM)
    # memory-controller energy per DRAM command on the device side (CENT MEM_CTR, pim_dram.md b.4):
    # PHY per command (ACT, PRE, MAC, RD, WR, buffer move, REF), transaction engine per data command
    phy_pj_per_command: float = Field(0.0, ge=0)
    trx_pj_per_command: float = Field(0.0, ge=0)


class StaticParts(Schema):
    """Static power (W per device) beside the DRAM background (which is derived from the DRAM preset):
    each YAML value cites its source or is marked an assumption."""

    pim_logic_w: float = Field(0.0, ge=0, description="PIM/PNM compute logic leakage (bank PUs, accelerator)")
    buffers_w: float = Field(0.0, ge=0, description="SRAM buffers (global/shared buffers, instruction buffers)")
    memory_controllers_w: float = Field(0.0, ge=0, description="on-device DRAM memory controllers + DRAM PHY, idle")
    cxl_w: float = Field(0.0, ge=0, description="CXL controller + PHY of the device (endpoint side), idle")


class PIMSpec(Schema):
    plausible = {
        "channels_per_item": HARDWARE_COUNT,
        "units": HARDWARE_COUNT,
        "channel_assignment": Plausible(0, 1 << 20, "a channel index (dram.spec.MAX_BANKS)"),
    }

    kind: Literal["pim"]
    name: str
    description: str = ""
    isa: Literal["attacc", "fimdram", "aim", "cxl_pnm", "newton"]
    dram: str
    dram_overrides: dict = Field(default_factory=dict)
    # mapping (hwmodels/pim_mapping.py): "auto" = attnsim picks the value minimising the step's PIM time;
    # a value pins it. partition: PU placement / in-channel layout (the ISA's own: ISA_PARTITIONS);
    # channels_per_item: channels one (request, KV head) item is split over by tokens (1 = heads over channels)
    partition: Literal[("auto",) + PARTITION_NAMES] = "auto"
    channels_per_item: Union[Literal["auto"], PositiveInt] = "auto"
    units: PositiveInt = 1
    capacity_gb_per_unit: Optional[float] = Field(None, gt=0)
    refresh: Literal["ab", "pb", "none"] = "ab"
    # isa newton: NewtonSim's refresh guard (hwmodels/pim_refresh.py): a GWRITE / GEMV tile starts only if its
    # estimated latency fits before the next refresh, else the PIM waits for that refresh
    refresh_guard: bool = False
    # isa newton (NeuPIMs): request -> channel placement, greedy = attnsim's offline LPT (longest first to the
    # least loaded channel), online = the artefact's ch_load_balancing (requests in arrival order, each to the
    # least loaded channel then), round_robin = request i on channel i mod channels, or an explicit list
    # (the channel of each request of a fixed batch, e.g. an artefact's request trace) (isa/lower_newton.py)
    channel_assignment: Union[Literal["greedy", "online", "round_robin"], list[int]] = "greedy"
    # isa newton: the NPU's PIM-instruction issue port (NeuPIMs NeuPIMSystolicWS.cc pim_ld_queue_cycle): PIM
    # instructions per ns through ONE in-order port that every channel shares, requests issued channel by channel
    # (Scheduler.cc group_sub_batches); no back-pressure (the per-channel request queues are unbounded,
    # NeuPIMSCore::push_memory_request). null = no limit (main f299af3: `while`, every queued instruction in a
    # cycle); 1.0 = the npu+pim baseline (e51a4af NeuPIMSystolicWS.cc:153 `if`, one per 1 GHz core cycle)
    npu_issue_per_ns: Optional[float] = Field(None, ge=1e-3)  # per ns; < 1 per us is refused as a unit slip
    # isa newton, with npu_issue_per_ns: NPU instructions of a head's COMP run: fused = one COMPS_READRES (main),
    # per_comp = one instruction per COMP + one READRES (npu+pim e51a4af with dram_type newton:
    # NeuPIMSLogitSoftmax.cc:231, NeuPIMSAttend.cc:204); a GWRITE and a tile's P_HEADER are one each either way
    comp_instructions: Literal["fused", "per_comp"] = "fused"
    # KV layout in the banks: 0 = contiguous per (request, head); > 0 = paged, blocks of this many tokens
    # (e.g. vLLM's 16), each starting a new row in every bank (isa/lower.py Partition.kv_block_tokens)
    kv_block_tokens: int = Field(0, ge=0)
    # retention time the refresh is sized for (JEDEC tREF = 64 ms at <= 85 C, cxl_reliability.md §3.1);
    # relaxing it stretches nREFI / nREFIpb by interval / 64 (the same rows refreshed less often)
    refresh_interval_ms: float = Field(64.0, gt=0)
    static_power_w: Optional[float] = Field(
        None, ge=0, description="total static power, replacing the DRAM background + `static` parts"
    )
    static: StaticParts = Field(default_factory=StaticParts)
    pu: PUParams = Field(default_factory=PUParams)
    # isa cxl_pnm only: systolic arrays + SRAM buffer instead of pu.tflops (Sangam; hwmodels/systolic.py), and
    # transparent compression of stored / streamed KV and weights (CXL-NDP; hwmodels/compression.py)
    systolic: Optional[SystolicSpec] = None
    compression: Optional[CompressionSpec] = None

    @field_validator("static")
    @classmethod
    def _static_once(cls, v: StaticParts, info: ValidationInfo):
        if info.data.get("static_power_w") is not None and any(v.model_dump().values()):
            raise ValueError("expected no static parts when static_power_w (the device total) is given")
        return v


def _deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_dram_for(spec: PIMSpec, hardware: dict | None = None):
    """The device's DRAM spec: ``spec.dram`` from the ``hardware`` table (an experiment's config
    tree, with its ``--set`` overrides) when it is there, else from its file; ``dram_overrides``
    and the refresh interval applied."""
    from pathlib import Path

    from attnsim.core.config import display_path, find_config, load_yaml
    from attnsim.hwmodels.dram.spec import spec_from_dict

    name = Path(spec.dram).stem if spec.dram.endswith((".yaml", ".yml")) else spec.dram
    if hardware is not None and isinstance(hardware.get(name), dict):
        raw, file = copy.deepcopy(hardware[name]), f"hardware/{name}"
    else:
        path = find_config("hardware", spec.dram)
        raw, file = load_yaml(path), display_path(path)
    data = _deep_merge(raw, spec.dram_overrides)
    scale = spec.refresh_interval_ms / 64.0
    if scale != 1.0:
        timing = dict(data.get("timing", {}))
        for key in ("nREFI", "nREFIpb"):
            if key in timing and timing[key]:
                timing[key] = max(1, int(round(timing[key] * scale)))
        data["timing"] = timing
    return spec_from_dict(data, file=file)


def _same_value(a, b) -> bool:
    """Deep equality of lowering contents (arrays element-wise, containers item by item)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _same_lowering(a, b) -> bool:
    """Whether two lowerings give the same engine run: records, multiplicities, CXL-PNM programs, metadata."""
    return (
        _same_value(a.commands, b.commands)
        and _same_value(a.multiplicity, b.multiplicity)
        and _same_value(a.meta, b.meta)
        and (
            a.isa != "cxl_pnm"  # its engine streams are built from the programs (PIMDevice.run)
            or _same_value(
                [(p.opcode, dict(p.fields), p.multiplicity, p.count) for p in a.programs],
                [(p.opcode, dict(p.fields), p.multiplicity, p.count) for p in b.programs],
            )
        )
    )


class PIMDevice:
    """A PIM/PNM device: DeviceModel protocol (name, kind, peaks, capacity, cost)."""

    kind = "pim"
    # True: the channels_per_item search lowers and simulates every candidate (the reference the pruned
    # search is tested and benchmarked against: tests/test_pim_mapping.py, bench/bench_pim_mapping.py)
    exhaustive_search = False

    def __init__(self, spec: PIMSpec, dram=None, hardware: dict | None = None):
        self.spec = spec
        self.name = spec.name
        self.dram = dram if dram is not None else load_dram_for(spec, hardware)
        d = self.dram
        if spec.isa != "cxl_pnm" and d.pim is None:
            raise ConfigError(
                f"DRAM preset {spec.dram!r} has no pim timing block (add it with dram_overrides.pim)", key="dram"
            )
        self.org = Org.from_spec(d)
        self.channels = d.org.channels * spec.units
        self.tck_s = d.org.tck_ns * 1e-9
        softmax_bytes_per_cycle = spec.pu.softmax_gbps_per_unit * 1e9 / d.org.channels * self.tck_s
        self.pu = PU(
            macs_per_command=spec.pu.macs_per_command,
            column_bytes=spec.pu.column_bytes,
            acc_bytes=spec.pu.acc_bytes,
            gb_bytes=spec.pu.gb_bytes,
            mac_registers=spec.pu.mac_registers,
            softmax_cycles_per_element=spec.pu.acc_bytes / softmax_bytes_per_cycle,
        )
        if spec.pu.mac_registers != 1 and spec.isa != "aim":
            raise ConfigError(
                f"expected 1 (mac_registers applies to isa aim), got {spec.pu.mac_registers} with isa {spec.isa}",
                key="pu.mac_registers",
            )
        for key in ("systolic", "compression"):
            if getattr(spec, key) is not None and spec.isa != "cxl_pnm":
                raise ConfigError(
                    f"expected no {key} section ({key} applies to isa cxl_pnm), got one with isa {spec.isa}", key=key
                )
        if spec.systolic is not None and spec.pu.tflops is not None:
            raise ConfigError(
                f"expected no pu.tflops with a systolic section (the arrays set the peak), got {spec.pu.tflops:g}",
                key="pu.tflops",
            )
        if spec.channel_assignment != "greedy" and spec.isa != "newton":
            raise ConfigError(
                f"expected greedy (channel_assignment applies to isa newton), got "
                f"{spec.channel_assignment!r} with isa {spec.isa}",
                key="channel_assignment",
            )
        if spec.npu_issue_per_ns is not None and spec.isa != "newton":
            raise ConfigError(
                f"expected null (npu_issue_per_ns applies to isa newton), got {spec.npu_issue_per_ns:g} "
                f"with isa {spec.isa}",
                key="npu_issue_per_ns",
            )
        if spec.comp_instructions != "fused" and spec.npu_issue_per_ns is None:
            raise ConfigError(
                f"expected fused (comp_instructions counts instructions through the NPU issue port: "
                f"set npu_issue_per_ns), got {spec.comp_instructions!r} without a port rate",
                key="comp_instructions",
            )
        if spec.refresh_guard and (spec.isa != "newton" or spec.refresh == "none"):
            raise ConfigError(
                f"expected false (refresh_guard applies to isa newton with refresh on), got true with "
                f"isa {spec.isa}, refresh {spec.refresh}",
                key="refresh_guard",
            )
        self._init_mapping()

    def _init_mapping(self) -> None:
        """Mapping candidates from the spec (hwmodels/pim_mapping.py); pins the ISA cannot run are refused."""
        spec, isa = self.spec, self.spec.isa
        allowed = allowed_partitions(isa)
        if spec.partition != "auto" and spec.partition not in allowed:
            raise ConfigError(
                f"expected auto or a partition isa {isa} can run ({', '.join(allowed)}), got {spec.partition!r}",
                key="partition",
            )
        self.partition_candidates = allowed if spec.partition == "auto" else (spec.partition,)
        # largest split: an AttAcc item stays in one stack (its buffer die merges it); the CXL-PNM
        # accelerator already streams every item over all channels (nothing to split)
        self.max_channels_per_item = {"attacc": self.dram.org.channels, "cxl_pnm": 1, "newton": 1}.get(
            isa, self.channels
        )
        if spec.isa == "cxl_pnm" and spec.systolic is None and spec.pu.tflops is None:  # peak_flops would be 0
            raise ConfigError(
                "expected a number > 0 (the CXL-PNM accelerator's peak TFLOP/s; or a systolic: block), got none",
                key="pu.tflops",
            )
        cpi = spec.channels_per_item
        if cpi != "auto" and cpi > self.max_channels_per_item:
            why = {
                "attacc": "channels per stack: a split item is merged on its stack's buffer die",
                "cxl_pnm": "the accelerator streams every item over all channels",
                "newton": "NeuPIMs places whole requests on channels: channel_assignment",
            }.get(isa, "channels of the device")
            raise ConfigError(
                f"expected auto or at most {self.max_channels_per_item} ({why}), got {cpi}", key="channels_per_item"
            )
        if cpi != "auto" and isa == "attacc" and self.dram.org.channels % cpi:
            raise ConfigError(
                f"expected auto or a divisor of {self.dram.org.channels} (channels per stack: a split "
                f"item's slices fill whole channel sets of one stack, whose buffer die merges them), "
                f"got {cpi}",
                key="channels_per_item",
            )
        # the partition carrying pinned values (peaks, single-candidate lowering); ISAs other than attacc
        # use only its channels_per_item (and only AttAcc's lowerings model kv_block_tokens)
        self.partition = self._partition(self.partition_candidates[0], 1 if cpi == "auto" else cpi)

    def _partition(self, name: str, channels_per_item: int):
        import dataclasses

        part = get_partition(name if name in PARTITIONS else "attacc_bank", channels_per_item)
        if self.spec.kv_block_tokens:
            part = dataclasses.replace(part, kv_block_tokens=self.spec.kv_block_tokens)
        return part

    # ------------------------------------------------------------ protocol
    @property
    def port_interval_cycles(self) -> float | None:
        """DRAM cycles per instruction of the NPU's PIM-instruction issue port (``npu_issue_per_ns``; None: no port
        limit, also on every ISA but newton, where the option is refused)."""
        rate = getattr(self.spec, "npu_issue_per_ns", None)
        return None if rate is None else 1e-9 / (rate * self.tck_s)

    @property
    def pus_per_channel(self) -> int:
        return (
            {"bank": self.org.banks, "bg": self.org.banks // self.org.banks_per_group, "buffer": 0}[
                self.partition.pu_level
            ]
            if self.spec.isa == "attacc"
            else (self.org.banks // 2 if self.spec.isa == "fimdram" else self.org.banks)
        )

    @property
    def peak_flops(self) -> float:
        if self.spec.isa == "cxl_pnm":
            if self.spec.systolic is not None:
                return self.spec.systolic.peak_flops
            return (self.spec.pu.tflops or 0.0) * 1e12
        n = self.dram.pim.nCCDAB
        return 2.0 * self.spec.pu.macs_per_command * self.pus_per_channel * self.channels / (n * self.tck_s)

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        """Internal bandwidth the PUs see (all-bank column rate; host-bus peak for CXL-PNM)."""
        if self.spec.isa == "cxl_pnm" or self.pus_per_channel == 0:
            return self.dram.peak_bandwidth_gbps * 1e9 * self.spec.units
        return self.pus_per_channel * self.spec.pu.column_bytes * self.channels / (self.dram.pim.nCCDAB * self.tck_s)

    @property
    def capacity_bytes(self) -> float:
        per = (
            self.spec.capacity_gb_per_unit * 1e9 if self.spec.capacity_gb_per_unit else float(self.dram.capacity_bytes)
        )
        return per * self.spec.units

    @property
    def static_power_w(self) -> float:
        return float(sum(self.static_power_parts_w.values()))

    @property
    def static_power_parts_w(self) -> dict[str, float]:
        """{component: W} of one device: ``dram_background`` (DRAM preset x channels) + the ``static``
        parts that are non-zero; a given ``static_power_w`` replaces them all (component ``device``). A new dict,
        computed once per (spec, DRAM preset, channels): every costed step reads it (serving: ~4 % of a step)."""
        hit = getattr(self, "_static_parts", None)
        if hit is None or hit[0] is not self.spec or hit[1] is not self.dram or hit[2] != self.channels:
            hit = (self.spec, self.dram, self.channels, self._static_parts_w())
            self._static_parts = hit
        return dict(hit[3])

    def _static_parts_w(self) -> dict[str, float]:
        if self.spec.static_power_w is not None:
            return {"device": float(self.spec.static_power_w)}
        from attnsim.hwmodels.dram.spec import energy_params

        parts = {"dram_background": energy_params(self.dram).background_w * self.channels}
        for k, v in self.spec.static.model_dump().items():
            if v:
                parts[k[:-2]] = float(v)
        return parts

    # ------------------------------------------------------------ engine
    def _run_cached(self, low: Lowered):
        """``run`` through the shared sub-result cache (attnsim.core.cache): the engine's time and
        energy for this device config and these command streams are reused across sweep points (the cache
        mixes a fingerprint of the code into every key, so no version tag is needed here)."""
        from attnsim.core.cache import cached

        key = (
            "pim.run",
            self._config_key(),
            low.isa,
            low.phase,
            [dict(c) if c is not None else None for c in low.commands],
            low.multiplicity,
            [(p.opcode, dict(p.fields), p.multiplicity, p.count) for p in low.programs]
            if low.isa == "cxl_pnm"
            else None,
            low.meta.get("storage_bytes_ratio", 1.0),
            low.meta.get("rowbuffer_key"),
        )
        return cached(key, lambda: self.run(low))

    def _config_key(self) -> str:
        """The cache key of this device's configs (PIM spec + DRAM preset), digested once per device: hashing the
        two dumps per lowering was 40 % of a warm `attnsim run` (issue 30). Both are frozen schemas."""
        ids = (id(self.spec), id(self.dram))
        if getattr(self, "_config_key_ids", None) != ids:
            from attnsim.core.cache import cache_key

            self._config_key_digest = cache_key(("pim.config", self.spec.model_dump(), self.dram.model_dump()))
            self._config_key_ids = ids
        return self._config_key_digest

    def run(self, low: Lowered) -> tuple[float, dict[str, float], dict]:
        """Time (s, slowest channel) and energy (J by component) of a lowering on the engine."""
        from attnsim.hwmodels.dram.engine import make_cmds, run_commands

        if low.meta.get("rowbuffer"):  # NeuPIMs: NPU traffic in the same banks (hwmodels/rowbuffer.py)
            from attnsim.hwmodels.rowbuffer import run_window

            return run_window(self, low)
        cmds = low.commands
        mult = low.multiplicity
        if low.isa == "cxl_pnm":  # the accelerator stripes each GEMV over every channel of the device
            from attnsim.isa.cxl_pnm import DTYPE_BYTES, DTYPES

            size = np.array([DTYPE_BYTES[d] for d in DTYPES])
            n_ch = self.dram.org.channels * self.spec.units
            cmds, mult = [], []
            for p in low.programs:
                gemv = p.opcode == p.isa.code("GEMV")
                nbytes = float(np.sum((p["rows"] * p["cols"] * size[p["dtype"]])[gemv]))
                # the program names the element format; storage may hold more per element (inline ECC
                # check bits, quantization scales): stream the bytes actually stored
                nbytes *= float(low.meta.get("storage_bytes_ratio", 1.0))
                if nbytes > 0:
                    cmds.append(stream_reads(self.org, nbytes / n_ch))
                    mult.append(n_ch)
                else:  # softmax only: the accelerator's vector unit (FIX), no DRAM traffic
                    elems = float(np.sum(p["length"][p.opcode == p.isa.code("SOFTMAX")]))
                    rate = self.spec.pu.softmax_gbps_per_unit * 1e9 * self.spec.units
                    c = {
                        k: np.zeros(1, np.int64)
                        for k in ("op", "pch", "rank", "bg", "bank", "row", "col", "repeat", "cycles")
                    }
                    c["op"][0] = ENGINE_CODES["FIX"]
                    c["cycles"][0] = max(1, math.ceil(elems * self.spec.pu.acc_bytes / rate / self.tck_s))
                    cmds.append(c)
                    mult.append(1)
        cap = self.dram.org.channels
        t_max, energy, counts = 0.0, {}, {}
        for s in range(0, len(cmds), cap):
            batch = cmds[s : s + cap]
            n = sum(len(c["op"]) for c in batch)
            rec = make_cmds(n)
            k = 0
            m_arr = np.zeros(cap, np.int64)
            for j, c in enumerate(batch):
                sl = slice(k, k + len(c["op"]))
                for f in ("op", "pch", "rank", "bg", "bank", "row", "col", "repeat", "cycles"):
                    rec[f][sl] = c[f]
                if "arrival" in c:  # isa newton with an NPU issue port: not-before cycle of each record
                    rec["arrival"][sl] = c["arrival"]
                if "flags" in c:  # stream_reads: F_IL / F_AP
                    rec["flags"][sl] = c["flags"]
                rec["ch"][sl] = j
                m_arr[j] = mult[s + j]
                k += len(c["op"])
            res = run_commands(self.dram, rec, multiplicity=m_arr, refresh=self.spec.refresh)
            t_max = max(t_max, float(res.time_s) if not self.spec.refresh_guard else self._guarded_s(rec, batch))
            for key, v in res.energy_j.items():
                if key != "dram_background":  # static: PIMDevice.static_power_w x step time
                    energy[key] = energy.get(key, 0.0) + float(v)
            for key, v in res.counts.items():
                counts[key] = counts.get(key, 0) + int(v)
            counts["pim_bytes"] = counts.get("pim_bytes", 0) + int(getattr(res, "pim_bytes", 0))
            counts["buf_bytes"] = counts.get("buf_bytes", 0) + int(getattr(res, "buf_bytes", 0))
        pu = self.spec.pu
        if pu.phy_pj_per_command or pu.trx_pj_per_command:  # controller PHY / transaction engine (CENT MEM_CTR)
            data = sum(
                counts.get(k, 0) for k in ("macab_ops", "macsb_ops", "macbg_ops", "buf_units", "rd_bursts", "wr_bursts")
            )
            cmds = data + sum(counts.get(k, 0) for k in ("act_cmds", "pre_cmds", "refs", "refpbs"))
            energy["dram_io"] = (
                energy.get("dram_io", 0.0) + (cmds * pu.phy_pj_per_command + data * pu.trx_pj_per_command) * 1e-12
            )
        if low.isa == "fimdram":  # MACAB scope is every bank; a FIMDRAM PU reads one of its 2 banks
            energy["dram_read_write"] = energy.get("dram_read_write", 0.0) / 2.0
            counts["pim_bytes"] //= 2
        return t_max, energy, counts

    def _guarded_s(self, rec, batch) -> float:
        """Slowest channel of ``rec`` (channels ``batch``) under NewtonSim's refresh guard
        (hwmodels/pim_refresh.py); the energy stays the engine run's."""
        from attnsim.hwmodels.dram.engine import make_cmds, raw_run, run_commands
        from attnsim.hwmodels.dram.rules import controller_rules
        from attnsim.hwmodels.pim_refresh import guarded_cycles

        def run(c):
            r = make_cmds(len(c["op"]))
            for f in ("op", "pch", "rank", "bg", "bank", "row", "col", "repeat", "cycles"):
                r[f][:] = c[f]
            return float(run_commands(self.dram, r, refresh="none").time_s) / self.tck_s

        free = rec.copy()
        free["arrival"] = 0  # back-to-back time: the walk applies the issue port's arrivals (pim_refresh.py)
        total = raw_run(self.dram, free, refresh="none")[0]
        stagger = controller_rules(None, self.dram).refresh_stagger
        return (
            max(guarded_cycles(self.dram, c, float(total[j]), run, staggered=stagger) for j, c in enumerate(batch))
            * self.tck_s
        )

    # ------------------------------------------------------------ ops
    def _streams(self, trace, i: int) -> bool:
        """Rows run as a roofline over the device's internal bandwidth and peak FLOP/s instead of
        lowering: element-wise ops and embeddings, and every prefill row (CXL-PNM's matrix unit;
        AiM's bank MACs, where prefill GEMMs are compute-bound)."""
        cls = str(trace.cols["cls"][i])
        if self.spec.isa == "aim":  # CENT: element-wise ops on the controller's vector units; prefill
            # (compute-bound GEMMs on the bank MACs) as a roofline over the banks' MAC rate and bandwidth
            # rather than millions of lowered MAC16 records
            if str(trace.cols["op"][i]).endswith("_io") and trace.phase == "decode":
                return False  # CENT's bank side of a controller RMSNorm / RoPE (mapper cxl_pnm): lowered
            return cls in ("elementwise", "embedding") or trace.phase == "prefill"
        if self.spec.isa != "cxl_pnm":
            return False
        return cls in ("elementwise", "embedding") or trace.phase == "prefill"

    def _stream_pj_per_byte(self) -> dict:
        """DRAM energy per byte of a streaming read, measured once on the engine (a lowered GEMV)."""
        if getattr(self, "_pj_cache", None) is None:
            low = lower_fc(self.spec.isa, 4096, 4096, 1, elem_bytes=2.0, n_channels=1, org=self.org, pu=self.pu)
            _, e, _ = self.run(low)
            nbytes = max(float(low.pim_bytes), 1.0)
            self._pj_cache = {k: v / nbytes for k, v in e.items() if k.startswith("dram_")}
        return self._pj_cache

    def _stream_cost(self, trace, i: int):
        c = trace.cols
        wb, kvr, kvw = (float(c[x][i]) for x in ("weight_bytes", "kv_read_bytes", "kv_write_bytes"))
        act = float(c["act_bytes"][i])
        fl = float(c["flops"][i])
        cls = str(c["cls"][i])
        compute_t = fl / self.peak_flops
        sys = self.spec.systolic
        if sys is not None and cls in ("matmul", "attn_score", "attn_context"):
            from attnsim.hwmodels.systolic import input_rereads, matmul_time_s, row_shape

            m, n, k, b = row_shape(cls, *(int(c[x][i]) for x in ("m", "n", "k", "batch")))
            compute_t = matmul_time_s(sys, m, n, k, b)
            act += input_rereads(sys, act, n)  # inputs past the SRAM buffer are re-read per column pass
        rw, rk = (
            self.stored_ratio("weights", trace.meta.get("weight_dtype")),
            self.stored_ratio("kv", trace.meta.get("kv_dtype")),
        )
        nbytes = wb * rw + act + kvr * rk + kvw * rk  # the trace's column order (bit-identical without compression)
        if self.spec.isa == "aim":  # a bank PU keeps no operand: every MAC16 reads its 32 B from the banks again
            nbytes = max(nbytes, fl / 2.0 * self.spec.pu.column_bytes / self.spec.pu.macs_per_command)
        t = max(nbytes / self.peak_bandwidth_bytes_per_s, compute_t)
        e = {k: v * nbytes for k, v in self._stream_pj_per_byte().items()}
        e["pim_compute"] = fl / 2.0 * self.spec.pu.pj_per_mac * 1e-12
        comp = self.spec.compression
        if comp is not None:  # the engine (de)compresses the compressed kinds' raw bytes
            raw = wb * comp.weights + (kvr + kvw) * comp.kv
            t = self._with_engine(t, raw)
            e["compute"] = engine_energy_j(comp, raw)
        return t, e, fl, nbytes

    def stored_ratio(self, kind: str, dtype=None) -> float:
        """Stored / raw bytes of ``kind`` (weights | kv) on this device: its compression section's ratio, else 1."""
        comp = self.spec.compression
        if comp is None:
            return 1.0
        try:
            return comp.ratio_for(kind, str(dtype or "bf16"))
        except ConfigError as exc:  # a dtype the coder was not measured on: name the device's file
            raise ConfigError(
                exc.message, file=getattr(self, "config_file", None) or f"hardware/{self.spec.name}", key=exc.key
            ) from None

    def _with_engine(self, t: float, raw_bytes: float) -> float:
        """Row time with the compression engine streaming ``raw_bytes``: overlapped (max) or added."""
        from attnsim.hwmodels.compression import engine_time_s

        te = engine_time_s(self.spec.compression, raw_bytes)
        return max(t, te) if self.spec.compression.overlap else t + te

    def _items(self, trace, i: int):
        """Per-(request, KV head) token counts, head dim, group, element bytes of row i."""
        c = trace.cols
        heads = int(c["batch"][i])
        kvh = int(trace.meta.get("kv_heads_per_rank", heads)) or heads
        k = int(c["k"][i])
        lens = request_kv_tokens(trace, i)
        total = float(lens.sum())
        kv = float(c["kv_read_bytes"][i])
        if c["cls"][i] == "softmax" or kv <= 0:  # element size unused by softmax (results are acc_bytes)
            from attnsim.workloads.model import DTYPE_BYTES

            eb = DTYPE_BYTES.get(str(trace.meta.get("kv_dtype", "fp16")), 2.0)
        else:
            eb = kv / max(total * kvh * k, 1.0)
        tokens = np.repeat(lens, kvh)
        return tokens, k, max(1, -(-heads // kvh)), eb  # ceil: uneven TP (e.g. 11 heads on 4 KV heads)

    def lower_row(self, trace, i: int, partition=None) -> Lowered:
        """Lower row i with ``partition`` (isa/lower.py Partition; default: the pinned/default one)."""
        part = partition or self.partition
        if self.spec.isa == "newton":  # NeuPIMs: requests on channels, NPU softmax, row buffer (rowbuffer.py)
            from attnsim.hwmodels.rowbuffer import lower_newton_row

            return lower_newton_row(self, trace, i)
        cls = str(trace.cols["cls"][i])
        if self.spec.isa == "aim" and cls == "elementwise" and str(trace.cols["op"][i]).endswith("_io"):
            from attnsim.isa.lower import lower_aim_vector_io  # CENT: bank side of a controller norm / RoPE

            c = trace.cols
            return lower_aim_vector_io(
                str(c["op"][i])[:-3],
                int(c["n"][i]),
                int(c["k"][i]),
                int(c["batch"][i]),
                n_channels=self.channels,
                org=self.org,
                pu=self.pu,
            )
        if cls in ATTN_PHASES:
            tokens, k, group, eb = self._items(trace, i)
            n_ch = 1 if self.spec.isa == "cxl_pnm" else self.channels
            phase = ATTN_PHASES[cls]
            if self.spec.isa == "aim" and str(trace.cols["op"][i]) == "softmax_io":
                phase = "softmax_io"  # CENT: the score moves of a controller softmax (mapper cxl_pnm)
            low = lower_attention(
                self.spec.isa,
                phase,
                tokens,
                dhead=k,
                group=group,
                elem_bytes=eb,
                n_channels=n_ch,
                org=self.org,
                pu=self.pu,
                partition=part,
            )
            return self._compressed(low, "kv", trace.meta.get("kv_dtype"))
        if cls == "matmul":
            c = trace.cols
            m, n, k, b = (int(c[x][i]) for x in ("m", "n", "k", "batch"))
            wb = float(c["weight_bytes"][i]) / max(n * k * b, 1)
            n_ch = 1 if self.spec.isa == "cxl_pnm" else self.channels
            low = lower_fc(
                self.spec.isa,
                n * b,
                k,
                m,
                elem_bytes=wb or 2.0,
                n_channels=n_ch,
                org=self.org,
                pu=self.pu,  # weights: contiguous rows (no KV blocks)
                partition=get_partition(part.name) if part.name != "attacc_bank" else None,
            )
            return self._compressed(low, "weights", trace.meta.get("weight_dtype"))
        raise ConfigError(
            f"PIM device {self.name!r} cannot run op class {cls!r} "
            "(supported: attn_score, softmax, attn_context, matmul)",
            key=str(trace.cols["op"][i]),
        )

    def _compressed(self, low: Lowered, kind: str, dtype) -> Lowered:
        """A lowering whose operands are stored compressed: the stream reads the stored bytes (the
        ``storage_bytes_ratio`` the engine run and its cache key read); ``raw_bytes`` kept for the engine."""
        if self.spec.compression is not None:
            r = self.stored_ratio(kind, dtype)
            low.meta = dict(low.meta, raw_bytes=float(low.pim_bytes), compression_ratio=r)
            low.meta["storage_bytes_ratio"] = float(low.meta.get("storage_bytes_ratio", 1.0)) * r
        return low

    MAX_ROW_MEMO = 50_000  # entries of the per-device row memo below (cleared when full; bounds memory)

    def _row_key(self, trace, i: int, part):
        """Everything row i's lowering and costing read (lower_row, _lowered_cost): equal keys give equal
        costs, so a serving run's iterations with the same decode attention rows are lowered once. None:
        not memoised (NeuPIMs reads the whole trace: its row buffer is shared with the NPU's traffic)."""
        if self.spec.isa == "newton":
            return None
        c = trace.cols
        cls, op = str(c["cls"][i]), str(c["op"][i])
        shape = tuple(int(c[x][i]) for x in ("m", "n", "k", "batch")) + (float(c["weight_bytes"][i]),)
        items = None
        if cls in ATTN_PHASES:
            tokens, k, group, eb = self._items(trace, i)
            items = (tokens.tobytes(), k, group, eb)
        return (part, cls, op, trace.phase, shape, items, trace.meta.get("kv_dtype"), trace.meta.get("weight_dtype"))

    def _lowered_cost(self, trace, i: int, part, memo: dict) -> dict:
        """Time, energy, traffic of row i lowered with ``part`` (one repeat); ``memo``: identical lowerings.
        Rows with equal :meth:`_row_key` are costed once per device (the returned dict is shared: read only)."""
        key = self._row_key(trace, i, part)
        rows = self.__dict__.setdefault("_row_memo", {})
        if key is not None and key in rows:
            return rows[key]
        out = self._lowered_cost_uncached(trace, i, part, memo)
        if key is not None:
            if len(rows) >= self.MAX_ROW_MEMO:
                rows.clear()
            rows[key] = out
        return out

    def _lowered_cost_uncached(self, trace, i: int, part, memo: dict) -> dict:
        low = self.lower_row(trace, i, part)
        key = (
            low.isa,
            low.phase,
            tuple(tuple(len(c["op"]) if c is not None else 0 for c in low.commands)),
            tuple(low.multiplicity),
            low.pim_bytes,
            low.macs,
            part.name,
            low.meta.get("rowbuffer_key"),
            low.meta.get("issue_port_key"),
        )
        # identical lowerings (e.g. same shape in two layer groups) run once; the key above only narrows the
        # search (two batches with equal token sums and chunk counts share it), equality is of the contents
        same = memo.setdefault(key, [])
        hit = next((r for other, r in same if _same_lowering(other, low)), None)
        if hit is None:
            hit = self._run_cached(low)
            same.append((low, hit))
        t, e, cnt = hit
        if self.spec.isa == "aim":  # the device decodes one host request per tCK (isa/aim.py)
            from attnsim.isa.aim import HOST_REQUESTS_PER_CYCLE
            from attnsim.isa.lower import host_requests

            t = max(t, host_requests(low) * self.tck_s / HOST_REQUESTS_PER_CYCLE)
        compute_t = 0.0
        if self.spec.isa == "cxl_pnm" and self.spec.systolic is not None and low.phase != "softmax":
            from attnsim.hwmodels.systolic import matmul_time_s, row_shape

            c = trace.cols
            compute_t = matmul_time_s(
                self.spec.systolic, *row_shape(str(c["cls"][i]), *(int(c[x][i]) for x in ("m", "n", "k", "batch")))
            )
        elif self.spec.isa == "cxl_pnm" and self.spec.pu.tflops:
            compute_t = 2.0 * low.macs / (self.spec.pu.tflops * 1e12)
        if "raw_bytes" in low.meta:  # compressed operands: the engine decompresses the raw bytes on the way
            t = self._with_engine(t, low.meta["raw_bytes"])
        out = {
            "time": max(t, compute_t),
            "channels_used": low.channels_used,
            "bound": "compute"
            if compute_t > t
            else ("overhead" if low.phase in ("softmax", "softmax_io") else "memory"),
            "energy": {k: e.get(k, 0.0) for k in ("dram_activate", "dram_read_write", "dram_io", "dram_refresh")},
        }
        out["energy"]["pim_compute"] = low.macs * self.spec.pu.pj_per_mac * 1e-12
        out["energy"]["sram"] = cnt.get("buf_bytes", 0) * self.spec.pu.sram_pj_per_byte * 1e-12
        if low.phase == "softmax":  # [assumed] one MAC-equivalent per score + buffer read and write
            elems = float(low.meta.get("elements", 0.0))
            out["energy"]["pim_compute"] = elems * self.spec.pu.pj_per_mac * 1e-12
            out["energy"]["sram"] = 2.0 * elems * self.spec.pu.acc_bytes * self.spec.pu.sram_pj_per_byte * 1e-12
        out["bytes_pim"], out["bytes_buf"], out["flops"] = low.pim_bytes, cnt.get("buf_bytes", 0), 2.0 * low.macs
        if "raw_bytes" in low.meta:
            out["bytes_pim"] = low.pim_bytes * float(low.meta["compression_ratio"])
            out["energy"]["compute"] = engine_energy_j(self.spec.compression, low.meta["raw_bytes"])
        return out

    def _merge(self, trace, i: int, cpi: int, channels_used: int):
        """Merge of row i's split items (an attn_context row) on the ISA's merge site (pim_mapping.py)."""
        if cpi <= 1 or self.spec.isa not in MERGE_SITE:
            return NO_MERGE
        tokens, k, group, _ = self._items(trace, i)
        rate = self.spec.pu.softmax_gbps_per_unit * 1e9 * self.spec.units / self.spec.pu.acc_bytes
        bus = self.dram.peak_bandwidth_gbps * 1e9 / self.dram.org.channels * max(channels_used, 1)
        return merge_cost(
            tokens,
            cpi,
            group=group,
            dhead=k,
            acc_bytes=self.spec.pu.acc_bytes,
            isa=self.spec.isa,
            elems_per_s=rate,
            bus_bytes_per_s=bus,
        )

    def _pu_rates(self, pname: str) -> tuple[float, float]:
        """Upper bounds (bytes/s, MACs/s over all channels) of partition ``pname``'s PUs, at the engine's
        spacing: MACAB every nCCDAB in every bank, MACBG every nCCD_L per bank group, each command
        ``macs_per_command`` MACs on one column; the buffer die reads at the bus rate (compute not timed)."""
        o, pu = self.org, self.spec.pu
        if self.spec.isa != "attacc":
            return self.peak_bandwidth_bytes_per_s, self.peak_flops / 2.0
        if pname == "attacc_buffer":
            return self.dram.peak_bandwidth_gbps * 1e9 * self.spec.units, math.inf
        pus, gap = (
            (o.banks // o.banks_per_group, self.dram.timing.nCCD_L)
            if pname == "attacc_bg"
            else (o.banks, self.dram.pim.nCCDAB)
        )
        per_s = pus * self.channels / (gap * self.tck_s)
        return per_s * pu.column_bytes, per_s * pu.macs_per_command

    def _time_lower_bound(self, trace, rows: np.ndarray, lowered: list[int], pname: str) -> float:
        """Count-weighted PIM time no lowering with ``pname`` can beat: per row max(bytes its PUs read /
        their peak rate, MACs / their peak MAC rate)."""
        c = trace.cols
        bw, mac_rate = self._pu_rates(pname)
        out = 0.0
        for j in lowered:
            i = int(rows[j])
            cls = str(c["cls"][i])
            if cls == "softmax":
                continue
            if cls in ATTN_PHASES:
                tokens, k, group, eb = self._items(trace, i)
                nbytes, macs = float(tokens.sum()) * k * eb, float(tokens.sum()) * k * group
            else:
                nbytes = float(c["weight_bytes"][i])
                n, k, b, m = (float(c[x][i]) for x in ("n", "k", "batch", "m"))
                macs = n * k * b * m
            out += max(nbytes / bw, macs / mac_rate) * float(c["count"][i])
        return out

    def _cpi_lower_bound(self, trace, rows: np.ndarray, js: list[int], pname: str, cpi: int) -> float:
        """Count-weighted time of one attention layer group (score + softmax + context + merge) that no
        lowering with partition ``pname`` split ``cpi`` ways can beat: per row, the busiest channel's tokens
        (the lowering's own placement, isa/lower.py ``assign_items``) x their bytes or MACs at one channel's PU
        peak (``_pu_rates`` / channels), plus the merge (closed form, ``_merge``). Softmax rows count 0."""
        from attnsim.isa.lower import assign_items

        c = trace.cols
        bw, mac_rate = (r / self.channels for r in self._pu_rates(pname))
        ratio = self.stored_ratio("kv", trace.meta.get("kv_dtype"))  # compressed KV: fewer bytes streamed
        out = 0.0
        for j in js:
            i = int(rows[j])
            cls = str(c["cls"][i])
            tokens, k, group, eb = self._items(trace, i)
            work = assign_items(tokens, self.channels, cpi)
            busiest = max((sum(sl) for sl, _ in work), default=0)
            if cls == "softmax":  # AttAcc: the buffer-die unit's FIX cycles per score (isa/lower.py)
                if self.spec.isa == "attacc":
                    out += busiest * group * self.pu.softmax_cycles_per_element * self.tck_s * float(c["count"][i])
                continue
            t = max(busiest * k * eb * ratio / bw, busiest * k * group / mac_rate)
            if self.spec.isa == "attacc" and pname == "attacc_bank":
                t = max(t, self._macab_rows_s(busiest * k * eb * ratio, group))
            if cls == "attn_context":
                t += self._merge(trace, i, cpi, sum(m for _, m in work)).time_s
            out += t * float(c["count"][i])
        return out * (1.0 - 1e-9)  # float rounding: a bound equal to the simulated time must not prune it

    def _macab_rows_s(self, nbytes: float, passes: int) -> float:
        """Least time of one channel's all-bank MAC stream over ``nbytes`` read ``passes`` times (one pass
        per query head of a KV head): MACAB commands = bytes / (banks x column bytes) x passes, at most
        columns x passes of them per row activation, each activation's row period as
        ``allbank_closed_form`` (nRCD + (n-1) nCCDAB + nRTP + nRP, at least nRC; no refresh: a short run
        may see none). Whole rows with every pass on one activation: the most MACs a row period can do."""
        o, pu = self.org, self.spec.pu
        n = o.columns * max(1, passes)
        period = allbank_closed_form(self.dram, o.columns, n, refresh=False)["row_period_cycles"]
        commands = nbytes / (o.banks * pu.column_bytes) * passes
        return commands / n * period * self.tck_s

    def _cpi_candidates(self, n_items: int) -> list[int]:
        cpi = self.spec.channels_per_item
        if cpi != "auto":
            return [int(cpi)]
        # AttAcc: the slices of one item inside one stack (see _init_mapping)
        per_stack = self.dram.org.channels if self.spec.isa == "attacc" else 0
        return cpi_candidates(n_items, self.channels, self.max_channels_per_item, divides=per_stack)

    def _search(self, trace, rows: np.ndarray, lowered: list[int]) -> dict:
        """Per row j (of ``rows``) its cost and mapping under the best mapping (pim_mapping.py): one partition
        per device and step, one channels_per_item per attention layer group (score + softmax + context
        + merge), each minimising the count-weighted PIM time."""
        c = trace.cols
        count = np.asarray(c["count"], np.float64)
        groups: dict = {}
        fc = []
        for j in lowered:
            i = int(rows[j])
            if str(c["cls"][i]) in ATTN_PHASES:
                groups.setdefault((int(c["layer_group"][i]), float(c["n"][i])), []).append(j)
            else:
                fc.append(j)
        memo: dict = {}
        best = None
        for pname in self.partition_candidates:
            if best is not None and self._time_lower_bound(trace, rows, lowered, pname) >= best[0]:
                continue  # cannot beat the best partition so far: not lowered (the search stays fast)
            plan, total = {}, 0.0
            for js in groups.values():
                n_items = len(self._items(trace, int(rows[js[0]]))[0])
                cands = self._cpi_candidates(n_items)
                if len(cands) > 1 and not self.exhaustive_search:
                    # candidates in order of their lower bound; one whose bound cannot beat the best simulated
                    # (time, cpi) is not lowered: the same choice as simulating all (tested), ~1-2 engine runs
                    bound = {cpi: self._cpi_lower_bound(trace, rows, js, pname, cpi) for cpi in cands}
                    cands = sorted(cands, key=lambda s: (bound[s], s))
                choice = None
                for cpi in cands:
                    if choice is not None and not self.exhaustive_search and (bound[cpi], cpi) > choice[:2]:
                        break  # sorted by bound: no later candidate can win either
                    part = self._partition(pname, cpi)
                    res = {j: self._lowered_cost(trace, int(rows[j]), part, memo) for j in js}
                    ctx = [j for j in js if str(c["cls"][int(rows[j])]) == "attn_context"]
                    merge = {j: self._merge(trace, int(rows[j]), cpi, res[j]["channels_used"]) for j in ctx}
                    t = sum(
                        (res[j]["time"] + (merge[j].time_s if j in merge else 0.0)) * count[int(rows[j])] for j in js
                    )
                    if choice is None or (t, cpi) < choice[:2]:
                        choice = (t, cpi, res, merge)
                t, cpi, res, merge = choice
                total += t
                for j in js:
                    plan[j] = (res[j], cpi, merge.get(j, NO_MERGE))
            part = self._partition(pname, 1)
            for j in fc:
                r = self._lowered_cost(trace, int(rows[j]), part, memo)
                plan[j] = (r, 1, NO_MERGE)
                total += r["time"] * count[int(rows[j])]
            if best is None or total < best[0]:
                best = (total, pname, plan)
        return {j: (r, best[1], cpi, m) for j, (r, cpi, m) in best[2].items()}

    def cost(self, trace, rows) -> OpCost:
        """The rows' costs under the best mapping, through the sub-result cache (attnsim.core.cache): a run
        that costs the same step on the same device again (the verdict flips re-run every system of a pair
        with one parameter moved: ~2/3 of their PIM steps repeat, ~25 % of a warm `attnsim run`, issue 30)
        reuses it. The key is the device's configs and the whole trace, everything :meth:`_cost` reads."""
        rows = np.asarray(rows, np.int64)
        key = self._cost_key(trace, rows)
        if key is None:
            return self._cost(trace, rows)
        from attnsim.core.cache import cached

        return _opcost_from_data(cached(key, lambda: _opcost_data(self._cost(trace, rows))))

    def _cost_key(self, trace, rows: np.ndarray):
        """Cache key parts of ``cost(trace, rows)``; None when a part is not plain data (then no caching)."""
        import dataclasses

        groups = [dataclasses.asdict(g) if dataclasses.is_dataclass(g) else g for g in trace.groups]
        arrays = [np.asarray(trace.query_tokens), np.asarray(trace.context_lens), *trace.cols.values()]
        if any(a.dtype.hasobject for a in arrays) or not _plain(groups) or not _plain(trace.meta):
            return None
        return (
            "pim.cost",
            self._config_key(),
            bool(self.exhaustive_search),
            str(trace.phase),
            str(trace.model),
            int(trace.tp),
            arrays[:2],
            trace.cols,
            groups,
            trace.meta,
            rows,
        )

    def _cost(self, trace, rows: np.ndarray) -> OpCost:
        n = len(rows)
        time = np.zeros(n)
        comps = ("dram_activate", "dram_read_write", "dram_io", "dram_refresh", "pim_compute", "sram") + (
            ("compute",) if self.spec.compression is not None else ()
        )  # compute: the compression engine
        energy = {k: np.zeros(n) for k in comps}
        bytes_pim, bytes_buf = np.zeros(n), np.zeros(n)
        flops = np.zeros(n)
        bound = np.empty(n, dtype=object)
        mapping = np.full(n, None, dtype=object)
        lowered = []
        for j, i in enumerate(rows):
            if self._streams(trace, int(i)):
                t, e, fl, b = self._stream_cost(trace, int(i))
                time[j], flops[j], bytes_pim[j] = t, fl, b
                bound[j] = "compute" if fl / self.peak_flops >= b / self.peak_bandwidth_bytes_per_s else "memory"
                for k, v in e.items():
                    energy[k][j] = v
                continue
            lowered.append(j)
        fixed = ISA_PARTITION_REPORT.get(self.spec.isa)
        for j, (r, pname, cpi, merge) in self._search(trace, rows, lowered).items():
            time[j] = r["time"] + merge.time_s
            bound[j] = r["bound"]
            for k, v in r["energy"].items():
                energy[k][j] = v
            if merge.elements:  # [assumed] as softmax: one MAC-equivalent per element + buffer read and write
                energy["pim_compute"][j] += merge.elements * self.spec.pu.pj_per_mac * 1e-12
                energy["sram"][j] += 2.0 * merge.bytes * self.spec.pu.sram_pj_per_byte * 1e-12
            bytes_pim[j], bytes_buf[j], flops[j] = r["bytes_pim"], r["bytes_buf"], r["flops"]
            mapping[j] = {
                "partition": fixed or pname,
                "channels_per_item": int(cpi),
                "channels_used": int(r["channels_used"]),
                "merge_s": float(merge.time_s),
            }
        return OpCost(
            time_s=time,
            energy_j=energy,
            bytes_by_level={"dram_bank": bytes_pim, "pim_buffer": bytes_buf},
            flops=flops,
            bound=bound,
            mapping=mapping,
        )


def _plain(v) -> bool:
    """Whether ``v`` is data a cache key encodes by value (attnsim.core.cache._feed: no object arrays)."""
    if v is None or isinstance(v, (bool, int, float, str, np.integer, np.floating, np.bool_)):
        return True
    if isinstance(v, np.ndarray):
        return not v.dtype.hasobject
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    return False


def _opcost_data(c: OpCost) -> dict:
    """An OpCost as cacheable data (attnsim.core.cache values: arrays, lists, dicts, scalars)."""
    return {
        "time_s": c.time_s,
        "energy_j": dict(c.energy_j),
        "bytes_by_level": dict(c.bytes_by_level),
        "flops": c.flops,
        "bound": [str(b) for b in c.bound],
        "mapping": [dict(m) if m is not None else None for m in c.mapping],
    }


def _opcost_from_data(d: dict) -> OpCost:
    """A fresh OpCost (own arrays: callers may scale them in place) from :func:`_opcost_data`'s form."""
    n = len(d["time_s"])
    bound, mapping = np.empty(n, dtype=object), np.full(n, None, dtype=object)
    bound[:] = list(d["bound"])
    for j, m in enumerate(d["mapping"]):
        mapping[j] = dict(m) if m is not None else None
    return OpCost(
        time_s=np.array(d["time_s"], np.float64),
        energy_j={k: np.array(v, np.float64) for k, v in d["energy_j"].items()},
        bytes_by_level={k: np.array(v, np.float64) for k, v in d["bytes_by_level"].items()},
        flops=np.array(d["flops"], np.float64),
        bound=bound,
        mapping=mapping,
    )


ATTN_PHASES = {"attn_score": "score", "softmax": "softmax", "attn_context": "context"}
# the partition a non-AttAcc ISA reports (its lowering has one fixed scheme, pim_mapping.ISA_PARTITIONS)
ISA_PARTITION_REPORT = {isa: names[0] for isa, names in ISA_PARTITIONS.items() if isa != "attacc"}


# ---------------------------------------------------------------- closed form


def allbank_closed_form(dram, columns_per_row: int, macs_per_row: int | None = None, refresh: bool = True) -> dict:
    """Closed-form all-bank PIM stream of whole rows (pim_dram.md "All-bank PIM timing constraints"):
    row period = max(nRC, max(nRAS, nRCD + (n-1) nCCDAB + nRTP) + nRP) with n MAC commands per
    row; bytes per period = n x banks x column bytes (one channel); refresh removes nRFC every
    nREFI. Returns bytes/s per channel, row period and the ideal banks x bytes / nCCDAB."""
    t, p, o = dram.timing, dram.pim, dram.org
    n = macs_per_row or columns_per_row
    rcd = p.nRCDRDMAC or t.nRCDRD
    period = max(t.nRC, max(t.nRAS, rcd + (n - 1) * p.nCCDAB + t.nRTP) + t.nRP)
    banks = o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group
    tck = o.tck_ns * 1e-9
    ideal = banks * o.burst_bytes / (p.nCCDAB * tck)
    bw = n * banks * o.burst_bytes / (period * tck)
    if refresh:
        bw *= 1.0 - t.nRFC / t.nREFI
    return dict(bytes_per_s=bw, ideal_bytes_per_s=ideal, row_period_cycles=period)


def _register() -> None:
    from attnsim.hwmodels import registry

    registry.register("pim", PIMSpec, PIMDevice, uses_table=True)


_register()
