"""Batch sweeps: sweep files (spec), the resumable HDF5 store, executors, merging, a sub-result cache.

``load_sweep(path) -> Sweep`` expands a sweep YAML into points; ``run_sweep(sweep, out, ...)`` runs them
into a kill-safe store (:mod:`attnsim.studies.sweep.store`); ``merge_stores`` combines shards.
"""

from attnsim.studies.sweep.spec import Point, Sweep, SweepSpec, load_sweep  # noqa: F401
