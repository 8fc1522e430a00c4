"""configs/reproductions/: the loader's checks, a synthetic reproduction end to end, figures, the
migrated AttAcc set (same numbers as the old configs/validation/attacc.yaml path) and every built-in
folder loading."""
import json
import re
from pathlib import Path

import pytest
import yaml

from attnsim import reproduce, validate
from attnsim.cli import main
from attnsim.config import ConfigError, get_dotted

EXPERIMENT = {"name": "toy_repro", "systems": ["dgx_a100", "dgx_h100"], "models": ["llama2-7b"],
              "scenarios": {"s1": {"batch_size": 1, "prompt_len": 64, "output_len": 4},
                            "s4": {"batch_size": 4, "prompt_len": 64, "output_len": 4}},
              "baseline": "dgx_a100"}
ROWS = [{"name": "h100/a100 decode throughput, batch 1", "experiment": "e",
         "select": {"system": "dgx_h100", "batch_size": 1}, "metric": "vs_baseline.decode_throughput_ratio",
         "reference": 1.5, "tolerance": 0.6, "role": "calibration"},
        {"name": "h100 TPOT, batch 4 [ms]", "experiment": "e", "select": {"system": "dgx_h100", "scenario": "s4"},
         "metric": "metrics.tpot_s", "scale": 1000.0, "reference": 5.0, "tolerance": 0.95, "role": "validation",
         "source": "hand-written"}]
REFERENCE = {"system": "toy", "title": "Toy reproduction", "source": "tests/test_reproductions.py",
             "paper": [{"claim": "H100 decodes faster", "value": 2.0, "note": "a made-up headline"}],
             "experiments": {"e": "exp.yaml"}, "figure": {"recipe": "reproduction", "out": "toy.pdf"},
             "rows": ROWS}


def _write(root: Path, ref: dict, exp: dict = EXPERIMENT, name: str = "toy") -> Path:
    folder = root / "reproductions" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exp.yaml").write_text(yaml.safe_dump(exp))
    (folder / "reference.yaml").write_text(yaml.safe_dump(ref, sort_keys=False))
    return folder


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    return _write(tmp_path, REFERENCE)


def _docs():
    """The toy experiment run directly (not through the reproduction loader)."""
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    return {(d["system"], d["scenario"]["name"]): d for d in run_experiment(load_experiment(
        str(reproduce.find("toy") / "exp.yaml")))}


