"""Numba's on-disk kernel cache, stamped with every source a kernel is compiled from.

Numba stamps a cached function with a hash of its own file only, but attnsim's kernels inline functions and
freeze module constants of the other files of their package (flat.py's scheduler inlines kernel.py, sched.py
and recur.py; reliability/inject.py freezes formats.py's field ids). An edit of kernel.py therefore left the
scheduler's cached machine code in use: a changed timing rule silently not taking effect in a development
checkout. The locators installed here replace the stamp of every kernel under the given root (hwmodels/) with
the SHA-256 of all .py files of the kernel's own folder (attnsim.fingerprint), so any edit there recompiles the
folder's kernels on next use; Numba keeps choosing where the cache lives (NUMBA_CACHE_DIR, the __pycache__
beside the source, else the user-wide folder). Rule for kernel code: use functions and constants of its own
package folder only (the stamp does not see other folders).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from numba.core import caching

from attnsim.fingerprint import digest_sources, folder_sources

_BASES = (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator)
_roots: list[str] = []


@functools.lru_cache(maxsize=None)
def folder_stamp(folder: str) -> str:
    """Fingerprint of the .py files of one kernel folder (once per process)."""
    return digest_sources(folder_sources(Path(folder)))


def _ours(py_file: str) -> bool:
    path = os.path.abspath(py_file)
    return any(path.startswith(r + os.sep) for r in _roots)


def _folder_stamped(base):
    class Locator(base):
        @classmethod
        def from_function(cls, py_func, py_file):
            if not _ours(py_file):
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return "attnsim-folder-sha256:" + folder_stamp(os.path.dirname(os.path.abspath(self._py_file)))

    Locator.__name__ = Locator.__qualname__ = "FolderStamped" + base.__name__
    return Locator


_LOCATORS = [_folder_stamped(b) for b in _BASES]


def install(root: Path) -> None:
    """Stamp the cached kernels of every source under ``root`` by folder (idempotent; before their decorators
    run: Numba picks a dispatcher's locator when ``cache=True`` is applied)."""
    r = os.path.abspath(root)
    if r not in _roots:
        _roots.append(r)
    impl = caching.CacheImpl
    if impl._locator_classes[:len(_LOCATORS)] != _LOCATORS:
        impl._locator_classes = _LOCATORS + [c for c in impl._locator_classes if c not in _LOCATORS]
