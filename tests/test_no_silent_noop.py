"""No silent no-op: every field of every config schema, changed to another legal value, changes the
result document (or is refused with a ConfigError naming that field).

Each schema field is tested once, on the first base experiment below that reaches it (or the base
FIELD_BASE names). The changed value is automatic (tests/noop_walk.py: bool flipped, another Literal
choice, numbers x1.5 or +1 within bounds, None -> 1) unless ALTERNATIVE gives one, with optional
extra ``--set`` overrides applied to both runs (so that the field is reachable, e.g. a KV policy's
budget with that policy selected). Only the fields in COSMETIC may leave the document unchanged; a
clean ConfigError naming the field (a refused setting, e.g. ``parallelism.pp`` above the model's layers) counts as a
change. Documents are compared as ``--json`` prints them, less the keys that echo the configuration
(noop_walk.ECHO_KEYS: the scenario and disaggregation echoes).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from noop_walk import (
    Alt,
    Leaf,
    NoAlternative,
    alternative,
    cached_yaml,
    load,
    module_options,
    reachable,
    run_doc,
    set_arg,
    walk,
)

from attnsim.core.config import ConfigError
from attnsim.hwmodels import registry
from attnsim.hwmodels.dram.rules import RuleOverrides
from attnsim.hwmodels.reliability.spec import ReliabilitySpec
from attnsim.hwmodels.system import SystemSpec
from attnsim.mapper.base import policies
from attnsim.sim.experiment import ExperimentSpec
from attnsim.studies.serve.spec import ServingSpec
from attnsim.workloads.model import ModelSpec
from attnsim.workloads.scenario import Scenario

# Fields that name or describe things and may not change a result. Nothing else.
COSMETIC = {
    "ExperimentSpec.name",
    "ExperimentSpec.description",
    "ModelSpec.name",
    "ModelSpec.source",
    "ModelSpec.architecture",  # HF class name: a label
    "SystemSpec.name",
    "SystemSpec.description",
    "SystemSpec.source",
    "GPUSpec.name",
    "GPUSpec.source",
    "NPUSpec.name",
    "NPUSpec.source",
    "LinkSpec.name",
    "LinkSpec.source",
    "MemorySpec.name",
    "MemorySpec.description",
    "MemorySpec.source",
    "PIMSpec.name",
    "PIMSpec.description",
    "DRAMSpec.name",
    "DRAMSpec.description",
    "DisaggSpec.name",
    "ControllerSpec.name",
    "ControllerSpec.description",
    "ControllerSpec.source",
    "Scenario.name",
    # the kind tag selects the schema; another kind is another schema (its own fields are walked)
    "GPUSpec.kind",
    "NPUSpec.kind",
    "LinkSpec.kind",
    "MemorySpec.kind",
    "PIMSpec.kind",
    "DRAMSpec.kind",
    "ControllerSpec.kind",
    "HostSpec.name",
    "HostSpec.description",
    "HostSpec.source",
    "HostSpec.kind",
    "NCCLSpec.source",
    "CustomAllReduceSpec.source",
    "KVPoolSpec.name",
    "KVPoolSpec.description",
    "KVPoolSpec.source",
    "KVPoolSpec.kind",
    "FlashSpec.name",
    "FlashSpec.description",
    "FlashSpec.source",
    "FlashSpec.kind",
}

SMALL = ["models.llama2-7b.num_layers=2"]
SCEN = "experiment.scenarios={s: {batch_size: 2, prompt_len: 64, output_len: 6}}"
GEN = "experiment.generation={mode: sampled, samples: 3}"


def _sys(*names):
    return [
        f"experiment.systems=[{', '.join(names)}]",
        "experiment.models=[llama2-7b]",
        "experiment.baseline=null",
        SCEN,
        GEN,
    ] + SMALL


def _cxl_tier_first() -> str:
    """The reliability example's tiers with the KV's tier (cxl on cxl_pnm) first, so it is walked."""
    from attnsim.core.config import find_config, load_yaml

    tiers = load_yaml(find_config("experiments", "reliability_tiering"))["reliability"]["tiers"]
    return set_arg(("experiment", "reliability", "tiers"), {"cxl": tiers["cxl"], "hbm": tiers["hbm"]})


_CXL_FIRST = _cxl_tier_first()

# name -> (kind, experiment, --set overrides, DRAM spec for kind "dram"); earlier bases take a field first
BASES = {
    "gpu": ("run", "default", _sys("dgx_a100"), None),
    "attacc": ("run", "default", _sys("attacc"), None),
    "neupims": ("run", "default", _sys("neupims"), None),
    "cxl_pnm": ("run", "default", _sys("cxl_pnm"), None),
    "cxl_aim": ("run", "default", _sys("cxl_aim"), None),
    "tiered": ("run", "default", _sys("tiered_attacc"), None),
    "attacc_opt": ("run", "default", _sys("attacc_opt"), None),
    "pnm_attn": ("run", "default", _sys("h100_x8_cxl_pnm_attn"), None),  # mapper.attention_on (place_attention)
    "offload": ("run", "default", _sys("offload_host"), None),
    "host": ("run", "default", _sys("cxl_pnm_host"), None),  # a host pool (kind host): static power only
    "ianus": ("run", "default", _sys("ianus"), None),  # unified NPU + GDDR6-AiM memory (mapper/ianus.py)
    "speculative": (
        "run",
        "default",
        [
            "experiment.systems=[ianus_a100]",
            "experiment.models=[gpt2-medium]",
            "experiment.baseline=null",
            GEN,
            "experiment.scenarios={s: {batch_size: 2, prompt_len: 64, output_len: 6, "
            "speculative: {draft_model: gpt2, draft_tokens: 2, acceptance_rate: 0.5}}}",
        ],
        None,
    ),
    "moe": (
        "run",
        "default",
        [
            "experiment.systems=[dgx_a100]",
            "experiment.models=[deepseek-v2-lite]",
            "experiment.baseline=null",
            SCEN,
            GEN,
            "models.deepseek-v2-lite.num_layers=3",
        ],
        None,
    ),
    "lens": (
        "run",
        "default",
        _sys("dgx_a100")[:3]
        + [
            "experiment.scenarios={s: {batch_size: 4, context_lens: "
            "{dist: normal, mean: 64, std: 16, low: 8, high: 200, seed: 1}, output_len: 6}}",
            GEN,
        ]
        + SMALL,
        None,
    ),
    "npu": ("run", "default", _sys("neupims") + ["systems.neupims.mapper={policy: gpu_only}"], None),
    "reliability": (
        "run",
        "reliability_tiering",
        [
            _CXL_FIRST,
            "experiment.reliability.tiers.hbm.capacity_gb=1.0e-6",
            "experiment.models=[llama2-7b]",
            "experiment.generation={mode: sampled, samples: 3}",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 64, output_len: 6, "
            "kv_dtype: bf16, weight_dtype: bf16, act_dtype: bf16}}",
        ]
        + SMALL,
        None,
    ),
    "serve": (
        "serve",
        "serve_paging",
        [
            "experiment.models=[llama2-7b]",
            "experiment.scenarios={chat: {prompt_len: 64, output_len: 16}}",
            "experiment.serving.trace.num_requests=8",
            "experiment.serving.trace.rate_per_s=2000",
            "experiment.serving.trace.prompt={dist: lognormal, mean: 64, std: 32, high: 160}",
            "experiment.serving.trace.output={dist: uniform, low: 4, high: 24}",
            "experiment.serving.kv.locality_dram=null",
        ]
        + SMALL,
        None,
    ),
    "serve_prefix": (
        "serve",
        "serve_prefix",
        [
            "experiment.models=[llama2-7b]",
            "experiment.scenarios={chat: {prompt_len: 64, output_len: 16}}",
            "experiment.serving.trace.num_requests=8",
            "experiment.serving.trace.rate_per_s=50",
            "experiment.serving.trace.prompt={dist: uniform, low: 16, high: 64}",
            "experiment.serving.trace.output={dist: fixed, mean: 8}",
            "experiment.serving.trace.prefix={num_prefixes: 2, tokens: 64, fraction: 0.75}",
        ]
        + SMALL,
        None,
    ),
    "serve_disagg": (
        "serve",
        "serve_disagg",
        [
            "experiment.models=[llama2-7b]",
            "experiment.scenarios={chat: {prompt_len: 64, output_len: 16}}",
            "experiment.serving.colocated=false",
            "experiment.serving.trace.num_requests=6",
            "experiment.serving.trace.rate_per_s=50",
            "experiment.serving.trace.prompt={dist: fixed, mean: 64}",
            "experiment.serving.trace.output={dist: fixed, mean: 8}",
        ]
        + SMALL,
        None,
    ),
    "serve_file": (
        "serve",
        "serve_paging",
        [  # requests from a file (no synthetic trace settings)
            "experiment.models=[llama2-7b]",
            "experiment.scenarios={chat: {prompt_len: 64, output_len: 16}}",
            f"experiment.serving.trace={{file: {Path(__file__).parent / 'data' / 'noop_requests_prefix.csv'}, "
            "prefix_tokens: 16}",
            "experiment.serving.kv.locality_dram=null",
        ]
        + SMALL,
        None,
    ),
    "dram": ("dram", "default", _sys("attacc"), "hbm3_5200_pim"),  # per-event energies given
    "dram_idd": ("dram", "default", _sys("cxl_pnm"), "lpddr5x_8533"),  # energies derived from IDD
    "cxl_ndp": ("run", "default", _sys("cxl_ndp"), None),  # a compression section (CXL-NDP)
    "sangam": ("run", "default", _sys("sangam_x1"), None),  # a systolic section (Sangam)
    "kv_pool": (
        "serve",
        "kv_pool",
        [  # 4 instances sharing a KV pool (hwmodels/kv_pool.py)
            "experiment.models=[llama3-8b]",
            "experiment.serving.trace.num_requests=24",
            "experiment.serving.trace.rate_per_s=8",
            "experiment.serving.trace.prefix={num_prefixes: 4, tokens: 256, fraction: 1.0}",
            "experiment.serving.trace.prompt={dist: fixed, mean: 32}",
            "experiment.serving.trace.output={dist: fixed, mean: 3}",
            "experiment.systems=[mooncake_h100_x4, mooncake_h100_x8_nopool]",
            "experiment.serving.kv_pool.systems=[mooncake_h100_x4]",
            "models.llama3-8b.num_layers=2",
        ],
        None,
    ),
    "flash": (
        "run",
        "kv_flash",
        [  # KV on one NAND SSD (hwmodels/flash.py), flash-bound: a fast link, no overlap
            "experiment.systems=[kvnand_h100_ssd]",
            "experiment.baseline=null",
            GEN,
            "models.llama3-8b.num_layers=2",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 4096, output_len: 4}}",
            "hardware.nand_nvme_gen5_x4.bandwidth_gbps=1000",
            "systems.kvnand_h100_ssd.mapper.options.overlap=false",
        ],
        None,
    ),
}

# field -> base, where the first base reaching it does not exercise it
FIELD_BASE = {
    "Scenario.reliability": "reliability",
    "ModelSpec.moe": "moe",
    "ModelSpec.mla": "moe",
    "Scenario.speculative": "speculative",
    "Scenario.context_lens": "lens",
    "TraceSpec.prefix": "serve_prefix",
    "ServingSpec.disaggregation": "serve_disagg",
    "KVSpec.prefix_caching": "serve_prefix",
    "ServingSpec.colocated": "serve_disagg",
    "PUParams.tflops": "cxl_pnm",
    "PUParams.gb_bytes": "cxl_aim",
    "LinkSpec.connects": "attacc",
    "PIMSpec.compression": "cxl_ndp",
    "PIMSpec.systolic": "sangam",  # containers there (their fields walked)
    "NPUSpec.hbm_capacity_gb": "npu",
    # collectives blocks: containers on the GPU links (their fields are walked on dgx_a100's nvlink3)
    "LinkSpec.nccl": "gpu",
    "LinkSpec.custom_allreduce": "gpu",
    "ExperimentSpec.seed": "serve",
    "TraceSpec.prefix_tokens": "serve_file",
    "TraceSpec.file": "serve_file",
    "TraceSpec.prompt": "serve",
    "TraceSpec.output": "serve",
    "ModelSpec.rope_scaling": "moe",
    "MapperSpec.policy": "attacc",
    "MapperSpec.attention_on": "pnm_attn",
    "MemoSpec.relative_bucket": "serve_disagg",
    "DRAMSpec.pim": "dram",
    "ServingSpec.kv_pool": "kv_pool",
    **{f"IDD.{c}": "dram_idd" for c in ("idd0_ma", "idd2n_ma", "idd4r_ma", "idd4w_ma")},
    "PIMTiming.nCCDSB": "dram",
    "PIMTiming.mode_switch_cycles": "dram",  # no lowering emits MACSB / MODE
    "PIMTiming.actbg_faw_acts": "neupims",  # ACTBG: NeuPIMs' G_ACT (isa newton); AttAcc's lowering opens with ACTAB
}

DATA = Path(__file__).parent / "data"
GPU = "hardware.a100_80gb_sxm"
SV = "experiment.serving"
POLICY = SV + ".kv.policy.kind"
PRESSURE = (
    SV + ".scheduler.memory_fraction=0.016",
    SV + ".trace.num_requests=12",  # KV for ~1200 tokens:
    SV + ".trace.output={dist: fixed, mean: 64}",
)  # preemptions
PB = ("hardware.hbm3_5200_pim.default_refresh=pb",)
REL = "experiment.reliability"
RELAXED = (REL + ".tiers.cxl.refresh_ms.low=1000",)  # retention errors matter beyond the JEDEC interval
ROPE_ORIG = "models.deepseek-v2-lite.rope_scaling.original_max_position_embeddings=32"
TWO_DGX = "experiment.systems=[dgx_a100, dgx_h100]"
LONG = "experiment.scenarios={s: {batch_size: 2, prompt_len: 1024, output_len: 6}}"
PP2 = ("systems.dgx_a100.parallelism.pp=2", "systems.dgx_a100.devices.gpu.count=16")  # two pipeline stages

# field -> Alt(value, extra --set for both runs, coupled changes): where the automatic value is not
# legal, not reachable in the base (a threshold, a branch of another setting), or not automatic
ALTERNATIVE = {
    # experiment
    "ExperimentSpec.systems": Alt(["dgx_a100", "dgx_h100"]),
    "ExperimentSpec.models": Alt(["llama2-7b", "mistral-7b"]),
    "ExperimentSpec.scenarios": Alt(
        {
            "s": {"batch_size": 2, "prompt_len": 64, "output_len": 6},
            "t": {"batch_size": 1, "prompt_len": 32, "output_len": 6},
        }
    ),
    "ExperimentSpec.baseline": Alt("dgx_h100", extra=("experiment.systems=[dgx_a100, dgx_h100]",)),
    "ExperimentSpec.seed": Alt(1, extra=(POLICY + "=h2o",)),
    # model
    "ModelSpec.activation": Alt("gelu"),
    "ModelSpec.num_heads": Alt(64),
    "ModelSpec.intermediate_size": Alt(22016),
    "MoESpec.expert_intermediate_size": Alt(2816),
    "ModelSpec.layer_pattern": Alt(["global", "local"], extra=("models.llama2-7b.sliding_window=16",)),
    "ModelSpec.sliding_window": Alt(
        16, extra=("models.llama2-7b.sliding_window=32", "models.llama2-7b.layer_pattern=[local]")
    ),
    "ModelSpec.max_position_embeddings": Alt(32, extra=("scenarios.s.beyond_max_position=allow",)),
    "Scenario.beyond_max_position": Alt(
        "refuse", extra=("scenarios.s.beyond_max_position=allow", "models.llama2-7b.max_position_embeddings=32")
    ),
    "RopeScalingSpec.type": Alt("linear", extra=(ROPE_ORIG,)),
    "RopeScalingSpec.factor": Alt(60.0, extra=(ROPE_ORIG,)),
    "RopeScalingSpec.original_max_position_embeddings": Alt(16),
    # scenario
    "Scenario.reliability": Alt({"tiers": {"cxl": {"refresh_ms": {"low": 20000}}}}),
    "LengthDistribution.low": Alt(60),
    "LengthDistribution.high": Alt(70),
    # system
    "DevicePoolSpec.hardware": Alt("h100_sxm", extra=(TWO_DGX,)),  # hardware of the experiment's systems
    "DevicePoolSpec.count": Alt(4, also=(("..parallelism.tp", 4),)),
    "LinkSpec.hardware": Alt("nvlink4", extra=(TWO_DGX,)),
    # the ring formula's fields (nvlink3 runs NCCL's tuner by default) and the custom all-reduce's
    "LinkSpec.latency_us": Alt(8.4, extra=("hardware.nvlink3.allreduce=ring",)),
    "LinkSpec.efficiency": Alt(0.5, extra=("hardware.nvlink3.allreduce=ring",)),
    "CustomAllReduceSpec.max_bytes": Alt(1.0, extra=("hardware.nvlink3.allreduce=custom",)),
    "CustomAllReduceSpec.sync_us": Alt(7.5, extra=("hardware.nvlink3.allreduce=custom",)),
    "NCCLSpec.nvls": Alt({"base_us": 25.0, "bus_efficiency": 0.61}),  # NVLS on dgx_a100's switch: prefill
    "SystemSpec.software": Alt("vllm"),  # a preset's own fields: tests/test_stack_overheads.py
    "ModelSpec.num_kv_heads": Alt(8),
    "mapper.offload.topk_fraction": Alt(0.5),
    "SpeculativeSpec.draft_model": Alt("gpt2-large"),
    "mapper.ianus.placement": Alt("compute"),
    "mapper.ianus.draft_placement": Alt("pim"),  # refused without a speculative scenario
    "mapper.cxl_pnm.tp_vector_ops": Alt("replicated"),  # cxl_pnm base: tp 8, softmax/RoPE of all heads per device
    "CompressionSpec.engine": Alt("none"),  # one engine preset: another name is refused
    "CompressionSpec.ratio": Alt(0.5),  # measured -> a number
    "CompressionSpec.kv_ratio": Alt(0.5),  # null (the weights' ratio) -> a number for the KV alone
    "SystolicSpec.sram_mb": Alt(0.01),  # below the small base's activations: re-read per column pass
    "LinkSpec.connects": Alt(["gpu", "pim"]),
    "ParallelismSpec.tp": Alt(4, also=((".devices.gpu.count", 4),)),
    "ParallelismSpec.pp": Alt(2, also=((".devices.gpu.count", 16),)),
    "ParallelismSpec.replicas": Alt(2, also=((".devices.gpu.count", 16),)),
    "ParallelismSpec.layers_per_stage": Alt([1, 2], extra=PP2 + ("models.llama2-7b.num_layers=3",)),
    "ParallelismSpec.stages_per_device": Alt(2, extra=PP2, also=((".devices.gpu.count", 8),)),
    "ParallelismSpec.microbatches": Alt(1, extra=PP2),
    "ParallelismSpec.pp_link": Alt(
        "nv4",
        extra=PP2
        + (
            TWO_DGX,
            "systems.dgx_a100.links={nvlink: {hardware: nvlink3, "
            "connects: [gpu, gpu]}, nv4: {hardware: nvlink4, connects: [gpu, gpu]}}",
        ),
    ),
    "MapperSpec.policy": Alt("tiered", also=(("options", {}),)),
    "mapper.attacc.subbatches": Alt(3, extra=("systems.attacc.mapper.options.pipeline=true",)),
    # the list's halves (request 0 | 1) instead of each channel's (the longest first, on channel 0 | the other)
    "mapper.neupims.subbatch_split": Alt(
        "list", extra=("experiment.scenarios={s: {batch_size: 2, context_lens: [64, 1000], output_len: 6}}",)
    ),
    # GPU
    "GPUSpec.attn_compute_eta_unfused": Alt(0.9, extra=(GPU + ".software_stack=eager",)),
    "GPUSpec.attn_mem_eta_unfused": Alt(0.9, extra=(GPU + ".software_stack=eager",)),
    "GPUSpec.eager_elementwise_overhead_us": Alt(60.0, extra=(GPU + ".software_stack=eager",)),
    "GPUSpec.eager_matmul_overhead_us": Alt(30.0, extra=(GPU + ".software_stack=eager",)),
    "GPUSpec.eager_softmax_overhead_us": Alt(20.0, extra=(GPU + ".software_stack=eager",)),
    "GPUSpec.max_split_k": Alt(1),
    "GPUSpec.peak_fp8_tflops": Alt(1000.0, extra=("scenarios.s.weight_dtype=fp8", "scenarios.s.act_dtype=fp8")),
    "GPUSpec.tiles": Alt([[64, 64]]),
    "GPUSpec.tdp_w": Alt(200.0),  # the board cap binds only below the draw (x1.5 is never reached)
    # PIM / DRAM
    "PIMSpec.dram": Alt("hbm3_5200_pim_npc"),
    # refresh falls inside a long kernel only: a long context on one item per channel (a searched split is short)
    "PIMSpec.refresh_interval_ms": Alt(8.0, extra=(LONG, "hardware.attacc_hbm3_pim_5stack.channels_per_item=1")),
    "PUParams.macs_per_command": Alt(8),
    "PUParams.tflops": Alt(0.01),
    # a split item's slices fit one 2 KB buffer fill: the GB size matters for whole items (one per channel)
    "PUParams.gb_bytes": Alt(32, extra=("hardware.cxl_aim_device.channels_per_item=1",)),
    "MapperSpec.attention_on": Alt(None),  # off: attention back on the GPUs (gpu_only)
    # paged KV blocks start new rows only where an item's per-bank slice spans several blocks: with the searched
    # split the base's short contexts leave one block per bank; one item per channel (AttAcc's layout) shows it
    "PIMSpec.kv_block_tokens": Alt(1, extra=("hardware.attacc_hbm3_pim_5stack.channels_per_item=1",)),
    "PIMSpec.refresh": Alt("pb"),  # on the searched split (16 channels per item pulls in per-bank rounds)
    "PIMSpec.channels_per_item": Alt(1),  # the AttAcc presets search (auto); 1 = AttAcc's one head per channel
    "PIMSpec.partition": Alt("attacc_bg"),  # auto (the next choice) picks attacc_bank, the preset's own
    "PIMTiming.row_cmd_cycles": Alt(200),
    "PIMTiming.mode_switch_cycles": Alt(100),  # a short switch hides behind the preceding PREA
    # G_ACT spacing: visible once the PIM time is not hidden behind the NPU's in the sub-batch pipeline
    "PIMTiming.actbg_faw_acts": Alt(1, extra=("systems.neupims.mapper.options.subbatches=1",)),
    "PIMSpec.channel_assignment": Alt("round_robin"),  # refused for isa attacc; isa newton: test_neupims_faithful
    "PIMSpec.dram_overrides": Alt({"pim": {"nCCDAB": 4}}),
    "DRAMSpec.default_mapping": Alt("RoBaRaCoBgPcCh"),
    "Organisation.channels": Alt(32),
    "Organisation.pseudo_channels": Alt(4, also=(("channel_width_bits", 128),)),
    "Organisation.ranks": Alt(4),
    "Organisation.bank_groups": Alt(8),
    "Organisation.banks_per_group": Alt(8),
    "Organisation.rows": Alt(32768),
    "Organisation.columns": Alt(64),
    "Organisation.burst_bytes": Alt(64, also=((".timing.nBL", 4),)),
    "Organisation.channel_width_bits": Alt(128, also=(("burst_bytes", 64),)),
    "Organisation.data_rate_mtps": Alt(6400),  # inconsistent with tck_ns: refused
    "Organisation.tck_ns": Alt(0.625, also=(("data_rate_mtps", 6400),)),
    "Timing.nBL": Alt(4, also=((".org.burst_bytes", 64),)),
    "Timing.nRAS": Alt(50, also=(("nRC", 69),)),  # nRC >= nRAS + nRP: with nRC = the sum, nRC binds
    "Timing.nRP": Alt(15),
    "Timing.nFAW": Alt(200),
    "Timing.nRTP": Alt(40),
    "Timing.nRTW": Alt(30),
    "Timing.nWTR_S": Alt(40, also=(("nWTR_L", 40),)),
    "Timing.nREFIpb": Alt(300, extra=PB),
    "Timing.nRFCpb": Alt(400, extra=PB),
    "Timing.nRREFD": Alt(40, extra=PB),  # all-bank PIM rows pull in per-bank refresh rounds (scope_refresh)
    # applied by the controller presets with device rules (hwmodels/dram/rules.py: the default ramulator2), not by
    # "ideal" / "dramsim3"
    "Timing.nCCDR": Alt(8),
    "Timing.act_cmd_cycles": Alt(4),
    "DRAMSpec.controller": Alt("ideal"),
    # controller_rules: a value other than the default preset's (ramulator2, rules.py PRESETS); the dram base runs a
    # request stream (open page) and a PIM command program: fields either of them does not read are refused
    "RuleOverrides.act_scope": Alt("rank"),
    "RuleOverrides.turnaround_scope": Alt("rank"),
    "RuleOverrides.queue_entries": Alt(8),
    "RuleOverrides.queue_scope": Alt("pseudo_channel"),
    "RuleOverrides.device_rules": Alt(False),
    "RuleOverrides.closed_cap": Alt(1),
    "RuleOverrides.write_queue_entries": Alt(8),
    "RuleOverrides.wr_low_watermark": Alt(0.5),
    "RuleOverrides.wr_high_watermark": Alt(0.5),
    "RuleOverrides.refresh_stagger": Alt(True),
    "RuleOverrides.cmd_queue_entries": Alt(8),
    "RuleOverrides.cmd_queue_scope": Alt("rank"),
    "RuleOverrides.pre_holdback": Alt(True),
    "RuleOverrides.refresh_waits_active": Alt(False),
    # applied by the dramsim3 preset's two-level queue scheduler (hwmodels/dram/sched_cmdqueue.py)
    "Timing.nRTRS": Alt(6, extra=("hardware.hbm3_5200_pim.controller=dramsim3",)),
    "Timing.nPPD": Alt(8, extra=("hardware.hbm3_5200_pim.controller=dramsim3",)),
    "Energy.refpb_pj": Alt(5000.0, extra=PB),
    "IDD.idd5pb_ma": Alt(300.0, extra=PB),
    # reliability (KV in the cxl tier on cxl_pnm)
    "AccuracySlo.max_rel_attention_error": Alt(1e-12),  # a threshold: crosses the run's error
    "ReliabilitySpec.role_tiers": Alt({"pnm": "hbm", "gpu": "hbm"}),
    "ErrorModelSpec.retention_anchor_s": Alt([0.5, 10.0, 20.0], extra=RELAXED),
    "ErrorModelSpec.retention_anchor_ber": Alt([3.0e-7, 1.0e-5, 1.0e-4], extra=RELAXED),
    "ErrorModelSpec.retention_ref_temp_c": Alt(35.0, extra=RELAXED),
    "ErrorModelSpec.fault_exposure_h": Alt(10.0, extra=(REL + ".tiers.cxl.errors.fault_device_fit=1000",)),
    "ReliabilitySpec.temperature_c": Alt(68.0, extra=RELAXED),
    "ReliabilitySpec.quant_group": Alt(64, extra=(REL + ".kv_format=int4",)),
    "ReliabilitySpec.refresh_interval_ms": Alt(1000.0, extra=(REL + ".tiers.cxl.refresh_ms={}",)),
    "TierSchema.ecc_options": Alt(["secded"]),
    "TierSchema.capacity_gb": Alt(1.0e-6),  # a limit: binds only when below the KV
    "TierSchema.refresh_options_ms": Alt([64.0, 1000.0]),
    # serving
    "TraceSpec.file": Alt(
        str(DATA / "noop_requests.csv"), extra=(SV + ".kv.prefix_caching=true",)
    ),  # base: the prefixed file
    "TraceSpec.prefix_tokens": Alt(32, extra=(SV + ".kv.prefix_caching=true",)),  # whole blocks (base: 16)
    "ServingSpec.confidence": Alt(0.5, extra=(SV + ".replications=3",)),
    "TraceSpec.cv": Alt(3.0, extra=(SV + ".trace.arrival=gamma",)),
    "TraceSpec.arrival": Alt("constant"),
    "LengthDist.low": Alt(60),
    "LengthDist.high": Alt(70),
    "PrefixSpec.num_prefixes": Alt(1),
    "SchedulerSpec.max_batch": Alt(2),
    "SchedulerSpec.max_tokens_per_iter": Alt(48),
    "SchedulerSpec.chunked_prefill": Alt(
        False, extra=(SV + ".scheduler.max_tokens_per_iter=48", SV + ".trace.prompt={dist: fixed, mean: 40}")
    ),
    "SchedulerSpec.preemption": Alt("swap", extra=PRESSURE),
    "SchedulerSpec.swap_link": Alt("pcie4_x16", extra=PRESSURE + (SV + ".scheduler.preemption=swap",)),
    "KVSpec.locality_dram": Alt("hbm3_6400"),
    "KVSpec.reserve_tokens": Alt(200, extra=(SV + ".kv.layout=contiguous",)),
    "KVPolicySpec.sink_tokens": Alt(8, extra=(POLICY + "=streaming", SV + ".kv.policy.window_tokens=16")),
    "KVPolicySpec.window_tokens": Alt(8, extra=(POLICY + "=streaming",)),
    "KVPolicySpec.heavy_tokens": Alt(8, extra=(POLICY + "=h2o", SV + ".kv.policy.recent_tokens=16")),
    "KVPolicySpec.recent_tokens": Alt(8, extra=(POLICY + "=h2o", SV + ".kv.policy.heavy_tokens=16")),
    "KVPolicySpec.budget_tokens": Alt(40, extra=(POLICY + "=snapkv", SV + ".kv.policy.observation_tokens=8")),
    "KVPolicySpec.observation_tokens": Alt(16, extra=(POLICY + "=snapkv", SV + ".kv.policy.budget_tokens=32")),
    "KVPolicySpec.page_tokens": Alt(4, extra=(POLICY + "=quest", SV + ".kv.policy.budget_tokens=16")),
    "KVPolicySpec.dense_layers": Alt(1, extra=(POLICY + "=quest", SV + ".kv.policy.budget_tokens=16")),
    # an accuracy knob: exact where costs are linear in the context (GPU decode), so on AttAcc (row
    # quantised), with contexts where the grids differ (step 32 vs 64 at 128-256 tokens)
    "MemoSpec.relative_bucket": Alt(0.5, extra=(SV + ".trace.prompt={dist: fixed, mean: 150}",)),
    "MemoSpec.batch_relative_bucket": Alt(0.5, extra=(SV + ".trace.num_requests=24",)),
    "ServingSpec.accuracy_proxy": Alt(False, extra=(POLICY + "=h2o",)),
    "ServingSpec.colocated": Alt(True),
    "DisaggSpec.prefill": Alt("attacc"),
    "DisaggSpec.decode": Alt("a100_hbm3_x8"),
    "DisaggSpec.link": Alt("nvlink4"),
    "ServingSpec.kv_pool": Alt(None),
    "KVPoolServingSpec.hardware": Alt("cxl_pool_pond_mhd"),
    "KVPoolServingSpec.systems": Alt(["mooncake_h100_x8_nopool"]),
    "KVPoolSpec.capacity_gb": Alt(1.0e-6),  # a limit: binds only when below the prefixes' KV
    "KVPoolSpec.hosts": Alt(2),  # a limit: refused below the instances
    "KVPoolSpec.pool_bandwidth_gbps": Alt(100.0),  # binds below hosts x host_link_gbps
    "FlashSpec.capacity_gb": Alt(1.0e-6),  # a limit: binds only when below the KV
    "FlashSpec.dies_per_channel": Alt(1),  # one die: sensing and bus no longer overlap
    "FlashSpec.planes_per_die": Alt(1),  # 8 pages per wave instead of 32: more waves
    # wear and retention act through read retries once the ECC's tail binds (BCH at RBER ~2-3e-3)
    "FlashSpec.pe_cycles": Alt(4500.0, extra=("hardware.nand_tlc_ssd.ecc=bch_nand",)),
    "FlashSpec.retention_days": Alt(3650.0, extra=("hardware.nand_tlc_ssd.ecc=bch_nand",)),
    "FlashSpec.ecc": Alt("bch_nand"),
}


def _mapper_options(cur, parent):
    policy = parent.get("policy", "gpu_only")
    return [(f"mapper.{policy}", module_options(policy))]


HOOKS = {
    ("DRAMSpec", "controller_rules"): lambda cur, parent: RuleOverrides,  # single rule fields (rules.py)
    ("ExperimentSpec", "reliability"): lambda cur, parent: ReliabilitySpec if cur else None,
    ("ExperimentSpec", "serving"): lambda cur, parent: ServingSpec if cur else None,
    ("MapperSpec", "options"): _mapper_options,
}

# schemas of the DRAM spec: tested on the "dram" base (the DRAM engine on a mixed request stream)
DRAM_SCHEMAS = {"DRAMSpec", "Organisation", "Timing", "Energy", "IDD", "RuleOverrides"}


def tree_leaves(tree):
    """Leaves (and container markers) of every section of a loaded config tree."""
    yield from walk(ExperimentSpec, tree.experiment, ("experiment",), HOOKS)
    for n, d in tree.models.items():
        yield from walk(ModelSpec, d, ("models", n), HOOKS)
    for n, d in tree.scenarios.items():
        yield from walk(Scenario, d, ("scenarios", n), HOOKS)
    for n, d in tree.systems.items():
        yield from walk(SystemSpec, d, ("systems", n), HOOKS)
    for n, d in tree.hardware.items():
        yield from walk(registry.schema_for(d["kind"]), d, ("hardware", n), HOOKS)


def universe() -> set:
    """Every field of every config schema (class name.field), policy options included."""
    roots = [ExperimentSpec, ModelSpec, Scenario, SystemSpec, ReliabilitySpec, ServingSpec]
    roots += [registry.schema_for(k) for k in registry.kinds()]
    classes = set()
    for r in roots:
        reachable(r, classes)
    out = {f"{c.__name__}.{f}" for c in classes for f in c.model_fields}
    out |= {f"mapper.{p}.{o}" for p in policies() for o in module_options(p)}
    return out


@functools.lru_cache(maxsize=None)
def cases() -> tuple:
    """(leaf, base) per field: the base FIELD_BASE names, else the first one reaching it."""
    chosen, covered = {}, set()
    for base, (kind, exp, sets, dram) in BASES.items():
        ex, _ = load(kind, exp, list(sets))
        for item in tree_leaves(ex.tree):
            if not isinstance(item, Leaf):
                covered.add(f"{item[1]}.{item[2]}")
                continue
            n = item.name
            family_ok = (BASES[base][0] == "dram") == (item.schema in DRAM_SCHEMAS)
            if n in COSMETIC or not family_ok and FIELD_BASE.get(n) != base:
                covered.add(n)
                continue
            want = FIELD_BASE.get(n)
            if (want is None and n not in chosen) or want == base:
                chosen.setdefault(n, (item, base))
            covered.add(n)
    return tuple(sorted(chosen.values(), key=lambda c: c[0].name)), frozenset(covered)


@functools.lru_cache(maxsize=None)
def base_doc(base: str, extra: tuple):
    kind, exp, sets, dram = BASES[base]
    return run_doc(kind, exp, list(sets) + list(extra), dram)


REFUSED: dict = {}  # field -> the ConfigError that refused its change (reported by -rA runs)


def change(leaf: Leaf) -> Alt:
    return ALTERNATIVE.get(leaf.name) or Alt(alternative(leaf))


def _relative(path: tuple, rel: str) -> tuple:
    """Path of a coupled field: ``rel`` relative to the leaf's parent; each leading '.' goes one up."""
    up = len(rel) - len(rel.lstrip("."))
    return path[: len(path) - 1 - up] + tuple(rel.lstrip(".").split("."))


