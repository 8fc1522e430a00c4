"""The first command's experience: the default experiment compares a GPU, an HBM-PIM and a CXL-PNM system
fairly, `attnsim run` explains what differs from numbers that are in the results, and a cold Numba
cache is announced."""

import json
import re

import pytest

from attnsim.cli import main
from attnsim.core.report import differ_lines
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment

# the default experiment, shrunk (2 layers, sampled decode) so the test stays well under a second
SMALL = ["models.llama2-70b.num_layers=2", "experiment.generation={mode: sampled, samples: 3}"]


def _family(exp, name: str) -> str:
    """gpu | hbm_pim | cxl_pnm | other, from the system's device pools and links (hardware files)."""
    s, hw = exp.systems[name], exp.tree.hardware
    kinds = {role: hw[p.hardware]["kind"] for role, p in s.devices.items()}
    pim = [hw[s.devices[r].hardware] for r, k in kinds.items() if k == "pim"]
    if not pim:
        return "gpu" if set(kinds.values()) == {"gpu"} else "other"
    drams = {str(p.get("dram", "")) for p in pim}
    cxl = any("cxl" in str(hw[link.hardware].get("name", link.hardware)).lower() for link in s.links.values())
    if all(d.startswith("hbm") for d in drams):
        return "hbm_pim"
    return "cxl_pnm" if cxl else "other"


def test_default_experiment_compares_gpu_hbm_pim_and_cxl_pnm_fairly():
    exp = load_experiment()
    fam = {n: _family(exp, n) for n in exp.spec.systems}
    assert {"gpu", "hbm_pim", "cxl_pnm"} <= set(fam.values()), fam
    assert fam[exp.spec.baseline] == "gpu"
    # one model and one scenario for all systems, and the same GPUs (the comparison is of what is added)
    assert len(exp.spec.models) == 1 and len(exp.spec.scenarios) == 1
    gpus = {
        (exp.systems[n].devices[r].hardware, exp.systems[n].devices[r].count)
        for n in exp.spec.systems
        for r in exp.systems[n].devices
        if exp.tree.hardware[exp.systems[n].devices[r].hardware]["kind"] == "gpu"
    }
    assert len(gpus) == 1, gpus


NUM = r"(\d+(?:\.\d+)?(?:e[-+]\d+)?)"


def _close(text: str, value: float) -> bool:
    """``text`` is ``value`` printed with 4 significant digits (attnsim.core.report.fmt_num)."""
    return abs(float(text) - value) <= 6e-4 * abs(value) + 1e-12


def test_what_differs_lines_are_numbers_of_the_results():
    docs = run_experiment(load_experiment(None, SMALL))
    by = {d["system"]: d for d in docs}
    base = by[docs[0]["vs_baseline"]["baseline"] if "vs_baseline" in docs[0] else docs[1]["vs_baseline"]["baseline"]]
    lines = differ_lines(docs)
    text = "\n".join(lines)
    assert lines[0].startswith(f"{base['system']} (baseline")
    checked = 0
    current = base
    for ln in lines:
        m = re.match(
            rf"(\S+) vs (\S+): decode step {NUM} vs {NUM} ms \({NUM}x (faster|slower)\), "
            rf"TTFT {NUM} vs {NUM} ms, {NUM} vs {NUM} J/token$",
            ln,
        )
        if m:
            d, b = by[m.group(1)], by[m.group(2)]
            current = d
            t, tb = d["breakdown"]["decode_step"]["time_s"], b["breakdown"]["decode_step"]["time_s"]
            assert _close(m.group(3), t * 1e3) and _close(m.group(4), tb * 1e3)
            assert _close(m.group(5), tb / t if m.group(6) == "faster" else t / tb)
            assert _close(m.group(7), d["metrics"]["ttft_s"] * 1e3) and _close(m.group(8), b["metrics"]["ttft_s"] * 1e3)
            e, eb = d["metrics"]["energy_per_token_j"], b["metrics"]["energy_per_token_j"]
            assert _close(m.group(9), e) and _close(m.group(10), eb)
            checked += 1
            continue
        if ln.startswith("  largest changes: "):
            bd, bb = current["breakdown"]["decode_step"], base["breakdown"]["decode_step"]
            for part in ln[len("  largest changes: ") :].split("; "):
                g = re.match(rf"(\S+)( \(in memory\))? {NUM} vs {NUM} ms$", part)
                ops = ("attn_score", "softmax", "attn_context") if g.group(1) == "attention" else (g.group(1),)
                assert _close(g.group(3), sum(bd["time_s_by_op"].get(o, 0.0) for o in ops) * 1e3)
                assert _close(g.group(4), sum(bb["time_s_by_op"].get(o, 0.0) for o in ops) * 1e3)
                assert bool(g.group(2)) == all(o in (bd.get("pim_mapping") or {}) for o in ops)
                checked += 1
        if ln.startswith("  by device: "):
            bd = current["breakdown"]["decode_step"]
            dev, _, bound = ln[len("  by device: ") :].partition("; by bound: ")
            for table, part in (("time_s_by_device", dev), ("time_s_by_bound", bound)):
                items = re.findall(rf"(\S+) {NUM} ms", part)
                assert {k for k, _ in items} == {k for k, v in bd[table].items() if v > 0}
                for k, v in items:
                    assert _close(v, bd[table][k] * 1e3)
                    checked += 1
        if ln.startswith("  memory bandwidth: "):
            g = re.match(rf"  memory bandwidth: (\S+) (\S+) {NUM} of {NUM} GB/s \({NUM}%\)$", ln)
            bw = current["metrics"]["bandwidth"][f"{g.group(1)}:{g.group(2)}"]
            assert _close(g.group(3), bw["achieved_gbps"]) and _close(g.group(4), bw["peak_gbps"])
            assert abs(float(g.group(5)) - 100 * bw["utilization"]) <= 0.05
            checked += 1
    assert text.count(" vs " + base["system"] + ":") == len(docs) - 1
    assert checked >= 20
    # physical sense of the default comparison: attention on HBM-PIM is faster than on the GPUs, and the
    # by-bound split of every decode step adds up to the step
    att = lambda d: sum(
        d["breakdown"]["decode_step"]["time_s_by_op"][o] for o in ("attn_score", "softmax", "attn_context")
    )
    assert att(by["attacc_h100"]) < att(base)
    for d in docs:
        bd = d["breakdown"]["decode_step"]
        assert abs(sum(bd["time_s_by_bound"].values()) - bd["time_s"]) <= 1e-9 + 1e-6 * bd["time_s"]


