"""Figures a paper can use unedited: units on the axes, legend entries = the labelled systems, tick labels
whose text boxes never overlap (measured with the Agg renderer), capacity markers for points that do
not fit, line colours with WCAG contrast >= 3:1 on white, the bundled font, and the axis options."""

import itertools
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib import font_manager as fm
from matplotlib.text import Text
from sweep_helpers import write_sweep

from attnsim.cli import main as cli_main
from attnsim.core.config import ConfigError
from attnsim.plots import RECIPES, figure
from attnsim.plots.labels import DEFAULT_LABELS
from attnsim.plots.style import LINE_COLOURS, OKABE_ITO, contrast_ratio
from attnsim.plots.ticks import fit_ticks
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.table import Table, load_table

SYSTEMS = ["h100_x1", "dgx_h100"]
SHOWN = [DEFAULT_LABELS[s] for s in SYSTEMS]
BUNDLED = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
# Llama-2-13B on one H100 (80 GB): 26 GB of weights + 64 x 3080 tokens x 0.82 MB of KV cache does not fit
BASE = {
    "name": "q",
    "systems": ["h100_x1"],
    "models": ["llama2-13b"],
    "scenarios": {"chat": {"batch_size": 1, "prompt_len": 512, "output_len": 8}},
    "generation": {"mode": "sampled", "samples": 2},
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("quality")
    p = write_sweep(
        d,
        [{"grid": {"system": SYSTEMS, "scenario.batch_size": [1, 64], "scenario.prompt_len": [512, 3072]}}],
        name="q",
        base=BASE,
    )
    s = run_sweep(load_sweep(p), d / "q.h5", workers=1, progress=False, log=lambda m: None)
    assert s.status_counts == {"ok": 7, "does_not_fit": 1}
    return load_table(d / "q.h5")


DNF = {"batch_size": 64, "prompt_len": 3072}  # h100_x1 there does not fit
CASES = {  # recipe -> (options, expected y label or None for a pattern check, does-not-fit point selected)
    "latency_by_op": (dict(where=DNF, title="Llama-2-13B, batch 64"), "Decode-step latency (ms)", True),
    "latency_by_device": (dict(where=DNF), "Decode-step latency (ms)", True),
    "energy_breakdown": (dict(where={"batch_size": 64}), "Decode-step energy (mJ/token)", True),
    "throughput_vs_batch": (dict(where={"prompt_len": 3072}), "Decode throughput (tokens/s)", True),
    "tpot_vs_batch": (dict(where={"prompt_len": 3072}), "TPOT (ms)", True),
    "throughput_vs_context": (dict(where={"batch_size": 64}), "Decode throughput (tokens/s)", True),
    "tpot_vs_context": (dict(where={"batch_size": 1}), "TPOT (ms)", False),
    "line": (dict(x="batch_size", y="ttft_s", where={"prompt_len": 3072}), None, True),
    "ratio": (
        dict(x="batch_size", y="decode_tokens_per_s", baseline="dgx_h100", where={"prompt_len": 3072}),
        "Decode throughput vs DGX H100 (\u00d7)",
        True,
    ),
    "roofline": (
        dict(where={"system": "dgx_h100", "batch_size": 64, "prompt_len": 512}),
        "Performance (TFLOP/s)",
        False,
    ),
    "heatmap": (
        dict(x="scenario.batch_size", y="system", z="tpot_s", where={"prompt_len": 3072}, title="Llama-2-13B"),
        "System",
        True,
    ),
    # decode-only by default (issue 28): TPOT against the decode energy per token
    "pareto": (dict(), "Decode energy per token (J/token) \u2193", True),
    # throughput and J/token side by side, one legend for both panels
    "panels": (dict(where={"prompt_len": 3072}), "Decode throughput (tokens/s)", True),
    "tornado": (dict(where={"system": "dgx_h100"}), "Assumed parameter (* flips)", False),  # the flips table below
}


@pytest.fixture(scope="module")
def flips_table():
    """DGX H100 against one H100 (the baseline) with its verdict flips (attnsim.studies.verdict):
    the tornado's input."""
    import attnsim

    return attnsim.run({**BASE, "systems": SYSTEMS, "baseline": "h100_x1"}, flips=True).table()


def test_every_recipe_has_a_quality_case():
    assert set(CASES) == set(RECIPES)


def _tick_boxes(axis, renderer):
    lo, hi = sorted(axis.get_view_interval())
    eps = 1e-9 * (hi - lo)
    return [
        t.label1.get_window_extent(renderer)
        for t in axis.get_major_ticks() + axis.get_minor_ticks()
        if t.get_visible() and t.label1.get_visible() and t.label1.get_text() and lo - eps <= t.get_loc() <= hi + eps
    ]


def assert_ticks_apart(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for a, b in itertools.combinations(_tick_boxes(axis, r), 2):
                assert not (a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1), (
                    f"tick labels overlap on {axis.axis_name}: {a} {b}"
                )


def assert_contrast(fig):
    for ax in fig.axes:
        for ln in ax.get_lines():
            if ln.get_linestyle() not in ("None", "none", "") or ln.get_marker() not in ("None", "none", "", None):
                assert contrast_ratio(ln.get_color()) >= 3.0, (ln.get_label(), ln.get_color())
        for c in ax.collections:
            if c.get_array() is None and len(c.get_facecolor()):  # scatter in a fixed colour (not a colour map)
                assert all(contrast_ratio(fc[:3]) >= 3.0 for fc in c.get_facecolor()), c.get_label()


def assert_font(fig, file="DejaVuSans.ttf"):
    texts = [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    assert texts
    for t in texts:
        assert Path(fm.findfont(t.get_fontproperties())) == BUNDLED / file, t.get_text()


def legend_is(ax, names) -> bool:
    """The legend's entries are ``names`` (the default ratio's entry also shows its value)."""
    got = [t.split(" (")[0] if t.startswith("default") else t for t in _legend(ax)]
    return got == names


def _legend(ax_or_fig):
    leg = ax_or_fig.get_legend() if hasattr(ax_or_fig, "get_legend") else None
    return [t.get_text() for t in leg.get_texts()] if leg else []


@pytest.mark.parametrize("recipe", list(CASES))
def test_recipe_output_is_paper_ready(table, flips_table, recipe):
    opts, ylabel, has_dnf = CASES[recipe]
    fig = figure(flips_table if recipe == "tornado" else table, recipe, **opts)
    ax = fig.axes[0]
    # units: the y label as derived by hand from the metric's unit; x labels carry one or are categories
    if ylabel:
        assert ax.get_ylabel() == ylabel
    else:
        assert ax.get_ylabel() == "TTFT (s)"
    if recipe == "tornado":
        assert ax.get_xlabel() == "Throughput vs 1\u00d7 H100 (\u00d7)"
        # a categorical choice among the parameters (e.g. a DRAM controller rule set) adds its marks' entry first
        choice = ["alternative (choices:)"] if any(ln.get_gid() == "choice" for ln in ax.get_lines()) else []
        assert legend_is(ax, choice + ["default", "1\u00d7 (verdict flips)", "parameter at low", "parameter at high"])
    if recipe in ("roofline", "pareto"):
        assert ax.get_xlabel().startswith(("Arithmetic intensity (FLOP/B", "TPOT (ms)"))
    if recipe == "heatmap":
        assert fig.axes[1].get_ylabel() == "TPOT (ms)"  # the colour bar
    legend = _legend(ax) if recipe != "panels" else [t.get_text() for t in fig.legends[0].get_texts()]
    dnf = ["does not fit"] if has_dnf else []
    if recipe == "panels":
        assert fig.axes[1].get_ylabel() == "Decode energy per token (J/token)" and ax.get_legend() is None
        assert [ln.get_color() for ln in fig.axes[0].get_lines()][:2] == [
            ln.get_color() for ln in fig.axes[1].get_lines()
        ][:2]  # one style per system in both panels
    if recipe in ("throughput_vs_batch", "tpot_vs_batch", "throughput_vs_context", "tpot_vs_context", "line", "panels"):
        assert legend == SHOWN + dnf
    elif recipe == "ratio":
        assert legend == ["DGX H100 (= 1)", "1\u00d7 H100", "does not fit"]
    elif recipe == "pareto":
        assert legend == SHOWN + ["Pareto front", "does not fit (1 not drawn)"]
    elif recipe in ("latency_by_op", "latency_by_device", "energy_breakdown"):
        assert legend[-1] == "does not fit" and all(t not in DEFAULT_LABELS for t in legend)  # names are displayed
        ticks = [t.get_text().replace("\n", ", ") for t in ax.get_xticklabels()]
        assert [t.split(", ")[0] for t in ticks] == [
            DEFAULT_LABELS[s] for s in table.select(opts["where"]).col("system")
        ]
    # the capacity marker (pareto: no metrics to place it, in the legend): an "x" (no y value) for the point that
    # does not fit
    if has_dnf and recipe != "pareto":
        xs = [ln for ln in ax.get_lines() if ln.get_marker() == "x" and len(ln.get_xdata())]
        assert len(xs) == 1
        if recipe != "heatmap":
            assert xs[0].get_ydata()[0] == 0.0 and xs[0].get_transform() != ax.transData  # on the x axis
    assert_ticks_apart(fig)
    assert_contrast(fig)
    assert_font(fig)
    if opts.get("title"):  # the title clears the legend (heatmap: the "does not fit" key sits above the axes)
        r = fig.canvas.get_renderer()
        t, leg = ax.title.get_window_extent(r), ax.get_legend().get_window_extent(r)
        assert not (t.x0 < leg.x1 and leg.x0 < t.x1 and t.y0 < leg.y1 and leg.y0 < t.y1)


def test_line_palette_contrast_hand_values():
    # WCAG 2.1: black on white 21:1, white on white 1:1; Okabe-Ito yellow #F0E442: L = 0.2126*0.871 +
    # 0.7152*0.776 + 0.0722*0.0545 = 0.744 -> 1.05 / 0.794 = 1.32 (refused for lines)
    assert contrast_ratio("#000000") == pytest.approx(21.0)
    assert contrast_ratio("#FFFFFF") == pytest.approx(1.0)
    assert contrast_ratio("#F0E442") == pytest.approx(1.32, abs=0.01)
    assert all(contrast_ratio(c) >= 3.0 for c in LINE_COLOURS)
    assert {c for c in OKABE_ITO if contrast_ratio(c) >= 3.0} == set(LINE_COLOURS)


def test_crowded_categorical_ticks_are_fitted():
    import matplotlib.pyplot as plt

    names = [f"system_{i}, prompt_len={1024 * i}" for i in range(10)]
    fig, ax = plt.subplots(figsize=(3.5, 2.2))
    ax.bar(range(10), np.arange(10) + 1.0)
    ax.set_xticks(range(10), names)
    fig.draw_without_rendering()
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))  # the case to fix
    fit_ticks(fig)
    assert_ticks_apart(fig)
    assert len([t for t in ax.get_xticklabels() if t.get_text()]) == 10  # rotated, none dropped
    plt.close(fig)


def test_user_labels_font_and_axis_options(table, tmp_path):
    fig = figure(
        table,
        "tpot_vs_batch",
        where={"prompt_len": 512},
        labels={"dgx_h100": "H100 node"},
        ylim=(0.001, 0.05),
        logy=True,
        logx=False,
        font="serif",
    )
    ax = fig.axes[0]
    assert _legend(ax) == ["1\u00d7 H100", "H100 node"]
    assert ax.get_ylim() == pytest.approx((1.0, 50.0))  # stored seconds, drawn ms
    assert ax.get_yscale() == "log" and ax.get_xscale() == "linear"  # the recipe's own log2 x axis undone
    assert_font(fig, "DejaVuSerif.ttf")
    fig = figure(table, "tpot_vs_batch", where={"prompt_len": 512}, ylim=(0.001, 0.05), xlim=(1, 32))
    assert fig.axes[0].get_ylim() == pytest.approx((1.0, 50.0))  # stored seconds, drawn ms
    assert fig.axes[0].get_xlim() == pytest.approx((1.0, 32.0))
    fig = figure(table, "tpot_vs_batch", where={"prompt_len": 512}, font=str(BUNDLED / "DejaVuSansMono.ttf"))
    assert_font(fig, "DejaVuSansMono.ttf")
    with pytest.raises(ConfigError, match="LO > 0 on a log axis"):
        figure(table, "tpot_vs_batch", where={"prompt_len": 512}, logy=True, ylim=(0, 1))
    with pytest.raises(ConfigError, match="the heatmap recipe does not use --logx"):
        figure(table, "heatmap", x="scenario.batch_size", y="system", z="tpot_s", logx=True)
    with pytest.raises(ConfigError, match=r"^font: expected 'sans', 'serif' .* got 'No Such Font'"):
        figure(table, "pareto", font="No Such Font")


def test_ratio_is_metric_over_baseline_and_uses_stored_columns(table):
    where = {"prompt_len": 512}
    fig = figure(table, "ratio", x="batch_size", y="decode_tokens_per_s", baseline="dgx_h100", where=where)
    t = table.select(where)
    sys_, b, v = t.col("system"), t.col("batch_size"), t.col("decode_tokens_per_s")
    line = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "1\u00d7 H100"][0]
    want = [v[(sys_ == "h100_x1") & (b == k)][0] / v[(sys_ == "dgx_h100") & (b == k)][0] for k in (1, 64)]
    np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    ref = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "DGX H100 (= 1)"][0]
    assert list(ref.get_ydata()) == [1.0, 1.0]
    assert fig._ratio["column"] is None
    # a store with vs_baseline columns (attnsim.studies.sweep.baselines): drawn as stored, not recomputed
    cols = dict(t.columns)
    cols["vs_baseline.decode_throughput_ratio"] = np.where(sys_ == "dgx_h100", np.nan, 2.0)
    st = Table(t.path, t.kind, {**t.attrs, "baseline": "dgx_h100"}, cols, t.breakdown, t.parameters)
    fig = figure(st, "ratio", x="batch_size", y="vs_baseline.decode_throughput_ratio")
    assert fig._ratio["column"] == "vs_baseline.decode_throughput_ratio"
    assert [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "1\u00d7 H100"][0].get_ydata().tolist() == [
        2.0
    ] * 2
    # the stored ratio needs no baseline row: a --where on a swept key the baseline does not use drops its rows
    # (docs/sweep-files.md); this was refused with "--baseline: expected a system of the selected rows"
    fig = figure(st, "ratio", x="batch_size", y="vs_baseline.decode_throughput_ratio", where={"system": "h100_x1"})
    assert [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "1\u00d7 H100"][0].get_ydata().tolist() == [
        2.0
    ] * 2
    with pytest.raises(ConfigError, match="expected a system of the selected rows"):  # recomputed: needs it
        figure(st, "ratio", x="batch_size", y="tpot_s", where={"system": "h100_x1"})
    with pytest.raises(ConfigError, match="needs --baseline SYSTEM"):
        figure(t, "ratio", x="batch_size")


