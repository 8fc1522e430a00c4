"""Verdict flips: which assumed hardware parameters move a run's headline ratio against its baseline
across 1.0, or by more than 10 %, within their plausible ranges or at their plausible other choices (issue 27
section 3; DESIGN.md "One truth").

The assumed parameters are the ``ranges:`` entries of the hardware the compared system and the baseline use
(tag ``assumed`` unless the file's ``evidence:`` block says otherwise: hwmodels/registry.py
``evidence_tags``), as :func:`attnsim.studies.sensitivity.hardware_params` lists them. Each is set to its low and
then its high end, one at a time (the sensitivity module's OAT method), and the run is simulated again with
``--set hardware.<name>.<key>=<value>`` (the same path as ``attnsim run --set``) on the run's own config tree
restricted to that system, model and scenario (the tree of a sweep point). Only the systems that use the
parameter's hardware run again; every other value is the run's own, and the baseline's perturbed runs are
shared by every system compared with it (memoised), so the cost is at most two re-runs per parameter and
system using it.

Categorical settings that decide verdicts (a DRAM spec's controller rules, a PIM device's KV mapping, a link's
all-reduce algorithm) have no range: a hardware file's ``choices:`` block lists their other plausible values
with a source (hwmodels/registry.py ``split_choices``), and each alternative is one more re-run. A system file's
``choices:`` block does the same for system settings (the attention placement ``mapper.attention_on``, the whole
``mapper``, a policy option such as ``mapper.options.tp_vector_ops``; attnsim.sim.experiment ``system_choices``,
the same check): re-run with ``--set systems.<name>.<key>=<value>`` on that system only. A choice's row names its
alternatives; its ``low`` / ``high`` are the alternatives giving the lowest / highest ratio.

The headline ratio is the one the run table's ``vs base thr`` column shows: ``vs_baseline.throughput_ratio``
(tokens per second, prefill and decode, over the baseline's).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Optional

from attnsim.core.config import ConfigError

RATIO = "throughput_ratio"  # report.summary_table's "vs base thr" column
METRIC = "tokens_per_s"  # its metric (attnsim.sim.results.BASELINE_RATIOS)
MOVE_FRACTION = 0.10  # "moves the ratio by more than 10 %" (issue 27 section 3)
SECTION = "verdict_flips"  # the run document's section
SEPARATOR = ";"  # between parameter names in a sweep store's verdict_flips column


def assumed_params(tree, hardware: list[str]) -> list:
    """The assumed, ranged parameters (:class:`attnsim.studies.sensitivity.Param`) of the named hardware of a
    config tree, in the order given and each file's order."""
    from dataclasses import replace

    from attnsim.hwmodels import registry
    from attnsim.studies.sensitivity import hardware_params

    out = []
    for h in hardware:
        tags = registry.evidence_tags(tree.hardware[h], tree.file_of("hardware", h))
        out += [
            replace(p, source=tags[p.key].source)
            for p in hardware_params(tree, h)
            if tags.get(p.key) is not None and tags[p.key].tag == registry.ASSUMED
        ]  # evidence's source first
    return out


@dataclass(frozen=True)
class Choice:
    """One categorical setting of a hardware (or system) file with its other plausible values (a ``choices:``
    entry); ``hardware`` names the file's config (a system's name when ``section`` is "systems")."""

    hardware: str
    key: str
    base: object
    values: tuple
    source: str
    section: str = "hardware"

    @property
    def name(self) -> str:
        return f"{self.hardware}.{self.key}"

    def override(self, v) -> str:
        return f"{self.section}.{self.hardware}.{self.key}={json.dumps(v)}"


def system_choice_params(tree, systems: list[str]) -> list[Choice]:
    """The ``choices:`` entries of the named systems of a config tree (values as the tree holds them, ``--set``
    applied; an alternative equal to the value in use is left out)."""
    from attnsim.sim.experiment import system_choices

    out = []
    for name in dict.fromkeys(systems):
        for key, (own, c) in system_choices(tree, name, own_differs=False).items():
            alts = tuple(v for v in c.values if v != own and str(v) != str(own))
            if alts:
                out.append(Choice(name, key, own, alts, c.source, "systems"))
    return out


