"""NeuPIMs as its artefact builds it: Newton commands, their lowering, tFAW-bound G_ACT, single vs dual row
buffer, softmax on the NPU, the 32-channel HBM2-PIM preset (casys-kaist/NeuPIMs f299af3)."""

import numpy as np
import pytest
from dram_streams import random_stream

from attnsim.cli.isa import main as isa_main
from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels.dram import Op, cmds_from, expand_macros, load_dram_spec, raw_run, run_commands
from attnsim.hwmodels.dram.reference_oracle import reference_run
from attnsim.hwmodels.rowbuffer import interleave, npu_stream, run_shared
from attnsim.hwmodels.system import build_system
from attnsim.isa import get_isa
from attnsim.isa.base import assemble, decode, disassemble, encode
from attnsim.isa.lower import ENGINE_CODES, Lowered
from attnsim.isa.lower_newton import artefact_load, assign_requests, channel_program, lower_newton, newton_commands
from attnsim.mapper.base import get_policy
from attnsim.sim.experiment import load_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

NEWTON = get_isa("newton")
SPEC = load_dram_spec("neupims_hbm2")


def pim(**over):
    hw = load_yaml(find_config("hardware", "neupims_hbm2_pim"))
    hw.update(over)
    return registry.build(hw, file="neupims_hbm2_pim")


DEV = pim()


def test_encoder_and_assembler_round_trip(tmp_path):
    text = (
        "GWRITE ch=3, bursts=32\nBARRIER 3\nGACT 3, 1, 2, 40000\nCOMP ch=3, repeat=8\nREADRES 3, 2\n"
        "PIM_PRECHARGE 3\nRD ch=3, rank=0, bg=1, bank=3, row=17, col=0, repeat=16\nWR 3, 1, 0, 0, 9, 2\n"
    )
    prog = assemble(NEWTON, text, file="p.s")
    assert prog.mnemonics() == ["GWRITE", "BARRIER", "GACT", "COMP", "READRES", "PIM_PRECHARGE", "RD", "WR"]
    assert prog["row"][2] == 40000 and prog["bg"][2] == 2 and prog["repeat"][3] == 8
    words = encode(prog)
    assert len(words) == 8 * 8  # 64-bit words
    assert decode(NEWTON, words) == prog and encode(decode(NEWTON, words)) == words
    assert assemble(NEWTON, disassemble(prog)) == prog
    with pytest.raises(ConfigError, match="line 1: GACT: operand bg"):
        assemble(NEWTON, "GACT 0, 0, 4, 1\n", file="p.s")  # 4 bank groups: 2 bits
    src, out, txt = tmp_path / "p.s", tmp_path / "p.bin", tmp_path / "q.s"
    src.write_text(text)
    assert isa_main(["asm", "--isa", "newton", str(src), "-o", str(out)]) == 0
    assert isa_main(["disasm", "--isa", "newton", str(out), "-o", str(txt)]) == 0
    assert assemble(NEWTON, txt.read_text()) == prog


