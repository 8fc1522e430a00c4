"""Speculative decoding (workloads/speculative.py, attnsim/sim/speculative.py): tokens per target step,
time per step from the engine's own step costs, limits in alpha, placement, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import get_policy
from attnsim.sim.engine import cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.workloads.speculative import expected_tokens
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes
from attnsim.workloads.zoo import load_model


def _exp(spec: dict | None, system="ianus_a100", model="gpt2-medium", output_len=5, mode="exact", sets=()):
    sc = {"batch_size": 2, "prompt_len": 16, "output_len": output_len}
    if spec is not None:
        sc["speculative"] = spec
    d = {
        "name": "t",
        "systems": [system],
        "models": [model],
        "scenarios": {"s": sc},
        "generation": {"mode": mode} if mode == "exact" else {"mode": mode, "samples": 3},
    }
    return load_experiment(d, sets=list(sets))


def _run(*a, **kw) -> dict:
    docs = run_experiment(_exp(*a, **kw))
    assert docs[0]["status"] == "ok", docs[0]
    return docs[0]


def test_expected_tokens_by_hand():
    assert expected_tokens(4, 0.8) == pytest.approx((1 - 0.8**5) / 0.2)  # 3.3616
    assert expected_tokens(4, 0.8) == pytest.approx(3.3616)
    assert expected_tokens(4, 0.0) == 1.0
    assert expected_tokens(4, 1.0) == 5.0
    assert expected_tokens(4, 1 - 1e-9) == pytest.approx(5.0, rel=1e-6)
    assert expected_tokens(1, 0.5) == pytest.approx(1.5)  # 1 + alpha


def test_time_per_target_step_by_hand():
    """alpha = 0: one token per target step, so output_len - 1 = 4 target steps; step j (context
    c = prompt + j) = gamma = 2 draft decode steps at contexts c and c + 1 + a verification of 3 tokens
    at context c + 2, each costed by the engine on its own trace."""
    doc = _run({"draft_model": "gpt2", "draft_tokens": 2, "acceptance_rate": 0.0})
    exp = _exp(None)
    system = build_system(exp.systems["ianus_a100"], exp.tree.hardware, exp.tree.file_of)
    pol = get_policy("gpu_only")
    models = {"t": exp.models["gpt2-medium"], "d": load_model("gpt2")}
    sc = exp.scenarios["s"]
    mb = {
        k: {"weights": weight_bytes(m), "kv": kv_cache_bytes(m, sc, 32), "kv_per_rank": kv_cache_bytes(m, sc, 32)}
        for k, m in models.items()
    }

    def t(k, ctx, q=1):
        tr = build_trace(models[k], sc, "decode", context_lens=np.full(2, ctx), query_tokens=np.full(2, q))
        return cost_step(pol(tr, system, mb[k], {}), system).time_s

    want = sum(t("d", 16 + j) + t("d", 16 + j + 1) + t("t", 16 + j + 2, q=3) for j in range(1, 5))
    m = doc["metrics"]
    assert m["decode_time_s"] == pytest.approx(want, rel=1e-9)
    assert m["tpot_s"] == pytest.approx(want / 4, rel=1e-9)
    assert m["decode_tokens_per_s"] == pytest.approx(2 / (want / 4), rel=1e-9)
    sp = doc["speculative"]
    assert sp["tokens_per_target_step"] == 1.0 and sp["target_steps"] == 4.0
    assert 0 < sp["draft_time_share"] < 1
    # the prefill is the target's and the draft's prompt, both
    assert "draft.qkv_proj" in doc["breakdown"]["prefill"]["time_s_by_op"]


def test_alpha_limits_against_plain_decode():
    """alpha = 0 costs more than plain decode (a draft and a wider verification per token); alpha = 1
    gives gamma + 1 tokens per step, (output_len - 1) / (gamma + 1) target steps, and beats plain decode
    on a memory-bound GPU (a 3-token verification reads the weights once)."""
    plain = _run(None, output_len=9)["metrics"]["tpot_s"]
    zero = _run({"draft_model": "gpt2", "draft_tokens": 2, "acceptance_rate": 0.0}, output_len=9)
    one = _run({"draft_model": "gpt2", "draft_tokens": 2, "acceptance_rate": 1.0}, output_len=9)
    assert zero["metrics"]["tpot_s"] > plain
    assert one["speculative"]["tokens_per_target_step"] == 3.0
    assert one["speculative"]["target_steps"] == pytest.approx(8 / 3)
    assert one["metrics"]["tpot_s"] < plain


def test_ianus_draft_and_target_placements():
    """draft_placement pim + placement compute: the draft's GEMVs on the PIM, the target's verification
    on the NPU; both models' weights count against the unified memory."""
    exp = _exp(
        {"draft_model": "gpt2", "draft_tokens": 2, "acceptance_rate": 0.5},
        system="ianus",
        output_len=3,
        sets=["systems.ianus.mapper.options={placement: compute, draft_placement: pim}"],
    )
    system = build_system(exp.systems["ianus"], exp.tree.hardware, exp.tree.file_of)
    opts = exp.systems["ianus"].mapper.options
    sc, model = exp.scenarios["s"], exp.models["gpt2-medium"]
    mb = {"weights": weight_bytes(model), "kv": 0.0, "kv_per_rank": 0.0}
    devs = {}
    for role in ("draft", "target"):
        tr = build_trace(
            model, sc, "decode", context_lens=np.full(2, 20), query_tokens=np.full(2, 3 if role == "target" else 1)
        )
        tr.meta["speculative"] = role
        devs[role] = get_policy("ianus")(tr, system, mb, opts).device
    assert np.any(devs["draft"] == "pim") and not np.any(devs["target"] == "pim")
    doc = run_experiment(exp)[0]
    assert doc["status"] == "ok"
    w = (weight_bytes(model) + weight_bytes(load_model("gpt2"))) / 1e9
    assert doc["metrics"]["memory"]["pim"]["weights_gb"] == pytest.approx(w)


