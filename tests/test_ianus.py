"""IANUS (mapper/ianus.py, hwmodels/pim_scheduling.py): PIM / normal access exclusion on a unified
NPU-PIM memory, PIM access scheduling, and the per-op placement rule, against hand-derived numbers."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.pim_scheduling import group_time_s, normal_access_s
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import get_policy
from attnsim.sim.engine import cost_rows, cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

EXP = {
    "name": "t",
    "systems": ["ianus"],
    "models": ["gpt2"],
    "generation": {"mode": "sampled", "samples": 2},
    "scenarios": {"s": {"batch_size": 1, "prompt_len": 32, "output_len": 4}},
}


def test_two_op_program_by_hand():
    """A PIM phase of 3 us and an NPU op of 2 us whose loads take 0.5 us of channel time."""
    naive = 3.0 + 2.0
    # no overlap possible with one item: the schedule is the naive order
    assert group_time_s([2.0], [0.5], [3.0], partitions=1) == pytest.approx(naive)
    # ideal overlap: the PIM phase and the NPU's loads serialise on the channel (3 + 0.5); the NPU's
    # compute (2) hides under the PIM phase
    assert group_time_s([2.0], [0.5], [3.0], partitions=10**9) == pytest.approx(3.5)
    # over 4 heads: 1/4 of the hidden 1.5 us stays exposed (fill + drain)
    assert group_time_s([2.0], [0.5], [3.0], partitions=4) == pytest.approx(3.5 + 1.5 / 4)
    # without exclusion (a PIM with its own row buffer) the loads hide too: max(3, 0.5, 2) = 3
    assert group_time_s([2.0], [0.5], [3.0], exclusion=False, partitions=10**9) == pytest.approx(3.0)
    # a memory-bound NPU op (loads 2.5 of its 2.5 us) cannot hide: 3 + 2.5 = naive
    assert group_time_s([2.5], [2.5], [3.0], partitions=10**9) == pytest.approx(5.5)


@functools.lru_cache(maxsize=None)
def _setup(options: tuple = ()):
    exp = load_experiment(EXP, sets=[f"systems.ianus.mapper.options.{k}={v}" for k, v in options])
    spec = exp.systems["ianus"]
    system = build_system(spec, exp.tree.hardware, exp.tree.file_of)
    model, sc = exp.models["gpt2"], exp.scenarios["s"]
    mb = {
        "weights": weight_bytes(model),
        "kv": kv_cache_bytes(model, sc, 64),
        "kv_per_rank": kv_cache_bytes(model, sc, 64),
    }
    return exp, system, model, sc, mb, spec.mapper.options


def _plan(options=(), phase="decode", q=1):
    exp, system, model, sc, mb, opts = _setup(tuple(options))
    tr = (
        build_trace(model, sc, phase, context_lens=np.array([40]), query_tokens=np.array([q]))
        if phase == "decode"
        else build_trace(model, sc, "prefill")
    )
    return get_policy("ianus")(tr, system, mb, opts), system


def test_placement_rule_is_per_op_cost():
    """auto: a decode GEMV row is on the PIM exactly when the PIM's time is below the NPU's; prefill
    (GEMM) stays on the NPU; compute / pim pin every candidate."""
    plan, system = _plan()
    tr = plan.trace
    cand = np.flatnonzero(np.isin(tr["cls"], ("matmul", "attn_score", "attn_context")))
    t_npu = system.pools["npu"].model.cost(tr, cand).time_s
    t_pim = system.pools["pim"].model.cost(tr, cand).time_s
    assert list(plan.device[cand] == "pim") == list(t_pim < t_npu)
    assert np.any(plan.device == "pim") and np.all(plan.device[np.isin(tr["cls"], ("softmax", "elementwise"))] == "npu")
    pre, _ = _plan(phase="prefill")
    assert np.all(pre.device != "pim") and not pre.pim_schedule
    only_npu, _ = _plan((("placement", "compute"),))
    assert np.all(only_npu.device != "pim")
    all_pim, _ = _plan((("placement", "pim"),))
    assert np.all(all_pim.device[cand] == "pim")


def test_engine_applies_the_schedule_by_hand():
    """The engine's decode step = per layer group max(NPU loads + PIM phases, NPU times) + the hidden
    time / heads, from the rows' own costs (NPU loads = bytes / (512 GB/s x 0.85)); naive = the sum."""
    plan, system = _plan()
    tr = plan.trace
    row = cost_rows(plan, system)[0]
    on_n, on_p = plan.device == "npu", plan.device == "pim"
    load = normal_access_s(system.pools["npu"].model, tr, np.arange(len(tr))) * tr["count"]
    nbytes = (tr["weight_bytes"] + tr["act_bytes"] + tr["kv_read_bytes"] + tr["kv_write_bytes"]) * tr["count"]
    assert np.allclose(load, nbytes / (512e9 * 0.85))
    heads = tr.meta["heads_per_rank"]
    want = 0.0
    for g in np.unique(tr["layer_group"]):
        rows = tr["layer_group"] == g
        serial = row[rows].sum()
        if not np.any(rows & on_p):
            want += serial
            continue
        channel = load[rows & on_n].sum() + row[rows & on_p].sum()
        bound = max(channel, row[rows & on_n].sum())
        want += bound + (serial - bound) / heads
    assert cost_step(plan, system).time_s == pytest.approx(want, rel=1e-12)
    naive, _ = _plan((("schedule", "false"),))
    assert not naive.pim_schedule
    t_naive = cost_step(naive, system).time_s
    assert t_naive == pytest.approx(row.sum(), rel=1e-12)
    assert want < t_naive
    free, _ = _plan((("exclusion", "false"),))
    assert cost_step(free, system).time_s < want  # the exclusion costs time


def test_options_refused():
    with pytest.raises(ConfigError) as e:
        _plan((("placement", "gpu"),))
    assert e.value.key == "mapper.options.placement"
    with pytest.raises(ConfigError) as e:
        load_experiment(EXP, sets=["systems.ianus.mapper.options={schedule: false, exclusion: false}"])
    assert e.value.key == "mapper.options.exclusion"


def test_ianus_gpt2_beats_a100_at_batch_1():
    """A whole generation: IANUS's decode is faster than one A100's on GPT-2 (PIM's internal
    bandwidth on the GEMVs), and slower without the PIM (the NPU alone on 512 GB/s GDDR6)."""
    from attnsim.sim.runner import run_experiment

    exp = load_experiment({**EXP, "systems": ["ianus", "ianus_npu_only", "ianus_a100"], "baseline": "ianus_a100"})
    docs = {d["system"]: d for d in run_experiment(exp)}
    assert all(d["status"] == "ok" for d in docs.values())
    assert docs["ianus"]["vs_baseline"]["tpot_speedup"] > 1.0
    assert docs["ianus_npu_only"]["vs_baseline"]["tpot_speedup"] < 1.0
