"""attnsim.hwmodels."""

from pathlib import Path as _Path

from attnsim.core import jitcache as _jitcache

_jitcache.register_root(_Path(__file__).parent)  # kernels below: cached, stamped by folder (Numba loaded on use)
