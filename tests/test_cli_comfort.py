"""CLI comfort: 'did you mean' for unknown keys / names / choices / subcommands, `attnsim list`,
`attnsim schema` (every shipped config validates against its exported JSON Schema), one number format."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from attnsim.cli import main
from attnsim.core.config import load_yaml

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _err(capsys, argv) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse usage errors (attnsim.cli.OneLineParser) exit 2 themselves
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    return err.strip()


def test_unknown_config_key_suggests_the_close_key(tmp_path, capsys):
    exp = tmp_path / "x.yaml"
    exp.write_text("name: x\nsystems: [dgx_h100]\nmodels: [llama2-7b]\nscenarios: {chat: {batch_sise: 4}}\n")
    assert (
        _err(capsys, ["run", str(exp), "--no-write"])
        == f"error: {exp}: scenarios.chat.batch_sise: unknown key (did you mean batch_size?)"
    )
    # nested schema fields, --set on a built-in file, a hardware family's own schema
    assert _err(capsys, ["run", "--no-write", "--set", "experiment.generation.mod=exact"]).endswith(
        "generation.mod: unknown key (did you mean mode?)"
    )
    assert _err(capsys, ["run", "--no-write", "--set", "systems.dgx_h100.devices.gpu.hardwar=h100_sxm"]).endswith(
        "devices.gpu.hardwar: unknown key (did you mean hardware?)"
    )
    assert (
        _err(capsys, ["run", "--no-write", "--set", "hardware.h100_sxm.hbm_bandwith_gbps=1"])
        == "error: hardware/h100_sxm.yaml: hbm_bandwith_gbps: unknown key (did you mean hbm_bandwidth_gbps?)"
    )
    # nothing close: no suggestion
    assert "did you mean" not in _err(capsys, ["run", "--no-write", "--set", "models.llama2-70b.zzzz=1"])


@pytest.mark.parametrize(
    "argv, want",
    [
        (
            ["run", "--no-write", "--set", "experiment.systems=[dgx_h10]"],
            "unknown systems config 'dgx_h10' (did you mean dgx_h100?)",
        ),
        (["run", "attacc_gpt3", "--no-write"], "(did you mean attacc_gpt3_175b?)"),
        (
            ["run", "--no-write", "--set", "systems.dgx_h10.name=x"],
            "not part of this experiment (did you mean dgx_h100?)",
        ),
        (["run", "--no-write", "--set", "modls.x.y=1"], "unknown section 'modls' (did you mean models?)"),
        (["run", "--no-write", "--set", "experiment.generation.mode=exat"], "got 'exat' (did you mean exact?)"),
        (
            ["run", "--no-write", "--set", "systems.dgx_h100.mapper.policy=gpu_onyl"],
            "got 'gpu_onyl' (did you mean gpu_only?)",
        ),
        (
            ["run", "--no-write", "--set", "systems.attacc_h100.mapper.options={pipelin: true}"],
            "unknown option(s) pipelin (did you mean pipeline?)",
        ),
        (["rnu"], "invalid choice: 'rnu' (did you mean run?)"),
        (["list", "sytems"], "invalid choice: 'sytems' (did you mean systems?)"),
        (["schema", "hardwre"], "got 'hardwre' (did you mean hardware?)"),
        (["validate", "--set", "reproductions/attac"], "(did you mean attacc?)"),
    ],
)
def test_unknown_names_suggest_the_close_name(capsys, argv, want):
    assert want in _err(capsys, argv)


def test_unknown_recipe_suggests(tmp_path, capsys):
    from attnsim.core.config import ConfigError
    from attnsim.plots import figure

    with pytest.raises(ConfigError, match=r"unknown recipe 'lattency_by_device' \(did you mean latency_by_device\?\)"):
        figure(None, "lattency_by_device")


def test_suggestion_helper():
    from attnsim.core.suggest import amend, close_matches, did_you_mean

    assert did_you_mean("dgx_h10", ["dgx_a100", "dgx_h100", "dgx_h200"]) == " (did you mean dgx_h100?)"
    assert did_you_mean("qwerty", ["dgx_a100"]) == ""
    assert close_matches("DGX_H100", ["dgx_h100"]) == ["dgx_h100"]  # a case slip
    assert (
        amend("x: expected one of split, replicated, got 'splt'")
        == "x: expected one of split, replicated, got 'splt' (did you mean split?)"
    )
    assert amend("expected one of 'exact' or 'sampled', got 'sampld'").endswith("(did you mean sampled?)")


# ---------------------------------------------------------------- attnsim list


@pytest.mark.parametrize("kind", ["systems", "models", "hardware", "experiments", "sweeps", "stacks"])
def test_list_covers_every_yaml_of_the_kind(capsys, kind):
    assert main(["list", kind, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == sorted(p.stem for p in (CONFIGS / kind).glob("*.yaml"))
    assert all(r["description"] and "\n" not in r["description"] and len(r["description"]) <= 110 for r in rows)
    assert main(["list", kind]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[2:]] == [r["name"] for r in rows]
    if kind == "hardware":  # the family column is the file's kind
        assert {r["name"]: r["kind"] for r in rows}["h100_sxm"] == "gpu"
    if kind == "models":  # the shape comes from the file's keys
        assert "80 layers, hidden 8192, 64/8 heads" in {r["name"]: r["description"] for r in rows}["llama2-70b"]


def test_list_recipes_and_reproductions(capsys):
    from attnsim.core.plot_options import DOC_RECIPES
    from attnsim.plots import RECIPES
    from attnsim.studies import reproduce

    # every recipe `attnsim plot` draws, the serve / plan ones too (README: `attnsim list recipes`; they were missing)
    assert main(["list", "recipes", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == [*RECIPES, *DOC_RECIPES]
    assert main(["list", "reproductions", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == [p.name for p in reproduce.folders()]


# ---------------------------------------------------------------- attnsim schema


def _yaml(path: Path):
    """A config file as data: the YAML 1.1 safe loader attnsim.core.config.parse_yaml also uses (the C one when
    built: same values, faster)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _kind_of(path: Path, data: dict) -> str:
    """The config kind of a file under configs/ (reproduction folders hold several kinds)."""
    folder = path.parent.name
    fixed = {
        "experiments": "experiment",
        "systems": "system",
        "models": "model",
        "hardware": "hardware",
        "sweeps": "sweep",
        "stacks": "stack",
    }
    if folder in fixed:
        return fixed[folder]
    if path.name == "reference.yaml":
        return "reproduction"
    return (
        "hardware"
        if "kind" in data
        else "system"
        if "devices" in data
        else "experiment"
        if "scenarios" in data
        else "model"
    )


