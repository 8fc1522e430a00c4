"""GPU power model (hwmodels/gpu_power.py): limits, hand numbers, and the ML.ENERGY v3 H100 serving rows
(configs/validation/power.yaml; source ml-energy/leaderboard @0cd52da via
shared/reference/calibration/mlenergy_v3_h100.csv)."""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.hwmodels.base import ENERGY_COMPONENTS
from attnsim.hwmodels.gpu import load_hardware
from attnsim.hwmodels.gpu_power import DYNAMIC_GPU_COMPONENTS, matmul_occupancy, op_energy_j, power_w
from attnsim.workloads.optrace import OpTrace

PRESETS = ("a100_80gb_sxm", "a100_hbm3", "h100_sxm", "h200_sxm")


def _trace(ops: list[dict]) -> OpTrace:
    base = {
        "op": "x",
        "cls": "matmul",
        "layer_group": 0,
        "count": 1,
        "m": 0,
        "n": 0,
        "k": 0,
        "batch": 1,
        "flops": 0.0,
        "weight_bytes": 0.0,
        "act_bytes": 0.0,
        "kv_read_bytes": 0.0,
        "kv_write_bytes": 0.0,
    }
    return OpTrace.from_rows(
        [{**base, **o} for o in ops],
        phase="decode",
        model="test",
        tp=1,
        query_tokens=np.ones(1, np.int64),
        context_lens=np.ones(1, np.int64),
        groups=[],
    )


def _mm(m, k, n, count=1):
    return {
        "op": "mm",
        "cls": "matmul",
        "m": m,
        "n": n,
        "k": k,
        "count": count,
        "flops": 2.0 * m * n * k,
        "weight_bytes": 2.0 * k * n,
        "act_bytes": 2.0 * m * (k + n),
    }


def _step_power_w(gpu, ops) -> float:
    tr = _trace(ops)
    c = gpu.cost(tr, np.arange(len(tr)))
    cnt = tr.cols["count"].astype(float)
    return gpu.spec.idle_power_w + float(np.sum(c.energy_total_j() * cnt) / np.sum(c.time_s * cnt))


@pytest.mark.parametrize("name", PRESETS)
def test_power_never_above_cap(name):
    gpu = load_hardware(name)
    # compute-bound prefill GEMMs would draw > TDP at the fitted pJ/FLOP: charged at the cap
    for ops in (
        [_mm(8192, 8192, 8192)],
        [_mm(4096, 8192, 28672, count=80)],
        [_mm(1, 8192, 8192)],
        [_mm(8192, 8192, 8192), _mm(1, 8192, 8192, count=4)],
    ):
        assert _step_power_w(gpu, ops) <= gpu.spec.tdp_w * (1 + 1e-9)
    assert _step_power_w(gpu, [_mm(8192, 8192, 8192)]) == pytest.approx(gpu.spec.tdp_w)


@pytest.mark.parametrize("name", PRESETS)
def test_idle_at_zero_load_and_monotone_in_activity(name):
    s = load_hardware(name).spec
    t = np.array([1e-3])
    zero = op_energy_j(s, t, t, np.array([0.0]), np.array([0.0]), np.array([0.0]))
    assert power_w(s, t, zero)[0] == s.idle_power_w
    assert set(zero) == set(DYNAMIC_GPU_COMPONENTS) <= set(ENERGY_COMPONENTS)
    prev = s.idle_power_w
    # activity rising along each axis in turn: power never falls, and stops at the cap
    for occ, fl, by in [
        (0.25, 0, 0),
        (1.0, 0, 0),
        (1.0, 1e11, 0),
        (1.0, 1e11, 1e9),
        (1.0, 1e12, 3e9),
        (1.0, 1e13, 3e9),
    ]:
        p = power_w(s, t, op_energy_j(s, t, t, np.array([occ]), np.array([fl]), np.array([by])))[0]
        assert prev <= p * (1 + 1e-12) and p <= s.tdp_w * (1 + 1e-12)
        prev = p
    assert prev == pytest.approx(s.tdp_w)