@pytest.fixture(scope="module", autouse=True)
def _yaml_memo():
    with cached_yaml():
        yield


def test_every_field_is_walked():
    """Every field of every schema is reached by some base (else: add a base or FIELD_BASE entry)."""
    _, covered = cases()
    missing = sorted(universe() - covered)
    assert not missing, f"fields no base experiment reaches: {missing}"


# Fields of configs that no run reads, each read (and tested) by the one command that does: a
# hardware config's ranges: block (attnsim.hwmodels.registry.RangeSpec) is set aside by every run and
# read by attnsim sensitivity only.
ELSEWHERE = {
    "RangeSpec.low": "tests/test_sensitivity.py::test_oat_swings (the OAT point at the low end)",
    "RangeSpec.high": "tests/test_sensitivity.py::test_oat_swings (the OAT point at the high end)",
    "RangeSpec.source": "tests/test_sensitivity.py::test_cli_writes_json_and_tornado (in sensitivity.json)",
    # the evidence: block (registry.EvidenceSpec) is set aside by every run too; the verdict flips read it
    "EvidenceSpec.tag": "tests/test_verdict_flips.py::test_evidence_tags_ranges_are_assumed_and_retagging_excludes "
    "(a ranged field tagged measured is not varied)",
    "EvidenceSpec.source": "tests/test_verdict_flips.py::test_evidence_tags_ranges_are_assumed_and_retagging_excludes "
    "(an assumed field's source in the verdict_flips rows)",
}


