"""Numba's on-disk kernel cache: where it lives, how it is stamped, and the line that says it is being filled.

Where. Never inside the installed package: a wheel's site-packages may be read-only or shared by many users,
and files left there outlive ``pip uninstall`` (the leftover ``attnsim/`` folder of a wheel install then
shadowed a later editable install: ``cannot import name '__version__' from 'attnsim'``, issue 28). The kernels
of every source under an installed root (``hwmodels/``) are cached in the first of these that can be written:

1. ``$NUMBA_CACHE_DIR`` (Numba's own variable, in Numba's layout: one folder per source folder's path);
2. ``$ATTNSIM_CACHE_DIR/kernels/<install>/`` when ``ATTNSIM_CACHE_DIR`` names a folder (the same variable
   places the sub-result cache, attnsim.core.cache; ``off`` and ``sqlite:...`` leave the kernels at 3.);
3. ``platformdirs.user_cache_dir("attnsim")/kernels/<install>/`` (``~/.cache/attnsim/...`` on Linux);
4. ``<temp dir>/attnsim-<uid>/kernels/<install>/``.

``<install>`` is a digest of the package folder's path, so two venvs, or a wheel and a checkout, never overwrite
each other's index files. A folder of 2.-4. is used only if it and its folders up to ``kernels/`` (4.:
``attnsim-<uid>``) are ours and not writable by group or others (Numba's cache files are pickles: whoever can
write them runs code as the reader); a refused one is skipped with one warning. Where none can be written,
Numba's own user-wide folder; never ``__pycache__`` beside the source (``_NotInPackage``). The location is chosen once
per process (``kernel_dir``); a sweep that points ``ATTNSIM_CACHE_DIR`` at its own sub-result folder for its workers
hands them its choice (``PIN_ENV``), so
the kernels do not move.

Stamp. Numba stamps a cached function with a hash of its own file only, but attnsim's kernels inline functions
and freeze module constants of the other files of their package (flat.py's scheduler inlines kernel.py,
sched.py and recur.py; reliability/inject.py freezes formats.py's field ids): an edit of kernel.py left the
scheduler's cached machine code in use. The stamp here is the SHA-256 of all .py files of the kernel's own
folder (attnsim.core.fingerprint), so any edit there recompiles the folder's kernels on next use. Rule for kernel
code: use functions and constants of its own package folder only (the stamp does not see other folders).

Lazy. Nothing here imports Numba until a kernel module calls :func:`ensure` (at its import, before its decorators):
the default run walks its DRAM command streams interpreted (hwmodels/dram/engine.py kernel_tier) and never loads
Numba. :func:`group_warm` / :func:`mark_group_warm` keep a marker per kernel group and source stamp in the kernel
folder, so a process can tell without Numba that the compiled kernels are cached (then it loads them).

Notice. The first compile of one of these kernels in a process (a cache miss: Numba's ``numba:compile``
event) is logged once on the ``attnsim.kernels`` logger at INFO; the CLI and the Python API print it to
stderr (attnsim.core.notices), so the device models that trigger it import nothing of the application.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import tempfile
import threading
from pathlib import Path

from attnsim.core.fingerprint import digest_sources, folder_sources

ENV = "ATTNSIM_CACHE_DIR"  # also attnsim.core.cache.ENV (the sub-result cache)
PIN_ENV = "_ATTNSIM_KERNEL_DIR"  # internal: the folder a sweep's parent chose, for its worker processes
LOG = logging.getLogger("attnsim.kernels")
COLD_COMPILE_S = (15, 30)  # [M] measured 2026-12-08 (docs/performance.md "First run"): `attnsim run` (default
# experiment) took 24.5 s of CPU with an empty cache vs 2.6 s warm at a load of ~19 on 2 shared cores (Numba 0.68;
# last round's code 39.3 s at the same load); the range allows for idle / busier machines
_roots: list[str] = []
# set by ensure() (they subclass Numba's classes, so Numba is imported only there)
KernelCacheLocator = _NotInPackage = _LISTENER = None


@functools.lru_cache(maxsize=None)
def folder_stamp(folder: str) -> str:
    """Fingerprint of the .py files of one kernel folder (once per process)."""
    return digest_sources(folder_sources(Path(folder)))


def _ours(py_file: str) -> bool:
    path = os.path.abspath(py_file)
    return any(path.startswith(r + os.sep) for r in _roots)


def install_tag() -> str:
    """12 hex digits of the SHA-256 of the package folder's path: one kernel folder per install. Not the version:
    a checkout's changes with every commit (setuptools-scm) and would leave a folder behind per re-install; a
    changed source recompiles through the stamp anyway."""
    import attnsim  # the package folder (not this module's: it may live in a layer subfolder)

    where = os.path.dirname(os.path.abspath(attnsim.__file__))
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def _private_dir(path: Path) -> str | None:
    """Create ``path`` (mode 0700); None when it is usable, else why not."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return "owned by another user"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return "writable by group or others"
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        return f"not writable ({exc.strerror or exc})"
    return None


