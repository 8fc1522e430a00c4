"""One tabular view of any results file: a sweep store or an ``attnsim run`` results file.

``load_table(path) -> Table``: ``columns`` (name -> 1-D array, one row per point/run, expansion
order), ``breakdown`` (``<phase>/<table>/<name>`` -> f8 array), ``parameters`` (swept keys), and
``docs()`` / ``resolved(row)`` for the full run documents and configs. Plots and exports use it.

Exports (CSV, Parquet, pandas) go through :func:`export_columns`: the same columns with a unit in
every quantity's name (:func:`unit_name`: ``batch_size`` -> ``batch_size_count``, ``ttft_p50`` ->
``ttft_p50_s``, ``slo_attainment`` -> ``slo_attainment_ratio``; names that hold a unit keep it);
identifiers (``system``, ``status``, ...) and swept parameters (named by their sweep keys) keep
their names. ``vs_baseline.*`` columns: a sweep's (attnsim.studies.sweep.baselines) or a run's ``vs_baseline``.
:func:`request_columns` reads the per-request rows of ``attnsim serve`` results.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from attnsim.core.config import ConfigError


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
        """A column by the name ``attnsim show`` and the exports print (``ttft_p99_s``); a stored name that
        lacks its unit of measure (``ttft_p99``) is refused with that name. Counts are found under either
        name (``batch_size`` / ``batch_size_count``)."""
        return self._get(self.column_name(name))

    def _get(self, name: str) -> np.ndarray:
        return self.columns[name] if name in self.columns else self.breakdown[name]

    def has(self, name: str) -> bool:
        try:
            self.column_name(name)
        except ConfigError:
            return False
        return True

    def column_name(self, name: str) -> str:
        """The stored name of column ``name`` (see :meth:`col`), or a ConfigError."""
        stored = {unit_name(c): c for c in self.columns if c not in self.parameters}
        if name in self.columns or name in self.breakdown:
            if name not in self.parameters and _unit_missing(name):
                raise ConfigError(
                    f"expected the column name with its unit, {unit_name(name)!r} (as attnsim show and "
                    f"export print it), got {name!r}",
                    file=self.path,
                )
            return name
        if name in stored:
            return stored[name]
        if unit_name(name) in self.columns and unit_name(name) != name:  # a table of export names (a DataFrame)
            if _unit_missing(name):
                raise ConfigError(
                    f"expected the column name with its unit, {unit_name(name)!r}, got {name!r}", file=self.path
                )
            return unit_name(name)
        from attnsim.core.suggest import did_you_mean

        names = [unit_name(n) if n not in self.parameters else n for n in self.names()]
        raise ConfigError(
            f"no column {name!r}{did_you_mean(name, names)} (have: {', '.join(names[:40])}"
            f"{', ...' if len(names) > 40 else ''})",
            file=self.path,
        )

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
        return Table(
            self.path,
            self.kind,
            self.attrs,
            {k: v[idx] for k, v in self.columns.items()},
            {k: v[idx] for k, v in self.breakdown.items()},
            self.parameters,
            lambda: (d for i, d in enumerate(parent.docs()) if mask[i]),
            lambda r: parent.resolved(int(idx[r])),
        )


def parse_where(items: list[str]) -> dict:
    from attnsim.core.config import parse_value

    out = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"expected COLUMN=VALUE, got {it!r}", file="--where")
        k, v = it.split("=", 1)
        out[k.strip()] = parse_value(v, file="--where", key=k.strip())
    return out


def load_table(path: str | Path) -> Table:
    from attnsim.studies.sweep.store import is_sweep_store, open_store

    path = Path(path)
    if is_sweep_store(path):
        st = open_store(path)
        return Table(
            path, "sweep", st.attrs, st.columns(), st.breakdown(), st.parameters, st.iter_docs, lambda r: st.resolved(r)
        )
    from attnsim.studies.sweep.store import read_results

    attrs, docs = read_results(path)
    return table_from_docs(path, attrs, docs)


def table_from_docs(path: Path, attrs: dict, docs: list[dict]) -> Table:
    """Columns of ``attnsim run`` documents (same names as a sweep store's)."""
    from attnsim.studies.sweep.store import _breakdown_columns, make_record, record_row

    rows = [record_row(make_record(i, "", {}, d, "")) for i, d in enumerate(docs)]
    names = []
    for r in rows:
        names += [k for k in r if k not in names]
    cols = {}
    for n in names:
        vals = [r.get(n) for r in rows]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals if v is not None):
            cols[n] = np.array(
                [np.nan if v is None else v for v in vals],
                dtype=float if any(isinstance(v, float) or v is None for v in vals) else np.int64,
            )
        else:
            cols[n] = np.array(["" if v is None else str(v) for v in vals], dtype=object)
    bcols = [_breakdown_columns(d) for d in docs]
    bnames = sorted({k for c in bcols for k in c})
    bd = {n: np.array([c.get(n, np.nan) for c in bcols]) for n in bnames}
    cols.update(_doc_baselines(docs))
    cfg = attrs.get("resolved_config")

    def resolved(row: int) -> dict:
        """The config tree of run ``row`` alone (its system, model, scenario), as a sweep point's."""
        from attnsim.core.config import ConfigTree, parse_yaml
        from attnsim.studies.sweep.spec import _restrict

        tree = (parse_yaml(cfg, file=f"{path}: resolved_config") if cfg else None) or {}
        d = docs[row]
        try:
            one = _restrict(ConfigTree(**tree), d["system"], d["model"], d["scenario"]["name"])
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"resolved_config does not hold run {row} ({exc})", file=str(path)) from None
        return one.as_dict()

    return Table(path, "run", attrs, cols, bd, [], lambda: iter(docs), resolved)


