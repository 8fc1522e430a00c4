"""Experiments: what to run (systems x models x scenarios), loaded into one ConfigTree.

Loading order: experiment YAML -> referenced models, scenarios, systems -> the
hardware those systems reference. ``--set`` overrides are applied to the tree and
then every section is validated, so an override error names the file the value
would have come from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from attnsim.core.config import (
    ALLOW_KEY,
    CONFIG_ROOT,
    ConfigError,
    ConfigTree,
    Plausible,
    Schema,
    display_path,
    file_allow_list,
    find_config,
    is_experiment_set,
    load_yaml,
    not_physical,
    plausible_keys,
    validate,
)
from attnsim.core.outputs import SafeName
from attnsim.hwmodels import registry
from attnsim.hwmodels.system import SystemSpec, ref_name
from attnsim.mapper.base import validate_options
from attnsim.workloads.limits import MAX_EXACT_DECODE_STEPS
from attnsim.workloads.model import ModelSpec
from attnsim.workloads.scenario import Scenario, context_window

DEFAULT_EXPERIMENT = "default"
DICT_FILE = "<dict>"  # the "file" of errors in an experiment given as a Python dict


class GenerationSpec(Schema):
    """How a whole generation is stepped: every decode step, or sampled steps + integration."""

    plausible = {"samples": Plausible(1, 1 << 16, "decode steps integrated (workloads.limits.MAX_EXACT_DECODE_STEPS)")}

    mode: Literal["exact", "sampled"] = "exact"
    samples: PositiveInt = Field(9, description="decode steps simulated in 'sampled' mode (>= 2)")

    @model_validator(mode="after")
    def _samples(self):
        if self.mode == "sampled" and self.samples < 2:
            raise ValueError("sampled mode needs samples >= 2")
        if self.mode == "exact":
            self.refuse_unused(["samples"], "with mode: exact (every decode step is simulated)")
        return self


class ExperimentSpec(Schema):
    plausible = {"seed": not_physical("a random seed")}
    name: SafeName  # becomes results/<name>/: no path separators or '..' (attnsim.core.outputs)
    description: str = ""
    systems: list[str] = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    scenarios: dict[str, dict] = Field(min_length=1)
    baseline: Optional[str] = None
    generation: GenerationSpec = GenerationSpec()
    seed: int = 0
    reliability: Optional[dict[str, Any]] = None
    serving: Optional[dict[str, Any]] = None

    @model_validator(mode="after")
    def _baseline(self):
        if self.baseline is not None and self.baseline not in self.systems:
            raise ValueError(
                f"baseline '{self.baseline}' is not one of the experiment's systems ({', '.join(self.systems)})"
            )
        return self


@dataclass
class Experiment:
    """A validated experiment: the config tree and typed specs."""

    tree: ConfigTree
    spec: ExperimentSpec
    models: dict[str, ModelSpec]
    systems: dict[str, SystemSpec]
    scenarios: dict[str, Scenario]
    source: Optional[Path]
    reliability: dict = None  # scenario name -> ReliabilitySpec (or None): experiment section + scenario overrides


def _claim(seen: dict, name: str, ref: str, key: str, file: str, what: str) -> None:
    """Refuse two references that resolve to the same tree name (one would silently replace the other)."""
    if name in seen:
        other_key, other = seen[name]
        raise ConfigError(
            f"expected each {what} once, got {ref!r} named {name!r} like {other_key} ({other!r})", file=file, key=key
        )
    seen[name] = (key, ref)


def _load_model_dict(ref: str, base: Optional[Path]) -> tuple[dict, str]:
    if ref.endswith(".json"):
        from attnsim.workloads.hf import model_from_hf_config

        path = find_config("models", ref, base)
        return model_from_hf_config(path).model_dump(), str(path)
    path = find_config("models", ref, base)
    return load_yaml(path), display_path(path)


def load_tree(
    path: Optional[str | Path | dict] = None, sets: Optional[list[str]] = None
) -> tuple[ConfigTree, Optional[Path]]:
    """Read an experiment and everything it references into a ConfigTree (unvalidated).

    ``experiment.*`` overrides in ``sets`` are applied before references are resolved
    (so ``experiment.systems=[dgx_h100]`` changes what is loaded); apply the rest with
    ``tree.apply_sets``.
    """
    if isinstance(path, dict):  # attnsim.run(dict) (attnsim/api.py): the YAML's shape, references from the cwd
        src, exp, exp_file = None, copy.deepcopy(path), DICT_FILE
    else:
        src = find_config("experiments", DEFAULT_EXPERIMENT if path is None else str(path))
        exp, exp_file = load_yaml(src), display_path(src)
    tree = ConfigTree(experiment=exp, files={("experiment", None): exp_file})
    tree.apply_sets([s for s in sets or () if is_experiment_set(s)])
    base = src.parent if src is not None else None
    for key in ("systems", "models"):
        val = exp.get(key)
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise ConfigError("expected a list of names", file=exp_file, key=key)
    scen = exp.get("scenarios")
    if not isinstance(scen, dict) or not all(isinstance(v, dict) for v in scen.values()):
        raise ConfigError("expected a mapping of scenario name -> settings", file=exp_file, key="scenarios")
    seen: dict = {}
    for i, ref in enumerate(exp["models"]):
        try:
            data, f = _load_model_dict(ref, base)
        except ConfigError as e:
            if e.file is None:
                raise ConfigError(e.message, file=exp_file, key="models") from None
            raise
        # a HF config.json is known by its model's name (_name_or_path or folder), not the file stem
        name = str(data["name"]) if ref.endswith(".json") else ref_name(ref)
        _claim(seen, name, ref, f"models.{i}", exp_file, "model")
        if name != ref_name(ref):
            exp["models"][i] = name  # the resolved tree refers to models by name (the file is in tree.files)
        tree.models[name] = data
        tree.files[("models", name)] = f
    for name, sc in scen.items():
        tree.scenarios[name] = dict(sc)
        tree.files[("scenarios", name)] = exp_file
    seen = {}
    for i, ref in enumerate(exp["systems"]):
        try:
            p = find_config("systems", ref, base)
        except ConfigError as e:
            raise ConfigError(e.message, file=exp_file, key="systems") from None
        sysd = load_yaml(p)
        sname = ref_name(ref)
        _claim(seen, sname, ref, f"systems.{i}", exp_file, "system")
        tree.systems[sname] = sysd
        tree.files[("systems", sname)] = display_path(p)
    _load_hardware(tree, base)
    return tree, src


def _load_hardware(tree: ConfigTree, base: Optional[Path]) -> None:
    """Load every hardware config the systems reference (and those referenced by hardware)."""
    pending = []
    for sname, sysd in tree.systems.items():
        sfile = tree.file_of("systems", sname)
        for section in ("devices", "links"):
            entries = sysd.get(section) or {}
            if not isinstance(entries, dict):
                raise ConfigError("expected a mapping", file=sfile, key=section)
            for role, ent in entries.items():
                if not isinstance(ent, dict) or "hardware" not in ent:
                    raise ConfigError("missing required key", file=sfile, key=f"{section}.{role}.hardware")
                pending.append((ent["hardware"], sfile, f"{section}.{role}.hardware"))
    while pending:
        ref, f, key = pending.pop()
        name = ref_name(str(ref))
        try:  # a relative path is relative to the file that names it, else to the experiment
            p = find_config("hardware", str(ref), _dir_of(f))
        except ConfigError:
            try:
                p = find_config("hardware", str(ref), base)
            except ConfigError as e:
                raise ConfigError(e.message, file=f, key=key) from None
        if name in tree.hardware:
            had = tree.files.get(("hardware", name))
            if had is not None and not _same_file(had, p):
                raise ConfigError(
                    f"expected one hardware file per name, got {ref!r} named {name!r} like {had!r}", file=f, key=key
                )
            continue
        hw = load_yaml(p)
        registry.check_ranges(hw, display_path(p))  # the file's ranges hold its own values
        registry.split_choices(hw, display_path(p))  # its choices: legal values other than its own
        tree.hardware[name] = hw
        tree.files[("hardware", name)] = display_path(p)
        # hardware may reference other hardware (e.g. a PIM device names its DRAM preset)
        for k in ("dram", "memory"):
            if isinstance(hw.get(k), str):
                pending.append((hw[k], display_path(p), k))


def _dir_of(shown: str) -> Optional[Path]:
    """Folder of a file known by its display_path (a built-in relative name or a path)."""
    for p in (Path(shown), CONFIG_ROOT / shown):
        if p.is_file():
            return p.parent
    return None


def _system_spec(d: dict, tree: ConfigTree, sfile: str) -> SystemSpec:
    """A system dict of the tree validated (its ``choices:`` block set aside): schema, hardware references,
    mapper policy, options and attention placement."""
    spec = validate(SystemSpec, {k: v for k, v in d.items() if k != registry.CHOICES_KEY}, file=sfile)
    _check_system_refs(spec, tree, sfile)
    validate_options(spec.mapper.policy, spec.mapper.options, file=sfile, attention_on=spec.mapper.attention_on)
    return spec


def _system_value(spec: SystemSpec, key: str):
    """The value of a dotted key of a validated system (``mapper.options.<name>``: the policy's default when
    the file does not set it; a key the file does not reach: None)."""
    d = spec.model_dump(by_alias=True)
    d["mapper"]["options"] = validate_options(spec.mapper.policy, spec.mapper.options)
    for part in key.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _check_system_build(spec: SystemSpec, tree: ConfigTree, sfile: str) -> None:
    """The checks run_experiment makes once a system is built, for a system given as an alternative: the compute
    pool's parallelism and the device behind ``mapper.attention_on``."""
    from attnsim.hwmodels.system import build_system, check_parallelism
    from attnsim.mapper.base import attention_roles, get_policy

    system = build_system(spec, tree.hardware, tree.file_of)
    role = next((r for r, p in system.pools.items() if p.model.kind in ("gpu", "npu")), None)
    if role is not None and not getattr(get_policy(spec.mapper.policy), "own_compute_pool_check", False):
        check_parallelism(spec, role, sfile)
    if spec.mapper.attention_on is not None:
        attention_roles(system, spec.mapper.policy, spec.mapper.attention_on, file=sfile)


