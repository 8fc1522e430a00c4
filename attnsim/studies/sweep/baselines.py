"""``vs_baseline`` columns of a sweep: each point against the point that differs from it only in ``system``.

A sweep's baseline (``baseline:`` in the sweep file, else the base experiment's ``baseline`` when that
system is swept) is stored as the store attribute ``baseline``. The partner of a point is the point
with the baseline system and the same model, scenario and values of every other parameter column, except
swept hardware keys that do not apply to the baseline (:func:`blind_parameters`: its points under their
values are one config, stored once).
The ratios are :data:`attnsim.sim.results.BASELINE_RATIOS` (the names and formulas of a run's
``vs_baseline``), as columns ``vs_baseline.<ratio>`` (f8, NaN where undefined) plus
``vs_baseline.status`` saying why a ratio is missing: ``ok``, ``is_baseline`` (the point is the
baseline), ``baseline_not_ok`` (its partner did not complete: does_not_fit / invalid / error),
``baseline_missing`` (no partner in this store: not run yet, or in another shard), ``not_ok`` (the point
itself did not complete).

Computed from the stored metric columns of the whole store, at every fold (so resumed, retried and
merged stores, whose folds re-run it over all rows, hold them) and again by readers over the HDF5 rows
plus unfolded journal records (so a store read while its sweep runs, or after a kill, is consistent).
"""

from __future__ import annotations

import functools
from typing import Iterable

import numpy as np

from attnsim.sim.results import BASELINE_RATIOS

PREFIX = "vs_baseline."
STATUS = PREFIX + "status"
_AXES = ("system", "model", "scenario")


def ratio_names() -> list[str]:
    return [PREFIX + name for name, _, _ in BASELINE_RATIOS]


def blind_parameters(attrs: dict, params: list[str], baseline: str) -> set[str]:
    """The swept hardware keys that do not apply to the baseline system: ``hardware.<name>.*`` of a hardware
    config the baseline does not use, ``systems.<other>.*`` (from the store's ``base_config``, the tree every
    point was resolved from). The baseline's points under their values resolve to one config, run and stored
    once (with the first value), so its partners are matched without them."""
    text = attrs.get("base_config")
    if not isinstance(text, str) or not any(p.split(".")[0] in ("hardware", "systems") for p in params):
        return set()
    used = _baseline_hardware(text, baseline)
    if used is None:
        return set()
    out = set()
    for p in params:
        parts = p.split(".")
        if len(parts) >= 3 and (
            (parts[0] == "hardware" and parts[1] not in used) or (parts[0] == "systems" and parts[1] != baseline)
        ):
            out.add(p)
    return out


@functools.lru_cache(maxsize=8)
def _baseline_hardware(base_config: str, baseline: str):
    """Names of the hardware configs ``baseline`` uses in a store's ``base_config`` (None: unreadable)."""
    from attnsim.core.config import ConfigError, ConfigTree, parse_yaml
    from attnsim.studies.sweep.spec import _serving_hardware, hardware_refs

    try:
        tree = ConfigTree(**(parse_yaml(base_config, file="base_config") or {}))
        return frozenset(hardware_refs(tree, baseline) + _serving_hardware(tree))
    except (ConfigError, KeyError, TypeError, AttributeError):
        return None


def baseline_columns(
    cols: dict[str, np.ndarray], params: list[str], baseline: str, blind: Iterable[str] = ()
) -> dict[str, np.ndarray]:
    """``vs_baseline.*`` columns for the rows of ``cols`` (point columns as a store holds them, any row
    order); ``params`` are the store's parameter column names; ``blind`` those that do not apply to the
    baseline (:func:`blind_parameters`): a point's partner is the baseline point with the same other values."""
    n = len(cols["key"])
    blind = set(blind)
    keys = ["model", "scenario"] + [p for p in params if p not in _AXES and p in cols and p not in blind]
    rows = list(zip(*[cols[k].tolist() for k in keys])) if n else []
    system, status = cols["system"].tolist(), cols["status"].tolist()
    partner: dict = {}
    for i, (s, st, r) in enumerate(zip(system, status, rows)):
        if s == baseline and (r not in partner or st == "ok"):
            partner[r] = i  # an ok baseline row wins over a failed one
    out = {PREFIX + name: np.full(n, np.nan) for name, _, _ in BASELINE_RATIOS}
    why = np.empty(n, dtype=object)
    for i, (s, st, r) in enumerate(zip(system, status, rows)):
        j = partner.get(r)
        if st != "ok":
            why[i] = "not_ok"
        elif s == baseline:
            why[i] = "is_baseline"
        elif j is None:
            why[i] = "baseline_missing"
        elif status[j] != "ok":
            why[i] = "baseline_not_ok"
        else:
            why[i] = "ok"
            for name, metric, up in BASELINE_RATIOS:
                c = cols.get(metric)
                if c is None:
                    continue
                v = _ratio(c[i], c[j], up)
                if v is not None:
                    out[PREFIX + name][i] = v
    out[STATUS] = why
    return out


def _ratio(value, base, up: bool):
    from attnsim.sim.results import baseline_ratio

    value, base = float(value), float(base)
    if not (np.isfinite(value) and np.isfinite(base)):
        return None
    v = baseline_ratio(value, base, up)
    return v if v is not None and np.isfinite(v) else None