def _doc_baselines(docs: list[dict]) -> dict[str, np.ndarray]:
    """``vs_baseline.*`` columns of run documents (an experiment with a baseline), statuses as a sweep's."""
    from attnsim.studies.sweep.baselines import PREFIX, STATUS, ratio_names

    vbs = [d.get("vs_baseline") if isinstance(d.get("vs_baseline"), dict) else None for d in docs]
    base = next((vb.get("baseline") for vb in vbs if vb), None)
    if base is None:
        return {}
    out = {n: np.array([_num((vb or {}).get(n[len(PREFIX) :])) for vb in vbs]) for n in ratio_names()}
    out[STATUS] = np.array(
        [
            "not_ok"
            if d.get("status") != "ok"
            else "is_baseline"
            if d.get("system") == base
            else "baseline_missing"
            if vb is None
            else "baseline_not_ok"
            if "note" in vb
            else "ok"
            for d, vb in zip(docs, vbs)
        ],
        dtype=object,
    )
    return out


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


# ---------------------------------------------------------------- units in names, exports

#: columns that name or label a row (not quantities): exported under their own names
IDENTIFIERS = frozenset(
    {"index", "key", "status", "error", "system", "model", "scenario", "worker", "run", "request", "vs_baseline.status"}
)
#: name tokens that are units (or say that the value is a ratio, share or count)
UNIT_TOKENS = frozenset(
    {
        "s",
        "ms",
        "us",
        "ns",
        "j",
        "mj",
        "pj",
        "w",
        "gb",
        "gib",
        "mb",
        "bytes",
        "gbps",
        "tokens",
        "count",
        "ratio",
        "fraction",
        "rps",
        "speedup",
        "hz",
        "percent",
        "utilization",
    }
)
#: quantities whose stored name holds no unit -> exported name
UNIT_NAMES = {
    "batch_size": "batch_size_count",
    "prompt_len": "prompt_len_tokens",
    "output_len": "output_len_tokens",
    "batch_per_replica": "batch_per_replica_count",
    "replicas": "replicas_count",
    "active_replicas": "active_replicas_count",
    "tp": "tp_count",
    "pp": "pp_count",
    "decode_steps_simulated": "decode_steps_simulated_count",
    # attnsim serve (attnsim.studies.serve.metrics)
    "requests": "requests_count",
    "preemptions": "preemptions_count",
    "mean_in_system": "mean_in_system_count",
    "littles_law_rhs": "littles_law_rhs_count",
    "slo_attainment": "slo_attainment_ratio",
    "ttft_attainment": "ttft_attainment_ratio",
    "tpot_attainment": "tpot_attainment_ratio",
}
_LATENCY_STAT = re.compile(r"(ttft|tpot|latency|queue)_(mean|p\d+)")  # serve aggregates, in seconds
_QUALIFIER = re.compile(r"(_ci_low|_ci_high)$")  # replicated serving: bootstrap interval of a mean


def unit_name(name: str) -> str:
    """The export name of a column: ``name`` with its unit (identifiers and names with a unit unchanged)."""
    if name in IDENTIFIERS or "/" in name:
        return name
    q = _QUALIFIER.search(name)
    base, tail = (name[: q.start()], q.group()) if q else (name, "")
    base = UNIT_NAMES.get(base) or (base + "_s" if _LATENCY_STAT.fullmatch(base) else base)
    return base + tail