def test_hand_numbers_one_decode_gemv_h100():
    """Llama-3-8B down-projection at batch 8 on one H100: 8 x 14336 @ 14336 x 4096, bf16."""
    gpu = load_hardware("h100_sxm")
    s = gpu.spec
    m, k, n = 8, 14336, 4096
    c = gpu.cost(_trace([_mm(m, k, n)]), np.array([0]))
    t = c.time_s[0]
    nbytes = 2.0 * k * n + 2.0 * m * (k + n)
    body = t - s.kernel_overhead_us * 1e-6
    # tiles 256x128 -> tm 16, 1 x 32 tiles; split-K min(16, 14336 // 256) = 16 (32 x 16 >= 132 SMs): occupancy 1
    assert matmul_occupancy(s, m, n, k, 1)[0] == 1.0
    assert (s.sm_active_power_w, s.compute_pj_per_flop) == (295.0, 1.5)  # h100_sxm.yaml's fit
    assert c.energy_j["active"][0] == pytest.approx(295.0 * body)  # sm_active_power_w x body time
    assert c.energy_j["compute"][0] == pytest.approx(2.0 * m * n * k * 1.5e-12)  # 1.5 pJ/FLOP
    assert c.energy_j["sram"][0] == pytest.approx(nbytes * (2.4 + 1.28) * 1e-12)
    assert c.energy_j["dram_read_write"][0] == pytest.approx(nbytes * 8 * 2.68e-12)
    # a memory-bound decode GEMV draws idle + ~all of sm_active + HBM: ~450-500 W, far from the FLOP share
    p = s.idle_power_w + c.energy_total_j()[0] / t
    hbm_w = nbytes * 8 * (0.11 + 2.68 + 0.8) * 1e-12 / t
    assert p == pytest.approx(110 + 295 * body / t + 2.0 * m * n * k * 1.5e-12 / t + nbytes * 3.68e-12 / t + hbm_w)
    assert 400 < p < 560
    # few output tiles and shallow K: 8 x 256 @ 256 x 128 is one CTA of 132 SMs
    assert matmul_occupancy(s, 8, 128, 256, 1)[0] == pytest.approx(1 / 132)


def test_energy_is_the_sum_of_components_and_static_is_idle_times_time():
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    (d,) = run_experiment(
        load_experiment(
            "configs/validation/power/mlenergy_h100.yaml",
            ["experiment.systems=[h100_x1_vllm.yaml]", "experiment.models=[llama3-8b]", "scenarios.chat.output_len=16"],
        )
    )
    for step in ("prefill", "decode_step"):
        b = d["breakdown"][step]
        assert b["energy_j"] == pytest.approx(sum(b["energy_j_by_component"].values()), rel=1e-12)
        assert b["energy_j_by_component"]["static"] == pytest.approx(110.0 * b["time_s"], rel=1e-9)
        assert b["energy_j_by_component"]["active"] > 0 and b["energy_j_by_component"]["compute"] > 0
    dec = d["breakdown"]["decode_step"]["energy_j_by_component"]  # memory-bound decode: SM activity >> FLOPs
    assert dec["active"] > 3 * dec["compute"]


@pytest.fixture(scope="module")
def mlenergy():
    from attnsim.studies import validate

    return validate.power_runs()


def _err(r, model_key, ref_key):
    return r[model_key] / r[ref_key] - 1.0


def test_mlenergy_rows_cover_both_models_every_batch(mlenergy):
    import csv
    from pathlib import Path

    src = Path("/work/shared/reference/calibration/mlenergy_v3_h100.csv")
    by = {(r["model_id"], float(r["avg_batch_size"])) for r in mlenergy}
    assert sum(r["role"] == "calibration" for r in mlenergy) == 11  # Llama-3.1-8B TP1, every batch
    assert sum(r["model_id"].endswith("3.1-70B-Instruct") and r["role"] == "validation" for r in mlenergy) == 12
    for r in mlenergy:  # the copy is self-consistent without the CSV: total W / output tok/s = J/token (CSV README)
        gpus = int(r["system"].split("_x")[1].split("_")[0])
        assert r["avg_power_w_per_gpu"] * gpus / r["output_tok_per_s"] == pytest.approx(
            r["energy_per_token_j"], rel=1e-3
        )
    if src.exists():  # where the source is checked out beside the project: the rows are the CSV's
        for row in csv.DictReader(src.open()):
            if (
                row["model_id"].startswith("meta-llama/Llama-3.1-")
                and row["num_gpus"] in ("1", "4")
                and not row["model_id"].endswith("FP8")
            ):
                assert (row["model_id"], float(row["avg_batch_size"])) in by


def _step_err(r):
    return r["model_step_ms"] / (r["avg_batch_size"] / r["output_tok_per_s"] * 1e3) - 1.0


def _tag(r):
    return f"{r['model_id']} b{r['avg_batch_size']}"


