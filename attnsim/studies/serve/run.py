"""Serve an experiment: load (with the ``serving:`` section and the links it names), then for
every system x model x scenario (colocated) and every disaggregation pair x model x scenario,
simulate the request trace and summarise.

A run document has ``system``, ``model``, ``scenario``, ``status``, ``metrics`` (metrics.py),
``serving`` (pool facts: KV capacity, blocks, memo, preemptions, prefix hits, accuracy proxy),
``breakdown.iterations`` (all iterations' time/energy tables) and, kept out of JSON,
``_requests`` (per-request columns for the HDF5 ``/requests`` table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from attnsim.core.config import ConfigError, allow_notes, display_path, find_config, load_yaml, validate
from attnsim.hwmodels import registry
from attnsim.hwmodels.system import build_system, check_parallelism, ref_name
from attnsim.mapper.base import CapacityError, get_policy
from attnsim.sim.experiment import experiment_allow, load_tree, validate_tree
from attnsim.sim.pipeline import check_pipeline
from attnsim.sim.results import finalize_doc
from attnsim.sim.runner import SYSTEM_KEYS, scenario_doc
from attnsim.studies.serve.costing import IterationCoster
from attnsim.studies.serve.disagg import simulate_disagg
from attnsim.studies.serve.kvpolicy import accuracy_proxy
from attnsim.studies.serve.metrics import mean_in_system_from_times, request_table, summarize
from attnsim.studies.serve.replicate import combine, replication_seeds
from attnsim.studies.serve.requests import build_request_trace
from attnsim.studies.serve.scheduler import Pool, ServeError, simulate_pool
from attnsim.studies.serve.spec import ServingSpec
from attnsim.workloads.trace import kv_cache_bytes


def load_serving_experiment(path=None, sets: Optional[list[str]] = None):
    """(Experiment, ServingSpec): the experiment, its validated ``serving:`` section, with the
    link hardware the section names loaded into the tree (so ``--set hardware.<link>...`` works)."""
    sets = list(sets or ())
    tree, src = load_tree(path, sets)
    serving_spec(tree)
    load_serving_hardware(tree, src.parent if src is not None else None)
    tree.apply_sets([s for s in sets if s.split("=", 1)[0].split(".")[0] != "experiment"])
    return experiment_from_tree(tree, src)


def serving_spec(tree) -> ServingSpec:
    """The validated ``serving:`` section of a config tree."""
    exp_file = tree.file_of("experiment")
    raw = tree.experiment.get("serving") or {}
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping", file=exp_file, key="serving")
    return validate(ServingSpec, raw, file=exp_file, prefix="serving", allow=experiment_allow(tree, ServingSpec))


def serving_hardware_refs(serving: ServingSpec) -> list[tuple[str, str]]:
    """(hardware reference, key) of every link (and DRAM preset) the serving section names; the swap
    link is checked even when preemption is recompute (a wrong name is never silently unused)."""
    links = [(d.link, f"serving.disaggregation.{i}.link") for i, d in enumerate(serving.disaggregation)]
    links.append((serving.scheduler.swap_link, "serving.scheduler.swap_link"))
    if serving.kv.locality_dram:
        links.append((serving.kv.locality_dram, "serving.kv.locality_dram"))
    if serving.kv_pool is not None:
        links.append((serving.kv_pool.hardware, "serving.kv_pool.hardware"))
    return links


_REF_KINDS = {
    "serving.scheduler.swap_link": "link",
    "serving.kv.locality_dram": "dram",
    "serving.kv_pool.hardware": "kv_pool",
}
MAX_POOL_PASSES = 4  # fixed-point passes over the instances sharing a KV pool (hwmodels/kv_pool.py)


def load_serving_hardware(tree, base: Optional[Path]) -> None:
    """Load the link hardware the tree's serving section names (those not loaded yet)."""
    exp_file = tree.file_of("experiment")
    for ref, key in serving_hardware_refs(serving_spec(tree)):
        name = ref_name(ref)
        if name in tree.hardware:
            continue
        try:
            p = find_config("hardware", ref, base)
        except ConfigError as e:
            raise ConfigError(e.message, file=exp_file, key=key) from None
        tree.hardware[name] = load_yaml(p)
        tree.files[("hardware", name)] = display_path(p)