def choice_params(tree, hardware: list[str]) -> list[Choice]:
    """The ``choices:`` entries of the named hardware of a config tree (values as the tree holds them, ``--set``
    applied; an alternative equal to the value in use is left out)."""
    from attnsim.hwmodels import registry

    out = []
    for h in hardware:
        hw, f = tree.hardware[h], tree.file_of("hardware", h)
        choices = registry.split_choices(hw, f, own_differs=False)
        if not choices:
            continue
        spec = registry.validate_hardware(hw, f)
        for key, c in choices.items():
            own = registry.spec_value(spec, key)
            own = getattr(own, "value", own)
            alts = tuple(v for v in c.values if v != own and str(v) != str(own))
            if alts:
                out.append(Choice(h, key, own, alts, c.source))
    return out


class Runs:
    """Memoised re-runs: the headline metric of a one-run config tree with one ``--set`` override."""

    def __init__(self):
        self.memo: dict = {}
        self.errors: dict = {}
        self.reruns = 0
        self.wall_s = 0.0

    def seed(self, key, value: Optional[float]) -> None:
        """The value of a run already simulated (``key`` = its identity, no override)."""
        self.memo.setdefault((key, None), value)

    def value(self, key, tree, override: Optional[str]) -> Optional[float]:
        """METRIC of the run ``tree`` (one system, model, scenario) with ``override``; None if it does not
        complete (does not fit, an error, or the value refused: the message is kept in ``errors``)."""
        if (key, override) not in self.memo:
            from attnsim.sim.experiment import validate_tree
            from attnsim.sim.runner import run_experiment

            t0 = time.perf_counter()
            t = tree.copy()
            v = None
            try:
                if override is not None:
                    t.apply_sets([override])
                doc = run_experiment(validate_tree(t))[0]
                v = doc["metrics"].get(METRIC) if doc["status"] == "ok" else None
                if v is None:
                    self.errors[(key, override)] = doc.get("error") or doc["status"]
            except ConfigError as e:
                self.errors[(key, override)] = str(e)
            self.memo[(key, override)] = v
            self.reruns += 1
            self.wall_s += time.perf_counter() - t0
        return self.memo[(key, override)]


def pair_flips(runs: Runs, point: tuple, base: tuple, params: list, point_hw: set, base_hw: set) -> dict:
    """The ``verdict_flips`` section of one compared run: ``point`` / ``base`` = (memo key, one-run config
    tree) of the run and its baseline partner; ``params`` the assumed parameters of the hardware either
    uses (``point_hw`` / ``base_hw``: the hardware names each uses)."""
    from attnsim.sim.results import baseline_ratio
    from attnsim.studies.sensitivity import flips

    def ratio(override_p, override_b):
        vp = runs.value(point[0], point[1], override_p)
        vb = runs.value(base[0], base[1], override_b)
        return baseline_ratio(vp, vb, True) if vp is not None and vb is not None else None

    r0 = ratio(None, None)
    rows = []
    for p in params:
        if isinstance(p, Choice):
            if p.section == "systems":  # a system's setting: re-run that system only
                point_uses, base_uses = {next(iter(point[1].systems))}, {next(iter(base[1].systems))}
            else:
                point_uses, base_uses = point_hw, base_hw
            rows.append(_choice_row(p, r0, ratio, runs, point, base, point_uses, base_uses))
            continue
        row = {
            "parameter": f"hardware.{p.name}",
            "value": p.base,
            "low": p.value(p.low),
            "high": p.value(p.high),
            "source": p.source,
        }
        for end in ("low", "high"):
            ov = p.override(getattr(p, end))
            r = ratio(ov if p.hardware in point_hw else None, ov if p.hardware in base_hw else None)
            row[f"ratio_{end}"] = r
            if r is None:
                why = runs.errors.get((point[0], ov)) or runs.errors.get((base[0], ov)) or "did not complete"
                row.setdefault("errors", {})[end] = why
        ends = [row["ratio_low"], row["ratio_high"]]
        row["flips"] = bool(flips(r0, ends))
        row["moves_over_10pct"] = (
            r0 is not None and r0 > 0 and any(abs(r / r0 - 1.0) > MOVE_FRACTION for r in ends if r is not None)
        )
        rows.append(row)
    return {
        "ratio": RATIO,
        "baseline": next(iter(base[1].systems)),
        "ratio_base": r0,
        "parameters_checked": len(params),
        "parameters": rows,
    }


def _moves(r0, ends) -> bool:
    return r0 is not None and r0 > 0 and any(abs(r / r0 - 1.0) > MOVE_FRACTION for r in ends if r is not None)