def system_choices(tree: ConfigTree, name: str, own_differs: bool = True) -> dict:
    """{dotted key: (value in use, ChoiceSpec)} of a system file's ``choices:`` block: settings of the system
    (attention placement ``mapper.attention_on``, the whole ``mapper``, a policy option ``mapper.options.<name>``)
    whose other plausible values the verdict-flip check re-runs, as a hardware file's (registry.check_choices,
    the same check): each alternative must make a legal system (schema, references, mapper, the built system's
    checks) and, on load (``own_differs``, the file as read), differ from the system's own value."""
    d = tree.systems[name]
    if not isinstance(d, dict) or registry.CHOICES_KEY not in d:
        return {}
    sfile = tree.file_of("systems", name)
    spec = _system_spec(d, tree, sfile)
    rest = {k: v for k, v in d.items() if k != registry.CHOICES_KEY}
    keys = registry.field_keys(SystemSpec)
    opts = validate_options(spec.mapper.policy, spec.mapper.options)

    def known(key: str) -> bool:
        return key in keys or (key.startswith("mapper.options.") and key.count(".") == 2)

    def legal(key: str, v) -> None:
        from attnsim.core.config import set_dotted

        trial = copy.deepcopy(rest)
        set_dotted(trial, key.split("."), v, create=True)
        _check_system_build(_system_spec(trial, tree, sfile), tree, sfile)

    out = registry.check_choices(
        d[registry.CHOICES_KEY],
        sfile,
        known,
        f"a key of a system ({', '.join(keys)}, mapper.options.<name>: {', '.join(opts) or 'none'})",
        lambda key: _system_value(spec, key),
        legal,
        own_differs,
    )
    return {k: (_system_value(spec, k), c) for k, c in out.items()}


