"""Differential harness: attnsim's DRAM engine vs Ramulator 2.1 (and DRAMsim3) on identical request streams.

Usage:
  python bench/crosscheck_dram.py [--standards hbm2,hbm3,lpddr5,ddr5] [--streams seq,random,...]
      [--requests 50000] [--controller attnsim|ramulator2|dramsim3]
      [--ramulator2 PATH_TO_RAMULATOR2_CHECKOUT [--ramulator2-python PYTHON]]
      [--golden-out DIR]   # write tests/data/dram_golden/<simulator>_<standard>.json from the reference runs
  python bench/crosscheck_dram.py --dramsim3 PATH_TO_DRAMSIM3_CHECKOUT [--dramsim3-cycles 100000]
      [--requests 30000] [--golden-out DIR]   # DRAMsim3's HBM2 / LPDDR4 configurations, --controller dramsim3
  python bench/crosscheck_dram.py --realistic [--requests 1000000] [--ramulator2 PATH] [--dramsim3 PATH]
      [--baseline PYTHON] [--golden-out DIR]   # issue 30's five realistic streams (REALISTIC below): cycles vs
      # Ramulator 2.1 (HBM3) and CPU time vs Ramulator 2.1, DRAMsim3 (HBM2 .ini, dramsim3 preset) and the attnsim
      # that PYTHON imports (the code before a change)

attnsim always runs; Ramulator 2.1 runs when --ramulator2 points at a checkout whose Python bindings are built
(python/ramulator/_ramulator*.so; Ramulator 2.1 is driven from Python). The harness writes a LoadStoreTrace
("LD|ST 0x<addr>") and a driver script into a temporary directory, runs it with PYTHONPATH=<PATH>/python and
parses the JSON the driver prints (controller stats: cycles in Ramulator ticks, row hits/misses/conflicts).
Nothing of Ramulator is kept in attnsim: build it yourself from github.com/CMU-SAFARI/ramulator2.

Streams (hwmodels/dram/streams.py): one channel, fields Pc Ra Bg Ba Ro Co from MSB to LSB = Ramulator's
ChRaBaRoCo mapper, so both simulators see the same banks, rows and columns. Simulated time = cycles x tick
(Ramulator HBM3 ticks at 2x CK). Differences are attnsim vs reference (negative = attnsim faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from attnsim.cli.dram import device_spec
from attnsim.hwmodels.dram.controller import simulate_requests
from attnsim.hwmodels.dram.streams import (
    DRAMSIM3_STANDARDS,
    MAPPING,
    REALISTIC_STREAMS,
    STREAMS,
    dramsim3_spec,
    make_stream,
    stream_digest,
    stream_options,
)

# attnsim preset and the Ramulator 2.1 standard/presets/controller it was taken from (configs/hardware/*.yaml)
STANDARDS = {
    "hbm2": {"preset": "hbm2_2000", "std": "HBM2", "org": "HBM2_8Gb", "timing": "HBM2_2000Mbps", "ctrl": "HBM12"},
    "hbm3": {"preset": "hbm3_6400", "std": "HBM3", "org": "HBM3_16Gb_8hi", "timing": "HBM3_6400Mbps", "ctrl": "HBM34"},
    "lpddr5": {
        "preset": "lpddr5_6400",
        "std": "LPDDR5",
        "org": "LPDDR5_16Gb_x16",
        "timing": "LPDDR5_6400",
        "ctrl": "LPDDR5",
    },
    "ddr5": {
        "preset": "ddr5_4800",
        "std": "DDR5",
        "org": "DDR5_16Gb_x8",
        "timing": "DDR5_4800AN",
        "ctrl": "GenericDDR",
    },
}
RAMULATOR2 = {"simulator": "Ramulator 2.1", "repository": "CMU-SAFARI/ramulator2", "commit": "c5b1c3a"}

_DRIVER = """\
import json, sys, time
import ramulator as R
cfg = json.loads(sys.argv[1])
dram = getattr(R.dram, cfg["std"])(org_preset=cfg["org"], timing_preset=cfg["timing"])
ctrl = getattr(R.controller, cfg["ctrl"])(
    dram=dram, scheduler=R.scheduler.FRFCFS(),
    refresh_manager=R.refresh_manager.NoRefresh() if cfg["refresh"] == "none" else R.refresh_manager.AllBank(),
    row_policy=R.row_policy.ClosedCAP() if cfg["page"] == "closed" else R.row_policy.Open(),
    addr_mapper=R.addr_mapper.ChRaBaRoCo())