def experiment_from_tree(tree, src=None):
    """(Experiment, ServingSpec) of a complete config tree (``--set`` applied), validated."""
    exp_file = tree.file_of("experiment")
    serving = serving_spec(tree)
    refuse_static_batch_settings(tree)
    exp = validate_tree(tree, src)
    for i, d in enumerate(serving.disaggregation):
        for role in ("prefill", "decode"):
            if getattr(d, role) not in exp.systems:
                raise ConfigError(
                    f"expected one of the experiment's systems ({', '.join(exp.systems)}), got {getattr(d, role)!r}",
                    file=exp_file,
                    key=f"serving.disaggregation.{i}.{role}",
                )
        kind = tree.hardware[ref_name(d.link)].get("kind")
        if kind != "link":
            raise ConfigError(
                f"expected a hardware config of kind link, got kind {kind!r}",
                file=exp_file,
                key=f"serving.disaggregation.{i}.link",
            )
    for i, name in enumerate(serving.kv_pool.systems if serving.kv_pool is not None else ()):
        if name not in exp.systems:
            raise ConfigError(
                f"expected one of the experiment's systems ({', '.join(exp.systems)}), got {name!r}",
                file=exp_file,
                key=f"serving.kv_pool.systems.{i}",
            )
    for name, sc in exp.scenarios.items():  # beam search shares the prompt's KV: modelled on the dense cache only
        if sc.beam_width > 1 and serving.kv.policy.kind != "none":
            raise ConfigError(
                f"expected beam_width 1 with kv policy {serving.kv.policy.kind!r} (beam search is modelled on the "
                f"full KV cache, policy none), got {sc.beam_width}",
                file=exp_file,
                key=f"scenarios.{name}.beam_width",
            )
    for ref, key in serving_hardware_refs(serving):
        want, hw = _REF_KINDS.get(key), tree.hardware.get(ref_name(ref))
        if want and isinstance(hw, dict) and hw.get("kind") != want:
            raise ConfigError(
                f"expected a hardware config of kind {want}, got {ref!r} of kind {hw.get('kind')!r}",
                file=exp_file,
                key=key,
            )
    return exp, serving


def serve_point(tree) -> dict:
    """The sweep point function's serving branch: one colocated run of a restricted config tree
    (one system, model, scenario), without the per-request columns."""
    exp, serving = experiment_from_tree(tree)
    (doc,) = serve_experiment(exp, serving)
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def refuse_static_batch_settings(tree) -> None:
    """Settings of ``attnsim run``'s static-batch model that serving does not read are refused, not
    ignored: ``baseline``, ``reliability`` and a scenario's ``batch_size`` / ``context_lens`` /
    ``reliability`` (requests, their lengths and batching come from ``serving.trace`` and
    ``serving.scheduler``; the reliability model runs with ``attnsim run``). ``generation`` (exact or
    sampled decode steps) is not read either; it is tolerated as experiment-wide boilerplate."""
    f = tree.file_of("experiment")

    def refuse(key, value, why):
        got = f"a {key.rsplit('.', 1)[-1]} section" if isinstance(value, dict) else repr(value)
        raise ConfigError(f"expected no {key.rsplit('.', 1)[-1]} for attnsim serve ({why}), got {got}", file=f, key=key)

    static = "a static-batch setting of attnsim run"
    for key in ("baseline", "reliability"):
        if tree.experiment.get(key) is not None:
            refuse(key, tree.experiment[key], static)
    for name, sc in tree.scenarios.items():
        for key, why in (
            ("batch_size", "requests come from serving.trace"),
            ("context_lens", "requests come from serving.trace"),
            ("reliability", static),
        ):
            if sc.get(key) is not None:
                refuse(f"scenarios.{name}.{key}", sc[key], why)


def _link(exp, ref: str):
    name = ref_name(ref)
    return registry.build(exp.tree.hardware[name], file=exp.tree.file_of("hardware", name))


def pim_hardware_for_layout(hardware: dict, serving) -> dict:
    """Hardware table with the serving KV layout applied to PIM devices: with paged KV every PIM/PNM
    device lowers attention over ``kv.block_tokens``-token blocks (isa/lower.py Partition), unless
    its config sets ``kv_block_tokens`` itself."""
    if serving is None or serving.kv.layout != "paged":
        return hardware
    out = {}
    for name, cfg in hardware.items():
        if isinstance(cfg, dict) and cfg.get("kind") == "pim" and "kv_block_tokens" not in cfg:
            cfg = {**cfg, "kv_block_tokens": serving.kv.block_tokens}
        out[name] = cfg
    return out