def _check_system_refs(sspec: SystemSpec, tree: ConfigTree, file: str) -> None:
    """Every hardware a system names must be in the tree (a --set cannot load a new file) and of a
    kind its place takes: a device pool a device (not a link or a DRAM preset), a link a link."""
    for section, entries in (("devices", sspec.devices), ("links", sspec.links)):
        for role, ent in entries.items():
            key = f"{section}.{role}.hardware"
            hw = tree.hardware.get(ref_name(ent.hardware))
            if hw is None:
                raise ConfigError(
                    f"expected hardware loaded with the experiment ({', '.join(sorted(tree.hardware))}), "
                    f"got {ent.hardware!r}",
                    file=file,
                    key=key,
                )
            kind = hw.get("kind") if isinstance(hw, dict) else None
            if not isinstance(kind, str):
                continue  # the hardware file's own validation names it
            if section == "links" and kind != "link":
                raise ConfigError(
                    f"expected a hardware config of kind link, got {ent.hardware!r} of kind {kind!r}",
                    file=file,
                    key=key,
                )
            # not device pools: links, DRAM specs, and the shared KV pool tier (serving.kv_pool.hardware; as a
            # pool no policy would place anything on it, so it would be accepted and ignored)
            not_devices = ("link", "dram", "kv_pool")
            if section == "devices" and kind in not_devices:
                hint = " (a kv_pool is a serving tier: serving.kv_pool.hardware)" if kind == "kv_pool" else ""
                raise ConfigError(
                    f"expected a device (kind {', '.join(k for k in registry.kinds() if k not in not_devices)}), "
                    f"got {ent.hardware!r} of kind {kind!r}{hint}",
                    file=file,
                    key=key,
                )