def _choice_row(p: Choice, r0, ratio, runs: Runs, point, base, point_hw, base_hw) -> dict:
    """The row of a categorical choice: the ratio at each alternative; ``low`` / ``high`` the alternatives that
    give the lowest / highest (for the tables and the tornado figure)."""
    from attnsim.studies.sensitivity import flips

    row = {
        "parameter": f"{p.section}.{p.name}",
        "value": p.base,
        "choice": True,
        "alternatives": list(p.values),
        "source": p.source,
    }
    ratios = []
    for v in p.values:
        ov = p.override(v)
        r = ratio(ov if p.hardware in point_hw else None, ov if p.hardware in base_hw else None)
        ratios.append(r)
        if r is None:
            why = runs.errors.get((point[0], ov)) or runs.errors.get((base[0], ov)) or "did not complete"
            row.setdefault("errors", {})[str(v)] = why
    row["ratio_alternatives"] = ratios
    done = [(r, i) for i, r in enumerate(ratios) if r is not None]
    lo = min(done)[1] if done else 0
    hi = max(done)[1] if done else 0
    row.update(low=p.values[lo], high=p.values[hi], ratio_low=ratios[lo], ratio_high=ratios[hi])
    row["flips"] = bool(flips(r0, ratios))
    row["moves_over_10pct"] = _moves(r0, ratios)
    return row


def add_flips(tree, docs: list[dict], baseline: str) -> dict:
    """Attach the ``verdict_flips`` section to every completed run of ``docs`` (an experiment's runs, its
    config ``tree``) that has a headline ratio against ``baseline``; returns the cost: {parameters (distinct
    ones checked), reruns, wall_s}."""
    from attnsim.studies.sweep.spec import _restrict, hardware_refs

    t0 = time.perf_counter()
    runs = Runs()
    refs: dict = {}
    for d in docs:
        if d["status"] == "ok":
            runs.seed((d["system"], d["model"], d["scenario"]["name"]), d["metrics"].get(METRIC))
    checked = set()
    for d in docs:
        vb = d.get("vs_baseline") or {}
        if d["status"] != "ok" or d["system"] == baseline or vb.get(RATIO) is None:
            continue
        m, sc = d["model"], d["scenario"]["name"]
        for s in (d["system"], baseline):
            refs.setdefault(s, hardware_refs(tree, s))
        hw = list(dict.fromkeys(refs[d["system"]] + refs[baseline]))
        params = (
            assumed_params(tree, hw) + choice_params(tree, hw) + system_choice_params(tree, [d["system"], baseline])
        )
        checked |= {(getattr(p, "section", "hardware"), p.name) for p in params}
        point = ((d["system"], m, sc), _restrict(tree, d["system"], m, sc))
        base = ((baseline, m, sc), _restrict(tree, baseline, m, sc))
        d[SECTION] = pair_flips(runs, point, base, params, set(refs[d["system"]]), set(refs[baseline]))
    return {"parameters": len(checked), "reruns": runs.reruns, "wall_s": time.perf_counter() - t0}


def flipping(section: dict) -> list[str]:
    """Names of the parameters that move the ratio across 1.0 (a sweep store's ``verdict_flips`` column)."""
    return [r["parameter"] for r in section.get("parameters", ()) if r.get("flips")]


# ---------------------------------------------------------------- sweeps (attnsim sweep --flips)

_SWEEP_RUNS = Runs()  # per worker process: a baseline partner's re-runs are shared by the points compared with it


def point_flips(doc: dict, point: tuple, partner: tuple) -> dict:
    """The section of one sweep point (a completed run document ``doc``): ``point`` / ``partner`` =
    (key, one-run ConfigTree) of the point and of its baseline partner (same values but ``system``)."""
    from attnsim.studies.sweep.spec import hardware_refs

    _SWEEP_RUNS.seed(point[0], doc["metrics"].get(METRIC))
    (ps,), (bs,) = point[1].systems, partner[1].systems
    phw, bhw = hardware_refs(point[1], ps), hardware_refs(partner[1], bs)
    merged = point[1].copy()
    for h in bhw:  # the partner's hardware (the same files, with the point's values where the point has them)
        if h not in merged.hardware:
            merged.hardware[h] = partner[1].hardware[h]
            merged.files[("hardware", h)] = partner[1].file_of("hardware", h)
    hw = list(dict.fromkeys(phw + bhw))
    params = assumed_params(merged, hw) + choice_params(merged, hw)
    params += system_choice_params(point[1], [ps]) + system_choice_params(partner[1], [bs])
    return pair_flips(_SWEEP_RUNS, point, partner, params, set(phw), set(bhw))