def test_lowering_counts_by_hand():
    org, pu = DEV.org, DEV.pu
    t, heads, dh = 64, 8, 128  # one request, 8 heads of 128 (GPT-3 7B at TP 4)
    s = channel_program([t], "score", org, pu, heads=heads, dhead=dh, group=1, elem_bytes=2.0).counts()
    # E = 1024 elements over 512-element rows: 2 chunks (GWRITEs), ceil(64 / 32 banks) = 2 tiles each;
    # a tile opens its row in 2 ranks x 4 BGs and runs, per head of the chunk (4), ceil(128 / 16) = 8 COMPs + READRES
    assert s["GWRITE"] == 2 and s["PIM_PRECHARGE"] == 4 and s["GACT"] == 4 * 8 and s["READRES"] == 4 * 4
    prog = channel_program([t], "score", org, pu, heads=heads, dhead=dh, group=1, elem_bytes=2.0)
    comps = int(prog["repeat"][prog.where("COMP")].sum())
    assert comps == t * heads * dh // (org.banks * pu.macs_per_command) == 128  # every MAC once
    assert int(prog["bursts"][prog.where("GWRITE")].sum()) * 32 == heads * dh * 2  # the query, fp16
    assert int(prog["bursts"][prog.where("READRES")].sum()) * 32 == 16 * org.banks * 2  # a score per bank and READRES
    c = channel_program([t], "context", org, pu, heads=heads, dhead=dh, group=1, elem_bytes=2.0)
    # per head: one chunk of <= 512 tokens (GWRITE of 64 probabilities), ceil(128 / 32) = 4 tiles of ceil(64 / 16) COMPs
    assert c.counts()["GWRITE"] == heads and c.counts()["GACT"] == heads * 4 * 8
    assert (
        int(c["repeat"][c.where("COMP")].sum()) == heads * 4 * 4 == t * heads * dh // (org.banks * pu.macs_per_command)
    )
    assert int(c["bursts"][c.where("GWRITE")].sum()) * 32 == heads * t * 2
    e = newton_commands(prog, org)  # G_ACT -> ACTBG (one per rank and BG), COMP -> MACAB, GWRITE/READRES -> BUF
    assert np.count_nonzero(e["op"] == ENGINE_CODES["ACTBG"]) == 32
    assert int(e["repeat"][e["op"] == ENGINE_CODES["MACAB"]].sum()) == comps
    with pytest.raises(ConfigError, match="no softmax unit"):
        lower_newton("softmax", [t], heads=8, dhead=dh, group=1, elem_bytes=2.0, n_channels=32, org=org, pu=pu)


def test_channel_assignment_greedy_and_round_robin():
    lens = [50, 40, 30, 20, 10, 5]
    rr = dict(assign_requests(lens, 2, "round_robin"))
    assert rr == {(50, 30, 10): 1, (40, 20, 5): 1}
    gr = sorted(sum(w) for w, _ in assign_requests(lens, 2, "greedy"))  # LPT: 50+20+5 / 40+30+10
    assert gr == [75, 80]
    explicit = dict(assign_requests(lens, 3, [2, 0, 2, 1, 0, 2]))  # request i on channel list[i], in order
    assert explicit == {(50, 30, 5): 1, (40, 10): 1, (20,): 1}
    with pytest.raises(ConfigError, match="channel_assignment: expected one channel in \\[0, 2\\] per request \\(6"):
        assign_requests(lens, 3, [0, 1, 2])
    with pytest.raises(ConfigError, match="channel_assignment"):
        assign_requests(lens, 3, [0, 1, 2, 3, 0, 1])  # channel 3 of 3
    with pytest.raises(ConfigError, match="channel_assignment"):
        pim(isa="attacc", dram="hbm3_5200_pim", channel_assignment="round_robin")


def test_channel_assignment_online_by_hand():
    # in order, each to the least loaded channel so far (lowest channel on ties), load = t:
    # 10 -> ch0, 20 -> ch1, 30 -> ch0 (10 < 20): 40 / 20, where the offline greedy (30; 20 + 10) gives 30 / 30
    assert dict(assign_requests([10, 20, 30], 2, "online")) == {(10, 30): 1, (20,): 1}
    assert sorted(sum(w) for w, _ in assign_requests([10, 20, 30], 2, "greedy")) == [30, 30]
    # 50 -> 0 (tie), 40 -> 1, 30 -> 1 (40 < 50), 20 -> 0 (50 < 70), 10 -> 0 (70 = 70: lowest), 5 -> 1 (75 < 80)
    assert dict(assign_requests([50, 40, 30, 20, 10, 5], 2, "online")) == {(50, 20, 10): 1, (40, 30, 5): 1}
    # the artefact's estimate_mha_latency (Scheduler.cc) for GPT-3 7B at TP 4 (8 heads x 128 per device), 300
    # tokens, 1 KB rows of 512 fp16, 32 banks: K 2 chunks x 100 + 2 x ceil(300/32) = 10 tiles x 184 = 3,880;
    # V 8 heads x ceil(300/512) = 8 chunks x 100 + 8 x ceil(128/32) = 4 tiles x 184 = 6,688
    assert artefact_load(300, DEV.org, heads=8, dhead=128, elem_bytes=2.0) == 3880 + 6688