def _unit_missing(name: str) -> bool:
    """A stored name whose export name adds a unit of measure (``ttft_p99`` -> ``ttft_p99_s``,
    ``slo_attainment`` -> ``slo_attainment_ratio``); counts (``batch_size``) are not."""
    new = unit_name(name)
    return new != name and not new.endswith(("_count", "_tokens"))


def has_unit(name: str) -> bool:
    """True if a name holds a unit token (or is a rate ``x_per_y``)."""
    toks = re.split(r"[_./:]", name.lower())
    return "per" in toks or any(t in UNIT_TOKENS for t in toks)


def export_columns(table: Table) -> dict[str, np.ndarray]:
    """Every column of ``table`` (point columns, ``vs_baseline.*``, breakdowns), one row per point/run in
    expansion order, under its export name (:func:`unit_name`; parameters keep their sweep keys)."""
    params = set(table.parameters)
    out: dict[str, np.ndarray] = {}
    for name, col in list(table.columns.items()) + list(table.breakdown.items()):
        new = name if name in params else unit_name(name)
        out[new if new not in out and new not in table.columns else name] = col
    return out


def to_pandas(table: Table):
    """:func:`export_columns` as a pandas DataFrame (``pip install pandas``); ``df.attrs`` holds
    :func:`export_meta` (kind, parameters, baseline), so :func:`table_from_frame` reads it back."""
    pd = _optional("pandas", "pandas")
    df = pd.DataFrame(export_columns(table))
    df.attrs.update(export_meta(table))
    return df


def table_from_frame(df, path: str = "<DataFrame>") -> Table:
    """A :class:`Table` over a pandas DataFrame of :func:`export_columns` names (``to_pandas()``, a read
    Parquet/CSV export, or a frame filtered or built by hand): what the figure recipes read. ``<phase>/<table>/
    <name>`` columns are the breakdowns; the swept parameters come from ``df.attrs`` (else the dotted names).
    The run documents and configs are not in a frame: recipes that need them (roofline, tornado) ask for the file."""
    attrs = {
        k[len("attnsim.") :]: v
        for k, v in dict(getattr(df, "attrs", {}) or {}).items()
        if isinstance(k, str) and k.startswith("attnsim.")
    }
    try:
        params = json.loads(attrs.get("parameters", "null"))
    except (TypeError, ValueError):
        params = None
    cols, bd = {}, {}
    for name in df.columns:
        name_s = str(name)
        v = df[name].to_numpy()
        if v.dtype.kind not in "iufb":
            v = np.array(["" if x is None or (isinstance(x, float) and x != x) else str(x) for x in v], dtype=object)
        (bd if "/" in name_s else cols)[name_s] = v
    if not isinstance(params, list):
        params = [c for c in cols if "." in c and not c.startswith("vs_baseline.")]

    def no_docs(_row=None):
        raise ConfigError(
            "this figure needs the run documents: give the results file or attnsim results object, not a DataFrame",
            file=path,
        )

    return Table(
        Path(path), str(attrs.get("kind", "run")), attrs, cols, bd, [str(p) for p in params], lambda: iter(()), no_docs
    )


def request_columns(path: str | Path) -> Optional[dict[str, np.ndarray]]:
    """Per-request rows of an ``attnsim serve`` results file (``/requests``: run, system, model,
    scenario, request, arrival_s, ttft_s, ...) under export names; None if the file has none."""
    import h5py

    from attnsim.studies.sweep.store import _decode, _reading

    with _reading(Path(path)) as f:
        ds = f.get("requests")
        if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
            return None
        arr = ds[()]
    return {unit_name(n): _decode(arr[n]) for n in arr.dtype.names}


def write_csv(table: Table, out: str | Path) -> Path:
    """A flat CSV of :func:`export_columns`: point columns, then breakdown columns (``phase/table/name``)."""
    return write_columns_csv(export_columns(table), out)


def write_columns_csv(cols: dict[str, np.ndarray], out: str | Path) -> Path:
    import csv

    from attnsim.core.fileio import atomic_path

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(cols.values()), []))
    with atomic_path(out, suffix=".csv") as tmp, open(tmp, "w", newline="") as fh:  # no partial CSV on failure
        w = csv.writer(fh)
        w.writerow([_cell(c) for c in cols])  # parameter names come from the store too
        for i in range(n):
            w.writerow([_cell(c[i]) for c in cols.values()])
    return out


