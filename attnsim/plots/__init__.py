"""Paper-style figures from sweep stores and ``attnsim run`` results (``attnsim plot``).

``render(table, recipe, out, ...)`` selects rows (``where``), calls a recipe of :data:`RECIPES` in the
paper style (:mod:`attnsim.plots.style`) and writes PDF + PNG; ``figure(...)`` returns the Figure only.
Options every recipe takes: ``labels`` (display names, :mod:`attnsim.plots.labels`), ``font``
(:func:`attnsim.plots.style.resolve_font`); per recipe (:data:`attnsim.core.plot_options.RECIPE_OPTIONS`):
``logx`` / ``logy`` (True: log scale, False: linear, None: the recipe's choice), ``xlim`` / ``ylim``
((lo, hi) in the column's stored units, e.g. seconds for ``tpot_s`` even when the axis shows ms),
``baseline`` (ratio) and ``replicate`` (line recipes). Tick labels are then made non-overlapping
(:mod:`attnsim.plots.ticks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from attnsim.core.config import ConfigError
from attnsim.core.plot_options import check_limits, check_recipe
from attnsim.plots import recipes as _r
from attnsim.plots.labels import active as _labels_active
from attnsim.plots.labels import check_labels
from attnsim.plots.style import paper_style, save

RECIPES = {
    "latency_by_op": _r.latency_by_op,
    "latency_by_device": _r.latency_by_device,
    "energy_breakdown": _r.energy_breakdown,
    "throughput_vs_batch": _r.throughput_vs_batch,
    "tpot_vs_batch": _r.tpot_vs_batch,
    "throughput_vs_context": _r.throughput_vs_context,
    "tpot_vs_context": _r.tpot_vs_context,
    "line": _r.line,
    "ratio": _r.ratio,
    "roofline": _r.roofline,
    "heatmap": _r.heatmap,
    "pareto": _r.pareto,
    "panels": _r.panels,
    "tornado": _r.verdict_tornado,
}


def figure(
    table,
    recipe: str,
    *,
    x=None,
    y=None,
    hue=None,
    z=None,
    where: Optional[dict] = None,
    width: Optional[str] = None,
    title=None,
    labels: Optional[dict] = None,
    logx=None,
    logy=None,
    xlim=None,
    ylim=None,
    font=None,
    baseline=None,
    replicate=None,
    components=None,
):
    """The matplotlib Figure of ``recipe`` over ``table`` rows matching ``where`` (options: module docstring).
    ``table``: a :class:`attnsim.studies.sweep.table.Table`, a results file path, the Python API's results object
    (``attnsim.run`` / ``load`` / ``sweep``) or a pandas DataFrame of its ``to_pandas()`` columns."""
    if recipe not in RECIPES:
        from attnsim.core.suggest import did_you_mean

        raise ConfigError(
            f"unknown recipe {recipe!r}{did_you_mean(recipe, RECIPES)} (available: {', '.join(RECIPES)})",
            file="--recipe",
        )
    table = as_table(table)
    if isinstance(components, str):
        components = [c.strip() for c in components.split(",") if c.strip()]
    check_recipe(
        recipe,
        {
            "x": x,
            "y": y,
            "hue": hue,
            "z": z,
            "logx": logx,
            "logy": logy,
            "xlim": xlim,
            "ylim": ylim,
            "baseline": baseline,
            "replicate": replicate,
            "components": components,
        },
    )
    xlim, ylim = check_limits(xlim, "plot", "--xlim"), check_limits(ylim, "plot", "--ylim")
    if labels is not None:  # every key must name something a figure of this table can draw
        from attnsim.plots.labels import known_keys
        from attnsim.plots.style import check_units

        labels = check_labels(labels, "plot", "labels", known=known_keys(table))
        check_units(labels, "plot", "labels")
    for flag, lim, name in ((logx, xlim, "x"), (logy, ylim, "y")):
        if flag and lim is not None and lim[0] <= 0:
            raise ConfigError(f"expected LO > 0 on a log axis, got {lim[0]:g}", file="plot", key=f"--{name}lim")
    extra = {
        k: v
        for k, v in (("baseline", baseline), ("replicate", replicate), ("components", components), ("width", width))
        if v is not None
    }
    with paper_style(font), _labels_active(labels):
        fig = RECIPES[recipe](table.select(where), x=x, y=y, hue=hue, z=z, title=title, **extra)
        finish(fig, logx=logx, logy=logy, xlim=xlim, ylim=ylim)
    return fig


MAX_PLAN_BYTES = 64 << 20  # an attnsim plan document: a few kB per front point; refused above this, unread


def plan_figure(doc, out=None, *, width=None, title=None, labels: Optional[dict] = None, font=None, logx=None):
    """The ``plan_front`` figure of an ``attnsim plan`` document (a dict, or the JSON file ``attnsim plan -o``
    writes); with ``out`` written as PDF + PNG (returns the paths), else the Figure."""
    import json

    from attnsim.plots.labels import known_keys

    if not isinstance(doc, dict):
        p = Path(doc)
        if not p.is_file():
            raise ConfigError("file not found", file=str(p))
        if p.stat().st_size > MAX_PLAN_BYTES:
            raise ConfigError(
                f"expected an attnsim plan document of at most {MAX_PLAN_BYTES} bytes, got {p.stat().st_size}",
                file=str(p),
            )
        try:
            doc = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"expected an attnsim plan document (JSON), got unreadable text ({exc})", file=str(p)
            ) from None
        if not isinstance(doc, dict):
            raise ConfigError("expected an attnsim plan document (a JSON object)", file=str(p))
    if labels is not None:
        labels = check_labels(
            labels,
            "plot",
            "labels",
            known=known_keys() | {"rel_attention_error", "unit.tpot_s", "unit.energy_per_token_j"},
        )
    with paper_style(font), _labels_active(labels):
        fig = _r.plan_front(doc, width=width or "double", title=title, logx=logx)
        finish(fig)
    if out is None:
        return fig
    import matplotlib.pyplot as plt

    try:
        with paper_style():
            return save(fig, out)
    finally:
        plt.close(fig)


def as_table(obj):
    """The :class:`attnsim.studies.sweep.table.Table` of a recipe's input: a Table, a results file or sweep store path,
    a results object of the Python API (its ``table()``) or a pandas DataFrame (``to_pandas()`` columns)."""
    from attnsim.studies.sweep.table import Table, load_table, table_from_frame

    if isinstance(obj, Table):
        return obj
    if isinstance(obj, (str, Path)):
        return load_table(obj)
    if callable(getattr(obj, "table", None)):
        return obj.table()
    if hasattr(obj, "columns") and hasattr(obj, "to_dict") and hasattr(obj, "attrs"):
        return table_from_frame(obj)
    raise ConfigError(
        f"expected a results file, a Table, an attnsim results object or a pandas DataFrame, got {type(obj).__name__}",
        file="plot",
    )


def finish(fig, logx=None, logy=None, xlim=None, ylim=None) -> None:
    """Apply axis scales and limits to every data axis (not colour bars), then fit the tick labels."""
    from attnsim.plots.ticks import fit_ticks

    for ax in fig.axes:
        if not hasattr(ax, "_attnsim_units"):
            continue
        xf, yf = ax._attnsim_units
        for flag, lim, f, setter, scale, name in (
            (logx, xlim, xf, ax.set_xlim, ax.set_xscale, "x"),
            (logy, ylim, yf, ax.set_ylim, ax.set_yscale, "y"),
        ):
            if flag is not None:
                scale("log" if flag else "linear")
            if lim is not None:
                if (ax.get_xscale() if name == "x" else ax.get_yscale()) == "log" and lim[0] <= 0:
                    raise ConfigError(f"expected LO > 0 on a log axis, got {lim[0]:g}", file="plot", key=f"--{name}lim")
                setter(lim[0] * f, lim[1] * f)
    fit_ticks(fig)


def render(table, recipe: str, out: str | Path, **kw) -> list[Path]:
    """Render a recipe to ``out`` (+ the other of PDF/PNG beside it); returns the written paths."""
    import matplotlib.pyplot as plt

    fig = figure(table, recipe, **kw)
    try:
        with paper_style():
            return save(fig, out)
    finally:
        plt.close(fig)