def _artefact_online(lens, k, heads, dhead):
    """casys-kaist/NeuPIMs f299af3 trace-generator/get_distributions.py _channel_load_balancing, one request per
    arrival, with Scheduler.cc estimate_mha_latency (page 512 fp16, 32 banks, GWRITE 100, GEMV 184), re-written
    slowly from the artefact's code."""
    import math

    def est(seq_len):
        lat, eff = 0, heads * dhead
        chunks, tiles = math.ceil(eff / 512), math.ceil(seq_len / 32)
        lat += chunks * 100 + chunks * tiles * 184
        chunks, tiles = math.ceil(seq_len / 512) * heads, math.ceil(dhead / 32)
        return lat + chunks * 100 + chunks * tiles * 184

    loads, chans = [0] * k, [[] for _ in range(k)]
    for t in lens:
        for req in reversed(sorted([t])):  # each arrival's new requests, longest first
            i = min(range(k), key=lambda i: loads[i])
            loads[i] += est(req)
            chans[i].append(req)
    return chans


def test_channel_assignment_online_equals_the_artefacts_algorithm():
    from collections import Counter

    rng = np.random.default_rng(11)
    for n, k in ((512, 32), (70, 8), (5, 32)):
        lens = [int(x) for x in rng.integers(1, 2049, n)]
        load = lambda t: artefact_load(t, DEV.org, heads=8, dhead=128, elem_bytes=2.0)  # noqa: E731
        want = Counter(tuple(c) for c in _artefact_online(lens, k, 8, 128) if c)
        assert dict(assign_requests(lens, k, "online", load)) == dict(want)
    # through the lowering: one program per distinct channel, the placement recorded
    low = lower_newton(
        "score",
        lens,
        heads=8,
        dhead=128,
        group=1,
        elem_bytes=2.0,
        n_channels=32,
        org=DEV.org,
        pu=DEV.pu,
        assignment="online",
    )
    assert low.meta["assignment"] == "online" and int(low.multiplicity.sum()) == 5


def test_stage_schedule_fill_and_drain_by_hand():
    from attnsim.sim.engine import stage_schedule_s

    ph = ((1.0, 5.0, 3.0), (2.0, 4.0, 6.0))  # (QKV, MHA, PjFFN) of sub-batch 1 and 2
    # A = QKV1 1; B = max(QKV2 2, MHA1 5); E = max(PjFFN1 3, MHA2 4); F = PjFFN2 6;
    # C = max(3 + 1, MHA2 4) = 4, D = max(6 + 2, MHA1 5) = 8 per extra layer
    assert stage_schedule_s(ph, 1) == [1.0, 5.0, 4.0, 6.0]
    assert stage_schedule_s(ph, 3) == [1.0, 5.0, 4.0, 8.0, 4.0, 8.0, 4.0, 6.0]
    # the run average tends to the steady state C + D per layer; each sub-batch's work is done once per layer
    avg = [sum(stage_schedule_s(ph, n)) / n for n in (1, 2, 10, 1000)]
    assert avg[0] == 16.0 and avg[1] == 14.0 and abs(avg[-1] - 12.0) < 0.01 and avg == sorted(avg, reverse=True)
    for n in (1, 4):  # never faster than each side's total work
        st = stage_schedule_s(ph, n)
        assert sum(st) >= n * max(1 + 3 + 2 + 6, 5 + 4)


def _two_gacts(faw_acts):
    spec = SPEC.model_copy(update={"pim": SPEC.pim.model_copy(update={"actbg_faw_acts": faw_acts})})
    c = cmds_from(op=[Op.ACTBG, Op.ACTBG], pch=0, rank=0, bg=[0, 1], row=1)
    c2 = cmds_from(op=[Op.ACTBG, Op.ACTBG, Op.MACAB], pch=0, rank=0, bg=[0, 1, -1], row=1)
    return run_commands(spec, c, refresh="none").cycles, spec, c2


