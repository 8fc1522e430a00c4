"""Benchmark: the 1,000-point decode-step sweep (configs/sweeps/decode_1000.yaml).

Prints, for the local executor (process pool, --workers, default 2) and a dask LocalCluster with the
same number of workers: wall time, points/s, and the driver's peak RSS for sweeps of growing size
(the driver streams results to the store, so its memory should stay flat); checks that the dask store
holds exactly the same results as the local one.

    python bench/bench_sweep.py [--workers 2] [--sizes 200,500,1000] [--no-dask]

Each sweep runs in a fresh Python process, so ``ru_maxrss`` is that driver's own peak (pool workers
are separate processes and not counted).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, resource, sys, time, yaml
from attnsim.core.config import find_config, load_yaml
from attnsim.studies.sweep.spec import build_sweep
from attnsim.studies.sweep.executors import run_sweep
n_ctx, executor, workers, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = load_yaml(find_config("sweeps", "decode_1000"))
data["parameters"][1]["grid"]["scenario.prompt_len"]["num"] = n_ctx
sw = build_sweep(data, file="decode_1000.yaml")
t = time.perf_counter()
s = run_sweep(sw, out, executor=executor, workers=workers, progress=False, log=lambda m: None)
wall = time.perf_counter() - t
print(json.dumps({"points": sw.n_points, "simulated": s.simulated, "wall_s": wall,
                  "status": dict(s.status_counts),
                  "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(n_ctx: int, executor: str, workers: int, out: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n_ctx), executor, str(workers), str(out)], capture_output=True, text=True
    )
    if r.returncode:
        sys.exit(f"{executor} sweep failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def same_results(a: Path, b: Path) -> bool:
    import numpy as np

    from attnsim.studies.sweep.store import open_store

    ca, cb = open_store(a).columns(), open_store(b).columns()
    for k in ca:
        if k in ("elapsed_s", "finished_unix_s", "worker"):
            continue
        x, y = ca[k], cb.get(k)
        if y is None or len(x) != len(y):
            return False
        if x.dtype.kind == "f" and not np.array_equal(x, y, equal_nan=True):
            return False
        if x.dtype.kind != "f" and x.tolist() != y.tolist():
            return False
    ba, bb = open_store(a).breakdown(), open_store(b).breakdown()
    return set(ba) == set(bb) and all(np.array_equal(ba[k], bb[k], equal_nan=True) for k in ba)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sizes", default="200,500,1000", help="sweep sizes (multiples of 100)")
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        print(f"local executor, {args.workers} workers")
        print(f"{'points':>7} {'wall s':>8} {'points/s':>9} {'driver peak RSS MB':>19}  status")
        for n in sizes:
            r = run(n // 100, "local", args.workers, d / f"local{n}.h5")
            print(
                f"{r['points']:>7} {r['wall_s']:>8.1f} {r['simulated'] / r['wall_s']:>9.1f} "
                f"{r['driver_peak_rss_mb']:>19.1f}  {r['status']}"
            )
        if args.no_dask:
            return
        n = max(sizes)
        r = run(n // 100, "dask", args.workers, d / f"dask{n}.h5")
        print(f"\ndask LocalCluster, {args.workers} workers")
        print(
            f"{r['points']:>7} {r['wall_s']:>8.1f} {r['simulated'] / r['wall_s']:>9.1f} "
            f"{r['driver_peak_rss_mb']:>19.1f}  {r['status']}"
        )
        ok = same_results(d / f"local{n}.h5", d / f"dask{n}.h5")
        print(f"dask results identical to local: {ok}")
        if not ok:
            sys.exit(1)


if __name__ == "__main__":
    main()
