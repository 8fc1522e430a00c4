"""The first-run cost of the DRAM engine: its Numba kernels compile once per cache location
(``__pycache__`` beside hwmodels/dram/, or ``$NUMBA_CACHE_DIR``), then load from the cache.

``cold_notice(hardware)`` is the one line the CLI prints to stderr when a run is about to compile them:
``arm_cold_notice(hardware)`` (the CLI, before simulating) arms it and the DRAM engine fires it at its
first kernel dispatch (``fire_cold_notice``), so a run that fails on bad input before any DRAM work (a
mapper option, a device cross-field check) still prints its one error line and nothing else.
``attnsim warmup`` compiles them ahead (e.g. right after ``pip install``, or once per cluster node image).
"""
from __future__ import annotations

import os
import sys
import time

COLD_COMPILE_S = (30, 60)  # [M] measured: `attnsim run` (default experiment) took 40 s with an empty
# NUMBA_CACHE_DIR vs 6-8 s warm, on 2 shared cores (Numba 0.68); the range allows for faster / busier machines


def dram_kernels_cached() -> bool | None:
    """Whether the DRAM engine's entry kernel (``kernel.run_kernel``) has a Numba cache index at the
    location Numba will use; None when that cannot be told (Numba internals differ, caching disabled)."""
    try:
        from attnsim.hwmodels.dram import kernel
        index = kernel.run_kernel._cache._cache_file._index_path
    except Exception:  # noqa: BLE001 - a private Numba attribute: unknown, not an error
        return None
    return os.path.exists(index)


def needs_dram_engine(hardware: dict) -> bool:
    """True when a hardware table (name -> config dict) holds a PIM/PNM device or a DRAM preset."""
    return any(isinstance(h, dict) and h.get("kind") in ("pim", "dram") for h in (hardware or {}).values())


def cold_notice(hardware: dict) -> str | None:
    """The stderr line for a run on ``hardware`` with a cold kernel cache, else None."""
    if not needs_dram_engine(hardware) or dram_kernels_cached() is not False:
        return None
    lo, hi = COLD_COMPILE_S
    where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside attnsim/hwmodels/dram"
    return (f"attnsim: compiling the DRAM engine's Numba kernels (first run with this cache, ~{lo}-{hi} s once; "
            f"cached in {where}; `attnsim warmup` compiles them ahead)")


_armed: list = []  # the armed line (at most one), printed once by the first kernel dispatch


def arm_cold_notice(hardware: dict) -> None:
    """Arm the cold-cache line for this run (printed by :func:`fire_cold_notice`, if the engine runs)."""
    _armed.clear()
    line = cold_notice(hardware)
    if line:
        _armed.append(line)


def fire_cold_notice() -> None:
    """Called by the DRAM engine before a kernel dispatch: print the armed line once, to stderr."""
    if _armed:
        print(_armed.pop(), file=sys.stderr, flush=True)


def register(sub) -> None:
    p = sub.add_parser("warmup", help="compile the DRAM engine's Numba kernels into the cache now",
                       description="Run a tiny HBM-PIM and CXL-PNM decode step and tiny `attnsim dram` streams and "
                       "traces so that every DRAM-engine kernel is compiled and cached (NUMBA_CACHE_DIR or "
                       "__pycache__); later runs load them.")
    p.set_defaults(func=warmup_cmd)


def warmup_cmd(args) -> int:
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    t0 = time.perf_counter()
    before = dram_kernels_cached()
    sets = ["experiment.systems=[attacc_h100, cxl_pnm]", "experiment.baseline=null", "models.llama2-70b.num_layers=1",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 16, output_len: 2}}"]
    run_experiment(load_experiment("default", sets))
    from attnsim.cli_dram import warm_all
    warm_all()  # the request-stream kernels of `attnsim dram` (the PIM step above does not reach them)
    state = "were already cached" if before else "compiled and cached"
    print(f"DRAM engine kernels {state} ({time.perf_counter() - t0:.1f} s)")
    return 0
