"""Settings that were accepted and silently ignored or inconsistent on main (issue 31, "Silent or inconsistent"):
each now takes effect or is refused with one line."""

from __future__ import annotations

import json

import pytest

from attnsim.core.config import CONFIG_ROOT, ConfigError, load_yaml, validate


def _refused(fn, *words):
    with pytest.raises(ConfigError) as ei:
        fn()
    msg = str(ei.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_kv_pool_without_prefix_caching_refused():
    from attnsim.studies.serve.spec import ServingSpec

    pool = {"hardware": "mooncake_pool"}
    # the pool serves local prefix misses: without prefix caching nothing ever reads it (accepted on main)
    _refused(
        lambda: validate(ServingSpec, {"kv_pool": pool}, file="e.yaml", prefix="serving"),
        "e.yaml: serving.kv_pool: not used without kv.prefix_caching: true",
    )
    assert validate(ServingSpec, {"kv_pool": pool, "kv": {"prefix_caching": True}}).kv_pool.hardware == "mooncake_pool"


TINY = """name: tiny
systems: [dgx_a100]
models: [llama3-8b]
scenarios:
  one: {batch_size: 2, prompt_len: 64, output_len: 1}
  two: {batch_size: 2, prompt_len: 64, output_len: 2}
"""


def test_tpot_of_one_token_outputs_is_null_everywhere(tmp_path):
    from attnsim.core.report import summary_table
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.results import dumps, write_results
    from attnsim.sim.runner import run_experiment

    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    exp = load_experiment(p)
    one, two = run_experiment(exp)
    # output_len 1: no decode step, so TPOT and the decode-phase metrics are undefined (0.0 on main)
    assert one["status"] == "ok"
    for k in ("tpot_s", "decode_tokens_per_s", "decode_energy_per_token_j", "decode_dynamic_energy_per_token_j"):
        assert one["metrics"][k] is None, k
    assert two["metrics"]["tpot_s"] > 0  # one decode step: defined
    assert json.loads(dumps({"runs": [one]}))["runs"][0]["metrics"]["tpot_s"] is None  # strict JSON null
    row = next(line for line in summary_table([one, two]).splitlines() if " one " in line)
    assert row.split()[5] == "-"  # the TPOT ms column prints '-' for null
    h5 = write_results(tmp_path / "r.h5", [one, two], exp.tree.as_dict(), "tiny")
    import h5py
    import numpy as np

    with h5py.File(h5) as f:
        tpot = f["runs"]["tpot_s"]
        assert np.isnan(tpot[0]) and tpot[1] > 0  # the HDF5 runs table stores null as NaN


def test_draft_larger_than_target_refused(tmp_path):
    from attnsim.sim.experiment import load_experiment

    p = tmp_path / "spec.yaml"
    p.write_text("""name: spec
systems: [dgx_a100]
models: [llama3-8b]
scenarios:
  s: {batch_size: 1, prompt_len: 64, output_len: 8, speculative: {draft_model: llama3-70b}}
""")
    # llama3-70b (~70.6 B parameters) drafting for llama3-8b (~8.0 B): same vocabulary, accepted on main
    _refused(
        lambda: load_experiment(p),
        "spec.yaml: scenarios.s.speculative.draft_model: expected a draft no "
        "larger than the target (llama3-8b: 8.03 B parameters), got llama3-70b with 70.6 B",
    )


def test_macab_without_an_open_row_refused(tmp_path):
    from attnsim.sim.pim import run

    prog = tmp_path / "p.s"
    prog.write_text("ACTAB 0, 3\nMACAB 0, 0, 4\nPREA 0\nMACAB 0, 0, 4\n")
    _refused(
        lambda: run(prog, "attacc_hbm3_pim_5stack"),
        "p.s: line 4: MACAB: expected an open row on channel 0 (an ACTAB before it, no PREA between), got none",
    )
    prog.write_text("MACSB 1, 2, 0, 1\n")
    _refused(lambda: run(prog, "attacc_hbm3_pim_5stack"), "p.s: line 1: MACSB: expected an open row on channel 1")


def _hf(tmp_path, **over):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_hidden_layers": 2,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
    }
    cfg.update(over)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def test_hf_hidden_size_not_divisible_by_heads(tmp_path):
    from attnsim.workloads.hf import model_from_hf_config

    # 4100 / 32 = 128.125: truncated to head_dim 128 on main
    _refused(
        lambda: model_from_hf_config(_hf(tmp_path, hidden_size=4100)),
        "config.json: hidden_size: expected hidden_size divisible by num_attention_heads (32; ",
        "got 4100",
    )
    assert model_from_hf_config(_hf(tmp_path, hidden_size=4100, head_dim=128)).head_dim == 128  # explicit: kept
    assert model_from_hf_config(_hf(tmp_path)).head_dim == 128  # 4096 / 32


def test_unknown_activation_and_architecture_refused(tmp_path):
    from attnsim.workloads.hf import model_from_hf_config
    from attnsim.workloads.model import ModelSpec

    d = load_yaml(CONFIG_ROOT / "models" / "llama3-8b.yaml")
    _refused(
        lambda: validate(ModelSpec, {**d, "activation": "sigmoidz"}, file="m.yaml"),
        "m.yaml: activation: expected one of relu, relu2",
        "got 'sigmoidz'",
    )
    _refused(
        lambda: validate(ModelSpec, {**d, "architecture": "FooForCausalLM"}, file="m.yaml"),
        "m.yaml: architecture: expected one of LlamaForCausalLM",
        "got 'FooForCausalLM'",
    )
    _refused(
        lambda: model_from_hf_config(_hf(tmp_path, hidden_act="swiglu_x")),
        "config.json: activation: expected one of relu",
    )
    _refused(
        lambda: model_from_hf_config(_hf(tmp_path, architectures=["FooForCausalLM"])),
        "config.json: architectures: unknown architecture 'FooForCausalLM' (supported: LlamaForCausalLM",
    )