def test_replicate_error_bars_are_mean_and_std(table):
    t = table.select({"prompt_len": 512})
    n = len(t)
    cols = {k: np.concatenate([v, v]) for k, v in t.columns.items()}
    cols["tpot_s"] = np.concatenate([t.col("tpot_s"), 1.1 * t.col("tpot_s")])
    cols["seed"] = np.array([0] * n + [1] * n)
    rt = Table(
        t.path,
        t.kind,
        t.attrs,
        cols,
        {k: np.concatenate([v, v]) for k, v in t.breakdown.items()},
        t.parameters + ["seed"],
    )
    with pytest.raises(ConfigError, match="several rows share"):
        figure(rt, "tpot_vs_batch")
    fig = figure(rt, "tpot_vs_batch", replicate="seed")
    ax = fig.axes[0]
    base = t.col("tpot_s")[t.col("system") == "dgx_h100"] * 1e3
    cont = [c for c in ax.containers if c.get_label() == "DGX H100"][0]
    np.testing.assert_allclose(cont.lines[0].get_ydata(), 1.05 * base)
    (bars,) = cont.lines[2]  # the error bar segments
    half = np.array([seg[1, 1] - seg[0, 1] for seg in bars.get_segments()]) / 2
    np.testing.assert_allclose(half, 0.1 * base / np.sqrt(2))  # sample std of (a, 1.1 a) = 0.1 a / sqrt(2)


