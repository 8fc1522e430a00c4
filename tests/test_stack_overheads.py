"""Software-stack presets (system key ``software``, hwmodels/stack.py): host costs once per step and
per request, in attnsim run and attnsim serve; ``none`` changes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.system import build_system
from attnsim.sim.experiment import GenerationSpec, load_experiment
from attnsim.sim.runner import run_experiment, simulate_generation
from attnsim.studies.serve.run import quick_pool
from attnsim.studies.serve.scheduler import simulate_pool

B, P, O = 3, 48, 5
SCEN = f"experiment.scenarios={{s: {{batch_size: {B}, prompt_len: {P}, output_len: {O}}}}}"
STEP, PER_REQ, REQ = 123.0, 7.0, 456.0  # us, hand numbers of the test stack


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("stacks") / "hand.yaml"
    p.write_text(f"kind: stack\nname: hand\nstep_us: {STEP}\nrequest_step_us: {PER_REQ}\nrequest_us: {REQ}\n")
    return str(p)


def _exp(system, *sets):
    return load_experiment(
        None,
        [
            f"experiment.systems=[{system}]",
            "experiment.baseline=null",
            "experiment.models=[llama2-7b]",
            "models.llama2-7b.num_layers=2",
            SCEN,
            "experiment.generation={mode: exact}",
            *sets,
        ],
    )


def _doc(system, *sets):
    (doc,) = run_experiment(_exp(system, *sets))
    assert doc["status"] == "ok"
    return doc


@pytest.mark.parametrize("system", ["h100_x1", "cent_pp2_tp4"])  # sequential steps; pipeline parallel
def test_costs_added_exactly_once_per_step_and_request(system, stack_file):
    base = _doc(system, f"systems.{system}.software=none")
    withs = _doc(system, f"systems.{system}.software={stack_file}")
    m0, m1 = base["metrics"], withs["metrics"]
    step_s = (STEP + PER_REQ * B) * 1e-6
    assert m1["ttft_s"] - m0["ttft_s"] == pytest.approx(step_s + REQ * 1e-6, rel=1e-9)
    if base["metrics"].get("pp", 1) == 1:  # PP decode: on each micro-batch's chain (test_cent_faithful.py)
        assert m1["tpot_s"] - m0["tpot_s"] == pytest.approx(step_s, rel=1e-9)
        assert m1["decode_time_s"] - m0["decode_time_s"] == pytest.approx((O - 1) * step_s, rel=1e-9)
    else:  # 2 micro-batches (2 + 1 requests), 2 layers: the host's two shares in a row bind the period
        assert m1["tpot_s"] == pytest.approx((2 * STEP + PER_REQ * B) * 1e-6, rel=1e-9)
        assert m1["tpot_s"] > m0["tpot_s"] + (STEP + 2 * PER_REQ) * 1e-6  # above every chain + its share
    # host time: devices idle (static energy over it, no dynamic energy)
    assert m1["dynamic_energy_per_token_j"] == pytest.approx(m0["dynamic_energy_per_token_j"], rel=1e-12)
    pre = withs["breakdown"]["prefill"]
    assert pre["time_s_by_op"]["host_overhead"] == pytest.approx(step_s, rel=1e-12)
    assert pre["time_s_by_op"]["host_request"] == pytest.approx(REQ * 1e-6, rel=1e-12)
    assert pre["time_s_by_device"]["host"] == pytest.approx(step_s + REQ * 1e-6, rel=1e-12)
    assert sum(pre["static_energy_j_by_device"].values()) == pytest.approx(pre["energy_j_by_component"]["static"])
    exp = _exp(system)
    static_w = build_system(exp.systems[system], exp.tree.hardware, exp.tree.file_of).static_power_w()
    assert pre["energy_j"] - base["breakdown"]["prefill"]["energy_j"] == pytest.approx(
        static_w * (step_s + REQ * 1e-6), rel=1e-9
    )


def test_none_is_todays_result_bit_for_bit(tmp_path):
    zero = tmp_path / "zero.yaml"
    zero.write_text("kind: stack\nname: zero\n")
    ref = json.dumps(_doc("h100_x1"), sort_keys=True)
    assert json.dumps(_doc("h100_x1", "systems.h100_x1.software=none"), sort_keys=True) == ref
    assert json.dumps(_doc("h100_x1", f"systems.h100_x1.software={zero}"), sort_keys=True) == ref


def test_eager_preset_sets_the_gpu_kernel_mode():
    exp = _exp("h100_x1", "systems.h100_x1.software=eager")
    system = build_system(exp.systems["h100_x1"], exp.tree.hardware, exp.tree.file_of)
    assert system.pools["gpu"].model.spec.software_stack == "eager"
    # the preset = the hardware's eager kernels + its host costs (one mechanism for the kernel mode)
    hw = _doc("h100_x1", "hardware.h100_sxm.software_stack=eager")["metrics"]
    pre = _doc("h100_x1", "systems.h100_x1.software=eager")["metrics"]
    s = system.stack
    assert pre["tpot_s"] - hw["tpot_s"] == pytest.approx((s.step_us + s.request_step_us * B) * 1e-6, rel=1e-9)


def test_serve_one_request_includes_the_costs(stack_file):
    Pn, On = 200, 6
    memo = {"context_bucket": 1, "token_bucket": 1, "relative_bucket": 0}
    sc = {"prompt_len": Pn, "output_len": On, "batch_size": 1}
    sets = ["models.llama3-8b.num_layers=2"]
    runs = {}
    for name, extra in (("none", []), ("hand", [f"systems.h100_x1.software={stack_file}"])):
        pool, _, _ = quick_pool(scenario=sc, serving={"memo": memo}, sets=sets + extra)
        r = simulate_pool(pool, np.zeros(1), np.array([Pn]), np.array([On]))
        runs[name] = (r.first_token_s[0], (r.finish_s[0] - r.first_token_s[0]) / (On - 1), pool)
    step_s = (STEP + PER_REQ) * 1e-6
    assert runs["hand"][0] - runs["none"][0] == pytest.approx(REQ * 1e-6 + step_s, rel=1e-9)
    assert runs["hand"][1] - runs["none"][1] == pytest.approx(step_s, rel=1e-9)
    pool = runs["hand"][2]  # and serve = run with the same stack
    ref = simulate_generation(pool.system, pool.model, pool.sc, GenerationSpec(mode="exact"))["metrics"]
    assert runs["hand"][0] == pytest.approx(ref["ttft_s"], rel=1e-9)
    assert runs["hand"][1] == pytest.approx(ref["tpot_s"], rel=1e-9)


@pytest.mark.parametrize("value,expect", [("nosuch", "unknown stacks config 'nosuch'"), ("{a: 1}", "software")])
def test_bad_software_is_refused_in_one_line(value, expect):
    with pytest.raises(ConfigError) as e:
        run_experiment(_exp("h100_x1", f"systems.h100_x1.software={value}"))
    msg = str(e.value)
    assert expect in msg and "software" in msg and "\n" not in msg


def test_bad_stack_field_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: stack\nname: bad\nstep_us: -1\n")
    with pytest.raises(ConfigError) as e:
        run_experiment(_exp("h100_x1", f"systems.h100_x1.software={bad}"))
    assert "step_us" in str(e.value) and "\n" not in str(e.value)


def test_builtin_presets_load():
    from attnsim.hwmodels.stack import load_stack

    for name, kernels in (("vllm", "fused"), ("trtllm", "fused"), ("eager", "eager")):
        s = load_stack(name)
        assert s.name == name and s.kernels == kernels and s.step_us > 0 and s.request_us > 0
    assert load_stack("trtllm").step_us < load_stack("vllm").step_us  # C++ runtime + CUDA graphs


def test_every_stack_field_acts_or_only_names(tmp_path):
    """The no-silent-no-op rule for StackSpec (presets are not in the config tree the walk covers)."""
    from attnsim.hwmodels.stack import StackSpec

    cosmetic = {"kind", "name", "description", "source"}
    changed = {"kernels": "eager", "step_us": 10.0, "request_step_us": 10.0, "request_us": 10.0, "sampling": "greedy"}
    # custom_allreduce acts only on NVLink tensor parallelism: test_custom_allreduce_is_the_links_custom_mode;
    # async_scheduling only where there is host time: test_async_scheduling_exposes_only_host_beyond_the_step
    assert set(StackSpec.model_fields) == cosmetic | set(changed) | {"custom_allreduce", "async_scheduling"}
    base = tmp_path / "base.yaml"
    base.write_text("kind: stack\nname: base\n")
    ref = _doc("h100_x1", f"systems.h100_x1.software={base}")["metrics"]
    for field, value in changed.items():
        f = tmp_path / f"{field}.yaml"
        f.write_text(f"kind: stack\nname: {field}\n{field}: {value}\n")
        assert _doc("h100_x1", f"systems.h100_x1.software={f}")["metrics"] != ref, field


def test_custom_allreduce_is_the_links_custom_mode(tmp_path):
    """custom_allreduce: true = allreduce: custom on the NVLink preset (same numbers as setting it there),
    different from the preset's own mode (nccl); a stack without it leaves the link alone."""
    on, off = tmp_path / "on.yaml", tmp_path / "off.yaml"
    on.write_text("kind: stack\nname: ar_on\ncustom_allreduce: true\n")
    off.write_text("kind: stack\nname: ar_off\n")

    def ar_s(*sets):
        b = _doc("dgx_h100", *sets)["breakdown"]["decode_step"]["time_s_by_op"]
        return sum(v for k, v in b.items() if k.endswith("allreduce"))

    base = ar_s(f"systems.dgx_h100.software={off}")
    custom = ar_s(f"systems.dgx_h100.software={on}")
    assert custom == pytest.approx(
        ar_s(f"systems.dgx_h100.software={off}", "hardware.nvlink4.allreduce=custom"), rel=1e-12
    )
    assert 0 < custom < base  # decode-sized messages: one-/two-shot beats NCCL's latency floor


