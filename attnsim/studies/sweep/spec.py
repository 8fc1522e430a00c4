"""Sweep files: which base experiment, which config keys to vary, and how (grid / zip / random).

A sweep YAML::

    name: example
    base: default                 # experiment name or path (relative to the sweep file)
    set: {experiment.generation.mode: sampled}      # fixed overrides for every point
    parameters:                   # blocks; the points are the cross product of all blocks
      - grid:                     # cross product of its keys
          system: [h100_x1, dgx_h100]                # shorthand: pick one system per point
          scenario.batch_size: [1, 8, 64]            # 'scenario.' = the point's scenario
          scenario.prompt_len: {start: 512, stop: 4096, factor: 2}
      - zip: {model.num_layers: [16, 32], model.hidden_size: [2048, 4096]}   # element-wise
      - random: {samples: 10, seed: 1, params: {hardware.h100_sxm.hbm_gbps: {uniform: [2000, 4000]}}}

Every point is exactly one run (one system x one model x one scenario). The shorthands ``system``,
``model`` and ``scenario`` select one entry (systems and models may name configs outside the base
experiment; scenarios must be the base experiment's); a list of the base experiment that no block
varies becomes an implicit outer axis. ``system.``/``model.``/``scenario.`` key prefixes address the
point's selected entry; all other keys are ConfigTree dotted keys (``hardware.<name>.<field>`` ...).

Value forms: a list; a range ``{start, stop, step}`` (stop included when hit), ``{start, stop, num,
scale: linear|log}``, ``{start, stop, factor}`` (geometric, stop included when hit). Random
distributions: ``{uniform: [lo, hi]}``, ``{loguniform: [lo, hi]}``, ``{randint: [lo, hi]}``
(inclusive), ``{choice: [...]}``; drawn with numpy ``default_rng(seed)`` in key order.

Sizes: a sweep has at most ``MAX_POINTS`` (10^6) points; ranges, grids, random blocks and their cross
product are counted before anything is expanded, and a larger sweep is refused with the count.

A point's key is a hash of its resolved config (the ConfigTree restricted to its system, model,
scenario and their hardware); points that resolve to the same config (a parameter that does not affect
them) are run once. Points are validated before anything runs; invalid ones are reported with their
parameters and the rest go on.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Optional, Union

import numpy as np
import yaml
from pydantic import Discriminator, Field, PositiveInt, Tag, model_validator

from attnsim.core.config import (
    ConfigError,
    ConfigTree,
    Schema,
    display_path,
    find_config,
    load_yaml,
    not_physical,
    parse_set,
    set_dotted,
    set_items,
    validate,
)
from attnsim.core.outputs import RelativePath, SafeName
from attnsim.hwmodels.system import ref_name
from attnsim.sim.results import json_default as _json_default

SHORTHANDS = ("system", "model", "scenario")
MAX_POINTS = 1_000_000  # points of one sweep (and values of one range / samples of one block); counted first
_SECTION_OF = {"system": "systems", "model": "models", "scenario": "scenarios"}
_TREE_SECTIONS = ("experiment", "models", "systems", "hardware", "scenarios")
_PICKED = {f"experiment.{sec}": s for s, sec in _SECTION_OF.items()}  # varied by the shorthands only


# ---------------------------------------------------------------- schema


class RangeSpec(Schema):
    """An inclusive range: ``step`` (arithmetic), ``num`` (+``scale``) or ``factor`` (geometric)."""

    plausible = {"*": not_physical("a sweep axis; each value is checked where it is set")}

    start: float
    stop: float
    step: Optional[float] = Field(None, gt=0)
    num: Optional[PositiveInt] = None
    factor: Optional[float] = Field(None, gt=1)
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("step", "num", "factor") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a range needs exactly one of step, num, factor")
        if self.stop < self.start:
            raise ValueError(f"stop ({self.stop}) is below start ({self.start})")
        if (self.factor or self.scale == "log") and self.start <= 0:
            raise ValueError("geometric/log ranges need start > 0")
        return self

    def count(self) -> float:
        """Number of values (computed, nothing allocated; may be inf)."""
        if self.step is not None:
            span = (self.stop - self.start) / self.step
            return math.floor(span + 1e-9) + 1 if math.isfinite(span) else math.inf
        if self.factor is not None:
            span = math.log(self.stop / self.start) / math.log(self.factor) if self.stop > 0 else math.inf
            return math.floor(span + 1e-9) + 1 if math.isfinite(span) else math.inf
        return self.num

    def values(self, ints: bool) -> list:
        if self.step is not None:
            n = int(math.floor((self.stop - self.start) / self.step + 1e-9)) + 1
            v = [self.start + i * self.step for i in range(n)]
        elif self.factor is not None:
            v, x = [], self.start
            while x <= self.stop * (1 + 1e-12):
                v.append(x)
                x *= self.factor
        elif self.scale == "log":
            v = list(np.geomspace(self.start, self.stop, self.num))
        else:
            v = list(np.linspace(self.start, self.stop, self.num))
        if ints:
            return [int(round(x)) for x in v]
        return [float(x) for x in v]


Values = Annotated[
    Union[Annotated[RangeSpec, Tag("range")], Annotated[list[Any], Tag("list")]],
    Discriminator(lambda v: "range" if isinstance(v, (dict, RangeSpec)) else "list"),
]


class Distribution(Schema):
    plausible = {"*": not_physical("a sweep axis; each sampled value is checked where it is set")}
    uniform: Optional[tuple[float, float]] = None
    loguniform: Optional[tuple[float, float]] = None
    randint: Optional[tuple[int, int]] = None
    choice: Optional[list[Any]] = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("uniform", "loguniform", "randint", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a distribution needs exactly one of uniform, loguniform, randint, choice")
        lohi = getattr(self, given[0]) if given[0] != "choice" else None
        if lohi is not None and lohi[1] < lohi[0]:
            raise ValueError(f"{given[0]}: high ({lohi[1]}) is below low ({lohi[0]})")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise ValueError("loguniform needs low > 0")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> list:
        if self.uniform is not None:
            return [float(x) for x in rng.uniform(*self.uniform, size=n)]
        if self.loguniform is not None:
            lo, hi = np.log(self.loguniform)
            return [float(x) for x in np.exp(rng.uniform(lo, hi, size=n))]
        if self.randint is not None:
            return [int(x) for x in rng.integers(self.randint[0], self.randint[1] + 1, size=n)]
        idx = rng.integers(0, len(self.choice), size=n)
        return [self.choice[i] for i in idx]


class RandomBlock(Schema):
    plausible = {"*": not_physical("sample count and seed of a sweep")}
    samples: PositiveInt
    seed: int = 0
    params: dict[str, Distribution] = Field(min_length=1)


class Block(Schema):
    """One block of parameters: exactly one of ``grid``, ``zip``, ``random``."""

    grid: Optional[dict[str, Values]] = None
    zip: Optional[dict[str, Values]] = None
    random: Optional[RandomBlock] = None

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("grid", "zip", "random") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a parameter block needs exactly one of grid, zip, random")
        d = self.grid if self.grid is not None else self.zip
        if d is not None and not d:
            raise ValueError("a grid/zip block needs at least one key")
        return self


class DaskJobqueue(Schema):
    """dask-jobqueue cluster: ``kind`` picks SLURMCluster/PBSCluster; the rest are its keyword arguments."""

    plausible = {"*": not_physical("cluster job sizing of the sweep runner")}

    kind: Literal["slurm", "pbs"] = "slurm"
    jobs: PositiveInt = 1
    cores: PositiveInt = 1
    processes: Optional[PositiveInt] = Field(
        None,
        description="worker processes per job (default: cores, "
        "i.e. one thread per process: the point function holds the GIL)",
    )
    memory: str = "4GB"
    walltime: str = "01:00:00"
    queue: Optional[str] = None
    account: Optional[str] = None
    job_extra_directives: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="any other keyword arguments of the "
        "cluster class (job_script_prologue, local_directory, interface, ...)",
    )

    @model_validator(mode="after")
    def _no_repeats(self):
        both = sorted(set(self.options) & (set(type(self).model_fields) - {"options"}))
        if both:
            raise ValueError(f"options repeats named keys {both}: set them directly")
        return self


class DaskSpec(Schema):
    scheduler: Optional[str] = Field(None, description="address of a running scheduler (tcp://host:8786)")
    jobqueue: Optional[DaskJobqueue] = None


class SlurmSpec(Schema):
    """What ``attnsim sweep --emit-sbatch`` writes into the #SBATCH header."""

    plausible = {"*": not_physical("job sizing of the sweep runner")}

    shards: PositiveInt = 4
    cpus_per_task: PositiveInt = 4
    time: str = "01:00:00"
    mem: str = "8G"
    partition: Optional[str] = None
    account: Optional[str] = None
    extra: list[str] = Field(
        default_factory=list,
        description="more '#SBATCH ...' lines or shell lines (module load "
        "...), pasted into the job script as written: shell that runs on the cluster as you "
        "(--emit-sbatch lists them on stderr; read them in a sweep file you received)",
    )
    log_dir: Optional[str] = Field(None, description="folder of the task logs (default: logs/ beside the store)")
    venv: Optional[str] = Field(None, description="virtual environment activated by each task (default $VIRTUAL_ENV)")
    numba_cache_dir: Optional[str] = Field(
        None, description="shared Numba cache (default $NUMBA_CACHE_DIR, else .numba-cache beside the store)"
    )
    config_path: Optional[str] = Field(None, description="ATTNSIM_CONFIG_PATH of the tasks (default: the current one)")
    env: dict[str, str] = Field(default_factory=dict, description="more environment variables exported by each task")

    @model_validator(mode="after")
    def _env_names(self):
        import re

        bad = [k for k in self.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"env names must be shell variable names, got {bad}")
        return self