def test_gact_counts_four_acts_in_tfaw():
    t = SPEC.timing
    # engine cycles of two ACTs end at the second ACT + nothing else: the second G_ACT issues at tFAW (4 ACTs
    # counted) vs nRRD_S (one ACT counted); the run ends at that issue (no column op)
    c4, spec4, _ = _two_gacts(4)
    c1, spec1, _ = _two_gacts(1)
    assert c4 - c1 == t.nFAW - t.nRRD_S
    # engine == plain-Python reference with the 4-ACT rule on random PIM streams
    for seed in range(60):
        c = random_stream(np.random.default_rng(seed), spec4, 16, pim=True, channels=2)
        for mode in ("ab", "none"):
            a, sa = raw_run(spec4, c, mode)
            b, sb = reference_run(spec4, c, mode)
            w, _ = raw_run(spec4, expand_macros(c), mode)
            assert np.array_equal(a, b) and np.array_equal(sa, sb) and np.array_equal(a, w)


def test_tighter_tfaw_slows_the_logit_gemv():
    low = lower_newton(
        "score", [300] * 32, heads=8, dhead=128, group=1, elem_bytes=2.0, n_channels=32, org=DEV.org, pu=DEV.pu
    )
    base = pim(refresh="none", refresh_guard=False).run(low)[0]
    slow = pim(refresh="none", refresh_guard=False, dram_overrides={"timing": {"nFAW": 60}}).run(low)[0]
    # per tile (row opening) the 4 G_ACTs of a rank are tFAW apart: 3 x (60 - 30) CK more per tile
    tiles = int(np.count_nonzero(low.commands[0]["op"] == ENGINE_CODES["PREA"]))
    assert tiles == 2 * 10  # 2 chunks x ceil(300 / 32) tiles, one request per channel
    assert slow - base == pytest.approx(tiles * 3 * 30 * 1e-9, rel=1e-6)


def test_single_row_buffer_never_faster_and_equal_without_npu_traffic():
    low = lower_newton(
        "score", [300, 120, 700], heads=8, dhead=128, group=1, elem_bytes=2.0, n_channels=2, org=DEV.org, pu=DEV.pu
    )
    alone = DEV.run(low)[0]
    empty = npu_stream(DEV.org, 0.0, 0.0)
    assert run_shared(DEV, low, "single", empty)[0] == run_shared(DEV, low, "dual", empty)[0] == alone
    ratio = {}
    for rd in (16e3, 128e3, 2e6):
        npu = npu_stream(DEV.org, rd, rd / 16, row0=DEV.org.rows // 2)
        single, dual = run_shared(DEV, low, "single", npu)[0], run_shared(DEV, low, "dual", npu)[0]
        npu_alone = DEV.run(Lowered("newton", "x", [None], [npu], np.array([1])))[0]
        assert single >= dual >= max(alone, npu_alone)
        ratio[rd] = single / dual
    # comparable streams (128 KB of weights per channel, ~60 % of the PIM time): the switches serialise
    # them (single ~ PIM + NPU alone); a stream far longer than the PIM's hides it either way
    assert ratio[128e3] > 1.5 and ratio[2e6] < 1.1
    # interleave keeps both streams' records, in each stream's order
    m = interleave(low.commands[0], npu)
    assert len(m["op"]) == len(low.commands[0]["op"]) + len(npu["op"])
    npu_ops = np.isin(m["op"], [ENGINE_CODES["RD"], ENGINE_CODES["WR"], ENGINE_CODES["ACT"]])  # G_ACT is ACTBG
    assert np.array_equal(m["op"][npu_ops], npu["op"]) and np.array_equal(m["row"][npu_ops], npu["row"])


@pytest.fixture(scope="module")
def neupims_exp():
    return load_experiment(
        None,
        [
            "experiment.systems=[neupims]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "scenarios.chat.batch_size=8",
            "scenarios.chat.prompt_len=256",
            "scenarios.chat.output_len=2",
            "models.llama2-7b.num_layers=1",
        ],
    )


def _plan(exp, sub=2, **options):
    system = build_system(exp.systems["neupims"], exp.tree.hardware, exp.tree.file_of)
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    tr = build_trace(model, sc, "decode", tp=1)
    if sub:
        tr.meta["subbatch_of"] = sub  # as the runner marks a sub-batch of a pipelined step
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 1),
        "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 1, tp=1),
    }
    return system, get_policy("neupims")(tr, system, mb, {"dual_row_buffer": True, "subbatches": 2, **options})


