"""Run an experiment: for each (system, model, scenario) simulate a whole generation.

Produces one JSON-serialisable document per run (see docs/reference/metrics.md and docs/reference/results-files.md):
``system``, ``model``, ``scenario``, ``status``, ``metrics``, ``breakdown`` and,
when the experiment names a baseline, ``vs_baseline``.
"""

from __future__ import annotations

from attnsim.core.config import ConfigError, allow_notes
from attnsim.hwmodels.stack import add_step_overhead, sampler_cost
from attnsim.hwmodels.system import build_system, check_parallelism, ref_name
from attnsim.mapper.base import CapacityError, get_policy
from attnsim.sim.engine import StepResult, cost_step, cost_step_pipelined, decode_step_weights, subbatch_parts
from attnsim.sim.pipeline import check_pipeline
from attnsim.sim.results import BASELINE_RATIOS, baseline_ratio, finalize_doc
from attnsim.sim.run_metrics import (  # noqa: F401 (runner.X keeps them: tests import METRIC_KEYS from here)
    METRIC_KEYS,
    SYSTEM_KEYS,
    _bandwidth,
    _memory,
    _replica_scenario,
    null_metrics,
)
from attnsim.workloads.scenario import context_window
from attnsim.workloads.trace import build_trace, check_tp, kv_cache_bytes, tp_imbalance, weight_bytes