class FigureSpec(Schema):
    """One figure rendered after the sweep (``attnsim plot --all``)."""

    plausible = {"*": not_physical("figure axis limits")}

    recipe: str
    out: RelativePath = Field(
        description="output file (.pdf or .png; the other format is written beside it), "
        "relative to the figure folder, no '..'"
    )
    x: Optional[str] = None
    y: Optional[str] = None
    hue: Optional[str] = None
    z: Optional[str] = None
    where: dict[str, Any] = Field(default_factory=dict)
    width: Optional[Literal["single", "double"]] = Field(
        None, description="IEEE column (single) or text (double) width; unset: the recipe's (single, panels: double)"
    )
    title: Optional[str] = None
    labels: dict[str, str] = Field(
        default_factory=dict, description="display labels: name -> text (overrides attnsim.plots.labels.DEFAULT_LABELS)"
    )
    logx: Optional[bool] = Field(None, description="log (true) / linear (false) x axis; unset: the recipe's choice")
    logy: Optional[bool] = Field(None, description="log (true) / linear (false) y axis; unset: the recipe's choice")
    xlim: Optional[tuple[float, float]] = Field(None, description="[lo, hi] in the x column's stored units")
    ylim: Optional[tuple[float, float]] = Field(None, description="[lo, hi] in the y column's stored units")
    font: Optional[str] = Field(
        None,
        description="sans (bundled DejaVu Sans, default), serif (bundled DejaVu "
        "Serif), an installed family or a .ttf/.otf file",
    )
    baseline: Optional[str] = Field(None, description="ratio recipe: the system every line is divided by")
    replicate: Optional[str] = Field(
        None, description="line recipes: the seed/replicate column averaged over (mean +- standard deviation)"
    )
    components: Optional[list[str]] = Field(
        None,
        description="stacked recipes: the segments drawn (e.g. "
        "[pim_compute, dram_read_write]), the rest summed as 'other'",
    )

    @model_validator(mode="after")
    def _recipe(self):  # an unknown recipe or an option it does not read is refused (attnsim.core.plot_options)
        from attnsim.core.plot_options import DOC_RECIPES, check_limits, figure_options, recipe_problem

        opts = figure_options(self)
        problem = recipe_problem(self.recipe, opts)
        if self.recipe in DOC_RECIPES:
            what = "an attnsim plan document" if self.recipe == "plan_front" else "an attnsim serve results file"
            problem = f"{self.recipe} draws {what} (attnsim plot FILE --recipe {self.recipe})"
        if problem:
            raise ValueError(problem)
        for k in ("xlim", "ylim"):
            try:
                check_limits(opts[k], None, k)
            except ConfigError as exc:
                raise ValueError(f"{k}: {exc.message}") from None
        return self


