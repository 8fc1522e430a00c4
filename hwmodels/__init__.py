"""attnsim.hwmodels."""

from pathlib import Path as _Path

from attnsim.core import jitcache as _jitcache

_jitcache.install(_Path(__file__).parent)  # cached Numba kernels below are stamped by their folder's sources
