"""SHA-256 fingerprints of source files: the one digest behind every "is this the code it was made by" check
(the sweep sub-result cache's code version, sweep/cache.py; the stamp of compiled Numba kernels, jitcache.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable


def digest_sources(files: Iterable[tuple[str, Path]]) -> str:
    """Hex SHA-256 over (name, length, bytes) of each file, in name order: the names (package-relative paths)
    make a moved or renamed file change the digest, the lengths make the concatenation unambiguous."""
    h = hashlib.sha256()
    for name, p in sorted(files):
        data = Path(p).read_bytes()
        h.update(f"{name}:{len(data)}:".encode() + data)
    return h.hexdigest()


def folder_sources(folder: Path) -> list[tuple[str, Path]]:
    """The .py files directly in ``folder`` as (file name, path)."""
    return [(p.name, p) for p in sorted(Path(folder).glob("*.py"))]