def test_softmax_on_the_npu_and_rowbuffer_traffic_recorded(neupims_exp):
    system, plan = _plan(neupims_exp)
    dev = dict(zip(plan.trace["op"], plan.device))
    assert dev["softmax"] == "npu" and dev["attn_score"] == dev["attn_context"] == "pim"
    assert "pim_send_q_kv" not in dev and dev["pim_write_kv"].startswith("link:")  # q / output by GWRITE / READRES
    rb = plan.trace.meta["neupims_rowbuffer"]
    tr = plan.trace
    mm = (tr["cls"] == "matmul") & (plan.device == "npu") & (tr["layer_group"] == 0)  # lm_head: no layer
    assert rb["mode"] == "dual" and rb["npu_read_bytes"][0] == pytest.approx(float(tr["weight_bytes"][mm].sum()))
    assert plan.pipeline_subbatches == 2
    _, single = _plan(neupims_exp, dual_row_buffer=False)
    _, off = _plan(neupims_exp, sub=0, subbatches=1)
    _, whole = _plan(neupims_exp, sub=0)  # the whole batch's plan: split by the runner, not costed itself
    assert single.pipeline_subbatches == 2 and single.trace.meta["neupims_rowbuffer"]["mode"] == "single"
    assert off.pipeline_subbatches == 1 and "neupims_rowbuffer" not in off.trace.meta
    assert whole.pipeline_subbatches == 2 and "neupims_rowbuffer" not in whole.trace.meta
    # single row buffer: the PIM rows cost more than with the dual row buffer (same trace)
    p = system.pools["pim"].model
    rows = np.flatnonzero(np.isin(plan.trace["cls"], ("attn_score", "attn_context")))
    t_dual = p.cost(plan.trace, rows).time_s.sum()
    t_single = p.cost(single.trace, rows).time_s.sum()
    t_alone = p.cost(off.trace, np.flatnonzero(np.isin(off.trace["cls"], ("attn_score", "attn_context")))).time_s.sum()
    assert t_single > t_dual >= t_alone


def test_preset_capacity_is_the_npu_memory():
    npu = registry.build(load_yaml(find_config("hardware", "neupims_npu")), file="neupims_npu")
    assert DEV.channels == 32 and DEV.org.banks == 32 and SPEC.pim.nCCDAB == 2
    assert DEV.capacity_bytes == pytest.approx(npu.capacity_bytes, rel=1e-3)  # 32 GiB
    assert SPEC.peak_bandwidth_gbps == pytest.approx(npu.spec.hbm_bandwidth_gbps)  # 32 x 32 GB/s


NON_LAYER_OPS = ("embedding", "final_norm", "lm_head")


@pytest.mark.parametrize(
    "over",
    [
        [],
        ["systems.neupims.mapper.options.subbatches=1"],
        [
            "systems.neupims.parallelism.pp=2",
            "systems.neupims.devices.npu.count=2",
            "systems.neupims.devices.pim.count=2",
            "systems.neupims.links.icnt={hardware: neupims_mem_bus, connects: [npu, npu]}",
            "models.llama2-7b.num_layers=2",
        ],
    ],
)
def test_time_s_layers_is_the_decoder_layers_time(over):
    """breakdown time_s_layers = the per-op times of every op but embedding / final norm / LM head: sequential,
    sub-batch pipelined (the period scales the layer rows) and PP (the step's shares, transfers excluded)."""
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(
        None,
        [
            "experiment.systems=[neupims]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "scenarios.chat.batch_size=8",
            "scenarios.chat.prompt_len=256",
            "scenarios.chat.output_len=2",
            "models.llama2-7b.num_layers=1",
            *over,
        ],
    )
    (doc,) = run_experiment(exp)
    assert doc["status"] == "ok", doc.get("error")
    bd = doc["breakdown"]["decode_step"]
    # PP's stage-to-stage transfers (pp_send_activations, pp_return_tokens) are per-step rows (layer_group -1)
    layers = sum(v for k, v in bd["time_s_by_op"].items() if k not in NON_LAYER_OPS and not k.startswith("pp_"))
    assert 0 < bd["time_s_layers"] < bd["time_s"]
    assert bd["time_s_layers"] == pytest.approx(layers, rel=1e-9)
    # the run through the layers: the sequential step's own time; pipelined, with fill + drain of the stage schedule
    if "systems.neupims.mapper.options.subbatches=1" in over:
        assert bd["time_s_layers_run"] == bd["time_s_layers"]
    else:
        assert 0 < bd["time_s_layers_run"] < float("inf") and bd["time_s_layers_run"] != bd["time_s_layers"]