def test_every_shipped_config_validates_against_its_exported_schema(tmp_path, capsys):
    from attnsim.cli.schema import kinds, schema_doc

    assert main(["schema", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == kinds() and {
        "experiment",
        "sweep",
        "system",
        "hardware",
        "model",
        "serving",
        "reliability",
        "stack",
        "reproduction",
        "hardware.gpu",
        "hardware.pim",
    } <= set(listed)
    out = tmp_path / "experiment.json"
    assert main(["schema", "experiment", "-o", str(out)]) == 0 and capsys.readouterr().out == f"schema: {out}\n"
    docs = {kind: schema_doc(kind) for kind in listed}
    assert json.loads(out.read_text()) == docs["experiment"]
    for kind in ("experiment", "hardware"):  # the documents are JSON Schemas (meta-schema check)
        jsonschema.Draft202012Validator.check_schema(docs[kind])
    validators = {kind: jsonschema.Draft202012Validator(d) for kind, d in docs.items()}
    files = [
        p
        for d in ("experiments", "systems", "models", "hardware", "sweeps", "stacks", "reproductions")
        for p in sorted((CONFIGS / d).rglob("*.yaml"))
    ]
    assert len(files) > 100
    for p in files:
        data = _yaml(p)
        kind = _kind_of(p, data)
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validators[kind].iter_errors(data)]
        assert not errors, f"{p} ({kind}): {errors[:3]}"
        if kind == "hardware":  # the family schema alone also accepts it
            assert validators[f"hardware.{data['kind']}"].is_valid(data)
    # sections used inside experiments
    exp = load_yaml(CONFIGS / "experiments" / "serve_paging.yaml")
    assert validators["serving"].is_valid(exp["serving"])
    # and the schemas do refuse: an unknown key, a wrong type, a hardware file of another family
    assert not validators["experiment"].is_valid(
        {"name": "x", "systems": ["a"], "models": ["b"], "scenarios": {"s": {"batch_sise": 1}}}
    )
    assert not validators["model"].is_valid(dict(load_yaml(CONFIGS / "models" / "llama2-7b.yaml"), num_layers="many"))
    gpu = load_yaml(CONFIGS / "hardware" / "h100_sxm.yaml")
    assert not validators["hardware.pim"].is_valid(gpu) and not validators["hardware"].is_valid(dict(gpu, kind="link"))


def test_schema_command_errors(tmp_path, capsys):
    assert "expected a kind" in _err(capsys, ["schema"])
    assert "--list alone" in _err(capsys, ["schema", "model", "--list"])
    missing = tmp_path / "no" / "x.json"
    assert _err(capsys, ["schema", "model", "-o", str(missing)]).endswith("does not exist")
    assert not missing.parent.exists()
    assert main(["schema", "stack"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "attnsim stack config"


# ---------------------------------------------------------------- one number format, aligned tables


def test_number_format_and_table_alignment():
    from attnsim.core.report import fmt_num, fmt_pct, table

    assert [fmt_num(v) for v in (1336.535, 14.4649, 0.47834, 5.0, 1e-5, 2.5e7, 0.0, 9.99996, None, float("nan"))] == [
        "1337",
        "14.46",
        "0.4783",
        "5.000",
        "1.000e-05",
        "2.500e+07",
        "0",
        "10.00",
        "-",
        "nan",
    ]
    assert fmt_num(16) == "16" and fmt_num(1.117, "x") == "1.117x" and fmt_pct(0.2207) == "22.1%"
    text = table([["dgx_h100", "14.46", "1.224x"], ["cxl_pnm", "41.53", "-"]], ["system", "TPOT ms", "vs base"])
    lines = text.splitlines()
    assert len({len(ln) for ln in lines}) == 1  # every line as wide: numbers right-aligned, names left-aligned
    assert lines[2].startswith("dgx_h100 ") and lines[3].endswith("  -") and lines[3].startswith("cxl_pnm ")
