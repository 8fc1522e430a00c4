"""attnsim run with a reliability section: errors, accuracy proxy, SLO, and refresh's two effects."""
import json

import pytest

from attnsim.cli import main
from attnsim.config import ConfigError
from attnsim.experiment import load_experiment
from attnsim.runner import run_experiment

FAST = ["experiment.generation.samples=2", "scenarios.jedec.output_len=16", "scenarios.relaxed_1s.output_len=16",
        "scenarios.relaxed_20s.output_len=16"]
REL_KEYS = {"silent_errors_per_token", "detected_errors_per_token", "accuracy_proxy", "slo_met",
            "kv_residency_s", "refresh_interval_ms"}


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
    # soft-error rate 0 and refresh at the JEDEC 64 ms (retention BER 0 there): every error rate is zero
    zero = ["reliability.tiers.cxl.errors.lambda_soft_per_bit_h=0", "reliability.tiers.hbm.errors.lambda_soft_per_bit_h=0"]
    sets = ["experiment.scenarios={s: {batch_size: 1, prompt_len: 1024, output_len: 8, kv_dtype: bf16}}",
            "experiment.generation.samples=2"]
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