def test_reproduction_metric_sums_dotted_paths():
    """A row metric "a + b" is the sum of both paths (NeuPIMs' QKV gen = LayerNorm + GEMM); a bad part is refused."""
    from attnsim.studies.reproduce import _number

    doc = {"breakdown": {"decode_step": {"time_s_by_op": {"attn_norm": 1.5e-5, "qkv_proj": 7.0e-5}}}}
    one = "breakdown.decode_step.time_s_by_op."
    assert _number(doc, f"{one}attn_norm + {one}qkv_proj", "r.yaml", "rows.0.metric") == pytest.approx(8.5e-5)
    with pytest.raises(ConfigError, match=r"r.yaml: rows.0.metric: .*'breakdown.decode_step.time_s_by_op.nope'"):
        _number(doc, f"{one}attn_norm + {one}nope", "r.yaml", "rows.0.metric")


def test_per_channel_parts_as_the_artefact_halves_each_channel():
    """Scheduler.cc group_sub_batches (_partition_alg_simple): per channel, the first half of its requests in
    batch order to sub-batch 1; an odd channel gives the extra to sub-batch 1, then 2 (ceil_turn)."""
    from attnsim.mapper.neupims import per_channel_parts

    ch = np.array([1, 0, 0, 1, 2, 0, 1, 2])
    # ch 0 = requests 1, 2, 5 (odd, ceil): 1, 2 | 5; ch 1 = 0, 3, 6 (odd, floor): 0 | 3, 6; ch 2 = 4, 7: 4 | 7
    (i1, c1), (i2, c2) = per_channel_parts(ch, 2)
    assert i1.tolist() == [1, 2, 0, 4] and c1 == [0, 0, 1, 2]
    assert i2.tolist() == [5, 3, 6, 7] and c2 == [0, 1, 1, 2]


def test_mapper_splits_each_channel_of_the_whole_batch(neupims_exp):
    """subbatch_split per_channel (default): the whole batch is placed (greedy) and each channel halved, the
    sub-batches keeping the batch's channels; list: no parts (contiguous slices); a bad value is refused."""
    from attnsim.hwmodels.rowbuffer import newton_request_channels
    from attnsim.sim.engine import subbatch_parts

    system = build_system(neupims_exp.systems["neupims"], neupims_exp.tree.hardware, neupims_exp.tree.file_of)
    model, sc = neupims_exp.models["llama2-7b"], neupims_exp.scenarios["chat"]
    lens = np.array([900, 40, 700, 650, 30, 20, 600, 10] * 6)
    tr = build_trace(model, sc.model_copy(update={"batch_size": len(lens)}), "decode", tp=1, context_lens=lens)
    mb = {"weights": 1.0, "kv": 1.0, "kv_per_rank": 1.0}
    policy = get_policy("neupims")
    plan = policy(tr, system, mb, {})
    i = int(np.flatnonzero(plan.trace["cls"] == "attn_score")[0])
    chans = newton_request_channels(system.pools["pim"].model, plan.trace, i)
    parts = subbatch_parts(plan, len(lens))
    assert len(parts) == 2 and sorted(np.concatenate([p for p, _ in parts]).tolist()) == list(range(len(lens)))
    for idx, c in parts:
        assert c == chans[idx].tolist()
    for c in set(chans.tolist()):  # every channel's requests halved (within one)
        n1, n2 = (int(np.sum(chans[idx] == c)) for idx, _ in parts)
        assert abs(n1 - n2) <= 1
    flat = policy(tr, system, mb, {"subbatch_split": "list"})
    assert not flat.subbatch_parts and [p.tolist() for p, c in subbatch_parts(flat, 48) if c is None] == [
        list(range(24)),
        list(range(24, 48)),
    ]
    with pytest.raises(ConfigError, match="mapper.options.subbatch_split: expected one of per_channel, list"):
        policy(tr, system, mb, {"subbatch_split": "halves"})