def test_async_scheduling_exposes_only_host_beyond_the_step(tmp_path):
    """async_scheduling: a step's host time overlaps its device time, only max(0, host - device) is on the
    critical path (hand numbers: a 10 s host step exposes 10 s - the device step; 123 us is hidden)."""
    from attnsim.hwmodels.stack import exposed_host_s, load_stack

    dev = {}
    for name, step_us, asyn in (("serial", STEP, "false"), ("hidden", STEP, "true"), ("long", 1e7, "true")):
        f = tmp_path / f"{name}.yaml"
        # a 10 s host step is outside step_us's plausible range (<= 1 s, docs/reference/ranges.md): opted out
        allow = "allow_out_of_range: [step_us]\n" if step_us > 1e6 else ""
        f.write_text(f"kind: stack\nname: {name}\nstep_us: {step_us}\nasync_scheduling: {asyn}\n{allow}")
        dev[name] = _doc("h100_x1", f"systems.h100_x1.software={f}")["breakdown"]["decode_step"]
        assert exposed_host_s(load_stack(str(f)), step_us * 1e-6, 1e-3) == (
            max(0.0, step_us * 1e-6 - 1e-3) if asyn == "true" else step_us * 1e-6
        )
    gpu = dev["serial"]["time_s_by_device"]["gpu"]
    assert dev["serial"]["time_s_by_op"]["host_overhead"] == pytest.approx(STEP * 1e-6, rel=1e-12)
    assert "host_overhead" not in dev["hidden"]["time_s_by_op"] and dev["hidden"]["time_s"] == pytest.approx(gpu)
    assert dev["long"]["time_s"] == pytest.approx(10.0, rel=1e-12)  # host-bound: the host's 10 s
    assert dev["long"]["time_s_by_op"]["host_overhead"] == pytest.approx(10.0 - gpu, rel=1e-9)