def _check_scenarios(spec: ExperimentSpec, models: dict, scenarios: dict, tree: ConfigTree, file: str) -> None:
    """Per scenario: exact decode steps within MAX_EXACT_DECODE_STEPS; per model x scenario: prompt +
    output within the model's context window (workloads.scenario.context_window)."""
    for n, sc in scenarios.items():
        if sc.speculative is not None:  # the draft loads and shares each target's vocabulary
            from attnsim.workloads.speculative import check_pair
            from attnsim.workloads.trace import param_count

            for model in models.values():
                draft = check_pair(model, sc.speculative, file=file, key=f"scenarios.{n}.speculative")
                d, t = param_count(draft), param_count(model)
                if d > t:  # each draft token would cost more than a target step: speculation only slows decoding
                    raise ConfigError(
                        f"expected a draft no larger than the target ({model.name}: {t / 1e9:.3g} B "
                        f"parameters), got {draft.name} with {d / 1e9:.3g} B",
                        file=file,
                        key=f"scenarios.{n}.speculative.draft_model",
                    )
        if spec.generation.mode == "exact" and sc.output_len > MAX_EXACT_DECODE_STEPS:
            raise ConfigError(
                f"expected at most {MAX_EXACT_DECODE_STEPS} decode steps with generation.mode exact "
                f"(use mode: sampled), got {sc.output_len}",
                file=file,
                key=f"scenarios.{n}.output_len",
            )
        for mname, model in models.items():
            ok, _ = context_window(model, sc)
            if not ok:
                plen = int(sc.prompt_lens().max())
                key = f"scenarios.{n}.{'prompt_len' if sc.context_lens is None else 'context_lens'}"
                raise ConfigError(
                    f"expected prompt + output_len <= {model.max_positions} (the positions of model {mname}, "
                    f"{tree.file_of('models', mname)}; or set scenarios.{n}.beyond_max_position: allow), "
                    f"got {plen} + {sc.output_len} = {plen + sc.output_len}",
                    file=file,
                    key=key,
                )


def _same_file(shown: str, p: Path) -> bool:
    """Is ``shown`` (a display_path: built-in relative name or a path) the file ``p``?"""
    if shown == display_path(p):
        return True
    return any(q.is_file() and q.resolve() == p.resolve() for q in (Path(shown), CONFIG_ROOT / shown))