def _systems(exp, serving=None) -> dict:
    out = {}
    hardware = pim_hardware_for_layout(exp.tree.hardware, serving)
    for sname, sspec in exp.systems.items():
        sfile = exp.tree.file_of("systems", sname)
        get_policy(sspec.mapper.policy, file=sfile)
        system = build_system(sspec, hardware, exp.tree.file_of)
        role = next((r for r, p in system.pools.items() if p.model.kind in ("gpu", "npu")), None)
        if role is not None:
            check_parallelism(sspec, role, sfile)
        for model in exp.models.values():
            check_pipeline(system, model, sfile)
        out[sname] = system
    return out


def _pool(system, model, sc, serving, exp, cache: dict) -> Pool:
    key = (system.name, model.name, sc.name)
    if key not in cache:
        coster = IterationCoster(
            system,
            model,
            sc,
            serving.memo.context_bucket,
            serving.memo.token_bucket,
            serving.memo.relative_bucket,
            serving.memo.batch_relative_bucket,
        )
        swap = _link(exp, serving.scheduler.swap_link) if serving.scheduler.preemption == "swap" else None
        cache[key] = Pool(system, model, sc, serving, coster, swap_link=swap)
    return cache[key]


def _serving_facts(pool: Pool, stats: list[dict]) -> dict:
    d = dict(pool.describe())
    for k in ("preemptions", "swaps", "peak_kv_blocks", "prefix_lookups", "prefix_hits", "prefix_hit_tokens"):
        d[k] = int(sum(s[k] for s in stats))
    d["peak_kv_fraction"] = max(s["peak_kv_fraction"] for s in stats)
    d["mean_fragmentation"] = float(np.mean([s["mean_fragmentation"] for s in stats]))
    d["max_batch"] = max(s["max_batch"] for s in stats)
    d["prefix_hit_rate"] = d["prefix_hits"] / d["prefix_lookups"] if d["prefix_lookups"] else 0.0
    d["memo_entries"] = len(pool.coster.memo)
    d["memo_lookups"] = pool.coster.lookups
    return d


def layout_locality(pool: Pool, block_ids: list, dram: str) -> dict:
    """Row-buffer locality of reading one layer's K blocks of a request as the allocator placed them
    vs the same number of contiguous blocks (DRAM engine, request level)."""
    from attnsim.studies.serve.paging import kv_read_locality

    bb = int(pool.block_bytes / pool.model.num_layers / 2)  # one layer's K (or V) block on one rank
    paged = kv_read_locality(dram, block_ids, bb)
    contig = kv_read_locality(dram, np.arange(len(block_ids)), bb)
    return {
        "dram": dram,
        "blocks": len(block_ids),
        "block_bytes": bb,
        "paged_row_hit_rate": paged["row_hit_rate"],
        "contiguous_row_hit_rate": contig["row_hit_rate"],
        "paged_bandwidth_gbps": float(paged["bandwidth_gbps"]),
        "contiguous_bandwidth_gbps": float(contig["bandwidth_gbps"]),
    }


def _replica_runs(pool: Pool, trace, R: int, kv_pool=None):
    """(request indices, PoolResult) per replica; with a shared ``kv_pool`` the replicas are served
    again, each seeing the others' pool entries, until the entries repeat (at most MAX_POOL_PASSES)."""
    remote = None
    if kv_pool is not None:
        from attnsim.hwmodels.kv_pool import SharedPrefixPool

        bt = pool.block_tokens
        remote = SharedPrefixPool(kv_pool, kv_cache_bytes(pool.model, pool.sc, [bt]) / bt, bt, R)
    for npass in range(1, MAX_POOL_PASSES + 1):
        if npass > 1:
            remote.next_pass()
            pool.coster.usage.clear()
        runs = []
        for k in range(R):
            idx = np.arange(k, len(trace), R)
            if len(idx):
                sub = trace.subset(idx)
                runs.append(
                    (
                        idx,
                        simulate_pool(
                            pool,
                            sub.arrival_s,
                            sub.prompt_tokens,
                            sub.output_tokens,
                            sub.prefix_id,
                            sub.prefix_tokens,
                            labels=idx,
                            remote=remote,
                        ),
                    )
                )
        if remote is None or remote.converged():
            break
    facts = (
        None
        if remote is None
        else {
            "hardware": kv_pool.name,
            "instances": R,
            "passes": npass,
            "converged": remote.converged(),
            **remote.stats(),
        }
    )
    return runs, facts


