"""One tabular view of any results file: a sweep store or an ``attnsim run`` results file.

``load_table(path) -> Table``: ``columns`` (name -> 1-D array, one row per point/run, expansion
order), ``breakdown`` (``<phase>/<table>/<name>`` -> f8 array), ``parameters`` (swept keys), and
``docs()`` / ``resolved(row)`` for the full run documents and configs. Plots and CSV export use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from attnsim.config import ConfigError


@dataclass
class Table:
    path: Path
    kind: str  # "sweep" | "run"
    attrs: dict
    columns: dict[str, np.ndarray]
    breakdown: dict[str, np.ndarray]
    parameters: list[str]
    _docs: Callable[[], Iterator[dict]] = field(repr=False, default=lambda: iter(()))
    _resolved: Callable[[int], dict] = field(repr=False, default=None)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def docs(self) -> Iterator[dict]:
        return self._docs()

    def resolved(self, row: int) -> dict:
        return self._resolved(row)

    def col(self, name: str) -> np.ndarray:
        if name in self.columns:
            return self.columns[name]
        if name in self.breakdown:
            return self.breakdown[name]
        raise ConfigError(f"no column {name!r} (have: {', '.join(self.names()[:40])}"
                          f"{', ...' if len(self.names()) > 40 else ''})", file=self.path)

    def names(self) -> list[str]:
        return list(self.columns) + list(self.breakdown)

    def select(self, where: Optional[dict[str, Any]] = None) -> "Table":
        """Rows where every ``column == value`` (numbers compared numerically)."""
        if not where:
            return self
        mask = np.ones(len(self), dtype=bool)
        for k, v in where.items():
            c = self.col(k)
            if c.dtype.kind in "if":
                try:
                    mask &= np.isclose(c.astype(float), float(v))
                except (TypeError, ValueError):
                    raise ConfigError(f"expected a number, got {v!r}", file="--where", key=k) from None
            else:
                mask &= np.array([str(x) == str(v) for x in c], dtype=bool)
        idx = np.nonzero(mask)[0]
        parent = self
        return Table(self.path, self.kind, self.attrs, {k: v[idx] for k, v in self.columns.items()},
                     {k: v[idx] for k, v in self.breakdown.items()}, self.parameters,
                     lambda: (d for i, d in enumerate(parent.docs()) if mask[i]),
                     lambda r: parent.resolved(int(idx[r])))


def parse_where(items: list[str]) -> dict:
    from attnsim.config import parse_value
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"expected COLUMN=VALUE, got {it!r}", file="--where")
        k, v = it.split("=", 1)
        out[k.strip()] = parse_value(v, file="--where", key=k.strip())
    return out


def load_table(path: str | Path) -> Table:
    from attnsim.sweep.store import is_sweep_store, open_store
    path = Path(path)
    if is_sweep_store(path):
        st = open_store(path)
        return Table(path, "sweep", st.attrs, st.columns(), st.breakdown(), st.parameters, st.iter_docs,
                     lambda r: st.resolved(r))
    from attnsim.results import read_results
    attrs, docs = read_results(path)
    return table_from_docs(path, attrs, docs)


def table_from_docs(path: Path, attrs: dict, docs: list[dict]) -> Table:
    """Columns of ``attnsim run`` documents (same names as a sweep store's)."""
    from attnsim.sweep.store import _breakdown_columns, make_record, record_row
    rows = [record_row(make_record(i, "", {}, d, "")) for i, d in enumerate(docs)]
    names = []
    for r in rows:
        names += [k for k in r if k not in names]
    cols = {}
    for n in names:
        vals = [r.get(n) for r in rows]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals if v is not None):
            cols[n] = np.array([np.nan if v is None else v for v in vals],
                               dtype=float if any(isinstance(v, float) or v is None for v in vals) else np.int64)
        else:
            cols[n] = np.array(["" if v is None else str(v) for v in vals], dtype=object)
    bcols = [_breakdown_columns(d) for d in docs]
    bnames = sorted({k for c in bcols for k in c})
    bd = {n: np.array([c.get(n, np.nan) for c in bcols]) for n in bnames}
    cfg = attrs.get("resolved_config")

    def resolved(row: int) -> dict:
        """The config tree of run ``row`` alone (its system, model, scenario), as a sweep point's."""
        from attnsim.config import ConfigTree, parse_yaml
        from attnsim.sweep.spec import _restrict
        tree = (parse_yaml(cfg, file=f"{path}: resolved_config") if cfg else None) or {}
        d = docs[row]
        try:
            one = _restrict(ConfigTree(**tree), d["system"], d["model"], d["scenario"]["name"])
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"resolved_config does not hold run {row} ({exc})", file=str(path)) from None
        return one.as_dict()
    return Table(path, "run", attrs, cols, bd, [], lambda: iter(docs), resolved)


def write_csv(table: Table, out: str | Path) -> Path:
    """A flat CSV: point columns, then breakdown columns (``phase/table/name``)."""
    import csv
    from attnsim.fileio import atomic_path
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(table.columns) + list(table.breakdown)
    cols = [table.columns.get(n, table.breakdown.get(n)) for n in names]
    with atomic_path(out, suffix=".csv") as tmp, open(tmp, "w", newline="") as fh:  # no partial CSV on failure
        w = csv.writer(fh)
        w.writerow(names)
        for i in range(len(table)):
            w.writerow([_cell(c[i]) for c in cols])
    return out


def _cell(v) -> str:
    if isinstance(v, (float, np.floating)):
        return "" if np.isnan(v) else repr(float(v))
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return str(v)
