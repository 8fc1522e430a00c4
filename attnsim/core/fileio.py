"""Atomic file writes that honour the umask (one mechanism for every results/store/figure file).

``with atomic_path(path, suffix=".h5") as tmp:`` yields a temporary path in the target's folder; write
it, and on success it is fsync'ed and renamed over ``path`` (readers never see a partial file); on any
exception it is removed. ``tempfile.mkstemp`` creates files with mode 0600, which hides results from
collaborators: the temporary file gets ``0666 & ~umask`` (0644 by default), like ``open(path, "w")``.
"""

from __future__ import annotations

import contextlib
import os
import stat
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


# ---------------------------------------------------------------- bounded reads (every input reader)

MiB = 1 << 20
INPUT_LIMITS = {
    # kind: (default bytes, environment variable that overrides it in MiB, what it covers)
    "document": (
        16 * MiB,
        "ATTNSIM_MAX_DOCUMENT_MB",
        "YAML / JSON documents: configs, HF config.json, sweep files, calibrations, references",
    ),
    "data": (2048 * MiB, "ATTNSIM_MAX_DATA_MB", "traces, assembly sources and binaries"),
}
"""Largest input file of each kind, checked with fstat before a byte is read. Evidence: the largest built-in
YAML document (configs/reproductions/neupims/reference.yaml) is 35 KB, so 16 MiB is ~470x headroom while
PyYAML's pure-Python parser stays bounded in time and memory; 2 GiB of data is 64 B x 2^25, the DRAM trace
request limit (attnsim.cli.dram.MAX_REQUESTS) at 64 B a line. Raise either with its environment variable."""


class InputRefused(Exception):
    """A file refused before (or while) it is read: missing, not a regular file, a symlink where none is
    allowed, over its size limit, unreadable. ``missing`` is True for a file that does not exist; ``file`` /
    ``key`` name another source than the file itself (the environment variable of a bad limit)."""

    def __init__(self, message: str, missing: bool = False, file: str | None = None, key: str | None = None):
        super().__init__(message)
        self.missing = missing
        self.file = file
        self.key = key


def input_limit_bytes(kind: str) -> int:
    """The size limit of an input ``kind`` of :data:`INPUT_LIMITS` (its environment variable, in MiB, wins)."""
    default, env, _ = INPUT_LIMITS[kind]
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not (0 < mb <= 1 << 30):  # NaN fails too; 1 PiB is beyond any machine's memory
        raise InputRefused(f"expected a size in MiB in (0, {1 << 30}], got {raw[:40]!r}", file=env)
    return int(mb * MiB)


_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(
    path: str | os.PathLike,
    limit_bytes: int,
    follow_symlinks: bool = True,
    kind: str | None = None,
    allow_fifo: bool = False,
) -> tuple[int, int]:
    """``(fd, size)`` of a regular file of at most ``limit_bytes``, opened read-only and non-blocking (a FIFO
    planted where a file was expected cannot stall the open), checked with fstat before anything is read;
    ``follow_symlinks=False`` refuses a symbolic link (O_NOFOLLOW). ``allow_fifo``: a pipe the user names
    (``--trace <(zcat t.gz)``) is reopened blocking and returned with size -1 (the caller reads at most
    limit + 1 bytes). The caller closes ``fd``. Everything else is one :class:`InputRefused`; ``kind`` names
    the environment variable that raises the limit."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputRefused("file not found", missing=True) from None
    except IsADirectoryError:
        raise InputRefused("expected a file, got a directory") from None
    except OSError as exc:
        if not follow_symlinks and os.path.islink(path):
            raise InputRefused("expected a regular file, got a symbolic link") from None
        raise InputRefused(f"cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if allow_fifo and stat.S_ISFIFO(st.st_mode):
            # Keep this descriptor (closing it would drop what a writer already put in the pipe), make it
            # blocking, and wait, as cat does, until a writer has written or come and gone: Linux reports
            # POLLHUP on a FIFO only once a writer has opened it since this open (pipe_poll, f_version).
            import fcntl
            import select

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            waiter = select.poll()
            waiter.register(fd, select.POLLIN | select.POLLHUP)
            waiter.poll()
            return fd, -1
        if not stat.S_ISREG(st.st_mode):
            what = next((name for test, name in _FILE_TYPES if test(st.st_mode)), "not a regular file")
            raise InputRefused(
                "expected a file, got a directory" if what == "a directory" else f"expected a regular file, got {what}"
            )
        if st.st_size > limit_bytes:
            raise InputRefused(_too_large(st.st_size, limit_bytes, kind))
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _too_large(size: int, limit_bytes: int, kind: str | None) -> str:
    how = f" (set {INPUT_LIMITS[kind][1]}=<MiB> to raise it)" if kind in INPUT_LIMITS else ""
    return f"file of {size} B: larger than the {limit_bytes} B limit{how}"


def read_regular(
    path: str | os.PathLike, kind: str = "document", limit_bytes: int | None = None, follow_symlinks: bool = True
) -> bytes:
    """The bytes of a regular file, refused (:class:`InputRefused`) before reading when over the limit of
    ``kind`` (or the lower ``limit_bytes``); at most limit + 1 bytes are read (a file that grows is refused)."""
    limit = input_limit_bytes(kind)
    if limit_bytes is not None and limit_bytes < limit:
        limit, kind = limit_bytes, None  # the reader's own bound (no environment variable raises it)
    fd, size = open_regular(path, limit, follow_symlinks, kind)
    try:
        chunks, got = [], 0
        while got <= limit:
            b = os.read(fd, min(limit + 1 - got, 1 << 24))
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except OSError as exc:
        raise InputRefused(f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if got > limit:
        raise InputRefused(_too_large(got, limit, kind))
    return b"".join(chunks)


def quote_prefix(text: str | bytes, width: int = 80) -> str:
    """``repr`` of at most ``width`` characters of ``text`` (an ellipsis marks a cut): what an error message
    quotes of a bad line, however long the line is."""
    if isinstance(text, bytes):
        text = text[: 4 * width + 4].decode("utf-8", "replace")
    return repr(text[:width]) + ("..." if len(text) > width else "")


def read_head(path: str | os.PathLike, n_bytes: int, kind: str = "data") -> bytes:
    """The first ``n_bytes`` of a regular file within the limit of ``kind`` (to sniff a format); the same
    refusals as :func:`open_regular`."""
    fd, _ = open_regular(path, input_limit_bytes(kind), kind=kind)
    try:
        return os.read(fd, n_bytes)
    except OSError as exc:
        raise InputRefused(f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def check_regular(path: str | os.PathLike) -> None:
    """Refuse (:class:`InputRefused`) anything but a regular file, without blocking (for readers that open the
    file themselves, like HDF5, whose open() would wait forever on a FIFO); no size limit."""
    fd, _ = open_regular(path, 1 << 62)
    os.close(fd)
