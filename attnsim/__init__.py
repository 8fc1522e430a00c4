"""attnsim: cycle-approximate simulator of LLM inference on memory-centric hardware.

``__version__`` is derived from git when the package is built or installed (setuptools-scm writes
``attnsim/_version.py``); ``BUILD_COMMIT`` is the commit it was built from ("" when unknown).
"""

try:
    from attnsim import _version as _v

    __version__: str = _v.version
    BUILD_COMMIT: str = (getattr(_v, "commit_id", None) or "").removeprefix("g")  # setuptools-scm writes g<sha>
except Exception:  # noqa: BLE001 - never built/installed with setuptools-scm (or the file is being rewritten)
    try:
        from importlib.metadata import version as _dist_version

        __version__ = _dist_version("attnsim")
    except Exception:  # noqa: BLE001 - not installed at all
        __version__ = "0.1.0+unknown"
    BUILD_COMMIT = ""

# The Python API (docs/api.md), imported on first use so `import attnsim` and `attnsim --version` stay fast.
# serve and sweep are functions of attnsim.api (their packages live in attnsim.studies); pim is the module
# attnsim.sim.pim (attnsim.pim.run)
_API = {
    "run": "attnsim.api",
    "load": "attnsim.api",
    "serve": "attnsim.api",
    "sweep": "attnsim.api",
    "pim": "attnsim.sim.pim",
    "Results": "attnsim.api",
    "ServeResults": "attnsim.api",
    "SweepResults": "attnsim.api",
    "ConfigError": "attnsim.core.config",
}
_MODULES = {"pim"}  # names that are a module, not a name inside one
__all__ = ["__version__", "BUILD_COMMIT", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'attnsim' has no attribute {name!r}")
    import importlib

    if name in _MODULES:
        return importlib.import_module(_API[name])
    return getattr(importlib.import_module(_API[name]), name)
