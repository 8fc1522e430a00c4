"""attnsim run / show end to end on the built-in configs (GPU systems)."""

import json

import h5py
import numpy as np
import pytest

from attnsim.cli import main
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment

SMALL = ["--set", "experiment.generation.mode=sampled", "--set", "experiment.generation.samples=3"]


def _run_json(capsys, *args):
    rc = main(["run", "--json", *args])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


def test_run_json_contract_and_show_roundtrip(tmp_path, capsys):
    out = tmp_path / "res"
    gpus = ["--set", "experiment.systems=[dgx_a100, dgx_h100, dgx_h200]", "--set", "experiment.baseline=dgx_a100"]
    doc = _run_json(capsys, "--out", str(out), *SMALL, *gpus)
    runs = doc["runs"]
    assert [r["system"] for r in runs] == ["dgx_a100", "dgx_h100", "dgx_h200"]
    for r in runs:
        assert r["model"] == "llama2-70b" and r["scenario"]["name"] == "chat"
        for key in ("ttft_s", "tpot_s", "tokens_per_s", "energy_per_token_j", "bandwidth"):
            assert key in r["metrics"]
        for phase in ("prefill", "decode_step"):
            bd = r["breakdown"][phase]
            for table in (
                "time_s_by_op",
                "time_s_by_device",
                "energy_j_by_op",
                "energy_j_by_device",
                "energy_j_by_component",
            ):
                assert bd[table]
            # each breakdown explains its total (within 0.1 %)
            assert np.isclose(sum(bd["time_s_by_op"].values()), bd["time_s"], rtol=1e-3)
            assert np.isclose(sum(bd["time_s_by_device"].values()), bd["time_s"], rtol=1e-3)
            assert np.isclose(sum(bd["energy_j_by_component"].values()), bd["energy_j"], rtol=1e-3)
    base = runs[0]
    assert "vs_baseline" not in base
    for r in runs[1:]:
        vb = r["vs_baseline"]
        assert vb["baseline"] == "dgx_a100"
        assert np.isclose(vb["throughput_ratio"], r["metrics"]["tokens_per_s"] / base["metrics"]["tokens_per_s"])
        assert np.isclose(
            vb["energy_efficiency_ratio"], base["metrics"]["energy_per_token_j"] / r["metrics"]["energy_per_token_j"]
        )
    h5 = out / "results.h5"
    for fig in ("latency_by_device", "energy_breakdown"):  # summary figures beside the results
        assert (out / f"{fig}.pdf").read_bytes()[:4] == b"%PDF" and (out / f"{fig}.png").stat().st_size > 1000
    with h5py.File(h5) as f:
        assert "resolved_config" in f.attrs and f["runs"].shape == (3,)
        assert "llama2-70b" in f.attrs["resolved_config"]
    assert main(["show", str(h5), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["runs"] == runs


def test_same_config_same_bytes(tmp_path, capsys):
    a = _run_json(
        capsys,
        "--no-write",
        *SMALL,
        "--set",
        "scenarios.chat.context_lens={dist: lognormal, mean: 1500, std: 400, seed: 7}",
    )
    b = _run_json(
        capsys,
        "--no-write",
        *SMALL,
        "--set",
        "scenarios.chat.context_lens={dist: lognormal, mean: 1500, std: 400, seed: 7}",
    )
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_metric_definitions_hold():
    exp = load_experiment(None, ["experiment.systems=[dgx_h100]", "experiment.baseline=null"])
    (d,) = run_experiment(exp)
    m, sc = d["metrics"], d["scenario"]
    tokens = sc["batch_size"] * sc["output_len"]
    assert np.isclose(m["total_time_s"], m["ttft_s"] + m["tpot_s"] * (sc["output_len"] - 1))
    assert np.isclose(m["tokens_per_s"], tokens / m["total_time_s"])
    assert np.isclose(m["energy_per_token_j"], m["dynamic_energy_per_token_j"] + m["static_energy_per_token_j"])
    for bw in m["bandwidth"].values():
        assert 0 < bw["achieved_gbps"] <= bw["peak_gbps"]


def test_sampled_generation_matches_exact_within_half_percent():
    sets = ["experiment.systems=[dgx_h100]", "experiment.baseline=null", "scenarios.chat.output_len=256"]
    exact = run_experiment(load_experiment(None, sets))[0]["metrics"]
    sampled = run_experiment(
        load_experiment(None, sets + ["experiment.generation.mode=sampled", "experiment.generation.samples=5"])
    )[0]["metrics"]
    for k in ("tpot_s", "tokens_per_s", "energy_per_token_j"):
        assert abs(sampled[k] / exact[k] - 1) < 5e-3, k


def test_capacity_overflow_is_reported_not_run(capsys):
    doc = _run_json(
        capsys, "--no-write", *SMALL, "--set", "experiment.systems=[h100_x1]", "--set", "experiment.baseline=null"
    )
    (r,) = doc["runs"]
    assert r["status"] == "does_not_fit"
    assert "exceed its capacity" in r["error"] and "GB" in r["error"]


def test_trace_file_has_one_track_per_device(tmp_path, capsys):
    tr = tmp_path / "t.json"
    assert (
        main(
            [
                "run",
                "--no-write",
                "--trace",
                str(tr),
                *SMALL,
                "--set",
                "experiment.systems=[dgx_h100]",
                "--set",
                "experiment.baseline=null",
            ]
        )
        == 0
    )
    ev = json.loads(tr.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert {"gpu", "link"} <= tracks
    x = [e for e in ev if e["ph"] == "X" and e["pid"] == 1 and e["tid"] != 1]  # tid 1: the steps track
    assert sum(1 for e in x if e["name"] == "qkv_proj") == 80 * (1 + 3)  # one per layer: prefill + 3 costed steps
    ends = [e["ts"] + e["dur"] for e in x]
    assert all(b >= a - 1e-6 for a, b in zip(ends, ends[1:]))


@pytest.mark.parametrize("batch", [1, 4, 16])
def test_decode_is_memory_bound_and_flat_until_ridge(batch):
    """Decode TPOT barely moves from batch 1 to 16 (weight streaming dominates), prefill is compute-bound."""
    sets = [
        "experiment.systems=[dgx_h100]",
        "experiment.baseline=null",
        "scenarios.chat.prompt_len=128",
        "experiment.generation.mode=sampled",
        "experiment.generation.samples=2",
        "scenarios.chat.output_len=3",
    ]
    m1 = run_experiment(load_experiment(None, sets + ["scenarios.chat.batch_size=1"]))[0]["metrics"]
    mb = run_experiment(load_experiment(None, sets + [f"scenarios.chat.batch_size={batch}"]))[0]["metrics"]
    assert mb["tpot_s"] / m1["tpot_s"] < 1.25
    assert mb["decode_tokens_per_s"] / m1["decode_tokens_per_s"] > batch * 0.8


def test_usage_errors_are_one_line_and_numeric_options_are_bounded(capsys):
    from attnsim.cli import main

    for argv, needle in (
        (["sweep"], "required: sweep"),
        (["bogus"], "invalid choice"),
        (["sweep", "example", "--workers", "0"], "--workers"),
        (["sweep", "example", "--checkpoint-s", "nan"], "finite"),
        (["sweep", "example", "--checkpoint-s", "-5"], "--checkpoint-s"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: attnsim") and needle in err[0], err
