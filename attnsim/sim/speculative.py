"""A whole speculative generation (workloads/speculative.py) on one system: the run document parts.

Prefill: the target's and the draft's prompt (one after the other). Decode: (N - 1) / E target steps
(E = expected tokens per target step), each = gamma draft decode steps (contexts c .. c + gamma - 1,
costed at both ends and averaged: exact for costs linear in the context) + one target verification
step over gamma + 1 query tokens (context c + gamma), where c = prompt + 1 + (accepted tokens so far).
Target steps are sampled like plain decode steps (engine.decode_step_weights). Placement: the system's
policy sees ``trace.meta["speculative"]`` = "draft" / "target" (mapper/ianus.py ``draft_placement``).
Capacity: both models' weights and KV on their devices together. Not modelled: the draft's extra
forward of the bonus token, rejection sampling's arithmetic, pipeline parallelism (refused).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.hwmodels.stack import add_step_overhead, sampler_cost
from attnsim.mapper.base import CapacityError, MemoryPlacement, get_policy
from attnsim.sim.engine import StepResult, cost_step, decode_step_weights
from attnsim.workloads.speculative import expected_tokens, load_draft
from attnsim.workloads.trace import build_trace, check_tp, kv_cache_bytes, weight_bytes

_BY_OP = ("time_s_by_op", "energy_j_by_op", "pim_mapping")


def prefixed(step: StepResult, prefix: str) -> StepResult:
    """``step`` with its per-op keys prefixed (the draft's ops beside the target's of the same name)."""
    for name in _BY_OP:
        setattr(step, name, {prefix + k: v for k, v in getattr(step, name).items()})
    return step


def _model_bytes(model, sc, ctx, tp) -> dict:
    return {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, ctx),
        "kv_per_rank": kv_cache_bytes(model, sc, ctx, tp=tp),
    }


def check_capacity(plans: list) -> list:
    """Target + draft placements per device role together within that role's capacity; returns them."""
    total: dict[str, MemoryPlacement] = {}
    for plan in plans:
        for mp in plan.memory:
            t = total.setdefault(mp.role, MemoryPlacement(mp.role, 0.0, 0.0, mp.capacity_bytes))
            t.weights_bytes += mp.weights_bytes
            t.kv_bytes += mp.kv_bytes
    for mp in total.values():
        if not mp.fits:
            raise CapacityError(
                f"{mp.role}: target + draft weights {mp.weights_bytes / 1e9:.1f} GB + KV "
                f"{mp.kv_bytes / 1e9:.1f} GB exceed its capacity {mp.capacity_bytes / 1e9:.1f} GB"
            )
    return list(total.values())