class SweepSpec(Schema):
    plausible = {"*": not_physical("replications of a sweep")}
    name: SafeName  # becomes results/<name>.h5: no path separators or '..' (attnsim.core.outputs)
    description: str = ""
    base: str = "default"
    set: Union[dict[str, Any], list[str]] = Field(default_factory=dict)
    parameters: list[Block] = Field(default_factory=list)
    dask: Optional[DaskSpec] = None
    slurm: Optional[SlurmSpec] = None
    figures: list[FigureSpec] = Field(default_factory=list)
    replications: Optional[PositiveInt] = Field(
        None, le=1000, description="serving experiments: seeded traces per point (sets experiment.serving.replications)"
    )
    baseline: Optional[str] = Field(
        None,
        description="system every point is compared with (vs_baseline columns of "
        "the store); must be swept. Default: the base experiment's baseline when swept",
    )


# ---------------------------------------------------------------- helpers


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing and storing configs."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def config_key(tree_dict: dict) -> str:
    """The point key: first 16 hex digits of SHA-256 of the canonical resolved config."""
    return hashlib.sha256(canonical_json(tree_dict).encode()).hexdigest()[:16]


def _ref_name(ref) -> str:
    return ref_name(str(ref))


def _all_ints(vals) -> bool:
    return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals)