class _ToyPlan:
    def __init__(self, devices, count):
        self.device = np.array(devices, dtype=object)
        self.trace = {"layer_group": np.zeros(len(devices), np.int64), "count": np.full(len(devices), count)}


def test_layers_run_is_the_stage_schedule_by_hand():
    """engine.layers_run_s: each sub-batch's layer cut at its first / last row off the first device (the
    collective link aside): (QKV, MHA incl. the NPU softmax between, Pj/FFN); stages A-F added by hand."""
    from attnsim.sim.engine import layer_phases_s, layers_run_s

    devs = [
        "npu",
        "link:bus",
        "pim",
        "npu",
        "pim",
        "npu",
        "link",
    ]  # qkv, kv write, score, softmax, ctx, ffn, all-reduce
    per1 = np.array([2.0, 0.5, 3.0, 1.0, 4.0, 4.75, 0.25])  # (2, 8.5, 5) per layer
    per2 = np.array([2.0, 0.5, 1.0, 0.5, 1.0, 4.75, 0.25])  # (2, 3, 5)
    for L in (2, 1000):
        plans = [_ToyPlan(devs, L), _ToyPlan(devs, L)]
        effs = [per1 * L, per2 * L]  # row times x count
        assert layer_phases_s(plans[0], effs[0], np.ones(7, bool)) == pytest.approx((2.0, 8.5, 5.0))
        run = layers_run_s(plans, effs)
        if L == 2:  # A 2, B max(2, 8.5), C max(5 + 2, 3), D max(5 + 2, 8.5), E max(5, 3), F 5
            assert run == pytest.approx(2 + 8.5 + 7 + 8.5 + 5 + 5)
        else:  # fill + drain fade: the steady state C + D = 15.5 per layer
            assert run / L == pytest.approx(15.5, rel=1e-3) and run / L > 15.5


