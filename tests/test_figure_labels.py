"""Figures that need no hand work (issue 28 §4): labels reach axis titles and units and unknown keys are refused,
one column name (ttft_p99_s), one style per op class and per segment, caller-chosen energy components with PIM
compute never in "Other", the plan front, and recipes over the Python API's results objects and DataFrames."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.plots import RECIPES, figure, plan_figure
from attnsim.plots.style import OP_CLASS_STYLE, OP_CLASSES, contrast_ratio, label_for, segment_style
from attnsim.studies.sweep.spec import FigureSpec
from attnsim.studies.sweep.table import Table, table_from_frame, to_pandas

COMPONENTS = [
    "dram_read_write",
    "dram_activate",
    "dram_io",
    "dram_background",
    "dram_refresh",
    "compute",
    "sram",
    "link",
    "pim_compute",
]


def _table():
    """Two systems x batch 1, 4 (hand-made columns as a sweep store holds them); the energy breakdown has 9
    components, pim_compute the smallest (1e-6 J per step) so the top-7 rule would sum it into "other"."""
    n = 4
    cols = {
        "system": np.array(["h100_x1", "h100_x1", "attacc_h100", "attacc_h100"], dtype=object),
        "model": np.array(["m"] * n, dtype=object),
        "scenario": np.array(["chat"] * n, dtype=object),
        "status": np.array(["ok"] * n, dtype=object),
        "batch_size": np.array([1, 4, 1, 4]),
        "scenario.batch_size": np.array([1, 4, 1, 4]),
        "tpot_s": np.array([0.010, 0.012, 0.004, 0.005]),
        "ttft_p99": np.array([0.5, 0.6, 0.3, 0.4]),
        "decode_tokens_per_s": np.array([100.0, 333.0, 250.0, 800.0]),
    }
    bd = {f"decode_step/energy_j_by_component/{c}": np.full(n, 1.0 + i) for i, c in enumerate(COMPONENTS[:-1])}
    bd["decode_step/energy_j_by_component/pim_compute"] = np.full(n, 1e-6)
    return Table(Path("t.h5"), "sweep", {}, cols, bd, ["system", "scenario.batch_size"])


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_unknown_label_keys_are_refused_with_a_suggestion():
    # main 878b7fc drew these without a word ("NCCDAB" matched nothing; "h100_x" a typo of h100_x1)
    for key, hint in (("NCCDAB", ""), ("h100_x", " (did you mean h100_x1?)"), ("tpot_ss", " (did you mean tpot_s?)")):
        with pytest.raises(ConfigError) as e:
            figure(_table(), "tpot_vs_batch", labels={key: "x"})
        assert e.value.key == f"labels.{key}" and e.value.message.endswith(f"got {key!r}{hint}"), e.value.message


def test_labels_set_axis_titles_units_and_legend_names():
    t = _table()
    fig = figure(
        t,
        "tpot_vs_batch",
        labels={
            "tpot_s": "Time per output token",
            "unit.tpot_s": "us",
            "batch_size": "Requests in the batch",
            "h100_x1": "One GPU",
        },
    )
    ax = fig.axes[0]
    assert ax.get_ylabel() == "Time per output token (us)"  # main 878b7fc: "TPOT (ms)", the label unused
    assert ax.get_xlabel() == "Requests in the batch"
    assert [tx.get_text() for tx in ax.get_legend().get_texts()] == ["One GPU", "AttAcc (H100)"]
    # the pinned unit scales the data: 0.010 s = 10000 us
    assert ax.get_lines()[0].get_ydata().tolist() == pytest.approx([10000.0, 12000.0])
    fig = figure(t, "tpot_vs_batch", labels={"tpot_s": "TPOT [{unit}]"})  # {unit} places the unit
    assert fig.axes[0].get_ylabel() == "TPOT [ms]"
    with pytest.raises(ConfigError) as e:  # a unit of another kind
        figure(t, "tpot_vs_batch", labels={"unit.tpot_s": "mJ"})
    assert e.value.key == "labels.unit.tpot_s" and "got 'mJ'" in e.value.message


def test_axis_names_of_rates_and_latency_percentiles():
    # main 878b7fc: "Rate per (s)" and "Ttft p99 (s)"
    assert label_for("arrival_rate_per_s")[0] == "Arrival rate (1/s)"
    assert label_for("ttft_p99_s", [0.5]) == ("TTFT p99 (ms)", 1e3)
    assert label_for("batch_size_count")[0] == "Batch size"
    # a stored ratio to the baseline says so, with its unit (it read "Decode throughput", "Throughput" before)
    assert label_for("vs_baseline.decode_throughput_ratio")[0] == "Decode throughput vs baseline (\u00d7)"
    assert label_for("vs_baseline.throughput_ratio")[0] == "Throughput vs baseline (\u00d7)"


def test_one_column_name_with_its_unit():
    t = _table()  # the store holds ttft_p99 (seconds); show and export call it ttft_p99_s
    fig = figure(t, "line", x="batch_size", y="ttft_p99_s")
    assert fig.axes[0].get_ylabel() == "TTFT p99 (ms)"
    assert fig.axes[0].get_lines()[0].get_ydata().tolist() == pytest.approx([500.0, 600.0])
    with pytest.raises(ConfigError) as e:  # main 878b7fc: accepted (and ttft_p99_s refused)
        figure(t, "line", x="batch_size", y="ttft_p99")
    assert "expected the column name with its unit, 'ttft_p99_s'" in e.value.message
    assert figure(t, "line", x="batch_size_count", y="tpot_s").axes[0].get_xlabel() == "Batch size"


def test_one_style_per_op_class_and_per_segment():
    styles = [(OP_CLASS_STYLE[c]["color"], OP_CLASS_STYLE[c]["marker"]) for c in OP_CLASSES]
    assert len(set(styles)) == len(OP_CLASSES) == 8  # every class apart, by colour and marker
    assert all(contrast_ratio(c) >= 3.0 for c, _ in styles)  # lines/markers >= 3:1 on white (WCAG 2.1)
    from workloads.optrace import OP_CLASSES as TRACE_CLASSES

    assert OP_CLASSES == TRACE_CLASSES  # the mapping covers every class a trace has
    # the same component keeps its fill whatever else the figure holds
    a = figure(_table(), "energy_breakdown")
    b = figure(_table().select({"system": "h100_x1"}), "energy_breakdown", components=["dram_io", "pim_compute"])

    def fills(fig):
        ax = fig.axes[0]
        return {
            lab.get_text(): c[0].get_facecolor() for lab, c in zip(reversed(ax.get_legend().get_texts()), ax.containers)
        }

    fa, fb = fills(a), fills(b)
    for name in ("DRAM I/O", "PIM compute"):
        assert fa[name] == fb[name]
    assert segment_style("pim_compute") != segment_style("dram_io")


def test_pim_compute_is_never_other_and_components_are_the_callers():
    fig = figure(_table(), "energy_breakdown")
    legend = [tx.get_text() for tx in fig.axes[0].get_legend().get_texts()]
    # 9 components: the 7 largest, PIM compute (main 878b7fc: summed into Other), then Other (the 8th largest)
    assert "PIM compute" in legend and "Other" in legend and len(legend) == 9
    fig = figure(_table(), "energy_breakdown", components=["pim_compute", "dram_read_write"])
    legend = [tx.get_text() for tx in fig.axes[0].get_legend().get_texts()]
    assert legend == ["Other", "DRAM read/write", "PIM compute"]  # top to bottom as stacked
    # heights per token (batch 1, first bar): pim 1e-6 J, dram_read_write 1 J, other 2+...+8 = 35 J
    ax = fig.axes[0]
    heights = [c[0].get_height() for c in ax.containers]
    f = heights[1] / 1.0
    assert heights == pytest.approx([1e-6 * f, 1.0 * f, 35.0 * f])
    with pytest.raises(ConfigError) as e:
        figure(_table(), "energy_breakdown", components=["pim_compte"])
    assert "(did you mean pim_compute?)" in e.value.message
    with pytest.raises(ConfigError):
        figure(_table(), "tpot_vs_batch", components=["pim_compute"])  # a line recipe has no segments
    FigureSpec(recipe="energy_breakdown", out="e.pdf", components=["pim_compute"])  # sweep files take it too


def test_plan_front_draws_the_document():
    doc = {
        "system": "cxl_pnm",
        "model": "llama2-70b",
        "front": [
            {"rel_attention_error": e, "tpot_s": t, "energy_per_token_j": j}
            for e, t, j in ((0.001, 0.021, 3.3), (0.01, 0.020, 3.2), (0.1, 0.019, 3.1))
        ],
        "plan": {"rel_attention_error": 0.01, "tpot_s": 0.020, "energy_per_token_j": 3.2},
        "configured": {"rel_attention_error": 0.001, "tpot_s": 0.022, "energy_per_token_j": 3.35},
        "slos": {"accuracy": {"limit": 0.02}, "tpot_s": {"limit": 0.0215}},
    }
    fig = plan_figure(doc)
    tpot, energy = fig.axes[0], fig.axes[1]
    assert tpot.get_ylabel() == "TPOT (ms)" and energy.get_ylabel() == "Energy per token (J/token)"
    front = tpot.get_lines()[0]
    assert front.get_xdata().tolist() == [0.001, 0.01, 0.1]
    assert front.get_ydata().tolist() == pytest.approx([21.0, 20.0, 19.0])  # s -> ms
    assert energy.get_lines()[0].get_ydata().tolist() == pytest.approx([3.3, 3.2, 3.1])
    assert [tx.get_text() for tx in fig.legends[0].get_texts()] == [
        "Pareto front",
        "plan",
        "as run",
        "accuracy SLO 0.02",
        "TPOT SLO 21.5 ms",  # 0.0215 s in the plan's unit (ms), named: it said only "SLO" before
    ]
    assert tpot.get_xscale() == "log"  # the errors span 100x
    with pytest.raises(ConfigError):
        plan_figure({"front": []})


def test_recipes_take_dataframes():
    t = _table()
    df = to_pandas(t)
    assert "ttft_p99_s" in df.columns and "batch_size_count" in df.columns
    back = table_from_frame(df)
    assert back.parameters == ["system", "scenario.batch_size"]
    a = figure(t, "throughput_vs_batch").axes[0].get_lines()[0].get_ydata().tolist()
    b = figure(df, "throughput_vs_batch").axes[0].get_lines()[0].get_ydata().tolist()
    assert a == b == [100.0, 333.0]
    fig = figure(df[df["system"] == "attacc_h100"], "line", x="batch_size", y="ttft_p99_s")
    assert fig.axes[0].get_lines()[0].get_ydata().tolist() == pytest.approx([300.0, 400.0])
    assert "panels" in RECIPES and "plan_front" not in RECIPES  # plan_front draws a plan document


def test_results_plot(tmp_path):
    import attnsim

    res = attnsim.run(
        {
            "name": "p",
            "systems": ["h100_x1"],
            "models": ["llama2-7b"],
            "scenarios": {"chat": {"batch_size": 2, "prompt_len": 256, "output_len": 8}},
            "generation": {"mode": "sampled", "samples": 2},
        }
    )
    fig = res.plot("latency_by_device", labels={"gpu": "H100 GPU"})
    assert [tx.get_text() for tx in fig.axes[0].get_legend().get_texts()] == ["H100 GPU"]
    paths = res.plot("pareto", tmp_path / "p.pdf")
    assert [p.name for p in paths] == ["p.pdf", "p.png"] and all(p.stat().st_size > 0 for p in paths)
    # the frame of the same results draws the same point
    x = figure(res.to_pandas(), "pareto").axes[0].collections[0].get_offsets().tolist()
    assert x == res.plot("pareto").axes[0].collections[0].get_offsets().tolist()