def _compile_event(monkeypatch):
    """What Numba broadcasts when it compiles a dispatcher (a cache miss): here for the DRAM engine's entry kernel,
    with this process's first-compile flag reset (its kernels were loaded or compiled by an earlier test)."""
    from numba.core import event

    from attnsim.core import jitcache
    from attnsim.hwmodels.dram import kernel

    monkeypatch.setattr(jitcache._LISTENER, "said", False)
    with event.trigger_event("numba:compile", data={"dispatcher": kernel.run_kernel, "args": (), "return_type": None}):
        pass


def test_run_prints_the_differences_and_a_compile_notice(tmp_path, monkeypatch, capsys):
    """The compile line (attnsim.core.jitcache): the device layer logs it on a Numba compile event; `attnsim` and the
    API print it as one stderr line. A real cold compile is tested in test_packaging (wheel) and test_jitcache."""
    from attnsim.core import cache

    cache.reset()  # an engine result memoised by an earlier test would mean no kernel dispatch here
    assert main(["run", "--no-write"] + [x for s in SMALL for x in ("--set", s)]) == 0
    cap = capsys.readouterr()
    assert "what differs and why" in cap.out and "attacc_h100 vs dgx_h100: decode step" in cap.out
    _compile_event(monkeypatch)  # as the first kernel dispatch of a run on an empty cache
    _compile_event(monkeypatch)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("attnsim: compiling Numba kernels into ") for e in err), err
    assert "15-30 s" in err[0]  # jitcache.COLD_COMPILE_S and "attnsim warmup" in err[0]
    # a compile of code that is not attnsim's says nothing
    from numba import njit
    from numba.core import event

    with event.trigger_event("numba:compile", data={"dispatcher": njit(lambda: 1)}):
        pass
    assert capsys.readouterr().err == ""
    # bad input found before any DRAM work gives exactly one line
    bad = SMALL + ["systems.attacc_h100.mapper.options.nope=1"]
    assert main(["run", "--no-write"] + [x for s in bad for x in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nope" in err[0], err
    # a GPU-only run compiles no DRAM kernel (no notice); no baseline, nothing to compare; --json stays JSON
    gpu = SMALL + ["experiment.systems=[dgx_h100]", "experiment.baseline=null"]
    assert main(["run", "--no-write", "--json"] + [x for s in gpu for x in ("--set", s)]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "what differs" not in cap.out and json.loads(cap.out)["runs"][0]["system"] == "dgx_h100"


def test_the_api_prints_the_compile_notice(monkeypatch, capsys):
    import logging

    import attnsim
    from attnsim.core import notices

    log = logging.getLogger(notices.LOGGER)
    monkeypatch.setattr(log, "handlers", [])  # as in a fresh interpreter: nobody listens yet
    monkeypatch.setattr(log, "level", logging.NOTSET)
    attnsim.run(sets=SMALL + ["experiment.systems=[dgx_h100]", "experiment.baseline=null"])
    _compile_event(monkeypatch)
    assert capsys.readouterr().err.startswith("attnsim: compiling Numba kernels into ")


def test_time_by_bound_adds_up_to_the_step_under_pipeline_parallelism():
    sets = [
        "experiment.systems=[dgx_a100]",
        "experiment.models=[llama2-7b]",
        "experiment.baseline=null",
        "experiment.scenarios={s: {batch_size: 8, prompt_len: 64, output_len: 3}}",
        "experiment.generation={mode: exact}",
        "systems.dgx_a100.parallelism={tp: 2, pp: 4}",
    ]
    d = run_experiment(load_experiment(None, sets))[0]
    for phase in ("prefill", "decode_step"):
        bd = d["breakdown"][phase]
        assert set(bd["time_s_by_bound"]) <= {"compute", "memory", "overhead", "link", "other"}
        assert sum(bd["time_s_by_bound"].values()) == pytest.approx(bd["time_s"], rel=1e-9)