def candidate_dirs() -> list[tuple[Path, Path]]:
    """attnsim's own kernel folders in order of preference (2.-4. of the module doc), each as (the outermost
    folder of it that must be private, the folder): ``kernels/`` in a folder of the user's choice, which may be
    shared; ``attnsim-<uid>`` in the temp folder."""
    import platformdirs

    tag, out = install_tag(), []
    if os.environ.get(PIN_ENV):
        out.append((Path(os.environ[PIN_ENV]), Path(os.environ[PIN_ENV])))
    env = os.environ.get(ENV, "")
    if env and env != "off" and not env.startswith("sqlite:") and not env.endswith(".sqlite"):
        kernels = Path(env).expanduser().absolute() / "kernels"
        out.append((kernels, kernels / tag))
    kernels = Path(platformdirs.user_cache_dir("attnsim", appauthor=False)) / "kernels"
    out.append((kernels, kernels / tag))
    tmp = Path(tempfile.gettempdir()) / f"attnsim-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    out.append((tmp, tmp / "kernels" / tag))
    return out


@functools.lru_cache(maxsize=1)
def kernel_dir() -> Path | None:
    """The folder of attnsim's own kernel cache (chosen once per process; None when none can be written)."""
    for guard, d in candidate_dirs():
        rel = d.relative_to(guard).parts
        why = None
        for level in [guard] + [guard.joinpath(*rel[: i + 1]) for i in range(len(rel))]:
            why = why or _private_dir(level)  # each from the guard down: nobody else can swap one of them
        if why is None:
            return d
        LOG.warning("kernel cache %s: %s; trying the next location", d, why)
    return None


