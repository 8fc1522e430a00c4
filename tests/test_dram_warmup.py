"""`attnsim warmup` covers `attnsim dram`: after cli_dram.warm_all, the CLI's runs dispatch no kernel signature
that warm_all did not (so none compiles on a node whose image ran `attnsim warmup`)."""

import json
import subprocess
import sys

# the kernel signatures every Numba dispatcher of the modules under PREFIX has compiled
_SIGNATURES = r"""

def signatures():
    seen = {}
    for name, mod in list(sys.modules.items()):
        if name.startswith(PREFIX) and mod is not None:
            for attr, obj in vars(mod).items():
                if isinstance(obj, CPUDispatcher):
                    seen[f"{name}.{attr}"] = {str(s) for s in obj.signatures}
    return seen
"""

_SCRIPT = (
    r"""
import io, contextlib, json, os, sys, tempfile
import numpy as np
from numba.core.registry import CPUDispatcher
import attnsim.hwmodels.dram as pkg
from attnsim.cli import main
from attnsim.cli.dram import warm_all, device_spec
from attnsim.hwmodels.dram.traces import write_npy

PREFIX = "attnsim.hwmodels.dram"
"""
    + _SIGNATURES
    + r"""

warm_all()
before = signatures()
tmp = tempfile.mkdtemp()
spec = device_spec("hbm3_6400", 2)
addr = np.arange(64, dtype=np.int64) * 64
write_npy(os.path.join(tmp, "t.npy"), addr, addr % 3 == 0)
with open(os.path.join(tmp, "r.trace"), "w") as f:
    f.write("".join(f"LD 0x{a:x}\n" for a in addr))
with open(os.path.join(tmp, "d.trace"), "w") as f:
    f.write("".join(f"0x{a:x} READ {i}\n" for i, a in enumerate(addr)))
with open(os.path.join(tmp, "a.trace"), "w") as f:
    f.write("# a comment line: the general parser\n" + "".join(f"0x{a:x} R\n" for a in addr))
runs = []
for ch in ("1", "2"):
    for tr in ("t.npy", "r.trace", "d.trace", "a.trace"):
        runs.append(["--channels", ch, "--trace", os.path.join(tmp, tr)])
    runs.append(["--channels", ch, "--trace", os.path.join(tmp, "t.npy"), "--controller", "dramsim3"])
    runs.append(["--channels", ch, "--trace", os.path.join(tmp, "t.npy"), "--controller", "ramulator2"])
    runs.append(["--channels", ch, "--pattern", "sequential", "--requests", "50000"])
    runs.append(["--channels", ch, "--pattern", "random", "--requests", "2000"])
for r in runs:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["dram", "--device", "hbm3_6400", "--json"] + r) == 0, r
after = signatures()
new = {k: sorted(v - before.get(k, set())) for k, v in after.items() if v - before.get(k, set())}
print("WARMUP " + json.dumps({"new": new, "kernels": len(after)}))
"""
)


def test_warm_all_covers_every_kernel_signature_of_attnsim_dram():
    p = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("WARMUP ")][-1][7:])
    assert out["kernels"] > 10  # the dispatchers were found at all
    assert out["new"] == {}, out["new"]


_COMMANDS = (
    r"""
import io, contextlib, json, os, sys, tempfile
from numba.core.registry import CPUDispatcher
from attnsim.cli import main
from attnsim.cli.warmup import warm_all

PREFIX = "attnsim.hwmodels"
"""
    + _SIGNATURES
    + r"""

warm_all()
before = signatures()
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "p.s"), "w") as f:
    f.write("ACTAB 0, 0\nMACAB 0, 0, 32\nPREA 0\n")
small = ["--set", "models.llama2-70b.num_layers=2", "--set", "experiment.generation={mode: sampled, samples: 3}"]
runs = [["run", "--no-write"] + small,  # the default comparison: GPU, HBM-PIM, CXL-PNM
        ["serve", "serve_paging", "--set", "experiment.systems=[attacc_h100]", "--set",
         "experiment.serving.trace.num_requests=20", "--out", os.path.join(tmp, "serve"), "--json"],
        # 2 layer groups leave the planner little room: the example's 0.02 SLO fails verification there (exit 1,
        # "infeasible"), a looser one is met; this test is about the kernels a plan with --verify compiles
        ["plan", "plan_tiering", "--verify", "--front-points", "2", "--layer-groups", "2", "--accuracy-slo", "0.05"],
        ["pim", "run", os.path.join(tmp, "p.s"), "--device", "attacc_hbm3_pim_stack"]]
for r in runs:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(r) == 0, r
after = signatures()
new = {k: sorted(v - before.get(k, set())) for k, v in after.items() if v - before.get(k, set())}
print("WARMUP " + json.dumps({"new": new, "kernels": len(after)}))
"""
)


def test_warmup_covers_every_kernel_of_run_serve_plan_and_pim():
    """`attnsim warmup` (warmup.warm_all) reaches every kernel signature that `attnsim run` (the default systems),
    `serve` on HBM-PIM, `plan --verify` (fault injection) and `pim run` dispatch; `sweep` and the API run points
    through the same runner as `attnsim run`."""
    p = subprocess.run([sys.executable, "-c", _COMMANDS], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("WARMUP ")][-1][7:])
    assert out["kernels"] > 20  # the DRAM and the fault-injection dispatchers were found at all
    assert out["new"] == {}, out["new"]
