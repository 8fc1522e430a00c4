"""The bad-input cases: one CLI invocation each, on files written into an empty folder.

Every case must end with exit status 2 and exactly one stderr line ``error: ...`` that contains each
string of ``names`` (the file and the key or line), with no file written or changed. ``files`` maps a
path (relative to the case folder) to its content: ``str`` (UTF-8 text), ``bytes``, :data:`DIR` (an
empty folder) or a :class:`Store` (a copy of a valid store, then mutated). Every case folder also
holds :data:`COMMON` (a tiny experiment and its local system/hardware/model files), unless
``files`` replaces one of them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from attnsim.core.config import CONFIG_ROOT

DIR = object()  # "make an empty folder here"
DELETE = object()  # mut(): remove the key
HUGE = 2**63  # one past int64


@dataclass(frozen=True)
class Store:
    """A copy of a valid store (``kind``: ``results`` from ``attnsim run``, ``sweep`` from ``attnsim sweep``),
    then ``mutate(path)`` applied to it."""

    kind: str
    mutate: Optional[Callable[[Path], None]] = None


@dataclass(frozen=True)
class Case:
    surface: str
    name: str
    argv: tuple
    files: dict = field(default_factory=dict)
    names: tuple = ()  # strings the error line must contain; a tuple item = any one of its strings

    @property
    def id(self) -> str:
        return f"{self.surface}-{self.name}"


def dump(d: Any) -> str:
    return yaml.safe_dump(d, sort_keys=False)


def mut(base: dict, *pairs) -> dict:
    """Deep copy of ``base`` with ``("a.b.c", value)`` pairs set (``DELETE`` removes the key)."""
    d = copy.deepcopy(base)
    for path, value in pairs:
        node = d
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if value is DELETE:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return d


def builtin(kind: str, name: str) -> str:
    return (CONFIG_ROOT / kind / f"{name}.yaml").read_text()


# ---------------------------------------------------------------- common files

EXP = {
    "name": "tiny",
    "systems": ["h100_x1"],
    "models": ["llama2-7b"],
    "scenarios": {"chat": {"batch_size": 1, "prompt_len": 128, "output_len": 4}},
    "generation": {"mode": "sampled", "samples": 2},
}
SYS = {
    "name": "sys1",
    "devices": {"gpu": {"hardware": "h100_sxm", "count": 2}},
    "links": {"nvlink": {"hardware": "nvlink4", "connects": ["gpu", "gpu"]}},
    "parallelism": {"tp": 2},
    "mapper": {"policy": "gpu_only"},
}
HW = yaml.safe_load(builtin("hardware", "h100_sxm"))
LINK = yaml.safe_load(builtin("hardware", "nvlink4"))
MODEL = yaml.safe_load(builtin("models", "llama2-7b"))
HF = json.loads((Path(__file__).resolve().parent.parent / "data" / "hf_configs" / "Llama-2-7b-hf.json").read_text())
EXP_SYS = mut(EXP, ("systems", ["sys.yaml"]))
EXP_MODEL = mut(EXP, ("models", ["model.yaml"]))
SYS_HW = mut(SYS, ("devices.gpu.hardware", "hw.yaml"))
SYS_LINK = mut(SYS, ("links.nvlink.hardware", "link.yaml"))
EXP_HF = mut(EXP, ("models", ["hf/config.json"]))
EXP_SERVE = mut(EXP, ("scenarios.chat.batch_size", DELETE))  # attnsim serve refuses static-batch settings
SERVE = mut(EXP_SERVE, ("serving", {"trace": {"num_requests": 4, "rate_per_s": 2, "seed": 1}}))
SERVE_FILE = mut(EXP_SERVE, ("serving", {"trace": {"file": "req.csv"}}))
SERVE_JSONL = mut(EXP_SERVE, ("serving", {"trace": {"file": "req.jsonl"}}))
REQ_OK = "arrival_s,prompt_tokens,output_tokens\n0.0,128,4\n0.5,64,4\n"
SWEEP = {"name": "sw", "base": "exp.yaml", "parameters": [{"grid": {"scenario.batch_size": [1, 2]}}]}
DRAM = yaml.safe_load(builtin("hardware", "hbm3_6400"))
ASM_OK = "ACTAB 0, 0\nMACAB 0, 0, 32\nPREA 0\n"

COMMON = {
    "exp.yaml": dump(EXP),
    "sys.yaml": dump(SYS),
    "hw.yaml": dump(HW),
    "link.yaml": dump(LINK),
    "model.yaml": dump(MODEL),
    "sweep.yaml": dump(SWEEP),
    "serve.yaml": dump(SERVE),
    "p.s": ASM_OK,
}

RUN = ("run", "exp.yaml", "--no-figures")
NON_UTF8 = b"name: tiny\ndescription: caf\xe9 \xff\xfe\n"

CASES: list[Case] = []


def case(surface: str, name: str, argv, files=None, names=()) -> None:
    CASES.append(Case(surface, name, tuple(argv), dict(files or {}), tuple(names)))


# ---------------------------------------------------------------- experiment YAML (attnsim run)


def exp_case(name, data, names, argv=RUN):
    case("experiment", name, argv, {"exp.yaml": data if isinstance(data, (str, bytes)) else dump(data)}, names)


exp_case("empty-file", "", ("exp.yaml", "name"))
exp_case("top-level-list", "- a\n- b\n", ("exp.yaml",))
exp_case("top-level-scalar", "42\n", ("exp.yaml",))
exp_case("yaml-syntax", "name: tiny\nsystems: [h100_x1\n", ("exp.yaml", "line"))
exp_case("yaml-tab-indent", "name: tiny\nscenarios:\n\tchat: {}\n", ("exp.yaml", "line"))
exp_case("yaml-python-tag", "name: !!python/object/apply:os.system ['true']\n", ("exp.yaml", "line"))
exp_case("non-utf8", NON_UTF8, ("exp.yaml",))
exp_case("utf16-bom", "name: tiny\n".encode("utf-16"), ("exp.yaml",))
exp_case("nul-bytes", b"name: ti\x00ny\n", ("exp.yaml",))
case("experiment", "is-a-directory", RUN, {"exp.yaml": DIR}, ("exp.yaml",))
case("experiment", "missing-file", ("run", "nope.yaml"), {}, ("nope.yaml",))
case("experiment", "unknown-builtin-name", ("run", "no_such_experiment"), {}, ("no_such_experiment",))
exp_case("unknown-top-key", mut(EXP, ("sytems", ["h100_x1"])), ("exp.yaml", "sytems"))
exp_case("missing-name", mut(EXP, ("name", DELETE)), ("exp.yaml", "name"))
exp_case("name-not-string", mut(EXP, ("name", [1, 2])), ("exp.yaml", "name"))
exp_case("name-traversal", mut(EXP, ("name", "../../x")), ("exp.yaml", "name"))
exp_case("name-absolute", mut(EXP, ("name", "/tmp/attnsim-abs/name")), ("exp.yaml", "name"))
exp_case("systems-string", mut(EXP, ("systems", "h100_x1")), ("exp.yaml", "systems"))
exp_case("systems-empty", mut(EXP, ("systems", [])), ("exp.yaml", "systems"))
exp_case("systems-unknown", mut(EXP, ("systems", ["no_such_system"])), ("exp.yaml", "systems"))
exp_case("systems-int", mut(EXP, ("systems", [3])), ("exp.yaml", "systems"))
exp_case("systems-traversal", mut(EXP, ("systems", ["../../x.yaml"])), ("exp.yaml", "systems"))
exp_case("models-unknown", mut(EXP, ("models", ["no_such_model"])), ("exp.yaml", "models"))
exp_case("models-empty", mut(EXP, ("models", [])), ("exp.yaml", "models"))
exp_case("models-duplicate", mut(EXP, ("models", ["llama2-7b", "llama2-7b"])), ("exp.yaml", "models"))
exp_case("baseline-unknown", mut(EXP, ("baseline", "dgx_a100")), ("exp.yaml", "baseline"))
exp_case("scenarios-empty", mut(EXP, ("scenarios", {})), ("exp.yaml", "scenarios"))
exp_case("scenarios-list", mut(EXP, ("scenarios", [1, 2])), ("exp.yaml", "scenarios"))
exp_case("scenario-unknown-key", mut(EXP, ("scenarios.chat.batch", 4)), ("exp.yaml", "scenarios.chat.batch"))
exp_case("batch-zero", mut(EXP, ("scenarios.chat.batch_size", 0)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-negative", mut(EXP, ("scenarios.chat.batch_size", -1)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-word", mut(EXP, ("scenarios.chat.batch_size", "two")), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-fraction", mut(EXP, ("scenarios.chat.batch_size", 1.5)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-bool", mut(EXP, ("scenarios.chat.batch_size", True)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-2p63", mut(EXP, ("scenarios.chat.batch_size", HUGE)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case("batch-1e9", mut(EXP, ("scenarios.chat.batch_size", 10**9)), ("exp.yaml", "scenarios.chat.batch_size"))
exp_case(
    "prompt-nan",
    "name: tiny\nsystems: [h100_x1]\nmodels: [llama2-7b]\nscenarios: {chat: {prompt_len: .nan}}\n",
    ("exp.yaml", "scenarios.chat.prompt_len"),
)
exp_case(
    "output-inf",
    "name: tiny\nsystems: [h100_x1]\nmodels: [llama2-7b]\nscenarios: {chat: {output_len: .inf}}\n",
    ("exp.yaml", "scenarios.chat.output_len"),
)
exp_case("prompt-over-max-positions", mut(EXP, ("scenarios.chat.prompt_len", 32768)), ("exp.yaml", "prompt_len"))
exp_case("kv-dtype-unknown", mut(EXP, ("scenarios.chat.kv_dtype", "fp7")), ("exp.yaml", "scenarios.chat.kv_dtype"))
exp_case(
    "context-lens-wrong-length",
    mut(EXP, ("scenarios.chat.context_lens", [128, 256])),
    ("exp.yaml", "scenarios.chat.context_lens"),
)
exp_case(
    "context-lens-dist-unknown",
    mut(EXP, ("scenarios.chat.context_lens", {"dist": "zipf", "mean": 5})),
    ("exp.yaml", "scenarios.chat.context_lens"),
)
exp_case(
    "context-lens-low-gt-high",
    mut(EXP, ("scenarios.chat.context_lens", {"dist": "uniform", "low": 9, "high": 2})),
    ("exp.yaml", "scenarios.chat.context_lens"),
)
exp_case(
    "context-lens-mean-1e30",
    mut(EXP, ("scenarios.chat.context_lens", {"dist": "normal", "mean": 1e30, "std": 1.0})),
    ("exp.yaml", "scenarios.chat.context_lens"),
)
exp_case("generation-mode-unknown", mut(EXP, ("generation.mode", "fast")), ("exp.yaml", "generation.mode"))
exp_case("generation-samples-one", mut(EXP, ("generation.samples", 1)), ("exp.yaml", "generation"))
exp_case("seed-word", mut(EXP, ("seed", "abc")), ("exp.yaml", "seed"))
exp_case("seed-2p64", mut(EXP, ("seed", 2**64)), ("exp.yaml", "seed"))
exp_case("description-list", mut(EXP, ("description", ["a"])), ("exp.yaml", "description"))
exp_case("reliability-unknown-key", mut(EXP, ("reliability", {"no_such_key": 1})), ("exp.yaml", "reliability"))
exp_case(
    "duplicate-scenario-key",
    "name: tiny\nsystems: [h100_x1]\nmodels: [llama2-7b]\n"
    "scenarios:\n  chat:\n    batch_size: 16\n    prompt_len: 128\n    batch_size: 1\n",
    ("exp.yaml", "batch_size"),
)
exp_case(
    "duplicate-top-key",
    "name: tiny\nsystems: [h100_x1]\nmodels: [llama2-7b]\nmodels: [llama2-13b]\nscenarios: {chat: {}}\n",
    ("exp.yaml", "models"),
)

# ---------------------------------------------------------------- system YAML (referenced by path)


def sys_case(name, data, names, exp=EXP_SYS):
    case(
        "system",
        name,
        RUN,
        {"exp.yaml": dump(exp), "sys.yaml": data if isinstance(data, (str, bytes)) else dump(data)},
        ("sys.yaml",) + tuple(names),
    )


sys_case("empty-file", "", ("name",))
sys_case("top-level-list", "- gpu\n", ())
sys_case("non-utf8", b"name: s\ndescription: \xff\xfe\n", ())
sys_case("yaml-syntax", "name: s\ndevices: {gpu: {hardware: h100_sxm\n", ("line",))
case("system", "is-a-directory", RUN, {"exp.yaml": dump(EXP_SYS), "sys.yaml": DIR}, ("sys.yaml",))
case("system", "missing-file", RUN, {"exp.yaml": dump(mut(EXP, ("systems", ["nope.yaml"])))}, ("nope.yaml",))
sys_case("unknown-top-key", mut(SYS, ("device", {})), ("device",))
sys_case("devices-missing", mut(SYS, ("devices", DELETE), ("links", DELETE)), ("devices",))
sys_case("devices-empty", mut(SYS, ("devices", {}), ("links", DELETE)), ("devices",))
sys_case("devices-list", mut(SYS, ("devices", ["h100_sxm"]), ("links", DELETE)), ("devices",))
sys_case("count-zero", mut(SYS, ("devices.gpu.count", 0)), ("devices.gpu.count",))
sys_case("count-negative", mut(SYS, ("devices.gpu.count", -2)), ("devices.gpu.count",))
sys_case("count-fraction", mut(SYS, ("devices.gpu.count", 1.5)), ("devices.gpu.count",))
sys_case("count-2p63", mut(SYS, ("devices.gpu.count", HUGE)), ("devices.gpu.count",))
sys_case("count-inf", "name: s\ndevices: {gpu: {hardware: h100_sxm, count: .inf}}\n", ("devices.gpu.count",))
sys_case("hardware-missing", mut(SYS, ("devices.gpu.hardware", DELETE)), ("devices.gpu.hardware",))
sys_case("hardware-unknown", mut(SYS, ("devices.gpu.hardware", "no_such_gpu")), ("devices.gpu.hardware",))
sys_case("hardware-path-missing", mut(SYS, ("devices.gpu.hardware", "nope_hw.yaml")), ("devices.gpu.hardware",))
sys_case("hardware-traversal", mut(SYS, ("devices.gpu.hardware", "../../../etc/passwd")), ("devices.gpu.hardware",))
sys_case("hardware-not-string", mut(SYS, ("devices.gpu.hardware", 5)), ("devices.gpu.hardware",))
sys_case("hardware-wrong-kind", mut(SYS, ("devices.gpu.hardware", "nvlink4")), ("gpu",))
sys_case("link-unknown-role", mut(SYS, ("links.nvlink.connects", ["gpu", "pim"])), ("links",))
sys_case("link-connects-three", mut(SYS, ("links.nvlink.connects", ["gpu", "gpu", "gpu"])), ("links.nvlink.connects",))
sys_case("link-connects-string", mut(SYS, ("links.nvlink.connects", "gpu")), ("links.nvlink.connects",))
sys_case("link-hardware-is-gpu", mut(SYS, ("links.nvlink.hardware", "h100_sxm")), ("nvlink",))
sys_case("tp-zero", mut(SYS, ("parallelism.tp", 0)), ("parallelism.tp",))
sys_case("tp-over-count", mut(SYS, ("parallelism.tp", 4)), (("parallelism", "devices.gpu.count"),))
sys_case(
    "tp-not-dividing",
    mut(SYS, ("devices.gpu.count", 3), ("parallelism.tp", 2)),
    (("parallelism", "devices.gpu.count"),),
)
sys_case("pp-count", mut(SYS, ("parallelism.pp", 2)), (("parallelism", "devices.gpu.count"),))
sys_case(
    "pp-over-layers",
    mut(SYS, ("parallelism.pp", 64), ("parallelism.tp", 1), ("devices.gpu.count", 64)),
    ("parallelism.pp",),
)
sys_case(
    "pp-layers-sum",
    mut(SYS, ("parallelism.pp", 2), ("parallelism.tp", 1), ("parallelism.layers_per_stage", [8, 8])),
    ("parallelism.layers_per_stage",),
)
sys_case(
    "pp-stages-per-device",
    mut(SYS, ("parallelism.pp", 2), ("parallelism.tp", 1), ("parallelism.stages_per_device", 3)),
    ("parallelism.stages_per_device",),
)
sys_case(
    "pp-link-unknown",
    mut(SYS, ("parallelism.pp", 2), ("parallelism.tp", 1), ("parallelism.pp_link", "nope")),
    ("parallelism.pp_link",),
)
sys_case("pp-link-without-pp", mut(SYS, ("parallelism.pp_link", "nvlink")), ("parallelism.pp_link",))
sys_case(
    "pp-microbatches-zero",
    mut(SYS, ("parallelism.pp", 2), ("parallelism.tp", 1), ("parallelism.microbatches", 0)),
    ("parallelism.microbatches",),
)
sys_case("replicas-zero", mut(SYS, ("parallelism.replicas", 0)), ("parallelism.replicas",))
sys_case("policy-unknown", mut(SYS, ("mapper.policy", "magic")), ("mapper.policy",))
sys_case("gpu-only-option-typo", mut(SYS, ("mapper.options", {"pipelin": True})), ("mapper.options",))
sys_case("mapper-options-list", mut(SYS, ("mapper.options", [1])), ("mapper.options",))
sys_case(
    "duplicate-key",
    "name: s\ndevices:\n  gpu: {hardware: h100_sxm, count: 2}\n  gpu: {hardware: h100_sxm, count: 1}\n",
    ("gpu",),
)
sys_case(
    "attacc-option-typo",
    mut(yaml.safe_load(builtin("systems", "attacc")), ("mapper.options.pipelinee", True)),
    ("mapper.options",),
)
sys_case(
    "attacc-pipeopt-with-subbatch-pipeline",
    mut(yaml.safe_load(builtin("systems", "attacc")), ("mapper.options", {"pipeline": True, "pipeopt": True})),
    ("mapper.options.pipeopt", "not used unless pipeline: false"),
)
sys_case(
    "attacc-ffopt-not-bool",
    mut(yaml.safe_load(builtin("systems", "attacc_opt")), ("mapper.options.ffopt", "yes")),
    ("mapper.options.ffopt", "expected true or false"),
)

# ---------------------------------------------------------------- hardware YAML (a GPU and a link)


def hw_case(name, data, names, file="hw.yaml", exp=EXP_SYS, sysd=None):
    sysd = sysd if sysd is not None else (SYS_HW if file == "hw.yaml" else SYS_LINK)
    case(
        "hardware",
        name,
        RUN,
        {"exp.yaml": dump(exp), "sys.yaml": dump(sysd), file: data if isinstance(data, (str, bytes)) else dump(data)},
        (file,) + tuple(names),
    )


def hw_text(key, raw):
    """The H100 hardware YAML with one value replaced by raw YAML text (for .inf / .nan)."""
    return dump(mut(HW, (key, DELETE))) + f"{key}: {raw}\n"


hw_case("empty-file", "", ("kind",))
hw_case("non-utf8", b"kind: gpu\nname: \xff\n", ())
hw_case("kind-missing", mut(HW, ("kind", DELETE)), ("kind",))
hw_case("kind-unknown", mut(HW, ("kind", "tpu")), ("kind",))
hw_case("unknown-key", mut(HW, ("peak_fp16_tflop", 1.0)), ("peak_fp16_tflop",))
hw_case("peak-negative", mut(HW, ("peak_fp16_tflops", -1)), ("peak_fp16_tflops",))
hw_case("peak-zero", mut(HW, ("peak_fp16_tflops", 0)), ("peak_fp16_tflops",))
hw_case("peak-word", mut(HW, ("peak_fp16_tflops", "fast")), ("peak_fp16_tflops",))
hw_case("peak-inf", hw_text("peak_fp16_tflops", ".inf"), ("peak_fp16_tflops",))
hw_case("bandwidth-inf", hw_text("hbm_bandwidth_gbps", ".inf"), ("hbm_bandwidth_gbps",))
hw_case("bandwidth-nan", hw_text("hbm_bandwidth_gbps", ".nan"), ("hbm_bandwidth_gbps",))
hw_case("capacity-nan", hw_text("hbm_capacity_gb", ".nan"), ("hbm_capacity_gb",))
hw_case("capacity-inf", hw_text("hbm_capacity_gb", ".inf"), ("hbm_capacity_gb",))
hw_case("kernel-overhead-inf", hw_text("kernel_overhead_us", ".inf"), ("kernel_overhead_us",))
hw_case("idle-power-negative", mut(HW, ("idle_power_w", -5)), ("idle_power_w",))
hw_case("idle-power-nan", hw_text("idle_power_w", ".nan"), ("idle_power_w",))
hw_case("num-sms-2p63", mut(HW, ("num_sms", HUGE)), ("num_sms",))
hw_case("clock-1e400", hw_text("clock_mhz", "1e400"), ("clock_mhz",))
hw_case("tiles-wrong-shape", mut(HW, ("tiles", [[256]])), ("tiles",))
hw_case("tiles-string", mut(HW, ("tiles", "256x128")), ("tiles",))
hw_case("software-stack-unknown", mut(HW, ("software_stack", "magic")), ("software_stack",))
hw_case("duplicate-key", dump(HW) + "tdp_w: 1\n", ("tdp_w",))
hw_case(
    "link-latency-inf",
    dump(mut(LINK, ("latency_us", DELETE))) + "latency_us: .inf\n",
    ("latency_us",),
    file="link.yaml",
)
hw_case("link-bandwidth-zero", mut(LINK, ("bandwidth_gbps", 0)), ("bandwidth_gbps",), file="link.yaml")
hw_case(
    "link-bandwidth-nan",
    dump(mut(LINK, ("bandwidth_gbps", DELETE))) + "bandwidth_gbps: .nan\n",
    ("bandwidth_gbps",),
    file="link.yaml",
)
hw_case("link-efficiency-over-one", mut(LINK, ("efficiency", 1.5)), ("efficiency",), file="link.yaml")
hw_case("link-unknown-key", mut(LINK, ("latency", 1.0)), ("latency",), file="link.yaml")

# ---------------------------------------------------------------- model YAML


def model_case(name, data, names):
    case(
        "model",
        name,
        RUN,
        {"exp.yaml": dump(EXP_MODEL), "model.yaml": data if isinstance(data, (str, bytes)) else dump(data)},
        ("model.yaml",) + tuple(names),
    )


model_case("empty-file", "", ("name",))
model_case("top-level-list", "- 1\n", ())
model_case("non-utf8", b"name: m\nsource: \xc3\x28\n", ())
model_case("missing-hidden-size", mut(MODEL, ("hidden_size", DELETE)), ("hidden_size",))
model_case("unknown-key", mut(MODEL, ("num_layer", 32)), ("num_layer",))
model_case("layers-zero", mut(MODEL, ("num_layers", 0)), ("num_layers",))
model_case("layers-negative", mut(MODEL, ("num_layers", -1)), ("num_layers",))
model_case("layers-fraction", mut(MODEL, ("num_layers", 1.5)), ("num_layers",))
model_case("layers-string", mut(MODEL, ("num_layers", "thirty")), ("num_layers",))
model_case("layers-2p63", mut(MODEL, ("num_layers", HUGE)), ("num_layers",))
model_case("layers-1e9", mut(MODEL, ("num_layers", 10**9)), ("num_layers",))
model_case("layers-nan", dump(mut(MODEL, ("num_layers", DELETE))) + "num_layers: .nan\n", ("num_layers",))
model_case("heads-zero", mut(MODEL, ("num_heads", 0)), ("num_heads",))
model_case("kv-heads-not-dividing", mut(MODEL, ("num_kv_heads", 5)), ("num_kv_heads",))
model_case("head-dim-zero", mut(MODEL, ("head_dim", 0)), ("head_dim",))
model_case("vocab-inf", dump(mut(MODEL, ("vocab_size", DELETE))) + "vocab_size: .inf\n", ("vocab_size",))
model_case("norm-unknown", mut(MODEL, ("norm", "batchnorm")), ("norm",))
model_case("position-unknown", mut(MODEL, ("position", "spiral")), ("position",))
model_case("dtype-unknown", mut(MODEL, ("dtype", "fp5")), ("dtype",))
model_case("layer-pattern-unknown", mut(MODEL, ("layer_pattern", ["global", "sparse"])), ("layer_pattern",))
model_case(
    "moe-topk-over-experts",
    mut(MODEL, ("moe", {"num_experts": 2, "experts_per_token": 4, "expert_intermediate_size": 128})),
    ("moe",),
)
model_case("duplicate-key", dump(MODEL) + "num_layers: 1\n", ("num_layers",))

# ---------------------------------------------------------------- --set


def set_case(name, sets, names, base=RUN):
    argv = list(base)
    for s in sets:
        argv += ["--set", s]
    case("set", name, argv, {}, ("--set",) + tuple(names))


set_case("no-equals", ["models.llama2-7b.num_layers"], ())
set_case("empty-key", ["=5"], ())
set_case("empty-part", ["models..num_layers=1"], ())
set_case("unknown-section", ["foo.bar=1"], ("foo",))
set_case("model-not-in-experiment", ["models.llama2-13b.num_layers=1"], ("models.llama2-13b",))
set_case("section-too-short", ["models.llama2-7b=5"], ("models.llama2-7b",))
set_case("experiment-alone", ["experiment=1"], ("experiment",))
case(
    "set",
    "layers-negative",
    RUN + ("--set", "models.llama2-7b.num_layers=-1"),
    {},
    ("models/llama2-7b.yaml", "num_layers"),
)
case(
    "set",
    "layers-inf",
    RUN + ("--set", "models.llama2-7b.num_layers=.inf"),
    {},
    ("models/llama2-7b.yaml", "num_layers"),
)
case(
    "set",
    "layers-2p63",
    RUN + ("--set", f"models.llama2-7b.num_layers={HUGE}"),
    {},
    ("models/llama2-7b.yaml", "num_layers"),
)
case(
    "set",
    "unknown-model-key",
    RUN + ("--set", "models.llama2-7b.num_layer=1"),
    {},
    ("models/llama2-7b.yaml", "num_layer"),
)
case("set", "generation-mode", RUN + ("--set", "experiment.generation.mode=fast"), {}, ("generation.mode",))
case("set", "batch-list", RUN + ("--set", "scenarios.chat.batch_size=[1,2]"), {}, ("scenarios.chat.batch_size",))
case("set", "batch-zero", RUN + ("--set", "scenarios.chat.batch_size=0"), {}, ("scenarios.chat.batch_size",))
case(
    "set", "batch-unclosed-list", RUN + ("--set", "scenarios.chat.batch_size=[1,2"), {}, ("scenarios.chat.batch_size",)
)
case(
    "set",
    "hbm-nan",
    RUN + ("--set", "hardware.h100_sxm.hbm_bandwidth_gbps=.nan"),
    {},
    ("h100_sxm.yaml", "hbm_bandwidth_gbps"),
)
case(
    "set",
    "peak-negative",
    RUN + ("--set", "hardware.h100_sxm.peak_fp16_tflops=-1"),
    {},
    ("h100_sxm.yaml", "peak_fp16_tflops"),
)
case("set", "pp-two", RUN + ("--set", "systems.h100_x1.parallelism.pp=2"), {}, ("h100_x1.yaml", "devices.gpu.count"))
set_case("descend-into-scalar", ["systems.h100_x1.devices.gpu.count.x=1"], ("systems.h100_x1",))
case("set", "systems-empty", RUN + ("--set", "experiment.systems=[]"), {}, ("systems",))
case("set", "systems-unknown", RUN + ("--set", "experiment.systems=[nope]"), {}, ("systems",))
case(
    "set",
    "sweep-invalidates-every-point",
    ("sweep", "sweep.yaml", "--workers", "1", "--no-progress", "--set", "scenarios.chat.output_len=0"),
    {},
    ("output_len",),
)
case(
    "set",
    "sweep-unknown-section",
    ("sweep", "sweep.yaml", "--workers", "1", "--set", "bogus.x=1"),
    {},
    ("--set", "bogus"),
)

# ---------------------------------------------------------------- HuggingFace config.json

LAYERS = ("num_hidden_layers", "num_layers")  # the HF key or the ModelSpec field it becomes


def hf_case(name, data, names):
    files = {"exp.yaml": dump(EXP_HF)}
    files["hf/config.json"] = data if isinstance(data, (str, bytes)) or data is DIR else json.dumps(data)
    case("hf-config", name, RUN, files, ("config.json",) + tuple(names))


hf_case("invalid-json", '{"num_hidden_layers": 32,', ())
hf_case("empty-file", "", ())
hf_case("top-level-list", "[1, 2]", ())
hf_case("non-utf8", b'{"_name_or_path": "\xff\xfe"}', ())
hf_case("is-a-directory", DIR, ())
hf_case("missing-layers", mut(HF, ("num_hidden_layers", DELETE)), ("num_hidden_layers",))
hf_case("layers-negative", mut(HF, ("num_hidden_layers", -1)), (LAYERS,))
hf_case("layers-string", mut(HF, ("num_hidden_layers", "32x")), (LAYERS,))
hf_case("layers-2p63", mut(HF, ("num_hidden_layers", HUGE)), (LAYERS,))
hf_case("layers-nan", json.dumps(HF)[:-1] + ', "num_hidden_layers": NaN}', (LAYERS,))
hf_case(
    "hidden-infinity",
    json.dumps(mut(HF, ("hidden_size", DELETE)))[:-1] + ', "hidden_size": Infinity}',
    ("hidden_size",),
)
hf_case(
    "heads-not-dividing-hidden",
    mut(HF, ("num_attention_heads", 3)),
    (("num_attention_heads", "num_heads", "num_kv_heads"),),
)
hf_case(
    "architecture-unknown", mut(HF, ("architectures", ["FooForCausalLM"]), ("model_type", "foo")), ("architectures",)
)
hf_case("architectures-not-list", mut(HF, ("architectures", 5)), ("architectures",))
hf_case("dtype-unknown", mut(HF, ("torch_dtype", "float5")), ("torch_dtype",))
hf_case("max-positions-negative", mut(HF, ("max_position_embeddings", -1)), ("max_position_embeddings",))
case(
    "hf-config",
    "duplicate-reference",
    RUN,
    {"exp.yaml": dump(mut(EXP, ("models", ["hf/config.json", "hf/config.json"]))), "hf/config.json": json.dumps(HF)},
    ("exp.yaml", "models"),
)
case("hf-config", "missing-file", RUN, {"exp.yaml": dump(mut(EXP, ("models", ["nope/config.json"])))}, ("config.json",))

# ---------------------------------------------------------------- request traces (attnsim serve)

SERVE_ARGV = ("serve", "exp.yaml", "--no-write")


def req_case(name, data, names, file="req.csv"):
    exp = SERVE_FILE if file.endswith(".csv") else SERVE_JSONL
    case("request-trace", name, SERVE_ARGV, {"exp.yaml": dump(exp), file: data}, (file,) + tuple(names))


req_case("empty-file", "", ())
req_case("header-only", "arrival_s,prompt_tokens,output_tokens\n", ())
req_case("missing-column", "arrival_s,prompt_tokens\n0,128\n", ("line 2",))
req_case("unknown-column", "arrival_s,prompt_tokens,output_tokens,color\n0,128,4,red\n", ("line 2",))
req_case("prompt-word", "arrival_s,prompt_tokens,output_tokens\n0,many,4\n", ("line 2",))
req_case("arrival-negative", "arrival_s,prompt_tokens,output_tokens\n-1,128,4\n", ("line 2",))
req_case("prompt-zero", REQ_OK + "1.0,0,4\n", ("line 4",))
req_case("prompt-fraction", REQ_OK + "1.0,1.5,4\n", ("line 4",))
req_case("prompt-2p63", REQ_OK + f"1.0,{HUGE},4\n", ("line 4",))
req_case("prompt-1e30", REQ_OK + "1.0,1e30,4\n", ("line 4",))
req_case("output-nan", REQ_OK + "1.0,64,nan\n", ("line 4",))
req_case("arrival-inf", REQ_OK + "inf,64,4\n", ("line 4",))
req_case("too-many-values", REQ_OK + "1.0,64,4,9\n", ("line 4",))
req_case(
    "prefix-over-prompt", "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,128,4,1,512\n", ("line 2",)
)
req_case("non-utf8", b"arrival_s,prompt_tokens,output_tokens\n0,128,4\n\xff\xfe,1,1\n", ())
req_case("is-a-directory", DIR, ())
req_case(
    "jsonl-invalid",
    '{"arrival_s": 0, "prompt_tokens": 128, "output_tokens": 4}\n{"arrival_s": 1,\n',
    ("line 2",),
    file="req.jsonl",
)
req_case("jsonl-array", "[0, 128, 4]\n", ("line 1",), file="req.jsonl")
req_case(
    "jsonl-string-value",
    '{"arrival_s": 0, "prompt_tokens": "abc", "output_tokens": 4}\n',
    ("line 1",),
    file="req.jsonl",
)
req_case(
    "jsonl-bool-value", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 4}\n', ("line 1",), file="req.jsonl"
)
req_case(
    "jsonl-null-required",
    '{"arrival_s": 0, "prompt_tokens": null, "output_tokens": 4}\n',
    ("line 1",),
    file="req.jsonl",
)
req_case(
    "jsonl-nested", '{"arrival_s": 0, "prompt_tokens": [128], "output_tokens": 4}\n', ("line 1",), file="req.jsonl"
)
req_case(
    "jsonl-2p63", '{"arrival_s": 0, "prompt_tokens": %d, "output_tokens": 4}\n' % HUGE, ("line 1",), file="req.jsonl"
)
req_case("jsonl-non-utf8", b'{"arrival_s": 0, "prompt_tokens": 12\xff, "output_tokens": 4}\n', (), file="req.jsonl")
case("request-trace", "missing-file", SERVE_ARGV, {"exp.yaml": dump(SERVE_FILE)}, ("req.csv",))

# ---------------------------------------------------------------- serving section


def serve_case(name, pairs, names, argv=SERVE_ARGV):
    case("serving", name, argv, {"exp.yaml": dump(mut(SERVE, *pairs))}, ("exp.yaml",) + tuple(names))


serve_case("not-a-mapping", [("serving", [1])], ("serving",))
serve_case("unknown-key", [("serving.schedular", {})], ("serving.schedular",))
serve_case("num-requests-zero", [("serving.trace.num_requests", 0)], ("serving.trace.num_requests",))
serve_case("num-requests-1e9", [("serving.trace.num_requests", 10**9)], ("serving.trace.num_requests",))
serve_case("rate-negative", [("serving.trace.rate_per_s", -1)], ("serving.trace.rate_per_s",))
serve_case("rate-inf", [("serving.trace.rate_per_s", float("inf"))], ("serving.trace.rate_per_s",))
serve_case("arrival-unknown", [("serving.trace.arrival", "bursty")], ("serving.trace.arrival",))
serve_case(
    "prompt-mean-1e30",
    [("serving.trace.prompt", {"dist": "lognormal", "mean": 1e30, "std": 1.0})],
    ("serving.trace.prompt",),
)
serve_case("max-batch-zero", [("serving.scheduler.max_batch", 0)], ("serving.scheduler.max_batch",))
serve_case("preemption-unknown", [("serving.scheduler.preemption", "kill")], ("serving.scheduler.preemption",))
serve_case(
    "memory-fraction-over-one", [("serving.scheduler.memory_fraction", 1.5)], ("serving.scheduler.memory_fraction",)
)
serve_case("block-tokens-zero", [("serving.kv.block_tokens", 0)], ("serving.kv.block_tokens",))
serve_case("layout-unknown", [("serving.kv.layout", "sparse")], ("serving.kv.layout",))
serve_case("locality-dram-unknown", [("serving.kv.locality_dram", "no_such_dram")], ("serving.kv.locality_dram",))
serve_case("slo-ttft-inf", [("serving.slo.ttft_s", float("inf"))], ("serving.slo.ttft_s",))
serve_case(
    "disagg-unknown-system",
    [("serving.disaggregation", [{"prefill": "h100_x1", "decode": "nope", "link": "nvlink4"}])],
    ("serving.disaggregation.0.decode", "nope"),
)
serve_case("seed-word", [("serving.trace.seed", "x")], ("serving.trace.seed",))
case(
    "serving", "slo-vs-load-word", SERVE_ARGV + ("--slo-vs-load", "a,b"), {"exp.yaml": dump(SERVE)}, ("--slo-vs-load",)
)
case(
    "serving",
    "slo-vs-load-negative",
    SERVE_ARGV + ("--slo-vs-load", "1,-2"),
    {"exp.yaml": dump(SERVE)},
    ("--slo-vs-load",),
)

# ---------------------------------------------------------------- DRAM traces and specs (attnsim dram)

DRAM_ARGV = ("dram", "--device", "hbm3_6400")


def dtrace(name, text, names, extra=()):
    case(
        "dram-trace", name, DRAM_ARGV + ("--trace", "t.txt") + tuple(extra), {"t.txt": text}, ("t.txt",) + tuple(names)
    )


dtrace("bad-hex", "0x40 R\nzz R\n", ("2",))
dtrace("bad-rw", "0x40 X\n", ("1",))
dtrace("too-many-fields", "0x40 R 0 9\n", ("1",))
dtrace("decreasing-arrival", "0x40 R 10\n0x80 R 5\n", ("2",))
dtrace("negative-arrival", "0x40 R -3\n", ("1",))
dtrace("arrival-2p63", f"0x40 R {HUGE}\n", ("1",))
dtrace("arrival-word", "0x40 R soon\n", ("1",))
dtrace("address-2p64", "0x10000000000000000 R\n", ("1",))
dtrace("address-beyond-capacity", "0x40 R\n0xffffffffffff R\n", ())
dtrace("only-comments", "# nothing\n\n", ())
dtrace("empty-file", "", ())
dtrace("non-utf8", b"0x40 R\n0x\xff R\n", ())
case("dram-trace", "is-a-directory", DRAM_ARGV + ("--trace", "t.txt"), {"t.txt": DIR}, ("t.txt",))
case("dram-trace", "missing-file", DRAM_ARGV + ("--trace", "nope.txt"), {}, ("nope.txt",))


def dopt(name, extra, names, files=None):
    case("dram-options", name, DRAM_ARGV + ("--requests", "64") + tuple(extra), files, tuple(names))


dopt("banks-not-power-of-two", ("--banks", "3"), ("--banks",))
dopt("banks-2p20", ("--banks", str(2**20)), ("--banks",))
dopt("channels-zero", ("--channels", "0"), ("channels",))
dopt("channels-2p63", ("--channels", str(HUGE)), ("channels",))
dopt("requests-zero", ("--requests", "0"), ("--requests",))
dopt("requests-1e12", ("--requests", str(10**12)), ("--requests",))
dopt("write-fraction-over-one", ("--write-fraction", "1.5"), ("--write-fraction",))
dopt("write-fraction-nan", ("--write-fraction", "nan"), ("--write-fraction",))
dopt("stride-not-burst-multiple", ("--pattern", "strided", "--stride", "3"), ("--stride",))
dopt("queue-zero", ("--queue", "0"), (("--queue", "queue"),))
dopt("threads-zero", ("--threads", "0"), ("--threads",))
dopt("threads-2p63", ("--threads", str(HUGE)), ("--threads",))
dopt("threads-one-channel", ("--channels", "1", "--threads", "2"), ("--threads",))
dopt("threads-dramsim3", ("--channels", "2", "--controller", "dramsim3", "--threads", "2"), ("--threads",))
dopt("controller-old-name", ("--controller", "attnsim"), ("controller", "now called ideal"))
dopt("controller-unknown", ("--controller", "gem5"), ("controller", "ramulator2"))
dopt("closed-cap-open-page", ("--closed-cap", "1"), ("--closed-cap", "--page closed"))
dopt("closed-cap-negative", ("--page", "closed", "--closed-cap", "-1"), ("--closed-cap",))
dopt("closed-cap-dramsim3", ("--page", "closed", "--closed-cap", "1", "--controller", "dramsim3"), ("--closed-cap",))
dopt("mapping-unknown-field", ("--mapping", "RoXYZ"), ("mapping",))
dopt("mapping-missing-field", ("--mapping", "RoBa"), ("mapping",))
case("dram-options", "device-unknown", ("dram", "--device", "no_such_dram", "--requests", "8"), {}, ("no_such_dram",))
case("dram-options", "device-is-gpu", ("dram", "--device", "h100_sxm", "--requests", "8"), {}, ("h100_sxm",))


def dspec(name, data, names):
    case(
        "dram-spec",
        name,
        ("dram", "--device", "d.yaml", "--requests", "64"),
        {"d.yaml": data if isinstance(data, (str, bytes)) else dump(data)},
        ("d.yaml",) + tuple(names),
    )


dspec("empty-file", "", ())
dspec("non-utf8", b"kind: dram\nname: \xff\n", ())
dspec("kind-not-dram", mut(DRAM, ("kind", "gpu")), ("kind",))
dspec("unknown-key", mut(DRAM, ("org.chanels", 4)), ("org.chanels",))
dspec("channels-zero", mut(DRAM, ("org.channels", 0)), ("org.channels",))
dspec("rows-2p63", mut(DRAM, ("org.rows", HUGE)), ("org.rows",))
dspec(
    "tck-nan", dump(mut(DRAM, ("org.tck_ns", DELETE))).replace("org:\n", "org:\n  tck_ns: .nan\n", 1), ("org.tck_ns",)
)
dspec("timing-missing", mut(DRAM, ("timing.nRP", DELETE)), ("timing.nRP",))
dspec("timing-negative", mut(DRAM, ("timing.nCL", -1)), ("timing.nCL",))
dspec(
    "energy-inf",
    dump(mut(DRAM, ("energy.act_pj", DELETE))).replace("energy:\n", "energy:\n  act_pj: .inf\n", 1),
    ("energy.act_pj",),
)
dspec("banks-not-power-of-two", mut(DRAM, ("org.banks_per_group", 3)), ("org",))
dspec("controller-old-name", mut(DRAM, ("controller", "attnsim")), ("controller", "ideal"))
dspec(
    "controller-rules-typo",
    mut(DRAM, ("controller_rules", {"closed_capp": 1})),
    ("controller_rules.closed_capp", "closed_cap"),
)
dspec(
    "controller-rules-unread",
    mut(DRAM, ("controller_rules", {"cmd_queue_scope": "rank"})),
    ("controller_rules.cmd_queue_scope",),
)
dspec(
    "controller-rules-open-page", mut(DRAM, ("controller_rules", {"closed_cap": 1})), ("controller_rules.closed_cap",)
)
dspec("duplicate-key", dump(DRAM).replace("name: hbm3_6400\n", "name: hbm3_6400\nname: other\n", 1), ("name",))
case("dram-spec", "is-a-directory", ("dram", "--device", "d.yaml"), {"d.yaml": DIR}, ("d.yaml",))

# ---------------------------------------------------------------- asm / disasm


def asm_case(name, text, names, isa="attacc", extra=()):
    case("asm", name, ("asm", "--isa", isa, "p.s") + tuple(extra), {"p.s": text}, ("p.s",) + tuple(names))


asm_case("unknown-opcode", "ACTAB 0, 0\nFLY 1\n", ("line 2",))
asm_case("operand-out-of-range", "ACTAB 0, 99999999999\n", ("line 1",))
asm_case("operand-2p63", f"ACTAB 0, {HUGE}\n", ("line 1",))
asm_case("operand-hex-2p64", "ACTAB 0x10000000000000000, 0\n", ("line 1",))
asm_case("operand-word", "ACTAB zero, 0\n", ("line 1",))
asm_case("missing-operand", "ACTAB 0\n", ("line 1",))
asm_case("too-many-operands", "PREA 0, 1, 2, 3\n", ("line 1",))
asm_case("unknown-named-operand", "ACTAB ch=0, rw=1\n", ("line 1",))
asm_case("operand-twice", "ACTAB ch=0, ch=1\n", ("line 1",))
asm_case("empty-operand", "ACTAB 0,, 0\n", ("line 1",))
asm_case("undefined-label", "JUMP nowhere, 3\nEXIT\n", ("line 1",), isa="fimdram")
asm_case("duplicate-label", "a: NOP 0\na: NOP 0\nEXIT\n", ("line 2",), isa="fimdram")
asm_case("bad-index", "MAC GRF_B[x], EVEN_BANK, GRF_A[0]\nEXIT\n", ("line 1",), isa="fimdram")
asm_case("non-utf8", b"ACTAB 0, 0\nPREA \xff\n", ())
asm_case("output-is-source", ASM_OK, ("-o",), extra=("-o", "p.s"))
case("asm", "is-a-directory", ("asm", "--isa", "attacc", "p.s"), {"p.s": DIR}, ("p.s",))
case("asm", "missing-file", ("asm", "--isa", "attacc", "nope.s"), {}, ("nope.s",))
case("asm", "no-file", ("asm", "--isa", "attacc"), {}, ("asm",))


def disasm_case(name, data, names, isa="attacc"):
    case("disasm", name, ("disasm", "--isa", isa, "p.bin"), {"p.bin": data}, ("p.bin",) + tuple(names))


disasm_case("truncated-word", b"\x00" * 12, ())
disasm_case("unknown-opcode", b"\xff" * 8, ("word 0",))
disasm_case("nonzero-unused-bits", (0x02 << 58 | 1 << 40).to_bytes(8, "little"), ("word 0",))
case("disasm", "is-a-directory", ("disasm", "--isa", "attacc", "p.bin"), {"p.bin": DIR}, ("p.bin",))
case("disasm", "missing-file", ("disasm", "--isa", "attacc", "nope.bin"), {}, ("nope.bin",))

# ---------------------------------------------------------------- sweep files

SWEEP_ARGV = ("sweep", "sweep.yaml", "--workers", "1", "--no-progress")


def sweep_case(name, data, names, argv=SWEEP_ARGV):
    case(
        "sweep",
        name,
        argv,
        {"sweep.yaml": data if isinstance(data, (str, bytes)) else dump(data)},
        ("sweep.yaml",) + tuple(names),
    )


def grid(values) -> dict:
    return mut(SWEEP, ("parameters", [{"grid": values}]))


sweep_case("empty-file", "", ("name",))
sweep_case("non-utf8", b"name: sw\nbase: \xff\n", ())
sweep_case("yaml-syntax", "name: sw\nparameters: [\n", ("line",))
sweep_case("unknown-key", mut(SWEEP, ("paramters", [])), ("paramters",))
sweep_case("base-unknown", mut(SWEEP, ("base", "no_such_experiment")), ("base",))
sweep_case("base-missing-file", mut(SWEEP, ("base", "nope.yaml")), ("base",))
sweep_case("parameters-not-list", mut(SWEEP, ("parameters", {"grid": {}})), ("parameters",))
sweep_case("block-kind-unknown", mut(SWEEP, ("parameters", [{"cube": {"scenario.batch_size": [1]}}])), ("parameters",))
sweep_case("grid-key-unknown", grid({"scenario.batch_sizes": [1, 2]}), ("scenario.batch_sizes",))
sweep_case("grid-section-unknown", grid({"bogus.x": [1, 2]}), ("bogus.x",))
sweep_case("grid-values-scalar", grid({"scenario.batch_size": 4}), ("scenario.batch_size",))
sweep_case("grid-values-empty", grid({"scenario.batch_size": []}), ("scenario.batch_size",))
sweep_case(
    "range-step-zero", grid({"scenario.batch_size": {"start": 1, "stop": 8, "step": 0}}), ("scenario.batch_size",)
)
sweep_case(
    "range-step-tiny", grid({"scenario.prompt_len": {"start": 1, "stop": 8, "step": 1e-9}}), ("scenario.prompt_len",)
)
sweep_case(
    "range-factor-one", grid({"scenario.batch_size": {"start": 1, "stop": 8, "factor": 1}}), ("scenario.batch_size",)
)
sweep_case(
    "range-factor-tiny",
    grid({"scenario.batch_size": {"start": 1, "stop": 8, "factor": 1.0000001}}),
    ("scenario.batch_size",),
)
sweep_case(
    "range-num-1e9", grid({"scenario.prompt_len": {"start": 1, "stop": 8, "num": 10**9}}), ("scenario.prompt_len",)
)
sweep_case(
    "range-stop-inf",
    "name: sw\nbase: exp.yaml\nparameters:\n  - grid:\n      scenario.batch_size: {start: 1, stop: .inf, step: 1}\n",
    ("scenario.batch_size",),
)
sweep_case(
    "grid-1e7-points",
    grid(
        {
            "scenario.batch_size": {"start": 1, "stop": 10000, "step": 1},
            "scenario.prompt_len": {"start": 1, "stop": 1000, "step": 1},
        }
    ),
    ("points",),
)
sweep_case(
    "random-samples-zero",
    mut(SWEEP, ("parameters", [{"random": {"samples": 0, "params": {"scenario.batch_size": {"randint": [1, 8]}}}}])),
    ("samples",),
)
sweep_case(
    "random-samples-1e9",
    mut(
        SWEEP, ("parameters", [{"random": {"samples": 10**9, "params": {"scenario.batch_size": {"randint": [1, 8]}}}}])
    ),
    ("samples",),
)
sweep_case(
    "random-uniform-reversed",
    mut(
        SWEEP,
        (
            "parameters",
            [{"random": {"samples": 2, "params": {"hardware.h100_sxm.hbm_bandwidth_gbps": {"uniform": [4000, 2000]}}}}],
        ),
    ),
    ("hbm_bandwidth_gbps",),
)
sweep_case(
    "random-dist-unknown",
    mut(SWEEP, ("parameters", [{"random": {"samples": 2, "params": {"scenario.batch_size": {"poisson": [1, 8]}}}}])),
    ("scenario.batch_size",),
)
sweep_case(
    "zip-length-mismatch",
    mut(SWEEP, ("parameters", [{"zip": {"scenario.batch_size": [1, 2], "scenario.prompt_len": [64]}}])),
    ("zip",),
)
sweep_case(
    "alias-bomb",
    "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
    "name: sw\nbase: exp.yaml\nparameters: [{grid: {scenario.batch_size: *h}}]\n",
    (),
)
sweep_case("name-traversal", mut(SWEEP, ("name", "../../x")), ("name",))
sweep_case("name-absolute", mut(SWEEP, ("name", "/tmp/attnsim-abs/sweep")), ("name",))
sweep_case("duplicate-key", dump(SWEEP) + "name: other\n", ("name",))
sweep_case(
    "figure-recipe-unknown", mut(SWEEP, ("figures", [{"recipe": "no_such_recipe", "out": "f.pdf"}])), ("figures",)
)
sweep_case(
    "figure-out-traversal",
    mut(SWEEP, ("figures", [{"recipe": "pareto", "out": "../../f.pdf", "x": "tpot_s", "y": "energy_per_token_j"}])),
    ("figures",),
)
sweep_case("slurm-shards-zero", mut(SWEEP, ("slurm", {"shards": 0})), ("slurm.shards",))
case("sweep", "shard-out-of-range", SWEEP_ARGV + ("--shard", "3/2"), {}, ("--shard",))
case("sweep", "shard-garbage", SWEEP_ARGV + ("--shard", "x"), {}, ("--shard",))
case("sweep", "workers-zero", ("sweep", "sweep.yaml", "--workers", "0", "--no-progress"), {}, ("--workers",))
case("sweep", "checkpoint-negative", SWEEP_ARGV + ("--checkpoint-s", "-1"), {}, ("--checkpoint-s",))
case("sweep", "checkpoint-nan", SWEEP_ARGV + ("--checkpoint-s", "nan"), {}, ("--checkpoint-s",))
case("sweep", "is-a-directory", SWEEP_ARGV, {"sweep.yaml": DIR}, ("sweep.yaml",))
case("sweep", "missing-file", ("sweep", "nope.yaml"), {}, ("nope.yaml",))

# ---------------------------------------------------------------- stores given to show / export / plot / merge


def _h5(fn):
    def mutate(path: Path) -> None:
        import h5py

        with h5py.File(path, "r+") as f:
            fn(f)

    return mutate


def _only_format(path: Path) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["format"] = "attnsim.sweep/1"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _docs_garbage(f) -> None:
    docs = f["docs"][()]
    del f["docs"]
    import h5py
    import numpy as np

    f.create_dataset("docs", data=np.array(["{not json"] * len(docs), dtype=object), dtype=h5py.string_dtype())


def _short_column(f) -> None:
    import numpy as np

    col = f["points/ttft_s"][()]
    del f["points/ttft_s"]
    f.create_dataset("points/ttft_s", data=np.asarray(col[:-1]))


def _journal_without_key(path: Path) -> None:
    from attnsim.studies.sweep.store import journal_dir

    j = journal_dir(path)
    j.mkdir(exist_ok=True)
    (j / "seg-x-1-0.jsonl").write_text('{"index": 0, "status": "ok"}\n')


def _run_docs_garbage(f) -> None:
    import h5py
    import numpy as np

    n = len(f["run_docs"])
    del f["run_docs"]
    f.create_dataset("run_docs", data=np.array(["[1, 2"] * n, dtype=object), dtype=h5py.string_dtype())


def _run_docs_not_objects(f) -> None:
    import h5py
    import numpy as np

    n = len(f["run_docs"])
    del f["run_docs"]
    f.create_dataset("run_docs", data=np.array(["42"] * n, dtype=object), dtype=h5py.string_dtype())


def _figure_traversal(f) -> None:
    d = yaml.safe_load(f.attrs["sweep_definition"])
    d["figures"] = [{"recipe": "pareto", "out": "../escaped.pdf", "x": "tpot_s", "y": "energy_per_token_j"}]
    f.attrs["sweep_definition"] = yaml.safe_dump(d)


def _sweep_definition_garbage(f) -> None:
    f.attrs["sweep_definition"] = "name: [unclosed"


def _other_sweep(f) -> None:
    f.attrs["sweep_id"] = "ffffffffffffffff"


def _version(f) -> None:
    f.attrs["attnsim_version"] = "0.0.0-other"


STORE_READERS = {
    "show": ("show", "s.h5"),
    "export": ("export", "s.h5", "--csv"),
    "plot": ("plot", "s.h5", "--recipe", "pareto", "--x", "tpot_s", "--y", "energy_per_token_j", "-o", "f.pdf"),
}
BROKEN_STORES = {
    "text-file": "this is not HDF5\n",
    "empty-file": b"",
    "directory": DIR,
    "truncated-results": Store("results", _truncate),
    "sweep-only-format": Store("sweep", _only_format),
    "sweep-docs-not-json": Store("sweep", _h5(_docs_garbage)),
    "sweep-short-column": Store("sweep", _h5(_short_column)),
    "sweep-journal-without-key": Store("sweep", _journal_without_key),
    "results-run-docs-not-json": Store("results", _h5(_run_docs_garbage)),
    "results-run-docs-not-objects": Store("results", _h5(_run_docs_not_objects)),
    "results-no-run-docs": Store("results", _h5(lambda f: f.__delitem__("run_docs"))),
}
ONLY_FOR = {"sweep-docs-not-json": ("show",)}  # export/plot read the columns, not the run documents
for cmd, argv in STORE_READERS.items():
    for sname, content in BROKEN_STORES.items():
        if cmd not in ONLY_FOR.get(sname, (cmd,)):
            continue
        case("store", f"{cmd}-{sname}", argv, {"s.h5": content}, ("s.h5",))
    case("store", f"{cmd}-missing-file", argv, {}, ("s.h5",))

case(
    "store",
    "plot-recipe-unknown",
    ("plot", "s.h5", "--recipe", "no_such", "-o", "f.pdf"),
    {"s.h5": Store("sweep")},
    ("no_such",),
)
case(
    "store",
    "plot-where-no-equals",
    STORE_READERS["plot"] + ("--where", "model"),
    {"s.h5": Store("sweep")},
    ("--where",),
)
case(
    "store",
    "plot-where-unknown-column",
    STORE_READERS["plot"] + ("--where", "colour=red"),
    {"s.h5": Store("sweep")},
    ("colour",),
)
case(
    "store",
    "plot-x-unknown-column",
    ("plot", "s.h5", "--recipe", "pareto", "--x", "nope_s", "--y", "tpot_s", "-o", "f.pdf"),
    {"s.h5": Store("sweep")},
    ("nope_s",),
)
case(
    "store",
    "plot-all-figure-traversal",
    ("plot", "s.h5", "--all"),
    {"s.h5": Store("sweep", _h5(_figure_traversal))},
    ("s.h5", "figures"),
)
case(
    "store",
    "plot-all-definition-garbage",
    ("plot", "s.h5", "--all"),
    {"s.h5": Store("sweep", _h5(_sweep_definition_garbage))},
    ("s.h5",),
)
case("store", "plot-all-on-results", ("plot", "s.h5", "--all"), {"s.h5": Store("results")}, ("s.h5",))
case(
    "store",
    "merge-different-sweeps",
    ("merge", "a.h5", "b.h5", "-o", "m.h5"),
    {"a.h5": Store("sweep"), "b.h5": Store("sweep", _h5(_other_sweep))},
    ("b.h5",),
)
case(
    "store",
    "merge-different-versions",
    ("merge", "a.h5", "b.h5", "-o", "m.h5"),
    {"a.h5": Store("sweep"), "b.h5": Store("sweep", _h5(_version))},
    ("b.h5",),
)
case("store", "merge-missing-shard", ("merge", "a.h5", "nope.h5", "-o", "m.h5"), {"a.h5": Store("sweep")}, ("nope.h5",))
case(
    "store",
    "merge-text-shard",
    ("merge", "a.h5", "b.h5", "-o", "m.h5"),
    {"a.h5": Store("sweep"), "b.h5": "text\n"},
    ("b.h5",),
)
case(
    "store",
    "merge-results-file",
    ("merge", "a.h5", "b.h5", "-o", "m.h5"),
    {"a.h5": Store("sweep"), "b.h5": Store("results")},
    ("b.h5",),
)
case(
    "store",
    "merge-only-format",
    ("merge", "a.h5", "b.h5", "-o", "m.h5"),
    {"a.h5": Store("sweep"), "b.h5": Store("sweep", _only_format)},
    ("b.h5",),
)
case("store", "merge-output-is-input", ("merge", "a.h5", "-o", "a.h5"), {"a.h5": Store("sweep")}, ("a.h5",))

# ---------------------------------------------------------------- output paths (checked before any work)

case("output", "run-out-is-file", RUN + ("--out", "taken"), {"taken": "x\n"}, ("taken",))
case("output", "run-out-under-file", RUN + ("--out", "taken/sub"), {"taken": "x\n"}, ("taken",))
case("output", "run-trace-is-dir", RUN + ("--no-write", "--trace", "tdir"), {"tdir": DIR}, ("tdir",))
case("output", "run-trace-missing-dir", RUN + ("--no-write", "--trace", "missing/dir/t.json"), {}, ("missing/dir",))
case("output", "run-trace-under-file", RUN + ("--trace", "taken/t.json"), {"taken": "x\n"}, ("taken",))
case(
    "output",
    "serve-csv-missing-dir",
    ("serve", "serve.yaml", "--no-write", "--csv", "missing/dir/r.csv"),
    {},
    ("missing/dir",),
)
case("output", "serve-csv-is-dir", ("serve", "serve.yaml", "--no-write", "--csv", "cdir"), {"cdir": DIR}, ("cdir",))
case("output", "serve-out-is-file", ("serve", "serve.yaml", "--out", "taken"), {"taken": "x\n"}, ("taken",))
case(
    "output",
    "serve-figure-missing-dir",
    ("serve", "serve.yaml", "--no-write", "--slo-vs-load", "1,2", "--figure", "missing/dir/f.pdf"),
    {},
    ("missing/dir",),
)
case(
    "output",
    "export-out-missing-dir",
    ("export", "s.h5", "--csv", "-o", "missing/dir/x.csv"),
    {"s.h5": Store("sweep")},
    ("missing/dir",),
)
case(
    "output",
    "export-out-is-dir",
    ("export", "s.h5", "--csv", "-o", "odir"),
    {"s.h5": Store("sweep"), "odir": DIR},
    ("odir",),
)
case("output", "export-out-is-input", ("export", "s.h5", "--csv", "-o", "s.h5"), {"s.h5": Store("sweep")}, ("s.h5",))
case(
    "output",
    "plot-out-under-a-file",  # a missing folder is made (as by every figure writer); one under a file cannot be
    ("plot", "s.h5", "--recipe", "pareto", "--x", "tpot_s", "--y", "energy_per_token_j", "-o", "afile/dir/f.pdf"),
    {"s.h5": Store("sweep"), "afile": "not a folder\n"},
    ("afile",),
)
case(
    "output",
    "plot-out-bad-suffix",
    ("plot", "s.h5", "--recipe", "pareto", "--x", "tpot_s", "--y", "energy_per_token_j", "-o", "f.xyz"),
    {"s.h5": Store("sweep")},
    ("f.xyz",),
)
case(
    "output",
    "plot-out-is-dir",
    ("plot", "s.h5", "--recipe", "pareto", "--x", "tpot_s", "--y", "energy_per_token_j", "-o", "odir"),
    {"s.h5": Store("sweep"), "odir": DIR},
    ("odir",),
)
case(
    "output",
    "merge-out-missing-dir",
    ("merge", "a.h5", "-o", "missing/dir/m.h5"),
    {"a.h5": Store("sweep")},
    ("missing/dir",),
)
case("output", "merge-out-is-dir", ("merge", "a.h5", "-o", "odir"), {"a.h5": Store("sweep"), "odir": DIR}, ("odir",))
case("output", "asm-out-is-dir", ("asm", "--isa", "attacc", "p.s", "-o", "odir"), {"odir": DIR}, ("odir",))
case(
    "output", "asm-out-missing-dir", ("asm", "--isa", "attacc", "p.s", "-o", "missing/dir/p.bin"), {}, ("missing/dir",)
)
case(
    "output",
    "disasm-out-missing-dir",
    ("disasm", "--isa", "attacc", "p.bin", "-o", "missing/dir/p.s"),
    {"p.bin": (0x02 << 58).to_bytes(8, "little")},
    ("missing/dir",),
)
case("output", "sweep-out-is-dir", SWEEP_ARGV + ("--out", "odir"), {"odir": DIR}, ("odir",))
case("output", "sweep-out-under-file", SWEEP_ARGV + ("--out", "taken/s.h5"), {"taken": "x\n"}, ("taken",))
case(
    "output", "sbatch-missing-dir", ("sweep", "sweep.yaml", "--emit-sbatch", "missing/dir/job.sh"), {}, ("missing/dir",)
)
case("output", "sbatch-is-dir", ("sweep", "sweep.yaml", "--emit-sbatch", "odir"), {"odir": DIR}, ("odir",))


# Cases that fail today (see /tmp/bad_inputs_status.md / the helper report for the cause of each); they are
# left out of tests/test_bad_inputs.py until fixed. `python bench/fuzz.py --cases` still runs them.
PENDING: frozenset = frozenset()

# ---------------------------------------------------------------- more: reliability section, mapper options, validate

REL = {
    "temperature_c": 45,
    "refresh_interval_ms": 64,
    "kv_format": "bf16",
    "accuracy_slo": {"max_rel_attention_error": 0.05},
    "due_policy": "recompute",
    "role_tiers": {"gpu": "hbm"},
    "tiers": {
        "hbm": {
            "read_gbps": 3350,
            "read_pj_per_byte": 28.72,
            "refresh_mw_per_gb": 14.5,
            "capacity_gb": 80,
            "ecc": {"high": "hbm3_ondie", "low": "hbm3_ondie"},
            "errors": {"lambda_soft_per_bit_h": 2.4e-11},
        }
    },
}
EXP_REL = mut(EXP, ("reliability", REL), ("scenarios.chat.kv_dtype", "bf16"))
exp_case(
    "reliability-temperature-nan",
    dump(mut(EXP_REL, ("reliability.temperature_c", DELETE))).replace(
        "reliability:\n", "reliability:\n  temperature_c: .nan\n", 1
    ),
    ("exp.yaml", "reliability.temperature_c"),
)
exp_case(
    "reliability-kv-format-unknown",
    mut(EXP_REL, ("reliability.kv_format", "fp3")),
    ("exp.yaml", "reliability.kv_format"),
)
exp_case(
    "reliability-due-policy-unknown",
    mut(EXP_REL, ("reliability.due_policy", "pray")),
    ("exp.yaml", "reliability.due_policy"),
)
exp_case(
    "reliability-role-tier-unknown",
    mut(EXP_REL, ("reliability.role_tiers", {"gpu": "nowhere"})),
    ("exp.yaml", "reliability"),
)
exp_case(
    "reliability-ecc-unknown",
    mut(EXP_REL, ("reliability.tiers.hbm.ecc.high", "magic")),
    ("exp.yaml", "reliability.tiers"),
)
exp_case(
    "reliability-capacity-negative",
    mut(EXP_REL, ("reliability.tiers.hbm.capacity_gb", -1)),
    ("exp.yaml", "reliability.tiers.hbm.capacity_gb"),
)
exp_case(
    "scenario-reliability-unknown-key",
    mut(EXP_REL, ("scenarios.chat.reliability", {"temperatur_c": 50})),
    ("exp.yaml", "scenarios.chat.reliability"),
)
exp_case(
    "beyond-max-position-unknown",
    mut(EXP, ("scenarios.chat.beyond_max_position", "sometimes")),
    ("exp.yaml", "scenarios.chat.beyond_max_position"),
)
sys_case(
    "attacc-option-wrong-type",
    mut(yaml.safe_load(builtin("systems", "attacc")), ("mapper.options.pipeline", "often")),
    ("mapper.options",),
)
case("set", "validate-unknown-set", ("validate", "--set", "no_such_set"), {}, ("no_such_set",))
case(
    "set",
    "sweep-fixed-shorthand",
    ("sweep", "sweep.yaml", "--workers", "1", "--set", "scenario.batch_size=4"),
    {},
    ("scenario.batch_size",),
)
sweep_case("fixed-set-shorthand", mut(SWEEP, ("set", {"scenario.batch_size": 4})), ("set",))
sweep_case("fixed-set-unknown-key", mut(SWEEP, ("set", {"models.llama2-7b.num_layer": 4})), ("num_layer",))
serve_case("kv-policy-unknown", [("serving.kv.policy", {"kind": "psychic"})], ("serving.kv.policy",))
serve_case("swap-link-unknown", [("serving.scheduler.swap_link", "no_such_link")], ("serving.scheduler.swap_link",))
serve_case("memo-bucket-over-half", [("serving.memo", {"relative_bucket": 0.9})], ("serving.memo.relative_bucket",))
case(
    "serving",
    "trace-file-missing",
    SERVE_ARGV,
    {"exp.yaml": dump(mut(SERVE, ("serving.trace", {"file": "nope.csv"})))},
    ("nope.csv",),
)
dtrace("arrival-fraction", "0x40 R 1.5\n", ("1",))
dtrace("address-negative", "-0x40 R\n", ("1",))
dtrace("address-decimal-word", "0x40 R\nforty R\n", ("2",))
disasm_case("fimdram-unknown-opcode", b"\xff\xff\xff\xff", ("word 0",), isa="fimdram")
disasm_case("aim-truncated", b"\x00" * 5, (), isa="aim")
disasm_case("cxl-pnm-garbage", b"\xff" * 16, ("word 0",), isa="cxl_pnm")

# ---------------------------------------------------------------- more: rope scaling, plot selections, serve rates

hf_case(
    "rope-scaling-factor-negative", mut(HF, ("rope_scaling", {"type": "linear", "factor": -2.0})), ("rope_scaling",)
)
hf_case("rope-scaling-list", mut(HF, ("rope_scaling", [1, 2])), ("rope_scaling",))
case(
    "store",
    "plot-where-type-mismatch",
    STORE_READERS["plot"] + ("--where", "batch_size=abc"),
    {"s.h5": Store("sweep")},
    ("batch_size",),
)
case(
    "store",
    "plot-heatmap-missing-z",
    ("plot", "s.h5", "--recipe", "heatmap", "--x", "scenario.batch_size", "--y", "model", "-o", "f.pdf"),
    {"s.h5": Store("sweep")},
    ("--z",),
)
case("serving", "slo-vs-load-empty", SERVE_ARGV + ("--slo-vs-load", ""), {"exp.yaml": dump(SERVE)}, ("--slo-vs-load",))
case(
    "serving", "slo-vs-load-inf", SERVE_ARGV + ("--slo-vs-load", "1,inf"), {"exp.yaml": dump(SERVE)}, ("--slo-vs-load",)
)
case(
    "serving",
    "max-rate-start-word",
    ("serve", "exp.yaml", "--max-rate-under-slo", "fast"),
    {"exp.yaml": dump(SERVE)},
    ("--max-rate-under-slo",),
)
case(
    "serving",
    "max-rate-start-inf",
    ("serve", "exp.yaml", "--max-rate-under-slo", "inf"),
    {"exp.yaml": dump(SERVE)},
    ("--max-rate-under-slo",),
)
case(
    "serving",
    "max-rate-tolerance-one",
    ("serve", "exp.yaml", "--max-rate-under-slo", "--rate-tolerance", "1"),
    {"exp.yaml": dump(SERVE)},
    ("--rate-tolerance",),
)
case(
    "serving",
    "rate-tolerance-alone",
    ("serve", "exp.yaml", "--rate-tolerance", "0.1"),
    {"exp.yaml": dump(SERVE)},
    ("--rate-tolerance",),
)
exp_case("run-with-serving-section", SERVE, ("exp.yaml", "serving"))
serve_case("static-batch-size", [("scenarios.chat.batch_size", 8)], ("scenarios.chat.batch_size",))
serve_case("static-baseline", [("baseline", "h100_x1")], ("baseline",))
exp_case(
    "recursive-alias",
    "name: tiny\nsystems: [h100_x1]\nmodels: [llama2-7b]\nscenarios: {chat: {}}\ndescription: &a [*a]\n",
    ("exp.yaml",),
)
case("set", "recursive-alias", RUN + ("--set", "experiment.scenarios.chat.x=&a [*a]"), {}, ("scenarios.chat.x",))
case(
    "set",
    "recursive-alias-scenario",
    RUN + ("--set", "scenarios.chat.prompt_len=&a [*a]"),
    {},
    ("scenarios.chat.prompt_len",),
)
hw_case("kind-mapping", mut(HW, ("kind", {"a": 1})), ("kind",))
case("set", "hardware-kind-mapping", RUN + ("--set", "hardware.h100_sxm.kind={a: 1}"), {}, ("h100_sxm", "kind"))
case("experiment", "builtin-name-too-long", ("run", "x" * 300), {}, ("x" * 40,))
sweep_case("base-name-too-long", mut(SWEEP, ("base", "e" * 300)), ("base",))

# ---------------------------------------------------------------- issues 14/15 surfaces: attnsim pim run

PIM_DEV = "attacc_hbm3_pim_stack"
PIM_ARGV = ("pim", "run", "p.s", "--device", PIM_DEV)
PIM_HW = yaml.safe_load(builtin("hardware", PIM_DEV))


def pim_case(name, text, names, extra=(), files=None, program="p.s"):
    argv = ("pim", "run", program, "--device", PIM_DEV) + tuple(extra)
    case("pim", name, argv, {**({program: text} if text is not None else {}), **(files or {})}, tuple(names))


case("pim", "device-unknown", ("pim", "run", "p.s", "--device", "no_such_pim"), {}, ("--device", "no_such_pim"))
case("pim", "device-is-gpu", ("pim", "run", "p.s", "--device", "h100_sxm"), {}, ("--device", "h100_sxm"))
case("pim", "device-is-dram", ("pim", "run", "p.s", "--device", "hbm3_6400"), {}, ("--device", "hbm3_6400"))
case("pim", "device-path-missing", ("pim", "run", "p.s", "--device", "nope.yaml"), {}, ("nope.yaml",))
case(
    "pim",
    "device-units-zero",
    ("pim", "run", "p.s", "--device", "d.yaml"),
    {"d.yaml": dump(mut(PIM_HW, ("units", 0)))},
    ("d.yaml", "units"),
)
case(
    "pim",
    "device-unknown-key",
    ("pim", "run", "p.s", "--device", "d.yaml"),
    {"d.yaml": dump(mut(PIM_HW, ("unitz", 2)))},
    ("d.yaml", "unitz"),
)
case(
    "pim",
    "device-non-utf8",
    ("pim", "run", "p.s", "--device", "d.yaml"),
    {"d.yaml": b"kind: pim\nname: \xff\n"},
    ("d.yaml",),
)
case("pim", "device-is-a-directory", ("pim", "run", "p.s", "--device", "d.yaml"), {"d.yaml": DIR}, ("d.yaml",))
pim_case("isa-unknown", ASM_OK, ("--isa", "x86"), extra=("--isa", "x86"))
pim_case("isa-other-than-device", ASM_OK, ("p.s", "--isa", "aim"), extra=("--isa", "aim"))
case("pim", "program-missing", ("pim", "run", "nope.s", "--device", PIM_DEV), {}, ("nope.s",))
pim_case("program-is-a-directory", DIR, ("p.s",))
pim_case("program-empty", "", ("p.s",))
pim_case("program-only-comments", "# nothing\n\n", ("p.s",))
pim_case("program-unknown-opcode", "ACTAB 0, 0\nFLY 1\n", ("p.s", "line 2"))
pim_case("program-non-utf8", b"ACTAB 0, 0\nPREA \xff\n", ("p.s",))
pim_case("program-row-beyond-device", "ACTAB 0, 0\nACTAB 0, 20000\n", ("p.s", "line 2", "row"))
pim_case("program-channel-beyond-device", "ACTAB 16, 0\n", ("p.s", "line 1", "ch"))
pim_case("program-bin-truncated", b"\x00" * 12, ("p.bin",), program="p.bin")
pim_case("program-bin-unknown-opcode", b"\xff" * 8, ("p.bin", "word 0"), program="p.bin")
pim_case("program-bin-empty", b"", ("p.bin",), program="p.bin")
case("pim", "output-is-dir", PIM_ARGV + ("-o", "odir"), {"odir": DIR}, ("odir",))
case("pim", "output-missing-dir", PIM_ARGV + ("-o", "missing/dir/r.json"), {}, ("missing/dir",))
case("pim", "output-is-program", PIM_ARGV + ("-o", "p.s"), {}, ("p.s",))
case("pim", "no-device", ("pim", "run", "p.s"), {}, ("--device",))

case(
    "pim",
    "aim-channel-mask-beyond-device",
    ("pim", "run", "p.s", "--device", "ianus_aim"),
    {"p.s": "MAC_ABK 8, 0x1, 5\nMAC_ABK 8, 0x80000000, 5\nEOC\n"},
    ("p.s", "line 2", "ch_mask"),
)
case(
    "pim",
    "cxl-pnm-program-too-large",
    ("pim", "run", "p.s", "--device", "cxl_pnm_lpddr5x"),
    {"p.s": "GEMV 1, 0, 0, 16000000, 60000, FP32\nHALT\n"},
    ("p.s", "records"),
)
case("pim", "program-for-another-isa", ("pim", "run", "p.s", "--device", "cxl_pnm_lpddr5x"), {}, ("p.s", "line 1"))


# ---------------------------------------------------------------- attnsim plan

PLAN_FILES = {"exp.yaml": dump(EXP_REL)}


def plan_case(name, extra, names, files=None, exp="exp.yaml"):
    case("plan", name, ("plan", exp) + tuple(extra), {**PLAN_FILES, **(files or {})}, tuple(names))


plan_case("no-reliability-section", (), ("exp.yaml", "reliability"), files={"exp.yaml": dump(EXP)})
plan_case("accuracy-slo-negative", ("--accuracy-slo", "-0.1"), ("--accuracy-slo",))
plan_case("accuracy-slo-nan", ("--accuracy-slo", "nan"), ("--accuracy-slo",))
plan_case("accuracy-slo-word", ("--accuracy-slo", "tight"), ("--accuracy-slo",))
plan_case("tpot-slo-zero", ("--tpot-slo-s", "0"), ("--tpot-slo-s",))
plan_case("tpot-and-latency-slo", ("--tpot-slo-s", "1", "--latency-slo-s", "1"), ("--latency-slo-s",))
plan_case("energy-slo-inf", ("--energy-slo-j", "inf"), ("--energy-slo-j",))
plan_case("max-ppl-increase-negative", ("--max-ppl-increase", "-1"), ("--max-ppl-increase",))
plan_case("calibration-without-ppl", ("--calibration", "cal.yaml"), ("--calibration",), files={"cal.yaml": "a: 1\n"})
plan_case("calibration-missing", ("--max-ppl-increase", "0.01", "--calibration", "nope.yaml"), ("nope.yaml",))
plan_case(
    "calibration-garbage",
    ("--max-ppl-increase", "0.01", "--calibration", "cal.yaml"),
    ("cal.yaml",),
    files={"cal.yaml": "fit: [unclosed\n"},
)
plan_case(
    "calibration-not-a-calibration",
    ("--max-ppl-increase", "0.01", "--calibration", "cal.yaml"),
    ("cal.yaml",),
    files={"cal.yaml": "name: x\n"},
)
plan_case("allow-uncalibrated-without-ppl", ("--allow-uncalibrated",), ("--allow-uncalibrated",))
plan_case(
    "calibration-entry-context-negative",
    ("--max-ppl-increase", "0.01", "--calibration", "cal.yaml"),
    ("cal.yaml", "entries[0].context_tokens"),
    files={
        "cal.yaml": (
            "fallback: a\nentries:\n- {id: a, model: m, measurement: x, source: y, models: [], families: [],\n"
            "   context_tokens: -1, quantization: {from_file: k.yaml}, bit_errors: {from_file: k.yaml}}\n"
        )
    },
)
plan_case(
    "calibration-entry-ppl-zero",
    ("--max-ppl-increase", "0.01", "--calibration", "cal.yaml"),
    ("cal.yaml", "entries[0].quantization.points[0].ppl"),
    files={
        "cal.yaml": (
            "fallback: a\nentries:\n- {id: a, model: m, measurement: x, source: y, models: [], families: [],\n"
            "   context_tokens: 9, quantization: {points: [{format: int4, ppl_base: 5, ppl: 0}]},\n"
            "   bit_errors: {from_file: k.yaml}}\n"
        )
    },
)
plan_case("formats-unknown", ("--formats", "bf16,fp7"), ("--formats", "fp7"))
plan_case("formats-empty", ("--formats", ","), ("--formats",))
plan_case("layer-groups-zero", ("--layer-groups", "0"), ("--layer-groups",))
plan_case("layer-groups-over-layers", ("--layer-groups", "33"), ("layer",))
plan_case("layer-groups-2p63", ("--layer-groups", str(HUGE)), ("--layer-groups",))
plan_case("block-tokens-zero", ("--block-tokens", "0"), ("--block-tokens",))
plan_case("block-tokens-over-context", ("--block-tokens", "100000"), ("--block-tokens", "132"))
plan_case("front-points-zero", ("--front-points", "0"), ("--front-points",))
plan_case("scenario-unknown", ("--scenario", "nope"), ("--scenario", "nope"))
plan_case("system-unknown", ("--system", "nope"), ("--system", "nope"))
plan_case("model-unknown", ("--model", "nope"), ("--model", "nope"))
plan_case("set-unknown-section", ("--set", "bogus.x=1"), ("--set", "bogus"))
plan_case("set-bad-value", ("--set", "scenarios.chat.batch_size=0"), ("scenarios.chat.batch_size",))
plan_case("output-is-dir", ("-o", "odir"), ("odir",), files={"odir": DIR})
plan_case("output-missing-dir-bad-scenario", ("-o", "new/dir/plan.json", "--scenario", "nope"), ("--scenario",))
plan_case("output-is-experiment", ("-o", "exp.yaml"), ("exp.yaml",))
case("plan", "experiment-missing", ("plan", "nope.yaml"), {}, ("nope.yaml",))
case("plan", "experiment-unknown-name", ("plan", "no_such_experiment"), {}, ("no_such_experiment",))


# ---------------------------------------------------------------- attnsim list / schema / warmup

case("list", "kind-unknown", ("list", "system"), {}, ("list", "system"))
case("list", "no-kind", ("list",), {}, ("list",))
case("list", "extra-argument", ("list", "systems", "models"), {}, ("models",))
case("schema", "kind-unknown", ("schema", "experimnt"), {}, ("experimnt",))
case("schema", "no-kind", ("schema",), {}, ("schema",))
case("schema", "hardware-kind-unknown", ("schema", "hardware.tpu"), {}, ("hardware.tpu",))
case("schema", "output-missing-dir", ("schema", "experiment", "-o", "missing/dir/s.json"), {}, ("missing/dir",))
case("schema", "output-is-dir", ("schema", "experiment", "-o", "odir"), {"odir": DIR}, ("odir",))
case("schema", "output-under-file", ("schema", "experiment", "-o", "taken/s.json"), {"taken": "x\n"}, ("taken",))
case("schema", "list-with-kind", ("schema", "--list", "experiment"), {}, (("--list", "experiment"),))
case("warmup", "extra-argument", ("warmup", "now"), {}, ("now",))

# ---------------------------------------------------------------- attnsim export --parquet, show on sweep stores

for sname in ("text-file", "empty-file", "directory", "truncated-results", "sweep-only-format", "sweep-short-column"):
    case("store", f"export-parquet-{sname}", ("export", "s.h5", "--parquet"), {"s.h5": BROKEN_STORES[sname]}, ("s.h5",))
case("store", "export-parquet-missing-file", ("export", "s.h5", "--parquet"), {}, ("s.h5",))
case(
    "output",
    "export-parquet-out-missing-dir",
    ("export", "s.h5", "--parquet", "-o", "missing/dir/x.parquet"),
    {"s.h5": Store("sweep")},
    ("missing/dir",),
)
case(
    "output",
    "export-parquet-out-is-dir",
    ("export", "s.h5", "--parquet", "-o", "odir"),
    {"s.h5": Store("sweep"), "odir": DIR},
    ("odir",),
)
case(
    "output",
    "export-parquet-out-is-input",
    ("export", "s.h5", "--parquet", "-o", "s.h5"),
    {"s.h5": Store("sweep")},
    ("s.h5",),
)
case(
    "output",
    "export-parquet-out-under-file",
    ("export", "s.h5", "--parquet", "-o", "taken/x.parquet"),
    {"s.h5": Store("sweep"), "taken": "x\n"},
    ("taken",),
)
case(
    "store",
    "export-csv-and-parquet",
    ("export", "s.h5", "--csv", "--parquet"),
    {"s.h5": Store("sweep")},
    ("--parquet",),
)


def _parameters_garbage(f) -> None:
    f.attrs["parameters"] = "{not json"


case(
    "store",
    "show-sweep-parameters-not-json",
    ("show", "s.h5"),
    {"s.h5": Store("sweep", _h5(_parameters_garbage))},
    ("s.h5",),
)
case("store", "show-sweep-breakdown-text-file", ("show", "s.h5", "--breakdown"), {"s.h5": "not hdf5\n"}, ("s.h5",))

# ---------------------------------------------------------------- run --trace-steps, serve --trace / --trace-requests

case(
    "output",
    "run-trace-steps-over-limit",
    RUN + ("--no-write", "--trace", "t.json", "--trace-steps", "4097"),
    {},
    ("--trace-steps", "4096"),
)
case(
    "output",
    "run-trace-steps-negative",
    RUN + ("--no-write", "--trace", "t.json", "--trace-steps", "-3"),
    {},
    ("--trace-steps",),
)
case(
    "output",
    "run-trace-steps-word",
    RUN + ("--no-write", "--trace", "t.json", "--trace-steps", "all"),
    {},
    ("--trace-steps",),
)
case(
    "output",
    "run-trace-steps-2p63",
    RUN + ("--no-write", "--trace", "t.json", "--trace-steps", str(HUGE)),
    {},
    ("--trace-steps",),
)
case("output", "run-trace-steps-without-trace", RUN + ("--no-write", "--trace-steps", "4"), {}, ("--trace-steps",))
case("output", "run-trace-is-input", RUN + ("--no-write", "--trace", "exp.yaml"), {}, ("exp.yaml",))
SERVE_T = ("serve", "serve.yaml", "--no-write")
case("output", "serve-trace-is-dir", SERVE_T + ("--trace", "tdir"), {"tdir": DIR}, ("tdir",))
case("output", "serve-trace-missing-dir", SERVE_T + ("--trace", "missing/dir/t.json"), {}, ("missing/dir",))
case("output", "serve-trace-under-file", SERVE_T + ("--trace", "taken/t.json"), {"taken": "x\n"}, ("taken",))
case("output", "serve-trace-is-input", SERVE_T + ("--trace", "serve.yaml"), {}, ("serve.yaml",))
case(
    "output",
    "serve-trace-requests-negative",
    SERVE_T + ("--trace", "t.json", "--trace-requests", "-1"),
    {},
    ("--trace-requests",),
)
case(
    "output",
    "serve-trace-requests-word",
    SERVE_T + ("--trace", "t.json", "--trace-requests", "many"),
    {},
    ("--trace-requests",),
)
case("output", "serve-trace-requests-without-trace", SERVE_T + ("--trace-requests", "5"), {}, ("--trace-requests",))


# ---------------------------------------------------------------- sweep baseline:, scenario speculative:

SWEEP_SYSTEMS = mut(SWEEP, ("parameters", [{"grid": {"system": ["h100_x1", "dgx_h100"]}}]))
sweep_case("baseline-unknown", mut(SWEEP_SYSTEMS, ("baseline", "dgx_a100")), ("baseline", "dgx_a100"))
sweep_case("baseline-not-string", mut(SWEEP_SYSTEMS, ("baseline", [1])), ("baseline",))

SPEC = {"draft_model": "llama2-7b", "draft_tokens": 4, "acceptance_rate": 0.8}  # same vocabulary as the target


def spec_case(name, pairs, names, exp=EXP, files=None, argv=RUN):
    data = mut(
        exp, ("scenarios.chat.speculative", dict(SPEC)), *(("scenarios.chat.speculative." + k, v) for k, v in pairs)
    )
    case("speculative", name, argv, {"exp.yaml": dump(data), **(files or {})}, ("exp.yaml",) + tuple(names))


spec_case(
    "draft-unknown", [("draft_model", "no_such_model")], ("scenarios.chat.speculative.draft_model", "no_such_model")
)
spec_case("draft-missing", [("draft_model", DELETE)], ("scenarios.chat.speculative.draft_model",))
spec_case("draft-tokens-zero", [("draft_tokens", 0)], ("scenarios.chat.speculative.draft_tokens",))
spec_case("draft-tokens-over-64", [("draft_tokens", 65)], ("scenarios.chat.speculative.draft_tokens",))
spec_case("draft-tokens-fraction", [("draft_tokens", 2.5)], ("scenarios.chat.speculative.draft_tokens",))
spec_case("acceptance-over-one", [("acceptance_rate", 1.5)], ("scenarios.chat.speculative.acceptance_rate",))
spec_case("acceptance-negative", [("acceptance_rate", -0.1)], ("scenarios.chat.speculative.acceptance_rate",))
spec_case("acceptance-nan", [("acceptance_rate", float("nan"))], ("scenarios.chat.speculative.acceptance_rate",))
spec_case("unknown-key", [("gamma", 4)], ("scenarios.chat.speculative.gamma",))
spec_case("draft-other-vocabulary", [("draft_model", "gpt2")], ("scenarios.chat.speculative.draft_model", "vocab"))
spec_case(
    "draft-path-bad-model",
    [("draft_model", "model.yaml")],
    ("model.yaml", "num_layers"),
    files={"model.yaml": dump(mut(MODEL, ("num_layers", 0)))},
)
exp_case(
    "speculative-not-mapping", mut(EXP, ("scenarios.chat.speculative", 4)), ("exp.yaml", "scenarios.chat.speculative")
)
case(
    "speculative",
    "pipeline-parallel",
    RUN,
    {
        "exp.yaml": dump(mut(EXP_SYS, ("scenarios.chat.speculative", dict(SPEC)))),
        "sys.yaml": dump(mut(SYS, ("parallelism", {"tp": 1, "pp": 2}))),
    },
    ("parallelism.pp",),
)
spec_case(
    "serve-draft-unknown",
    [("draft_model", "no_such_model")],
    ("speculative.draft_model", "no_such_model"),
    exp=SERVE,
    argv=SERVE_ARGV,
)

# ---------------------------------------------------------------- mapper.options of the ianus policy

IANUS = yaml.safe_load(builtin("systems", "ianus"))
EXP_IANUS = mut(EXP_SYS, ("models", ["gpt2"]))


def ianus_case(name, options, names, exp=EXP_IANUS):
    sysd = mut(IANUS, ("mapper.options", options))
    case("ianus", name, RUN, {"exp.yaml": dump(exp), "sys.yaml": dump(sysd)}, tuple(names))


ianus_case("placement-unknown", {"placement": "gpu"}, ("sys.yaml", "mapper.options.placement"))
ianus_case("draft-placement-unknown", {"draft_placement": "npu"}, ("sys.yaml", "mapper.options.draft_placement"))
ianus_case(
    "draft-placement-without-speculative", {"draft_placement": "pim"}, ("sys.yaml", "mapper.options.draft_placement")
)
ianus_case("option-typo", {"placment": "auto"}, ("mapper.options",))
ianus_case("schedule-not-bool", {"schedule": "yes"}, ("mapper.options.schedule",))
ianus_case("exclusion-without-schedule", {"schedule": False, "exclusion": True}, ("mapper.options",))
ianus_case("options-list", ["auto"], ("mapper.options",))
case(
    "ianus",
    "one-pool-only",
    RUN,
    {"exp.yaml": dump(EXP_IANUS), "sys.yaml": dump(mut(IANUS, ("devices.pim", DELETE)))},
    ("sys.yaml", "devices"),
)

# ---------------------------------------------------------------- compression: and systolic: of CXL-PNM devices

NDP = yaml.safe_load(builtin("hardware", "cxl_ndp_lpddr5x"))
SANGAM = yaml.safe_load(builtin("hardware", "sangam_chiplet"))
ATTACC_STACK = yaml.safe_load(builtin("hardware", "attacc_hbm3_pim_stack"))
SYS_PNM = {
    "name": "pnm1",
    "devices": {"pnm": {"hardware": "pnm.yaml", "count": 1}},
    "parallelism": {"tp": 1},
    "mapper": {"policy": "cxl_pnm"},
}


def pnm_case(surface, name, hw, names, exp=EXP_SYS):
    case(
        surface,
        name,
        RUN,
        {"exp.yaml": dump(exp), "sys.yaml": dump(SYS_PNM), "pnm.yaml": dump(hw)},
        ("pnm.yaml",) + tuple(names),
    )


pnm_case("compression", "engine-unknown", mut(NDP, ("compression.engine", "zstd")), ("compression.engine",))
pnm_case("compression", "ratio-zero", mut(NDP, ("compression.ratio", 0)), ("compression.ratio",))
pnm_case("compression", "ratio-over-one", mut(NDP, ("compression.ratio", 1.5)), ("compression.ratio",))
pnm_case("compression", "ratio-word", mut(NDP, ("compression.ratio", "high")), ("compression.ratio",))
pnm_case("compression", "ratio-nan", mut(NDP, ("compression.ratio", float("nan"))), ("compression.ratio",))
pnm_case("compression", "kv-ratio-zero", mut(NDP, ("compression.kv_ratio", 0)), ("compression.kv_ratio",))
pnm_case("compression", "kv-ratio-over-one", mut(NDP, ("compression.kv_ratio", 1.5)), ("compression.kv_ratio",))
pnm_case("compression", "kv-ratio-word", mut(NDP, ("compression.kv_ratio", "high")), ("compression.kv_ratio",))
pnm_case("compression", "kv-ratio-nan", mut(NDP, ("compression.kv_ratio", float("nan"))), ("compression.kv_ratio",))
pnm_case(
    "compression",
    "kv-ratio-measured-fp8-kv",
    mut(NDP, ("compression.ratio", 0.8), ("compression.kv_ratio", "measured")),
    ("compression.kv_ratio", "fp8"),
    exp=mut(EXP_SYS, ("scenarios.chat.kv_dtype", "fp8")),
)
pnm_case("compression", "kv-not-bool", mut(NDP, ("compression.kv", "sometimes")), ("compression.kv",))
pnm_case("compression", "unknown-key", mut(NDP, ("compression.level", 9)), ("compression.level",))
pnm_case("compression", "not-mapping", mut(NDP, ("compression", True)), ("compression",))
pnm_case(
    "compression",
    "measured-fp8-kv",
    NDP,
    ("compression.ratio", "fp8"),
    exp=mut(EXP_SYS, ("scenarios.chat.kv_dtype", "fp8")),
)
pnm_case("compression", "on-attacc-device", mut(ATTACC_STACK, ("compression", {"engine": "cxl_ndp"})), ("compression",))
pnm_case("systolic", "arrays-zero", mut(SANGAM, ("systolic.arrays", 0)), ("systolic.arrays",))
pnm_case("systolic", "rows-fraction", mut(SANGAM, ("systolic.rows", 1.5)), ("systolic.rows",))
pnm_case("systolic", "clock-nan", mut(SANGAM, ("systolic.clock_mhz", float("nan"))), ("systolic.clock_mhz",))
pnm_case("systolic", "clock-inf", mut(SANGAM, ("systolic.clock_mhz", float("inf"))), ("systolic.clock_mhz",))
pnm_case(
    "systolic", "sram-zero", mut(SANGAM, ("systolic.sram_mb", 0)), ("systolic.sram_mb", "positive number")
)  # a float field
pnm_case("systolic", "arrays-missing", mut(SANGAM, ("systolic.arrays", DELETE)), ("systolic.arrays",))
pnm_case("systolic", "unknown-key", mut(SANGAM, ("systolic.columns", 128)), ("systolic.columns",))
pnm_case("systolic", "with-pu-tflops", mut(SANGAM, ("pu.tflops", 16)), ("pu.tflops",))
pnm_case("systolic", "on-attacc-device", mut(ATTACC_STACK, ("systolic", SANGAM["systolic"])), ("systolic",))

CASES.append(
    Case(
        "serving",
        "ianus-placement-unknown",
        SERVE_ARGV,
        {
            "exp.yaml": dump(mut(SERVE, ("systems", ["sys.yaml"]), ("models", ["gpt2"]))),
            "sys.yaml": dump(mut(IANUS, ("mapper.options", {"placement": "gpu"}))),
        },
        ("sys.yaml", "mapper.options.placement"),
    )
)

# ---------------------------------------------------------------- KV pool (serving.kv_pool) and flash KV tier

POOL = yaml.safe_load(builtin("hardware", "rdma_mooncake_pool"))
SERVE_POOL = mut(
    SERVE, ("serving.kv", {"prefix_caching": True}), ("serving.kv_pool", {"hardware": "rdma_mooncake_pool"})
)


def pool_case(name, pairs, names, pool=None):
    files = {"exp.yaml": dump(mut(SERVE_POOL, *pairs))}
    if pool is not None:
        files["pool.yaml"] = dump(pool)
    case("kv-pool", name, SERVE_ARGV, files, tuple(names))


pool_case("hardware-unknown", [("serving.kv_pool.hardware", "no_such_pool")], ("exp.yaml", "serving.kv_pool.hardware"))
pool_case("hardware-is-gpu", [("serving.kv_pool.hardware", "h100_sxm")], ("exp.yaml", "serving.kv_pool.hardware"))
pool_case("hardware-missing", [("serving.kv_pool.hardware", DELETE)], ("exp.yaml", "serving.kv_pool.hardware"))
pool_case("systems-unknown", [("serving.kv_pool.systems", ["no_such_system"])], ("exp.yaml", "serving.kv_pool.systems"))
pool_case("unknown-key", [("serving.kv_pool.size_gb", 1)], ("exp.yaml", "serving.kv_pool.size_gb"))
pool_case(
    "not-colocated",
    [
        ("serving.colocated", False),
        ("serving.disaggregation", [{"prefill": "h100_x1", "decode": "h100_x1", "link": "nvlink4"}]),
    ],
    ("exp.yaml", "serving", "colocated"),
)
for key, value in (
    ("capacity_gb", 0),
    ("hosts", 0),
    ("host_link_gbps", -1),
    ("access_latency_us", -1.0),
    ("lookup_rpc_us", float("nan")),
    ("pool_bandwidth_gbps", float("inf")),
    ("kind", "pool"),
    ("hosts", 1.5),
    ("energy_pj_per_byte", "cheap"),
    ("latency_us", 1.0),
):
    pool_case(
        f"file-{key.replace('_', '-')}-{str(value).replace('.', 'p')}",
        [("serving.kv_pool.hardware", "pool.yaml")],
        ("pool.yaml", key),
        pool=mut(POOL, (key, value)),
    )

FLASH = yaml.safe_load(builtin("hardware", "nand_tlc_ssd"))
SYS_FLASH = mut(yaml.safe_load(builtin("systems", "kvnand_h100_ssd")), ("devices.flash.hardware", "flash.yaml"))
for key, value in (
    ("channels", 0),
    ("dies_per_channel", -1),
    ("page_kb", float("nan")),
    ("t_read_us", float("inf")),
    ("ecc", "bch_magic"),
    ("pe_cycles", -5),
    ("capacity_gb", "big"),
    ("t_read", 50),
    ("planes_per_die", 2**63),
):
    case(
        "flash",
        f"{key.replace('_', '-')}-{str(value).replace('.', 'p')}",
        RUN,
        {"exp.yaml": dump(EXP_SYS), "sys.yaml": dump(SYS_FLASH), "flash.yaml": dump(mut(FLASH, (key, value)))},
        ("flash.yaml", key),
    )

dspec("org-not-mapping", mut(DRAM, ("org", 5)), ("org",))
dspec("timing-not-mapping", mut(DRAM, ("timing", [1, 2])), ("timing",))


# ---------------------------------------------------------------- reliability: keys the planner reads (attnsim plan)

for rname, pairs, rkey in (
    ("objective-unknown", [("reliability.objective", "cheapest")], "reliability.objective"),
    (
        "ecc-options-unknown",
        [("reliability.tiers.hbm.ecc_options", ["secded", "magic"])],
        "reliability.tiers.hbm.ecc_options",
    ),
    (
        "refresh-options-zero",
        [("reliability.tiers.hbm.refresh_options_ms", [64, 0])],
        "reliability.tiers.hbm.refresh_options_ms",
    ),
    (
        "refresh-options-nan",
        [("reliability.tiers.hbm.refresh_options_ms", [float("nan")])],
        "reliability.tiers.hbm.refresh_options_ms",
    ),
    (
        "refresh-ms-high-zero",
        [("reliability.tiers.hbm.refresh_ms", {"high": 0})],
        "reliability.tiers.hbm.refresh_ms.high",
    ),
    ("retention-anchor-lengths", [("reliability.tiers.hbm.errors.retention_anchor_s", [1.0, 10.0])], "tier hbm"),
    (
        "retention-anchor-decreasing",
        [("reliability.tiers.hbm.errors.retention_anchor_s", [20.0, 10.0, 1.0])],
        "tier hbm",
    ),
    ("residency-zero", [("reliability.residency_s", 0)], "reliability.residency_s"),
    ("quant-group-zero", [("reliability.quant_group", 0)], "reliability.quant_group"),
    (
        "ber-approx-over-one",
        [("reliability.tiers.hbm.errors.ber_approx", 2)],
        "reliability.tiers.hbm.errors.ber_approx",
    ),
    ("accuracy-slo-missing", [("reliability.accuracy_slo", {})], "reliability.accuracy_slo"),
    ("tiers-empty", [("reliability.tiers", {}), ("reliability.role_tiers", {})], "reliability"),
):
    case(
        "plan",
        f"reliability-{rname}",
        ("plan", "exp.yaml"),
        {"exp.yaml": dump(mut(EXP_REL, *pairs))},
        ("exp.yaml", rkey),
    )

sweep_case(
    "speculative-grid-without-draft", grid({"scenario.speculative.draft_tokens": [2, 4]}), ("scenario.speculative",)
)

for pname, dev, text, pnames in (
    ("newton-channel-beyond-device", "neupims_hbm2_pim", "GACT 0, 0, 0, 0\nGACT 40, 0, 0, 0\n", ("line 2", "ch")),
    ("newton-rank-beyond-field", "neupims_hbm2_pim", "GACT 0, 7, 0, 0\n", ("line 1", "rank")),
    ("newton-rank-beyond-device", "neupims_hbm2_pim", "GACT 0, 0, 0, 0\nGACT 0, 3, 0, 0\n", ("line 2", "rank")),
    ("newton-bank-group-beyond-device", "neupims_hbm2_pim", "GACT 0, 0, 15, 0\n", ("line 1", "bg")),
    ("cxl-pnm-dtype-unknown", "cxl_pnm_lpddr5x", "GEMV 1, 0, 0, 64, 64, FP7\nHALT\n", ("line 1",)),
    ("fimdram-jump-before-start", "fimdram_hbm2", "JUMP 5, 3\nEXIT\n", ("line 1",)),
    ("fimdram-no-exit", "fimdram_hbm2", "NOP 0\nNOP 0\n", ()),
):
    case("pim", pname, ("pim", "run", "p.s", "--device", dev), {"p.s": text}, ("p.s",) + pnames)

assert len({c.id for c in CASES}) == len(CASES), "duplicate case ids"
