"""Experiments: what to run (systems x models x scenarios), loaded into one ConfigTree.

Loading order: experiment YAML -> referenced models, scenarios, systems -> the
hardware those systems reference. ``--set`` overrides are applied to the tree and
then every section is validated, so an override error names the file the value
would have come from.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from attnsim.config import (ConfigError, ConfigTree, Schema, display_path, find_config, load_yaml,
                            validate)
from attnsim.hwmodels import registry
from attnsim.hwmodels.system import SystemSpec
from attnsim.workloads.model import ModelSpec
from attnsim.workloads.scenario import Scenario

DEFAULT_EXPERIMENT = "default"


class GenerationSpec(Schema):
    """How a whole generation is stepped: every decode step, or sampled steps + integration."""

    mode: Literal["exact", "sampled"] = "exact"
    samples: PositiveInt = Field(9, description="decode steps simulated in 'sampled' mode (>= 2)")

    @model_validator(mode="after")
    def _samples(self):
        if self.mode == "sampled" and self.samples < 2:
            raise ValueError("sampled mode needs samples >= 2")
        return self


class ExperimentSpec(Schema):
    name: str
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
            raise ValueError(f"baseline '{self.baseline}' is not one of the experiment's systems ({', '.join(self.systems)})")
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


def _ref_name(ref: str) -> str:
    return Path(ref).stem if ref.endswith((".yaml", ".yml", ".json")) else ref


def _load_model_dict(ref: str, base: Optional[Path]) -> tuple[dict, str]:
    if ref.endswith(".json"):
        from attnsim.workloads.hf import model_from_hf_config
        path = find_config("models", ref, base)
        return model_from_hf_config(path).model_dump(), str(path)
    path = find_config("models", ref, base)
    return load_yaml(path), display_path(path)


def load_tree(path: Optional[str | Path] = None, sets: Optional[list[str]] = None) -> tuple[ConfigTree, Optional[Path]]:
    """Read an experiment and everything it references into a ConfigTree (unvalidated).

    ``experiment.*`` overrides in ``sets`` are applied before references are resolved
    (so ``experiment.systems=[dgx_h100]`` changes what is loaded); apply the rest with
    ``tree.apply_sets``.
    """
    if path is None:
        src = find_config("experiments", DEFAULT_EXPERIMENT)
    else:
        src = find_config("experiments", str(path))
    exp = load_yaml(src)
    exp_file = display_path(src)
    tree = ConfigTree(experiment=exp, files={("experiment", None): exp_file})
    tree.apply_sets([s for s in sets or () if s.split("=", 1)[0].split(".")[0] == "experiment"])
    base = src.parent
    for key in ("systems", "models"):
        val = exp.get(key)
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise ConfigError("expected a list of names", file=exp_file, key=key)
    scen = exp.get("scenarios")
    if not isinstance(scen, dict) or not all(isinstance(v, dict) for v in scen.values()):
        raise ConfigError("expected a mapping of scenario name -> settings", file=exp_file, key="scenarios")
    for ref in exp["models"]:
        try:
            data, f = _load_model_dict(ref, base)
        except ConfigError as e:
            if e.file is None:
                raise ConfigError(e.message, file=exp_file, key="models") from None
            raise
        tree.models[_ref_name(ref)] = data
        tree.files[("models", _ref_name(ref))] = f
    for name, sc in scen.items():
        tree.scenarios[name] = dict(sc)
        tree.files[("scenarios", name)] = exp_file
    for ref in exp["systems"]:
        try:
            p = find_config("systems", ref, base)
        except ConfigError as e:
            raise ConfigError(e.message, file=exp_file, key="systems") from None
        sysd = load_yaml(p)
        sname = _ref_name(ref)
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
        name = _ref_name(str(ref))
        if name in tree.hardware:
            continue
        try:
            p = find_config("hardware", str(ref), base)
        except ConfigError as e:
            raise ConfigError(e.message, file=f, key=key) from None
        hw = load_yaml(p)
        tree.hardware[name] = hw
        tree.files[("hardware", name)] = display_path(p)
        # hardware may reference other hardware (e.g. a PIM device names its DRAM preset)
        for k in ("dram", "memory"):
            if isinstance(hw.get(k), str):
                pending.append((hw[k], display_path(p), k))


def validate_tree(tree: ConfigTree, source: Optional[Path] = None) -> Experiment:
    """Validate every section of the tree; raise ConfigError naming file and key."""
    exp_file = tree.file_of("experiment")
    spec = validate(ExperimentSpec, tree.experiment, file=exp_file)
    models = {n: validate(ModelSpec, d, file=tree.file_of("models", n)) for n, d in tree.models.items()}
    scenarios = {}
    for n, d in tree.scenarios.items():
        d = {"name": n, **d}
        scenarios[n] = validate(Scenario, d, file=exp_file, prefix=f"scenarios.{n}")
    systems = {}
    for n, d in tree.systems.items():
        systems[n] = validate(SystemSpec, d, file=tree.file_of("systems", n))
    for n, d in tree.hardware.items():
        f = tree.file_of("hardware", n)
        if not isinstance(d, dict) or "kind" not in d:
            raise ConfigError("missing required key", file=f, key="kind")
        validate(registry.schema_for(d["kind"], f), d, file=f)
    reliability = {}
    from attnsim.reliability_run import load_spec, merged_section
    for n, sc in scenarios.items():
        section = merged_section(spec.reliability, sc.reliability)
        prefix = "reliability" if sc.reliability is None else f"scenarios.{n}.reliability"
        reliability[n] = load_spec(section, exp_file, prefix) if section is not None else None
        if reliability[n] is not None:
            from attnsim.reliability_run import role_tiers
            for sname, sspec in systems.items():
                try:
                    role_tiers(reliability[n], sspec)
                except ConfigError as e:
                    raise ConfigError(f"{e.message} (system {sname})", file=exp_file, key=e.key) from None
    return Experiment(tree, spec, models, systems, scenarios, source, reliability)


def load_experiment(path: Optional[str | Path] = None, sets: Optional[list[str]] = None) -> Experiment:
    tree, src = load_tree(path, sets)
    tree.apply_sets([s for s in sets or () if s.split("=", 1)[0].split(".")[0] != "experiment"])
    return validate_tree(tree, src)