def test_single_row_buffer_takes_turns_and_the_npu_goes_first():
    """npu+pim (e51a4af newton_command_queue.cc): no DRAM command during a PIM tile and a tile only when the
    normal queues are empty, so the channel serves the streams one after the other; the NPU goes first, so
    an op meets the NPU traffic of its stretched duration, capped by its share of the MHA's tiles."""
    import dataclasses

    from attnsim.hwmodels.rowbuffer import phase_weight, run_window

    lens = [300, 120, 700]
    low = lower_newton("score", lens, heads=8, dhead=128, group=1, elem_bytes=2.0, n_channels=2, org=DEV.org, pu=DEV.pu)
    alone = DEV.run(low)[0]
    npu = npu_stream(DEV.org, 128e3, 8e3, row0=DEV.org.rows // 2)
    npu_alone = DEV.run(Lowered("newton", "x", [None], [npu], np.array([2])))[0]
    # one stream at a time: never below the sum of the two alone (refreshes fall differently: 1 %)
    assert run_shared(DEV, low, "single", npu)[0] >= 0.99 * (alone + npu_alone)
    m = interleave(low.commands[0], npu, exclusive=True)
    n_seg = int(
        np.count_nonzero(m["op"] == ENGINE_CODES["BARRIER"])
        - np.count_nonzero(low.commands[0]["op"] == ENGINE_CODES["BARRIER"])
    )
    assert n_seg % 2 == 0 and n_seg > 0
    # shares by hand: the logit GEMV's tiles, K: 2 chunks x ceil(t / 32); V: 8 heads x ceil(t / 512) x 4
    k = sum(2 * -(-t // 32) for t in lens)
    v = sum(8 * -(-t // 512) * 4 for t in lens)
    w = phase_weight("score", lens, DEV.org, heads=8, dhead=128, elem_bytes=2.0)
    assert w == pytest.approx(k / (k + v))
    rd, wr = 4e6, 1e5
    full = npu_stream(DEV.org, rd, wr, row0=DEV.org.rows // 2)
    t_mem = DEV.run(Lowered("newton", "x", [None], [full], np.array([2])))[0]

    def window(t_npu):
        meta = {
            **low.meta,
            "rowbuffer": {"mode": "single", "read_bytes": rd, "write_bytes": wr, "npu_time_s": t_npu, "weight": w},
        }
        return run_window(DEV, dataclasses.replace(low, meta=meta))[0]

    # a memory-bound NPU stage (its stream alone takes its whole time): the op meets the weight's share
    capped = npu_stream(DEV.org, rd * w, wr * w, row0=int(DEV.org.rows * 0.5))
    assert window(t_mem) == pytest.approx(run_shared(DEV, low, "single", capped)[0])
    # an NPU stage 10x its memory time: share = t_pim / (0.9 x t_npu)
    s = alone / (0.9 * 10 * t_mem)
    part = npu_stream(DEV.org, rd * s, wr * s, row0=int(DEV.org.rows * 0.5))
    assert window(10 * t_mem) == pytest.approx(run_shared(DEV, low, "single", part)[0])


def test_refresh_guard_estimate_and_schedule_by_hand():
    """NewtonSim CanMeetRefreshDeadline (neupims_command_queue.cc) with EstimatePIMOperationLatency
    (channel_state.cc): K tile = 32 open PIM rows x tRTP 5 + tFAW 30 x (8 G_ACT / 2 - 1) + tRCD 14 +
    2 x 32 COMPs + 2 x (4 READRES - 1) = 334 CK; GWRITE = tRP + tRCD + (tCCD_S + tCCD_L) x 32 = 124."""
    from attnsim.hwmodels.pim_refresh import estimate_cycles, guarded_cycles, split_units

    t = SPEC.timing
    assert estimate_cycles(t, 8, 32, 4, True, 32) == 334 and estimate_cycles(t, 8, 32, 4, True, 0) == 174
    assert estimate_cycles(t, 8, 19, 1, True, 0) == 90 + 14 + 2 * 32  # 19 COMPs: the header's 32
    assert estimate_cycles(t, 0, 0, 1, True, 0) == 124 and estimate_cycles(t, 0, 0, 1, False, 0) is None
    low = lower_newton(
        "score", [2000], heads=8, dhead=128, group=1, elem_bytes=2.0, n_channels=1, org=DEV.org, pu=DEV.pu
    )
    c = low.commands[0]
    units = split_units(c)
    assert len(units) == 2 + 2 * 63  # 2 chunks: a GWRITE + ceil(2000 / 32) tiles each
    run = lambda r: float(run_commands(SPEC, _one_channel(r), refresh="none").time_s) / 1e-9
    total = run(c)
    far = SPEC.model_copy(update={"timing": t.model_copy(update={"nREFI": 10**9})})
    assert guarded_cycles(far, c, total, run) == round(total)  # no refresh due: nothing waits
    g = guarded_cycles(SPEC, c, total, run)
    n_ref = int(g // (t.nREFI // 2))  # refreshes passed (one rank every nREFI / 2)
    stall = t.nRP + t.nRFC
    # every refresh costs its stall, plus at most the estimate of the operation it did not start
    assert total + n_ref * stall <= g <= total + (n_ref + 1) * (stall + 334)
    assert g > total + n_ref * stall + n_ref * 50  # the guard wastes slack at (nearly) every refresh
    with pytest.raises(ConfigError, match="refresh_guard"):
        registry.build(
            {**load_yaml(find_config("hardware", "fimdram_hbm2")), "refresh_guard": True}, file="fimdram_hbm2"
        )


def _one_channel(c):
    from attnsim.hwmodels.dram.engine import make_cmds

    r = make_cmds(len(c["op"]))
    for f in ("op", "pch", "rank", "bg", "bank", "row", "col", "repeat", "cycles"):
        r[f][:] = c[f]
    return r
