"""The sweep traps of issue 28 §4 (and issue 31's "--set on a key the sweep also varies"): a sweep file's
``set:`` goes through attnsim run's --set path, everything is checked before any file is created, baselines
pair over hardware keys the baseline does not use, Ctrl-C says what is kept, mistyped options and files get a
suggestion."""

import numpy as np
import pytest
from sweep_helpers import write_sweep

from attnsim.cli import main
from attnsim.core.config import ConfigError
from attnsim.sim.experiment import load_experiment
from attnsim.studies.sweep import executors
from attnsim.studies.sweep.baselines import baseline_columns
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import open_store

GRID = [{"grid": {"scenario.batch_size": [1, 2]}}]


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_set_of_experiment_models_loads_them_like_run_set(tmp_path):
    # main 878b7fc: KeyError 'llama3-8b' while resolving the points (the model was never loaded)
    sw = load_sweep(write_sweep(tmp_path, GRID, set={"experiment.models": ["llama3-8b"]}))
    pt = sw.resolve(0)
    assert pt.model == "llama3-8b" and pt.error is None
    assert list(pt.tree.models) == ["llama3-8b"]
    # the same key through attnsim run --set loads the same model config (one code path)
    exp = load_experiment(str(tmp_path / "tiny.yaml"), ["experiment.models=[llama3-8b]"])
    assert pt.tree.models["llama3-8b"] == exp.tree.models["llama3-8b"]


def test_set_of_experiment_systems_outside_the_base(tmp_path):
    # main 878b7fc: KeyError 'dgx_h100' after the store and the cache folder were created
    sw = load_sweep(write_sweep(tmp_path, GRID, set={"experiment.systems": ["dgx_h100"]}))
    assert {sw.resolve(i).system for i in range(sw.n_points)} == {"dgx_h100"}
    assert sw.resolve(0).error is None


def test_a_bad_set_is_refused_before_any_file(tmp_path, capsys):
    p = write_sweep(tmp_path, GRID, set={"experiment.systems": ["no_such_system"]})
    before = _files(tmp_path)
    assert main(["sweep", str(p), "--out", str(tmp_path / "out" / "s.h5"), "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no_such_system" in err and "Traceback" not in err
    assert _files(tmp_path) == before  # no store folder, no store, no .attnsim-cache


def test_experiment_lists_are_varied_by_the_shorthands_only(tmp_path):
    # main 878b7fc: accepted, and every point silently ran the base system (a point's list is its one system)
    p = write_sweep(tmp_path, [{"grid": {"experiment.systems": [["dgx_h100"]]}}])
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert e.value.key == "parameters.0.grid.experiment.systems" and "'system'" in e.value.message


@pytest.mark.parametrize("where", ["cli", "file"])
def test_a_fixed_override_of_a_swept_key_is_refused_naming_both(tmp_path, capsys, where):
    # main 878b7fc: the block's 1 and 2 silently won over the override's 4
    extra = {"set": {"scenarios.chat.batch_size": 4}} if where == "file" else {}
    p = write_sweep(tmp_path, GRID, **extra)
    before = _files(tmp_path)
    argv = ["sweep", str(p), "--out", str(tmp_path / "o" / "s.h5"), "--no-progress"]
    argv += ["--set", "scenarios.chat.batch_size=4"] if where == "cli" else []
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    key = "--set: scenarios.chat.batch_size" if where == "cli" else f"{p}: set.scenarios.chat.batch_size"
    assert err.startswith(f"error: {key}: the sweep also varies 'scenario.batch_size'"), err
    assert _files(tmp_path) == before


def test_an_override_of_another_key_is_applied(tmp_path):
    sw = load_sweep(write_sweep(tmp_path, GRID), extra_sets=["scenarios.chat.output_len=4"])
    assert sw.resolve(1).tree.scenarios["chat"] == {"batch_size": 2, "prompt_len": 256, "output_len": 4}


def test_ctrl_c_says_what_is_kept_and_how_to_resume(tmp_path, capsys, monkeypatch):
    p = write_sweep(tmp_path, GRID)
    out = tmp_path / "s.h5"
    run_local = executors._run_local

    def one_then_ctrl_c(tasks, workers):
        it = run_local(tasks, workers)
        yield next(it)
        raise KeyboardInterrupt

    monkeypatch.setattr(executors, "_run_local", one_then_ctrl_c)
    assert main(["sweep", str(p), "--out", str(out), "--workers", "1", "--no-progress"]) == 130
    # main 878b7fc printed only "interrupted"
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"interrupted: 1 point kept in {out}; run the same command to resume"
    )
    assert len(open_store(out)) == 1
    monkeypatch.setattr(executors, "_run_local", run_local)
    assert main(["sweep", str(p), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert "1 simulated" in capsys.readouterr().out and len(open_store(out)) == 2  # resumed: 1 run, 1 kept


def test_mistyped_option_and_file_get_a_suggestion(tmp_path, capsys):
    p = write_sweep(tmp_path, GRID)
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(p), "--sett", "x=1"])
    assert e.value.code == 2
    assert "unrecognized arguments: --sett x=1 (did you mean --set?)" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "tt.yaml")]) == 2
    assert f"file not found: {tmp_path / 'tt.yaml'} (did you mean {p}?)" in capsys.readouterr().err
    assert main(["sweep", "exmple.yaml"]) == 2  # no such file here: the closest built-in sweep name
    assert "file not found: exmple.yaml (did you mean example?)" in capsys.readouterr().err


