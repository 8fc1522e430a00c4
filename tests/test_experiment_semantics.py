"""Settings take effect or are refused (issue 10): pipeline parallelism, HF model names, context
windows (rope_scaling), hardware referenced by path, mapper options, metrics of runs that did not
complete, and size limits (workloads.limits). Errors exit 2, name file and key, and write nothing."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from attnsim.cli import main
from attnsim.core.config import CONFIG_ROOT, ConfigError, validate
from attnsim.mapper.base import policies, validate_options
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import METRIC_KEYS
from attnsim.studies.serve.requests import TraceSpec, read_trace_file
from attnsim.workloads.hf import model_from_hf_config
from attnsim.workloads.limits import MAX_BATCH, MAX_EXACT_DECODE_STEPS, MAX_LAYERS, MAX_REQUESTS, MAX_TOKENS
from attnsim.workloads.scenario import Scenario

HF_DIR = Path(__file__).parent / "data" / "hf_configs"
TINY = {
    "name": "tiny",
    "num_layers": 2,
    "hidden_size": 64,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 4096,
}
FAST = {"mode": "sampled", "samples": 2}


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _experiment(tmp_path, models=("tiny.yaml",), systems=("h100_x1",), scenario=None, **extra) -> Path:
    if not (tmp_path / "tiny.yaml").exists():
        _write(tmp_path / "tiny.yaml", TINY)
    exp = {
        "name": "semantics",
        "systems": list(systems),
        "models": list(models),
        "scenarios": {
            "s": scenario
            or (
                {"prompt_len": 64, "output_len": 4}
                if "serving" in extra  # no batch
                else {"batch_size": 2, "prompt_len": 64, "output_len": 4}
            )
        },
        "generation": FAST,
        **extra,
    }
    return _write(tmp_path / "exp.yaml", exp)


def _refused(capsys, tmp_path, args, *words):
    """``attnsim run`` exits 2 with one error line holding every word, and writes no results."""
    out = tmp_path / "out"
    rc = main(["run", *map(str, args), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("error: ") and "\n" not in err
    for w in words:
        assert str(w) in err, (w, err)
    assert not out.exists()
    return err


def _runs(capsys, args) -> list[dict]:
    rc = main(["run", "--json", "--no-write", *map(str, args)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out)["runs"]


def _system(tmp_path, name="mine", **over) -> Path:
    sysd = yaml.safe_load((CONFIG_ROOT / "systems" / "h100_x1.yaml").read_text())
    sysd.update(name=name, **over)
    return _write(tmp_path / f"{name}.yaml", sysd)


# ---------------------------------------------------------------- pipeline parallelism


def test_pp_without_a_link_is_refused(tmp_path, capsys):
    s = _system(tmp_path, devices={"gpu": {"hardware": "h100_sxm", "count": 2}}, parallelism={"tp": 1, "pp": 2})
    exp = _experiment(tmp_path, systems=[str(s)])
    _refused(
        capsys, tmp_path, [exp], "mine.yaml: parallelism.pp_link:", "pipeline stages on different devices need a link"
    )


# ---------------------------------------------------------------- HF config.json names


def _hf(tmp_path, folder: str, src: str, name_or_path=None) -> Path:
    cfg = json.loads((HF_DIR / src).read_text())
    cfg.pop("_name_or_path", None)
    if name_or_path is not None:
        cfg["_name_or_path"] = name_or_path
    return _write(tmp_path / folder / "config.json", json.dumps(cfg))


def test_two_hf_configs_keep_their_names(tmp_path, capsys):
    a = _hf(tmp_path, "a", "Llama-2-7b-hf.json", "meta-llama/Llama 2 7b?")  # sanitised
    b = _hf(tmp_path, "mistral-folder", "Mistral-7B-v0.1.json")  # folder name
    exp = _experiment(tmp_path, models=[str(a), str(b)], scenario={"batch_size": 1, "prompt_len": 32, "output_len": 2})
    runs = _runs(
        capsys, [exp, "--set", "models.Llama-2-7b.num_layers=2", "--set", "models.mistral-folder.num_layers=2"]
    )
    assert [r["model"] for r in runs] == ["Llama-2-7b", "mistral-folder"]
    assert runs[0]["metrics"]["ttft_s"] != runs[1]["metrics"]["ttft_s"]


def test_hf_configs_with_one_name_are_refused(tmp_path, capsys):
    a = _hf(tmp_path, "a", "Llama-2-7b-hf.json", "org/same")
    b = _hf(tmp_path, "b", "Mistral-7B-v0.1.json", "other/same")
    exp = _experiment(tmp_path, models=[str(a), str(b)])
    _refused(capsys, tmp_path, [exp], "exp.yaml: models.1:", "named 'same'", "models.0")


def test_same_model_or_system_twice_is_refused(tmp_path, capsys):
    exp = _experiment(tmp_path, models=["tiny.yaml", "tiny.yaml"])
    _refused(capsys, tmp_path, [exp], "exp.yaml: models.1:", "expected each model once")
    exp = _experiment(tmp_path, systems=["h100_x1", str(_system(tmp_path, "h100_x1"))])
    _refused(capsys, tmp_path, [exp], "exp.yaml: systems.1:", "expected each system once")


# ---------------------------------------------------------------- context window


def test_prompt_beyond_max_position_embeddings_is_refused(tmp_path, capsys):
    exp = _experiment(tmp_path, models=["llama3-8b"], scenario={"prompt_len": 32768, "output_len": 128})
    _refused(
        capsys,
        tmp_path,
        [exp],
        "exp.yaml: scenarios.s.prompt_len:",
        "<= 8192",
        "llama3-8b",
        "32768 + 128 = 32896",
        "beyond_max_position: allow",
    )
    # a length distribution's longest draw counts, and its key is named
    dist = {"dist": "uniform", "low": 3000, "high": 4200, "seed": 1}
    exp = _experiment(tmp_path, scenario={"batch_size": 16, "context_lens": dist, "output_len": 2})
    assert validate(Scenario, {"batch_size": 16, "context_lens": dist}).prompt_lens().max() > 4094
    _refused(capsys, tmp_path, [exp], "scenarios.s.context_lens:", "<= 4096")


def test_beyond_max_position_allow_runs_and_says_so(tmp_path, capsys):
    sc = {"batch_size": 1, "prompt_len": 4096, "output_len": 4}
    exp = _experiment(tmp_path, scenario={**sc, "beyond_max_position": "allow"})
    (run,) = _runs(capsys, [exp])
    assert run["status"] == "ok" and "4100 tokens exceed model tiny's 4096 positions" in run["notes"][0]
    exp = _experiment(tmp_path, scenario={**sc, "prompt_len": 4092})  # 4092 + 4 = 4096 fits (vLLM's max_model_len rule)
    assert "notes" not in _runs(capsys, [exp])[0]


def test_rope_scaling_extends_the_window_and_is_noted(tmp_path, capsys):
    _write(tmp_path / "tiny.yaml", {**TINY, "rope_scaling": {"type": "yarn", "factor": 4.0}})
    exp = _experiment(tmp_path, scenario={"batch_size": 1, "prompt_len": 16000, "output_len": 4})
    (run,) = _runs(capsys, [exp])
    assert "rope_scaling yarn x4 applied" in run["notes"][0] and "16384" in run["notes"][0]
    exp = _experiment(tmp_path, scenario={"batch_size": 1, "prompt_len": 16384, "output_len": 4})
    _refused(capsys, tmp_path, [exp], "scenarios.s.prompt_len:", "<= 16384", "16384 + 4 = 16388")


def test_hf_rope_scaling_is_read():
    m = model_from_hf_config(HF_DIR / "Llama-3.1-405B.json")
    assert (m.rope_scaling.type, m.rope_scaling.factor, m.rope_scaling.original_max_position_embeddings) == (
        "llama3",
        8.0,
        8192,
    )
    assert m.max_positions == 131072
    ds = model_from_hf_config(HF_DIR / "DeepSeek-V2-Lite.json")
    assert ds.rope_scaling.type == "yarn" and ds.max_positions == 40 * 4096
    assert model_from_hf_config(HF_DIR / "Llama-2-7b-hf.json").rope_scaling is None


# ---------------------------------------------------------------- hardware referenced by path


@pytest.mark.parametrize("absolute", [False, True])
def test_hardware_by_path(tmp_path, capsys, absolute):
    p = _write(tmp_path / "hw" / "my_gpu.yaml", (CONFIG_ROOT / "hardware" / "h100_sxm.yaml").read_text())
    ref = str(p) if absolute else "./hw/my_gpu.yaml"
    s = _system(tmp_path, devices={"gpu": {"hardware": ref, "count": 1}})
    exp = _experiment(tmp_path, systems=[str(s), "h100_x1"])
    runs = _runs(capsys, [exp])
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert runs[0]["metrics"]["tpot_s"] == pytest.approx(runs[1]["metrics"]["tpot_s"])  # same device data


def test_hardware_path_is_relative_to_the_system_file(tmp_path, capsys):
    _write(tmp_path / "sys" / "gpu.yaml", (CONFIG_ROOT / "hardware" / "h100_sxm.yaml").read_text())
    sysd = yaml.safe_load((CONFIG_ROOT / "systems" / "h100_x1.yaml").read_text())
    sysd.update(name="mine", devices={"gpu": {"hardware": "./gpu.yaml", "count": 1}})
    s = _write(tmp_path / "sys" / "mine.yaml", sysd)
    exp = _experiment(tmp_path / "exp", systems=[str(s)])
    (run,) = _runs(capsys, [exp])
    assert run["status"] == "ok"


def test_two_hardware_files_with_one_stem_are_refused(tmp_path, capsys):
    src = (CONFIG_ROOT / "hardware" / "h100_sxm.yaml").read_text()
    a = _write(tmp_path / "a" / "gpu.yaml", src)
    b = _write(tmp_path / "b" / "gpu.yaml", src.replace("H100-SXM", "H100-other"))
    s1 = _system(tmp_path, "s1", devices={"gpu": {"hardware": str(a), "count": 1}})
    s2 = _system(tmp_path, "s2", devices={"gpu": {"hardware": str(b), "count": 1}})
    exp = _experiment(tmp_path, systems=[str(s1), str(s2)])
    _refused(capsys, tmp_path, [exp], "devices.gpu.hardware:", "expected one hardware file per name", "'gpu'")


def test_set_to_unloaded_hardware_is_refused(tmp_path, capsys):
    exp = _experiment(tmp_path)
    _refused(
        capsys,
        tmp_path,
        [exp, "--set", "systems.h100_x1.devices.gpu.hardware=a100_80gb_sxm"],
        "systems/h100_x1.yaml: devices.gpu.hardware:",
        "expected hardware loaded with the experiment",
        "got 'a100_80gb_sxm'",
    )


# ---------------------------------------------------------------- mapper options


def test_gpu_only_refuses_unknown_options(tmp_path, capsys):
    s = _system(tmp_path, mapper={"policy": "gpu_only", "options": {"pipelin": True}})
    exp = _experiment(tmp_path, systems=[str(s)])
    _refused(
        capsys,
        tmp_path,
        [exp],
        "mine.yaml: mapper.options:",
        "unknown option(s) pipelin for policy gpu_only",
        "known: none",
    )


@pytest.mark.parametrize("policy", policies())
def test_every_policy_validates_options_the_same_way(policy):
    with pytest.raises(ConfigError) as ei:
        validate_options(policy, {"no_such_option": 1}, file="sys.yaml")
    assert str(ei.value).startswith(f"sys.yaml: mapper.options: unknown option(s) no_such_option for policy {policy}")
    assert isinstance(validate_options(policy, {}, file="sys.yaml"), dict)


# ---------------------------------------------------------------- metrics of runs that did not complete


def test_does_not_fit_has_every_metric_key(tmp_path, capsys):
    exp = _experiment(
        tmp_path, models=["tiny.yaml", "llama2-70b"], scenario={"batch_size": 1, "prompt_len": 64, "output_len": 2}
    )
    ok, big = _runs(capsys, [exp])
    assert (ok["status"], big["status"]) == ("ok", "does_not_fit")
    assert set(ok["metrics"]) == set(big["metrics"]) == set(METRIC_KEYS)
    assert all(v is None for k, v in big["metrics"].items() if k != "fits") and big["metrics"]["fits"] is False
    rc = main(["run", str(exp), "--out", str(tmp_path / "o"), "--no-figures"])  # tables and the results file take it
    assert rc == 0 and (tmp_path / "o" / "results.h5").is_file()
    capsys.readouterr()


# ---------------------------------------------------------------- sizes (workloads.limits)


@pytest.mark.parametrize(
    "key,value,limit",
    [
        ("models.tiny.num_layers", 10**9, MAX_LAYERS),
        ("models.tiny.max_position_embeddings", 10**12, MAX_TOKENS),
        ("scenarios.s.batch_size", 10**9, MAX_BATCH),
        ("scenarios.s.prompt_len", 10**9, MAX_TOKENS),
        ("scenarios.s.output_len", 10**9, MAX_TOKENS),
        ("scenarios.s.context_lens.mean", 1e30, MAX_TOKENS),
    ],
)
def test_sizes_beyond_the_limits_are_refused(tmp_path, capsys, key, value, limit):
    exp = _experiment(
        tmp_path,
        scenario={
            "batch_size": 2,
            "prompt_len": 64,
            "output_len": 4,
            "context_lens": {"dist": "normal", "mean": 64, "std": 8},
        },
    )
    where = "tiny.yaml" if key.startswith("models") else "exp.yaml"
    _refused(
        capsys,
        tmp_path,
        [exp, "--set", f"{key}={value}"],
        f"{where}: {key.split('.', 2)[-1] if where == 'tiny.yaml' else key}:",
        f"<= {limit}",
        "got",
    )


def test_exact_decode_steps_are_bounded(tmp_path, capsys):
    exp = _experiment(
        tmp_path,
        scenario={"prompt_len": 64, "output_len": MAX_EXACT_DECODE_STEPS + 1, "beyond_max_position": "allow"},
        generation={"mode": "exact"},
    )
    _refused(
        capsys,
        tmp_path,
        [exp],
        "scenarios.s.output_len:",
        f"at most {MAX_EXACT_DECODE_STEPS} decode steps",
        "use mode: sampled",
        f"got {MAX_EXACT_DECODE_STEPS + 1}",
    )


def test_length_draws_never_wrap():
    sc = validate(
        Scenario,
        {"batch_size": 4096, "context_lens": {"dist": "normal", "mean": MAX_TOKENS, "std": MAX_TOKENS, "seed": 3}},
    )
    x = sc.prompt_lens()
    assert x.min() >= 1 and x.max() == MAX_TOKENS  # the tail is clipped at the limit, not wrapped to 1
    assert np.sum(x == MAX_TOKENS) > 1000 and np.sum(x == 1) > 100  # ~half above, ~16 % below 0


def test_serving_sizes_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=rf"num_requests: expected a value <= {MAX_REQUESTS}, got 1000000000"):
        validate(TraceSpec, {"num_requests": 10**9}, file="e.yaml", prefix="serving.trace")
    with pytest.raises(ConfigError, match=rf"serving.trace.prompt.mean: expected a value <= {MAX_TOKENS}"):
        validate(TraceSpec, {"prompt": {"dist": "fixed", "mean": 1e30}}, file="e.yaml", prefix="serving.trace")
    f = _write(tmp_path / "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,10\n1,1e30,10\n")
    with pytest.raises(
        ConfigError, match=rf"t.csv: line 3: prompt_tokens: expected an integer <= {MAX_TOKENS}, got '1e30'"
    ):
        read_trace_file(f)


def test_serving_num_requests_refused_by_cli(tmp_path, capsys):
    exp = _experiment(tmp_path, serving={"trace": {"num_requests": 10**9}})
    rc = main(["serve", str(exp), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "exp.yaml: serving.trace.num_requests: expected a value <= 1048576, got 1000000000" in err
    assert not (tmp_path / "out").exists()


def test_built_in_experiments_still_load():
    for name in ("default", "attacc_gpt3_175b", "systems_compare", "reliability_tiering"):
        exp = load_experiment(name)
        assert exp.scenarios


def test_serving_requests_beyond_the_window(tmp_path, capsys):
    trace = {
        "num_requests": 4,
        "prompt": {"dist": "uniform", "low": 100, "high": 5000},
        "output": {"dist": "fixed", "mean": 8},
    }
    exp = _experiment(tmp_path, serving={"trace": trace})
    rc = main(["serve", str(exp), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "exp.yaml: serving.trace: expected prompt + output tokens <= 4096" in err and "+ 8 = " in err
    assert not (tmp_path / "out").exists()
    exp = _experiment(tmp_path, serving={"trace": trace}, scenario={"beyond_max_position": "allow"})
    rc = main(["serve", str(exp), "--json", "--no-write"])
    (doc,) = json.loads(capsys.readouterr().out)["runs"]
    assert rc == 0 and doc["status"] == "ok" and "positions are extrapolated" in doc["notes"][0]


@pytest.mark.parametrize("replications", [1, 2])
def test_serving_runs_that_did_not_complete_have_every_metric_key(tmp_path, capsys, replications):
    scen = {
        "ok": {"prompt_len": 64, "output_len": 4},
        "huge": {"prompt_len": 600000, "output_len": 4, "beyond_max_position": "allow"},
    }  # KV never fits
    exp = _write(
        tmp_path / "serve.yaml",
        {
            "name": "serve_keys",
            "systems": ["h100_x1"],
            "models": ["llama3-8b"],
            "scenarios": scen,
            "serving": {
                "trace": {"num_requests": 3, "rate_per_s": 10},
                "replications": replications,
                "disaggregation": [{"prefill": "h100_x1", "decode": "h100_x1", "link": "nvlink4"}],
            },
        },
    )
    rc = main(["serve", str(exp), "--json", "--no-write"])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert rc == 0 and [r["status"] for r in runs] == ["ok", "ok", "cannot_serve", "cannot_serve"]
    for good, bad in ((runs[0], runs[2]), (runs[1], runs[3])):  # colocated, disaggregated
        assert set(bad["metrics"]) == set(good["metrics"]) and all(v is None for v in bad["metrics"].values())
    assert set(runs[1]["metrics"]) - set(runs[0]["metrics"]) == {"kv_transfer_s_mean", "link_energy_j"}


def test_sweep_model_values_with_one_name_are_refused(tmp_path):
    from attnsim.studies.sweep.spec import load_sweep

    a = _hf(tmp_path, "a", "Llama-2-7b-hf.json")
    b = _hf(tmp_path, "b", "Mistral-7B-v0.1.json")  # both files are named config.json
    other = _write(tmp_path / "m" / "llama2-7b.yaml", {**TINY, "name": "llama2-7b"})  # like the built-in
    base = _experiment(tmp_path, models=["llama2-7b"])
    for values in ([str(a), str(b)], ["llama2-7b", str(other)]):
        sweep = _write(
            tmp_path / "sw.yaml", {"name": "sw", "base": str(base), "parameters": [{"grid": {"model": values}}]}
        )
        with pytest.raises(
            ConfigError, match=r"sw.yaml: parameters.model: expected one model file per name, got .* named"
        ):
            load_sweep(sweep)
    sweep = _write(
        tmp_path / "sw.yaml", {"name": "sw", "base": str(base), "parameters": [{"grid": {"model": [str(a)]}}]}
    )
    assert load_sweep(sweep).n_points == 1


def test_sweep_points_that_did_not_run_have_every_metric_key(tmp_path):
    from attnsim.studies.sweep.executors import run_sweep
    from attnsim.studies.sweep.spec import load_sweep
    from attnsim.studies.sweep.store import open_store

    base = _experiment(
        tmp_path, models=["tiny.yaml", "llama2-70b"], scenario={"batch_size": 1, "prompt_len": 64, "output_len": 2}
    )
    sweep = _write(
        tmp_path / "sw.yaml",
        {"name": "sw", "base": str(base), "parameters": [{"grid": {"scenario.batch_size": [1, 10**9]}}]},
    )
    run_sweep(load_sweep(sweep), tmp_path / "s.h5", workers=1, progress=False, log=lambda s: None)
    docs = {(d["model"], d["scenario"]["batch_size"]): d for d in open_store(tmp_path / "s.h5").iter_docs()}
    assert {k: d["status"] for k, d in docs.items()} == {
        ("tiny", 1): "ok",
        ("llama2-70b", 1): "does_not_fit",
        ("tiny", 10**9): "invalid",
        ("llama2-70b", 10**9): "invalid",
    }
    for d in docs.values():
        assert set(d["metrics"]) == set(METRIC_KEYS)


# ---------------------------------------------------------------- system structure and references


@pytest.mark.parametrize(
    "over,words",
    [
        ({"devices": {}}, ("mine.yaml: devices: expected at least one device pool",)),
        (
            {"links": {"nv": {"hardware": "nvlink4", "connects": ["gpu", "pim"]}}},
            ("mine.yaml: links: link 'nv' connects unknown device role 'pim'",),
        ),
        (
            {"devices": {"gpu": {"hardware": "nvlink4", "count": 1}}},
            (
                "mine.yaml: devices.gpu.hardware: expected a device (kind cxl_controller, flash, gpu, host, memory, "
                "npu, pim), got 'nvlink4' of kind 'link'",
            ),
        ),
        (
            {"links": {"nv": {"hardware": "h100_sxm", "connects": ["gpu", "gpu"]}}},
            ("mine.yaml: links.nv.hardware: expected a hardware config of kind link, got 'h100_sxm' of kind 'gpu'",),
        ),
        (
            {
                "devices": {
                    "gpu": {"hardware": "h100_sxm", "count": 1},
                    "pool": {"hardware": "rdma_mooncake_pool", "count": 1},
                }
            },
            (
                "mine.yaml: devices.pool.hardware: expected a device",
                "got 'rdma_mooncake_pool' of kind 'kv_pool' (a kv_pool is a serving tier: serving.kv_pool.hardware)",
            ),
        ),
        (
            {
                "mapper": {"policy": "gpu_only", "options": {}},
                "devices": {"gpu": {"hardware": "hbm3_6400", "count": 1}},
            },
            ("devices.gpu.hardware:", "of kind 'dram'"),
        ),
    ],
)
def test_system_structure_errors_name_the_key(tmp_path, capsys, over, words):
    exp = _experiment(tmp_path, systems=[str(_system(tmp_path, **over))])
    _refused(capsys, tmp_path, [exp], *words)


@pytest.mark.parametrize(
    "option,value,words",
    [
        ("pipeline", "often", "mapper.options.pipeline: expected true or false, got 'often'"),
        ("subbatches", 2.5, "mapper.options.subbatches: expected an integer"),
        ("fc_on_pim_max_batch", -1, "mapper.options.fc_on_pim_max_batch: expected an integer in [0, "),
    ],
)
def test_option_values_have_the_default_type(option, value, words):
    with pytest.raises(ConfigError) as ei:
        validate_options("attacc", {option: value}, file="sys.yaml")
    assert str(ei.value).startswith("sys.yaml: " + words)
    with pytest.raises(ConfigError, match="mapper.options.topk_fraction: expected a finite number, got inf"):
        validate_options("offload", {"topk_fraction": float("inf")}, file="sys.yaml")
    assert validate_options("offload", {"topk_fraction": 1})["topk_fraction"] == 1.0


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("scheduler.swap_link", "no_such_link", "serving.scheduler.swap_link: unknown hardware config 'no_such_link'"),
        ("scheduler.swap_link", "h100_sxm", "serving.scheduler.swap_link: expected a hardware config of kind link"),
        ("kv.locality_dram", "no_such_dram", "serving.kv.locality_dram: unknown hardware config 'no_such_dram'"),
        ("kv.locality_dram", "nvlink4", "serving.kv.locality_dram: expected a hardware config of kind dram"),
    ],
)
def test_serving_references_are_checked_even_when_unused(tmp_path, capsys, key, value, words):
    sec, k = key.split(".")
    extra = {"preemption": "swap"} if k == "swap_link" else {}  # swap_link is read (and checked) with swap preemption
    exp = _experiment(tmp_path, serving={"trace": {"num_requests": 2}, sec: {k: value, **extra}})
    rc = main(["serve", str(exp), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"exp.yaml: {words}" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value", [("architectures", [{"a": 1}]), ("torch_dtype", ["float16"])])
def test_hf_odd_json_values_are_config_errors(tmp_path, field, value):
    cfg = json.loads((HF_DIR / "Llama-2-7b-hf.json").read_text())
    cfg[field] = value
    p = _write(tmp_path / "m.json", json.dumps(cfg))
    with pytest.raises(ConfigError, match=rf"m.json: {field}: "):
        model_from_hf_config(p)


@pytest.mark.parametrize(
    "schema,data,words",
    [
        (
            "attnsim.sim.experiment:GenerationSpec",
            {"mode": "exact", "samples": 5},
            "samples: not used with mode: exact",
        ),
        (
            "attnsim.studies.serve.kvpolicy:KVPolicySpec",
            {"kind": "streaming", "budget_tokens": 64},
            "budget_tokens: not used by kind: streaming",
        ),
        (
            "attnsim.studies.serve.kvpolicy:KVPolicySpec",
            {"kind": "none", "dense_layers": 2},
            "dense_layers: not used by kind: none",
        ),
        (
            "attnsim.studies.serve.kvpolicy:KVPolicySpec",
            {"kind": "h2o", "page_tokens": 8},
            "page_tokens: not used by kind: h2o",
        ),
        (
            "attnsim.studies.serve.spec:SchedulerSpec",
            {"swap_link": "pcie4_x16"},
            "swap_link: not used with preemption: recompute",
        ),
        ("attnsim.studies.serve.spec:KVSpec", {"reserve_tokens": 64}, "reserve_tokens: not used with layout: paged"),
        ("attnsim.studies.serve.requests:TraceSpec", {"file": "r.csv", "seed": 3}, "seed: not used with a trace file"),
        (
            "attnsim.studies.serve.requests:TraceSpec",
            {"prefix_tokens": 32},
            "prefix_tokens: not used without a trace file",
        ),
        ("attnsim.studies.serve.requests:TraceSpec", {"arrival": "gamma"}, "arrival: not used without rate_per_s"),
        (
            "attnsim.studies.serve.requests:TraceSpec",
            {"rate_per_s": 2, "cv": 2.0},
            "cv: not used with arrival: poisson",
        ),
    ],
)
def test_settings_the_chosen_mode_does_not_read_are_refused(schema, data, words):
    import importlib

    from attnsim.core.config import validate

    mod, name = schema.split(":")
    cls = getattr(importlib.import_module(mod), name)
    with pytest.raises(ConfigError) as ei:
        validate(cls, data, file="x.yaml")
    assert str(ei.value).startswith("x.yaml: " + words), str(ei.value)
    used = {k: v for k, v in data.items() if k not in words.split(":")[0]}
    validate(cls, used, file="x.yaml")  # the same settings without the unused one are fine


def test_attacc_subbatches_need_pipelining():
    from attnsim.mapper.base import validate_options

    with pytest.raises(ConfigError, match=r"sys.yaml: mapper.options.subbatches: not used unless pipeline: true"):
        validate_options("attacc", {"subbatches": 4}, file="sys.yaml")
    assert validate_options("attacc", {"pipeline": True, "subbatches": 4}, file="sys.yaml")["subbatches"] == 4
