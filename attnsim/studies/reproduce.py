"""Reproductions of published systems: their artefacts' numbers vs attnsim, one folder per system.

``configs/reproductions/<system>/reference.yaml`` (format: configs/reproductions/README.md) names the
experiments to run (YAML files beside it, or built-in experiment names) and the rows to compare: a
run picked by ``select`` (system, model, scenario name or any scenario key), a dotted ``metric`` path in
its run document (or several joined by `` + ``: their sum), the artefact's ``reference`` value and a relative
``tolerance``; ``role`` says whether an attnsim parameter was set from the row (``calibration``, in-sample) or not
(``validation``, held out).

A reproduction is attnsim's built-in defaults plus the artefact's own assumptions: ``assumptions:`` lists
named overrides of built-in configs (``--set`` keys and values), each with the artefact line or paper
section it comes from. The rows compare the artefact's number with attnsim under every assumption;
:func:`waterfall` then removes the assumptions one at a time, in the order the file lists them, down to
attnsim's defaults, so the distance from the artefact's number to attnsim's own answer is explained step
by step (``attnsim validate --explain``).

- :func:`folders` lists the system folders, :func:`load` reads and checks one (every error is one
  ConfigError line naming the file and key; ``select`` is checked against the experiment's runs before
  anything is simulated), :func:`run_rows` simulates only the runs the rows read (and their baseline)
  and returns :class:`attnsim.studies.validate.Row` s; :func:`waterfall` runs the rows once per step.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import Field, PositiveFloat, model_validator

from attnsim.core.config import (
    ConfigError,
    Schema,
    display_path,
    find_config,
    get_dotted,
    load_yaml,
    not_physical,
    search_dirs,
    validate,
)
from attnsim.core.outputs import RelativePath, SafeName
from attnsim.core.suggest import did_you_mean

REFERENCE = "reference.yaml"
ROLES = ("calibration", "validation", "headline")
ASSUMPTION_SECTIONS = ("models", "systems", "hardware", "scenarios")  # not experiment.*: it changes what runs
RUN_KEYS = ("system", "model", "scenario")  # select keys naming the run; any other is a scenario key
FIGURE_RECIPES = ("reproduction",)


class PaperClaim(Schema):
    """A headline of the paper, printed beside the rows (not compared: the artefact's numbers are)."""

    plausible = {"value": not_physical("a number quoted from a paper, in its own unit")}

    claim: str
    value: Union[float, str]
    note: str = ""


class FigureSpec(Schema):
    recipe: Literal[FIGURE_RECIPES]
    out: RelativePath  # relative to the --figures folder


class RowSpec(Schema):
    plausible = {"*": not_physical("a reference number quoted from a paper and its tolerance")}
    name: str = Field(min_length=1)
    experiment: str
    select: dict[str, Union[str, int, float]] = Field(min_length=1)
    metric: str = Field(min_length=1)
    scale: PositiveFloat = 1.0  # attnsim value x scale is compared (e.g. 1e3 for s -> ms)
    reference: float
    tolerance: PositiveFloat  # relative
    role: Literal[ROLES]
    source: str = ""
    # printed by validate (under the row's section, and in its JSON) and by --explain: e.g. which condition the
    # paper states that attnsim cannot express, where the row is a published headline the stated conditions miss
    note: str = ""

    @model_validator(mode="after")
    def _headline_names_what_is_missing(self):
        if self.role == "headline" and not self.note.strip():
            raise ValueError("a headline row needs a note (the stated conditions attnsim cannot express)")
        return self


class AssumptionSpec(Schema):
    """One condition of the artefact that attnsim's defaults do not share: ``--set``-style overrides of the
    built-in configs (``hardware.nvlink3.allreduce: ring``), with the artefact line it comes from."""

    name: SafeName
    title: str = Field(min_length=1)
    source: str = Field(min_length=1)
    set: dict[str, Any] = Field(min_length=1)
    # the experiment labels it applies to (default: every one): a condition of some of the artefact's runs only,
    # e.g. a placement or a rebuilt binary, on the same built-in hardware another label runs unchanged
    experiments: list[str] = []


class ReferenceSpec(Schema):
    system: SafeName
    title: str
    source: str = Field(min_length=1)
    paper: list[PaperClaim] = []
    assumptions: list[AssumptionSpec] = []  # applied to every experiment; the waterfall removes them in this order
    experiments: dict[str, str] = Field(min_length=1)
    figure: Optional[FigureSpec] = None
    rows: list[RowSpec] = Field(min_length=1)


@dataclass
class Reproduction:
    folder: Path
    file: str  # display name of reference.yaml, for messages
    spec: ReferenceSpec
    experiments: dict  # label -> attnsim.sim.experiment.Experiment
    runs: list  # per row: (system, model, scenario name) it reads
    dropped: int = 0  # how many of spec.assumptions (the first ones) are not applied


def folders() -> list[Path]:
    """The system folders (those holding a reference.yaml) under ``reproductions/`` of each
    $ATTNSIM_CONFIG_PATH entry and the built-ins (the first of a name wins), sorted by name."""
    found: dict[str, Path] = {}
    for d in search_dirs("reproductions"):
        if d.is_dir():
            for p in sorted(d.iterdir()):
                if (p / REFERENCE).is_file():
                    found.setdefault(p.name, p)
    return [found[n] for n in sorted(found)]


def find(name: str, flag: str = "--set") -> Path:
    """The folder of reproduction ``name``."""
    for p in folders():
        if p.name == name:
            return p
    raise ConfigError(
        f"expected reproductions or reproductions/NAME with NAME one of "
        f"{', '.join(p.name for p in folders()) or 'none'}, got {'reproductions/' + name!r}"
        + did_you_mean(name, [p.name for p in folders()]),
        file=flag,
    )


def _experiment_path(folder: Path, ref: str, file: str, key: str) -> Path:
    if ref.endswith((".yaml", ".yml")):
        if Path(ref).is_absolute() or ".." in Path(ref).parts:
            raise ConfigError(
                f"expected a path relative to the folder {display_path(folder)}, without '..', got {ref!r}",
                file=file,
                key=key,
            )
        p = folder / ref
        if not p.is_file():
            raise ConfigError(
                f"expected an experiment file in {display_path(folder)}, got {ref!r} (not found)", file=file, key=key
            )
        return p
    try:
        return find_config("experiments", ref)
    except ConfigError as e:
        raise ConfigError(
            f"expected a .yaml file in the folder or a built-in experiment; {e.message}", file=file, key=key
        ) from None


def _run_table(exp) -> list[tuple[str, str, str, dict]]:
    """(system, model, scenario name, scenario document) of every run the experiment makes."""
    from attnsim.sim.runner import scenario_doc

    docs = {n: scenario_doc(sc) for n, sc in exp.scenarios.items()}
    return [(s, m, n, docs[n]) for s in exp.systems for m in exp.models for n in exp.scenarios]


def _matches(run, select: dict) -> bool:
    s, m, n, sc = run
    have = {"system": s, "model": m, "scenario": n}
    for k, v in select.items():
        got = have[k] if k in have else sc.get(k)
        if isinstance(v, bool) or isinstance(got, bool) or not (got == v or str(got) == str(v)):
            return False
    return True


def _select(rows: list, exps: dict, file: str) -> list[tuple[str, str, str]]:
    out = []
    for i, r in enumerate(rows):
        key = f"rows.{i}"
        if r.experiment not in exps:
            raise ConfigError(
                f"expected one of the experiments ({', '.join(exps)}), got {r.experiment!r}",
                file=file,
                key=f"{key}.experiment",
            )
        table = _run_table(exps[r.experiment])
        allowed = set(RUN_KEYS) | {k for run in table for k in run[3]}
        for k in r.select:
            if k not in allowed:
                raise ConfigError(
                    f"expected one of {', '.join(RUN_KEYS)} or a scenario key "
                    f"({', '.join(sorted(allowed - set(RUN_KEYS)))}), got {k!r}",
                    file=file,
                    key=f"{key}.select.{k}",
                )
        hits = [run for run in table if _matches(run, r.select)]
        if len(hits) != 1:
            shown = "; ".join(f"{s}/{m}/{n}" for s, m, n, _ in (hits or table)[:6])
            what = "no run" if not hits else f"{len(hits)} runs ({shown}{', ...' if len(hits) > 6 else ''})"
            runs = "" if hits else f" (runs: {shown}{', ...' if len(table) > 6 else ''})"
            raise ConfigError(
                f"expected a select matching exactly one run of experiment {r.experiment!r}{runs}, got {what}",
                file=file,
                key=f"{key}.select",
            )
        out.append(hits[0][:3])
    return out


def read_spec(folder: str | Path) -> ReferenceSpec:
    """``folder/reference.yaml`` checked on its own (experiments not loaded)."""
    folder = Path(folder)
    path = folder / REFERENCE
    file = display_path(path)
    spec = validate(ReferenceSpec, load_yaml(path), file=file)
    if spec.system != folder.name:
        raise ConfigError(f"expected the folder's name {folder.name!r}, got {spec.system!r}", file=file, key="system")
    for i, r in enumerate(spec.rows):
        if r.reference == 0:
            raise ConfigError(
                "expected a non-zero number (errors are relative to it), got 0", file=file, key=f"rows.{i}.reference"
            )
    seen = {}
    for i, r in enumerate(spec.rows):
        if r.name in seen:
            raise ConfigError(
                f"expected each row name once, got {r.name!r} like rows.{seen[r.name]}", file=file, key=f"rows.{i}.name"
            )
        seen[r.name] = i
    names: dict = {}
    for i, a in enumerate(spec.assumptions):
        if a.name in names:
            raise ConfigError(
                f"expected each assumption name once, got {a.name!r} like assumptions.{names[a.name]}",
                file=file,
                key=f"assumptions.{i}.name",
            )
        names[a.name] = i
        for j, label in enumerate(a.experiments):
            if label not in spec.experiments or label in a.experiments[:j]:
                raise ConfigError(
                    f"expected each label once, one of the experiments ({', '.join(spec.experiments)}), got {label!r}",
                    file=file,
                    key=f"assumptions.{i}.experiments.{j}",
                )
        for k in a.set:
            if k.split(".")[0] not in ASSUMPTION_SECTIONS or len(k.split(".")) < 3 or "" in k.split("."):
                raise ConfigError(
                    f"expected a --set key <section>.<name>.<key> with section one of "
                    f"{', '.join(ASSUMPTION_SECTIONS)}, got {k!r}",
                    file=file,
                    key=f"assumptions.{i}.set",
                )
    return spec


def _applies(a: AssumptionSpec, label: Optional[str]) -> bool:
    return label is None or not a.experiments or label in a.experiments


def assumption_sets(spec: ReferenceSpec, dropped: int = 0, label: Optional[str] = None) -> list[str]:
    """``--set`` items of the assumptions after the first ``dropped`` (0: all of them, len: none); with ``label``
    only those that apply to that experiment label."""
    return [f"{k}={json.dumps(v)}" for a in spec.assumptions[dropped:] if _applies(a, label) for k, v in a.set.items()]


def _load_assumed(path: Path, spec: ReferenceSpec, dropped: int, file: str, label: Optional[str] = None):
    """The experiment at ``path`` (label ``label``) with the assumptions after the first ``dropped`` that apply
    to it; an override that does not fit the experiment is refused naming the assumption."""
    from attnsim.sim.experiment import load_experiment

    mine = [(i, a) for i, a in enumerate(spec.assumptions[dropped:], start=dropped) if _applies(a, label)]
    try:
        return load_experiment(path, sets=assumption_sets(spec, dropped, label))
    except ConfigError as e:
        if e.file != "--set":
            for i, a in mine:
                for k in a.set:  # a value an assumption set is refused by the config's own schema
                    sec, name, rest = k.split(".", 2)
                    if e.key and (e.key == rest or rest.startswith(e.key + ".")) and name in str(e.file):
                        raise ConfigError(
                            f"{e.message} (in {e.file}, set by this assumption)",
                            file=file,
                            key=f"assumptions.{i}.set.{k}",
                        ) from None
            raise
        for i, a in mine:
            if e.key and any(e.key == k or e.key.startswith(k + ".") or k.startswith(e.key + ".") for k in a.set):
                raise ConfigError(
                    f"{e.message} (in experiment {display_path(path)})", file=file, key=f"assumptions.{i}.set.{e.key}"
                ) from None
        raise ConfigError(f"{e.message} (in experiment {display_path(path)})", file=file, key="assumptions") from None


def load(folder: str | Path, dropped: int = 0) -> Reproduction:
    """Read and check ``folder/reference.yaml`` and load its experiments with its assumptions applied, all but
    the first ``dropped`` of them (nothing is simulated)."""
    folder = Path(folder)
    file = display_path(folder / REFERENCE)
    spec = read_spec(folder)
    if not 0 <= dropped <= len(spec.assumptions):
        raise ValueError(f"dropped must be in 0..{len(spec.assumptions)}, got {dropped}")
    exps = {
        label: _load_assumed(_experiment_path(folder, ref, file, f"experiments.{label}"), spec, dropped, file, label)
        for label, ref in spec.experiments.items()
    }
    for label, exp in exps.items():
        if exp.spec.serving is not None:  # rows read static-batch runs; the section would be ignored
            raise ConfigError(
                "expected an experiment without a serving section (rows read attnsim run's static-batch runs)",
                file=file,
                key=f"experiments.{label}",
            )
    return Reproduction(folder, file, spec, exps, _select(spec.rows, exps, file), dropped)


def _subset(exp, runs: set):
    """``exp`` restricted to the systems, models and scenarios of ``runs`` (plus the baseline system)."""
    keep_s = {s for s, _, _ in runs} | ({exp.spec.baseline} if exp.spec.baseline else set())
    keep_m = {m for _, m, _ in runs}
    keep_n = {n for _, _, n in runs}
    return replace(
        exp,
        systems={k: v for k, v in exp.systems.items() if k in keep_s},
        models={k: v for k, v in exp.models.items() if k in keep_m},
        scenarios={k: v for k, v in exp.scenarios.items() if k in keep_n},
    )


def planned(rep: Reproduction) -> dict:
    """label -> the experiment restricted to what its rows read (experiments no row reads are left out)."""
    out = {}
    for label, exp in rep.experiments.items():
        need = {run for r, run in zip(rep.spec.rows, rep.runs) if r.experiment == label}
        if need:
            out[label] = _subset(exp, need)
    return out


def _number(doc: dict, metric: str, file: str, key: str) -> float:
    if " + " in metric:  # a sum of dotted paths (an artefact's figure spanning several attnsim ops)
        return float(sum(_number(doc, part.strip(), file, key) for part in metric.split(" + ")))
    try:
        val = get_dotted(doc, metric.split("."))
    except (KeyError, IndexError, TypeError, ValueError):
        top = ", ".join(k for k in doc if isinstance(doc[k], dict))
        raise ConfigError(
            f"expected a dotted path in the run document (sections: {top}), got {metric!r}", file=file, key=key
        ) from None
    if isinstance(val, bool) or not isinstance(val, numbers.Real) or not math.isfinite(float(val)):
        raise ConfigError(
            f"expected the path to hold a finite number, got {type(val).__name__} {str(val)[:40]!r} at {metric!r}",
            file=file,
            key=key,
        )
    return float(val)


def run_rows(
    rep: Reproduction, set_name: Optional[str] = None, strict: bool = True, cache: Optional[dict] = None
) -> list:
    """Simulate the runs the rows read and return one :class:`attnsim.studies.validate.Row` per row (``strict=False``:
    a run that does not complete gives its status, e.g. ``does_not_fit``, in place of the row). ``cache``: run
    documents per (label, the assumption sets applied to it), shared by the steps of :func:`waterfall`, so a
    step re-runs only the labels whose assumptions it changed."""
    from attnsim.sim.runner import run_experiment
    from attnsim.studies.validation_row import Row

    docs = {}
    for label, exp in planned(rep).items():
        key = (label, tuple(assumption_sets(rep.spec, rep.dropped, label)))
        got = cache.get(key) if cache is not None else None
        if got is None:
            got = {(d["system"], d["model"], d["scenario"]["name"]): d for d in run_experiment(exp)}
            if cache is not None:
                cache[key] = got
        docs.update({(label, *run): d for run, d in got.items()})
    out = []
    for i, (r, run) in enumerate(zip(rep.spec.rows, rep.runs)):
        d = docs[(r.experiment, *run)]
        if d["status"] != "ok" and not strict:
            out.append(str(d["status"]))
            continue
        if d["status"] != "ok":
            raise ConfigError(
                f"expected the selected run {'/'.join(run)} to complete, got status {d['status']} "
                f"({d.get('error', '')})",
                file=rep.file,
                key=f"rows.{i}.select",
            )
        val = _number(d, r.metric, rep.file, f"rows.{i}.metric")
        out.append(
            Row(
                set_name or f"reproductions/{rep.spec.system}",
                r.name,
                val * r.scale,
                r.reference,
                r.tolerance,
                role=r.role,
                system=rep.spec.system,
                source=r.source,
                note=r.note,
            )
        )
    return out


@dataclass
class Waterfall:
    """The rows of one reproduction at each step: the artefact's numbers, attnsim with every assumption, then
    with the first 1, 2, ... assumptions removed, ending at attnsim's defaults (no assumption)."""

    system: str
    title: str
    rows: list  # the ReferenceSpec rows
    assumptions: list  # the AssumptionSpec s, in removal order
    steps: list  # per step: {"label", "removed": assumption name or None, "values": [value x scale per row, or
    #              the status of a run that did not complete, e.g. "does_not_fit"]}
    paper: list = None  # the PaperClaim s (printed, not compared: headlines the stated conditions do not reach)

    @property
    def labels(self) -> list[str]:
        return ["artefact"] + [s["label"] for s in self.steps]

    def bars(self, i: int) -> list[float]:
        """The waterfall of row ``i``: artefact, all assumptions, ..., defaults."""
        return [self.rows[i].reference] + [s["values"][i] for s in self.steps]

    def as_dict(self) -> dict:
        return {
            "system": self.system,
            "title": self.title,
            "assumptions": [a.model_dump() for a in self.assumptions],
            "rows": [
                {
                    "name": r.name,
                    "metric": r.metric,
                    "reference": r.reference,
                    "waterfall": dict(zip(self.labels, self.bars(i))),
                    "note": r.note,
                }
                for i, r in enumerate(self.rows)
            ],
            "steps": [{"label": s["label"], "removed": s["removed"]} for s in self.steps],
            "paper": [c.model_dump() for c in self.paper or ()],
        }


def step_label(spec: ReferenceSpec, dropped: int) -> str:
    n = len(spec.assumptions)
    if dropped == n:
        return "defaults"
    if dropped == 0:
        return "all assumptions"
    return f"- {spec.assumptions[dropped - 1].name}"


def waterfall(folder: str | Path) -> Waterfall:
    """Run ``folder``'s rows with all its assumptions, then removing them one at a time in the listed order,
    down to attnsim's defaults. Every step is loaded and checked before anything is simulated; an experiment
    label that a removal leaves unchanged (an assumption scoped to other labels) is not simulated again."""
    spec = read_spec(folder)
    reps = [load(folder, dropped=k) for k in range(len(spec.assumptions) + 1)]
    steps, cache = [], {}
    for k, rep in enumerate(reps):
        vals = [row if isinstance(row, str) else row.measured for row in run_rows(rep, strict=False, cache=cache)]
        steps.append(
            {"label": step_label(spec, k), "removed": spec.assumptions[k - 1].name if k else None, "values": vals}
        )
    return Waterfall(spec.system, spec.title, list(spec.rows), list(spec.assumptions), steps, list(spec.paper))


def _naming(source: Optional[Path]) -> list[tuple[ReferenceSpec, set]]:
    """(spec, labels) of every folder whose ``experiments:`` names the experiment file ``source`` by its built-in
    name (a folder's own .yaml experiments are not built-ins). A folder that does not load is left out
    (``attnsim validate`` reports its error)."""
    if source is None:
        return []
    src = Path(source).resolve()
    out = []
    for folder in folders():
        try:
            spec = read_spec(folder)
        except ConfigError:
            continue
        labels = set()
        for label, ref in spec.experiments.items():
            if ref.endswith((".yaml", ".yml")):
                continue
            try:
                if find_config("experiments", ref).resolve() == src:
                    labels.add(label)
            except ConfigError:
                continue
        if labels:
            out.append((spec, labels))
    return out


def run_ends(source: Optional[Path], docs: list[dict]) -> list[dict]:
    """The reproduction rows a run of the experiment file ``source`` answers: for every folder whose
    ``experiments:`` names that experiment by its built-in name, each row whose ``select`` matches exactly one of
    ``docs`` gives ``{"reproduction", "row", "metric", "reference", "value", "explain"}``: the artefact's (or
    paper's) number and the run's value of the row's metric x scale, or the run's status when it did not
    complete (e.g. ``does_not_fit``). Only reference.yaml files and ``docs`` are read: nothing is simulated.
    A row whose run is not in ``docs`` (an experiment narrowed by ``--set``) or whose metric the run lacks
    (no baseline) is left out."""
    out = []
    for spec, labels in _naming(source):
        for i, r in enumerate(spec.rows):
            if r.experiment not in labels:
                continue
            hits = [
                d for d in docs if _matches((d["system"], d["model"], d["scenario"]["name"], d["scenario"]), r.select)
            ]
            if len(hits) != 1:
                continue
            d = hits[0]
            if d["status"] != "ok":
                value: Union[float, str] = str(d["status"])
            else:
                try:
                    value = _number(d, r.metric, spec.system, f"rows.{i}.metric") * r.scale
                except ConfigError:
                    continue
            out.append(
                {
                    "reproduction": spec.system,
                    "row": r.name,
                    "metric": r.metric,
                    "reference": r.reference,
                    "value": value,
                    "explain": f"attnsim validate --explain {spec.system}",
                }
            )
    return out


def run_paper_claims(source: Optional[Path]) -> list[dict]:
    """The ``paper:`` headlines (printed, not compared) of the folders naming the experiment file ``source``."""
    return [
        {"reproduction": spec.system, "claim": c.claim, "value": c.value}
        for spec, _ in _naming(source)
        for c in spec.paper
    ]