def test_baseline_pairs_over_hardware_keys_it_does_not_use():
    """Columns as a store holds them after dedup: the baseline h100_x1 does not use nvlink4, so its points under
    bandwidth 450 and 900 are one config, stored once (with the first value, 450)."""
    cols = {
        "key": np.array(["b", "p450", "p900"], dtype=object),
        "system": np.array(["h100_x1", "dgx_h100", "dgx_h100"], dtype=object),
        "model": np.array(["m"] * 3, dtype=object),
        "scenario": np.array(["chat"] * 3, dtype=object),
        "status": np.array(["ok"] * 3, dtype=object),
        "hardware.nvlink4.bandwidth_gbps": np.array([450, 450, 900]),
        "tokens_per_s": np.array([100.0, 400.0, 500.0]),
        "tpot_s": np.array([0.01, 0.004, 0.002]),
        "energy_per_token_j": np.array([2.0, 1.0, 4.0]),
    }
    params = ["system", "hardware.nvlink4.bandwidth_gbps"]
    # main 878b7fc (no blind keys): the 900 point finds no partner
    assert baseline_columns(cols, params, "h100_x1")["vs_baseline.status"].tolist() == [
        "is_baseline",
        "ok",
        "baseline_missing",
    ]
    out = baseline_columns(cols, params, "h100_x1", {"hardware.nvlink4.bandwidth_gbps"})
    assert out["vs_baseline.status"].tolist() == ["is_baseline", "ok", "ok"]
    assert out["vs_baseline.throughput_ratio"][2] == 500.0 / 100.0  # tokens_per_s over the baseline's
    assert out["vs_baseline.tpot_speedup"][2] == 0.01 / 0.002


def test_baseline_pairs_in_a_real_sweep(tmp_path):
    # h100_x1 (one GPU, no links) does not use nvlink4; dgx_h100 links its 8 GPUs with it
    grid = [{"grid": {"system": ["h100_x1", "dgx_h100"], "hardware.nvlink4.bandwidth_gbps": [450, 900]}}]
    sw = load_sweep(write_sweep(tmp_path, grid, baseline="h100_x1"))
    s = run_sweep(sw, tmp_path / "s.h5", workers=1, progress=False, log=lambda m: None)
    assert s.duplicates == 1  # the baseline under 900 is the baseline under 450
    c = open_store(tmp_path / "s.h5").columns()
    dgx = c["system"] == "dgx_h100"
    assert c["vs_baseline.status"][dgx].tolist() == ["ok", "ok"]  # main 878b7fc: one baseline_missing
    base = c["tokens_per_s"][c["system"] == "h100_x1"][0]
    assert np.allclose(c["vs_baseline.throughput_ratio"][dgx], c["tokens_per_s"][dgx] / base, rtol=0, atol=0)
    # docs/sweep-files.md: the baseline's one row holds the key's first value, so a selection of the other
    # system drops it; the stored ratios still draw (the ratio recipe refused: "--baseline: expected a system
    # of the selected rows, got 'h100_x1'")
    assert c["hardware.nvlink4.bandwidth_gbps"][c["system"] == "h100_x1"].tolist() == [450]
    from attnsim.plots import figure
    from attnsim.studies.sweep.table import load_table

    fig = figure(
        load_table(tmp_path / "s.h5"),
        "ratio",
        x="hardware.nvlink4.bandwidth_gbps",
        y="vs_baseline.throughput_ratio",
        where={"system": "dgx_h100"},
    )
    line = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "DGX H100"][0]
    assert np.allclose(line.get_ydata(), c["vs_baseline.throughput_ratio"][dgx], rtol=0, atol=0)


def test_a_figure_label_naming_nothing_is_refused_before_the_sweep(tmp_path, capsys):
    fig = {"recipe": "tpot_vs_batch", "out": "f.pdf", "labels": {"h100_x": "GPU", "tpot_s": "Time per token"}}
    p = write_sweep(tmp_path, GRID, figures=[fig])
    before = _files(tmp_path)
    assert main(["sweep", str(p), "--out", str(tmp_path / "o" / "s.h5"), "--figures", "--no-progress"]) == 2
    err = capsys.readouterr().err
    # main 878b7fc: ran the sweep and drew "h100_x1" unrenamed
    assert f"error: {p}: figures.0.labels.h100_x: expected a name the figure draws" in err
    assert "(did you mean h100_x1?)" in err and _files(tmp_path) == before