@pytest.mark.parametrize("role", ["calibration", "validation"])
def test_mlenergy_power_per_gpu_within_15_percent(mlenergy, role):
    rows = [r for r in mlenergy if r["role"] == role and r["model_id"].startswith("meta-llama/")]  # issue 12's rows
    errs = {_tag(r): round(_err(r, "model_power_w_per_gpu", "avg_power_w_per_gpu"), 3) for r in rows}
    if role == "calibration":  # in-sample: the fit is tight (max 2.2 %: the rows at the 700 W cap, measured 686-691 W)
        assert rows and all(abs(e) <= 0.03 for e in errs.values()), errs
        return
    # held out (70B TP4): the known misses (configs/validation/power.yaml) are Llama-3.1-70B batch 32-96, power over
    # by 15-20 % while their J/token stays within 15 % and their step is short (the model's power rises with batch
    # as the 8B's does; the measured TP4 power barely does)
    over = [r for r in rows if abs(_err(r, "model_power_w_per_gpu", "avg_power_w_per_gpu")) > 0.15]
    assert {_tag(r) for r in over} <= {f"meta-llama/Llama-3.1-70B-Instruct b{b}" for b in (31.88, 63.79, 95.73)}, errs
    assert all(
        _err(r, "model_power_w_per_gpu", "avg_power_w_per_gpu") <= 0.20
        and _step_err(r) < -0.05
        and abs(_err(r, "model_energy_per_token_j", "energy_per_token_j")) <= 0.15
        for r in over
    ), errs
    assert sum(abs(e) <= 0.15 for e in errs.values()) >= len(rows) - 3


def test_mlenergy_qwen3_rows_held_out(mlenergy):
    """Qwen3-8B / 14B / 32B (TP1) and Qwen3-32B TP2, held out (configs/validation/power.yaml): J/token within 11 %
    on every row; the power misses are where the step is short (power x step = J/token), as the 70B misses."""
    rows = [r for r in mlenergy if r["model_id"].startswith("Qwen/Qwen3-")]
    assert {r["role"] for r in rows} == {"validation"}
    assert {(r["model_id"], r["system"]) for r in rows} == {
        ("Qwen/Qwen3-8B", "h100_x1_vllm.yaml"),
        ("Qwen/Qwen3-14B", "h100_x1_vllm.yaml"),
        ("Qwen/Qwen3-32B", "h100_x1_vllm.yaml"),
        ("Qwen/Qwen3-32B", "h100_x2_tp2.yaml"),
    }
    assert len(rows) == 30  # every H100 lm-arena-chat row of the three models in calibration/mlenergy_v3_h100.csv
    import csv
    from pathlib import Path

    src = Path("/work/shared/reference/calibration/mlenergy_v3_h100.csv")
    if src.exists():  # the rows are the CSV's, field for field
        by = {(r["model_id"], int(r["max_num_seqs"]), r["system"]): r for r in rows}
        n = 0
        for row in csv.DictReader(src.open()):
            if (
                row["model_id"] in ("Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B")
                and row["task"] == "lm-arena-chat"
            ):
                r = by[
                    (
                        row["model_id"],
                        int(row["max_num_seqs"]),
                        f"h100_x{row['num_gpus']}_"
                        + ("vllm.yaml" if row["num_gpus"] == "1" else f"tp{row['tp']}.yaml"),
                    )
                ]
                assert (r["avg_power_w_per_gpu"], r["energy_per_token_j"], r["median_itl_ms"]) == (
                    float(row["avg_power_W_per_gpu"]),
                    float(row["energy_per_token_J"]),
                    float(row["median_itl_ms"]),
                )
                n += 1
        assert n == 30
    je = {_tag(r): round(_err(r, "model_energy_per_token_j", "energy_per_token_j"), 3) for r in rows}
    assert all(abs(e) <= 0.11 for e in je.values()), je
    for r in rows:
        pe = _err(r, "model_power_w_per_gpu", "avg_power_w_per_gpu")
        assert pe <= 0.30, _tag(r)
        if abs(pe) > 0.15:
            assert pe > 0 and _step_err(r) < -0.05, (_tag(r), pe, _step_err(r))
    # the TP1 -> TP2 finding: measured energy per step of both GPUs falls, the model's rises
    q32 = {r["system"]: r for r in rows if r["model_id"] == "Qwen/Qwen3-32B" and round(r["avg_batch_size"]) == 8}
    meas = {k: r["avg_power_w_per_gpu"] * r["median_itl_ms"] * (2 if "tp2" in k else 1) for k, r in q32.items()}
    model = {k: r["model_power_w_per_gpu"] * r["model_tpot_ms"] * (2 if "tp2" in k else 1) for k, r in q32.items()}
    assert (
        meas["h100_x2_tp2.yaml"] < meas["h100_x1_vllm.yaml"] and model["h100_x2_tp2.yaml"] > model["h100_x1_vllm.yaml"]
    )


def test_mlenergy_energy_per_token_is_power_times_step_time(mlenergy):
    """J/token error = power error x step-time error (x the batch rounding)."""
    for r in mlenergy:
        b_model = max(1, round(r["avg_batch_size"]))
        pred = (
            (1 + _err(r, "model_power_w_per_gpu", "avg_power_w_per_gpu"))
            * (1 + _step_err(r))
            * (r["avg_batch_size"] / b_model)
        )
        assert 1 + _err(r, "model_energy_per_token_j", "energy_per_token_j") == pytest.approx(pred, rel=0.02)


