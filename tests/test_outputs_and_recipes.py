"""`attnsim run --trace` and every plot recipe on every built-in system; output-path checks; names;
broken pipes; file modes."""
import json
from pathlib import Path

import numpy as np
import pytest

from attnsim.cli import main

SYSTEMS = sorted(p.stem for p in (Path(__file__).parent.parent / "configs" / "systems").glob("*.yaml"))
RECIPE_ARGS = {  # recipe -> extra arguments for a file with one run per system
    "latency_by_op": [], "latency_by_device": [], "energy_breakdown": [],
    "throughput_vs_batch": [], "tpot_vs_batch": [], "throughput_vs_context": [], "tpot_vs_context": [],
    "line": ["--x", "batch_size", "--y", "ttft_s"],
    "heatmap": ["--x", "batch_size", "--y", "system", "--z", "tpot_s"],
    "pareto": [],
}


@pytest.fixture(scope="module")
def every_system(tmp_path_factory):
    """One small run per built-in system (one decode step, so the trace's decode step is the TPOT)."""
    d = tmp_path_factory.mktemp("every")
    exp = d / "every.yaml"
    exp.write_text(f"name: every\nsystems: [{', '.join(SYSTEMS)}]\nmodels: [llama2-7b]\n"
                   "scenarios:\n  tiny: {batch_size: 2, prompt_len: 64, output_len: 2}\n")
    assert main(["run", str(exp), "--out", str(d / "res"), "--trace", str(d / "trace.json"), "--no-figures",
                 "--json"]) == 0
    return d


def test_every_system_runs_ok(every_system, capsys):
    assert main(["show", str(every_system / "res" / "results.h5"), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["system"] for r in runs] == SYSTEMS
    assert all(r["status"] == "ok" for r in runs), [r.get("error") for r in runs]


def test_trace_every_system(every_system, capsys):
    main(["show", str(every_system / "res" / "results.h5"), "--json"])
    runs = {r["system"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    events = json.loads((every_system / "trace.json").read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(procs) == 2 * len(SYSTEMS)
    for pid, name in procs.items():
        system, phase = name.split(" ", 1)
        xs = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
        durs = np.array([e["dur"] for e in xs])
        assert len(xs) > 0 and np.all(np.isfinite(durs)) and np.all(durs >= 0), name
        ts = np.array([e["ts"] for e in xs])
        assert np.all(np.diff(ts) >= -1e-9), name  # in execution order
        m = runs[system]["metrics"]
        want_s = m["ttft_s"] if phase == "prefill" else m["tpot_s"]
        assert durs.sum() * 1e-6 == pytest.approx(want_s, rel=1e-6), name
        tracks = {e["args"]["name"] for e in events if e["pid"] == pid and e["name"] == "thread_name"}
        bd = runs[system]["breakdown"]["prefill" if phase == "prefill" else "decode_step"]
        assert tracks == set(bd["time_s_by_device"]), name
        assert {e["name"] for e in xs} == set(bd["time_s_by_op"]), name  # mapper-added rows included


@pytest.mark.parametrize("recipe", sorted(RECIPE_ARGS))
def test_recipe_over_every_system(every_system, recipe):
    res = every_system / "res" / "results.h5"
    out = every_system / f"{recipe}.pdf"
    assert main(["plot", str(res), "--recipe", recipe, "-o", str(out), *RECIPE_ARGS[recipe]]) == 0
    assert out.read_bytes()[:4] == b"%PDF" and out.with_suffix(".png").stat().st_size > 1000


def test_recipe_content_names_every_system(every_system):
    from attnsim.plots import figure
    from attnsim.sweep.table import load_table
    t = load_table(every_system / "res" / "results.h5")
    fig = figure(t, "pareto")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert set(SYSTEMS) <= set(labels)
    fig = figure(t, "latency_by_device")
    assert [x.get_text() for x in fig.axes[0].get_xticklabels()] == SYSTEMS


def test_roofline_every_system(every_system):
    """Mapper-modified traces (split rows, added transfers) from a multi-system results file."""
    import matplotlib.pyplot as plt
    from attnsim.plots import figure
    from attnsim.sweep.table import load_table
    t = load_table(every_system / "res" / "results.h5")
    for system in SYSTEMS:
        fig = figure(t, "roofline", where={"system": system})
        info = fig._roofline
        plt.close(fig)
        assert info["system"] == system and info["devices"], system
        for d in info["devices"].values():
            assert len(d["ops"]) == len(d["flops"]) == len(d["time_s"]) > 0, system
            assert np.all(d["time_s"] >= 0) and np.all(np.isfinite(d["flops"])), system
    out = every_system / "roofline_attacc.png"
    assert main(["plot", str(every_system / "res" / "results.h5"), "--recipe", "roofline", "--where",
                 "system=attacc", "-o", str(out)]) == 0
    assert out.stat().st_size > 1000 and out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