def check_count(n: float, file: str, key: str, what: str = "points") -> None:
    """Refuse a sweep (block, range) of more than MAX_POINTS points before anything is allocated."""
    if n > MAX_POINTS:
        got = f"{n:,}" if math.isfinite(n) else "an unbounded number"
        raise ConfigError(
            f"expected at most {MAX_POINTS:,} {what} per sweep (attnsim.studies.sweep.spec.MAX_POINTS), "
            f"got {got}; split the sweep" + ("" if what == "samples" else " or sample it with a random block"),
            file=file,
            key=key,
        )


def _block_values(v: Values, ints_hint: bool) -> list:
    if isinstance(v, RangeSpec):
        ints = ints_hint and all(float(x).is_integer() for x in (v.start, v.stop, v.step or 1, v.factor or 2))
        return v.values(ints)
    return list(v)


def _block_points(block: Block, file: str, where: str) -> tuple[list[str], list[tuple]]:
    """(keys, list of value tuples) of one block."""
    if block.random is not None:
        r = block.random
        check_count(r.samples, file, f"{where}.samples", "samples")
        rng = np.random.default_rng(r.seed)
        keys = list(r.params)
        cols = [r.params[k].draw(rng, r.samples) for k in keys]
        return keys, list(zip(*cols))
    d = block.grid if block.grid is not None else block.zip
    keys = list(d)
    cols = []
    for k in keys:
        if isinstance(d[k], RangeSpec):
            check_count(d[k].count(), file, f"{where}.{k}", "values")
        vals = _block_values(d[k], ints_hint=True)
        if not vals:
            raise ConfigError("no values", file=file, key=f"{where}.{k}")
        cols.append(vals)
    if block.grid is not None:
        check_count(math.prod(len(c) for c in cols), file, where)
        return keys, list(itertools.product(*cols))
    lens = {len(c) for c in cols}
    if len(lens) != 1:
        raise ConfigError(
            f"zipped lists differ in length ({', '.join(f'{k}: {len(c)}' for k, c in zip(keys, cols))})",
            file=file,
            key=where,
        )
    return keys, list(zip(*cols))


# ---------------------------------------------------------------- points