def test_mlenergy_energy_per_token_within_15_percent_every_row(mlenergy):
    """Issue 12's J/token target: every row (8B calibration; 3.1-70B and 3.3-70B TP4 held out) within 15 %;
    the step per output token within 11 % (the 8B steps are 4-9 % short at every batch: the residual the
    vllm stack's former fitted host intercept stood for)."""
    errs = {_tag(r): round(_err(r, "model_energy_per_token_j", "energy_per_token_j"), 3) for r in mlenergy}
    assert all(abs(e) <= 0.15 for e in errs.values()), errs
    steps = {_tag(r): round(_step_err(r), 3) for r in mlenergy}
    assert all(abs(e) <= (0.11 if k.startswith("meta-llama/") else 0.15) for k, e in steps.items()), steps


def test_mlenergy_decode_context_is_token_weighted(mlenergy):
    """Each row's decode runs at prompt + E[L^2] / 2E[L] (a request of L tokens is in L steps); the data
    column obeys E[L^2] / E[L] >= E[L] (Cauchy-Schwarz; the leaderboard's histograms are wide: ~2x)."""
    from attnsim.studies import validate

    p = validate._load("power")["prompt_len"]
    for r in mlenergy:
        assert r["len_weighted_output_len"] >= r["avg_output_len"]
        assert r["decode_context"] == p + round(r["len_weighted_output_len"] / 2)


def test_vllm_stack_in_every_row(mlenergy):
    """The rows run under software: vllm (ML.ENERGY ran vLLM v0.11.1 with async scheduling and top-p): a decode
    step is the software-none step plus the sampler op (GPU work, dynamic energy), the host time hidden."""
    from attnsim.hwmodels.stack import load_stack
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    st = load_stack("vllm")
    assert {r["system"] for r in mlenergy} == {"h100_x1_vllm.yaml", "h100_x2_tp2.yaml", "h100_x4_tp4.yaml"}
    assert st.custom_allreduce
    assert st.async_scheduling and st.sampling == "top_p_sort"
    dec = {}
    for sysname in ("h100_x1", "h100_x1_vllm.yaml"):
        (d,) = run_experiment(
            load_experiment(
                "configs/validation/power/mlenergy_h100.yaml",
                [f"experiment.systems=[{sysname}]", "experiment.models=[llama3-8b]", "scenarios.chat.output_len=16"],
            )
        )
        dec[sysname] = d["breakdown"]["decode_step"]
    v, n = dec["h100_x1_vllm.yaml"], dec["h100_x1"]
    assert "host_overhead" not in v["time_s_by_op"]  # 0.69 ms of host work behind a ~7 ms GPU step
    assert v["time_s"] - n["time_s"] == pytest.approx(v["time_s_by_op"]["sampler"], rel=1e-9)
    assert v["energy_j_by_op"]["sampler"] > 0


def test_power_set_rows():
    from attnsim.studies import validate

    assert "power" in validate.SETS
    rows = validate.power_rows()
    assert {r.role for r in rows} == {"calibration", "validation"}
    assert all(np.isfinite(r.measured) and r.published > 0 and r.source for r in rows)


def test_power_runs_per_gpu_and_per_token_do_not_scale_with_replicas(monkeypatch):
    """power_runs' energy and time are one replica's steps (engine.cost_step): 2 replicas of 1 GPU serving 2 x
    the batch draw the same per-GPU power and J/token as 1 replica (they were halved: divided by replicas twice)."""
    from attnsim.studies import validate

    real = validate._load
    row = {
        "model_id": "x",
        "model": "llama3-8b",
        "system": "h100_x1_vllm.yaml",
        "role": "calibration",
        "avg_batch_size": 8,
        "avg_output_len": 20,
        "len_weighted_output_len": 30,
    }
    out = {}
    for reps in (1, 2):
        monkeypatch.setattr(
            validate, "_load", lambda n, b=8 * reps: {**real(n), "rows": [{**row, "avg_batch_size": b}]}
        )
        (out[reps],) = validate.power_runs(
            sets=(
                "models.llama3-8b.num_layers=2",
                f"systems.h100_x1_vllm.devices.gpu.count={reps}",
                f"systems.h100_x1_vllm.parallelism.replicas={reps}",
            )
        )
    for k in ("model_power_w_per_gpu", "model_energy_per_token_j", "model_step_ms"):
        assert out[2][k] == pytest.approx(out[1][k], rel=1e-9), k
