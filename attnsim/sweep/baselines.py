"""``vs_baseline`` columns of a sweep: each point against the point that differs from it only in ``system``.

A sweep's baseline (``baseline:`` in the sweep file, else the base experiment's ``baseline`` when that
system is swept) is stored as the store attribute ``baseline``. The partner of a point is the point
with the baseline system and the same model, scenario and values of every other parameter column.
The ratios are :data:`attnsim.results.BASELINE_RATIOS` (the names and formulas of a run's
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

import numpy as np

from attnsim.results import BASELINE_RATIOS

PREFIX = "vs_baseline."
STATUS = PREFIX + "status"
_AXES = ("system", "model", "scenario")


def ratio_names() -> list[str]:
    return [PREFIX + name for name, _, _ in BASELINE_RATIOS]


def baseline_columns(cols: dict[str, np.ndarray], params: list[str], baseline: str) -> dict[str, np.ndarray]:
    """``vs_baseline.*`` columns for the rows of ``cols`` (point columns as a store holds them, any row
    order); ``params`` are the store's parameter column names."""
    n = len(cols["key"])
    keys = ["model", "scenario"] + [p for p in params if p not in _AXES and p in cols]
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
    from attnsim.results import baseline_ratio
    value, base = float(value), float(base)
    if not (np.isfinite(value) and np.isfinite(base)):
        return None
    v = baseline_ratio(value, base, up)
    return v if v is not None and np.isfinite(v) else None