@dataclass
class Point:
    """One point of a sweep: its index in the expansion, parameters, resolved config and key."""

    index: int
    params: dict
    system: str
    model: str
    scenario: str
    tree: Optional[ConfigTree] = None
    key: str = ""
    error: Optional[str] = None  # set when the resolved config is invalid

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class Sweep:
    """A loaded sweep: spec, the base config tree and the expanded parameter axes (lazy)."""

    spec: SweepSpec
    source: Optional[Path]
    file: str
    base_tree: ConfigTree
    axes: list[tuple[list[str], list[tuple]]]  # (keys, rows) per axis; points = product of axes
    param_names: list[str]
    definition: dict = field(default_factory=dict)
    baseline: Optional[str] = None  # system name of the vs_baseline columns (attnsim.studies.sweep.baselines)

    # -- size and identity
    @property
    def n_points(self) -> int:
        n = 1
        for _, rows in self.axes:
            n *= len(rows)
        return n

    @property
    def sweep_id(self) -> str:
        """Identity of the sweep (what decides its points: definition + base config): shards of one sweep share it.
        Left out: ``baseline`` (ratio columns of the same points) and ``figures`` (drawn from the store), so editing
        either keeps resuming the store."""
        definition = {k: v for k, v in self.definition.items() if k not in ("baseline", "figures")}
        return config_key({"definition": definition, "base": self.base_tree.as_dict()})[:12]

    @property
    def accepted_ids(self) -> tuple[str, ...]:
        """Store ids this sweep resumes: :attr:`sweep_id`, and the id stores written before 2026-12-08 carry for the
        same file (``figures`` was part of the identity then)."""
        legacy = {k: v for k, v in self.definition.items() if k != "baseline"}
        return (self.sweep_id, config_key({"definition": legacy, "base": self.base_tree.as_dict()})[:12])

    def param_dtypes(self) -> dict[str, str]:
        """'i8', 'f8' or 'str' per parameter column (from every value it can take)."""
        vals: dict[str, list] = {k: [] for k in self.param_names}
        for keys, rows in self.axes:
            for j, k in enumerate(keys):
                vals[k].extend(r[j] for r in rows)
        out = {}
        for k, v in vals.items():
            if _all_ints(v):
                out[k] = "i8"
            elif all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v):
                out[k] = "f8"
            else:
                out[k] = "str"
        return out

    # -- expansion
    def params_at(self, index: int) -> dict:
        """Parameters of point ``index`` (row-major over the axes: the first axis varies slowest)."""
        if not 0 <= index < self.n_points:
            raise IndexError(index)
        params = {}
        rem = index
        sizes = [len(rows) for _, rows in self.axes]
        for (keys, rows), s, stride in zip(self.axes, sizes, _strides(sizes)):
            row = rows[(rem // stride) % s]
            params.update(zip(keys, row))
        return params

    def iter_params(self) -> Iterator[tuple[int, dict]]:
        for i, combo in enumerate(itertools.product(*[rows for _, rows in self.axes])):
            params = {}
            for (keys, _), row in zip(self.axes, combo):
                params.update(zip(keys, row))
            yield i, params

    def resolve(self, index: int, params: Optional[dict] = None, check: bool = True) -> Point:
        """Resolve one point: its restricted config tree, key, and (``check``) validation error if any."""
        from attnsim.sim.experiment import validate_tree

        params = self.params_at(index) if params is None else params
        base = self.base_tree
        exp = base.experiment
        sel = {
            "system": params.get("system", None),
            "model": params.get("model", None),
            "scenario": params.get("scenario", None),
        }
        for s in SHORTHANDS:
            if sel[s] is None:  # an implicit axis always exists when no block varies it
                sel[s] = _base_names(exp, s)[0]
            sel[s] = _ref_name(str(sel[s]))
        tree = base.copy()
        for k, v in params.items():
            if k in SHORTHANDS:
                continue
            path = _expand_key(k, sel)
            _set_value(tree, path, copy.deepcopy(v), file=self.file)
        restricted = _restrict(tree, sel["system"], sel["model"], sel["scenario"])
        pt = Point(
            index,
            dict(params),
            sel["system"],
            sel["model"],
            sel["scenario"],
            restricted,
            config_key(restricted.as_dict()),
        )
        if check:
            try:
                validate_tree(restricted)
            except ConfigError as e:
                pt.error = str(e)
        return pt


def _strides(sizes: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= s
    return list(reversed(out))


def _base_names(exp: dict, shorthand: str) -> list[str]:
    v = exp.get(_SECTION_OF[shorthand])
    if shorthand == "scenario":
        return list(v)
    return [_ref_name(x) for x in v]


def _expand_key(key: str, sel: dict) -> list[str]:
    parts = key.split(".")
    if parts[0] in SHORTHANDS:
        return [_SECTION_OF[parts[0]], sel[parts[0]]] + parts[1:]
    return parts


def _set_value(tree: ConfigTree, path: list[str], value: Any, file: str) -> None:
    """Set a typed value at a ConfigTree dotted path (same addressing as ``--set``)."""
    section = path[0]
    if section not in _TREE_SECTIONS:
        raise ConfigError(
            f"unknown section {section!r} (expected one of {', '.join(_TREE_SECTIONS)}, "
            f"or the shorthands {', '.join(SHORTHANDS)})",
            file=file,
            key=".".join(path),
        )
    if section == "experiment":
        if len(path) < 2:
            raise ConfigError("expected experiment.<key>", file=file, key=section)
        set_dotted(tree.experiment, path[1:], value, create=True)
        return
    table = getattr(tree, section)
    if len(path) < 3:
        raise ConfigError(f"expected {section}.<name>.<key>", file=file, key=".".join(path))
    if path[1] not in table:
        raise ConfigError(
            f"{section} '{path[1]}' is not part of this sweep (have: {', '.join(table) or 'none'})",
            file=file,
            key=".".join(path[:2]),
        )
    set_dotted(table[path[1]], path[2:], value, create=True)


def hardware_refs(tree: ConfigTree, system: str) -> list[str]:
    """Names of the hardware configs a system uses (transitively: PIM -> its DRAM preset)."""
    sysd = tree.systems[system]
    pending = [
        ent["hardware"]
        for sec in ("devices", "links")
        for ent in (sysd.get(sec) or {}).values()
        if isinstance(ent, dict) and "hardware" in ent
    ]
    out = []
    while pending:
        name = _ref_name(str(pending.pop()))
        if name in out or name not in tree.hardware:
            continue
        out.append(name)
        hw = tree.hardware[name]
        for k in ("dram", "memory"):
            if isinstance(hw, dict) and isinstance(hw.get(k), str):
                pending.append(hw[k])
    return sorted(out)


def _restrict(tree: ConfigTree, system: str, model: str, scenario: str) -> ConfigTree:
    """The tree of one run: one system, model, scenario and the hardware they use."""
    exp = dict(tree.experiment)
    exp["systems"] = [system]
    exp["models"] = [model]
    exp["scenarios"] = {scenario: tree.scenarios[scenario]}
    exp.pop("baseline", None)
    hw = hardware_refs(tree, system) + _serving_hardware(tree)
    out = ConfigTree(
        experiment=exp,
        models={model: tree.models[model]},
        systems={system: tree.systems[system]},
        hardware={h: tree.hardware[h] for h in hw},
        scenarios={scenario: tree.scenarios[scenario]},
    )
    keep = {("experiment", None), ("models", model), ("systems", system), ("scenarios", scenario)} | {
        ("hardware", h) for h in hw
    }
    out.files = {k: v for k, v in tree.files.items() if k in keep}
    return out


def _serving_hardware(tree: ConfigTree) -> list[str]:
    """Names of the link hardware a serving section names (kept in every point's tree)."""
    if tree.experiment.get("serving") is None:
        return []
    from attnsim.studies.serve.run import serving_hardware_refs, serving_spec

    try:
        refs = serving_hardware_refs(serving_spec(tree))
    except ConfigError:  # the point's own validation reports it
        return []
    return sorted({_ref_name(r) for r, _ in refs} & set(tree.hardware))


def _serving_base(tree: ConfigTree, spec: SweepSpec, base_dir: Optional[Path], file: str) -> None:
    """A serving base experiment makes every point a serving run (attnsim.studies.serve);
    check what a point can hold."""
    serving = tree.experiment.get("serving")
    if serving is None:
        if spec.replications is not None:
            raise ConfigError(
                "replications need a serving experiment (the base experiment has no serving: section)",
                file=file,
                key="replications",
            )
        return
    if isinstance(serving, dict) and serving.get("disaggregation"):
        raise ConfigError(
            "a sweep point is one system; sweeping a disaggregated serving experiment is not supported "
            "(use attnsim serve, or drop serving.disaggregation)",
            file=file,
            key="base",
        )
    if spec.replications is not None:
        set_dotted(tree.experiment, ["serving", "replications"], spec.replications, create=True)
    from attnsim.studies.serve.run import load_serving_hardware

    load_serving_hardware(tree, base_dir)


# ---------------------------------------------------------------- loading


def _extend_tree(tree: ConfigTree, systems: list[str], models: list[str], base_dir: Optional[Path], file: str) -> None:
    """Load systems/models named by shorthand values that the base experiment does not reference."""
    from attnsim.sim.experiment import _load_hardware, _load_model_dict, _same_file

    for ref in models:
        name = _ref_name(ref)
        if name in tree.models:
            _check_same(tree, "models", name, ref, base_dir, file, _same_file)
            continue
        try:
            data, f = _load_model_dict(str(ref), base_dir)
        except ConfigError as e:
            raise ConfigError(e.message, file=e.file or file, key=e.key or "parameters.model") from None
        tree.models[name] = data
        tree.files[("models", name)] = f
    for ref in systems:
        name = _ref_name(ref)
        if name in tree.systems:
            _check_same(tree, "systems", name, ref, base_dir, file, _same_file)
            continue
        try:
            p = find_config("systems", str(ref), base_dir)
        except ConfigError as e:
            raise ConfigError(e.message, file=file, key="parameters.system") from None
        tree.systems[name] = load_yaml(p)
        tree.files[("systems", name)] = display_path(p)
    _load_hardware(tree, base_dir)


def _check_same(tree: ConfigTree, section: str, name: str, ref, base_dir, file: str, same) -> None:
    """A shorthand value whose name the tree already holds must be that same file (else one would
    silently stand for the other)."""
    try:
        p = find_config(section, str(ref), base_dir)
    except ConfigError:
        return  # a built-in name already in the tree
    had = tree.files.get((section, name))
    if had is not None and not same(had, p):
        raise ConfigError(
            f"expected one {section[:-1]} file per name, got {str(ref)!r} named {name!r} like {had!r}",
            file=file,
            key=f"parameters.{section[:-1]}",
        )


def _fixed_sets(spec: "SweepSpec", extra_sets, file: str) -> tuple[list, set]:
    """The sweep file's ``set:`` then ``--set`` (``extra_sets``) as ``(path, value)`` pairs for
    :func:`attnsim.sim.experiment.load_tree_with_sets` (the same path as ``attnsim run --set``), and the keys
    that came from the file (their errors name it)."""
    if isinstance(spec.set, list):
        try:
            mine = [parse_set(s) for s in spec.set]
        except ConfigError as e:
            raise ConfigError(e.message, file=file, key="set") from None
    else:
        mine = [(k.split("."), v) for k, v in spec.set.items()]
    for path, _ in mine:
        if not all(path):
            raise ConfigError(
                "expected a dotted key like scenarios.chat.batch_size", file=file, key="set." + ".".join(path)
            )
        if path[0] in SHORTHANDS:
            raise ConfigError(
                "fixed overrides need full keys (e.g. scenarios.chat.batch_size)",
                file=file,
                key="set." + ".".join(path),
            )
    return mine + set_items(extra_sets), {".".join(p) for p, _ in mine}


def _set_conflicts(items, from_file: set, names: list[str], tree: ConfigTree, file: str) -> None:
    """Refuse a fixed override (``set:`` or ``--set``) of a key a parameter block also varies (the block's
    value would silently win at every point), naming both."""
    sels = [
        {s: n for s, n in zip(SHORTHANDS, combo)}
        for combo in itertools.product(*[list(getattr(tree, _SECTION_OF[s])) or [""] for s in SHORTHANDS])
    ]
    swept = {}
    for k in names:
        if k in SHORTHANDS:
            swept.setdefault(("experiment", _SECTION_OF[k]), k)
            continue
        for sel in sels:
            swept.setdefault(tuple(_expand_key(k, sel)), k)
    for path, _ in items:
        key = ".".join(path)
        for sp, param in swept.items():
            n = min(len(sp), len(path))
            if tuple(path[:n]) == sp[:n]:
                where = (file, "set." + key) if key in from_file else ("--set", key)
                raise ConfigError(
                    f"the sweep also varies {param!r} (parameters); a fixed override of the same key "
                    "would be overwritten at every point: drop one of them",
                    file=where[0],
                    key=where[1],
                )


def build_sweep(
    data: dict, file: str = "<sweep>", source: Optional[Path] = None, extra_sets: Optional[list[str]] = None
) -> Sweep:
    """Validate a sweep mapping and expand its axes (points stay lazy)."""
    from attnsim.sim.experiment import load_tree_with_sets

    spec = validate(SweepSpec, data, file=file)
    base_ref = spec.base
    if source is not None and base_ref.endswith((".yaml", ".yml")) and not Path(base_ref).is_absolute():
        cand = source.parent / base_ref
        if cand.is_file():
            base_ref = str(cand)
    # parameter blocks -> axes
    axes, names = [], []
    for i, b in enumerate(spec.parameters):
        kind = "grid" if b.grid is not None else ("zip" if b.zip is not None else "random")
        keys, rows = _block_points(b, file, f"parameters.{i}.{kind}")
        for k in keys:
            if k in names:
                raise ConfigError(
                    "parameter appears in more than one block", file=file, key=f"parameters.{i}.{kind}.{k}"
                )
            if k in _PICKED:  # each point is one run: its system/model/scenario list is always its own one entry
                raise ConfigError(
                    f"expected the shorthand {_PICKED[k]!r} to vary the {k.split('.')[1]} of a point, "
                    f"got {k!r} (a point's list is its one {_PICKED[k]})",
                    file=file,
                    key=f"parameters.{i}.{kind}.{k}",
                )
            names.append(k)
        axes.append((keys, rows))

    # shorthand values may load configs beyond the base experiment
    shorthand_vals = {s: [] for s in SHORTHANDS}
    for keys, rows in axes:
        for j, k in enumerate(keys):
            if k in SHORTHANDS:
                shorthand_vals[k].extend(str(r[j]) for r in rows)
    items, from_file = _fixed_sets(spec, extra_sets, file)

    def extend(tree: ConfigTree, src) -> None:
        _extend_tree(tree, shorthand_vals["system"], shorthand_vals["model"], src.parent if src else None, file)

    try:  # the overrides go through attnsim run --set's one path (experiment.* before the configs are loaded)
        tree, src = load_tree_with_sets(base_ref, items, extend=extend)
    except ConfigError as e:
        if e.file is None:
            raise ConfigError(e.message, file=file, key="base") from None
        if (
            e.file == "--set"
            and e.key
            and any(e.key == k or e.key.startswith(k + ".") or k.startswith(e.key + ".") for k in from_file)
        ):
            raise ConfigError(e.message, file=file, key="set." + e.key) from None
        raise
    base_dir = src.parent if src else None
    for sc in shorthand_vals["scenario"]:
        if sc not in tree.scenarios:
            raise ConfigError(
                f"scenario '{sc}' is not one of the base experiment's ({', '.join(tree.scenarios)})",
                file=file,
                key="parameters.scenario",
            )
    _set_conflicts(items, from_file, names, tree, file)
    _serving_base(tree, spec, base_dir, file)

    # implicit outer axes: base lists that no block varies
    implicit = [([s], [(n,) for n in _base_names(tree.experiment, s)]) for s in SHORTHANDS if s not in names]
    axes = implicit + axes
    names = [k[0] for k, _ in implicit] + names

    # every key must address something that exists (checked once, on the extended base tree)
    for k in names:
        if k in SHORTHANDS:
            continue
        head = k.split(".")[0]
        if head in SHORTHANDS:
            continue
        parts = k.split(".")
        if head not in _TREE_SECTIONS:
            raise ConfigError(
                f"unknown section {head!r} (expected one of {', '.join(_TREE_SECTIONS + SHORTHANDS)})",
                file=file,
                key=f"parameters.{k}",
            )
        if head != "experiment" and (len(parts) < 3 or parts[1] not in getattr(tree, head)):
            have = ", ".join(getattr(tree, head)) or "none"
            raise ConfigError(
                f"expected {head}.<name>.<key> with a name of this sweep (have: {have})",
                file=file,
                key=f"parameters.{k}",
            )
    check_count(math.prod(len(rows) for _, rows in axes), file, "parameters")
    definition = json.loads(canonical_json(data))
    return Sweep(spec, source, file, tree, axes, names, definition, _sweep_baseline(spec, tree, axes, file))


def _sweep_baseline(spec: SweepSpec, tree: ConfigTree, axes, file: str) -> Optional[str]:
    """The system of the vs_baseline columns: ``baseline:`` (refused unless swept), else the base
    experiment's baseline when it is one of the swept systems, else None."""
    swept = list(
        dict.fromkeys(_ref_name(str(r[keys.index("system")])) for keys, rows in axes if "system" in keys for r in rows)
    )
    if spec.baseline is not None:
        if _ref_name(spec.baseline) not in swept:
            raise ConfigError(
                f"expected one of the swept systems ({', '.join(swept)}), got {spec.baseline!r}",
                file=file,
                key="baseline",
            )
        return _ref_name(spec.baseline)
    base = tree.experiment.get("baseline")
    return _ref_name(str(base)) if base and _ref_name(str(base)) in swept else None


def load_sweep(path: str | Path, extra_sets: Optional[list[str]] = None) -> Sweep:
    """Load a sweep YAML (a path or a built-in name under configs/sweeps/)."""
    p = find_config("sweeps", str(path))
    data = load_yaml(p)
    return build_sweep(data, file=display_path(p), source=p.resolve(), extra_sets=extra_sets)


def sweep_definition_yaml(sweep: Sweep) -> str:
    return yaml.safe_dump(sweep.definition, sort_keys=False)
