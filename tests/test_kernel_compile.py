"""What a first run compiles (issue 30). On an empty kernel cache the default experiment's systems walk their
command streams interpreted (hwmodels/dram/engine.py kernel_tier): nothing compiles and Numba is not imported.
Forced to the compiled tier, they compile one kernel group (hwmodels/dram/kernel.py, the command-stream walker of
the HBM-PIM and CXL-PNM models) and one signature of each of its kernels: no literal-argument or array-layout
variants (they doubled the compile: 36 compiles of 24 functions before). Counts of compiles, not timings."""

import json
import os
import subprocess
import sys

_SCRIPT = r"""
import io, contextlib, json, os, sys
if os.environ.get("ATTNSIM_DRAM_TIER") != "compiled":  # auto on an empty cache: Numba never imported
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment
    with contextlib.redirect_stdout(io.StringIO()):
        run_experiment(load_experiment("default", SETS))
    print("NUMBA " + json.dumps(sorted(m for m in sys.modules if m == "numba" or m.startswith("numba."))[:3]))
    raise SystemExit(0)
from numba.core import event
from numba.core.registry import CPUDispatcher

compiled = []  # (kernel group, function, signature) of every cache miss


class Listener(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        d = ev.data or {}
        f = d["dispatcher"].py_func
        compiled.append((f.__code__.co_filename, f.__name__, str(d["args"])))


event.register("numba:compile", Listener())
from attnsim.core import jitcache
from attnsim.sim.experiment import load_experiment
from attnsim.sim.runner import run_experiment

with contextlib.redirect_stdout(io.StringIO()):
    run_experiment(load_experiment("default", SETS))
print("COMPILED " + json.dumps([[jitcache.kernel_group(f), n, s] for f, n, s in compiled]))
"""


_SETS = [  # the default experiment's PIM systems, small (the same command records, fewer of them)
    "experiment.systems=[attacc_h100, cxl_pnm]",
    "experiment.baseline=null",
    "models.llama2-70b.num_layers=1",
    "experiment.scenarios={s: {batch_size: 1, prompt_len: 16, output_len: 2}}",
]


def _run(tmp_path, tier: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NUMBA_CACHE_DIR", "ATTNSIM_CACHE_DIR", "_ATTNSIM_KERNEL_DIR", "ATTNSIM_DRAM_TIER")
    }
    env["ATTNSIM_CACHE_DIR"] = str(tmp_path)  # empty: every kernel the run reaches compiles here
    env["ATTNSIM_DRAM_TIER"] = tier
    script = "SETS = " + json.dumps(_SETS) + "\n" + _SCRIPT
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)


def test_default_systems_on_an_empty_cache_walk_interpreted_without_numba(tmp_path):
    p = _run(tmp_path, "auto")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("NUMBA ")] == ["NUMBA []"]
    assert "compiling Numba kernels" not in p.stderr
    assert not list(tmp_path.rglob("*.nbi"))  # nothing compiled into the cache


def test_default_systems_compile_one_group_and_one_signature_per_kernel(tmp_path):
    p = _run(tmp_path, "compiled")
    assert p.returncode == 0, p.stderr[-3000:]
    compiled = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("COMPILED ")][-1][9:])
    groups = {g for g, _, _ in compiled}
    assert groups == {"hwmodels/dram/kernel.py"}, groups
    names = [n for _, n, _ in compiled]
    twice = {n: [s for _, m, s in compiled if m == n] for n in set(names) if names.count(n) > 1}
    assert twice == {}, twice  # one signature each (a variant compiles the function and its callees again)
    assert {"run_kernel", "tail_refreshes", "prim_il", "prim_macx"} <= set(names)  # the walker itself compiled here
