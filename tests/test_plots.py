"""Figure recipes rendered from real (tiny) sweeps and run files; content checked via matplotlib objects."""

import numpy as np
import pytest
from sweep_helpers import write_sweep

from attnsim.cli import main as cli_main
from attnsim.core.config import ConfigError
from attnsim.plots import RECIPES, figure, render
from attnsim.plots.labels import display
from attnsim.plots.recipes import pareto_front
from attnsim.plots.style import LINE_COLOURS, WIDTH_IN
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.table import load_table

SYSTEMS = ["h100_x1", "dgx_h100"]
SHOWN = ["1\u00d7 H100", "DGX H100"]  # their built-in display labels (attnsim.plots.labels)
BATCHES = [1, 4, 16]
PROMPTS = [256, 1024]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    p = write_sweep(
        d, [{"grid": {"system": SYSTEMS, "scenario.batch_size": BATCHES, "scenario.prompt_len": PROMPTS}}], name="plots"
    )
    out = d / "plots.h5"
    s = run_sweep(load_sweep(p), out, workers=1, progress=False, log=lambda m: None)
    assert s.status_counts == {"ok": 12}
    return out


@pytest.fixture(scope="module")
def table(store):
    return load_table(store)


def _bars(ax):
    return [c for c in ax.containers]


def test_tpot_vs_batch_one_line_per_system(table):
    fig = figure(table, "tpot_vs_batch", where={"prompt_len": 256})
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [l.get_label() for l in lines] == SHOWN
    assert ax.get_xlabel() == "Batch size" and ax.get_ylabel() == "TPOT (ms)"
    t = table.select({"prompt_len": 256})
    for l in lines:
        m = t.col("system") == SYSTEMS[SHOWN.index(l.get_label())]
        assert l.get_xdata().tolist() == BATCHES
        np.testing.assert_allclose(l.get_ydata(), t.col("tpot_s")[m] * 1e3)
        assert np.all(np.diff(l.get_ydata()) >= 0)  # a bigger batch never makes a decode step faster
    assert [l.get_color() for l in lines] == LINE_COLOURS[:2]
    assert [l.get_linestyle() for l in lines] == ["-", "--"]  # dash patterns change with the colour
    assert fig.get_figwidth() == pytest.approx(WIDTH_IN["single"])


def test_line_recipe_refuses_ambiguous_rows(table):
    with pytest.raises(ConfigError, match=r"several rows share.*scenario\.prompt_len"):
        figure(table, "tpot_vs_batch")


def test_throughput_vs_context(table):
    fig = figure(table, "throughput_vs_context", where={"batch_size": 16}, width="double")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Context length (tokens)" and ax.get_ylabel() == "Decode throughput (tokens/s)"
    assert len(ax.get_lines()) == 2 and all(l.get_xdata().tolist() == PROMPTS for l in ax.get_lines())
    assert fig.get_figwidth() == pytest.approx(WIDTH_IN["double"])


@pytest.mark.parametrize(
    "recipe, prefix, per_token",
    [
        ("latency_by_op", "decode_step/time_s_by_op/", False),
        ("latency_by_device", "decode_step/time_s_by_device/", False),
        ("energy_breakdown", "decode_step/energy_j_by_component/", True),
    ],
)
def test_stacked_bars_sum_to_the_step_totals(table, recipe, prefix, per_token):
    where = {"prompt_len": 1024, "batch_size": 4}
    t = table.select(where)
    fig = figure(table, recipe, where=where)
    ax = fig.axes[0]
    conts = _bars(ax)
    assert [tick.get_text() for tick in ax.get_xticklabels()] == SHOWN  # one bar per system
    heights = np.sum([[r.get_height() for r in c] for c in conts], axis=0)
    total = t.col("decode_step/energy_j" if per_token else "decode_step/time_s")
    if per_token:
        total = total / t.col("batch_size")
    factor = min((1.0, 1e3, 1e6, 1e9), key=lambda f: abs(np.log(heights[0] / total[0] / f)))  # a unit prefix
    np.testing.assert_allclose(heights, total * factor, rtol=1e-9)
    unit = {1.0: "", 1e3: "m", 1e6: "\u00b5", 1e9: "n"}[factor] + ("J/token" if per_token else "s")
    assert ax.get_ylabel().endswith(f"({unit})")
    names = {k[len(prefix) :] for k in t.breakdown if k.startswith(prefix) and np.nansum(t.breakdown[k]) > 0}
    if recipe == "energy_breakdown":  # static energy is drawn per device ("static: gpu", ...)
        sp = "decode_step/static_energy_j_by_device/"
        names = (names - {"static"}) | {
            f"static: {k[len(sp) :]}" for k in t.breakdown if k.startswith(sp) and np.nansum(t.breakdown[k]) > 0
        }
    labels = {c.get_label() for c in conts}
    assert labels <= {display(n) for n in names} | {"Other"} and len(labels) == min(len(names), 8)