def write_parquet(cols: dict[str, np.ndarray], out: str | Path, meta: Optional[dict] = None) -> Path:
    """One Parquet table of ``cols`` (pyarrow: ``pip install attnsim[parquet]``): float columns with
    missing values (NaN in the store) as nulls, so the file holds finite numbers only; integers as
    int64, the rest as strings; ``meta`` (str -> str) in the schema's key-value metadata."""
    pa = _optional("pyarrow", "attnsim[parquet]")
    import pyarrow.parquet as pq

    from attnsim.core.fileio import atomic_path

    arrays = {}
    for name, c in cols.items():
        c = np.asarray(c)
        if c.dtype.kind == "f":
            arrays[name] = pa.array(c, type=pa.float64(), mask=~np.isfinite(c))
        elif c.dtype.kind in "iu":
            arrays[name] = pa.array(c, type=pa.int64())
        elif c.dtype.kind == "b":
            arrays[name] = pa.array(c, type=pa.bool_())
        else:
            arrays[name] = pa.array(["" if v is None else str(v) for v in c.tolist()], type=pa.string())
    t = pa.table(arrays) if arrays else pa.table({})
    t = t.replace_schema_metadata({str(k): str(v) for k, v in (meta or {}).items()})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, suffix=".parquet") as tmp:
        pq.write_table(t, tmp)
    return out


def export_meta(table: Table) -> dict:
    """Provenance written into an export (Parquet metadata): source, kind, parameters, versions."""
    keep = ("attnsim_version", "git_revision", "sweep_name", "sweep_id", "experiment", "baseline", "n_points_total")
    meta = {f"attnsim.{k}": table.attrs[k] for k in keep if table.attrs.get(k) not in (None, "")}
    meta.update(
        {
            "attnsim.kind": table.kind,
            "attnsim.source": str(table.path),
            "attnsim.parameters": json.dumps(table.parameters),
        }
    )
    return meta


def _optional(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"expected the optional dependency {module} (pip install {extra}), got none installed", file=module
        ) from None


# ---------------------------------------------------------------- attnsim show of a sweep store

SHOW_METRICS = ("ttft_s", "tpot_s", "tokens_per_s", "energy_per_token_j", "ttft_p99", "tpot_p99", "goodput_rps")
SHOW_RATIOS = ("vs_baseline.throughput_ratio", "vs_baseline.energy_efficiency_ratio")


def sweep_text(table: Table, max_rows: int = 200) -> str:
    """One line per point: swept parameters, status, key metrics and (with a baseline) vs_baseline ratios;
    parameters with one value (an implicit axis of one entry) are printed once above the table."""
    params = [p for p in table.parameters if p in table.columns]
    fixed = [p for p in params if len(set(table.columns[p].tolist())) == 1 and len(table) > 1]
    names = [p for p in params if p not in fixed] + ["status"]
    names += [m for m in SHOW_METRICS if m in table.columns and np.isfinite(table.columns[m].astype(float)).any()]
    names += [r for r in SHOW_RATIOS if r in table.columns]
    rows = [[unit_name(n) if n not in table.parameters else n for n in names]]
    for i in range(min(len(table), max_rows)):
        rows.append([_show_cell(table.columns[n][i]) for n in names])
    w = [max(len(r[j]) for r in rows) for j in range(len(names))]
    num = [all(_is_num(r[j]) for r in rows[1:]) for j in range(len(names))]
    lines = ["  ".join(c.rjust(w[j]) if num[j] else c.ljust(w[j]) for j, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * x for x in w))
    if fixed:
        lines.insert(0, "fixed: " + ", ".join(f"{p}={_show_cell(table.columns[p][0])}" for p in fixed))
    if len(table) > max_rows:
        lines.append(f"... {len(table) - max_rows} more points (attnsim export FILE --csv | --parquet for all)")
    return "\n".join(lines)


def _show_cell(v) -> str:
    if isinstance(v, (float, np.floating)):
        return "-" if not np.isfinite(v) else f"{float(v):.4g}"
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return str(int(v))
    return str(v) if str(v) else "-"


def _is_num(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return s == "-"


def _cell(v) -> str:
    """One CSV cell: numbers as text; a stored string that a spreadsheet would run as a formula is quoted
    (attnsim.core.outputs.csv_cell: a store may come from someone else)."""
    from attnsim.core.outputs import csv_cell

    if isinstance(v, (float, np.floating)):
        return "" if np.isnan(v) else repr(float(v))
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return csv_cell(str(v))
