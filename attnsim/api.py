"""The documented Python API (docs/api.md): ``attnsim.run``, ``load``, ``serve``, ``sweep`` and their results.

Every entry point goes through the same code as the CLI (``attnsim run`` / ``serve`` / ``sweep``):
:func:`attnsim.sim.experiment.load_experiment` with ``--set`` strings, :func:`attnsim.sim.runner.run_experiment`,
:func:`attnsim.studies.serve.run.serve_experiment`, :func:`attnsim.studies.sweep.executors.run_sweep`; tables come
from the one flattening of :mod:`attnsim.studies.sweep.table`; files are written by
:func:`attnsim.sim.results.write_results` after :func:`attnsim.core.outputs.check_output`. Bad input raises
:class:`attnsim.core.config.ConfigError` with the CLI's one-line message (an experiment given as a dict
is the file ``<dict>``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, Union

from attnsim.core import notices
from attnsim.core.config import ConfigError

Experiment = Union[str, Path, Mapping, None]


# ---------------------------------------------------------------- sets


def _set_text(key: str, value: Any) -> str:
    """``value`` as the YAML text ``--set key=TEXT`` reads back to the same value."""
    import numpy as np
    import yaml

    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    except yaml.YAMLError:
        raise ConfigError(
            f"expected a number, string, boolean, None, list or mapping, got {type(value).__name__}",
            file="sets",
            key=key,
        ) from None
    return text[:-5] if text.endswith("\n...\n") else text.rstrip("\n")


def set_strings(sets: Optional[Mapping | Iterable[str]]) -> list[str]:
    """``sets`` (``{dotted key: value}``, or ``["key=value", ...]`` as on the command line) as ``--set`` strings."""
    if sets is None:
        return []
    if isinstance(sets, Mapping):
        out = []
        for k, v in sets.items():
            if not isinstance(k, str) or not k:
                raise ConfigError(f"expected a dotted key like models.llama2-70b.num_layers, got {k!r}", file="sets")
            out.append(f"{k}={_set_text(k, v)}")
        return out
    if isinstance(sets, str) or not all(isinstance(s, str) for s in sets):
        raise ConfigError(
            f"expected a dict of dotted keys -> values or a list of 'key=value' strings, got {type(sets).__name__}",
            file="sets",
        )
    return list(sets)


def _experiment_ref(experiment: Experiment):
    if experiment is None or isinstance(experiment, (str, Path)):
        return None if experiment is None else str(experiment)
    if isinstance(experiment, Mapping):
        return dict(experiment)
    raise ConfigError(
        f"expected a built-in experiment name, a path or a dict, got {type(experiment).__name__}", file="experiment"
    )


# ---------------------------------------------------------------- results


class Results:
    """Run documents of ``attnsim run`` (or a sweep store's points) with tabular views.

    ``docs``: the run documents, as written to results files (``attnsim show --json`` prints them);
    ``experiment``: its name; ``path``: the file it was loaded from or saved to (None when in memory);
    ``parameters``: the swept keys (sweep stores; empty otherwise).
    """

    kind = "run"

    def __init__(
        self,
        docs: list[dict],
        experiment: str = "",
        *,
        tree: Optional[dict] = None,
        attrs: Optional[dict] = None,
        path: Optional[Path] = None,
        table=None,
    ):
        self.docs = list(docs)
        self.experiment = experiment
        self.attrs = dict(attrs or {"experiment": experiment})
        self.path = path
        self._tree = tree
        self._table = table

    # sequence of run documents
    def __len__(self) -> int:
        return len(self.docs)

    def __iter__(self):
        return iter(self.docs)

    def __getitem__(self, i: int) -> dict:
        return self.docs[i]

    @property
    def parameters(self) -> list[str]:
        return list(self.table().parameters)

    def table(self):
        """The :class:`attnsim.studies.sweep.table.Table` view (the columns ``attnsim export`` and plots use)."""
        if self._table is None:
            from attnsim.studies.sweep.table import table_from_docs

            self._table = table_from_docs(self.path or Path("<memory>"), self.attrs, self.docs)
        return self._table

    def plot(self, recipe: str, out: Optional[str | Path] = None, **options):
        """Figure ``recipe`` of these results (``attnsim plot FILE --recipe RECIPE``; options as
        :func:`attnsim.plots.figure`: ``x``, ``y``, ``hue``, ``where``, ``labels``, ``components``, ...). Returns
        the matplotlib Figure, or with ``out`` writes it (PDF + PNG) and returns the two paths."""
        from attnsim.plots import figure, render

        if out is None:
            return figure(self.table(), recipe, **options)
        return render(self.table(), recipe, out, **options)

    def to_pandas(self):
        """One row per run: the columns ``attnsim export`` writes (attnsim.studies.sweep.table ``export_columns``: fixed
        columns, swept parameters, metrics with a unit in every name, ``vs_baseline.*``, breakdowns)."""
        from attnsim.studies.sweep.table import to_pandas

        return to_pandas(self.table())

    @property
    def vs_baseline(self):
        """Ratios against the baseline system (DataFrame, one row per run / point): system, model, scenario,
        the other swept parameters, ``baseline``, ``status`` (``ok``, ``is_baseline``, ``baseline_not_ok``,
        ``baseline_missing``, ``not_ok``) and the ratios (``throughput_ratio``, ``tpot_speedup``, ...);
        empty when the experiment or sweep has no baseline."""
        import pandas as pd

        from attnsim.studies.sweep.baselines import PREFIX

        t = self.table()
        ratios = [c for c in t.columns if c.startswith(PREFIX)]
        if not ratios:
            return pd.DataFrame()
        ids = ["system", "model", "scenario"] + [
            p for p in t.parameters if p in t.columns and p not in ("system", "model", "scenario")
        ]
        base = t.attrs.get("baseline") or next(
            (d["vs_baseline"].get("baseline") for d in self.docs if isinstance(d.get("vs_baseline"), dict)), None
        )
        cols = {**{k: t.columns[k] for k in ids}, "baseline": [base] * len(t)}
        cols.update({c[len(PREFIX) :]: t.columns[c] for c in ratios})
        return pd.DataFrame(cols)

    @property
    def verdict_flips(self):
        """What would flip each verdict (DataFrame, one row per compared run / point and assumed parameter; empty
        unless computed: ``attnsim.run(..., flips=True)``, ``attnsim run``, ``attnsim sweep --flips``): system,
        model, scenario, the other swept parameters, ``baseline``, ``parameter`` (``hardware.<name>.<key>``),
        its ``value``, ``low`` and ``high``, the throughput ratio at the low end, by default and at the high end
        (``ratio_low``, ``ratio_base``, ``ratio_high``), ``flips`` (an end on the other side of 1.0) and
        ``moves_over_10pct`` (an end more than 10 % from ``ratio_base``). attnsim.studies.verdict."""
        import pandas as pd

        t = self.table()
        ids = ["system", "model", "scenario"] + [
            p for p in t.parameters if p in t.columns and p not in ("system", "model", "scenario")
        ]
        rows = []
        for i, d in enumerate(self.docs):
            sec = d.get("verdict_flips")
            if not isinstance(sec, dict):
                continue
            for r in sec.get("parameters", ()):
                rows.append(
                    {
                        **{k: t.columns[k][i] for k in ids},
                        "baseline": sec["baseline"],
                        "parameter": r["parameter"],
                        "value": r["value"],
                        "low": r["low"],
                        "high": r["high"],
                        "ratio_low": r["ratio_low"],
                        "ratio_base": sec["ratio_base"],
                        "ratio_high": r["ratio_high"],
                        "flips": r["flips"],
                        "moves_over_10pct": r["moves_over_10pct"],
                    }
                )
        return pd.DataFrame(rows)

    def save(self, path: str | Path) -> Path:
        """Write the HDF5 results file ``attnsim run`` writes (atomic; the path is checked first)."""
        if self.kind == "sweep":
            raise ConfigError(
                "a sweep store is written by attnsim.sweep(..., out=...); copy that file instead",
                file=str(path),
                key="save",
            )
        tree = self.resolved_config(path)
        from attnsim.core.outputs import check_output
        from attnsim.sim.results import write_results

        out = check_output(path, "save", inputs=[self.path] if self.path else [])
        self.path = write_results(out, self.docs, tree, self.experiment, argv=["attnsim.api"])
        return self.path

    def resolved_config(self, path=None) -> dict:
        """The resolved config tree of the runs (a loaded file's ``resolved_config`` attribute)."""
        if self._tree is None:
            text = self.attrs.get("resolved_config")
            if not isinstance(text, str):
                raise ConfigError(
                    "no resolved config to store (the results file has none)", file=str(path or self.path), key="save"
                )
            from attnsim.core.config import parse_yaml

            self._tree = parse_yaml(text, file=f"{self.path}: resolved_config") or {}
        return self._tree

    def _repr_rows(self) -> str:
        from attnsim.core.report import summary_table

        return summary_table(self.docs)

    def __repr__(self) -> str:
        head = f"<{type(self).__name__} {self.experiment or '?'}: {len(self)} run{'s' * (len(self) != 1)}>"
        try:
            return head + "\n" + self._repr_rows()
        except (KeyError, TypeError, ValueError):  # an odd document (e.g. a custom point function's)
            return head


class SweepResults(Results):
    """The points of a sweep store (``attnsim.studies.sweep`` / ``attnsim.load``); ``summary`` after a run."""

    kind = "sweep"
    summary = None

    def _repr_rows(self) -> str:
        from attnsim.studies.sweep.table import sweep_text

        return sweep_text(self.table(), max_rows=20)  # what `attnsim show STORE` prints


def run(
    experiment: Experiment = None,
    sets: Optional[Mapping | Iterable[str]] = None,
    *,
    systems: Optional[Iterable[str]] = None,
    models: Optional[Iterable[str]] = None,
    flips: bool = False,
) -> Results:
    """Simulate an experiment like ``attnsim run``: ``experiment`` = a built-in name (``"default"``), a YAML
    path, or a dict in the YAML's shape; ``sets`` = ``{dotted key: value}`` (``--set``); ``systems`` /
    ``models`` replace the experiment's lists (``experiment.systems=[...]``); ``flips``: with a baseline, also
    what would flip each verdict (:attr:`Results.verdict_flips`, attnsim.studies.verdict; re-runs: off by default)."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    notices.to_stderr()  # 'attnsim: compiling Numba kernels ...' when this call compiles them (attnsim.core.jitcache)
    s = _list_sets(systems, models) + set_strings(sets)
    exp = load_experiment(_experiment_ref(experiment), s)
    if exp.spec.serving is not None:
        raise ConfigError(
            "expected no serving section for attnsim.run (it simulates static batches): use "
            "attnsim.studies.serve, or sets={'experiment.serving': None}, got a serving section",
            file=exp.tree.file_of("experiment"),
            key="serving",
        )
    docs = run_experiment(exp)
    if flips:
        _add_flips(exp, docs)
    return Results(docs, exp.spec.name, tree=exp.tree.as_dict())


def _add_flips(exp, docs: list[dict]) -> dict:
    """Add the ``verdict_flips`` section to the compared runs ``docs`` of a loaded experiment (what ``attnsim
    run`` does; attnsim.studies.verdict.add_flips); returns the cost {parameters, reruns, wall_s}. Refused without a
    baseline."""
    from attnsim.hwmodels.system import ref_name
    from attnsim.studies.verdict import add_flips

    if not exp.spec.baseline:
        raise ConfigError(
            "expected an experiment with a baseline, got none", file=exp.tree.file_of("experiment"), key="baseline"
        )
    return add_flips(exp.tree, docs, ref_name(exp.spec.baseline))


def _list_sets(systems, models) -> list[str]:
    """``systems=`` / ``models=`` as the ``--set`` strings ``experiment.systems=[...]`` (a baseline outside the
    new list is refused, as on the command line: add ``sets={"experiment.baseline": None}``)."""
    out = []
    for key, names in (("systems", systems), ("models", models)):
        if names is not None:
            names = names if isinstance(names, str) or not isinstance(names, Iterable) else list(names)
            if not isinstance(names, str) and not (
                isinstance(names, list) and all(isinstance(n, (str, Path)) for n in names)
            ):
                raise ConfigError(f"expected a name or a list of names, got {names!r}", file=key)
            names = names if isinstance(names, str) else [str(n) for n in names]
            out.append(f"experiment.{key}={_set_text(key, [names] if isinstance(names, str) else list(names))}")
    return out


# ---------------------------------------------------------------- load


def load(path: str | Path) -> Results:
    """A results file of ``attnsim run`` / ``serve`` (or ``Results.save``) or a sweep store."""
    from attnsim.studies.sweep.store import is_sweep_store
    from attnsim.studies.sweep.table import load_table

    if not isinstance(path, (str, Path)):
        raise ConfigError(f"expected a results file or sweep store path, got {type(path).__name__}", file="path")
    path = Path(path)
    table = load_table(path)
    if is_sweep_store(path):
        r = SweepResults(
            list(table.docs()), str(table.attrs.get("sweep_name", "")), attrs=table.attrs, path=path, table=table
        )
        return r
    docs = list(table.docs())
    if table.attrs.get("command") == "serve":
        from attnsim.studies.sweep.table import request_columns

        return ServeResults(
            docs,
            str(table.attrs.get("experiment", "")),
            attrs=table.attrs,
            path=path,
            table=table,
            requests=request_columns(path) or {},
        )
    return Results(docs, str(table.attrs.get("experiment", "")), attrs=table.attrs, path=path, table=table)


# ---------------------------------------------------------------- serve


class ServeResults(Results):
    """Serving runs (``attnsim.studies.serve``): ``to_pandas()`` = one row per request (every run), ``metrics`` =
    {run label: {metric with unit: value}}, ``runs()`` = one row per run."""

    def __init__(self, docs, experiment="", *, requests=None, **kw):
        """``requests``: the per-request columns under export names (default: from the documents' rows)."""
        from attnsim.studies.sweep.table import unit_name

        super().__init__([{k: v for k, v in d.items() if not k.startswith("_")} for d in docs], experiment, **kw)
        if requests is None:
            from attnsim.cli.serve import request_rows

            a = request_rows(docs)
            requests = {unit_name(n): a[n] for n in a.dtype.names}
        self._requests = requests

    def labels(self) -> list[str]:
        """One label per run: its system (or disaggregation pair), with model and scenario when they vary."""
        keys = [(d.get("system"), d.get("model"), (d.get("scenario") or {}).get("name")) for d in self.docs]
        wide = len({k[1:] for k in keys}) > 1
        return [f"{s}/{m}/{c}" if wide else str(s) for s, m, c in keys]

    @property
    def metrics(self) -> dict[str, dict]:
        """{run label: {metric: value}}, every quantity's name with its unit (attnsim.studies.sweep.table ``unit_name``:
        ``ttft_p50_s``, ``slo_attainment_ratio``, ``requests_count``, ``goodput_rps``, ...)."""
        from attnsim.studies.sweep.table import unit_name

        return {
            lab: {unit_name(k): v for k, v in (d.get("metrics") or {}).items()}
            for lab, d in zip(self.labels(), self.docs)
        }

    def plot(self, recipe: str, out: Optional[str | Path] = None, **options):
        """Figure ``recipe`` of these runs: ``latency_cdf`` / ``latency_ccdf`` draw the per-request rows (as
        ``attnsim plot FILE --recipe latency_cdf``; options ``logx``, ``labels``, ``font``; the CCDF marks the
        runs' SLOs); any other recipe draws the run table like :meth:`Results.plot`. Returns the matplotlib
        Figure, or with ``out`` writes it (PDF + PNG) and returns the two paths."""
        from attnsim.core.plot_options import SERVE_RECIPES, recipe_problem

        if recipe not in SERVE_RECIPES:
            return super().plot(recipe, out, **options)
        style = {k: options.pop(k) for k in ("labels", "font") if k in options}
        problem = recipe_problem(recipe, options)
        if problem:
            raise ConfigError(problem, file="ServeResults.plot", key="recipe")
        from attnsim.cli.serve import request_rows
        from attnsim.plots.serve import cdf_figure, check_request_labels, latency_cdf, slos_of

        requests = request_rows(self._docs_with_requests())
        check_request_labels(style.get("labels"), requests, file="ServeResults.plot")
        ccdf = recipe == "latency_ccdf"
        slos = slos_of(self.docs) if ccdf else None
        if out is not None:
            return latency_cdf(requests, Path(out), ccdf=ccdf, slos=slos, logx=options.get("logx"), **style)
        from attnsim.plots.labels import active
        from attnsim.plots.style import paper_style

        with paper_style(style.get("font")), active(style.get("labels")):
            return cdf_figure(requests, ccdf=ccdf, slos=slos, logx=options.get("logx"))

    def to_pandas(self):
        """One row per request: run, system, model, scenario, request, then the per-request columns
        (``arrival_s``, ``ttft_s``, ``tpot_s``, ``latency_s``, ``queue_s``, ``energy_j``, token counts)."""
        import pandas as pd

        return pd.DataFrame(self._requests)

    def runs(self):
        """One row per run (the run table, as :meth:`Results.to_pandas`)."""
        return Results.to_pandas(self)

    def save(self, path: str | Path) -> Path:
        """Write the results file ``attnsim serve`` writes (with the ``/requests`` table)."""
        tree = self.resolved_config(path)
        from attnsim.cli.serve import write_serve_results
        from attnsim.core.outputs import check_output

        out = check_output(path, "save", inputs=[self.path] if self.path else [])
        self.path = write_serve_results(out, self._docs_with_requests(), tree, self.experiment)
        return self.path

    def _docs_with_requests(self) -> list[dict]:
        """The documents with their ``_requests`` rows again (what attnsim.cli.serve writes)."""
        import numpy as np

        from attnsim.cli.serve import REQUEST_COLUMNS
        from attnsim.studies.sweep.table import unit_name

        r = self._requests
        out = []
        for i, d in enumerate(self.docs):
            sel = np.asarray(r["run"]) == i if "run" in r else np.zeros(0, bool)
            out.append(
                {**d, "_requests": {c: np.asarray(r[unit_name(c)])[sel] for c in REQUEST_COLUMNS}} if sel.any() else d
            )
        return out

    def _repr_rows(self) -> str:
        from attnsim.cli.serve import summary_table

        return summary_table(self.docs)


def serve(experiment: Experiment, sets: Optional[Mapping | Iterable[str]] = None) -> ServeResults:
    """Request-level serving like ``attnsim serve`` (the experiment needs a ``serving:`` section)."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    notices.to_stderr()
    exp, serving = load_serving_experiment(_experiment_ref(experiment), set_strings(sets))
    docs = serve_experiment(exp, serving)
    return ServeResults(docs, exp.spec.name, tree=exp.tree.as_dict())


# ---------------------------------------------------------------- sweep


def sweep(
    sweep: str | Path | Mapping,
    out: str | Path,
    sets: Optional[Mapping | Iterable[str]] = None,
    *,
    executor: str = "local",
    workers: Optional[int] = None,
    cache: Optional[str | Path] = None,
    flips: bool = False,
) -> SweepResults:
    """Run (or resume) a sweep like ``attnsim sweep SWEEP --out OUT``: ``sweep`` = a built-in name, a YAML path
    or a dict in the sweep file's shape (its ``base`` relative to the working folder); returns the store.
    ``flips``: ``--flips`` (the ``verdict_flips`` column and :attr:`Results.verdict_flips`)."""
    from attnsim.core.outputs import check_output
    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import build_sweep, load_sweep

    notices.to_stderr()
    s = set_strings(sets)
    if isinstance(sweep, Mapping):
        sw = build_sweep(dict(sweep), file="<dict>", extra_sets=s)
        inputs = []
    elif isinstance(sweep, (str, Path)):
        sw = load_sweep(str(sweep), extra_sets=s)
        inputs = [sweep] if Path(sweep).is_file() else []
    else:
        raise ConfigError(f"expected a built-in sweep name, a path or a dict, got {type(sweep).__name__}", file="sweep")
    check_output(out, "out", inputs=inputs, create=True)
    summary = run_sweep(
        sw,
        out,
        executor=executor,
        workers=workers,
        cache_dir=cache,
        progress=False,
        argv=["attnsim.api.sweep"],
        flips=flips,
    )
    res = load(summary.out)
    res.summary = summary
    return res