def cache_location() -> str:
    """Where compiled kernels go, for messages."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return f"{os.environ['NUMBA_CACHE_DIR']} (NUMBA_CACHE_DIR)"
    d = kernel_dir()
    return str(d) if d is not None else "Numba's default location"


def kernel_group(py_file: str) -> str:
    """The kernel group of a source: its path under its installed root (``hwmodels/dram/sched_flat.py``)."""
    path = os.path.abspath(py_file)
    root = next((r for r in _roots if path.startswith(r + os.sep)), os.path.dirname(path))
    return os.path.relpath(path, os.path.dirname(root)).replace(os.sep, "/")


def _warm_marker(py_file: str) -> Path | None:
    """The marker of a kernel group whose compiled kernels this cache location holds for the current sources (the
    folder's stamp and the location are in its name); None where no folder can be written."""
    d = kernel_dir()
    if d is None:
        return None
    src = os.path.dirname(os.path.abspath(py_file))
    tag = hashlib.sha256(f"{cache_location()}|{folder_stamp(src)}|{kernel_group(py_file)}".encode()).hexdigest()[:16]
    return d / f".warm-{tag}"


def group_warm(py_file: str) -> bool:
    """Whether the kernels of ``py_file`` were compiled into this cache location for its current sources (checked
    without importing Numba: a marker file; a cache emptied by hand then compiles again, as without the marker)."""
    m = _warm_marker(py_file)
    return m is not None and m.exists()


def mark_group_warm(py_file: str) -> None:
    """Record that the kernels of ``py_file`` are compiled into this cache location (after they ran)."""
    m = _warm_marker(py_file)
    if m is not None and not m.exists():
        try:
            m.touch()
        except OSError:
            pass  # a read-only cache: the next process decides by its own walks again


def compiled_any() -> bool:
    """Whether this process has compiled (not loaded) one of attnsim's kernels."""
    return _LISTENER is not None and _LISTENER.said


def register_root(root: Path) -> None:
    """Cache and stamp the kernels of every source under ``root`` as above, once Numba is in use (:func:`ensure`);
    imports nothing of Numba (the default run's command walks run interpreted, hwmodels/dram/kernel.py)."""
    r = os.path.abspath(root)
    if r not in _roots:
        _roots.append(r)


def install(root: Path) -> None:
    """:func:`register_root` and :func:`ensure` (for a package whose kernels are decorated at its import)."""
    register_root(root)
    ensure()


def ensure() -> None:
    """Put attnsim's cache locators and compile notice into Numba (idempotent). Every module that decorates a
    kernel calls it before its decorators run: Numba picks a dispatcher's locator when ``cache=True`` is applied."""
    global KernelCacheLocator, _NotInPackage, _LISTENER
    if _LISTENER is not None:
        return
    from numba.core import caching, config, event

    class KernelCacheLocator(caching.UserProvidedCacheLocator):
        """The locator of attnsim's kernels (sources under an installed root): cached in ``$NUMBA_CACHE_DIR`` as
        Numba lays it out, else (or when that cannot be written) in :func:`kernel_dir` by folder relative to the
        root; stamped by folder."""

        def _paths(self):
            if config.CACHE_DIR:
                yield self._cache_path  # set by Numba's __init__
            if kernel_dir() is not None:
                src = os.path.dirname(os.path.abspath(self._py_file))
                root = next(r for r in _roots if (src + os.sep).startswith(r + os.sep))
                yield os.path.join(kernel_dir(), os.path.relpath(src, os.path.dirname(root)))

        @classmethod
        def from_function(cls, py_func, py_file):
            if not _ours(py_file) or not os.path.exists(py_file):
                return None  # not ours: Numba's own locators
            self = cls(py_func, py_file)
            for path in self._paths():
                self._cache_path = path
                try:
                    self.ensure_cache_path()
                    return self
                except OSError:
                    continue
            return None  # nowhere writable: Numba's user-wide folder (never the package: _NotInPackage)

        def get_source_stamp(self):
            return "attnsim-folder-sha256:" + folder_stamp(os.path.dirname(os.path.abspath(self._py_file)))

    class _NotInPackage(caching.InTreeCacheLocator):
        """Numba's ``__pycache__``-beside-the-source locator, refused for attnsim's kernels."""

        @classmethod
        def from_function(cls, py_func, py_file):
            return None if _ours(py_file) else super().from_function(py_func, py_file)

    class _FirstCompile(event.Listener):
        """Logs the first compile of one of attnsim's kernels in this process (Numba fires ``numba:compile`` on a
        cache miss only), naming its kernel group (source file), then one progress line per further group compiled
        (a command that reaches several groups on a cold cache compiles them one after the other, issue 30)."""

        def __init__(self):
            self.said = False
            self.groups: set[str] | None = None  # the groups compiled since the first line (None: not printed here)
            self._lock = threading.Lock()

        def on_start(self, ev):
            disp = (ev.data or {}).get("dispatcher")
            code = getattr(getattr(disp, "py_func", None), "__code__", None)
            if code is None or not _ours(code.co_filename):
                return
            group = kernel_group(code.co_filename)
            with self._lock:
                first, self.said = not self.said, True
                if first:
                    self.groups = set()  # progress lines follow the first line this listener printed
                new = self.groups is not None and group not in self.groups
                if self.groups is not None:
                    self.groups.add(group)
            if first:
                lo, hi = COLD_COMPILE_S
                LOG.info(
                    "compiling Numba kernels into %s (once per install and cache location; a first run takes "
                    "~%d-%d s more; `attnsim warmup` compiles them all ahead): %s",
                    cache_location(),
                    lo,
                    hi,
                    group,
                )
            elif new:
                LOG.info("compiling Numba kernels: %s", group)

        def on_end(self, ev):
            pass

    impl = caching.CacheImpl
    rest = [_NotInPackage if c is caching.InTreeCacheLocator else c for c in impl._locator_classes]
    impl._locator_classes = [KernelCacheLocator] + rest
    _LISTENER = _FirstCompile()
    event.register("numba:compile", _LISTENER)