def test_sampler_op_bytes_and_order(tmp_path):
    """sampling: a `sampler` row after lm_head with tokens x vocabulary x SAMPLERS bytes (decode: one token per
    request); a bytes-bound GPU op, so greedy < FlashInfer sort-free < sort-based top-p in time; its energy is
    dynamic (not idle host time)."""
    from attnsim.hwmodels.stack import SAMPLERS

    vocab = 32000  # llama2-7b
    t, e = {}, {}
    for method in ("none", "greedy", "top_p_flashinfer", "top_p_sort"):
        f = tmp_path / f"{method}.yaml"
        f.write_text(f"kind: stack\nname: {method}\nsampling: {method}\n")
        d = _doc("h100_x1", f"systems.h100_x1.software={f}")["breakdown"]["decode_step"]
        t[method], e[method] = d["time_s_by_op"].get("sampler", 0.0), d["energy_j_by_op"].get("sampler", 0.0)
    assert t["none"] == 0.0 and 0 < t["greedy"] < t["top_p_flashinfer"] < t["top_p_sort"]
    assert all(e[m] > 0 for m in ("greedy", "top_p_flashinfer", "top_p_sort"))
    from attnsim.hwmodels.gpu import load_hardware
    from attnsim.workloads.scenario import Scenario
    from attnsim.workloads.trace import build_trace
    from attnsim.workloads.zoo import load_model

    tr = build_trace(
        load_model("llama2-7b"), Scenario(batch_size=B, prompt_len=P), "decode", tp=2, sampler=SAMPLERS["top_p_sort"]
    )
    assert list(tr["op"][-2:]) == ["lm_head", "sampler"]
    assert tr["act_bytes"][-1] == B * vocab * SAMPLERS["top_p_sort"][0]  # full vocabulary on every TP rank
    # bytes-bound: the GPU's streaming time of those bytes + one kernel launch
    g = load_hardware("h100_sxm")
    assert t["top_p_sort"] == pytest.approx(float(g.memory_time_s(B * vocab * 200.0)) + 1e-6, rel=1e-6)


