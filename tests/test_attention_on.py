"""mapper.attention_on: decode attention and the KV on an attention-capable memory device, GEMMs on the GPUs
(mapper/base.py place_attention), and the built-in system h100_x8_cxl_pnm_attn that uses it."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.mapper.base import ATTENTION_CLASSES, get_policy
from attnsim.sim.engine import cost_step
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

SYS = "h100_x8_cxl_pnm_attn"
B = 4  # requests in the batch


def _exp(systems, extra=()):
    return load_experiment(
        None,
        [
            f"experiment.systems={systems}",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            f"scenarios.chat.batch_size={B}",
            "scenarios.chat.prompt_len=512",
            "scenarios.chat.output_len=4",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def built():
    exp = _exp(f"[{SYS},cxl_pnm]")
    return exp, {n: build_system(s, exp.tree.hardware, exp.tree.file_of) for n, s in exp.systems.items()}


def _plan(system, exp, phase):
    model, sc = exp.models["llama2-7b"], exp.scenarios["chat"]
    tp = system.spec.parallelism.tp
    tr = build_trace(model, sc, phase, tp=tp)
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, sc.prompt_lens() + 1),
        "kv_per_rank": kv_cache_bytes(model, sc, sc.prompt_lens() + 1, tp=tp),
    }
    return tr, get_policy(system.spec.mapper.policy)(tr, system, mb, system.spec.mapper.options), mb


def test_attention_on_pnm_gemms_on_gpu_kv_on_pnm(built):
    exp, systems = built
    _, plan, mb = _plan(systems[SYS], exp, "decode")
    dev = dict(zip(plan.trace["op"], plan.device))
    cls = plan.trace["cls"]
    assert set(plan.device[np.isin(cls, ATTENTION_CLASSES)]) == {"pnm"}
    assert set(plan.device[cls == "matmul"]) == {"gpu"}  # every GEMM (qkv, out, FFN, lm_head)
    assert dev["pim_send_q_kv"] == dev["pim_recv_out"] == "link:gpu_pnm"
    mem = {m.role: m for m in plan.memory}
    assert mem["pnm"].kv_bytes == mb["kv_per_rank"] > 0 and mem["gpu"].kv_bytes == 0.0
    assert mem["pnm"].weights_bytes == 0.0 and mem["gpu"].weights_bytes == pytest.approx(mb["weights"] / 8)
    # prefill: all on the GPUs, the prompt's K/V written to the PNM over the GPU-PNM link
    _, pre, _ = _plan(systems[SYS], exp, "prefill")
    assert set(pre.device[np.isin(pre.trace["cls"], ATTENTION_CLASSES)]) == {"gpu"}
    assert set(pre.device[pre.trace["op"] == "pim_write_kv"]) == {"link:gpu_pnm"}


def test_transfer_bytes_equal_hand_computation(built):
    exp, systems = built
    _, plan, _ = _plan(systems[SYS], exp, "decode")
    tr = plan.trace
    per = {
        op: float(np.sum((tr["comm_bytes"] * tr["count"])[tr["op"] == op])) for op in ("pim_send_q_kv", "pim_recv_out")
    }
    # Llama-2-7B: 32 layers, 32 query heads = 32 KV heads (MHA), head_dim 128; tp 8 -> 4 heads per rank; fp16 (2 B).
    # In per layer and rank: q = B x 4 x 128 x 2 B = 4,096 B + the new token's K and V = B x 2 x 4 x 128 x 2 B
    # = 8,192 B; out: the attention output B x 4 x 128 x 2 B = 4,096 B. Per step: x 32 layers.
    assert per["pim_send_q_kv"] == 32 * (B * 4 * 128 * 2 + B * 2 * 4 * 128 * 2) == 393216
    assert per["pim_recv_out"] == 32 * (B * 4 * 128 * 2) == 131072


def test_attention_time_is_the_pnm_devices_own(built):
    exp, systems = built
    system = systems[SYS]
    _, plan, _ = _plan(system, exp, "decode")
    step = cost_step(plan, system)
    rows = np.nonzero(np.isin(plan.trace["cls"], ATTENTION_CLASSES))[0]
    alone = system.pools["pnm"].model.cost(plan.trace, rows)  # the same rows costed on the PNM device by itself
    for op in ATTENTION_CLASSES:
        sel = plan.trace["op"][rows] == op
        want = float(np.sum(alone.time_s[sel] * plan.trace["count"][rows][sel]))
        assert want > 0 and step.time_s_by_op[op] == pytest.approx(want, rel=1e-9), op
    # and the same as in cxl_pnm, whose PNM devices (the same hardware, tp 8) run the whole decode
    _, whole, _ = _plan(systems["cxl_pnm"], exp, "decode")
    other = cost_step(whole, systems["cxl_pnm"])
    for op in ATTENTION_CLASSES:
        assert step.time_s_by_op[op] == pytest.approx(other.time_s_by_op[op], rel=1e-9), op


def test_runs_beside_dgx_h100_with_the_split_in_the_breakdown():
    docs = run_experiment(_exp(f"[dgx_h100,{SYS}]"))
    d = {x["system"]: x for x in docs}
    assert d[SYS]["status"] == "ok", d[SYS].get("error")
    bd = d[SYS]["breakdown"]["decode_step"]
    assert {"gpu", "pnm", "link:gpu_pnm"} <= set(bd["time_s_by_device"])
    assert set(bd["pim_mapping"]) == set(ATTENTION_CLASSES)  # only attention runs in memory
    assert "pnm" not in d["dgx_h100"]["breakdown"]["decode_step"]["time_s_by_device"]


@pytest.mark.parametrize(
    "role, policy, msg",
    [
        (
            "gpu",
            None,
            "expected a device that can run attention (kind pim: HBM-PIM, CXL-PNM, NDP), got 'gpu' of kind gpu",
        ),
        ("nope", None, "expected a device role of the system (gpu, pnm), got 'nope'"),
        ("pnm", "cxl_pnm", "not used by policy cxl_pnm"),
    ],
)
def test_refusals(role, policy, msg):
    extra = [f"systems.{SYS}.mapper.attention_on={role}"]
    extra += [f"systems.{SYS}.mapper.policy={policy}"] if policy else []
    with pytest.raises(ConfigError, match="mapper.attention_on") as e:
        run_experiment(_exp(f"[{SYS}]", extra))
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_attacc_reads_the_same_key():
    """attacc places its attention with the same mechanism: attention_on naming its PIM pool changes nothing."""
    exp = _exp("[attacc]", ["systems.attacc.mapper.attention_on=pim"])
    plain = _exp("[attacc]")
    a, b = run_experiment(exp)[0], run_experiment(plain)[0]
    assert a["metrics"]["tpot_s"] == b["metrics"]["tpot_s"]
