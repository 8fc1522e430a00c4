"""Batch sweeps: sweep files (spec), the resumable HDF5 store, executors, merging, a sub-result cache.

``load_sweep(path) -> Sweep`` expands a sweep YAML into points; ``run_sweep(sweep, out, ...)`` runs them
into a kill-safe store (:mod:`attnsim.studies.sweep.store`); ``merge_stores`` combines shards.
"""
from attnsim.studies.sweep.spec import Point, Sweep, SweepSpec, load_sweep  # noqa: F401

# `attnsim.sweep(...)` is also the Python API function (docs/api.md): the package answers the call
from attnsim.api import callable_package as _callable  # noqa: E402

_callable(__name__, "sweep")
