"""Pipeline parallelism (attnsim/sim/pipeline.py): hand calculations from single-device costs, limits,
memory per stage, refusals.

Hand calculations: every trace row's time is (per-repeat time) x count, so the time of a stage that
runs k of a uniform model's L layers is (the layer ops' time of a pp = 1 run) x k / L, plus the
embedding (first stage) or final norm + LM head (last stage). The pp = 1 runs below use the batch of
one micro-batch, one decode step (output_len 2, exact) so that every number is one step's.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import get_policy
from attnsim.sim.engine import cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.pipeline import Layout, flow_shop, pipeline_step
from attnsim.sim.runner import run_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

NON_LAYER = ("embedding", "final_norm", "lm_head")


def _sets(system, model="llama2-7b", batch=8, prompt=64, out=2, par=None, extra=()):
    s = [
        f"experiment.systems=[{system}]",
        f"experiment.models=[{model}]",
        "experiment.baseline=null",
        f"experiment.scenarios={{s: {{batch_size: {batch}, prompt_len: {prompt}, output_len: {out}}}}}",
        "experiment.generation={mode: exact}",
    ]
    if par is not None:
        s.append(f"systems.{system}.parallelism={par}")
    return s + list(extra)


def run(system, also=(), **kw):
    """The run of ``system`` (``also``: more systems in the experiment, e.g. to load their hardware)."""
    sets = _sets(system, **kw)
    if also:
        sets.append(f"experiment.systems=[{', '.join((system,) + tuple(also))}]")
    exp = load_experiment("default", sets)
    return run_experiment(exp)[0]


def _stage_times(doc1, phase, stages, L):
    """Stage times from a pp = 1 breakdown (one micro-batch): layer ops scaled by the stage's layers."""
    by_op = doc1["breakdown"][phase]["time_s_by_op"]
    layer = sum(v for k, v in by_op.items() if k not in NON_LAYER)
    out = []
    for s, n in enumerate(stages):
        t = layer * n / L
        if s == 0:
            t += by_op["embedding"]
        if s == len(stages) - 1:
            t += by_op["final_norm"] + by_op["lm_head"]
        out.append(t)
    return out


def _link_time(nbytes, hw="nvlink3"):
    from attnsim.core.config import find_config, load_yaml

    spec = load_yaml(find_config("hardware", hw))
    if spec.get("allreduce") not in ("nccl", "custom"):  # the formula: latency + bytes / achieved bandwidth
        return spec["latency_us"] * 1e-6 + nbytes / (spec["bandwidth_gbps"] * 1e9 * spec.get("efficiency", 1.0))
    # NCCL send/recv (hwmodels/collectives.py): one step, the fastest protocol
    nc = spec["nccl"]
    bw = spec["bandwidth_gbps"] * 1e9 * nc["bus_efficiency"]
    return min(
        (nc["call_us"] + p["base_us"] + p["step_us"]) * 1e-6 + nbytes / (bw * p["bw_fraction"])
        for p in nc["protocols"].values()
    )