@pytest.mark.parametrize(
    "spec,key",
    [
        ({"draft_model": "llama2-7b"}, "scenarios.s.speculative.draft_model"),  # another vocabulary
        ({"draft_model": "no-such-model"}, "scenarios.s.speculative.draft_model"),
        ({"draft_model": "gpt2", "draft_tokens": 0}, "scenarios.s.speculative.draft_tokens"),
        ({"draft_model": "gpt2", "acceptance_rate": 1.5}, "scenarios.s.speculative.acceptance_rate"),
    ],
)
def test_bad_speculative_settings_refused(spec, key):
    with pytest.raises(ConfigError) as e:
        _exp(spec)
    assert e.value.key == key and "\n" not in str(e.value)


def test_draft_placement_without_draft_refused():
    exp = _exp(None, system="ianus", sets=["systems.ianus.mapper.options.draft_placement=pim"])
    with pytest.raises(ConfigError) as e:
        run_experiment(exp)
    assert e.value.key == "mapper.options.draft_placement"


def test_serving_advances_by_accepted_tokens():
    """attnsim serve: one request of 17 tokens with gamma = 3. alpha = 1: the prefill's token + 4
    iterations of 4 tokens; each iteration = a 4-token verification at context c + 3 + 3 draft decodes at
    context c (c = tokens so far + 1), by the engine on its own traces (exact memo). alpha = 0: 16 of them."""
    from attnsim.studies.serve.run import quick_pool
    from attnsim.studies.serve.scheduler import simulate_pool

    sv = {
        "trace": {
            "num_requests": 1,
            "rate_per_s": 1,
            "prompt": {"dist": "fixed", "mean": 32},
            "output": {"dist": "fixed", "mean": 17},
        },
        "memo": {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0},
    }
    exp = _exp(None)
    system = build_system(exp.systems["ianus_a100"], exp.tree.hardware, exp.tree.file_of)
    pol, sc = get_policy("gpu_only"), exp.scenarios["s"]
    models = {"t": exp.models["gpt2-medium"], "d": load_model("gpt2")}
    mb = {k: {"weights": weight_bytes(m), "kv": 0.0, "kv_per_rank": 0.0} for k, m in models.items()}

    def t(k, ctx, q=1):
        tr = build_trace(models[k], sc, "decode", context_lens=np.array([ctx]), query_tokens=np.array([q]))
        return cost_step(pol(tr, system, mb[k], {}), system).time_s

    for alpha, step in ((1.0, 4), (0.0, 1)):
        scen = {
            "prompt_len": 32,
            "output_len": 17,
            "speculative": {"draft_model": "gpt2", "draft_tokens": 3, "acceptance_rate": alpha},
        }
        pool, _, _ = quick_pool("ianus_a100", "gpt2-medium", scen, sv)
        r = simulate_pool(pool, np.zeros(1), [32], [17])
        ctxs = [32 + step * k + 1 for k in range(16 // step)]
        want = sum(t("t", c + 3, q=4) + 3 * t("d", c) for c in ctxs)
        assert r.iterations == 1 + 16 // step
        assert float(r.finish_s[0] - r.first_token_s[0]) == pytest.approx(want, rel=1e-9)
