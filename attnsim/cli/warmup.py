"""``attnsim warmup``: compile attnsim's Numba kernels into their cache now (e.g. right after ``pip install``,
or once per cluster node image), so that no later command spends its first ~15-30 s compiling.

Where they are cached, and the ``attnsim: compiling Numba kernels ...`` line every command and the API print
when they compile one: attnsim.core.jitcache.
"""

from __future__ import annotations

import time


def register(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="compile attnsim's Numba kernels into the cache now",
        description="Run a tiny HBM-PIM and CXL-PNM decode step, tiny `attnsim dram` streams and "
        "traces and a tiny fault injection so that every Numba kernel of attnsim is compiled and "
        "cached ($NUMBA_CACHE_DIR, else $ATTNSIM_CACHE_DIR/kernels, else the user cache folder); "
        "later runs load them.",
    )
    p.set_defaults(func=warmup_cmd)


def warm_all() -> None:
    """Compile (or load) every kernel that `attnsim run`, `serve`, `sweep`, `plan`, `dram` and the API reach."""
    from attnsim.cli.dram import warm_all as warm_dram
    from attnsim.hwmodels.dram import kernel
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    sets = [
        "experiment.systems=[attacc_h100, cxl_pnm]",
        "experiment.baseline=null",
        "models.llama2-70b.num_layers=1",
        "experiment.scenarios={s: {batch_size: 1, prompt_len: 16, output_len: 2}}",
    ]
    kernel.activate()  # the command walks compiled (small ones would run interpreted: hwmodels/dram/engine.py)
    run_experiment(load_experiment("default", sets))
    warm_dram()  # the request-stream kernels of `attnsim dram` (the PIM step above does not reach them)
    warm_injection()  # `attnsim plan --verify` and the accuracy proxies


def warm_injection() -> None:
    """The fault-injection kernels (hwmodels/reliability/inject.py) on a tiny KV in both word widths (uint16:
    the 16-bit floats and the scales of integer formats; uint8: fp8 and integer codes)."""
    from attnsim.hwmodels.reliability.accuracy import evaluate, synthetic_qkv
    from attnsim.hwmodels.reliability.inject import StreamSpec

    qkv = synthetic_qkv(n_heads=1, n_tokens=32, head_dim=32, seed=0)
    for fmt in ("fp16", "int8"):
        evaluate(qkv, fmt, [StreamSpec(p_flip=1e-3)], [StreamSpec(p_flip=1e-3)])


def warmup_cmd(args) -> int:
    from attnsim.core import jitcache

    t0 = time.perf_counter()
    warm_all()
    state = "compiled and cached in" if jitcache.compiled_any() else "were already cached in"
    print(f"attnsim's Numba kernels {state} {jitcache.cache_location()} ({time.perf_counter() - t0:.1f} s)")
    return 0