def test_async_scheduling_under_pipeline_parallelism(tmp_path):
    """pp > 1 decode (each micro-batch's host share on its chain, attnsim/sim/pipeline.py): under async_scheduling
    a share overlaps its chain, so chain + max(0, share - chain) = max(chain, share) and the period is
    max(device period, shares in a row) (hand form; 2 micro-batches of 2 requests, no per-request cost)."""
    pp = "systems.dgx_h100.parallelism={tp: 4, pp: 2}"
    sc = "experiment.scenarios={s: {batch_size: 4, prompt_len: 48, output_len: 3}}"
    dev = _doc("dgx_h100", pp, sc, "systems.dgx_h100.software=none")["metrics"]["tpot_s"]
    for step_us in (0.3 * dev * 1e6, 0.7 * dev * 1e6, 3.0 * dev * 1e6):  # hidden; shares in a row bind; host-bound
        tpot = {}
        for asyn in ("false", "true"):
            f = tmp_path / f"{asyn}.yaml"
            f.write_text(f"kind: stack\nname: s{asyn}\nstep_us: {step_us}\nasync_scheduling: {asyn}\n")
            tpot[asyn] = _doc("dgx_h100", pp, sc, f"systems.dgx_h100.software={f}")["metrics"]["tpot_s"]
        assert tpot["true"] == pytest.approx(max(dev, 2 * step_us * 1e-6), rel=1e-9)
        assert tpot["false"] >= tpot["true"]
    assert tpot["false"] == tpot["true"]  # host-bound: the host's shares in a row either way


def test_async_scheduling_first_step_is_exposed(stack_file, tmp_path):
    """Async scheduling prepares step n + 1 behind step n: attnsim run's prefill (the batch's first step) has no
    step before it, so its host time is on the critical path in full (as without async: same TTFT), while a
    decode step's shorter host time is hidden."""
    f = tmp_path / "async.yaml"
    f.write_text(
        f"kind: stack\nname: hand_async\nstep_us: {STEP}\nrequest_step_us: {PER_REQ}\nrequest_us: {REQ}\n"
        "async_scheduling: true\n"
    )
    serial, asyn = (_doc("h100_x1", f"systems.h100_x1.software={s}") for s in (stack_file, f))
    assert asyn["metrics"]["ttft_s"] == pytest.approx(serial["metrics"]["ttft_s"], rel=1e-12)
    assert asyn["breakdown"]["prefill"]["time_s_by_op"]["host_overhead"] == pytest.approx(
        (STEP + PER_REQ * B) * 1e-6, rel=1e-12
    )
    assert "host_overhead" not in asyn["breakdown"]["decode_step"]["time_s_by_op"]