@pytest.mark.parametrize("pp,tp,stages", [(2, 4, [16, 16]), (4, 2, [8, 8, 8, 8]), (4, 2, [4, 12, 8, 8])])
def test_gpu_pipeline_matches_hand_calculation(pp, tp, stages):
    B, M = 8, pp
    lps = "" if len(set(stages)) == 1 else f", layers_per_stage: {stages}"
    doc = run("dgx_a100", batch=B, par=f"{{tp: {tp}, pp: {pp}{lps}}}")
    ref = run("dgx_a100", batch=B // M, par=f"{{tp: {tp}, pp: 1}}", extra=[f"systems.dgx_a100.devices.gpu.count={tp}"])
    assert doc["status"] == ref["status"] == "ok"
    h, act = 4096, 2.0
    # decode: per micro-batch stage times; activations (B/M tokens x hidden x 2 B / tp) between stages,
    # the token ids (4 B each) from the last stage back to the first
    t = _stage_times(ref, "decode_step", stages, 32)
    x = [_link_time(B // M * h * act / tp)] * (pp - 1) + [_link_time(B // M * 4)]
    period = max(M * max(t), sum(t) + sum(x))
    assert doc["metrics"]["tpot_s"] == pytest.approx(period, rel=1e-9)
    assert doc["metrics"]["decode_tokens_per_s"] == pytest.approx(B / period, rel=1e-9)
    assert doc["pipeline"]["decode_period_s"] == pytest.approx(period, rel=1e-9)
    # prefill: flow shop over identical micro-batches (prompt tokens of a micro-batch between stages)
    tp_ = _stage_times(ref, "prefill", stages, 32)
    xp = _link_time(B // M * 64 * h * act / tp)
    finish = np.zeros((M, pp))
    for m in range(M):
        for s in range(pp):
            ready = finish[m, s - 1] + xp if s else 0.0
            free = finish[m - 1, s] if m else 0.0
            finish[m, s] = max(ready, free) + tp_[s]
    assert doc["metrics"]["ttft_s"] == pytest.approx(finish[-1, -1], rel=1e-9)
    # steady state is set by the slowest stage (uneven split: the 12-layer stage)
    assert doc["pipeline"]["decode_max_group_load_s"] == pytest.approx(M * max(t), rel=1e-9)
    # breakdown shares sum to the step time
    bd = doc["breakdown"]["decode_step"]
    assert sum(bd["time_s_by_device"].values()) == pytest.approx(bd["time_s"], rel=1e-9)
    assert sum(bd["time_s_by_op"].values()) == pytest.approx(bd["time_s"], rel=1e-9)
    # energy: dynamic energy of every micro-batch and stage (= M x the pp = 1 micro-batch run's layers)
    assert bd["energy_j_by_op"]["mlp_up"] == pytest.approx(
        M * ref["breakdown"]["decode_step"]["energy_j_by_op"]["mlp_up"], rel=1e-9
    )


def test_microbatches_fill_the_pipeline():
    """Micro-batches of 2 requests each: decode throughput grows ~ with their number up to pp (the
    bubble shrinks), then stays flat (every device group is busy: period = M x stage time)."""
    tput, bubble = [], []
    for m in (1, 2, 4, 8):
        d = run("dgx_a100", batch=2 * m, par=f"{{tp: 2, pp: 4, microbatches: {m}}}")
        tput.append(d["metrics"]["decode_tokens_per_s"])
        bubble.append(d["pipeline"]["decode_bubble_fraction"])
    assert tput[1] / tput[0] == pytest.approx(2, rel=0.05) and tput[2] / tput[1] == pytest.approx(2, rel=0.05)
    assert tput[3] / tput[2] == pytest.approx(1, rel=0.05)
    assert bubble[0] == pytest.approx(0.75, abs=0.02)  # one micro-batch: 3 of 4 device groups idle
    assert bubble[0] > bubble[1] > bubble[2] >= 0.0
    # a fixed batch of memory-bound decodes: the chain of one micro-batch binds below pp, so splitting
    # the batch does not raise throughput (each request still gets one token per chain)
    fixed = [
        run("dgx_a100", batch=8, par=f"{{tp: 2, pp: 4, microbatches: {m}}}")["metrics"]["decode_tokens_per_s"]
        for m in (1, 2)
    ]
    assert fixed[1] == pytest.approx(fixed[0], rel=0.05)


def test_stages_per_device_sum_their_loads():
    B = 8
    doc = run("dgx_a100", batch=B, par="{tp: 4, pp: 4, stages_per_device: 2}")
    ref = run("dgx_a100", batch=B // 4, par="{tp: 4, pp: 1}", extra=["systems.dgx_a100.devices.gpu.count=4"])
    t = _stage_times(ref, "decode_step", [8] * 4, 32)
    load = max(4 * (t[0] + t[1]), 4 * (t[2] + t[3]))
    x = _link_time(B // 4 * 4096 * 2.0 / 4) + _link_time(B // 4 * 4)  # one hop between groups, one back
    assert doc["pipeline"]["device_groups"] == 2
    assert doc["metrics"]["tpot_s"] == pytest.approx(max(load, sum(t) + x), rel=1e-9)
    assert [s["device_group"] for s in doc["pipeline"]["stages"]] == [0, 0, 1, 1]


def test_named_pp_link_carries_the_activations():
    extra = [
        "systems.dgx_a100.links={nvlink: {hardware: nvlink3, connects: [gpu, gpu]}, "
        "slow: {hardware: pcie5_x16, connects: [gpu, gpu]}}"
    ]
    B = 8
    doc = run("dgx_a100", batch=B, par="{tp: 4, pp: 2, pp_link: slow}", extra=extra, also=("offload_host",))
    fast = run("dgx_a100", batch=B, par="{tp: 4, pp: 2}", extra=extra, also=("offload_host",))
    per = [_link_time(B // 2 * 4096 * 2.0 / 4, "pcie5_x16"), _link_time(B // 2 * 4, "pcie5_x16")]
    assert doc["pipeline"]["decode_transfer_time_s"] == pytest.approx(2 * sum(per), rel=1e-9)
    default = [_link_time(B // 2 * 4096 * 2.0 / 4, "nvlink3"), _link_time(B // 2 * 4, "nvlink3")]
    assert fast["pipeline"]["decode_transfer_time_s"] == pytest.approx(2 * sum(default), rel=1e-9)  # the pool's link
    # link energy: 2 micro-batches x (activations + token ids) x tp ranks x pJ/bit
    from attnsim.core.config import find_config, load_yaml

    pj = load_yaml(find_config("hardware", "pcie5_x16"))["energy_pj_per_bit"]
    e = 2 * (B // 2 * 4096 * 2.0 / 4 + B // 2 * 4) * 4 * 8 * pj * 1e-12
    assert doc["breakdown"]["decode_step"]["energy_j_by_device"]["link:slow"] == pytest.approx(e, rel=1e-9)


def test_capacity_per_stage():
    """Llama-2-70B (~138 GB) does not fit one 80 GB H100; two pipeline stages of 40 layers do."""
    one = run(
        "dgx_h100",
        model="llama2-70b",
        batch=1,
        prompt=32,
        par="{tp: 1, pp: 1}",
        extra=["systems.dgx_h100.devices.gpu.count=1"],
    )
    two = run(
        "dgx_h100",
        model="llama2-70b",
        batch=1,
        prompt=32,
        par="{tp: 1, pp: 2}",
        extra=["systems.dgx_h100.devices.gpu.count=2"],
    )
    assert one["status"] == "does_not_fit"
    assert two["status"] == "ok"
    groups = two["metrics"]["memory"]["gpu"]["per_device_group"]
    assert len(groups) == 2 and all(g["used_fraction"] < 1 for g in groups)
    four = run(
        "dgx_h100",
        model="llama2-70b",
        batch=1,
        prompt=32,
        par="{tp: 1, pp: 4, stages_per_device: 2}",
        extra=["systems.dgx_h100.devices.gpu.count=2"],
    )
    assert four["status"] == "ok"  # two stages per GPU hold what one stage of 40 layers held
    assert four["metrics"]["memory"]["gpu"]["per_device_group"][0]["weights_gb"] == pytest.approx(
        groups[0]["weights_gb"], rel=1e-9
    )
    big = run(
        "dgx_h100",
        model="llama2-70b",
        batch=1,
        prompt=32,
        par="{tp: 1, pp: 2, layers_per_stage: [70, 10]}",
        extra=["systems.dgx_h100.devices.gpu.count=2"],
    )
    assert big["status"] == "does_not_fit" and "pipeline device group 0" in big["error"]


def test_memory_per_stage_sums_to_the_total():
    one = run("dgx_a100", batch=4, prompt=512, par="{tp: 2, pp: 1}", extra=["systems.dgx_a100.devices.gpu.count=2"])
    doc = run("dgx_a100", batch=4, prompt=512, par="{tp: 2, pp: 4, layers_per_stage: [5, 9, 9, 9]}")
    st = doc["pipeline"]["stages"]
    w = sum(s["memory"]["gpu"]["weights_gb"] for s in st)
    kv = sum(s["memory"]["gpu"]["kv_gb"] for s in st)
    assert w == pytest.approx(one["metrics"]["memory"]["gpu"]["weights_gb"], rel=1e-12)
    assert kv == pytest.approx(one["metrics"]["memory"]["gpu"]["kv_gb"], rel=1e-12)
    assert st[1]["memory"]["gpu"]["kv_gb"] == pytest.approx(kv * 9 / 32, rel=1e-12)  # uniform layers


def test_one_stage_pipeline_is_cost_step_bit_for_bit():
    """The pipeline machinery with one stage and one micro-batch gives the plain step's numbers."""
    exp = load_experiment(
        "default", _sets("dgx_a100", batch=4) + ["experiment.systems=[dgx_a100, cxl_pnm, tiered_attacc, offload_host]"]
    )
    model = exp.models["llama2-7b"]
    sc = exp.scenarios["s"]
    for name, spec in exp.systems.items():
        system = build_system(spec, exp.tree.hardware, exp.tree.file_of)
        policy = get_policy(spec.mapper.policy)
        tp = spec.parallelism.tp
        ctx = sc.prompt_lens() + 1
        mb = {
            "weights": weight_bytes(model),
            "kv": kv_cache_bytes(model, sc, ctx),
            "kv_per_rank": kv_cache_bytes(model, sc, ctx, tp=tp),
        }

        def place(c, q, phase="decode"):
            return policy(
                build_trace(
                    model, sc.model_copy(update={"batch_size": len(c)}), phase, tp=tp, context_lens=c, query_tokens=q
                ),
                system,
                mb,
                spec.mapper.options,
            )

        layout = Layout([(0, model.num_layers)], [0], "auto", None, tp)
        for phase, c, q in (("decode", ctx, np.ones_like(ctx)), ("prefill", ctx - 1, ctx - 1)):
            got = pipeline_step(
                system, model, layout, c, q, lambda a, b, **_: place(a, b, phase), lambda p: cost_step(p, system)
            ).result
            want = cost_step(place(c, q, phase), system)
            assert got.time_s == want.time_s, name
            assert got.energy_j == want.energy_j, name
            assert got.time_s_by_op == want.time_s_by_op, name


def test_flow_shop_shares_a_device_group():
    t = np.array([[1.0, 2.0], [1.0, 2.0]])
    x = np.zeros((2, 2))
    _, finish = flow_shop(t, x, [0, 0])  # both stages on one device: 1+2+1+2
    assert finish[-1, -1] == 6.0
    _, finish = flow_shop(t, np.full((2, 2), 0.5), [0, 1])  # 1, 1+.5+2=3.5; 2, max(2.5, 3.5)+2
    assert finish.tolist() == [[1.0, 3.5], [2.0, 5.5]]


def test_cxl_pnm_pipeline_runs_and_divides_the_weights():
    # prefill on the PNM devices: host-GPU prefill under pp > 1 is refused (next test)
    on_pnm = ["systems.cxl_pnm.mapper.options.prefill_on_gpu=false"]
    one = run("cxl_pnm", batch=8, par="{tp: 8}", extra=on_pnm)
    two = run("cxl_pnm", batch=8, par="{tp: 4, pp: 2}", extra=on_pnm)
    assert one["status"] == two["status"] == "ok"
    # weights per PNM device: tp 8 -> 1/8 of the model; tp 4 x pp 2 -> 1/4 of half the layers (~1/8)
    w1 = one["metrics"]["memory"]["pnm"]["weights_gb"]
    w2 = [g["weights_gb"] for g in two["metrics"]["memory"]["pnm"]["per_device_group"]]
    assert sum(w2) / 2 == pytest.approx(w1, rel=1e-9)
    # two micro-batches of 4 on two groups: one token per period per request; a period is at least
    # each group's load
    p = two["pipeline"]
    assert p["decode_period_s"] >= p["decode_max_group_load_s"] > 0
    assert 0 <= p["decode_bubble_fraction"] < 0.5


def test_cxl_pnm_host_gpu_prefill_under_pp_is_refused():
    """Host-GPU prefill is tensor-parallel over a replica's host GPUs, not cut into stages: refused
    with pp > 1 (one line naming the GPU count) instead of costed wrongly."""
    with pytest.raises(ConfigError) as e:
        run("cxl_pnm", batch=8, par="{tp: 4, pp: 2}")
    assert e.value.key == "devices.gpu.count" and "pp = 2" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "sets,key",
    [
        ("{tp: 1, pp: 64}", "parallelism.pp"),
        ("{tp: 4, pp: 2, layers_per_stage: [10, 10]}", "parallelism.layers_per_stage"),
        ("{tp: 2, pp: 4, stages_per_device: 3}", "parallelism.stages_per_device"),
        ("{tp: 4, pp: 2, pp_link: nope}", "parallelism.pp_link"),
        ("{tp: 8, pp_link: nvlink}", "parallelism.pp_link"),
        ("{tp: 4, pp: 4}", "devices.gpu.count"),
        ("{tp: 4, pp: 2, microbatches: 0}", "parallelism.microbatches"),
    ],
)
def test_bad_pipeline_settings_are_refused(sets, key):
    with pytest.raises(ConfigError) as e:
        exp = load_experiment(
            "default",
            _sets("dgx_a100", par=sets, extra=(["systems.dgx_a100.devices.gpu.count=64"] if "64" in sets else [])),
        )
        run_experiment(exp)
    msg = str(e.value)
    assert key in msg and "\n" not in msg


def test_serve_pipeline_equals_run():
    """Four equal requests arriving together on tp 4 x pp 2: the serving iterations are the run's steps
    (prefill flow shop over 2 micro-batches, then decode periods), so TTFT and TPOT agree exactly."""
    from attnsim.sim.experiment import GenerationSpec
    from attnsim.sim.runner import simulate_generation
    from attnsim.studies.serve.run import quick_pool
    from attnsim.studies.serve.scheduler import simulate_pool

    P, O = 64, 6
    pool, _, _ = quick_pool(
        "dgx_a100",
        "llama2-7b",
        {"prompt_len": P, "output_len": O, "batch_size": 4},
        serving={"memo": {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}},
        sets=["systems.dgx_a100.parallelism={tp: 4, pp: 2}"],
    )
    r = simulate_pool(pool, np.zeros(4), np.full(4, P), np.full(4, O))
    ref = simulate_generation(pool.system, pool.model, pool.sc, GenerationSpec(mode="exact"))
    assert r.first_token_s == pytest.approx(np.full(4, ref["metrics"]["ttft_s"]), rel=1e-12)
    tpot = (r.finish_s - r.first_token_s) / (O - 1)
    assert tpot == pytest.approx(np.full(4, ref["metrics"]["tpot_s"]), rel=1e-12)
    # the KV capacity of a replica counts both device groups' free memory (each holds half the layers)
    one, _, _ = quick_pool(
        "dgx_a100",
        "llama2-7b",
        {"prompt_len": P, "output_len": O},
        sets=["systems.dgx_a100.parallelism={tp: 4}", "systems.dgx_a100.devices.gpu.count=4"],
    )
    cap2 = pool.coster.kv_capacity_per_rank_bytes(0.9)[0]
    cap1 = one.coster.kv_capacity_per_rank_bytes(0.9)[0]
    w = one.coster.weights / 4
    assert cap2 == pytest.approx(2 * (0.9 * 85.9e9 - w / 2), rel=1e-6)
    assert cap1 == pytest.approx(0.9 * 85.9e9 - w, rel=1e-6)


PIN_LAYOUT = "hardware.attacc_hbm3_pim_5stack.channels_per_item=1"


def test_attacc_pipeline_conserves_pim_work():
    """AttAcc (GPU + HBM-PIM) on tp 4 x pp 2 vs tp 4 alone, same batch: the PIM attention and its
    GPU<->PIM transfers are the same work split over stages and micro-batches (equal energy); each
    device group's PIM devices hold half the KV; the GPUs re-read their stage's weights once per
    micro-batch (more FC energy)."""
    # one PIM layout for both (channels_per_item pinned): with the search, the items of a micro-batch on free
    # channels may pick another split than the whole batch does, which is different PIM work, not the same split
    a = run("attacc", batch=8, par="{tp: 4, pp: 2}", extra=[PIN_LAYOUT])
    b = run(
        "attacc",
        batch=8,
        par="{tp: 4}",
        extra=["systems.attacc.devices.gpu.count=4", "systems.attacc.devices.pim.count=4", PIN_LAYOUT],
    )
    assert a["status"] == b["status"] == "ok"
    ea, eb = (d["breakdown"]["decode_step"]["energy_j_by_device"] for d in (a, b))
    assert ea["pim"] == pytest.approx(eb["pim"], rel=1e-9)
    assert ea["link:gpu_pim"] == pytest.approx(eb["link:gpu_pim"], rel=1e-9)
    assert ea["gpu"] > 1.5 * eb["gpu"]
    kv = [g["kv_gb"] for g in a["metrics"]["memory"]["pim"]["per_device_group"]]
    assert kv == pytest.approx([b["metrics"]["memory"]["pim"]["kv_gb"] / 2] * 2, rel=1e-12)
    p = a["pipeline"]
    assert p["decode_period_s"] == pytest.approx(max(p["decode_max_group_load_s"], p["decode_chain_s"]), rel=1e-12)


def test_subbatch_pipelining_inside_a_stage():
    """attacc's sub-batch pipelining runs inside each stage's micro-batch (cost_step_pipelined per stage)."""
    on = run("attacc", batch=8, par="{tp: 4, pp: 2}", extra=["systems.attacc.mapper.options.pipeline=true", PIN_LAYOUT])
    off = run("attacc", batch=8, par="{tp: 4, pp: 2}", extra=[PIN_LAYOUT])  # one layout (see above)
    assert on["status"] == off["status"] == "ok"
    assert on["metrics"]["tpot_s"] != off["metrics"]["tpot_s"]
    e_on, e_off = (d["breakdown"]["decode_step"]["energy_j_by_device"]["pim"] for d in (on, off))
    assert e_on == pytest.approx(e_off, rel=1e-9)  # the same PIM work, overlapped differently


def test_timeline_shows_stages_per_device_group():
    exp = load_experiment("default", _sets("dgx_a100", batch=8, par="{tp: 4, pp: 4, stages_per_device: 2}"))
    events: list = []
    doc = run_experiment(exp, timeline=events)[0]
    pre = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert len(pre) == 4 * 4  # 4 micro-batches x 4 stages
    assert max(e["ts"] + e["dur"] for e in pre) * 1e-6 == pytest.approx(doc["metrics"]["ttft_s"], rel=1e-9)
    for tid in {e["tid"] for e in pre}:  # a device group runs one (micro-batch, stage) at a time
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in pre if e["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:]))


def test_pp_tp_replicas_compose():
    """tp 2 x pp 2 x 2 replicas on 8 GPUs, batch 8: each replica pipelines its 4 requests exactly as one
    tp 2 x pp 2 system serving 4 does; the system makes twice the tokens per second."""
    both = run("dgx_a100", batch=8, par="{tp: 2, pp: 2, replicas: 2}")
    one = run("dgx_a100", batch=4, par="{tp: 2, pp: 2}", extra=["systems.dgx_a100.devices.gpu.count=4"])
    assert both["metrics"]["tpot_s"] == pytest.approx(one["metrics"]["tpot_s"], rel=1e-12)
    assert both["metrics"]["ttft_s"] == pytest.approx(one["metrics"]["ttft_s"], rel=1e-12)
    assert both["metrics"]["decode_tokens_per_s"] == pytest.approx(2 * one["metrics"]["decode_tokens_per_s"], rel=1e-12)
    assert both["pipeline"]["microbatches"] == 2


def test_paired_pim_pool_count_follows_the_pipeline():
    with pytest.raises(ConfigError) as e:
        run_experiment(
            load_experiment(
                "default", _sets("attacc", par="{tp: 4, pp: 2}", extra=["systems.attacc.devices.pim.count=4"])
            )
        )
    msg = str(e.value)
    assert "devices.pim.count" in msg and "tp x pp / stages_per_device x replicas = 4 x 2 / 1 x 1 = 8" in msg


def test_stage_memory_of_sliding_window_and_tied_embeddings():
    """Gemma-2-9B (21 local layers keeping 4,096 tokens, 21 global; tied embeddings): a stage of one local
    layer holds 4096 / (21 x (4096 + ctx)) of the KV; the last stage holds a copy of the embedding matrix."""
    P, O = 8000, 2
    one = run(
        "dgx_a100",
        model="gemma2-9b",
        batch=2,
        prompt=P,
        out=O,
        par="{tp: 1}",
        extra=["systems.dgx_a100.devices.gpu.count=1"],
    )
    d = run(
        "dgx_a100",
        model="gemma2-9b",
        batch=2,
        prompt=P,
        out=O,
        par="{tp: 1, pp: 2, layers_per_stage: [1, 41]}",
        extra=["systems.dgx_a100.devices.gpu.count=2"],
    )
    kv = one["metrics"]["memory"]["gpu"]["kv_gb"]
    st = d["pipeline"]["stages"]
    assert st[0]["memory"]["gpu"]["kv_gb"] == pytest.approx(kv * 4096 / (21 * (4096 + P + O)), rel=1e-12)
    assert sum(s["memory"]["gpu"]["kv_gb"] for s in st) == pytest.approx(kv, rel=1e-12)
    w = sum(s["memory"]["gpu"]["weights_gb"] for s in st) - one["metrics"]["memory"]["gpu"]["weights_gb"]
    assert w == pytest.approx(256000 * 3584 * 2 / 1e9, rel=1e-12)  # vocab x hidden x bf16
