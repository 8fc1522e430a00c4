"""Paper-style figures from sweep stores and ``attnsim run`` results (``attnsim plot``).

``render(table, recipe, out, ...)`` selects rows (``where``), calls a recipe of :data:`RECIPES` in the
paper style (:mod:`attnsim.plots.style`) and writes PDF + PNG; ``figure(...)`` returns the Figure only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from attnsim.config import ConfigError
from attnsim.plots import recipes as _r
from attnsim.plots.options import check_recipe
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
    "roofline": _r.roofline,
    "heatmap": _r.heatmap,
    "pareto": _r.pareto,
}


def figure(table, recipe: str, *, x=None, y=None, hue=None, z=None, where: Optional[dict] = None,
           width: str = "single", title=None):
    """The matplotlib Figure of ``recipe`` over ``table`` rows matching ``where``."""
    if recipe not in RECIPES:
        from attnsim.suggest import did_you_mean
        raise ConfigError(f"unknown recipe {recipe!r}{did_you_mean(recipe, RECIPES)} (available: {', '.join(RECIPES)})",
                          file="--recipe")
    check_recipe(recipe, {"x": x, "y": y, "hue": hue, "z": z})
    with paper_style():
        return RECIPES[recipe](table.select(where), x=x, y=y, hue=hue, z=z, width=width, title=title)


def render(table, recipe: str, out: str | Path, **kw) -> list[Path]:
    """Render a recipe to ``out`` (+ the other of PDF/PNG beside it); returns the written paths."""
    import matplotlib.pyplot as plt
    fig = figure(table, recipe, **kw)
    try:
        with paper_style():
            return save(fig, out)
    finally:
        plt.close(fig)