def test_elsewhere_fields_listed():
    """Every field of the schemas outside the run walk is in ELSEWHERE with the test that shows it acts."""
    from attnsim.hwmodels.registry import EvidenceSpec, RangeSpec

    assert {f"{c.__name__}.{f}" for c in (RangeSpec, EvidenceSpec) for f in c.model_fields} == set(ELSEWHERE)
    assert not set(ELSEWHERE) & universe()


def test_tables_name_real_fields():
    """COSMETIC, FIELD_BASE and ALTERNATIVE name existing fields (no stale entries)."""
    fields = universe()
    for table in (COSMETIC, FIELD_BASE, ALTERNATIVE):
        assert not set(table) - fields, sorted(set(table) - fields)
    assert not set(FIELD_BASE.values()) - set(BASES)


def test_bases_run():
    for base in BASES:
        docs = base_doc(base, ())
        runs = docs if isinstance(docs, list) else [docs]
        assert runs and all(d.get("status", "ok") == "ok" for d in runs), (base, [d.get("error") for d in runs])


@pytest.mark.parametrize("leaf,base", cases()[0], ids=lambda x: x.name if isinstance(x, Leaf) else x)
def test_field_changes_result(leaf, base):
    kind, exp, sets, dram = BASES[base]
    try:
        alt = change(leaf)
    except NoAlternative as e:
        pytest.fail(f"{leaf.name}: {e}; give one in ALTERNATIVE (or list it in COSMETIC if it only names something)")
    before = base_doc(base, alt.extra)
    assert all(d.get("status", "ok") == "ok" for d in (before if isinstance(before, list) else [before])), (
        f"{base} with {alt.extra} does not run: {before}"
    )
    arg = set_arg(leaf.path, alt.value)
    coupled = [set_arg(_relative(leaf.path, rel), v) for rel, v in alt.also]
    try:
        after = run_doc(kind, exp, list(sets) + list(alt.extra) + [arg] + coupled, dram)
    except ConfigError as e:  # a refusal counts when it names the field
        assert leaf.field in (e.key or "").split(".") or re.search(rf"\b{re.escape(leaf.field)}\b", e.message), (
            f"--set {arg} refused for another reason: {e}"
        )
        REFUSED[leaf.name] = str(e)
        return
    assert after != before, f"--set {arg} (was {leaf.value!r}) leaves the {base} result unchanged"