def serve_colocated(system, model, sc, serving, trace, pool: Pool, kv_pool=None) -> dict:
    """One system serving the trace (data-parallel replicas get requests round-robin; with ``kv_pool``
    the replicas share that KV pool tier)."""
    pool.coster.usage.clear()  # the breakdown is this run's iterations (pools are shared between runs)
    R = system.spec.parallelism.replicas
    n = len(trace)
    cols = {k: np.full(n, np.nan) for k in ("first_token_s", "finish_s", "admit_s")}
    energy = np.zeros(n)
    pre = np.zeros(n, np.int64)
    hit = np.zeros(n, np.int64)
    total_e = 0.0
    area = 0.0
    stats, iters = [], 0
    runs, pool_facts = _replica_runs(pool, trace, R, kv_pool)
    if pool_facts is not None:
        total_e += pool_facts["pool_energy_j"]
    for idx, r in runs:
        cols["first_token_s"][idx] = r.first_token_s
        cols["finish_s"][idx] = r.finish_s
        cols["admit_s"][idx] = r.admit_s
        energy[idx] = r.energy_j
        pre[idx] = r.preemptions
        hit[idx] = r.prefix_hit_tokens
        total_e += r.busy_energy_j + r.idle_energy_j + r.swap_energy_j
        area += r.in_system_area
        stats.append(r.stats)
        iters += r.iterations
    req = request_table(
        trace.arrival_s,
        trace.prompt_tokens,
        trace.output_tokens,
        cols["first_token_s"],
        cols["finish_s"],
        cols["admit_s"],
        energy,
        pre,
        hit,
    )
    m = summarize(req, serving.slo, total_e, in_system_area=area)
    facts = _serving_facts(pool, stats)
    facts["iterations"] = iters
    if pool_facts is not None:  # requests served from a prefix cache: local (HBM) or the pool
        pool_facts["prefix_hit_rate_with_pool"] = (
            (facts["prefix_hits"] + pool_facts["pool_hits"]) / facts["prefix_lookups"]
            if facts["prefix_lookups"]
            else 0.0
        )
        facts["kv_pool"] = pool_facts
    if serving.kv.locality_dram and stats and stats[0]["sample_block_ids"]:
        facts["kv_layout_locality"] = layout_locality(pool, stats[0]["sample_block_ids"], serving.kv.locality_dram)
    return {
        "metrics": m,
        "serving": facts,
        "_requests": req,
        "breakdown": {"iterations": pool.coster.total().breakdown()},
    }


DISAGG_METRICS = ("kv_transfer_s_mean", "link_energy_j")  # beyond summarize()'s keys


def null_metrics(disagg: bool, replications: int) -> dict:
    """``metrics`` of a serving run that produced none (cannot_serve, does_not_fit): the keys an ok
    run of the same kind has, null."""
    from attnsim.studies.serve.metrics import metric_keys
    from attnsim.studies.serve.replicate import CI_METRICS

    keys = list(metric_keys()) + (list(DISAGG_METRICS) if disagg else [])
    if replications > 1:
        keys += [f"{k}_{b}" for k in CI_METRICS if k in keys for b in ("ci_low", "ci_high")]
    return dict.fromkeys(keys)