def test_synthetic_reproduction_end_to_end(toy, capsys):
    assert main(["validate", "--set", "reproductions/toy"]) == 0
    out = capsys.readouterr().out
    cal, val = out.index("calibration rows (in-sample"), out.index("validation rows (held out")
    assert cal < out.index("1 of 1 calibration rows within tolerance") < val < out.index(
        "1 of 1 validation rows within tolerance") < out.index("paper headlines")
    assert "H100 decodes faster" in out and "a made-up headline" in out and "Toy reproduction" in out
    # the calibration row is printed in its section only
    assert out[cal:val].count("h100/a100 decode throughput") == 1 and "h100 TPOT" not in out[cal:val]
    assert main(["validate", "--set", "reproductions/toy", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    docs = _docs()  # the rows read the selected run; scale multiplies the attnsim value
    a, b = rows[ROWS[0]["name"]], rows[ROWS[1]["name"]]
    assert a["measured"] == docs["dgx_h100", "s1"]["vs_baseline"]["decode_throughput_ratio"]
    assert b["measured"] == pytest.approx(1000.0 * docs["dgx_h100", "s4"]["metrics"]["tpot_s"], rel=1e-12)
    assert (a["role"], b["role"], a["set"], a["system"], b["source"]) == (
        "calibration", "validation", "reproductions/toy", "toy", "hand-written")
    assert b["error"] == pytest.approx(b["measured"] / 5.0 - 1)


@pytest.mark.parametrize("role", ["validation", "calibration"])
def test_a_row_outside_tolerance_fails(tmp_path, monkeypatch, capsys, role):
    """Any row outside its tolerance makes the exit status 1 (validate's semantics), held out or not."""
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    other = "calibration" if role == "validation" else "validation"
    rows = [dict(ROWS[0], role=role, reference=1e3, tolerance=0.01), dict(ROWS[1], role=other)]
    _write(tmp_path, dict(REFERENCE, rows=rows))
    assert main(["validate", "--set", "reproductions/toy"]) == 1
    out = capsys.readouterr().out
    assert f"0 of 1 {role} rows within tolerance; 1 outside" in out and "FAIL" in out
    assert f"1 of 1 {other} rows within tolerance\n" in out


def _bad(tmp_path, **changes):
    ref = json.loads(json.dumps(REFERENCE))
    for path, value in changes.items():
        keys = path.split("__")
        node = ref
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return _write(tmp_path, ref)


BAD = [  # changes, key named, words in the message
    ({"rows__0__experiment": "nope"}, "rows.0.experiment", "expected one of the experiments (e)"),
    ({"rows__0__select": {"batch_size": 1}}, "rows.0.select", "got 2 runs"),
    ({"rows__0__select": {"system": "dgx_h100", "batch_size": 3}}, "rows.0.select", "got no run"),
    ({"rows__0__select": {"system": "dgx_h100", "colour": "red"}}, "rows.0.select.colour", "a scenario key"),
    ({"rows__1__tolerance": 0}, "rows.1.tolerance", "positive"),
    ({"rows__1__tolerance": -0.1}, "rows.1.tolerance", "positive"),
    ({"rows__1__scale": 0}, "rows.1.scale", "positive"),
    ({"rows__0__role": "fit"}, "rows.0.role", "calibration"),
    ({"rows__0__reference": 0}, "rows.0.reference", "non-zero"),
    ({"rows__0__reference": "many"}, "rows.0.reference", "number"),
    ({"rows__0__colour": "red"}, "rows.0.colour", ""),
    ({"colour": "red"}, "colour", ""),
    ({"rows__1__name": ROWS[0]["name"]}, "rows.1.name", "once"),
    ({"system": "other"}, "system", "folder's name"),
    ({"experiments": {"e": "missing.yaml"}}, "experiments.e", "not found"),
    ({"experiments": {"e": "../toy/exp.yaml"}}, "experiments.e", "'..'"),
    ({"experiments": {"e": "no_such_experiment"}}, "experiments.e", "built-in"),
    ({"figure": {"recipe": "pie", "out": "x.pdf"}}, "figure.recipe", "reproduction"),
    ({"figure": {"recipe": "reproduction", "out": "/tmp/x.pdf"}}, "figure.out", "relative"),
    ({"rows": []}, "rows", ""),
    ({"source": KeyError}, "source", ""),
]


@pytest.mark.parametrize("changes,key,words", BAD, ids=[b[1] + ":" + str(i) for i, b in enumerate(BAD)])
def test_loader_errors_name_file_and_key(tmp_path, changes, key, words):
    folder = _bad(tmp_path, **changes)
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    msg = str(e.value)
    assert "\n" not in msg and e.value.file.endswith("toy/reference.yaml") and e.value.key == key, msg
    assert msg.startswith(f"{e.value.file}: {key}: ") and words in msg, msg


@pytest.mark.parametrize("metric,words", [("metrics.nope", "dotted path"), ("metrics.memory", "finite number"),
                                          ("system", "finite number"), ("vs_baseline.baseline", "finite number")])
def test_metric_path_must_hold_a_number(tmp_path, metric, words):
    rep = reproduce.load(_bad(tmp_path, rows__1__metric=metric))
    with pytest.raises(ConfigError) as e:
        reproduce.run_rows(rep)
    assert e.value.key == "rows.1.metric" and words in str(e.value) and "\n" not in str(e.value)


def test_cli_errors_exit_2_one_line(toy, tmp_path, capsys):
    assert main(["validate", "--set", "reproductions/nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reproductions/nope" in err and "toy" in err
    _bad(tmp_path, rows__0__role="fit")
    assert main(["validate", "--set", "reproductions/toy"]) == 2
    assert "rows.0.role" in capsys.readouterr().err


def test_figure_written_and_bad_paths_refused(toy, tmp_path, capsys):
    figs = tmp_path / "figs"
    assert main(["validate", "--set", "reproductions/toy", "--figures", str(figs)]) == 0
    assert (figs / "toy.pdf").read_bytes()[:5] == b"%PDF-"
    assert (figs / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for bad in (blocker, blocker / "sub"):  # a file, and a folder under a file: refused before any run
        assert main(["validate", "--set", "reproductions/toy", "--figures", str(bad)]) == 2
        captured = capsys.readouterr()
        assert "--figures" in captured.err and captured.out == ""
    assert main(["validate", "--set", "limits", "--figures", str(figs)]) == 2  # nothing to draw: refused
    assert "--figures" in capsys.readouterr().err
    (figs / "toy.png").unlink()
    (figs / "toy.png").mkdir()  # the PNG sibling cannot be written
    assert main(["validate", "--set", "reproductions/toy", "--figures", str(figs)]) == 2
    assert "toy.png" in capsys.readouterr().err


def test_figure_recipe_draws_each_row_on_its_band():
    import matplotlib.pyplot as plt
    from attnsim.plots.recipes import reproduction
    rows = [validate.Row("s", "a", 1.2, 1.0, 0.25, role="calibration"),
            validate.Row("s", "b", 3.0, 2.0, 0.1, role="validation")]
    fig = reproduction(rows)
    ax = fig.axes[0]
    bands = [(p.get_x(), p.get_width()) for p in ax.patches]
    assert bands[0] == pytest.approx((0.75, 0.5)) and bands[1] == pytest.approx((0.9, 0.2))
    dots = {c.get_label(): c.get_offsets() for c in ax.collections}
    assert dots["calibration"][0][0] == pytest.approx(1.2) and dots["validation"][0][0] == pytest.approx(1.5)
    assert dots["outside tolerance"][0][0] == pytest.approx(1.5)  # b: +50 % > 10 %
    plt.close(fig)


def test_attacc_rows_read_the_builtin_experiment():
    """--set attacc (the old name) reads the same runs as the built-in attacc_gpt3_175b experiment: every
    row on one of its systems measures that run's metric (x scale). (The rows migrated from
    configs/validation/attacc.yaml were extended in issue 11: dgx-attacc = attacc_opt, tolerance 0.15.)"""
    from attnsim.config import find_config, load_yaml
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    # the folder's systems are the built-ins on the artefact's NVLink fit (nvlink3_attacc.yaml, the ring
    # formula): the built-in experiment with nvlink3 set to those values reads the same runs
    fit = load_yaml(find_config("hardware", "nvlink3_attacc"))
    pin = [f"hardware.nvlink3.{k}={fit[k]}" for k in ("allreduce", "latency_us", "efficiency", "bandwidth_gbps",
                                                      "energy_pj_per_bit")]
    # and the GPUs on the artefact's per-access energy (a100_hbm3_attacc.yaml)
    gpu = load_yaml(Path(find_config("hardware", "a100_hbm3")).parents[1] / "reproductions/attacc/a100_hbm3_attacc.yaml")
    pin += [f"hardware.a100_hbm3.{k}={gpu[k]}" for k in ("sm_active_power_w", "compute_pj_per_flop")]
    docs = run_experiment(load_experiment("attacc_gpt3_175b", pin))
    spec = reproduce.read_spec(next(p for p in reproduce.folders() if p.name == "attacc"))
    rows = {r.name: r for r in validate.run(["attacc"])}
    checked = 0
    for row in spec.rows:
        sel = dict(row.select)
        match = [d for d in docs if d["system"] == sel.get("system")
                 and d["scenario"]["batch_size"] == sel.get("batch_size")]
        if not match:
            continue  # a system only in the reproduction folder (the uncapped 8-GPU baseline)
        d, = match
        r = rows[row.name]
        assert (r.set, r.system, r.published, r.tolerance) == ("attacc", "attacc", row.reference, row.tolerance)
        assert r.measured == pytest.approx(float(get_dotted(d, row.metric.split("."))) * (row.scale or 1.0), rel=1e-12)
        checked += 1
    assert checked >= 11


def test_every_builtin_reproduction_loads():
    """Each folder of configs/reproductions/ reads, loads its experiments and selects one run per row."""
    names = [p.name for p in reproduce.folders()]
    assert "attacc" in names
    for p in reproduce.folders():
        rep = reproduce.load(p)
        assert len(rep.runs) == len(rep.spec.rows) and rep.spec.system == p.name
        if rep.spec.figure is not None:  # a figure name per folder, so figures never overwrite each other
            assert re.fullmatch(r"[\w.+-]+\.(pdf|png|svg)", rep.spec.figure.out)
    outs = [reproduce.read_spec(p).figure.out for p in reproduce.folders() if reproduce.read_spec(p).figure]
    assert len(outs) == len(set(outs))



# attacc is run by tests/test_validate.py and test_attacc_rows_read_the_builtin_experiment; one test per other
# folder, so the folders run in parallel under xdist
RUN_FOLDERS = [p for p in reproduce.folders() if p.name != "attacc"]


def test_some_builtin_reproduction_is_run():
    assert {"cent", "neupims"} <= {p.name for p in RUN_FOLDERS}


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=[p.name for p in RUN_FOLDERS])
def test_every_builtin_reproduction_runs(folder):
    """Each folder's rows read a number from a completed run (metric paths, selected runs that fit); whether
    they are within tolerance is each reproduction's own test (tests/test_validate.py for AttAcc)."""
    import math
    rep = reproduce.load(folder)
    rows = reproduce.run_rows(rep)
    assert [r.name for r in rows] == [r.name for r in rep.spec.rows]
    assert all(math.isfinite(r.measured) and r.role in reproduce.ROLES for r in rows)


@pytest.mark.parametrize("escape", ['"\\U00110000"', '"\\UFFFFFFFF"', "2001-13-01", "!!int 12x"])
def test_bad_yaml_scalar_is_a_clean_error(tmp_path, escape):
    """Found by the reproduction fuzz harness: PyYAML raised ValueError / OverflowError for a "\\U" escape
    beyond U+10FFFF, an impossible date, a bad !!int (every YAML reader shares attnsim.config.parse_yaml)."""
    folder = _write(tmp_path, REFERENCE)
    text = (folder / "reference.yaml").read_text().replace("title: Toy reproduction", f"title: {escape}")
    (folder / "reference.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    assert str(e.value).startswith(f"{e.value.file}: invalid YAML value (") and e.value.file.endswith("reference.yaml")


def test_serving_experiment_refused(tmp_path):
    """Rows read static-batch runs: an experiment's serving section would be ignored, so it is refused."""
    from attnsim.config import find_config, load_yaml
    serving = load_yaml(find_config("experiments", "serve_paging"))["serving"]
    folder = _write(tmp_path, REFERENCE, exp=dict(EXPERIMENT, serving=serving))
    with pytest.raises(ConfigError) as e:
        reproduce.load(folder)
    assert e.value.key == "experiments.e" and "serving" in str(e.value)


NOOP = {  # every reference.yaml field, changed to another legal value, changes what validate prints or writes
    "system": None,  # must equal the folder name (tests above); a renamed folder is another reproduction
    "title": "Another title", "source": "another source",
    "paper__0__claim": "another claim", "paper__0__value": "3x", "paper__0__note": "another note",
    "experiments": {"e": "exp2.yaml"}, "figure__recipe": None,  # one recipe so far
    "figure__out": "other.pdf", "rows__0__name": "renamed", "rows__0__experiment": None,  # one experiment label
    "rows__0__select": {"system": "dgx_h100", "batch_size": 4}, "rows__1__metric": "metrics.ttft_s",
    "rows__1__scale": 1.0, "rows__1__reference": 6.0, "rows__1__tolerance": 0.5, "rows__0__role": "validation",
    "rows__1__source": "another row source",
}


def _outputs(tmp_path, path, capsys):
    """What validate prints (text; JSON for a row's source, only there) and the figure files it writes
    (for figure.out; figures take the longest)."""
    figs = tmp_path / f"figs_{len(list(tmp_path.iterdir()))}"
    args = ["--json"] if path == "rows__1__source" else ["--figures", str(figs)] if path == "figure__out" else []
    main(["validate", "--set", "reproductions/toy", *args])
    return capsys.readouterr().out, sorted(p.name for p in figs.iterdir()) if figs.is_dir() else []


@pytest.mark.parametrize("path", [k for k, v in NOOP.items() if v is not None])
def test_every_reference_field_takes_effect(tmp_path, monkeypatch, capsys, path):
    monkeypatch.setenv("ATTNSIM_CONFIG_PATH", str(tmp_path))
    folder = _write(tmp_path, REFERENCE)
    (folder / "exp2.yaml").write_text(yaml.safe_dump(dict(EXPERIMENT, models=["llama2-13b"])))
    base = _outputs(tmp_path, path, capsys)
    _bad(tmp_path, **{path: NOOP[path]})
    assert _outputs(tmp_path, path, capsys) != base


def test_noop_table_covers_every_field():
    fields = set()
    for prefix, cls in (("", reproduce.ReferenceSpec), ("paper__0__", reproduce.PaperClaim),
                        ("figure__", reproduce.FigureSpec), ("rows__0__", reproduce.RowSpec)):
        fields |= {prefix + f for f in cls.model_fields if not (prefix == "" and f in ("paper", "figure", "rows"))}
    covered = {k if not k.startswith("rows__1__") else "rows__0__" + k[len("rows__1__"):] for k in NOOP}
    assert fields == covered
