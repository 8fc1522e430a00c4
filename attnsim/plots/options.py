"""The options each figure recipe reads (no matplotlib import, so sweep files can be checked on load).

An option a recipe does not read is refused rather than silently ignored, both on the command line
(``attnsim plot --recipe latency_by_op --x ...``) and in a sweep file's ``figures:`` block.
"""
from __future__ import annotations

from typing import Optional

from attnsim.config import ConfigError

RECIPE_OPTIONS = {
    "latency_by_op": ("y",), "latency_by_device": ("y",), "energy_breakdown": ("y",),  # y: the phase
    "throughput_vs_batch": ("x", "y", "hue"), "tpot_vs_batch": ("x", "y", "hue"),
    "throughput_vs_context": ("x", "y", "hue"), "tpot_vs_context": ("x", "y", "hue"),
    "line": ("x", "y", "hue"),
    "roofline": ("y",),
    "heatmap": ("x", "y", "z", "hue"),  # hue: another name for z
    "pareto": ("x", "y", "hue", "z"),
    "latency_cdf": (),  # serve results: per-request rows, no options
}


def recipe_problem(recipe: str, given: dict, prefix: str = "") -> Optional[str]:
    """Why ``recipe`` with the options in ``given`` (name -> value, None = not given) is refused, or None;
    option names are written with ``prefix`` (``--`` on the command line)."""
    if recipe not in RECIPE_OPTIONS:
        from attnsim.suggest import did_you_mean
        return f"unknown recipe {recipe!r}{did_you_mean(recipe, RECIPE_OPTIONS)} (available: {', '.join(RECIPE_OPTIONS)})"
    unused = [k for k, v in given.items() if v not in (None, {}, []) and k not in RECIPE_OPTIONS[recipe]]
    if unused:
        uses = ", ".join(prefix + k for k in RECIPE_OPTIONS[recipe]) or "none"
        return f"the {recipe} recipe does not use {', '.join(prefix + k for k in unused)} (it uses: {uses})"
    return None


def check_recipe(recipe: str, given: dict, file: Optional[str] = "plot") -> None:
    """ConfigError (key ``--recipe``) for :func:`recipe_problem` of command-line options."""
    problem = recipe_problem(recipe, given, prefix="--")
    if problem:
        raise ConfigError(problem, file=file, key="--recipe")
