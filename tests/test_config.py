"""Config loading: key-path errors, --set overrides, unknown keys, no partial results."""

from pathlib import Path

import pytest

from attnsim.cli import main
from attnsim.core.config import ConfigError, parse_set
from attnsim.sim.experiment import load_experiment

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _err(capsys):
    return capsys.readouterr().err


def test_default_experiment_loads_and_validates():
    exp = load_experiment()
    assert exp.spec.name == "default"
    assert set(exp.systems) == set(exp.spec.systems)
    assert exp.spec.baseline in exp.systems
    for sname, s in exp.systems.items():
        for role, pool in s.devices.items():
            assert pool.hardware in exp.tree.hardware


def test_set_override_changes_value_and_is_validated():
    exp = load_experiment(None, ["models.llama2-70b.num_layers=40", "scenarios.chat.batch_size=3"])
    assert exp.models["llama2-70b"].num_layers == 40
    assert exp.scenarios["chat"].batch_size == 3
    with pytest.raises(ConfigError) as ei:
        load_experiment(None, ["models.llama2-70b.num_layers=-4"])
    assert str(ei.value) == "models/llama2-70b.yaml: num_layers: expected a positive integer, got -4"


def test_system_count_error_names_file_and_key():
    with pytest.raises(ConfigError) as ei:
        load_experiment(None, ["systems.dgx_h100.devices.gpu.count=-2"])
    assert str(ei.value) == "systems/dgx_h100.yaml: devices.gpu.count: expected a positive integer, got -2"


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("nonsense", "expected KEY=VALUE"),
        ("bogus.x.y=1", "unknown section"),
        ("models.not-in-run.num_layers=2", "is not part of this experiment"),
        ("models.llama2-70b.num_layerz=2", "num_layerz: unknown key"),
        ("hardware.h100_sxm.hbm_bandwidth_gbps=fast", "hbm_bandwidth_gbps"),
        ("experiment.baseline=dgx_z", "baseline"),
    ],
)
def test_bad_set_values_give_clear_errors(item, fragment):
    with pytest.raises(ConfigError) as ei:
        load_experiment(None, [item])
    assert fragment in str(ei.value)


def test_unknown_key_in_file_is_rejected(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("name: e\nsystems: [dgx_a100]\nmodels: [llama2-7b]\nscenarios: {s: {batch_size: 1}}\ncolour: red\n")
    with pytest.raises(ConfigError) as ei:
        load_experiment(exp)
    assert str(ei.value).endswith("colour: unknown key")


def test_bad_yaml_names_line(tmp_path):
    exp = tmp_path / "bad.yaml"
    exp.write_text("name: e\nsystems: [dgx_a100\n")
    with pytest.raises(ConfigError) as ei:
        load_experiment(exp)
    assert "line" in str(ei.value)


def test_user_system_file_error_names_that_file(tmp_path):
    sysf = tmp_path / "mysys.yaml"
    sysf.write_text((CONFIGS / "systems" / "dgx_a100.yaml").read_text().replace("count: 8", "count: 0"))
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: e\nsystems: [{sysf}]\nmodels: [llama2-7b]\nscenarios: {{s: {{batch_size: 1}}}}\n")
    with pytest.raises(ConfigError) as ei:
        load_experiment(exp)
    assert str(ei.value).startswith(f"{sysf}: devices.gpu.count: expected a positive integer")


def test_parse_set_parses_yaml_values():
    assert parse_set("a.b=3") == (["a", "b"], 3)
    assert parse_set("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_set("a.b=fp8") == (["a", "b"], "fp8")


def test_cli_bad_config_exits_nonzero_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["run", "--set", "systems.dgx_h100.devices.gpu.count=-2", "--out", str(out)])
    assert rc == 2
    assert "systems/dgx_h100.yaml: devices.gpu.count: expected a positive integer, got -2" in _err(capsys)
    assert not out.exists()


def test_cli_unknown_experiment(tmp_path, capsys):
    rc = main(["run", "no_such_experiment", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "unknown experiments config 'no_such_experiment'" in _err(capsys)
    assert not (tmp_path / "o").exists()