mem = R.memory_system.GenericDRAM(clock_ratio=1, controllers=[ctrl],
                                  channel_mapper=R.channel_mapper.CacheLineInterleave())
fe = R.frontend.LoadStoreTrace(clock_ratio=1, path=cfg["trace"])
t0 = time.perf_counter()
sim = R.Simulation(fe, mem)
t1 = time.perf_counter()
c1 = time.process_time()
sim.run()
c2 = time.process_time()
t2 = time.perf_counter()
sim.finalize()
c = sim.stats["memory_system"]["controller"]
timing = dram.resolve()[1]
print("CROSSCHECK " + json.dumps({"ticks": int(c["cycles"]), "tick_multiplier": type(dram).tick_multiplier,
      "tck_ps": timing["tCK_ps"], "row_hits": int(c["row_hits"]), "row_misses": int(c["row_misses"]),
      "row_conflicts": int(c["row_conflicts"]), "setup_wall_s": t1 - t0, "engine_wall_s": t2 - t1,
      "engine_cpu_s": c2 - c1}))
"""


def ramulator_command(python: str, driver: str, cfg: dict) -> list[str]:
    return [python, driver, json.dumps(cfg)]


def run_ramulator2(root: str, python: str, std: str, kind: str, addr, w, tmp: str) -> dict:
    """One Ramulator 2.1 run on the stream; returns time_s, bytes-free counts and the exact command."""
    s = STANDARDS[std]
    trace = os.path.join(tmp, f"{std}_{kind}.trace")
    ops = np.where(w, "ST", "LD")
    with open(trace, "w") as f:
        f.write("\n".join(f"{o} 0x{int(a):x}" for o, a in zip(ops, addr)) + "\n")
    driver = os.path.join(tmp, "driver.py")
    with open(driver, "w") as f:
        f.write(_DRIVER)
    cfg = {
        "std": s["std"],
        "org": s["org"],
        "timing": s["timing"],
        "ctrl": s["ctrl"],
        "trace": trace,
        **stream_options(kind),
    }
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    t0, c0 = time.perf_counter(), children_cpu_s()
    p = subprocess.run(ramulator_command(python, driver, cfg), env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - c0
    line = [x for x in p.stdout.splitlines() if x.startswith("CROSSCHECK ")]
    if p.returncode or not line:
        raise RuntimeError(f"Ramulator 2.1 failed on {std}/{kind} (rc {p.returncode}):\n{p.stderr[-2000:]}")
    r = json.loads(line[-1][len("CROSSCHECK ") :])
    tick_s = r["tck_ps"] * 1e-12 / r["tick_multiplier"]
    cfg["trace"] = f"<{len(addr)}-line LoadStoreTrace>"
    return {
        "ticks": r["ticks"],
        "tick_s": tick_s,
        "time_s": r["ticks"] * tick_s,
        "row_hits": r["row_hits"],
        "row_misses": r["row_misses"],
        "row_conflicts": r["row_conflicts"],
        "engine_wall_s": r["engine_wall_s"],
        "engine_cpu_s": r["engine_cpu_s"],
        "process_wall_s": wall,
        "process_cpu_s": cpu,
        "config": cfg,
    }


def children_cpu_s() -> float:
    """User + system CPU seconds of the finished child processes so far (a process's own cost, whatever the load)."""
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run_attnsim(std: str, kind: str, addr, w, controller: str | None = None) -> dict:
    spec = device_spec(STANDARDS[std]["preset"], channels=1)
    kw = {} if controller is None else {"controller": controller}
    r = simulate_requests(spec, addr, w, mapping=MAPPING, **stream_options(kind), **kw)
    return {
        "cycles": int(r.cycles),
        "time_s": r.time_s,
        "row_hits": int(r.row_hits),
        "row_misses": int(r.row_misses),
        "row_conflicts": int(r.row_conflicts),
        "bytes": int(r.bytes),
    }


def speed(a, n: int, tmp: str) -> None:
    """Side by side on HBM3 seq and random streams of n requests: attnsim engine (sim_wall_s, compile excluded)
    and whole process (`attnsim dram`, from the .npy and from Ramulator's LoadStoreTrace text) vs Ramulator 2.1's
    simulation loop (Simulation.run) and whole process."""
    from attnsim.hwmodels.dram.traces import read_trace_any, write_npy

    spec = device_spec("hbm3_6400", channels=1)
    for kind in ("seq", "random"):
        addr, w = make_stream(spec.org, kind, n, a.seed)
        txt = os.path.join(tmp, f"speed_{kind}.trace")
        with open(txt, "w") as f:
            f.write("\n".join(f"LD 0x{int(x):x}" for x in addr) + "\n")
        npy = os.path.join(tmp, f"speed_{kind}.npy")
        write_npy(npy, addr, w)
        row, best = {}, {}
        for label, path in (("npy", npy), ("text", txt)):
            cmd = [
                sys.executable,
                "-m",
                "attnsim",
                "dram",
                "--device",
                "hbm3_6400",
                "--channels",
                "1",
                "--trace",
                path,
                "--mapping",
                MAPPING,
                "--controller",
                "ramulator2",
                "--json",
            ]
            walls, engines = [], []
            for _ in range(a.process_runs):  # a short process varies with the VM's first-touch cost of fresh pages
                t0 = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True, check=True)
                walls.append(time.perf_counter() - t0)
                out = json.loads(p.stdout)
                engines.append(out["sim_wall_s"])
            row[label], best[label] = float(np.median(walls)), min(walls)
        row["engine"], row["compile"] = float(np.median(engines)), out["compile_s"]
        load = {}
        for label, path in (("npy", npy), ("text", txt)):  # trace loading alone, in this process (parser compiled)
            read_trace_any(path, spec)
            t0 = time.perf_counter()
            read_trace_any(path, spec)
            load[label] = time.perf_counter() - t0
        ncmd = out["row_hits"] + 2 * out["row_misses"] + 3 * out["row_conflicts"]  # RD/WR, + ACT, + PRE
        sim = max(n - out["skipped_requests"], 1) / n  # share of the commands issued (the rest skipped: recur.py)
        line = (
            f"speed hbm3 {kind:6} n={n}: attnsim engine {row['engine']:.2f} s "
            f"({out['skipped_requests']} requests skipped in {out['skip_jumps']} jumps; "
            f"{row['engine'] / max(ncmd * sim, 1) * 1e9:.0f} ns per issued RD/ACT/PRE), "
            f"process {row['npy']:.2f} s (npy) / {row['text']:.2f} s (text) (median of {a.process_runs}; "
            f"best {best['npy']:.2f} / {best['text']:.2f} s), of which trace loading {load['npy']:.2f} s / "
            f"{load['text']:.2f} s, "
            f"compile/cache {row['compile']:.2f} s"
        )
        if a.ramulator2:
            q = run_ramulator2(a.ramulator2, a.ramulator2_python, "hbm3", kind, addr, w, tmp)
            line += (
                f" | Ramulator 2.1 loop {q['engine_wall_s']:.2f} s, process {q['process_wall_s']:.2f} s | "
                f"x{q['engine_wall_s'] / row['engine']:.0f} engine, x{q['process_wall_s'] / row['npy']:.1f} "
                f"process (npy), x{q['process_wall_s'] / row['text']:.1f} process (text)"
            )
        print(line + f" | load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)


DRAMSIM3 = {"simulator": "DRAMsim3", "repository": "umd-memsys/DRAMsim3", "commit": "2981759"}
DRAMSIM3_STREAMS = ("seq", "random", "strided", "mixed", "fewbanks")  # open page, refresh on (its defaults)


def dramsim3_ini(root: str, std: str, tmp: str) -> str:
    """The shipped .ini with one channel and the streams' field order (chrabgbaroco = MAPPING)."""
    src = open(os.path.join(root, "configs", DRAMSIM3_STANDARDS[std]["ini"])).read().splitlines()
    out = []
    for line in src:
        key = line.split("=")[0].strip()
        if key == "channels":
            line = "channels = 1"
        elif key == "address_mapping":
            line = "address_mapping = chrabgbaroco"
        out.append(line)
    path = os.path.join(tmp, f"dramsim3_{std}.ini")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def run_dramsim3(root: str, std: str, kind: str, addr, w, cycles: int, tmp: str) -> dict:
    """DRAMsim3 (build/dramsim3main) for ``cycles`` CK on the stream (all requests at cycle 0, its trace format
    ``0x<addr> READ|WRITE <cycle>``); DRAMsim3 runs a fixed number of cycles, so the result is the requests done
    by then (num_reads_done + num_writes_done) and the row counts."""
    trace = os.path.join(tmp, f"ds3_{std}_{kind}.trace")
    ops = np.where(w, "WRITE", "READ")
    with open(trace, "w") as f:
        f.write("\n".join(f"0x{int(a):x} {o} 0" for o, a in zip(ops, addr)) + "\n")
    ini = dramsim3_ini(root, std, tmp)
    out = os.path.join(tmp, f"ds3_{std}_{kind}")
    os.makedirs(out, exist_ok=True)
    cmd = [os.path.join(root, "build", "dramsim3main"), ini, "-c", str(cycles), "-t", trace, "-o", out]
    t0, c0 = time.perf_counter(), children_cpu_s()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - c0
    stats = os.path.join(out, "dramsim3.json")
    if p.returncode or not os.path.exists(stats):
        raise RuntimeError(f"DRAMsim3 failed on {std}/{kind} (rc {p.returncode}):\n{p.stderr[-2000:]}")
    c = json.load(open(stats))["0"]
    return {
        "cycles": cycles,
        "done": int(c["num_reads_done"]) + int(c["num_writes_done"]),
        "row_hits": int(c["num_read_row_hits"]) + int(c["num_write_row_hits"]),
        "acts": int(c["num_act_cmds"]),
        "ondemand_pres": int(c["num_ondemand_pres"]),
        "refs": int(c["num_ref_cmds"]),
        "process_wall_s": wall,
        "process_cpu_s": cpu,
        "col_cmds": int(c["num_read_cmds"]) + int(c["num_write_cmds"]),
        "command": f"build/dramsim3main <ini> -c {cycles} -t <{len(addr)}-line trace> -o <dir>",
    }


def dramsim3_attnsim(std: str, kind: str, addr, w, done: int, controller: str = "dramsim3") -> dict:
    """attnsim on the first ``done`` requests of the stream (what DRAMsim3 finished in its cycles)."""
    spec = dramsim3_spec(std)
    r = simulate_requests(spec, addr[:done], w[:done], mapping=MAPPING, controller=controller, refresh="ab")
    return {
        "cycles": int(r.cycles),
        "row_hits": int(r.row_hits),
        "acts": int(r.counts["bank_acts"]),
        "conflicts": int(r.row_conflicts),
    }


def dramsim3_attnsim_cols(std: str, addr, w, cycles: int) -> int:
    """Column commands attnsim (dramsim3 preset) issues in the first ``cycles`` on the whole stream: the equal-time
    comparison (no truncated-stream tail, DRAMsim3 posts writes as done when it accepts them). The two-level queue
    kernel emits each command with its issue cycle (cmdqueue.py)."""
    r = simulate_requests(dramsim3_spec(std), addr, w, mapping=MAPPING, controller="dramsim3", refresh="ab", emit=True)
    c = r.commands
    return int(np.count_nonzero(np.isin(c["op"], (4, 5)) & (c["arrival"] < cycles)))


def crosscheck_dramsim3(a) -> None:
    stds = [s for s in a.dramsim3_standards.split(",")]
    golden = {}
    print(
        f"{'standard':8} {'stream':10} {'done':>7} {'DRAMsim3 cyc':>12} {'attnsim cyc':>12} {'dt':>7} "
        f"{'hits ds3/attnsim':>18} {'ACTs ds3/attnsim':>18} {'PRE-for-miss ds3/conflicts':>27} "
        f"{'RD+WR in cycles ds3/attnsim':>28}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for std in stds:
            spec = dramsim3_spec(std)
            for kind in DRAMSIM3_STREAMS:
                addr, w = make_stream(spec.org, kind, a.requests, a.seed)
                q = run_dramsim3(a.dramsim3, std, kind, addr, w, a.dramsim3_cycles, tmp)
                if q["done"] >= a.requests:
                    raise RuntimeError(f"{std}/{kind}: DRAMsim3 finished the whole stream; use more --requests")
                r = dramsim3_attnsim(std, kind, addr, w, q["done"], a.controller or "dramsim3")
                cols = dramsim3_attnsim_cols(std, addr, w, q["cycles"])
                print(
                    f"{std:8} {kind:10} {q['done']:7} {q['cycles']:12} {r['cycles']:12} "
                    f"{rel(r['cycles'], q['cycles']):+7.1%} {q['row_hits']:>8}/{r['row_hits']:<8} "
                    f"{q['acts']:>8}/{r['acts']:<8} {q['ondemand_pres']:>12}/{r['conflicts']:<8} "
                    f"{q['col_cmds']:>8}/{cols:<8} {rel(cols, q['col_cmds']):+7.1%}",
                    flush=True,
                )
                g = golden.setdefault(
                    std,
                    {
                        **DRAMSIM3,
                        "ini": DRAMSIM3_STANDARDS[std]["ini"],
                        "ini_changes": "channels = 1, address_mapping = chrabgbaroco",
                        "attnsim_spec": "hwmodels/dram/streams.py dramsim3_spec (DRAMSIM3_STANDARDS)",
                        "built": (
                            "DRAMsim3 @ 2981759 built by hand: cmake "
                            "-DCMAKE_BUILD_TYPE=Release, make (build/dramsim3main)"
                        ),
                        "requests": a.requests,
                        "seed": a.seed,
                        "mapping": MAPPING,
                        "streams": {},
                    },
                )
                g["command"] = (
                    q["command"] + "; recorded with: python bench/crosscheck_dram.py --dramsim3 "
                    f"<checkout> --dramsim3-cycles {a.dramsim3_cycles} --requests {a.requests} "
                    "--golden-out tests/data/dram_golden"
                )
                g["streams"][kind] = {
                    "digest": stream_digest(addr, w),
                    "cycles": q["cycles"],
                    "done": q["done"],
                    "row_hits": q["row_hits"],
                    "acts": q["acts"],
                    "refs": q["refs"],
                    "ondemand_pres": q["ondemand_pres"],
                    "col_cmds": q["col_cmds"],
                }
    if a.golden_out:
        os.makedirs(a.golden_out, exist_ok=True)
        for std, g in golden.items():
            with open(os.path.join(a.golden_out, f"dramsim3_{std}.json"), "w") as f:
                json.dump(g, f, indent=1, sort_keys=True)
                f.write("\n")


_ENGINE = """\
import json, sys, time
import numpy as np
from attnsim.cli.dram import device_spec
from attnsim.hwmodels.dram import simulate_requests
from attnsim.hwmodels.dram.streams import dramsim3_spec
cfg = json.loads(sys.argv[1])
spec = dramsim3_spec(cfg["ds3"]) if cfg["ds3"] else device_spec(cfg["preset"], channels=1)
t = np.load(cfg["npy"])
addr, w = np.ascontiguousarray(t["addr"]), np.ascontiguousarray(t["write"])
kw = dict(mapping=cfg["mapping"], controller=cfg["controller"], refresh="ab")
simulate_requests(spec, addr[:2000], w[:2000], **kw)  # kernels loaded from the cache or compiled: not timed
best = None
for _ in range(cfg["runs"]):
    c0 = time.process_time()
    r = simulate_requests(spec, addr, w, **kw)
    c = time.process_time() - c0
    best = c if best is None else min(best, c)
print("ENGINE " + json.dumps({"cycles": int(r.cycles), "cpu_s": best, "row_hits": int(r.row_hits),
      "skipped": int(getattr(r, "skipped_requests", 0))}))
"""


def engine_cpu(python: str, npy: str, cfg: dict, runs: int) -> dict:
    """attnsim's engine (simulate_requests on the loaded stream, kernels warm) in the attnsim ``python`` imports:
    best CPU time of ``runs`` runs, and the cycles (the baseline's must equal this code's)."""
    cmd = [python, "-c", _ENGINE, json.dumps({**cfg, "npy": npy, "runs": runs})]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    line = [x for x in p.stdout.splitlines() if x.startswith("ENGINE ")]
    if p.returncode or not line:
        raise RuntimeError(f"{python}: engine run failed (rc {p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(line[-1][len("ENGINE ") :])


def process_cpu(cmd: list[str], runs: int) -> float:
    """Median CPU seconds (user + system) of ``runs`` runs of a whole process, after one untimed run (a first
    `attnsim dram` fills the kernel cache: the issue's targets are for the warm process)."""
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    cpus = []
    for _ in range(runs):
        c0 = children_cpu_s()
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        cpus.append(children_cpu_s() - c0)
    return float(np.median(cpus))


def realistic_stream(spec, kind: str, n: int, seed: int, mapping: str | None = None):
    """Issue 30's realistic streams: pagedkv from the serving allocator, the rest from make_stream."""
    if kind == "pagedkv":
        from attnsim.studies.serve.paging import decode_step_stream

        return decode_step_stream(spec, n, seed, mapping=mapping)
    return make_stream(spec.org, kind, n, seed)


def realistic(a, tmp: str) -> None:
    """The five realistic streams at ``--requests``: HBM3 (ramulator2 and default rules) vs Ramulator 2.1 in
    cycles and CPU time; HBM2 (dramsim3 preset, DRAMsim3's .ini) vs DRAMsim3's whole process. CPU time, not wall
    time: the machine is shared (load printed). Engine = simulate_requests (attnsim) / Simulation.run (Ramulator);
    process = the whole `attnsim dram` on the stream's .npy / Ramulator's driver on its LoadStoreTrace / DRAMsim3's
    dramsim3main on its trace, each reading its own trace format."""
    import yaml

    from attnsim.hwmodels.dram.rules import DEFAULT_CONTROLLER
    from attnsim.hwmodels.dram.traces import write_npy

    n = a.requests
    kinds = [k for k in a.streams.split(",") if k] if a.streams != ",".join(STREAMS) else list(REALISTIC_STREAMS)
    spec = device_spec("hbm3_6400", channels=1)
    golden = {
        **RAMULATOR2,
        "attnsim_preset": "hbm3_6400",
        "ramulator_presets": STANDARDS["hbm3"],
        "requests": n,
        "seed": a.seed,
        "mapping": MAPPING,
        "streams": {},
        "generators": "hwmodels/dram/streams.py make_stream; pagedkv: attnsim/studies/serve/paging.py "
        "decode_step_stream (hbm3_6400's default mapping)",
    }
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (uptime); CPU seconds, not wall", flush=True)
    print(
        f"{'stream':13} {'attnsim cyc':>11} {'Ramulator':>11} {'dt':>7} {'hits a/R':>17} | {'engine s':>8} "
        f"{'Ram eng s':>9} {'x eng':>6} | {'proc s':>6} {'Ram proc':>8} {'x proc':>6}"
        + (f" | {'base eng':>8} {'x':>5}" if a.baseline else "")
    )
    for kind in kinds:
        addr, w = realistic_stream(spec, kind, n, a.seed)
        npy = os.path.join(tmp, f"hbm3_{kind}.npy")
        write_npy(npy, addr, w)
        cfg = {"ds3": None, "preset": "hbm3_6400", "mapping": MAPPING, "controller": "ramulator2"}
        e = engine_cpu(sys.executable, npy, cfg, a.process_runs)
        d = run_attnsim("hbm3", kind, addr, w, None)  # the default rules (DEFAULT_CONTROLLER)
        assert d["cycles"] == e["cycles"] or DEFAULT_CONTROLLER != "ramulator2", (kind, d, e)
        cmd = [sys.executable, "-m", "attnsim", "dram", "--device", "hbm3_6400", "--channels", "1", "--trace", npy]
        proc = process_cpu(cmd + ["--mapping", MAPPING, "--controller", "ramulator2", "--json"], a.process_runs)
        row = f"{kind:13} {e['cycles']:11}"
        if a.ramulator2:
            q = run_ramulator2(a.ramulator2, a.ramulator2_python, "hbm3", kind, addr, w, tmp)
            mine = e["cycles"] * spec.org.tck_ns * 1e-9
            row += (
                f" {q['ticks']:11} {rel(mine, q['time_s']):+7.2%} {e['row_hits']:>8}/{q['row_hits']:<8} | "
                f"{e['cpu_s']:8.3f} {q['engine_cpu_s']:9.2f} x{q['engine_cpu_s'] / e['cpu_s']:<5.0f} | "
                f"{proc:6.2f} {q['process_cpu_s']:8.2f} x{q['process_cpu_s'] / proc:<5.1f}"
            )
            golden["streams"][kind] = golden_entry(addr, w, q, "engine_cpu_s")
        else:
            row += f" {'':11} {'':7} {e['row_hits']:>8}/{'':8} | {e['cpu_s']:8.3f} {'':9} {'':6} | {proc:6.2f}"
        if a.baseline:
            b = engine_cpu(a.baseline, npy, cfg, a.process_runs)
            assert b["cycles"] == e["cycles"], f"{kind}: baseline {b['cycles']} vs {e['cycles']} cycles"
            row += f" | {b['cpu_s']:8.3f} x{b['cpu_s'] / e['cpu_s']:.2f}"
        print(row, flush=True)
    if a.dramsim3:
        ds3 = dramsim3_spec("hbm2")
        path = os.path.join(tmp, "dramsim3_hbm2.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(ds3.model_dump(mode="json", exclude_none=True), f)
        hbm2_map = device_spec("hbm2_2000", channels=1).default_mapping
        print(f"dramsim3 preset (HBM2 .ini) vs DRAMsim3 @ {DRAMSIM3['commit']}, whole process, {n} requests")
        for kind in kinds:
            addr, w = realistic_stream(ds3, kind, n, a.seed, mapping=hbm2_map)
            npy = os.path.join(tmp, f"hbm2_{kind}.npy")
            write_npy(npy, addr, w)
            cfg = {"ds3": "hbm2", "preset": None, "mapping": MAPPING, "controller": "dramsim3"}
            e = engine_cpu(sys.executable, npy, cfg, a.process_runs)
            cmd = [sys.executable, "-m", "attnsim", "dram", "--device", path, "--trace", npy, "--mapping", MAPPING]
            proc = process_cpu(cmd + ["--controller", "dramsim3", "--json"], a.process_runs)
            cycles = int(e["cycles"] * 1.05) + 10_000  # past attnsim's end: DRAMsim3 finishes the whole stream
            q = run_dramsim3(a.dramsim3, "hbm2", kind, addr, w, cycles, tmp)
            row = (
                f"{kind:13} attnsim {e['cycles']} cycles, engine {e['cpu_s']:.3f} s, process {proc:.2f} s | "
                f"DRAMsim3 done {q['done']}/{n} in {cycles} cycles, process {q['process_cpu_s']:.2f} s | "
                f"x{q['process_cpu_s'] / proc:.1f} process, x{q['process_cpu_s'] / e['cpu_s']:.0f} vs engine"
            )
            if a.baseline:
                b = engine_cpu(a.baseline, npy, cfg, a.process_runs)
                assert b["cycles"] == e["cycles"], f"{kind}: baseline {b['cycles']} vs {e['cycles']} cycles"
                row += f" | baseline engine {b['cpu_s']:.3f} s x{b['cpu_s'] / e['cpu_s']:.2f}"
            print(row, flush=True)
    if a.golden_out and golden["streams"]:
        golden["command"] = (
            "PYTHONPATH=<ramulator2>/python python driver.py '<config>' (driver: bench/crosscheck_dram.py _DRIVER; "
            "LoadStoreTrace of the stream, one channel, GenericDRAM clock_ratio=1, CacheLineInterleave, ChRaBaRoCo, "
            f"FRFCFS); recorded with: python bench/crosscheck_dram.py --realistic --requests {n} --ramulator2 "
            "<checkout> --golden-out tests/data/dram_golden"
        )
        os.makedirs(a.golden_out, exist_ok=True)
        with open(os.path.join(a.golden_out, "realistic_ramulator2_hbm3.json"), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=True)
            f.write("\n")


def golden_entry(addr, w, q: dict, timing: str) -> dict:
    """One stream's golden record of a Ramulator run ``q``: the stream's digest, cycles, row outcomes, the config
    and the engine time under ``timing`` (``engine_cpu_s`` or ``engine_wall_s``)."""
    keys = ("ticks", "tick_s", "time_s", "row_hits", "row_misses", "row_conflicts", "config")
    return {"digest": stream_digest(addr, w), **{k: q[k] for k in keys}, timing: round(q[timing], 3)}


def rel(a: float, b: float) -> float:
    return (a - b) / b if b else float("inf") if a else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--standards", default=",".join(STANDARDS))
    ap.add_argument("--streams", default=",".join(STREAMS))
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--controller",
        default=None,
        help="attnsim controller preset: ramulator2, ideal, dramsim3 (default: the spec's, else ramulator2)",
    )
    ap.add_argument("--ramulator2", help="path to a Ramulator 2.1 checkout with built Python bindings")
    ap.add_argument("--ramulator2-python", default=sys.executable)
    ap.add_argument("--golden-out", help="directory for golden JSON files of the reference runs")
    ap.add_argument("--speed", type=int, help="instead of the table: time n-request HBM3 seq/random streams")
    ap.add_argument(
        "--process-runs",
        type=int,
        default=3,
        help="--speed: attnsim processes per trace form (median reported and used in the ratio)",
    )
    ap.add_argument(
        "--dramsim3",
        help="path to a DRAMsim3 checkout built with CMake (build/dramsim3main): run "
        "the DRAMsim3 cross-check (its HBM2 and LPDDR4 configurations) instead of Ramulator's table",
    )
    ap.add_argument("--dramsim3-standards", default=",".join(DRAMSIM3_STANDARDS))
    ap.add_argument("--dramsim3-cycles", type=int, default=100_000)
    ap.add_argument("--realistic", action="store_true", help="issue 30's realistic streams (see the usage)")
    ap.add_argument("--baseline", help="--realistic: a python whose attnsim is the code before a change")
    a = ap.parse_args(argv)
    if a.realistic:
        with tempfile.TemporaryDirectory() as tmp:
            realistic(a, tmp)
        return 0
    if a.dramsim3:
        crosscheck_dramsim3(a)
        return 0
    if a.speed:
        with tempfile.TemporaryDirectory() as tmp:
            speed(a, a.speed, tmp)
        return 0
    stds = a.standards.split(",")
    kinds = a.streams.split(",")
    golden = {}
    hdr = f"{'standard':8} {'stream':10} {'attnsim us':>11} {'GB/s':>7} {'hit/miss/conflict':>22}" + (
        f" | {'Ramulator us':>12} {'GB/s':>7} {'hit/miss/conflict':>22} {'dt':>7} {'dhit':>7}" if a.ramulator2 else ""
    )
    print(hdr)
    with tempfile.TemporaryDirectory() as tmp:
        for std in stds:
            spec = device_spec(STANDARDS[std]["preset"], channels=1)
            for kind in kinds:
                addr, w = make_stream(spec.org, kind, a.requests, a.seed)
                r = run_attnsim(std, kind, addr, w, a.controller)
                nbytes = a.requests * spec.org.burst_bytes
                row = (
                    f"{std:8} {kind:10} {r['time_s'] * 1e6:11.2f} {nbytes / r['time_s'] / 1e9:7.2f} "
                    f"{r['row_hits']:>7}-{r['row_misses']}-{r['row_conflicts']:<7}"
                )
                if a.ramulator2:
                    q = run_ramulator2(a.ramulator2, a.ramulator2_python, std, kind, addr, w, tmp)
                    row += (
                        f" | {q['time_s'] * 1e6:12.2f} {nbytes / q['time_s'] / 1e9:7.2f} "
                        f"{q['row_hits']:>7}-{q['row_misses']}-{q['row_conflicts']:<7} "
                        f"{rel(r['time_s'], q['time_s']):+7.1%} {rel(r['row_hits'], q['row_hits']):+7.1%}"
                    )
                    g = golden.setdefault(
                        std,
                        {
                            **RAMULATOR2,
                            "attnsim_preset": STANDARDS[std]["preset"],
                            "ramulator_presets": STANDARDS[std],
                            "requests": a.requests,
                            "seed": a.seed,
                            "mapping": MAPPING,
                            "streams": {},
                        },
                    )
                    g["command"] = (
                        "PYTHONPATH=<ramulator2>/python python driver.py '<config>' (driver: "
                        "bench/crosscheck_dram.py _DRIVER; LoadStoreTrace of the stream, one channel, "
                        "GenericDRAM clock_ratio=1, CacheLineInterleave, ChRaBaRoCo, FRFCFS)"
                    )
                    g["streams"][kind] = golden_entry(addr, w, q, "engine_wall_s")
                print(row, flush=True)
    if a.golden_out:
        os.makedirs(a.golden_out, exist_ok=True)
        for std, g in golden.items():
            with open(os.path.join(a.golden_out, f"ramulator2_{std}.json"), "w") as f:
                json.dump(g, f, indent=1, sort_keys=True)
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
