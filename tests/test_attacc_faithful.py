"""AttAcc as AttAcc built it: pipeopt (head-granular pipelining), ffopt (FFN split GPU / PIM), the
sub-batch ``pipeline`` kept apart, and one AttAcc system per GPU generation (mapper/attacc_overlap.py)."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.attacc_overlap import ffn_weight_bytes
from attnsim.mapper.base import get_policy, model_totals, validate_options
from attnsim.sim.engine import cost_rows, cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

LAYERS = 4  # GPT-3-175B shapes, fewer layers (per-layer mechanisms; keeps the test fast)


def _exp(systems, batch, extra=()):
    return load_experiment(
        "attacc_gpt3_175b",
        [
            f"experiment.systems={systems}",
            "experiment.baseline=null",
            f"models.gpt3-175b.num_layers={LAYERS}",
            f"experiment.scenarios={{s: {{batch_size: {batch}, prompt_len: 2048, output_len: 4, "
            f"beyond_max_position: allow}}}}",
            "experiment.generation={mode: exact}",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def a100():
    exp = _exp("[attacc]", 16)
    return exp, build_system(exp.systems["attacc"], exp.tree.hardware, exp.tree.file_of)


def _plan(exp, system, options, batch=16, phase="decode", out_len=4):
    model = exp.models["gpt3-175b"]
    sc = exp.scenarios["s"].model_copy(update={"batch_size": batch})
    ctx = sc.prompt_lens() + 1
    tr = build_trace(model, sc, phase, tp=8, context_lens=ctx if phase == "decode" else None)
    final = sc.prompt_lens() + out_len
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, final),
        "kv_per_rank": kv_cache_bytes(model, sc, final, tp=8),
    }
    return tr, get_policy("attacc")(tr, system, mb, options)


@pytest.mark.parametrize("batch", [1, 16, 64])
def test_pipeopt_between_the_max_bound_and_no_overlap_and_equals_the_artefact_formula(a100, batch):
    exp, system = a100
    _, base = _plan(exp, system, {}, batch)
    _, piped = _plan(exp, system, {"pipeopt": True}, batch)
    t0, t1 = cost_step(base, system), cost_step(piped, system)
    # hand formula of the artefact (system.py _pipeline, level=True) from the rows' own times:
    # per layer max(FC, X, A) + r (FC + X + A - max), r = 1 / heads per rank
    row_t = cost_rows(piped, system)[0]
    r = 1.0 / piped.trace.meta["heads_per_rank"]
    assert r == pytest.approx(1 / 12)  # GPT-3: 96 heads over 8 ranks
    saved_hand = 0.0
    for st in np.unique(piped.stage[piped.stage >= 0]):
        rows = piped.stage == st
        per = [row_t[rows & (piped.device == d)].sum() for d in np.unique(piped.device[rows])]
        assert len(per) == 3  # GPU FCs, GPU<->PIM transfers, PIM attention
        saved_hand += sum(per) - (max(per) + r * (sum(per) - max(per)))
    assert t1.time_s == pytest.approx(t0.time_s - saved_hand, rel=1e-12)
    assert t1.time_s < t0.time_s
    no_fill = _plan(exp, system, {"pipeopt": True}, batch)[1]
    no_fill.stage_exposed = {}
    assert t1.time_s > cost_step(no_fill, system).time_s  # never faster than the plain max() bound
    # no weight read twice, no batch split: bytes and energy are those of no option
    assert t1.bytes_by_device == pytest.approx(t0.bytes_by_device, rel=1e-12)
    assert t1.energy_j_by_component == pytest.approx(t0.energy_j_by_component, rel=1e-12)
    assert piped.pipeline_subbatches == 1


def test_ffopt_ffn_time_matches_the_balanced_split_formula(a100):
    """T_ffn = G (P + L) / (G + P): the share f = (G - L) / (G + P) on the PIM stacks makes the GPU share
    (1 - f) G as long as the PIM share f P plus the transfers L (G, P: the whole FFN on the GPU / on the
    PIM by their device models; the artefact's W / (BW_gpu + BW_pim / B) when L = 0)."""
    exp, system = a100
    tr, base = _plan(exp, system, {}, 16)
    _, ff = _plan(exp, system, {"ffopt": True}, 16)
    rows = np.nonzero(np.isin(tr["op"], ("mlp_up", "mlp_down")))[0]
    cnt = tr["count"][rows]
    G = float(np.sum(system.pools["gpu"].model.cost(tr, rows).time_s * cnt))
    P = float(np.sum(system.pools["pim"].model.cost(tr, rows).time_s * cnt))
    t = cost_rows(ff, system)[0]
    link = ff.device == "link:gpu_pim"
    ffn_x = link & np.char.startswith(ff.trace["op"].astype(str), "pim_send_ffn")
    ffn_x |= link & np.char.startswith(ff.trace["op"].astype(str), "pim_recv_ffn")
    L = float(t[ffn_x].sum())
    assert 0 < L < 0.05 * G
    stages = np.unique(ff.stage[(ff.stage >= 0) & (ff.stage % 2 == 1)])
    assert len(stages) == 1  # one layer group
    st = ff.stage == stages[0]
    gpu_side = float(t[st & (ff.device == "gpu")].sum())
    pim_side = float(t[st & (ff.device == "pim")].sum()) + L
    stage_t = max(gpu_side, pim_side)
    hand = G * (P + L) / (G + P)
    # both devices are sub-linear in their share (the PIM maps outputs over 80 channels in whole rows,
    # the GPU has per-kernel costs), so the linear balance is a lower bound; the split lands near it
    assert 0.99 * hand <= stage_t <= 1.15 * hand
    assert abs(gpu_side - pim_side) < 0.15 * stage_t
    assert stage_t < min(G, P + L)
    # the artefact's form at these batches: PIM reads its share once per request (16 passes), so
    # P / G is roughly batch x GPU bandwidth / PIM bandwidth (within the two models' efficiencies)
    bw_ratio = system.pools["pim"].model.peak_bandwidth_bytes_per_s / 3352e9
    assert 0.5 < (P / G) / (16 / bw_ratio) < 2.0
    assert cost_step(ff, system).time_s < cost_step(base, system).time_s


def test_ffopt_energy_lands_on_the_devices_that_read_the_bytes(a100):
    exp, system = a100
    tr, base = _plan(exp, system, {}, 16)
    _, ff = _plan(exp, system, {"ffopt": True}, 16)
    s0, s1 = cost_step(base, system), cost_step(ff, system)
    w_ffn = ffn_weight_bytes(tr)  # one rank, all layers
    f = ff.memory[1].weights_bytes / w_ffn
    assert 0.2 < f < 0.8
    # the GPU reads (1 - f) of the FFN weights: its HBM bytes drop by f x W (activations shift a little)
    assert s0.bytes_by_device["gpu:hbm"] - s1.bytes_by_device["gpu:hbm"] == pytest.approx(f * w_ffn, rel=0.02)
    # the PIM units read their share from the banks (stored there once) ...
    extra = s1.bytes_by_device["pim:dram_bank"] - s0.bytes_by_device["pim:dram_bank"]
    assert extra == pytest.approx(f * w_ffn, rel=1e-6)
    # ... once per request: 16 passes at least at the 0.55 pJ/bit bank access energy (8 ranks); the GPU
    # saves at least its HBM read energy (>= 3 pJ/bit) of the share it no longer reads
    bits = f * w_ffn * 8 * 8
    assert s1.energy_j_by_device["pim"] - s0.energy_j_by_device["pim"] >= 16 * bits * 0.55e-12
    assert s0.energy_j_by_device["gpu"] - s1.energy_j_by_device["gpu"] >= bits * 3.0e-12
    # the two FFN transfers per layer (input to the PIM, partial output back) are charged to the link
    h, b = 12288, 16
    x_j = 2 * b * h * 2 * LAYERS * 8 * 1.3e-12 * 8  # bytes x pJ/bit x 8 bits, 8 ranks
    assert s1.energy_j_by_device["link:gpu_pim"] - s0.energy_j_by_device["link:gpu_pim"] == pytest.approx(x_j, rel=1e-9)
    # the model's own work is unchanged by the split
    before, after = model_totals(tr), model_totals(ff.trace, ff.added)
    for k in before:
        assert after[k] == pytest.approx(before[k], rel=1e-9), k


def test_ffopt_places_the_pim_share_in_the_stacks_and_respects_their_capacity():
    exp = _exp("[attacc]", 64, ["models.gpt3-175b.num_layers=96"])
    system = build_system(exp.systems["attacc"], exp.tree.hardware, exp.tree.file_of)
    tr, ff = _plan(exp, system, {"ffopt": True}, 64, out_len=128)
    pim = ff.memory[1]
    # GPT-3 at batch 64: the KV leaves ~3.8 GB of the 85.9 GB board; the balanced share (~17 %) would not fit
    assert pim.kv_bytes > 0.95 * pim.capacity_bytes
    free = pim.capacity_bytes - pim.kv_bytes
    assert pim.fits and 0.7 * free < pim.weights_bytes <= free  # capped (at a whole-row step of the PIM mapping)
    assert pim.weights_bytes < 0.15 * ffn_weight_bytes(tr)
    assert ff.memory[0].weights_bytes == pytest.approx(weight_bytes(exp.models["gpt3-175b"], "fp16") / 8)
    # the prefill plan places the same share (the runner reports and checks the prefill plan's memory)
    _, pre = _plan(exp, system, {"ffopt": True}, 64, phase="prefill", out_len=128)
    assert pre.memory[1].weights_bytes == pytest.approx(pim.weights_bytes, rel=1e-12)
    assert set(pre.device) <= {"gpu", "link", "link:gpu_pim"}  # prefill FFN stays on the GPUs


def test_options_refused_where_they_would_not_be_read():
    for opt in ("pipeopt", "ffopt"):
        with pytest.raises(ConfigError) as e:
            validate_options("attacc", {"pipeline": True, opt: True}, file="sys.yaml")
        assert str(e.value).startswith(f"sys.yaml: mapper.options.{opt}: not used unless pipeline: false")
    assert validate_options("attacc", {"pipeopt": True, "ffopt": True}, file="s.yaml")["pipeline"] is False
    with pytest.raises(ConfigError, match="mapper.options.pipeopt: expected true or false"):
        validate_options("attacc", {"pipeopt": 1}, file="s.yaml")


def test_dgx_attacc_beats_attacc_and_each_generation_runs():
    exp = _exp("[attacc, attacc_opt, attacc_h100, attacc_h200]", 16)
    docs = run_experiment(exp)
    exp64 = _exp("[attacc, attacc_opt]", 64)
    docs += run_experiment(exp64)
    got = {}
    for d in docs:
        assert d["status"] == "ok", d.get("error")
        m = d["metrics"]
        assert m["fits"] and np.isfinite(m["decode_tokens_per_s"]) and m["decode_tokens_per_s"] > 0
        got[(d["system"], d["scenario"]["batch_size"])] = m["decode_tokens_per_s"]
    for b in (16, 64):
        assert got[("attacc_opt", b)] > got[("attacc", b)]
    # newer GPUs with their own AttAcc boards are faster than the A100 one
    assert got[("attacc_h200", 16)] > got[("attacc_h100", 16)] > got[("attacc_opt", 16)]


def test_pipeline_parallel_stage_plans_keep_the_head_pipeline_fill(a100):
    from attnsim.sim.pipeline import stage_plan

    exp, system = a100
    _, piped = _plan(exp, system, {"pipeopt": True}, 16)
    part = stage_plan(piped, exp.models["gpt3-175b"], 0, LAYERS // 2, True, False)
    assert part.stage_exposed == piped.stage_exposed and part.stage_exposed


def test_pipeopt_items_are_query_heads_under_gqa():
    """Llama-2-70B on 8 ranks: 1 KV head, 8 query heads per rank; the PIM passes over the KV head once
    per query head, so the pipeline has 8 items (fill and drain 1/8), as the artefact's 1 / (heads / GPUs)."""
    exp = load_experiment(
        "attacc_gpt3_175b",
        [
            "experiment.systems=[attacc_opt]",
            "experiment.baseline=null",
            "experiment.models=[llama2-70b]",
            "models.llama2-70b.num_layers=2",
            "experiment.scenarios={s: {batch_size: 4, prompt_len: 512, output_len: 2}}",
        ],
    )
    system = build_system(exp.systems["attacc_opt"], exp.tree.hardware, exp.tree.file_of)
    model, sc = exp.models["llama2-70b"], exp.scenarios["s"]
    tr = build_trace(model, sc, "decode", tp=8, context_lens=sc.prompt_lens() + 1)
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 2),
        "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 2, tp=8),
    }
    plan = get_policy("attacc")(tr, system, mb, {"pipeopt": True})
    assert tr.meta["kv_heads_per_rank"] == 1 and tr.meta["heads_per_rank"] == 8
    assert set(plan.stage_exposed.values()) == {1 / 8}


def test_fc_on_pim_takes_precedence_over_ffopt_at_its_batches(a100):
    exp, system = a100
    opts = {"ffopt": True, "fc_on_pim_max_batch": 4}
    _, small = _plan(exp, system, opts, 2)
    assert small.stage is None or not (small.stage >= 0).any()  # every FC on the PIM: nothing to split
    assert (small.device[small.trace["cls"] == "matmul"][:-1] == "pim").all()  # lm_head (no layer) stays
    _, big = _plan(exp, system, opts, 16)
    _, ff = _plan(exp, system, {"ffopt": True}, 16)
    # every weight is already in the stacks (fc_on_pim_max_batch > 0): the FFN share adds no bytes
    assert big.memory[1].weights_bytes == pytest.approx(big.memory[0].weights_bytes)
    assert (big.device == "pim").sum() == (ff.device == "pim").sum()
