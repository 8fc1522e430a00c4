"""The Python API (attnsim/api.py): the docs/api.md examples run, and the API gives the CLI's numbers."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import attnsim
from attnsim.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
TINY = {
    "name": "tiny_api",
    "systems": ["h100_x1"],
    "models": ["llama2-7b"],
    "scenarios": {"chat": {"batch_size": 2, "prompt_len": 256, "output_len": 6}},
    "generation": {"mode": "sampled", "samples": 2},
}
METRICS = ["ttft_s", "tpot_s", "tokens_per_s", "energy_per_token_j", "decode_step/time_s"]


def test_docs_api_examples_run(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} python block {i + 1}", "exec"), ns)
    out = capsys.readouterr().out
    res, bigger, df = ns["res"], ns["bigger"], ns["df"]
    assert df.shape[0] == 1 and df["tpot_s"].iloc[0] == res[0]["metrics"]["tpot_s"] > 0
    # a larger batch: more tokens/s, and a longer decode step (same weights read, more KV and compute)
    assert bigger.to_pandas()["tokens_per_s"].iloc[0] > df["tokens_per_s"].iloc[0]
    assert ns["decode_by_device"].sum(axis=1).iloc[0] == pytest.approx(df["decode_step/time_s"].iloc[0], rel=1e-9)
    r = ns["ratios"].set_index("system")
    assert r.loc["dgx_h100", "baseline"] == "dgx_a100" and r.loc["dgx_h100", "throughput_ratio"] > 1  # H100 beats A100
    assert r.loc["dgx_a100", "status"] == "is_baseline" and r.loc["dgx_h100", "status"] == "ok"
    t = ns["table"]
    assert t["scenario.batch_size"].tolist() == [1, 8] and t["tokens_per_s"].is_monotonic_increasing
    assert len(ns["requests"]) == 20 and 0 < ns["p50"] == pytest.approx(ns["requests"]["ttft_s"].median())
    m = ns["srv"].metrics["h100_x1"]
    assert m["requests_count"] == 20 and 0 <= m["slo_attainment_ratio"] <= 1 and m["ttft_p99_s"] >= m["ttft_p50_s"]
    assert attnsim.load(tmp_path / "serve_nb.h5").to_pandas().equals(ns["requests"])
    assert (tmp_path / "serve_nb.h5").is_file() and (tmp_path / "notebook.h5").is_file()
    assert ns["pim"].cycles > 0 and "act_pre" in out
    assert ns["message"] == "<dict>: scenarios.chat.batch_size: expected a positive integer, got -1"


def test_name_dict_path_match_the_cli_results_file(tmp_path):
    exp_file = tmp_path / "tiny.yaml"
    exp_file.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "cli"
    assert main(["run", str(exp_file), "--out", str(out), "--no-figures"]) == 0
    loaded = attnsim.load(out / "results.h5")
    cli = loaded.to_pandas()[METRICS]
    assert attnsim.load(loaded.save(tmp_path / "copy.h5")).to_pandas()[METRICS].equals(cli)  # saved again as is
    for exp in (TINY, exp_file):
        assert attnsim.run(exp).to_pandas()[METRICS].equals(cli)
    # a built-in name with the CLI's --set strings = the same dict given as sets=
    sets = {
        "experiment.systems": ["h100_x1"],
        "experiment.models": ["llama2-7b"],
        "experiment.baseline": None,
        "experiment.scenarios": TINY["scenarios"],
        "experiment.generation": TINY["generation"],
    }
    assert attnsim.run("default", sets=sets).to_pandas()[METRICS].equals(cli)
    strings = [f"{k}={attnsim.api._set_text(k, v)}" for k, v in sets.items()]  # the --set text of each value
    assert [attnsim.core.config.parse_set(x)[1] for x in strings] == list(sets.values())


def test_sets_take_effect_and_bad_input_names_the_key(tmp_path):
    base = attnsim.run(TINY)
    fewer = attnsim.run(TINY, sets={"models.llama2-7b.num_layers": 16})
    assert fewer[0]["metrics"]["tpot_s"] < base[0]["metrics"]["tpot_s"]  # half the layers: a faster step
    other = attnsim.run(TINY, models="llama3-8b")  # = experiment.models=[llama3-8b]
    assert other[0]["model"] == "llama3-8b" and other[0]["metrics"]["tpot_s"] != base[0]["metrics"]["tpot_s"]
    with pytest.raises(
        attnsim.ConfigError, match=r"^<dict>: baseline 'dgx_h100' is not one of the experiment's systems \(h100_x1\)"
    ):
        attnsim.run({**TINY, "systems": ["h100_x1", "dgx_h100"], "baseline": "dgx_h100"}, systems=["h100_x1"])
    cases = [
        ({"models.llama2-7b.num_layers": "many"}, "models/llama2-7b.yaml", "num_layers"),  # the model's file
        ({"scenarios.chat.batch_size": 2.5}, "<dict>", "scenarios.chat.batch_size"),  # the experiment's
        ({"scenarios.nope.batch_size": 1}, "--set", "scenarios.nope"),
        ({"models.llama2-7b.num_layers": float("nan")}, "models/llama2-7b.yaml", "num_layers"),
    ]
    for sets, file, key in cases:
        with pytest.raises(attnsim.ConfigError) as ei:
            attnsim.run(TINY, sets=sets)
        assert ei.value.key == key and str(ei.value).startswith(f"{file}: {key}: ") and "\n" not in str(ei.value)
    with pytest.raises(attnsim.ConfigError, match="^<dict>: systems: expected a list of names"):
        attnsim.run({**TINY, "systems": "h100_x1"})
    with pytest.raises(attnsim.ConfigError, match="^experiment: expected a built-in experiment name"):
        attnsim.run(42)
    with pytest.raises(attnsim.ConfigError, match="save: expected a file path, got a directory"):
        base.save(tmp_path)
    assert not list(tmp_path.iterdir())


def test_import_attnsim_is_light():
    code = (
        "import sys, attnsim; assert callable(attnsim.run); "
        "print(sorted(m for m in ('numba', 'pandas', 'h5py', 'attnsim.api') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['attnsim.api']"  # attnsim.run loads the API module, not the simulator
