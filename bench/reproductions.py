"""Benchmark: the full reproduction set (``attnsim validate --set reproductions``) in one process pinned
to one core. Target (issue 11): under 1 minute.

Prints the wall time per system folder (load + the runs its rows read) and in total (imports and JIT
compile included: a fresh process, as a user runs it), with the number of runs simulated, and compares
with the artefacts' own run times where reproductions.md quotes them.
Run: python bench/reproductions.py [--core N] [--cold]   (--cold: an empty Numba cache, so every
kernel the runs use is compiled in this process, as on a fresh install)
"""

import argparse
import os
import sys
import time

T0 = time.perf_counter()

# the artefacts' wall time per simulated point, as quoted (shared/reference/reproductions.md)
ARTEFACT_S_PER_POINT = {
    "attacc": ((81.0, 554.0), "AttAcc simulator: 81 s (b1), 433 s (b8), 554 s (b16) per full point"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=None, help="CPU to pin to (default: the first allowed one)")
    ap.add_argument("--cold", action="store_true", help="compile every Numba kernel (an empty NUMBA_CACHE_DIR)")
    args = ap.parse_args()
    core = args.core if args.core is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    os.environ["NUMBA_NUM_THREADS"] = "1"
    if args.cold:
        import tempfile

        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="attnsim-bench-numba-")
    from attnsim.studies import reproduce  # noqa: E402 (after pinning: numba reads NUMBA_NUM_THREADS at import)

    t_import = time.perf_counter() - T0
    print(
        f"pinned to CPU {core} ({os.sched_getaffinity(0)}); Numba cache {'empty' if args.cold else 'as is'}; "
        f"imports {t_import:.2f} s"
    )
    rows_total, bad, walls = 0, 0, {}
    print(f"{'system':<12} {'rows':>4} {'runs':>4} {'ok':>5} {'wall s':>7} {'s/run':>6}  artefact")
    for folder in reproduce.folders():
        t = time.perf_counter()
        rep = reproduce.load(folder)
        runs = sum(len(e.systems) * len(e.models) * len(e.scenarios) for e in reproduce.planned(rep).values())
        rows = reproduce.run_rows(rep)
        wall = time.perf_counter() - t
        walls[folder.name] = wall
        ok = sum(r.ok for r in rows)
        rows_total += len(rows)
        bad += len(rows) - ok
        art = ARTEFACT_S_PER_POINT.get(folder.name)
        note = ""
        if art:
            (lo, hi), text = art
            note = f"{text}: {lo / (wall / runs):,.0f}-{hi / (wall / runs):,.0f}x attnsim's time per run"
        print(
            f"{folder.name:<12} {len(rows):>4} {runs:>4} {ok:>2}/{len(rows):<2} "
            f"{wall:>7.2f} {wall / runs:>6.2f}  {note}"
        )
    total = time.perf_counter() - T0
    print(
        f"total (process start to last row, imports and JIT included): {total:.2f} s for {len(walls)} "
        f"folders, {rows_total} rows ({bad} outside tolerance); target < 60 s -> "
        f"{'met' if total < 60 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