@pytest.mark.parametrize(
    "item,key",
    [
        ("experiment.baseline=h100_x1", "baseline"),
        (
            "experiment.reliability={accuracy_slo: {max_rel_attention_error: 0.05}, tiers: {t: {read_gbps: 1, "
            "read_pj_per_byte: 1, refresh_mw_per_gb: 1, capacity_gb: 1}}}",
            "reliability",
        ),
        ("experiment.scenarios.chat.batch_size=4", "scenarios.chat.batch_size"),
        ("experiment.scenarios.chat.context_lens=[10]", "scenarios.chat.context_lens"),
        ("experiment.scenarios.chat.reliability={kv_format: int4}", "scenarios.chat.reliability"),
    ],
)
def test_serve_refuses_static_batch_settings(item, key):
    """Settings only ``attnsim run`` reads are refused by ``attnsim serve`` (not ignored), and
    ``attnsim run`` refuses a serving section."""
    kind, exp, sets, _ = BASES["serve"]
    with pytest.raises(ConfigError) as e:
        load(kind, exp, list(sets) + [item])
    assert e.value.key == key


def test_run_refuses_serving_section(capsys):
    from attnsim.cli import main

    assert main(["run", "serve_paging", "--no-write"]) == 2
    assert "serve_paging.yaml: serving: expected no serving section" in capsys.readouterr().err
