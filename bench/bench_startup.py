"""Start-up and first-run costs of the `attnsim` command (issue 30), against last round's code.

    python bench/bench_startup.py [--base-venv DIR] [--repeat 3] [--cold] [--reproductions]

Each target is one whole `attnsim` process, timed by its CPU time (user + system, from
``resource.getrusage(RUSAGE_CHILDREN)``; the machine may be loaded, so CPU time is the figure to compare, wall
time is printed beside it) and its wall time, best of ``--repeat``. The kernel cache is a fresh temporary folder
(``XDG_CACHE_HOME``: attnsim.core.jitcache's user cache folder), filled by one untimed run before the warm targets;
``--cold`` also times the first `attnsim run` on an empty one. ``--base-venv`` names a virtual environment with
last round's attnsim installed (e.g. main 878b7fc in a scratch checkout: ``git clone ... && pip install -e .``);
each target is then run with both and the ratio printed (base CPU / this CPU: > 1 is faster now).
The load average is printed first and last: numbers taken at a load above the core count are inflated.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, arguments of `attnsim`, limit in CPU s: issue 30's targets; None = shown for the profile only)
TARGETS = [
    ("attnsim --version", ["--version"], 0.15),
    ("warm attnsim run (default experiment)", ["run"], 0.5),
    ("warm attnsim run --no-flips --no-figures", ["run", "--no-flips", "--no-figures"], None),
    (
        "attnsim dram fixed cost (1,000 requests)",
        ["dram", "--device", "hbm3_6400", "--pattern", "sequential", "--requests", "1000"],
        0.25,
    ),
]
COLD = ("first attnsim run, empty kernel cache", ["run"], 10.0)


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(CPU s, wall s) of one process ``cmd``; its output is discarded, a failure raises."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def best(cmd: list[str], env: dict, cwd: Path, repeat: int) -> tuple[float, float]:
    runs = [timed(cmd, env, cwd) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def env_for(cache: Path) -> dict:
    # PYTHONDONTWRITEBYTECODE (set on some development machines) would recompile every imported module's source in
    # every process (~0.17 s of the default run); a user's install has its bytecode (pip compiles it; an editable
    # install writes it on first import)
    drop = ("NUMBA_CACHE_DIR", "ATTNSIM_CACHE_DIR", "PYTHONDONTWRITEBYTECODE", "ATTNSIM_DRAM_TIER")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["XDG_CACHE_HOME"] = str(cache)  # platformdirs' user cache folder: attnsim's kernels (attnsim.core.jitcache)
    return env


def measure(exe: str, repeat: int, cold: bool, work: Path) -> dict:
    """CPU and wall s of every target with the `attnsim` executable ``exe``."""
    out = {}
    if cold:
        cache = Path(tempfile.mkdtemp(dir=work, prefix="cold-"))
        out[COLD[0]] = timed([exe, *COLD[1]], env_for(cache), work)  # once: a second run would be warm
    cache = Path(tempfile.mkdtemp(dir=work, prefix="warm-"))
    env = env_for(cache)
    for _, args, _ in TARGETS[1:]:
        subprocess.run(
            [exe, *args], env=env, cwd=work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )  # fills the kernel cache (not timed)
    for name, args, _ in TARGETS:
        out[name] = best([exe, *args], env, work, repeat)
    return out


def reproductions_s() -> tuple[float, float]:
    """CPU and wall s of `python bench/reproductions.py` (this checkout)."""
    with tempfile.TemporaryDirectory() as d:
        return timed([sys.executable, str(ROOT / "bench" / "reproductions.py")], env_for(Path(d)), ROOT)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-venv", type=Path, default=None, help="venv with last round's attnsim (ratios)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per warm target (best is kept)")
    ap.add_argument("--cold", action="store_true", help="also time a first run on an empty kernel cache")
    ap.add_argument("--reproductions", action="store_true", help="also time python bench/reproductions.py")
    args = ap.parse_args(argv)
    exe = str(Path(sys.executable).parent / "attnsim")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="attnsim-bench-startup-") as d:
        work = Path(d)
        this = measure(exe, args.repeat, args.cold, work)
        base = measure(str(args.base_venv / "bin" / "attnsim"), args.repeat, args.cold, work) if args.base_venv else {}
    rows = ([COLD] if args.cold else []) + TARGETS
    print(f"{'target':44s} {'limit':>7s} {'CPU s':>7s} {'wall s':>7s} {'base CPU':>9s} {'ratio':>6s}  met")
    for name, _, limit in rows:
        cpu, wall = this[name]
        b = base.get(name)
        print(
            f"{name:44s} {limit if limit is not None else '-':>7} {cpu:7.2f} {wall:7.2f} "
            f"{(f'{b[0]:.2f}' if b else '-'):>9s} {(f'x{b[0] / cpu:.2f}' if b else '-'):>6s}  "
            f"{'-' if limit is None else 'yes' if cpu <= limit else 'NO'}"
        )
    if args.reproductions:
        cpu, wall = reproductions_s()
        print(
            f"{'python bench/reproductions.py':44s} {60.0:>7} {cpu:7.2f} {wall:7.2f} {'-':>9s} {'-':>6s}  "
            f"{'yes' if cpu <= 60 else 'NO'}"
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
