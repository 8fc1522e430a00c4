"""Registry of hardware kinds: ``kind`` string in a YAML -> (schema, factory).

Each device module registers itself at import; ``build(hw_dict, file)`` validates a
hardware config with the kind's schema and constructs the model. A new device
family is a module + ``register(...)``, not an if-chain.

Thread-safe: the first lookup imports every family under a lock and only then
publishes ``_loaded``, so a concurrent lookup (a dask worker with several threads)
waits for the imports instead of seeing a partial registry.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Callable

from attnsim.config import ConfigError, validate

_KINDS: dict[str, tuple[type, Callable[[Any], Any]]] = {}
# modules that register kinds; imported lazily so that importing one model stays cheap
_MODULES = (
    "attnsim.hwmodels.gpu",
    "attnsim.hwmodels.npu",
    "attnsim.hwmodels.links",
    "attnsim.hwmodels.dram.spec",
    "attnsim.hwmodels.pim",
    "attnsim.hwmodels.memory",
    "attnsim.hwmodels.cxl_controller",
    "attnsim.hwmodels.host",
)
_loaded = False
_loading = False
_load_lock = threading.RLock()


_WITH_TABLE: set = set()  # kinds whose factory resolves references to other hardware configs


def register(kind: str, schema: type, factory: Callable[[Any], Any], *, uses_table: bool = False) -> None:
    """``uses_table``: the factory is called as ``factory(spec, hardware=table)`` (see ``build``)."""
    _KINDS[kind] = (schema, factory)
    if uses_table:
        _WITH_TABLE.add(kind)


def _load_all() -> None:
    global _loaded, _loading
    if _loaded:
        return
    with _load_lock:
        if _loaded or _loading:  # _loading: a lookup from inside a family's import (same thread)
            return
        _loading = True
        try:
            for mod in _MODULES:
                try:
                    importlib.import_module(mod)
                except ModuleNotFoundError as exc:  # a family not built yet
                    if exc.name != mod:
                        raise
            _loaded = True  # published only after every import finished
        finally:
            _loading = False


def kinds() -> list[str]:
    _load_all()
    return sorted(_KINDS)


def schema_for(kind: str, file: str | None = None) -> type:
    _load_all()
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ConfigError(f"expected one of {', '.join(sorted(_KINDS))}, got {kind!r}", file=file, key="kind")
    return _KINDS[kind][0]


def build(hw: dict, file: str | None = None, hardware: dict | None = None):
    """Validate a hardware config dict (with a ``kind`` key) and build its model.

    ``hardware`` (name -> config dict, e.g. an experiment's config tree) resolves the configs this
    one references (a PIM device's DRAM preset) from that table, so overrides of them apply."""
    if not isinstance(hw, dict) or "kind" not in hw:
        raise ConfigError("missing required key", file=file, key="kind")
    schema = schema_for(hw["kind"], file)
    spec = validate(schema, hw, file=file)
    factory = _KINDS[hw["kind"]][1]
    return factory(spec, hardware=hardware) if hw["kind"] in _WITH_TABLE else factory(spec)
