"""`attnsim run --trace` and every plot recipe on every built-in system; output-path checks; names;
broken pipes; file modes."""

import json
from pathlib import Path

import numpy as np
import pytest

from attnsim.cli import main

SYSTEMS = sorted(p.stem for p in (Path(__file__).parent.parent / "configs" / "systems").glob("*.yaml"))
RECIPE_ARGS = {  # recipe -> extra arguments for a file with one run per system
    "latency_by_op": [],
    "latency_by_device": [],
    "energy_breakdown": [],
    "throughput_vs_batch": [],
    "tpot_vs_batch": [],
    "throughput_vs_context": [],
    "tpot_vs_context": [],
    "line": ["--x", "batch_size", "--y", "ttft_s"],
    "heatmap": ["--x", "batch_size", "--y", "system", "--z", "tpot_s"],
    "pareto": [],
    "ratio": ["--x", "batch_size", "--baseline", "dgx_h100"],
}


@pytest.fixture(scope="module")
def every_system(tmp_path_factory):
    """One small run per built-in system (one decode step, so the trace's decode step is the TPOT)."""
    d = tmp_path_factory.mktemp("every")
    exp = d / "every.yaml"
    exp.write_text(
        f"name: every\nsystems: [{', '.join(SYSTEMS)}]\nmodels: [llama2-7b]\n"
        "scenarios:\n  tiny: {batch_size: 2, prompt_len: 64, output_len: 2}\n"
    )
    assert (
        main(["run", str(exp), "--out", str(d / "res"), "--trace", str(d / "trace.json"), "--no-figures", "--json"])
        == 0
    )
    return d