def simulate_speculative(system, model, scenario, generation, timeline: list | None = None, pid: int = 1) -> dict:
    """Prefill + speculative decode of one static batch (see the module doc): metrics as
    runner.simulate_generation's (tokens = accepted tokens) + a ``speculative`` section. ``timeline``:
    events of the target's prefill and of the first verification step (attnsim.sim.timeline)."""
    from attnsim.sim.run_metrics import METRIC_KEYS, _bandwidth, _memory, _replica_scenario

    spec = system.spec
    if spec.parallelism.pp > 1:
        raise ConfigError("speculative decoding is modelled with pp = 1 only", key="parallelism.pp")
    sp = scenario.speculative
    draft = load_draft(sp, key="speculative.draft_model")
    tp, replicas = spec.parallelism.tp, spec.parallelism.replicas
    check_tp(draft, tp)
    sc = _replica_scenario(scenario, replicas)
    policy = get_policy(spec.mapper.policy)
    gamma, alpha = sp.draft_tokens, sp.acceptance_rate
    e_tok = expected_tokens(gamma, alpha)
    prompts = sc.prompt_lens()
    final_ctx = prompts + sc.output_len + gamma  # the last verification may run gamma tokens past the output
    mb = {"target": _model_bytes(model, sc, final_ctx, tp), "draft": _model_bytes(draft, sc, final_ctx, tp)}
    models = {"target": model, "draft": draft}

    def place(role, phase, **kw):
        tr = build_trace(models[role], sc, phase, tp=tp, sampler=sampler_cost(system), **kw)
        tr.meta["speculative"] = role
        return policy(tr, system, mb[role], spec.mapper.options)

    def cost(plan, first=False, role="target"):
        step = add_step_overhead(cost_step(plan, system), system, sc.batch_size, first)
        return prefixed(step, "draft.") if role == "draft" else step

    pre_t, pre_d = place("target", "prefill"), place("draft", "prefill")
    memory = check_capacity([pre_t, pre_d])
    prefill = cost(pre_t, first=True)
    if timeline is not None:
        from attnsim.sim.timeline import step_events

        timeline += step_events(prefill, spec.name, "prefill (target)", pid=2 * pid - 1)
    prefill.scaled_add(cost(pre_d, role="draft"), 1.0)

    n_tok = sc.output_len - 1
    n_steps = n_tok / e_tok  # expected target steps after the prefill's token
    whole = math.ceil(n_steps) if n_tok else 0
    steps, weights = decode_step_weights(whole + 1, generation.mode, generation.samples)
    weights = weights * (n_steps / whole) if whole else weights
    decode, draft_t, verify_t = StepResult(), StepResult(), StepResult()
    for j, w in zip(steps, weights):
        c = prompts + 1 + int(round((j - 1) * e_tok))
        ends = sorted({0, gamma - 1})
        d = StepResult()
        for t in ends:  # draft decode steps at contexts c .. c + gamma - 1: mean of the two ends x gamma
            d.scaled_add(cost(place("draft", "decode", context_lens=c + t), role="draft"), gamma / len(ends))
        v = cost(place("target", "decode", context_lens=c + gamma, query_tokens=np.full_like(c, gamma + 1)))
        if timeline is not None and j == steps[0]:
            timeline += step_events(v, spec.name, f"verification step {j}", pid=2 * pid)
        for acc, part in ((decode, d), (decode, v), (draft_t, d), (verify_t, v)):
            acc.scaled_add(part, w)
    batch = scenario.batch_size
    active = min(replicas, batch)
    tokens, dec_tokens = batch * sc.output_len, batch * n_tok
    total_s = prefill.time_s + decode.time_s
    static_w = system.static_power_w()
    dyn_j = (prefill.dynamic_energy_j + decode.dynamic_energy_j) * active
    dec_dyn_j = decode.dynamic_energy_j * active
    per_tok = decode.scaled(1.0 / n_tok) if n_tok else StepResult()
    tpot = decode.time_s / n_tok if n_tok else None  # a one-token output: undefined (null), not 0
    metrics = {
        "ttft_s": prefill.time_s,
        "tpot_s": tpot,
        "tokens_per_s": tokens / total_s,
        "decode_tokens_per_s": batch / tpot if tpot else None,
        "energy_per_token_j": (dyn_j + static_w * total_s) / tokens,
        "dynamic_energy_per_token_j": dyn_j / tokens,
        "static_energy_per_token_j": static_w * total_s / tokens,
        "decode_energy_per_token_j": (dec_dyn_j + static_w * decode.time_s) / dec_tokens if dec_tokens else None,
        "decode_dynamic_energy_per_token_j": dec_dyn_j / dec_tokens if dec_tokens else None,
        "total_time_s": total_s,
        "prefill_time_s": prefill.time_s,
        "decode_time_s": decode.time_s,
        "batch_per_replica": sc.batch_size,
        "replicas": replicas,
        "active_replicas": active,
        "tp": tp,
        "tp_imbalance": None,
        "pp": 1,
        "decode_steps_simulated": int(len(steps)),
        "bandwidth": _bandwidth(system, per_tok),
        "memory": _memory(SimpleNamespace(memory=memory)),
        "fits": True,
    }
    from attnsim.workloads.trace import tp_imbalance

    metrics["tp_imbalance"] = tp_imbalance(model, tp)
    assert set(metrics) == set(METRIC_KEYS)
    per_step = n_steps if n_steps else 1.0
    return {
        "metrics": metrics,
        "breakdown": {"prefill": prefill.breakdown(), "decode_step": per_tok.breakdown()},
        "speculative": {
            "draft_model": draft.name,
            "draft_tokens": gamma,
            "acceptance_rate": alpha,
            "tokens_per_target_step": e_tok,
            "target_steps": n_steps,
            "draft_time_per_target_step_s": draft_t.time_s / per_step,
            "verify_time_per_target_step_s": verify_t.time_s / per_step,
            "draft_time_share": draft_t.time_s / decode.time_s if decode.time_s else 0.0,
        },
    }