def test_heatmap_cells_are_the_metric(table):
    fig = figure(
        table, "heatmap", x="scenario.batch_size", y="scenario.prompt_len", z="tpot_s", where={"system": "h100_x1"}
    )
    ax = fig.axes[0]
    img = ax.get_images()[0].get_array()
    assert img.shape == (len(PROMPTS), len(BATCHES))
    t = table.select({"system": "h100_x1"})
    for b, p, v in zip(t.col("scenario.batch_size"), t.col("scenario.prompt_len"), t.col("tpot_s")):
        assert img[PROMPTS.index(p), BATCHES.index(b)] == pytest.approx(v * 1e3)
    assert ax.get_xlabel() == "Batch size" and ax.get_ylabel() == "Context length (tokens)"
    assert fig.axes[1].get_ylabel() == "TPOT (ms)"  # the colour bar
    assert [tl.get_text() for tl in ax.get_xticklabels()] == ["1", "4", "16"]


def test_pareto_front_is_exactly_the_non_dominated_points(table):
    fig = figure(table, "pareto", x="tpot_s", y="energy_per_token_j")
    ax = fig.axes[0]
    xs, ys = table.col("tpot_s"), table.col("energy_per_token_j")
    brute = [
        i
        for i in range(len(xs))
        if not any(xs[j] <= xs[i] and ys[j] <= ys[i] and (xs[j] < xs[i] or ys[j] < ys[i]) for j in range(len(xs)))
    ]
    assert sorted(fig._pareto_front.tolist()) == sorted(brute)
    front = [l for l in ax.get_lines() if l.get_label() == "Pareto front"][0]
    assert len(front.get_xdata()) == len(brute)
    assert {c.get_label() for c in ax.collections} == set(SHOWN)
    assert "TPOT (ms)" in ax.get_xlabel()


def test_pareto_front_hand_example():
    xs = np.array([1.0, 2.0, 3.0, 2.0, 0.5])
    ys = np.array([5.0, 2.0, 1.0, 3.0, 9.0])
    assert pareto_front(xs, ys).tolist() == [4, 0, 1, 2]  # (2, 3) is dominated by (2, 2)
    assert pareto_front(xs, ys, max_x=True).tolist() == [2]  # (3, 1): largest x and smallest y dominates all


def test_roofline_ops_lie_under_the_roof(table):
    fig = figure(table, "roofline", where={"system": "h100_x1", "batch_size": 16, "prompt_len": 1024})
    info = fig._roofline
    ((role, d),) = info["devices"].items()
    ax = fig.axes[0]
    roof = [l for l in ax.get_lines() if l.get_label() == "roof"][0]
    assert max(roof.get_ydata()) == pytest.approx(d["peak_flops"] / 1e12)
    pts = np.vstack([c.get_offsets() for c in ax.collections])
    assert len(pts) >= 3
    bound = np.minimum(d["peak_flops"], pts[:, 0] * d["peak_bw"]) / 1e12
    assert np.all(pts[:, 1] <= bound * (1 + 1e-9))  # no op beats the roofline
    assert ax.get_xlabel().startswith("Arithmetic intensity (FLOP/B") and ax.get_ylabel() == "Performance (TFLOP/s)"
    with pytest.raises(ConfigError, match="draws one run"):
        figure(table, "roofline")


def test_render_writes_pdf_and_png(table, tmp_path):
    paths = render(table, "tpot_vs_context", tmp_path / "f.pdf", where={"batch_size": 1})
    assert [p.suffix for p in paths] == [".pdf", ".png"]
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recipes_work_on_attnsim_run_results(tmp_path):
    import yaml

    exp = {
        "name": "r",
        "systems": SYSTEMS,
        "models": ["llama2-7b"],
        "scenarios": {
            "b1": {"batch_size": 1, "prompt_len": 256, "output_len": 4},
            "b8": {"batch_size": 8, "prompt_len": 256, "output_len": 4},
        },
        "generation": {"mode": "sampled", "samples": 2},
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(exp))
    assert cli_main(["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "res")]) == 0
    t = load_table(tmp_path / "res" / "results.h5")
    assert t.kind == "run" and len(t) == 4
    fig = figure(t, "throughput_vs_batch")
    assert [l.get_label() for l in fig.axes[0].get_lines()] == SHOWN
    assert all(l.get_xdata().tolist() == [1, 8] for l in fig.axes[0].get_lines())
    fig = figure(t, "latency_by_device", where={"batch_size": 8})
    assert len(fig.axes[0].get_xticklabels()) == 2


def test_plot_cli(store, tmp_path, capsys):
    out = tmp_path / "c.png"
    (tmp_path / "l.yaml").write_text("dgx_h100: Eight GPUs\n")
    assert (
        cli_main(
            [
                "plot",
                str(store),
                "--recipe",
                "heatmap",
                "--x",
                "scenario.batch_size",
                "--y",
                "scenario.prompt_len",
                "--z",
                "decode_tokens_per_s",
                "--where",
                "system=dgx_h100",
                "-o",
                str(out),
                "--labels",
                str(tmp_path / "l.yaml"),
                "--font",
                "serif",
                "--title",
                "dgx_h100",
            ]
        )
        == 0
    )
    assert out.exists() and out.with_suffix(".pdf").exists()
    assert cli_main(["plot", str(store), "--recipe", "nope", "-o", str(out)]) == 2
    assert "unknown recipe 'nope'" in capsys.readouterr().err
    assert cli_main(["plot", str(store), "--list"]) == 0
    assert set(RECIPES) <= set(capsys.readouterr().out.split())
