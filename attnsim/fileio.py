"""Atomic file writes that honour the umask (one mechanism for every results/store/figure file).

``with atomic_path(path, suffix=".h5") as tmp:`` yields a temporary path in the target's folder; write
it, and on success it is fsync'ed and renamed over ``path`` (readers never see a partial file); on any
exception it is removed. ``tempfile.mkstemp`` creates files with mode 0600, which hides results from
collaborators: the temporary file gets ``0666 & ~umask`` (0644 by default), like ``open(path, "w")``.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


def umask_mode(base: int = 0o666) -> int:
    """``base`` with the process umask applied (what ``open()`` would create)."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def fsync_dir(d: str | Path) -> None:
    """Make a rename in ``d`` durable (no-op where directories cannot be fsync'ed)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def temp_beside(path: str | Path, suffix: str = "") -> Path:
    """A new empty temporary file in ``path``'s folder, mode honouring the umask."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, umask_mode())
    return Path(tmp)


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "", fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success, remove it on error."""
    path = Path(path)
    tmp = temp_beside(path, suffix)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