def serve_disagg(dspec, pre_pool: Pool, dec_pool: Pool, link, serving, trace) -> dict:
    for p in (pre_pool, dec_pool):
        if p.system.spec.parallelism.replicas != 1:
            raise ConfigError(
                f"disaggregation with data-parallel replicas is not modelled ({p.name} has "
                f"{p.system.spec.parallelism.replicas})",
                key="serving.disaggregation",
            )
    pre_pool.coster.usage.clear()
    dec_pool.coster.usage.clear()
    out = simulate_disagg(pre_pool, dec_pool, trace, link, dspec, labels=np.arange(len(trace)))
    req = request_table(
        trace.arrival_s,
        trace.prompt_tokens,
        trace.output_tokens,
        out["first_token_s"],
        out["finish_s"],
        out["admit_s"],
        out["energy_j"],
        out["preemptions"],
        out["prefix_hit_tokens"],
    )
    fin = out["finish_s"]
    m = summarize(
        req,
        serving.slo,
        out["total_energy_j"],
        in_system_area=mean_in_system_from_times(trace.arrival_s, fin, float(fin.max())) * float(fin.max()),
    )
    m.update({k: out[k] for k in DISAGG_METRICS})
    stats_p = [out["prefill"].stats]
    facts = {"prefill_pool": _serving_facts(pre_pool, stats_p)}
    if out["decode"] is not None:
        facts["decode_pool"] = _serving_facts(dec_pool, [out["decode"].stats])
    return {
        "metrics": m,
        "serving": facts,
        "_requests": req,
        "breakdown": {
            "prefill_pool": pre_pool.coster.total().breakdown(),
            "decode_pool": dec_pool.coster.total().breakdown(),
        },
    }