def simulate_generation(
    system,
    model,
    scenario,
    generation,
    timeline: list | None = None,
    pid: int = 1,
    kv_storage: dict | None = None,
    trace_steps: int | None = None,
) -> dict:
    """Prefill + decode of one static batch on one system; returns the run document parts.

    With ``timeline`` (a list), trace events of the prefill and every decode step are appended to it
    (attnsim.sim.timeline.generation_events: ``trace_steps`` costed steps drawn op by op, default
    timeline.DEFAULT_TRACE_STEPS; pp > 1: the prefill and first decode step per device group). ``kv_storage`` (from the
    reliability section, attnsim.sim.reliability_run.kv_storage_costs) adds the KV's ECC
    overheads: ``bytes_scale`` on KV traffic (inline check bits), ``capacity_scale`` on
    KV capacity, and ``pj_per_byte`` of ECC decode energy on KV reads (component ``ecc``),
    per device role, weighted by where the policy places the KV.
    """
    refuse_beams(scenario)
    if scenario.speculative is not None:  # draft + target model (attnsim/sim/speculative.py)
        if kv_storage:
            raise ConfigError(
                "expected no reliability section with speculative decoding (not modelled)", key="speculative"
            )
        from attnsim.sim.speculative import simulate_speculative

        return simulate_speculative(system, model, scenario, generation, timeline, pid)
    spec = system.spec
    tp = spec.parallelism.tp
    replicas = spec.parallelism.replicas
    sc = _replica_scenario(scenario, replicas)
    policy = get_policy(spec.mapper.policy, file=None)
    prompts = sc.prompt_lens()
    final_ctx = prompts + sc.output_len
    ks = {}
    if kv_storage:  # weight each role's ECC overheads by the KV it holds in an unscaled placement
        from attnsim.sim.reliability_run import combine_storage_costs

        base = {
            "weights": weight_bytes(model, sc.weight_dtype),
            "kv": kv_cache_bytes(model, sc, final_ctx),
            "kv_per_rank": kv_cache_bytes(model, sc, final_ctx, tp=tp),
        }
        probe = policy(
            build_trace(model, sc, "decode", tp=tp, context_lens=final_ctx), system, base, spec.mapper.options
        )
        ks = combine_storage_costs(kv_storage, {mp.role: mp.kv_bytes for mp in probe.memory})
    cap_scale = ks.get("capacity_scale", 1.0)
    model_bytes = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, final_ctx) * cap_scale,
        "kv_per_rank": kv_cache_bytes(model, sc, final_ctx, tp=tp) * cap_scale,
    }

    def build(*args, **kw):
        tr = build_trace(*args, sampler=sampler_cost(system), **kw)
        if ks.get("bytes_scale", 1.0) != 1.0:  # inline ECC: check bits travel with the KV
            for col in ("kv_read_bytes", "kv_write_bytes"):
                tr.cols[col] = tr.cols[col] * ks["bytes_scale"]
        return tr

    def place(trace):
        plan = policy(trace, system, model_bytes, spec.mapper.options)
        if pipe is None:  # under pipeline parallelism capacity is checked per device group
            plan.check_capacity()
        return plan

    def cost_step_only(plan):  # devices only (pipeline stages); cost() adds the software stack's host costs
        step = cost_step(plan, system)
        if ks.get("pj_per_byte"):  # ECC decode energy on every KV byte read (all TP ranks)
            e = plan.trace.total("kv_read_bytes") * tp * ks["pj_per_byte"] * 1e-12
            step.energy_j_by_component["ecc"] = step.energy_j_by_component.get("ecc", 0.0) + e
            step.energy_j_by_op["kv_ecc_decode"] = step.energy_j_by_op.get("kv_ecc_decode", 0.0) + e
            role = ks.get("role") or next(iter(system.pools))
            step.energy_j_by_device[role] = step.energy_j_by_device.get(role, 0.0) + e
            if step.row_energy_j is not None:  # the same energy per row (timelines)
                tr = plan.trace
                step.row_energy_j = (
                    step.row_energy_j + tr["kv_read_bytes"] * tr["count"] * tp * ks["pj_per_byte"] * 1e-12
                )
        return step

    def cost(plan, first_step=False):  # first_step: the prefill, with the stack's per-request cost
        return add_step_overhead(cost_step_only(plan), system, sc.batch_size, first_step)

    pipe = None
    if spec.parallelism.pp > 1:  # pipeline parallelism: attnsim.sim.pipeline
        from attnsim.sim.pipeline import RunPipeline

        pipe = RunPipeline(system, model, sc, final_ctx, build, place, cost_step_only)
        pre_plan, prefill = None, add_step_overhead(pipe.prefill(), system, sc.batch_size, True)
    else:
        ptp = getattr(policy, "prefill_tp", lambda *_: None)(system, spec.mapper.options) or tp
        pre_trace = build(model, sc, "prefill", tp=ptp)  # cxl_pnm: the host GPUs' own TP width
        pre_plan = place(pre_trace)
        prefill = cost(pre_plan, first_step=True)

    steps, weights = decode_step_weights(sc.output_len, generation.mode, generation.samples)

    def decode_step(ctx):
        if pipe is not None:
            return None, pipe.decode(ctx)  # the stack's host time on each micro-batch's chain
        tr = build(model, sc, "decode", tp=tp, context_lens=ctx)
        plan = place(tr)
        s = plan.pipeline_subbatches
        if s <= 1:
            return tr, cost(plan)

        # pipelined over sub-batches: one plan per sub-batch (engine.subbatch_parts)
        def sub(idx, channels):  # trace meta "subbatch_of": the mapper knows other sub-batches run concurrently
            part = ctx[idx]
            t = build(model, sc.model_copy(update={"batch_size": len(part)}), "decode", tp=tp, context_lens=part)
            t.meta["subbatch_of"] = s
            if channels is not None:  # the channels the whole batch's requests were placed on
                t.meta["channel_assignment"] = [int(c) for c in channels]
            return place(t)

        subs = [sub(idx, ch) for idx, ch in subbatch_parts(plan, len(ctx))]
        return tr, add_step_overhead(cost_step_pipelined(subs, system), system, sc.batch_size)

    decode = StepResult()
    traced = []  # (j, step) of every costed decode step, for the timeline
    for j, w in zip(steps, weights):
        tr, step = decode_step(prompts + j)
        decode.scaled_add(step, w)
        if timeline is not None and j == steps[0] and pipe is not None:
            timeline += pipe.timeline("prefill", 2 * pid - 1) + pipe.timeline("decode", 2 * pid)
        elif timeline is not None:
            traced.append((int(j), step))
    if timeline is not None and pipe is None:
        from attnsim.sim.timeline import DEFAULT_TRACE_STEPS, generation_events

        timeline += generation_events(
            prefill,
            traced,
            sc.output_len - 1,
            f"{spec.name} ({model.name}, {sc.name})",
            pid=2 * pid - 1,
            max_steps=DEFAULT_TRACE_STEPS if trace_steps is None else trace_steps,
        )
    n_dec = max(1, sc.output_len - 1)
    per_step = decode.scaled(1.0 / n_dec) if len(steps) else StepResult()

    # replicas: each active replica serves ceil(batch / replicas) requests (the slowest share sets
    # the time); idle replicas still draw static power.
    batch = scenario.batch_size
    active = min(replicas, batch)
    tokens = batch * sc.output_len
    dec_tokens = batch * (sc.output_len - 1)
    total_s = prefill.time_s + decode.time_s
    static_w = system.static_power_w()
    dyn_j = (prefill.dynamic_energy_j + decode.dynamic_energy_j) * active
    static_j = static_w * total_s
    dec_dyn_j = decode.dynamic_energy_j * active
    metrics = {
        "ttft_s": prefill.time_s,
        # a one-token output has no decode step: TPOT and the decode metrics are undefined (null), not 0
        "tpot_s": decode.time_s / n_dec if len(steps) else None,
        "tokens_per_s": tokens / total_s,
        "decode_tokens_per_s": batch / (decode.time_s / n_dec) if len(steps) else None,
        "energy_per_token_j": (dyn_j + static_j) / tokens,
        "dynamic_energy_per_token_j": dyn_j / tokens,
        "static_energy_per_token_j": static_j / tokens,
        "decode_energy_per_token_j": (dec_dyn_j + static_w * decode.time_s) / dec_tokens if dec_tokens else None,
        "decode_dynamic_energy_per_token_j": dec_dyn_j / dec_tokens if dec_tokens else None,
        "total_time_s": total_s,
        "prefill_time_s": prefill.time_s,
        "decode_time_s": decode.time_s,
        "batch_per_replica": sc.batch_size,
        "replicas": replicas,
        "active_replicas": active,
        "tp": tp,
        "tp_imbalance": tp_imbalance(model, tp),
        "pp": spec.parallelism.pp,
        "decode_steps_simulated": int(len(steps)),
        "bandwidth": _bandwidth(system, per_step),
        "memory": pipe.memory_doc() if pipe is not None else _memory(pre_plan),
        "fits": True,
    }
    out = {"metrics": metrics, "breakdown": {"prefill": prefill.breakdown(), "decode_step": per_step.breakdown()}}
    if pipe is not None:
        out["pipeline"] = pipe.doc()
    return out


