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

from pydantic import Field

from attnsim.core.config import ConfigError, ContentMemo, Schema, _number_kind, not_physical, set_dotted, validate

_KINDS: dict[str, tuple[type, Callable[[Any], Any]]] = {}
# modules that register kinds; imported lazily so that importing one model stays cheap
_MODULES = (
    "attnsim.hwmodels.gpu",
    "attnsim.hwmodels.npu",
    "attnsim.hwmodels.links",
    "attnsim.hwmodels.dram.device",
    "attnsim.hwmodels.pim",
    "attnsim.hwmodels.memory",
    "attnsim.hwmodels.cxl_controller",
    "attnsim.hwmodels.host",
    "attnsim.hwmodels.kv_pool",
    "attnsim.hwmodels.flash",
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
    spec = validate_hardware(hw, file)
    factory = _KINDS[hw["kind"]][1]
    try:
        model = factory(spec, hardware=hardware) if hw["kind"] in _WITH_TABLE else factory(spec)
    except ConfigError as e:  # a cross-field check of the model: name the config's file
        if e.file is not None or file is None or type(e) is not ConfigError:
            raise
        raise ConfigError(e.message, file=file, key=e.key) from None
    if file is not None:
        try:
            model.config_file = file  # later errors about this config (e.g. PIMDevice.stored_ratio) name it
        except AttributeError:  # a frozen model
            pass
    return model


def validate_hardware(hw: dict, file: str | None = None):
    """The validated spec of a hardware config dict (its kind's schema; ``ranges:`` and ``evidence:`` blocks
    checked by :func:`split_ranges` and set aside); the same dict and file give the same (frozen) spec, remembered:
    the verdict flips validate each hardware config of a pair once per re-run (689 times in the default run)."""
    return _VALIDATED_HW.get(
        "hardware", (hw, None if file is None else str(file)), lambda: _validate_hardware(hw, file)
    )


_VALIDATED_HW = ContentMemo()


def _validate_hardware(hw: dict, file: str | None = None):
    if not isinstance(hw, dict) or "kind" not in hw:
        raise ConfigError("missing required key", file=file, key="kind")
    schema = schema_for(hw["kind"], file)
    rest, _ = split_ranges(hw, file, schema)
    return validate(schema, rest, file=file)


# ---------------------------------------------------------------- ranges (attnsim sensitivity)
#
# Any hardware config may end with ``ranges:``: per unpublished parameter (dotted field name of that
# file, e.g. ``pu.tflops``) the range it is uncertain over and where the range comes from. The run
# itself does not read it; ``attnsim sensitivity`` varies each parameter over it.

RANGES_KEY = "ranges"


class RangeSpec(Schema):
    """Documented range of one parameter: ``low <= value in the file <= high``, with its source
    (a citation, or ``"assumption: <why>"``)."""

    low: float
    high: float
    source: str = Field(min_length=1)

    plausible = {"*": not_physical("both ends are checked against the field's own range (check_ranges)")}


def _field_schema(ann):
    """The schema class of a nested-model annotation (through Optional/Annotated), else None."""
    import types
    import typing

    from pydantic import BaseModel

    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _field_schema(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        subs = [s for s in (_field_schema(a) for a in typing.get_args(ann)) if s is not None]
        return subs[0] if len(subs) == 1 else None
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def number_fields(schema, prefix: str = "") -> dict[str, str]:
    """Dotted input key -> 'int' / 'float' of every scalar number field of ``schema`` (nested models
    walked into): the keys a ``ranges:`` block may name."""
    out = {}
    for name, f in schema.model_fields.items():
        key = prefix + (f.alias or name)
        kind = _number_kind(f.annotation)
        if kind in ("int", "float"):
            out[key] = kind
        sub = _field_schema(f.annotation)
        if sub is not None:
            out.update(number_fields(sub, key + "."))
    return out


def field_keys(schema, prefix: str = "") -> list[str]:
    """Every dotted input key of ``schema`` (nested models walked into, their own key included): the keys
    an ``evidence:`` block may name."""
    out = []
    for name, f in schema.model_fields.items():
        key = prefix + (f.alias or name)
        out.append(key)
        sub = _field_schema(f.annotation)
        if sub is not None:
            out += field_keys(sub, key + ".")
    return out


def split_ranges(hw: dict, file: str | None = None, schema=None) -> tuple[dict, dict[str, RangeSpec]]:
    """(the config without ``ranges``, ``evidence`` and ``choices``, {dotted key: RangeSpec}); refuses a key that names
    no number field of the file's kind, a range with low > high, a missing source, and a bad ``evidence:``
    block (:func:`evidence_tags`)."""
    if RANGES_KEY not in hw and EVIDENCE_KEY not in hw and CHOICES_KEY not in hw:
        return hw, {}
    rest = {k: v for k, v in hw.items() if k not in (RANGES_KEY, EVIDENCE_KEY, CHOICES_KEY)}
    raw = hw.get(RANGES_KEY, {})
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of field -> {low, high, source}", file=file, key=RANGES_KEY)
    schema = schema or schema_for(hw.get("kind"), file)
    fields = number_fields(schema)
    out = {}
    for key, r in raw.items():
        where = f"{RANGES_KEY}.{key}"
        if str(key) not in fields:
            raise ConfigError(
                f"expected a number field of kind {hw.get('kind')} ({', '.join(fields)}), got {key!r}",
                file=file,
                key=where,
            )
        spec = validate(RangeSpec, r if isinstance(r, dict) else {"low": r}, file=file, prefix=where)
        if spec.low > spec.high:
            raise ConfigError(f"expected low <= high, got low {spec.low:g} > high {spec.high:g}", file=file, key=where)
        out[str(key)] = spec
    _evidence(hw, file, schema, out)
    return rest, out


# ---------------------------------------------------------------- evidence tags (verdict flips)
#
# What a value rests on, machine-readable: every ``ranges:`` entry is an *assumed* parameter (its range is
# the plausible span); an optional ``evidence:`` block tags other keys (or re-tags a ranged one) as
# measured / datasheet / artefact / assumed, each with its source. An assumed parameter needs a range
# (the verdict-flip check varies it over that range, attnsim.studies.verdict).

EVIDENCE_KEY = "evidence"
EVIDENCE_TAGS = ("measured", "datasheet", "artefact", "assumed")
ASSUMED = "assumed"


class EvidenceSpec(Schema):
    """Evidence of one value: ``tag`` (one of EVIDENCE_TAGS) and its ``source`` (a citation)."""

    tag: str
    source: str = Field(min_length=1)


def _evidence(hw: dict, file, schema, ranges: dict) -> dict[str, EvidenceSpec]:
    """The ``evidence:`` block of ``hw`` validated: keys name fields of the kind, tags are EVIDENCE_TAGS,
    an ``assumed`` tag has a ``ranges:`` entry."""
    raw = hw.get(EVIDENCE_KEY, {})
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of field -> {tag, source}", file=file, key=EVIDENCE_KEY)
    keys = field_keys(schema)
    out = {}
    for key, e in raw.items():
        where = f"{EVIDENCE_KEY}.{key}"
        if str(key) not in keys:
            raise ConfigError(
                f"expected a field of kind {hw.get('kind')} ({', '.join(keys)}), got {key!r}", file=file, key=where
            )
        spec = validate(EvidenceSpec, e if isinstance(e, dict) else {"tag": e}, file=file, prefix=where)
        if spec.tag not in EVIDENCE_TAGS:
            raise ConfigError(
                f"expected one of {', '.join(EVIDENCE_TAGS)}, got {spec.tag!r}", file=file, key=f"{where}.tag"
            )
        if spec.tag == ASSUMED and str(key) not in ranges:
            raise ConfigError(
                f"expected a ranges: entry for an assumed parameter (its plausible low and high), got none for {key}",
                file=file,
                key=where,
            )
        out[str(key)] = spec
    return out


def evidence_tags(hw: dict, file: str | None = None) -> dict[str, EvidenceSpec]:
    """{dotted key: EvidenceSpec} of a hardware config: each ``ranges:`` entry tagged ``assumed`` (its range's
    source), then the ``evidence:`` block over it."""
    if not isinstance(hw, dict) or (RANGES_KEY not in hw and EVIDENCE_KEY not in hw):
        return {}
    schema = schema_for(hw.get("kind"), file)
    _, ranges = split_ranges(hw, file, schema)
    out = {k: EvidenceSpec(tag=ASSUMED, source=r.source) for k, r in ranges.items()}
    out.update(_evidence(hw, file, schema, ranges))
    return out


# ---------------------------------------------------------------- categorical choices (verdict flips)
#
# A hardware config may also hold ``choices:``: per categorical setting whose value decides verdicts (a DRAM
# spec's controller rules, a PIM device's KV mapping, a link's all-reduce algorithm) the other plausible values
# and where they come from. The run reads the file's own value; the verdict-flip check (attnsim.studies.verdict)
# re-runs each alternative, as it re-runs both ends of each ``ranges:`` entry.

CHOICES_KEY = "choices"


class ChoiceSpec(Schema):
    """The other plausible values of one categorical setting, with the source that makes them plausible."""

    values: list = Field(min_length=1)
    source: str = Field(min_length=1)


def spec_value(spec, key: str):
    """The validated value of a dotted input key (aliases followed) of a hardware spec."""
    value = spec
    for part in key.split("."):
        value = getattr(value, next((n for n, f in type(value).model_fields.items() if (f.alias or n) == part), part))
    return value


def split_choices(hw: dict, file: str | None = None, own_differs: bool = True) -> dict[str, ChoiceSpec]:
    """{dotted key: ChoiceSpec} of a hardware config's ``choices:`` block: each key names a field of the kind
    (a continuous number takes a ``ranges:`` entry instead), each alternative is a legal value of it and (with
    ``own_differs``, the file as read) differs from the file's own."""
    import copy

    if not isinstance(hw, dict) or CHOICES_KEY not in hw:
        return {}
    spec = validate_hardware(hw, file)
    schema = type(spec)
    keys = field_keys(schema)
    rest, _ = split_ranges(hw, file, schema)

    def legal(key: str, v) -> None:
        trial = copy.deepcopy(rest)
        set_dotted(trial, key.split("."), v, create=True)
        validate(schema, trial, file=file)

    return check_choices(
        hw[CHOICES_KEY],
        file,
        lambda key: key in keys,
        f"a field of kind {hw.get('kind')} ({', '.join(keys)})",
        lambda key: spec_value(spec, key),
        legal,
        own_differs,
    )


def check_choices(raw, file, known, expected: str, own_of, legal, own_differs: bool = True) -> dict[str, ChoiceSpec]:
    """The one check of a ``choices:`` block (hardware files: :func:`split_choices`; system files:
    attnsim.sim.experiment): a mapping of key -> {values, source}; ``known(key)`` says whether a key may be named
    (else refused: "expected ``expected``"); each alternative differs from ``own_of(key)`` (with ``own_differs``)
    and ``legal(key, value)`` accepts it (its ConfigError becomes one line at ``choices.KEY.values.N``)."""
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of field -> {values, source}", file=file, key=CHOICES_KEY)
    out = {}
    for key, c in raw.items():
        where = f"{CHOICES_KEY}.{key}"
        if not known(str(key)):
            raise ConfigError(f"expected {expected}, got {key!r}", file=file, key=where)
        ch = validate(ChoiceSpec, c if isinstance(c, dict) else {"values": c}, file=file, prefix=where)
        own = own_of(str(key))
        for i, v in enumerate(ch.values):
            if own_differs and (v == own or str(v) == str(own)):
                raise ConfigError(
                    f"expected a value other than the file's own ({own!r}), got {v!r}",
                    file=file,
                    key=f"{where}.values.{i}",
                )
            try:
                legal(str(key), v)
            except ConfigError as exc:
                raise ConfigError(
                    f"expected a legal value of {key}, got {v!r} ({exc.message})", file=file, key=f"{where}.values.{i}"
                ) from None
        out[str(key)] = ch
    return out


def check_ranges(hw: dict, file: str | None = None) -> dict[str, RangeSpec]:
    """A hardware file's ranges against its own values: each range holds the file's value
    (``low <= value <= high``) and both ends are legal values of the field. Run on the file as read
    (a ``--set`` override may leave the range: the range documents the file's value)."""
    import copy

    if not isinstance(hw, dict) or RANGES_KEY not in hw:
        return {}
    spec = validate_hardware(hw, file)
    rest, ranges = split_ranges(hw, file)
    for key, r in ranges.items():
        where = f"{RANGES_KEY}.{key}"
        value = spec_value(spec, key)
        if value is None or not r.low <= value <= r.high:
            raise ConfigError(
                f"expected low <= {key} ({value}) <= high, got [{r.low:g}, {r.high:g}]", file=file, key=where
            )
        for end in ("low", "high"):
            trial = copy.deepcopy(rest)
            v = getattr(r, end)
            set_dotted(
                trial,
                key.split("."),
                int(v) if number_fields(type(spec))[key] == "int" and v == int(v) else v,
                create=True,
            )
            try:
                validate(type(spec), trial, file=file)
            except ConfigError as exc:
                raise ConfigError(
                    f"expected a legal value of {key}, got {v:g} ({exc.message})", file=file, key=f"{where}.{end}"
                ) from None
    return ranges
