"""attnsim run with a reliability section: errors, accuracy proxy, SLO, and refresh's two effects."""

import json

import pytest

from attnsim.cli import main
from attnsim.core.config import ConfigError
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment

FAST = [
    "experiment.generation.samples=2",
    "scenarios.jedec.output_len=16",
    "scenarios.relaxed_1s.output_len=16",
    "scenarios.relaxed_20s.output_len=16",
]
REL_KEYS = {
    "storage_plan",
    "silent_errors_per_token",
    "detected_errors_per_token",
    "accuracy_proxy",
    "slo_met",
    "kv_residency_s",
    "refresh_interval_ms",
    "due_recompute_time_per_token_s",
}


@pytest.fixture(scope="module")
def docs():
    return {d["scenario"]["name"]: d for d in run_experiment(load_experiment("reliability_tiering", FAST))}


def test_json_has_reliability_metrics(capsys):
    assert main(["run", "reliability_tiering", "--json", "--no-write", *sum((["--set", s] for s in FAST), [])]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    for r in runs:
        assert REL_KEYS <= set(r["metrics"])


def test_relaxed_refresh_saves_refresh_energy_and_raises_errors(docs):
    e = {n: d["breakdown"]["decode_step"]["energy_j_by_component"]["dram_refresh"] for n, d in docs.items()}
    silent = {n: d["metrics"]["silent_errors_per_token"] for n, d in docs.items()}
    assert e["relaxed_1s"] < 0.7 * e["jedec"] and e["relaxed_20s"] < e["relaxed_1s"]
    assert silent["jedec"] < silent["relaxed_1s"] < silent["relaxed_20s"]
    assert docs["jedec"]["metrics"]["slo_met"] and docs["relaxed_1s"]["metrics"]["slo_met"]
    assert not docs["relaxed_20s"]["metrics"]["slo_met"]
    assert docs["relaxed_20s"]["metrics"]["accuracy_proxy"] > 0.05 >= docs["relaxed_1s"]["metrics"]["accuracy_proxy"]


def test_zero_error_rates_equal_error_free_simulation_bit_for_bit():
    # soft-error rate 0 and refresh at the JEDEC 64 ms (retention BER 0 there): every error rate is zero;
    # no ECC, so the storage itself has no overhead either
    zero = [
        "reliability.tiers.cxl.errors.lambda_soft_per_bit_h=0",
        "reliability.tiers.hbm.errors.lambda_soft_per_bit_h=0",
        "reliability.tiers.cxl.ecc.high=none",
    ]
    sets = [
        "experiment.scenarios={s: {batch_size: 1, prompt_len: 1024, output_len: 8, kv_dtype: bf16}}",
        "experiment.generation.samples=2",
    ]
    with_rel = run_experiment(load_experiment("reliability_tiering", sets + [f"experiment.{z}" for z in zero]))[0]
    without = run_experiment(load_experiment("reliability_tiering", sets + ["experiment.reliability=null"]))[0]
    assert with_rel["metrics"]["silent_errors_per_token"] == 0.0
    assert with_rel["metrics"]["detected_errors_per_token"] == 0.0
    assert with_rel["metrics"]["slo_met"]
    plain = {k: v for k, v in with_rel["metrics"].items() if k not in REL_KEYS}
    assert json.dumps(plain, sort_keys=True) == json.dumps(without["metrics"], sort_keys=True)
    assert json.dumps(with_rel["breakdown"], sort_keys=True) == json.dumps(without["breakdown"], sort_keys=True)


def test_bad_reliability_config_names_key():
    with pytest.raises(ConfigError) as ei:
        load_experiment("reliability_tiering", ["experiment.reliability.tiers.cxl.ecc.low=hamming99"])
    assert "experiments/reliability_tiering.yaml" in str(ei.value) and "reliability.tiers.cxl.ecc.low" in str(ei.value)
    with pytest.raises(ConfigError, match=r"reliability.role_tiers.pnm: expected one of hbm, cxl, got 'nowhere'"):
        load_experiment("reliability_tiering", ["experiment.reliability.role_tiers={pnm: nowhere}"])


def test_inline_ecc_costs_bandwidth_capacity_and_energy():
    """Two-level RS (REACH) inline in the CXL tier: KV traffic x 1/0.79, 4.9 pJ/B decode energy."""
    sets = [
        "experiment.scenarios={s: {batch_size: 4, prompt_len: 2048, output_len: 8, kv_dtype: bf16}}",
        "experiment.generation.samples=2",
    ]
    plain = run_experiment(
        load_experiment("reliability_tiering", sets + ["experiment.reliability.tiers.cxl.ecc={high: none, low: none}"])
    )[0]
    rs = run_experiment(
        load_experiment("reliability_tiering", sets + ["experiment.reliability.tiers.cxl.ecc={high: rs2, low: rs2}"])
    )[0]
    bd0, bd1 = plain["breakdown"]["decode_step"], rs["breakdown"]["decode_step"]
    assert bd0["energy_j_by_component"]["ecc"] == 0.0 and bd1["energy_j_by_component"]["ecc"] > 0
    # more KV bytes to stream (the PNM attention may stay compute-bound, so time does not shrink)
    assert bd1["time_s_by_op"]["attn_score"] >= bd0["time_s_by_op"]["attn_score"]
    assert bd1["energy_j_by_op"]["attn_score"] > 1.2 * bd0["energy_j_by_op"]["attn_score"]
    assert bd1["time_s_by_op"]["qkv_proj"] == bd0["time_s_by_op"]["qkv_proj"]  # weights untouched
    kv0 = plain["metrics"]["memory"]["pnm"]["kv_gb"]
    assert rs["metrics"]["memory"]["pnm"]["kv_gb"] == pytest.approx(kv0 * (288 * 34 / (256 * 32)), rel=1e-9)
    assert sum(bd1["energy_j_by_op"].values()) == pytest.approx(
        bd1["energy_j"] - bd1["energy_j_by_component"]["static"], rel=1e-9
    )