def experiment_allow(tree: ConfigTree, serving_schema=None) -> list[str]:
    """The experiment file's ``allow_out_of_range:`` keys (dotted from the file's top: ``scenarios.s.batch_size``,
    ``serving.trace.cv``, ``reliability.temperature_c``, ``generation.samples``); each names a number field.
    ``serving.`` keys are checked against ``serving_schema`` when the serve study passes its ServingSpec (a run
    has no serving section: attnsim run refuses one)."""
    exp_file = tree.file_of("experiment")
    keys = file_allow_list(tree.experiment, exp_file)
    from attnsim.hwmodels.reliability.spec import ReliabilitySpec

    known = set(plausible_keys(ExperimentSpec)) | set(plausible_keys(ReliabilitySpec, "reliability."))
    if serving_schema is not None:
        known |= set(plausible_keys(serving_schema, "serving."))
    scen = set(plausible_keys(Scenario))
    for k in keys:
        parts = k.split(".")
        if (
            k in known
            or (serving_schema is None and parts[0] == "serving")
            or (len(parts) > 2 and parts[0] == "scenarios" and ".".join(parts[2:]) in scen)
            or (len(parts) > 3 and parts[0] == "scenarios" and parts[2] == "reliability")
        ):
            continue
        raise ConfigError(
            f"expected a number field of this file (scenarios.<name>.batch_size, serving.trace.cv, ...), got {k!r}",
            file=exp_file,
            key=ALLOW_KEY,
        )
    return keys


def validate_tree(tree: ConfigTree, source: Optional[Path] = None) -> Experiment:
    """Validate every section of the tree; raise ConfigError naming file and key."""
    exp_file = tree.file_of("experiment")
    allow = experiment_allow(tree)
    spec = validate(
        ExperimentSpec, {k: v for k, v in tree.experiment.items() if k != ALLOW_KEY}, file=exp_file, allow=allow
    )
    models = {n: validate(ModelSpec, d, file=tree.file_of("models", n)) for n, d in tree.models.items()}
    scenarios = {}
    for n, d in tree.scenarios.items():
        d = {"name": n, **d}
        scenarios[n] = validate(Scenario, d, file=exp_file, prefix=f"scenarios.{n}", allow=allow)
    systems = {n: _system_spec(d, tree, tree.file_of("systems", n)) for n, d in tree.systems.items()}
    _check_scenarios(spec, models, scenarios, tree, exp_file)
    for n, d in tree.hardware.items():
        f = tree.file_of("hardware", n)
        if not isinstance(d, dict) or "kind" not in d:
            raise ConfigError("missing required key", file=f, key="kind")
        registry.validate_hardware(d, file=f)  # a ranges: block (attnsim sensitivity) is checked and set aside
    reliability = {}
    from attnsim.sim.reliability_run import load_spec, merged_section

    for n, sc in scenarios.items():
        section = merged_section(spec.reliability, sc.reliability)
        prefix = "reliability" if sc.reliability is None else f"scenarios.{n}.reliability"
        reliability[n] = load_spec(section, exp_file, prefix, allow) if section is not None else None
        if reliability[n] is not None:
            from attnsim.sim.reliability_run import role_tiers

            for sname, sspec in systems.items():
                try:
                    role_tiers(reliability[n], sspec)
                except ConfigError as e:
                    raise ConfigError(f"{e.message} (system {sname})", file=exp_file, key=e.key) from None
    return Experiment(tree, spec, models, systems, scenarios, source, reliability)


def load_tree_with_sets(
    path: Optional[str | Path | dict] = None, sets: Optional[list] = None, extend=None
) -> tuple[ConfigTree, Optional[Path]]:
    """:func:`load_tree` with every override of ``sets`` applied: ``experiment.*`` before the configs are
    loaded (so ``experiment.models=[...]`` loads those models), the rest after. The one path of ``attnsim run
    --set`` and of a sweep file's ``set:`` (``KEY=VALUE`` texts or ``(path, value)`` pairs). ``extend(tree,
    src)``: loads more configs (a sweep's swept systems and models) before the other overrides apply."""
    tree, src = load_tree(path, sets)
    if extend is not None:
        extend(tree, src)
    for n in tree.systems:  # a system file's choices: legal values other than its own (the file as read)
        system_choices(tree, n)
    tree.apply_sets([s for s in sets or () if not is_experiment_set(s)])
    return tree, src


def load_experiment(path: Optional[str | Path | dict] = None, sets: Optional[list[str]] = None) -> Experiment:
    return validate_tree(*load_tree_with_sets(path, sets))