def test_every_system_runs_ok(every_system, capsys):
    assert main(["show", str(every_system / "res" / "results.h5"), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["system"] for r in runs] == SYSTEMS
    # a system too small for Llama-2-7B's 13.5 GB of weights (IANUS: 8 GB of unified AiM memory) must say
    # so, and run a model of its class
    small = [r["system"] for r in runs if r["status"] != "ok"]
    assert all(r["status"] in ("ok", "does_not_fit") for r in runs), [r.get("error") for r in runs]
    assert all("weights" in r["error"] for r in runs if r["status"] == "does_not_fit"), small
    assert set(small) <= {"ianus", "ianus_naive", "ianus_npu_only"}, small
    if small:
        exp = every_system / "small.yaml"
        exp.write_text(
            f"name: small\nsystems: [{', '.join(small)}]\nmodels: [gpt2-xl]\n"
            "scenarios:\n  tiny: {batch_size: 2, prompt_len: 64, output_len: 2}\n"
        )
        assert main(["run", str(exp), "--out", str(every_system / "small"), "--no-figures", "--json"]) == 0
        small_runs = json.loads(capsys.readouterr().out)["runs"]
        assert [r["status"] for r in small_runs] == ["ok"] * len(small), [r.get("error") for r in small_runs]


def test_trace_every_system(every_system, capsys):
    main(["show", str(every_system / "res" / "results.h5"), "--json"])
    runs = {r["system"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    events = json.loads((every_system / "trace.json").read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(procs) == sum(2 if r["metrics"]["pp"] > 1 else 1 for r in runs.values() if r["status"] == "ok")
    for pid, name in procs.items():
        system, phase = name.split(" ", 1)
        xs = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
        if runs[system]["metrics"]["pp"] == 1:  # one process: a steps track + one track per device
            tracks = {e["tid"]: e["args"]["name"] for e in events if e["pid"] == pid and e["name"] == "thread_name"}
            steps = [e for e in xs if tracks[e["tid"]] == "steps"]
            ops = [e for e in xs if tracks[e["tid"]] != "steps"]
            m, bd = runs[system]["metrics"], runs[system]["breakdown"]
            assert [e["name"] for e in steps] == ["prefill", "decode step 1"], name
            for e, want in zip(steps, (m["ttft_s"], m["tpot_s"])):
                assert e["dur"] * 1e-6 == pytest.approx(want, rel=1e-9), name
            durs = np.array([e["dur"] for e in ops])
            assert np.all(np.isfinite(durs)) and np.all(durs >= 0), name
            assert durs.sum() * 1e-6 == pytest.approx(m["ttft_s"] + m["tpot_s"], rel=1e-6), name
            assert set(tracks.values()) == {"steps"} | set(bd["prefill"]["time_s_by_device"]) | set(
                bd["decode_step"]["time_s_by_device"]
            ), name
            assert {e["name"] for e in ops} == set(bd["prefill"]["time_s_by_op"]) | set(
                bd["decode_step"]["time_s_by_op"]
            )
            continue
        durs = np.array([e["dur"] for e in xs])
        assert len(xs) > 0 and np.all(np.isfinite(durs)) and np.all(durs >= 0), name
        ts = np.array([e["ts"] for e in xs])
        assert np.all(np.diff(ts) >= -1e-9), name  # in execution order
        m = runs[system]["metrics"]
        want_s = m["ttft_s"] if phase == "prefill" else m["tpot_s"]
        if m["pp"] > 1:  # one event per (micro-batch, stage) on its device group's track, overlapping
            tracks = {e["tid"]: e["args"]["name"] for e in events if e["pid"] == pid and e["name"] == "thread_name"}
            assert set(tracks.values()) == {f"device group {g}" for g in range(len(tracks))}, name
            for tid in tracks:  # a device group runs one (micro-batch, stage) at a time
                mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if e["tid"] == tid)
                assert all(a[1] <= b[0] + 1e-6 for a, b in zip(mine, mine[1:])), name
            if phase == "prefill":  # the flow shop ends with the last micro-batch's last stage (+ host time)
                assert max(e["ts"] + e["dur"] for e in xs) * 1e-6 <= want_s * (1 + 1e-9), name
            continue
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
    from attnsim.studies.sweep.table import load_table

    t = load_table(every_system / "res" / "results.h5")
    from attnsim.plots.labels import display

    fig = figure(t, "pareto")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    ok = [s for s, st in zip(t.col("system"), t.col("status")) if st == "ok"]
    assert {display(s) for s in ok} <= set(labels)  # as printed: "DGX H100" for dgx_h100
    if len(ok) < len(SYSTEMS):  # the runs that did not fit are counted, not silently dropped
        assert f"does not fit ({len(SYSTEMS) - len(ok)} not drawn)" in labels, labels
    fig = figure(t, "latency_by_device", width="double")  # 33 bars: room for every tick label
    norm = lambda text: "".join(ch for ch in text if ch not in " ,\n")  # noqa: E731 - wrapped labels
    assert [norm(x.get_text()) for x in fig.axes[0].get_xticklabels()] == [norm(display(s)) for s in SYSTEMS]


# drawn in full: mapper-modified traces (split rows: tiered; added transfers: attacc, cxl_pnm), NeuPIMs, pp > 1
ROOFLINE_DRAWN = ("attacc", "tiered_attacc", "cxl_pnm", "neupims", "cent_pp2_tp4", "dgx_h100")


def test_roofline_every_system(every_system):
    """Mapper-modified traces (split rows, added transfers) from a multi-system results file: the placed
    ops of every system (what the recipe draws), and the figure itself for a representative set (drawing
    and tick fitting cost ~1 s per figure)."""
    import matplotlib.pyplot as plt

    from attnsim.plots import figure
    from attnsim.plots.recipes import placed_ops
    from attnsim.studies.sweep.table import load_table

    t = load_table(every_system / "res" / "results.h5")
    ok = [s for s, st in zip(t.col("system"), t.col("status")) if st == "ok"]
    assert len(ok) >= len(SYSTEMS) - 3  # test_every_system_runs_ok: only IANUS may not hold Llama-2-7B
    assert set(ROOFLINE_DRAWN) <= set(ok)
    for system in ok:
        if system in ROOFLINE_DRAWN:
            fig = figure(t, "roofline", where={"system": system})
            info = fig._roofline
            plt.close(fig)
        else:
            info = placed_ops(t.resolved(list(t.col("system")).index(system)))
        assert info["system"] == system and info["devices"], system
        for d in info["devices"].values():
            assert len(d["ops"]) == len(d["flops"]) == len(d["time_s"]) > 0, system
            assert np.all(d["time_s"] >= 0) and np.all(np.isfinite(d["flops"])), system
    out = every_system / "roofline_attacc.png"
    assert (
        main(
            [
                "plot",
                str(every_system / "res" / "results.h5"),
                "--recipe",
                "roofline",
                "--where",
                "system=attacc",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert out.stat().st_size > 1000 and out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"


# ---------------------------------------------------------------- output paths, checked before any work

TINY = [
    "--set",
    "experiment.systems=[dgx_h100]",
    "--set",
    "experiment.baseline=null",
    "--set",
    "experiment.models=[llama2-7b]",
    "--set",
    "scenarios.chat.batch_size=1",
    "--set",
    "scenarios.chat.prompt_len=16",
    "--set",
    "scenarios.chat.output_len=2",
]


def _files(root: Path) -> set:
    return {p.relative_to(root) for p in root.rglob("*")}


def _refused(capsys, root: Path, argv, *needles) -> str:
    """Exit 2, one stderr line 'error: ...' naming every needle, and nothing written under root."""
    before = _files(root)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    assert _files(root) == before
    return err


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    ro = tmp_path / "ro.json"
    ro.write_text("{}")
    ro.chmod(0o444)
    (tmp_path / "rodir").mkdir()
    (tmp_path / "rodir").chmod(0o555)
    yield tmp_path
    (tmp_path / "rodir").chmod(0o755)


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--out", "afile"], ["afile", "--out", "expected a directory"]),
        (["--out", "afile/sub"], ["afile/sub", "--out", "is a file"]),
        (["--out", "rodir/sub"], ["rodir/sub", "read-only"]),
        (["--trace", "adir"], ["adir", "--trace", "expected a file path, got a directory"]),
        (["--trace", "afile/t.json"], ["afile/t.json", "'afile' is a file"]),
        (["--trace", "ro.json"], ["ro.json", "--trace", "read-only file"]),
        (["--trace", "rodir/t.json"], ["rodir/t.json", "read-only"]),
        (["--out", "res", "--trace", "res/results.h5"], ["res/results.h5", "--trace", "output is the input"]),
    ],
)
def test_run_output_paths_refused_before_work(work, capsys, args, needles):
    _refused(capsys, work, ["run", *TINY, *args], *needles)


def test_run_output_folders_created_files_need_their_folder(work, capsys):
    _refused(
        capsys, work, ["run", *TINY, "--no-write", "--trace", "missing/dir/t.json"], "missing/dir", "does not exist"
    )
    (work / "deep").mkdir()
    assert main(["run", *TINY, "--out", "new/res", "--trace", "deep/t.json"]) == 0
    assert (work / "new/res/results.h5").stat().st_size > 0 and (work / "new/res/energy_breakdown.pdf").exists()
    assert json.loads((work / "deep/t.json").read_text())["traceEvents"]


def test_serve_output_paths(work, capsys):
    exp = work / "s.yaml"
    exp.write_text(
        "name: s\nsystems: [h100_x1]\nmodels: [llama2-7b]\nscenarios:\n  c: {prompt_len: 32, output_len: 2}\n"
        "serving:\n  trace: {num_requests: 3, rate_per_s: 50, seed: 1}\n"
    )
    _refused(capsys, work, ["serve", str(exp), "--out", "afile"], "afile", "expected a directory")
    _refused(capsys, work, ["serve", str(exp), "--csv", "adir"], "adir", "--csv", "got a directory")
    _refused(capsys, work, ["serve", str(exp), "--csv", str(exp)], "--csv", "output is the input")
    _refused(capsys, work, ["serve", str(exp), "--no-write", "--csv", "rodir/r.csv"], "rodir/r.csv", "read-only")
    _refused(
        capsys, work, ["serve", str(exp), "--slo-vs-load", "1,2", "--figure", "adir"], "--figure", "got a directory"
    )
    _refused(capsys, work, ["serve", str(exp), "--slo-vs-load", "1,2", "--figure", "afile/f.pdf"], "'afile' is a file")
    _refused(capsys, work, ["serve", str(exp), "--csv", "missing/dir/r.csv"], "missing/dir", "does not exist")
    _refused(capsys, work, ["serve", str(exp), "--figure", "f.pdf"], "--figure", "--slo-vs-load")
    _refused(capsys, work, ["serve", str(exp), "--slo-vs-load", "1", "--csv", "r.csv"], "--slo-vs-load", "--csv")
    _refused(capsys, work, ["serve", str(exp), "--no-write", "--out", "o"], "--out", "--no-write")
    _refused(capsys, work, ["run", *TINY, "--no-write", "--out", "o"], "--out", "--no-write")
    assert main(["serve", str(exp), "--out", "new/res", "--csv", "r.csv"]) == 0
    assert (work / "r.csv").read_text().startswith("run,system") and (work / "new/res/results.h5").exists()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    sw = d / "sw.yaml"
    sw.write_text(
        "name: tiny\nbase: default\nset:\n  experiment.generation.mode: sampled\n"
        "  experiment.generation.samples: 2\n  scenarios.chat.output_len: 3\n  scenarios.chat.prompt_len: 32\n"
        "parameters:\n  - grid:\n      system: [h100_x1]\n      model: [llama2-7b]\n"
        "      scenario.batch_size: [1, 2]\n"
        "figures:\n  - {recipe: tpot_vs_batch, out: figs/t.pdf}\n"
    )
    assert main(["sweep", str(sw), "--out", str(d / "st.h5"), "--no-progress", "--workers", "1", "--cache", "off"]) == 0
    return d / "st.h5"


def test_sweep_merge_export_plot_output_paths(work, store, capsys):
    import shutil

    st = work / "st.h5"
    shutil.copy(store, st)
    sw = work / "sw.yaml"
    sw.write_text((store.parent / "sw.yaml").read_text())
    _refused(capsys, work, ["sweep", str(sw), "--out", "adir"], "adir", "--out", "got a directory")
    _refused(capsys, work, ["sweep", str(sw), "--out", str(sw)], "--out", "output is the input")
    _refused(
        capsys,
        work,
        ["sweep", str(sw), "--out", "x.h5", "--figures", "--fig-dir", "afile"],
        "--fig-dir",
        "expected a directory",
    )
    _refused(capsys, work, ["merge", "st.h5", "-o", "st.h5"], "-o", "output is the input")
    _refused(capsys, work, ["merge", "st.h5", "-o", "adir"], "adir", "got a directory")
    _refused(capsys, work, ["merge", "st.h5", "-o", "missing/m.h5"], "'missing'", "does not exist")
    # a figure's missing folders are made, as every figure writer does (run, sweep --figures, validate, plan); the
    # newcomer walk of issue 28 found plot -o refusing them
    assert main(["plot", "st.h5", "--recipe", "pareto", "-o", str(work / "new" / "sub" / "p.pdf")]) == 0
    assert (work / "new" / "sub" / "p.pdf").stat().st_size > 0 and (work / "new" / "sub" / "p.png").exists()
    capsys.readouterr()
    shutil.rmtree(work / "new")
    _refused(capsys, work, ["export", "st.h5", "--csv", "-o", "missing/x.csv"], "does not exist")
    _refused(capsys, work, ["export", "st.h5", "--csv", "-o", "st.h5"], "output is the input")
    _refused(capsys, work, ["export", "st.h5", "--csv", "-o", "rodir/x.csv"], "rodir/x.csv", "read-only")
    _refused(capsys, work, ["export", "st.h5", "--csv", "-o", "adir"], "adir", "got a directory")
    _refused(capsys, work, ["plot", "st.h5", "--recipe", "pareto", "-o", "st.h5"], "st.h5", "output is the input")
    _refused(capsys, work, ["plot", "st.h5", "--recipe", "pareto", "-o", "adir/f.png/"], "directory path")
    (work / "ro.png").write_bytes(b"old")
    (work / "ro.png").chmod(0o444)
    _refused(capsys, work, ["plot", "st.h5", "--recipe", "pareto", "-o", "ro.png"], "ro.png", "read-only")
    _refused(capsys, work, ["plot", "st.h5", "--all", "--fig-dir", "afile"], "afile", "--fig-dir")
    (work / "adir" / "f.pdf").mkdir()  # the PNG's sibling is a folder: refused before the PNG is drawn
    _refused(capsys, work, ["plot", "st.h5", "--recipe", "pareto", "-o", "adir/f.png"], "adir/f.pdf", "got a directory")
    _refused(
        capsys,
        work,
        ["plot", "st.h5", "--recipe", "pareto", "-o", "f.pdf", "--fig-dir", "figs"],
        "--fig-dir",
        "only applies with --all",
    )
    _refused(capsys, work, ["plot", "st.h5", "--all", "-o", "f.pdf"], "--all")
    _refused(capsys, work, ["sweep", str(sw), "--out", "x.h5", "--fig-dir", "figs"], "--fig-dir", "--figures")
    assert main(["plot", "st.h5", "--all", "--fig-dir", "figs"]) == 0
    assert (work / "figs/figs/t.pdf").read_bytes()[:4] == b"%PDF"


def test_asm_never_overwrites_its_source(work, capsys):
    src = Path(__file__).parent / "data" / "isa" / "attacc_score.s"
    p = work / "p.s"
    p.write_bytes(src.read_bytes())
    (work / "link.s").symlink_to(p)
    for out in ("p.s", "link.s", "nothere/../p.s", str(p)):
        _refused(capsys, work, ["asm", "--isa", "attacc", "p.s", "-o", out], "-o", "output is the input")
    assert p.read_bytes() == src.read_bytes()
    assert main(["asm", "--isa", "attacc", "p.s"]) == 0 and (work / "p.bin").stat().st_size > 0
    capsys.readouterr()
    _refused(capsys, work, ["disasm", "--isa", "attacc", "p.bin", "-o", "p.bin"], "output is the input")
    _refused(capsys, work, ["asm", "--isa", "attacc", "p.s", "-o", "adir"], "adir", "got a directory")


# ---------------------------------------------------------------- modes, names, pipes


def test_written_files_honour_the_umask(work, capsys):
    import os

    old = os.umask(0o022)
    try:
        assert main(["run", *TINY, "--out", "res", "--trace", "t.json"]) == 0
        src = Path(__file__).parent / "data" / "isa" / "attacc_score.s"
        assert main(["asm", "--isa", "attacc", str(src), "-o", "p.bin"]) == 0
        assert main(["export", "res/results.h5", "--csv", "-o", "r.csv"]) == 0
        os.umask(0o027)
        assert main(["plot", "res/results.h5", "--recipe", "pareto", "-o", "p027.png"]) == 0
    finally:
        os.umask(old)
    for f in ("res/results.h5", "res/latency_by_device.pdf", "res/energy_breakdown.png", "t.json", "p.bin", "r.csv"):
        assert (work / f).stat().st_mode & 0o777 == 0o644, f
    assert (work / "p027.png").stat().st_mode & 0o777 == 0o640
    assert not list(work.rglob(".*tmp*"))  # no temporary files left behind


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", ".hidden", "..", "x\\y", " lead"])
def test_traversal_names_refused(work, capsys, name):
    exp = work / "e.yaml"
    exp.write_text(
        f"name: {json.dumps(name)}\nsystems: [dgx_h100]\nmodels: [llama2-7b]\n"
        "scenarios:\n  c: {batch_size: 1, prompt_len: 16, output_len: 2}\n"
    )
    _refused(capsys, work, ["run", str(exp)], "e.yaml", "name", "plain name", repr(name))
    _refused(capsys, work, ["run", *TINY, "--set", f"experiment.name={json.dumps(name)}"], "name", "plain name")
    exp.write_text(exp.read_text().replace("batch_size: 1, ", "") + "serving:\n  trace: {num_requests: 2, seed: 1}\n")
    _refused(capsys, work, ["serve", str(exp)], "e.yaml", "name", "plain name")
    sw = work / "sw.yaml"
    sw.write_text(f"name: {json.dumps(name)}\nbase: default\n")
    _refused(capsys, work, ["sweep", str(sw)], "sw.yaml", "name", "plain name")


def test_plain_names_accepted():
    from attnsim.core.outputs import check_name

    for n in ("default", "my run 2", "café", "a.b-c+d_e", "x" * 128):
        assert check_name(n) == n
    with pytest.raises(Exception):
        check_name("x" * 129)


def test_sweep_figure_paths_stay_inside(work, store, capsys):
    """A sweep file or a store's own definition cannot send figures outside the figure folder."""
    import shutil

    import h5py
    import yaml

    sw = work / "sw.yaml"
    for bad in ("../evil.pdf", "/tmp/evil.pdf", "a/../../evil.pdf"):
        sw.write_text((store.parent / "sw.yaml").read_text().replace("figs/t.pdf", bad))
        _refused(capsys, work, ["sweep", str(sw), "--out", "x.h5", "--figures"], "sw.yaml", "figures.0.out", bad)
    st = work / "st.h5"
    shutil.copy(store, st)
    with h5py.File(st, "a") as f:  # a store whose own definition was tampered with
        d = yaml.safe_load(f.attrs["sweep_definition"])
        d["figures"][0]["out"] = "../../evil.pdf"
        f.attrs["sweep_definition"] = yaml.safe_dump(d)
    _refused(capsys, work, ["plot", "st.h5", "--all", "--fig-dir", "figs"], "st.h5", "figures.0.out", "'..'")
    assert not (work.parent / "evil.pdf").exists()


def test_plot_list_needs_no_file(capsys):
    from attnsim.plots import RECIPES

    assert main(["plot", "--list"]) == 0
    listed = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    from attnsim.core.plot_options import DOC_RECIPES  # serve results and plan documents (plan_front)

    assert set(RECIPES) | set(DOC_RECIPES) == set(listed)
    assert main(["plot", "--recipe", "pareto", "-o", "x.pdf"]) == 2
    assert "needs a results file" in capsys.readouterr().err


def test_latency_cdf_recipe(work, capsys):
    exp = work / "s.yaml"
    exp.write_text(
        "name: s\nsystems: [h100_x1, dgx_h100]\nmodels: [llama2-7b]\nscenarios:\n"
        "  c: {prompt_len: 32, output_len: 2}\nserving:\n  trace: {num_requests: 4, rate_per_s: 50, seed: 1}\n"
    )
    assert main(["serve", str(exp), "--out", "res"]) == 0
    assert main(["plot", "res/results.h5", "--recipe", "latency_cdf", "-o", "cdf.png"]) == 0
    assert (work / "cdf.png").stat().st_size > 1000 and (work / "cdf.pdf").read_bytes()[:4] == b"%PDF"
    capsys.readouterr()
    _refused(capsys, work, ["plot", "nothere.h5", "--recipe", "latency_cdf", "-o", "c2.png"], "nothere.h5", "not found")
    _refused(
        capsys,
        work,
        ["plot", "res/results.h5", "--recipe", "latency_cdf", "--where", "system=h100_x1", "-o", "c2.png"],
        "--recipe",
        "does not use --where",
    )
    _refused(capsys, work, ["plot", str(exp), "--recipe", "latency_cdf", "-o", "c2.png"], "s.yaml", "HDF5")


def test_broken_pipe_is_quiet(every_system):
    """`attnsim show ... | head -1`: no BrokenPipeError traceback, exit 141 (128 + SIGPIPE)."""
    import subprocess
    import sys

    code = "import sys; from attnsim.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen(
        [sys.executable, "-c", code, "show", str(every_system / "res" / "results.h5"), "--json", "--breakdown"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.readline()
    p.stdout.close()  # the reader goes away, like `head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_keyboard_interrupt_one_line(monkeypatch, capsys):
    import attnsim.cli.run as cr

    def boom(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cr, "show_cmd", boom)
    assert main(["show", "x.h5"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_request_trace_not_utf8(work, capsys):
    bad = work / "req.csv"
    bad.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,\xff\xfe,3\n")
    exp = work / "s.yaml"
    exp.write_text(
        f"name: s\nsystems: [h100_x1]\nmodels: [llama2-7b]\nscenarios:\n  c: {{prompt_len: 32, output_len: 2}}\n"
        f"serving:\n  trace: {{file: {bad}}}\n"
    )
    _refused(capsys, work, ["serve", str(exp), "--out", "res"], "req.csv", "not UTF-8", "0xff")
    bad.write_bytes(b'{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n\x80\n')
    jl = bad.rename(work / "req.jsonl")
    exp.write_text(exp.read_text().replace(str(bad), str(jl)))
    _refused(capsys, work, ["serve", str(exp), "--out", "res"], "req.jsonl", "not UTF-8", "0x80")


def test_recipe_options_table_matches_recipes():
    from attnsim.core.plot_options import DOC_RECIPES, RECIPE_OPTIONS
    from attnsim.plots import RECIPES

    assert set(RECIPE_OPTIONS) == set(RECIPES) | set(DOC_RECIPES)


@pytest.mark.parametrize(
    "recipe, args, unused",
    [
        ("latency_by_op", ["--x", "batch_size"], "--x"),
        ("roofline", ["--hue", "model"], "--hue"),
        ("line", ["--x", "batch_size", "--y", "tpot_s", "--z", "ttft_s"], "--z"),
        ("energy_breakdown", ["--z", "tpot_s"], "--z"),
    ],
)
def test_options_a_recipe_does_not_read_are_refused(every_system, capsys, recipe, args, unused):
    out = every_system / "unused.pdf"
    _refused(
        capsys,
        every_system,
        ["plot", str(every_system / "res" / "results.h5"), "--recipe", recipe, *args, "-o", str(out)],
        "--recipe",
        f"does not use {unused}",
    )


def test_sweep_figures_checked_on_load(work, capsys):
    sw = work / "sw.yaml"
    base = "name: t\nbase: default\nfigures:\n  - {recipe: %s, out: f.pdf%s}\n"
    for recipe, extra, needle in (
        ("nope", "", "unknown recipe 'nope'"),
        ("latency_by_device", ", hue: model", "does not use hue"),
        ("latency_cdf", "", "serve results"),
    ):
        sw.write_text(base % (recipe, extra))
        _refused(capsys, work, ["sweep", str(sw), "--out", "s.h5"], "sw.yaml", "figures.0", needle)