def scenario_doc(sc) -> dict:
    d = sc.model_dump()
    if d.get("context_lens") is not None and not isinstance(d["context_lens"], list):
        d["context_lens"] = {k: v for k, v in d["context_lens"].items() if v is not None}
    return {k: v for k, v in d.items() if v is not None}


def refuse_beams(scenario, file: str | None = None) -> None:
    """A static batch does not model beam search (attnsim serve's scheduler does): beam_width > 1 is refused."""
    if scenario.beam_width > 1:
        raise ConfigError(
            f"expected beam_width 1 in a static-batch run (beam search is modelled by attnsim serve), "
            f"got {scenario.beam_width}",
            file=file,
            key=f"scenarios.{scenario.name}.beam_width",
        )


def run_experiment(exp, progress=None, timeline: list | None = None, trace_steps: int | None = None) -> list[dict]:
    """Simulate every (system, model, scenario) of a validated Experiment (``timeline``, ``trace_steps``:
    see simulate_generation)."""
    for sc in exp.scenarios.values():
        refuse_beams(sc, exp.tree.file_of("experiment"))
    systems = {}
    for sname, sspec in exp.systems.items():
        sfile = exp.tree.file_of("systems", sname)
        get_policy(sspec.mapper.policy, file=sfile)
        system = build_system(sspec, exp.tree.hardware, exp.tree.file_of)
        role = next((r for r, p in system.pools.items() if p.model.kind in ("gpu", "npu")), None)
        policy = get_policy(sspec.mapper.policy, file=sfile)
        if role is not None and not getattr(policy, "own_compute_pool_check", False):
            check_parallelism(sspec, role, sfile)
        if sspec.mapper.attention_on is not None:  # the device behind it can run attention (one line otherwise)
            from attnsim.mapper.base import attention_roles

            attention_roles(system, sspec.mapper.policy, sspec.mapper.attention_on, file=sfile)
        for model in exp.models.values():
            check_pipeline(system, model, sfile)
            check_tp(model, sspec.parallelism.tp, sfile)
            if getattr(policy, "prefill_tp", None):  # cxl_pnm: host GPUs' TP width (ConfigError naming the file)
                try:
                    ptp = policy.prefill_tp(system, sspec.mapper.options)
                except ConfigError as e:
                    raise ConfigError(e.message, file=sfile, key=e.key) from None
                if ptp:
                    check_tp(model, ptp, sfile)
        systems[sname] = system
    docs = []
    rel = exp.reliability or {}
    opt_outs = allow_notes(exp.tree)  # allow_out_of_range: keys the user accepted outside their plausible ranges
    for sname in exp.systems:
        for mname in exp.models:
            for scname, sc in exp.scenarios.items():
                doc = {"system": sname, "model": mname, "scenario": scenario_doc(sc), "status": "ok"}
                note = context_window(exp.models[mname], sc)[1]
                if note or opt_outs:
                    doc["notes"] = ([note] if note else []) + opt_outs
                system, rspec, kv_storage = systems[sname], rel.get(scname), None
                if rspec is not None:  # tier refresh intervals change the PIM/PNM devices' refresh
                    from attnsim.sim.reliability_run import hardware_with_refresh, kv_storage_costs

                    hw = hardware_with_refresh(exp.tree.hardware, exp.systems[sname], rspec)
                    system = build_system(exp.systems[sname], hw, exp.tree.file_of)
                    kv_storage = kv_storage_costs(rspec, exp.systems[sname])
                try:
                    doc.update(
                        simulate_generation(
                            system,
                            exp.models[mname],
                            sc,
                            exp.spec.generation,
                            timeline=timeline,
                            pid=len(docs) + 1,
                            kv_storage=kv_storage,
                            trace_steps=trace_steps,
                        )
                    )
                    if rspec is not None:
                        from attnsim.sim.reliability_run import reliability_metrics

                        doc["metrics"].update(
                            reliability_metrics(rspec, exp.systems[sname], exp.models[mname], sc, doc)
                        )
                except CapacityError as e:
                    doc["status"] = "does_not_fit"
                    doc["error"] = str(e)
                    doc["metrics"] = null_metrics(fits=False)
                except ConfigError as e:  # a mapper's option / pool check: name the system's file
                    if e.file is not None or str(e.key or "").split(".")[0] not in SYSTEM_KEYS:
                        raise
                    raise ConfigError(e.message, file=exp.tree.file_of("systems", sname), key=e.key) from None
                finalize_doc(doc)  # a non-finite metric makes the run an error, never `ok`
                docs.append(doc)
                if progress:
                    progress(doc)
    if exp.spec.baseline:  # a baseline given as a file (``x.yaml``) is the system named by it
        add_baseline_ratios(docs, ref_name(exp.spec.baseline))
        for doc in docs:
            finalize_doc(doc)
    return docs


def add_baseline_ratios(docs: list[dict], baseline: str) -> None:
    """Attach vs_baseline (throughput and energy-efficiency ratios) to every non-baseline run."""
    base = {(d["model"], d["scenario"]["name"]): d for d in docs if d["system"] == baseline and d["status"] == "ok"}
    for d in docs:
        if d["system"] == baseline or d["status"] != "ok":
            continue
        b = base.get((d["model"], d["scenario"]["name"]))
        if b is None:
            d["vs_baseline"] = {"baseline": baseline, "note": "baseline run did not complete"}
            continue
        m, bm = d["metrics"], b["metrics"]
        d["vs_baseline"] = {
            "baseline": baseline,
            **{name: baseline_ratio(m[k], bm[k], up) for name, k, up in BASELINE_RATIOS},
        }