def test_plot_cli_style_options(table, tmp_path, capsys):
    lab = tmp_path / "labels.yaml"
    out = tmp_path / "f.png"
    lab.write_text("h100_x1: [a, b]\n")
    assert cli_main(["plot", str(table.path), "--recipe", "pareto", "--labels", str(lab), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "labels.yaml: --labels.h100_x1: expected a non-empty text" in err
    assert cli_main(["plot", str(table.path), "--recipe", "pareto", "--xlim", "3", "-o", str(out)]) == 2
    assert "--xlim: expected two numbers LO,HI" in capsys.readouterr().err
    assert (
        cli_main(["plot", str(table.path), "--recipe", "tpot_vs_batch", "--logy", "--ylim", "0,1", "-o", str(out)]) == 2
    )
    assert "--ylim: expected LO > 0 on a log axis, got 0" in capsys.readouterr().err
    assert not out.exists()  # (a CLI render with --labels/--font: tests/test_plots.py::test_plot_cli)


def test_sweep_figure_style_keys(tmp_path, capsys):
    base = "name: t\nbase: default\nfigures:\n  - {recipe: %s, out: f.pdf, %s}\n"
    sw = tmp_path / "sw.yaml"
    for recipe, extra, needle in (
        ("tpot_vs_batch", "xlim: [2, 1]", "xlim: expected finite LO < HI"),
        ("heatmap", "logy: true", "does not use logy"),
        ("tpot_vs_batch", "font: No Such Font", "figures.0.font: expected 'sans'"),
    ):
        sw.write_text(base % (recipe, extra))
        assert cli_main(["sweep", str(sw), "--out", str(tmp_path / "s.h5"), "--figures"]) == 2
        err = capsys.readouterr().err
        assert needle in err and not (tmp_path / "s.h5").exists(), err
    sw.write_text(base % ("ratio", "x: batch_size, baseline: dgx_h100, labels: {dgx_h100: H100 node}, logy: false"))
    spec = load_sweep(sw).spec.figures[0]
    assert spec.labels == {"dgx_h100": "H100 node"} and spec.baseline == "dgx_h100" and spec.logy is False
