"""The options each figure recipe reads (no matplotlib import, so sweep files can be checked on load).

An option a recipe does not read is refused rather than silently ignored, both on the command line
(``attnsim plot --recipe latency_by_op --x ...``) and in a sweep file's ``figures:`` block.
"""

from __future__ import annotations

from typing import Optional

from attnsim.core.config import ConfigError

_LINE = ("x", "y", "hue", "logx", "logy", "xlim", "ylim", "replicate")
RECIPE_OPTIONS = {
    "latency_by_op": ("y", "logy", "ylim", "components"),  # y: the phase
    "latency_by_device": ("y", "logy", "ylim", "components"),
    "energy_breakdown": ("y", "logy", "ylim", "components"),  # components: the segments drawn
    "panels": _LINE,  # y: the panels' metrics, comma-separated
    "throughput_vs_batch": _LINE,
    "tpot_vs_batch": _LINE,
    "throughput_vs_context": _LINE,
    "tpot_vs_context": _LINE,
    "line": _LINE,
    "ratio": ("x", "y", "hue", "baseline", "logx", "logy", "xlim", "ylim"),
    "roofline": ("y", "xlim", "ylim"),
    "heatmap": ("x", "y", "z", "hue"),  # hue: another name for z
    "pareto": ("x", "y", "hue", "z", "logx", "logy", "xlim", "ylim"),
    "tornado": ("xlim",),  # one compared run's verdict_flips section (attnsim.studies.verdict)
    "latency_cdf": ("logx",),  # serve results: per-request rows
    "latency_ccdf": ("logx",),
    "plan_front": ("logx", "title", "width"),  # an attnsim plan document (JSON)
}
COMMON = ("labels", "font")  # every recipe reads these
TABLE_COMMON = ("where", "width", "title")  # and every recipe over a results table these
SERVE_RECIPES = ("latency_cdf", "latency_ccdf")  # draw an `attnsim serve` results file, not a table
# the recipes that draw a file that is not a results table, with their line in `attnsim plot --list` and
# `attnsim list recipes` (the table recipes' lines come from their docstrings)
DOC_RECIPE_SUMMARIES = {
    "latency_cdf": "TTFT / TPOT / latency CDFs per run of an `attnsim serve` results file",
    "latency_ccdf": "TTFT / TPOT / latency CCDFs (log y) with the SLO lines, `attnsim serve` results",
    "plan_front": "TPOT and J/token vs attention error: the front of an `attnsim plan -o PLAN.json`",
}
DOC_RECIPES = tuple(DOC_RECIPE_SUMMARIES)  # SERVE_RECIPES + plan_front


def accepted(recipe: str) -> tuple:
    """Every option ``recipe`` reads."""
    return RECIPE_OPTIONS[recipe] + COMMON + (() if recipe in DOC_RECIPES else TABLE_COMMON)


def figure_options(spec) -> dict:
    """The keyword options of :func:`attnsim.plots.render` held by a sweep file's figure entry."""
    names = (
        "x",
        "y",
        "hue",
        "z",
        "where",
        "width",
        "title",
        "labels",
        "logx",
        "logy",
        "xlim",
        "ylim",
        "font",
        "baseline",
        "replicate",
        "components",
    )
    return {n: getattr(spec, n) for n in names}


def check_limits(value, file: Optional[str], key: str):
    """(lo, hi) floats with lo < hi, or a ConfigError."""
    import math

    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"expected two numbers LO,HI, got {value!r}", file=file, key=key) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(f"expected finite LO < HI, got {lo:g},{hi:g}", file=file, key=key)
    return lo, hi


def recipe_problem(recipe: str, given: dict, prefix: str = "") -> Optional[str]:
    """Why ``recipe`` with the options in ``given`` (name -> value, None = not given) is refused, or None;
    option names are written with ``prefix`` (``--`` on the command line)."""
    if recipe not in RECIPE_OPTIONS:
        from attnsim.core.suggest import did_you_mean

        return (
            f"unknown recipe {recipe!r}{did_you_mean(recipe, RECIPE_OPTIONS)} (available: {', '.join(RECIPE_OPTIONS)})"
        )
    unused = [
        k
        for k, v in given.items()
        if v is not None and not (isinstance(v, (dict, list)) and not v) and k not in accepted(recipe)
    ]
    if unused:
        uses = ", ".join(prefix + k for k in RECIPE_OPTIONS[recipe] + COMMON[:2])
        return f"the {recipe} recipe does not use {', '.join(prefix + k for k in unused)} (it uses: {uses})"
    return None


def check_recipe(recipe: str, given: dict, file: Optional[str] = "plot") -> None:
    """ConfigError (key ``--recipe``) for :func:`recipe_problem` of command-line options."""
    problem = recipe_problem(recipe, given, prefix="--")
    if problem:
        raise ConfigError(problem, file=file, key="--recipe")