def serve_experiment(
    exp, serving: ServingSpec, progress=None, timeline: list | None = None, trace_requests: int | None = None
) -> list[dict]:
    """Run documents for every (model, scenario) x (colocated system | disaggregation pair); with
    ``serving.replications`` > 1 each is the combination of that many seeded traces (replicate.py).
    ``timeline`` (a list): trace events of every ok run's first replication are appended to it
    (attnsim.studies.timeline_serve; ``trace_requests`` requests drawn per run)."""
    systems = _systems(exp, serving)
    base = exp.source.parent if exp.source is not None else None
    seeds = replication_seeds(serving.trace.seed, serving.replications)
    docs, prepared = [], {}
    for mname, model in exp.models.items():  # every trace is built and checked before any simulation
        for scname, sc in exp.scenarios.items():
            traces = [
                build_request_trace(serving.trace.model_copy(update={"seed": s}), sc.prompt_len, sc.output_len, base)
                for s in seeds
            ]
            prepared[mname, scname] = traces, _context_note(exp, mname, scname, traces)
    for mname, model in exp.models.items():
        for scname, sc in exp.scenarios.items():
            traces, note = prepared[mname, scname]
            acc = None
            if serving.accuracy_proxy and serving.kv.policy.kind != "none":
                tr0 = traces[0]
                ctx = int(min(4096, max(64, np.mean(tr0.prompt_tokens + tr0.output_tokens // 2))))
                acc = accuracy_proxy(
                    serving.kv.policy, tokens=ctx, prompt=int(min(ctx, np.mean(tr0.prompt_tokens))), seed=exp.spec.seed
                )
            runs = []
            if serving.colocated:
                runs += [(s, None) for s in exp.systems]
            runs += [(None, d) for d in serving.disaggregation]
            pools: dict = {}
            for sname, d in runs:
                label = sname if d is None else (d.name or f"{d.prefill}->{d.decode}")
                reps = []
                for k, trace in enumerate(traces):
                    if timeline is None or k:
                        reps.append(_serve_one(sname, d, label, mname, model, sc, serving, trace, systems, exp, pools))
                        continue
                    from attnsim.studies.timeline_serve import DEFAULT_TRACE_REQUESTS, recording, serve_events

                    with recording() as rec:
                        reps.append(_serve_one(sname, d, label, mname, model, sc, serving, trace, systems, exp, pools))
                    if reps[-1]["status"] == "ok":
                        n_req = DEFAULT_TRACE_REQUESTS if trace_requests is None else trace_requests
                        timeline += serve_events(
                            reps[-1], rec, pid=1 + max((e["pid"] for e in timeline), default=0), max_requests=n_req
                        )
                doc = combine(reps, seeds, serving.confidence, exp.spec.seed)
                if acc is not None:
                    doc.setdefault("serving", {})["kv_policy_accuracy"] = acc
                if note:
                    doc["notes"] = [note]
                if doc.get("status") != "ok" and not doc.get("metrics"):
                    doc["metrics"] = null_metrics(d is not None, len(seeds))
                finalize_doc(doc)  # a non-finite metric makes the run an error, never `ok`
                docs.append(doc)
                if progress:
                    progress(doc)
    return docs


def _context_note(exp, mname: str, scname: str, traces) -> str | None:
    """The longest request (prompt + output tokens) against the model's context window
    (workloads.scenario.context_window): ConfigError if refused, else the run document's note."""
    from attnsim.workloads.scenario import context_window

    model, sc = exp.models[mname], exp.scenarios[scname]

    def longest(t):
        j = int(np.argmax(t.prompt_tokens + t.output_tokens))
        return int(t.prompt_tokens[j]), int(t.output_tokens[j])

    p, o = max((longest(t) for t in traces), key=sum)
    ok, note = context_window(model, sc, p + o)
    if not ok:
        raise ConfigError(
            f"expected prompt + output tokens <= {model.max_positions} (the positions of model {mname}, "
            f"{exp.tree.file_of('models', mname)}; or set scenarios.{scname}.beyond_max_position: allow), "
            f"got {p} + {o} = {p + o}",
            file=exp.tree.file_of("experiment"),
            key="serving.trace",
        )
    return note


def _serve_one(sname, d, label, mname, model, sc, serving, trace, systems, exp, pools) -> dict:
    """One run document: ``sname`` colocated (d is None) or disaggregation pair ``d`` on ``trace``."""
    doc = {"system": label, "model": mname, "scenario": scenario_doc(sc), "status": "ok"}
    try:
        if d is None:
            sysm = systems[sname]
            kvp = serving.kv_pool
            shared = _link(exp, kvp.hardware) if kvp is not None and (not kvp.systems or sname in kvp.systems) else None
            if shared is not None and sysm.spec.parallelism.replicas > shared.spec.hosts:
                raise ConfigError(
                    f"expected at most {shared.spec.hosts} hosts on the pool, got system {sname} with "
                    f"{sysm.spec.parallelism.replicas} replicas",
                    key="hosts",
                    file=exp.tree.file_of("hardware", ref_name(kvp.hardware)),
                )
            doc.update(
                serve_colocated(
                    sysm, model, sc, serving, trace, _pool(sysm, model, sc, serving, exp, pools), kv_pool=shared
                )
            )
        else:
            doc["disaggregation"] = d.model_dump()
            pp = _pool(systems[d.prefill], model, sc, serving, exp, pools)
            dp = _pool(systems[d.decode], model, sc, serving, exp, pools)
            doc.update(serve_disagg(d, pp, dp, _link(exp, d.link), serving, trace))
    except ServeError as e:
        doc["status"] = "cannot_serve"
        doc["error"] = str(e)
    except CapacityError as e:
        doc["status"] = "does_not_fit"
        doc["error"] = str(e)
    except ConfigError as e:  # a mapper's option / pool check while costing: name the system's file
        if e.file is not None or d is not None or str(e.key or "").split(".")[0] not in SYSTEM_KEYS:
            raise
        raise ConfigError(e.message, file=exp.tree.file_of("systems", sname), key=e.key) from None
    opt_outs = allow_notes(exp.tree)  # allow_out_of_range: keys accepted outside their plausible ranges
    if opt_outs:
        doc["notes"] = list(doc.get("notes") or []) + opt_outs
    return doc


def quick_pool(
    system: str = "h100_x1",
    model: str = "llama3-8b",
    scenario: Optional[dict] = None,
    serving: Optional[dict] = None,
    sets: Optional[list[str]] = None,
):
    """(Pool, Experiment, ServingSpec) from built-in names, for scripts, benches and tests."""
    import json

    from attnsim.sim.experiment import load_experiment
    from attnsim.workloads.scenario import Scenario

    base = [
        f"experiment.systems=[{system}]",
        f"experiment.models=[{model}]",
        "experiment.baseline=null",
        f"experiment.scenarios={{serve: {json.dumps(scenario or {})}}}",
    ]  # validated against the model as given
    exp = load_experiment(None, base + list(sets or ()))
    sv = validate(ServingSpec, serving or {}, prefix="serving")
    sc = validate(Scenario, {"name": "serve", **(scenario or {})})
    sysm = _systems(exp, sv)[system]
    coster = IterationCoster(
        sysm,
        exp.models[model],
        sc,
        sv.memo.context_bucket,
        sv.memo.token_bucket,
        sv.memo.relative_bucket,
        sv.memo.batch_relative_bucket,
    )
    swap = None
    if sv.scheduler.preemption == "swap":
        from attnsim.core.config import find_config

        swap = registry.build(load_yaml(find_config("hardware", sv.scheduler.swap_link)))
    return Pool(sysm, exp.models[model], sc, sv, coster, swap_link=swap), exp, sv
