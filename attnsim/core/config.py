"""Load and validate YAML configs; resolve an experiment into one config tree.

Every config file is validated by a pydantic schema with ``extra="forbid"``; a
failure becomes a :class:`ConfigError` naming the file, the dotted key path and
what was expected, e.g.::

    systems/dgx_a100.yaml: devices.gpu.count: expected a positive integer, got -2

The resolved tree has five top-level sections, each a mapping of name -> dict:
``experiment`` (a single dict), ``models``, ``systems``, ``hardware``,
``scenarios``. ``--set a.b.c=v`` overrides address that tree with dotted keys
and are validated the same way as files.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

try:  # installed package
    from attnsim.configs import CONFIG_ROOT
except ImportError:  # pragma: no cover - running from an odd layout
    import attnsim as _pkg  # the package's folder, whichever layer folder this module lives in

    CONFIG_ROOT = Path(_pkg.__file__).resolve().parent.parent / "configs"

CONFIG_KINDS = ("hardware", "models", "systems", "experiments", "sweeps")


class ConfigError(ValueError):
    """A config, CLI argument or input file is invalid.

    ``str(err)`` is ``"<file>: <key.path>: <message>"`` (parts omitted when unknown), always one
    line: control characters coming from the input (a key or value holding a newline) are escaped.
    """

    def __init__(self, message: str, file: str | os.PathLike | None = None, key: str | None = None):
        self.file = str(file) if file is not None else None
        self.key = key
        if "expected one of" in str(message):  # a near miss of a choice gets 'did you mean' (attnsim.core.suggest)
            from attnsim.core.suggest import amend

            message = amend(str(message))
        self.message = message
        parts = [p for p in (self.file, key) if p]
        super().__init__(_bounded(_one_line, ": ".join(parts + [str(message)])))


MAX_MESSAGE_CHARS = 4000
"""Longest error line: the longest legitimate one lists every built-in config name (~1,100 characters); a
message quoting a whole multi-megabyte input (a 5 MB ``--set`` item, found by bench/fuzz.py) is cut here."""


def _bounded(escape, text: str) -> str:
    """``escape(text)`` cut to MAX_MESSAGE_CHARS (escaping a character makes at most 10, so at most
    10 x MAX_MESSAGE_CHARS characters are escaped, however long the text)."""
    n = len(text)
    out = escape(text[: 10 * MAX_MESSAGE_CHARS])
    if len(out) <= MAX_MESSAGE_CHARS and n <= 10 * MAX_MESSAGE_CHARS:
        return out
    return out[:MAX_MESSAGE_CHARS] + f"... (cut: {n} characters in all)"


def _one_line(text: str) -> str:
    """``text`` with control characters (newlines, tabs, escapes) written as backslash escapes."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


# ---------------------------------------------------------------- numbers

INT_LIMIT = 2**53
"""Largest magnitude of any integer attnsim accepts from a config, trace or program (2**53 =
9007199254740992: exact as a float64, far inside int64, so no reader can wrap or overflow)."""


def _int_expected(lo: int, hi: int) -> str:
    def name(v):
        return "2**53" if v == INT_LIMIT else "-2**53" if v == -INT_LIMIT else str(v)

    return f"expected an integer in [{name(lo)}, {name(hi)}]"


def check_int(
    value: Any, file: str | os.PathLike | None = None, key: str | None = None, lo: int = -INT_LIMIT, hi: int = INT_LIMIT
) -> int:
    """Return ``value`` as a Python int in ``[lo, hi]``, else raise ConfigError.

    The one integer rule for every reader (configs, request traces, DRAM traces, asm operands):
    accepts ints, numpy integers, integral finite floats and strings in decimal (or ``0x``/``0o``/
    ``0b`` with an optional sign, ``_`` separators refused). Booleans are refused. The error is
    ``"<file>: <key>: expected an integer in [lo, hi], got <value>"``; the default bounds are
    ``±INT_LIMIT`` (2**53), pass tighter physical limits where a reader has them.
    """
    v: Any = value
    if isinstance(v, (bool, type(None))):
        v = None
    elif isinstance(v, numbers.Integral):
        v = int(v)
    elif isinstance(v, float):
        v = int(v) if math.isfinite(v) and v == int(v) else None
    elif isinstance(v, (str, bytes)):
        text = (v.decode("utf-8", "replace") if isinstance(v, bytes) else v).strip()
        v = None
        if text and "_" not in text and len(text) <= 64:
            try:
                v = int(text, 10)
            except ValueError:
                try:
                    v = int(text, 0)
                except ValueError:
                    v = None
    else:
        v = None
    if v is None or not lo <= v <= hi:
        raise ConfigError(f"{_int_expected(lo, hi)}, got {_short_repr(value)}", file=file, key=key)
    return v


def check_float(
    value: Any,
    file: str | os.PathLike | None = None,
    key: str | None = None,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> float:
    """Return ``value`` as a finite float in ``[lo, hi]``, else raise ConfigError.

    Accepts real numbers (not booleans) and numeric strings; ``inf``/``nan`` (and values such as
    ``1e999`` that overflow to inf) give ``"expected a finite number, got inf"``.
    """
    v: Any = value
    if isinstance(v, bool):
        v = None
    elif isinstance(v, numbers.Real):
        v = float(v) if not isinstance(v, numbers.Integral) or abs(v) <= 2**1023 else math.inf
    elif isinstance(v, (str, bytes)):
        try:
            v = float(v)
        except ValueError:
            v = None
    else:
        v = None
    if v is None:
        raise ConfigError(f"expected a number, got {_short_repr(value)}", file=file, key=key)
    if not math.isfinite(v):
        raise ConfigError(f"expected a finite number, got {_short_repr(v)}", file=file, key=key)
    if not lo <= v <= hi:
        raise ConfigError(f"expected a number in [{lo:g}, {hi:g}], got {_short_repr(value)}", file=file, key=key)
    return v


def _short_repr(value: Any, limit: int = 60) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # inf, -inf, nan
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def number_problem(value: Any) -> str | None:
    """The finite-number / integer-bound rule for one value: a message, or None if it is fine."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"expected a finite number, got {value}"
    if isinstance(value, numbers.Integral):
        return (
            None
            if -INT_LIMIT <= value <= INT_LIMIT
            else f"{_int_expected(-INT_LIMIT, INT_LIMIT)}, got {_short_repr(value)}"
        )
    if isinstance(value, numbers.Real):  # numpy floats
        return None if math.isfinite(float(value)) else f"expected a finite number, got {float(value)}"
    return None


def find_bad_number(data: Any, path: tuple = ()) -> tuple[tuple, str] | None:
    """First value in a nested dict/list/tuple that breaks :func:`number_problem`: (key path, message).

    Pydantic models inside are skipped (each Schema checks itself). Iterative, so any depth is safe.
    """
    stack = [(path, data)]
    while stack:
        p, v = stack.pop()
        if isinstance(v, BaseModel):
            continue
        if isinstance(v, Mapping):
            stack.extend((p + (k,), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((p + (i,), x) for i, x in reversed(list(enumerate(v))))
        else:
            msg = number_problem(v)
            if msg:
                return p, msg
    return None


def check_numbers(data: Any, file: str | os.PathLike | None = None, key: str | None = None) -> None:
    """Raise ConfigError at the first non-finite float or out-of-range integer in ``data``
    (nested dicts/lists), naming its dotted key path below ``key``."""
    bad = find_bad_number(data)
    if bad is not None:
        path, msg = bad
        raise ConfigError(msg, file=file, key=".".join(([key] if key else []) + [str(x) for x in path]) or None)


def _number_kind(ann: Any) -> str | None:
    """'int' / 'float' for a number annotation (through Annotated/Optional), 'list:int' etc. for a
    list/tuple of them, else None (bool, str, unions with non-numbers, models...)."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _number_kind(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):  # e.g. Optional[int], list[int] | a model
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if any(a is bool or a is typing.Any for a in args):
            return None
        kinds = {_number_kind(a) for a in args} - {None}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, tuple):
        kinds = {_number_kind(a) for a in typing.get_args(ann) if a is not Ellipsis}
        k = kinds.pop() if len(kinds) == 1 else None
        return f"list:{k}" if k in ("int", "float") else None
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    return None


_NUMBER_FIELDS: dict[type, dict[str, tuple[str, str]]] = {}


def _number_fields(cls) -> dict[str, tuple[str, str]]:
    """Input key -> (field name, number kind) of the number fields of a schema (cached per class)."""
    out = _NUMBER_FIELDS.get(cls)
    if out is None:
        out = {}
        for name, f in cls.model_fields.items():
            kind = _number_kind(f.annotation)
            if kind:
                out[name] = (name, kind)
                if f.alias:
                    out[f.alias] = (name, kind)
        _NUMBER_FIELDS[cls] = out
    return out


# ---------------------------------------------------------------- plausible ranges
#
# Every number field of every config schema has a plausible range with its reason (issue 31): a value outside
# it is refused by :func:`validate` with one line naming the range, unless the file lists the dotted key under
# ``allow_out_of_range:`` (its top level; the run documents note it). A field's range is, first match: its
# schema's ``plausible`` entry (ClassVar, subclasses inherit), else the unit of its name (:data:`UNIT_RANGES`,
# the project names physical quantities with units), else the schema's ``"*"`` entry (its other fields).
# ``docs/reference/ranges.md`` is generated from these (``python bench/ranges_table.py``).

ALLOW_KEY = "allow_out_of_range"


@dataclass(frozen=True)
class Plausible:
    """``low <= value <= high`` is plausible for a field, because of ``reason`` (a cited bound). A field that
    is no physical quantity (a seed, a sweep axis) has the infinite range and says why."""

    low: float
    high: float
    reason: str

    def text(self) -> str:
        if self.low == -math.inf and self.high == math.inf:
            return "any value"
        return "[" + ", ".join(str(v) if isinstance(v, int) else f"{v:g}" for v in (self.low, self.high)) + "]"


NOT_PHYSICAL = "not a physical quantity"


def not_physical(why: str) -> Plausible:
    """The range of a field that is not a physical quantity (seeds, sweep axes, labels): any number."""
    return Plausible(-math.inf, math.inf, f"{NOT_PHYSICAL}: {why}")


#: Range by the unit ending a field's name, first match (longest suffixes first). The bounds are orders of
#: magnitude beyond any device of 2026, so every real configuration fits, and a value such as 1e-300 GB/s or
#: 1e12 days that no hardware has is refused.
UNIT_RANGES: tuple[tuple[str, Plausible], ...] = (
    (
        "_pj_per_bit",
        Plausible(
            0,
            1e4,
            "pJ/bit: DRAM access ~1-20 pJ/bit, off-package SerDes ~5-10 pJ/bit "
            "(Horowitz ISSCC 2014; O'Connor MICRO 2017); 1e4 is 1000x that",
        ),
    ),
    ("_pj_per_byte", Plausible(0, 1e5, "pJ/byte: 8x the per-bit bound (flash reads ~100-1000 pJ/byte)")),
    ("_pj_per_op", Plausible(0, 1e5, "pJ/op: an fp32 op ~4 pJ at 45 nm (Horowitz ISSCC 2014); 1e5 is 10^4x")),
    ("_pj_per_mac", Plausible(0, 1e5, "pJ/MAC: an fp32 MAC ~5 pJ at 45 nm (Horowitz ISSCC 2014); 1e5 is 10^4x")),
    ("_pj_per_flop", Plausible(0, 1e5, "pJ/FLOP: ~1-5 pJ at 45-7 nm (Horowitz ISSCC 2014); 1e5 is 10^4x")),
    ("_pj_per_command", Plausible(0, 1e7, "pJ per DRAM command (a 32 B column at <= 1e4 pJ/bit is 2.6e6)")),
    ("_pj_per_cycle", Plausible(0, 1e7, "pJ per core cycle: a 10 W core at 1 GHz is 1e4 pJ; 1e7 is 1000x")),
    ("_pj_per_instruction", Plausible(0, 1e7, "pJ per instruction fetch (a few pJ per byte of instruction)")),
    (
        "_pj",
        Plausible(
            0, 1e9, "pJ per event: an all-bank DRAM refresh is ~1e5 pJ (IDD5 x VDD x tRFC, JESD79); 1e9 (1 mJ) is 10^4x"
        ),
    ),
    ("_mw_per_gb", Plausible(0, 1e5, "mW/GB of refresh power: DRAM ~10-100 mW/GB (JESD79 IDD5); 1e5 = 100 W/GB")),
    ("_w_per_socket", Plausible(0, 1e4, "W per CPU socket: server CPUs idle at 50-150 W, TDP <= 500 W")),
    ("_w", Plausible(0, 1e5, "W: one device, link or host; a GB200 NVL72 rack draws ~120 kW, one component less")),
    ("_ma", Plausible(0, 1e5, "mA: JEDEC IDD currents are 10-1000 mA per device (JESD79-4/5, JESD235)")),
    (
        "_tflops",
        Plausible(
            1e-6,
            1e5,
            "TFLOP/s: B200 dense fp8 is 4.5 PFLOP/s (NVIDIA 2024); 1e5 is 20x, 1e-6 is a 1 MFLOP/s microcontroller",
        ),
    ),
    ("_gbps_per_unit", Plausible(1e-3, 1e6, "GB/s per unit: 1 MB/s to 1 PB/s")),
    (
        "_gbps",
        Plausible(
            1e-3,
            1e6,
            "GB/s: from a 1 MB/s serial link to 1 PB/s, above a whole GB200 NVL72 rack's HBM (576 TB/s, NVIDIA 2024)",
        ),
    ),
    ("_per_ns", Plausible(1e-6, 1e3, "per ns: a command stream of 1 per ms to 1000 per ns (1 THz)")),
    ("_mtps", Plausible(1, 1e5, "MT/s per pin: DDR-200 to 100 GT/s (HBM4 ~8-10 GT/s, GDDR7 32-48 GT/s)")),
    ("_ghz", Plausible(1e-3, 100, "GHz: 1 MHz to 100 GHz (2026 logic clocks <= ~6 GHz)")),
    ("_mhz", Plausible(1, 1e5, "MHz: 1 MHz to 100 GHz (2026 logic clocks <= ~6 GHz)")),
    ("_gb_per_unit", Plausible(1e-6, 1e6, "GB per unit: 1 KB to 1 PB")),
    (
        "_gb",
        Plausible(1e-6, 1e7, "GB: 1 KB to 10 PB (a single device or pool; the largest CXL/flash pools are ~100 TB)"),
    ),
    ("_mb", Plausible(1e-3, 1e6, "MB: 1 KB to 1 TB (the largest on-chip SRAM, Cerebras WSE-3, is 44 GB)")),
    ("_kb", Plausible(0.5, 1024, "KiB: a 512 B sector to 1 MiB (NAND pages are 2-16 KiB, ONFI 4/5)")),
    ("_bytes", Plausible(1, 2**50, "bytes: 1 B to 1 PiB")),
    ("_ns", Plausible(1e-3, 1e6, "ns: 1 ps to 1 ms (DRAM tCK 0.1-2.5 ns, JESD79/235)")),
    (
        "_us",
        Plausible(
            0,
            1e6,
            "us: a per-operation latency or overhead of at most 1 s (NAND tPROG ~1-3 ms, "
            "kernel launches ~5 us, RPCs ~10-100 us)",
        ),
    ),
    (
        "_ms",
        Plausible(
            1e-3,
            1e8,
            "ms: 1 us to ~1 day (DRAM refresh windows are 32-64 ms, JESD79; relaxed refresh studies go to hours)",
        ),
    ),
    (
        "_days",
        Plausible(
            0,
            3650,
            "days: 10 years, the longest NAND retention rating (JESD218: client 1 year, "
            "enterprise 3 months at 30-40 C)",
        ),
    ),
    ("_s", Plausible(0, 86400 * 365, "s: at most a year")),
    ("_h", Plausible(0, 1e6, "hours: at most ~114 years")),
    (
        "_c",
        Plausible(
            -55,
            150,
            "degrees C: -55 to 150, the JEDEC extended / automotive junction range (JESD22-A104, AEC-Q100 grade 0)",
        ),
    ),
    ("_v", Plausible(0.1, 15, "V: supply voltages of DRAM and logic are 0.5-1.5 V (JESD79/209); 15 V is 10x")),
    (
        "_tokens",
        Plausible(
            0, 1 << 24, "tokens: at most 2^24 (workloads.limits.MAX_TOKENS, above the longest published context, 10 M)"
        ),
    ),
    ("_cycles", Plausible(0, 1 << 24, "clock cycles: at most 2^24 (~16 ms at 1 GHz; dram.spec.MAX_TIMING_CYCLES)")),
    ("fraction", Plausible(0, 1, "a fraction")),
    ("efficiency", Plausible(0, 1, "an efficiency (achieved / peak)")),
    ("_eta", Plausible(0, 1, "an efficiency (achieved / peak)")),
)


#: Plausible count of hardware units in one device or system (channels, cores, SMs, dies, links): real parts have
#: <= ~10^4 (H100: 132 SMs; SSDs: 8-16 channels); 2^20 is 100x.
HARDWARE_COUNT = Plausible(
    1,
    1 << 20,
    "units of hardware in one device or system (channels, cores, SMs, dies): "
    "real parts have <= ~10^4 (H100: 132 SMs; SSDs: 8-16 channels); 2^20 is 100x",
)
#: Plausible side of a systolic array: 128-256 in TPUs (Jouppi ISCA 2017/2023); 2^16 is 256x.
ARRAY_SIDE = Plausible(1, 1 << 16, "systolic array side: 128-256 in TPUs (Jouppi ISCA 2017/2023); 2^16 is 256x")


def plausible_range(cls, name: str) -> Plausible | None:
    """The plausible range of number field ``name`` of schema ``cls`` (see the section comment), or None."""
    for klass in cls.__mro__:
        table = klass.__dict__.get("plausible")
        if isinstance(table, dict) and name in table:
            return table[name]
    for suffix, p in UNIT_RANGES:
        if name.endswith(suffix) or name == suffix.lstrip("_"):
            return p
    for klass in cls.__mro__:
        table = klass.__dict__.get("plausible")
        if isinstance(table, dict) and "*" in table:
            return table["*"]
    return None


def _models_in(value: Any, key: tuple) -> list:
    """(key path, model) of the schemas directly inside a field value (a model, or a list/dict of them)."""
    if isinstance(value, BaseModel):
        return [(key, value)]
    if isinstance(value, (list, tuple)):
        return [(key + (i,), v) for i, v in enumerate(value) if isinstance(v, BaseModel)]
    if isinstance(value, Mapping):
        return [(key + (k,), v) for k, v in value.items() if isinstance(v, BaseModel)]
    return []


def _dotted(path: Iterable) -> str:
    return ".".join(str(x) for x in path)


def plausible_keys(schema, prefix: str = "") -> dict[str, Plausible | None]:
    """Dotted key (list indices left out) -> plausible range of every number field of ``schema`` and the
    schemas nested in it: the keys ``allow_out_of_range`` may name."""
    out = {}
    for name, f in schema.model_fields.items():
        key = prefix + (f.alias or name)
        if _number_kind(f.annotation):
            out[key] = plausible_range(schema, name)
        for sub in _nested_schemas(f.annotation):
            if sub is not schema:
                out.update(plausible_keys(sub, key + "."))
    return out


def _nested_schemas(ann) -> list:
    """Schema classes inside an annotation (through Optional/Annotated/list/dict)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [s for a in typing.get_args(ann) for s in _nested_schemas(a)]


def _allow_list(value: Any, file, prefix: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value):
        raise ConfigError(
            f"expected a list of dotted keys, got {_short_repr(value)}",
            file=file,
            key=_dotted([p for p in (prefix, ALLOW_KEY) if p]),
        )
    return list(value)


def file_allow_list(data: Any, file: str | os.PathLike | None = None) -> list[str]:
    """The ``allow_out_of_range:`` list at the top of one config file's dict ([] if absent), checked."""
    if not isinstance(data, Mapping) or ALLOW_KEY not in data:
        return []
    return _allow_list(data[ALLOW_KEY], file, "")


def allow_notes(tree: "ConfigTree") -> list[str]:
    """One note per file of a config tree that lists ``allow_out_of_range:`` keys (for the run documents):
    ``<file>: allow_out_of_range: [k1, k2] (values accepted outside their plausible ranges)``."""
    out = []
    sections = [("experiment", None, tree.experiment)] + [
        (sec, name, d) for sec in ("models", "systems", "hardware") for name, d in getattr(tree, sec).items()
    ]
    for sec, name, d in sections:
        keys = d.get(ALLOW_KEY) if isinstance(d, Mapping) else None
        if keys:
            f = tree.file_of(sec, name) if name is not None else tree.file_of(sec)
            out.append(
                f"{f}: {ALLOW_KEY}: [{', '.join(map(str, keys))}] (values accepted outside their plausible "
                f"ranges, docs/reference/ranges.md)"
            )
    return out


def check_plausible(
    model: BaseModel, file: str | os.PathLike | None = None, prefix: str = "", allow: Iterable[str] = ()
) -> list[str]:
    """Refuse the first number of ``model`` (nested schemas included) outside its plausible range, unless its
    dotted key (``prefix`` + path, list indices left out) is in ``allow``; returns the allowed keys whose value is
    outside (for the run document's notes). The error: ``<file>: <key>: expected a number in [lo, hi] (<reason>;
    allow_out_of_range: [<key>] accepts it), got <value>``."""
    allow = set(allow)
    used = []
    stack = [(tuple(p for p in prefix.split(".") if p), model)]
    while stack:
        path, m = stack.pop()
        for name, f in type(m).model_fields.items():
            v = getattr(m, name)
            key = path + (f.alias or name,)
            if _number_kind(f.annotation):
                p = plausible_range(type(m), name)
                values = v if isinstance(v, (list, tuple)) else [v]
                bad = next(
                    (
                        x
                        for x in values
                        if p is not None
                        and isinstance(x, numbers.Real)
                        and not isinstance(x, bool)
                        and not p.low <= x <= p.high
                    ),
                    None,
                )
                if bad is not None:
                    dotted = _dotted(key)
                    if dotted in allow:
                        used.append(f"{dotted} = {bad:g} outside {p.text()}")
                        continue
                    raise ConfigError(
                        f"expected a number in {p.text()} (plausible range: {p.reason}; list the key "
                        f"under {ALLOW_KEY}: to use it anyway), got {_short_repr(bad)}",
                        file=file,
                        key=dotted,
                    )
            else:
                stack.extend(_models_in(v, key))
    return used


class Schema(BaseModel):
    """Base of every config schema: unknown keys rejected, values immutable, numbers sane.

    Numbers: true/false is refused where a number is expected; every float field refuses inf/NaN
    (``allow_inf_nan=False``: "expected a finite number, got inf"), and after validation every int anywhere in the
    model's own fields (free-form
    ``dict[str, Any]`` sections included; nested Schemas check themselves) must be within
    ±:data:`INT_LIMIT`, and every float in a free-form section must be finite.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    #: field name -> Plausible range (``"*"``: every field); see :func:`plausible_range`
    plausible: typing.ClassVar[dict[str, Plausible]] = {}

    def refuse_unused(self, fields: Iterable[str], reason: str) -> None:
        """Refuse fields that were given explicitly but that the chosen mode does not read (a setting
        takes effect or is refused), e.g. ``self.refuse_unused(["samples"], "with mode: exact")``;
        the error names the first such field: ``samples: not used with mode: exact; remove it``."""
        for name in fields:
            if name in self.model_fields_set:
                alias = type(self).model_fields[name].alias or name
                raise PydanticCustomError(
                    "config_unused", "{msg}", {"msg": f"not used {reason}; remove it", "path": alias}
                )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        """true/false is not a number (pydantic's lax mode would read it as 1/0)."""
        if isinstance(data, dict):
            fields = _number_fields(cls)
            for key, v in data.items():
                if key not in fields:
                    continue
                kind = fields[key][1]
                want = "expected an integer" if kind.endswith("int") else "expected a number"
                if isinstance(v, bool) and not kind.startswith("list"):
                    raise PydanticCustomError("config_number", "{msg}", {"msg": f"{want}, got {v}", "path": str(key)})
                if kind.startswith("list") and isinstance(v, (list, tuple)):
                    for i, x in enumerate(v):
                        if isinstance(x, bool):
                            raise PydanticCustomError(
                                "config_number", "{msg}", {"msg": f"{want}, got {x}", "path": f"{key}.{i}"}
                            )
        return data

    @model_validator(mode="after")
    def _numbers_in_range(self):
        for name, finfo in type(self).model_fields.items():
            bad = find_bad_number(getattr(self, name))
            if bad is not None:
                path, msg = bad
                sub = ".".join([finfo.alias or name] + [str(x) for x in path])
                raise PydanticCustomError("config_number", "{msg}", {"msg": msg, "path": sub})
        return self


# ---------------------------------------------------------------- file helpers


def display_path(path: Path) -> str:
    """Short name for messages: ``systems/dgx_a100.yaml`` for built-ins, else the path."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(CONFIG_ROOT))
    except ValueError:
        return str(path)


def read_text_file(
    path: str | os.PathLike, file: str | None = None, kind: str = "data", limit_bytes: int | None = None
) -> str:
    """Read a UTF-8 text file (a leading BOM is dropped); every failure is one ConfigError.

    The shared reader for configs, request traces, DRAM traces and asm sources. ``file`` is the
    name used in messages (default :func:`display_path`); ``kind`` picks the size limit of
    attnsim.core.fileio.INPUT_LIMITS ("document" for YAML/JSON; ``limit_bytes`` can only lower it), checked before
    anything is read. Errors: ``file not found``, ``expected a regular file``, over the limit,
    ``cannot read (<reason>)``, and ``not UTF-8 text: invalid byte 0xff at byte offset 17``.
    """
    path = Path(path)
    name = file if file is not None else display_path(path)
    raw = read_bytes_file(path, file=name, kind=kind, limit_bytes=limit_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text: invalid byte 0x{raw[exc.start]:02x} at byte offset {exc.start}", file=name
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_bytes_file(
    path: str | os.PathLike, file: str | None = None, kind: str = "data", limit_bytes: int | None = None
) -> bytes:
    """The bytes of a regular file within its size limit (attnsim.core.fileio.read_regular); one ConfigError."""
    from attnsim.core.fileio import InputRefused, read_regular

    name = file if file is not None else display_path(Path(path))
    try:
        return read_regular(path, kind=kind, limit_bytes=limit_bytes)
    except InputRefused as exc:
        raise ConfigError(str(exc), file=exc.file or name, key=exc.key) from None


YAML_MAX_VALUES = 1_000_000
"""Most values (scalars + collections) one YAML document may hold once aliases are expanded."""
YAML_MAX_DEPTH = 64
"""Deepest nesting of collections in one YAML document."""


class _NoDuplicates:
    """A SafeLoader mix-in that refuses duplicate mapping keys (merge keys ``<<`` keep their meaning)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            keys = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
            firsts: dict = {}
            for key_node in keys:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in firsts:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1, firsts[key])
                firsts[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _Loader(_NoDuplicates, yaml.SafeLoader):
    """PyYAML's pure-Python safe loader with attnsim's rules: the reference, and every error message."""


_CSafeLoader = getattr(yaml, "CSafeLoader", None)  # PyYAML built with libyaml (the wheels are)
_FastLoader = type("_FastLoader", (_NoDuplicates, _CSafeLoader), {}) if _CSafeLoader is not None else None


class _DuplicateKey(Exception):
    def __init__(self, key, line, first):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


def _expanded_size(root, limit: int) -> int:
    """Number of values in the node graph once aliases are expanded (exact, memoised per node).
    Raises _RecursiveAlias for an anchor used inside itself (the graph has a cycle)."""

    def children(n):
        if isinstance(n, yaml.SequenceNode):
            return n.value
        if isinstance(n, yaml.MappingNode):
            return [x for kv in n.value for x in kv]
        return ()

    size: dict[int, int] = {}  # -1 while a node's children are being counted (it is on the current path)
    stack = [(root, False)]
    while stack:  # post-order without recursion
        n, counted = stack.pop()
        if counted:
            size[id(n)] = 1 + sum(size[id(c)] for c in children(n))
            continue
        if id(n) in size:
            if size[id(n)] < 0:
                raise _RecursiveAlias()
            continue
        size[id(n)] = -1
        stack.append((n, True))
        for c in children(n):
            if size.get(id(c)) == -1:
                raise _RecursiveAlias()
            if id(c) not in size:
                stack.append((c, False))
    return size[id(root)]


class _RecursiveAlias(Exception):
    pass


def _check_depth(text: str, file: str | None, loader=None) -> None:
    """Refuse nesting deeper than YAML_MAX_DEPTH (PyYAML's composer recurses per level)."""
    depth = 0
    for ev in yaml.parse(text, Loader=loader or yaml.SafeLoader):
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > YAML_MAX_DEPTH:
                raise ConfigError(
                    f"invalid YAML (nested deeper than {YAML_MAX_DEPTH} levels)",
                    file=file,
                    key=f"line {ev.start_mark.line + 1}",
                )
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def parse_yaml(text: str, file: str | None = None):
    """Parse one YAML document with attnsim's rules (any top-level value; None if empty).

    Rules (shared by every YAML attnsim reads, ``--set`` values included): safe tags only,
    duplicate keys refused (``<file>: line 7: duplicate key 'batch_size' (first at line 3)``),
    aliases may not expand the document beyond :data:`YAML_MAX_VALUES` values, and every
    syntax error is a one-line ConfigError naming the line; nesting is limited to
    :data:`YAML_MAX_DEPTH` levels.

    Parsed with libyaml (PyYAML's C parser, ~10x faster: config loading was ~10 % of a warm ``attnsim run``,
    issue 30) when PyYAML has it; a document libyaml refuses, or that breaks a rule above, is parsed again by
    the pure-Python loader, whose verdict and message stand (the same messages with or without libyaml).
    """
    if _FastLoader is not None and not yaml.reader.Reader.NON_PRINTABLE.search(text):  # libyaml's own check differs
        try:
            return _parse_yaml(text, file, _FastLoader)
        except Exception:  # noqa: BLE001 - the reference loader below decides, and words the error
            pass
    return _parse_yaml(text, file, _Loader)


def _parse_yaml(text: str, file: str | None, loader_class):
    loader = None
    try:
        _check_depth(text, file, loader_class)
        loader = loader_class(text)
        node = loader.get_single_node()
        if node is None:
            return None
        n = _expanded_size(node, YAML_MAX_VALUES)
        if n > YAML_MAX_VALUES:
            raise ConfigError(
                f"YAML aliases expand the document to {n:,} values; the limit is {YAML_MAX_VALUES:,}", file=file
            )
        return loader.construct_document(node)
    except _DuplicateKey as exc:
        raise ConfigError(
            f"duplicate key {exc.key!r} (first at line {exc.first})", file=file, key=f"line {exc.line}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is None and isinstance(exc, yaml.reader.ReaderError):
            line = text.count("\n", 0, exc.position) + 1
            raise ConfigError(
                f"invalid YAML (control character {exc.character:#04x} not allowed)", file=file, key=f"line {line}"
            ) from None
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise ConfigError(f"invalid YAML ({getattr(exc, 'problem', None) or exc})", file=file, key=where) from None
    except _RecursiveAlias:
        raise ConfigError("invalid YAML (an alias refers to its own anchor: a recursive value)", file=file) from None
    except RecursionError:
        raise ConfigError("invalid YAML (nested too deeply)", file=file) from None
    except ConfigError:
        raise
    except (ValueError, OverflowError) as exc:  # PyYAML: a "\U" escape beyond U+10FFFF, 2001-13-01, !!int 1x
        raise ConfigError(f"invalid YAML value ({exc})", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | os.PathLike) -> dict:
    """Read a YAML mapping from a file (:func:`read_text_file` + :func:`parse_yaml`)."""
    path = Path(path)
    name = display_path(path)
    data = parse_yaml(read_text_file(path, file=name, kind="document"), file=name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping at the top level, got {type(data).__name__}", file=name)
    return data


def search_dirs(kind: str) -> list[Path]:
    """Folders searched for a config of ``kind``: $ATTNSIM_CONFIG_PATH entries, then built-ins."""
    dirs = []
    for entry in os.environ.get("ATTNSIM_CONFIG_PATH", "").split(os.pathsep):
        if entry:
            dirs.append(Path(entry) / kind)
    dirs.append(CONFIG_ROOT / kind)
    return dirs


def available(kind: str) -> list[str]:
    """Names of the configs of ``kind`` that can be referred to by name."""
    names = set()
    for d in search_dirs(kind):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def _is_file(p: Path, test=Path.is_file) -> bool:
    try:
        return test(p)
    except (OSError, ValueError):  # e.g. a name too long for the file system
        return False


def find_config(kind: str, ref: str, relative_to: Path | None = None) -> Path:
    """Resolve a config reference: a path (``*.yaml``/``*.json``) or a built-in name."""
    ref = str(ref)
    if ref.endswith((".yaml", ".yml", ".json")) or os.sep in ref:
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None and not _is_file(p, Path.exists):
            p = relative_to / p
        if not _is_file(p):
            raise ConfigError(f"file not found: {ref}{_file_hint(p, kind)}")
        return p
    for d in search_dirs(kind):
        p = d / f"{ref}.yaml"
        if _is_file(p):
            return p
    from attnsim.core.suggest import did_you_mean

    names = ", ".join(available(kind)) or "none"
    raise ConfigError(f"unknown {kind} config '{ref}'{did_you_mean(ref, available(kind))} (available: {names})")


def _file_hint(p: Path, kind: str) -> str:
    """``" (did you mean X?)"``: the closest config file in the folder of a missing ``p``, else the closest
    built-in name of ``kind`` (e.g. ``exmple.yaml`` -> ``example``), else ``""``."""
    from attnsim.core.suggest import close_matches

    try:
        here = sorted(
            str(p.parent / f.name) if str(p.parent) not in ("", ".") else f.name
            for f in p.parent.iterdir()
            if f.suffix in (".yaml", ".yml", ".json") and f.is_file()
        )[:10_000]
    except OSError:
        here = []
    found = close_matches(str(p), here, n=1) or close_matches(p.stem, available(kind), n=1)
    return f" (did you mean {found[0]}?)" if found else ""


# ---------------------------------------------------------------- validation


def _describe_expected(err: dict) -> str:
    t = err.get("type", "")
    ctx = err.get("ctx") or {}
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = next(iter(ctx.values()), "?")
        word = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[t]
        if t == "greater_than" and bound == 0:
            return "expected a positive number"
        return f"expected a value {word} {bound}"
    if t in ("int_parsing", "int_type", "int_from_float"):
        return "expected an integer"
    if t == "int_parsing_size":
        return _int_expected(-INT_LIMIT, INT_LIMIT)
    if t in ("float_parsing", "float_type"):
        return "expected a number"
    if t == "finite_number":
        return "expected a finite number"
    if t in ("bool_parsing", "bool_type"):
        return "expected true or false"
    if t in ("string_type",):
        return "expected a string"
    if t in ("literal_error", "enum"):
        return f"expected one of {ctx.get('expected', '?')}"
    if t == "extra_forbidden":
        return "unknown key"
    if t == "missing":
        return "missing required key"
    if t in ("list_type", "tuple_type"):
        return "expected a list"
    if t in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a mapping"
    if t == "value_error":
        return str(ctx.get("error", err.get("msg", "invalid value")))
    return err.get("msg", "invalid value")


def _positive_int_hint(msg: str, value: Any, anns: list = ()) -> str:
    """'positive integer' for an int given to a field that takes integers (``anns``: the field's annotations,
    [] when unknown); a float field keeps 'positive number'."""
    if msg == "expected a positive number" and isinstance(value, int) and not isinstance(value, bool):
        if not anns or any(t is int for a in anns for t in _alternatives(a)):
            return "expected a positive integer"
    return msg


def _alternatives(ann) -> list:
    """An annotation without Optional / Union / Annotated: the list of types it can be."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _alternatives(typing.get_args(ann)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for a in typing.get_args(ann) for t in _alternatives(a)]
    return [ann]


def _child(ann, part) -> list:
    """The annotations one step of a pydantic error location leads to (a field, a dict value, a list item)."""
    out = []
    for t in _alternatives(ann):
        origin, args = typing.get_origin(t), typing.get_args(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            if part == t.__name__:  # a union member tag
                out.append(t)
                continue
            f = t.model_fields.get(str(part)) or next((f for f in t.model_fields.values() if f.alias == part), None)
            if f is not None:
                out.append(f.annotation)
        elif origin in (dict, Mapping) and len(args) == 2:
            out.append(args[1])
        elif origin in (list, tuple) and args:
            out.append(args[0])
    return out


def known_keys(schema, loc) -> list[str]:
    """The keys ``schema`` accepts in the mapping that holds the last element of ``loc`` (a pydantic
    error location, following fields, dict values and list items); [] when the path leaves the schema."""
    anns = [schema]
    for part in list(loc)[:-1]:
        anns = [c for a in anns for c in _child(a, part)]
    models = [t for a in anns for t in _alternatives(a) if isinstance(t, type) and issubclass(t, BaseModel)]
    return sorted({f.alias or n for m in models for n, f in m.model_fields.items()})


def validation_error_to_config_error(
    exc: ValidationError, file: str | None, prefix: str = "", schema=None
) -> ConfigError:
    """Turn the first pydantic error into a ConfigError with a dotted key path (an unknown key gets a
    'did you mean' from the keys ``schema`` accepts there)."""
    try:
        err = exc.errors(include_url=False)[0]
    except UnicodeEncodeError:  # pydantic-core cannot encode a lone surrogate (an undecodable byte of argv)
        try:
            err = exc.errors(include_url=False, include_input=False)[0]
        except UnicodeEncodeError:
            return ConfigError(
                "expected UTF-8 text, got a string with an undecodable character (a lone "
                "surrogate, e.g. a non-UTF-8 byte in a command-line argument)",
                file=file,
                key=prefix or None,
            )
    loc = [str(x) for x in err.get("loc", ()) if not str(x).startswith("function-")]
    if err.get("type") in ("config_number", "config_unused"):  # Schema's own checks: message complete, sub-path in ctx
        key = ".".join(([prefix] if prefix else []) + loc + [err["ctx"]["path"]])
        return ConfigError(err["ctx"]["msg"], file=file, key=key)
    key = ".".join(([prefix] if prefix else []) + loc) or None
    value = err.get("input")
    anns = [schema] if schema is not None else []
    for part in err.get("loc", ()) if schema is not None else ():
        anns = [c for a in anns for c in _child(a, part)]
    msg = _positive_int_hint(_describe_expected(err), value, anns)
    if err.get("type") not in ("missing", "extra_forbidden") and not isinstance(value, (dict, list)):
        msg = f"{msg}, got {value!r}"
    if err.get("type") == "extra_forbidden" and schema is not None and loc:
        from attnsim.core.suggest import did_you_mean

        msg += did_you_mean(loc[-1], known_keys(schema, err["loc"]))
    return ConfigError(msg, file=file, key=key)


_PLAIN_SCALARS = (str, int, bool, type(None))


def content_key(obj):
    """A hashable key equal only for equal plain data (dict / list / tuple of str, int, float, bool, None; types
    and order kept: 1, 1.0 and True differ, so do 0.0 and -0.0), or None when ``obj`` holds anything else."""
    t = type(obj)
    if t in _PLAIN_SCALARS:
        return (t, obj)
    if t is float:
        return (t, repr(obj))
    if t is dict or t is list or t is tuple:
        items = obj.items() if t is dict else enumerate(obj)
        out = [t]
        for k, v in items:
            kk, kv = content_key(k), content_key(v)
            if kk is None or kv is None:
                return None
            out.append((kk, kv))
        return tuple(out)
    return None


class ContentMemo:
    """Results of a pure function of plain data, by ``tag`` (hashable: e.g. a schema class) and the
    :func:`content_key` of its arguments (bounded, in-process). For validation: the verdict flips and sweeps
    validate the same config dicts again and again (the default run: 2,868 schema validations). Results must be
    immutable (frozen schemas); a call that raises is not kept."""

    def __init__(self, entries: int = 4096):
        self.entries, self._d = entries, {}

    def get(self, tag, key_args: tuple, compute):
        """``compute()``'s result, remembered under (tag, content of ``key_args``); computed each time when
        ``key_args`` is not plain data."""
        ck = content_key(key_args)
        if ck is None:
            return compute()
        key = (tag, ck)
        try:
            return self._d[key]
        except KeyError:
            pass
        value = compute()
        if len(self._d) >= self.entries:
            self._d.pop(next(iter(self._d)))  # the oldest entry
        self._d[key] = value
        return value


_VALIDATED = ContentMemo()


def validate(
    schema: type[BaseModel],
    data: Mapping,
    file: str | None = None,
    prefix: str = "",
    allow: Iterable[str] | None = None,
):
    """Validate ``data`` with ``schema``, numbers within their plausible ranges (:func:`check_plausible`); raise
    ConfigError naming file and key path. ``allow``: the dotted keys (``prefix`` included) of the file's
    ``allow_out_of_range:`` list; by default the list at the top of ``data`` (keys without a prefix).
    The same schema, data, file, prefix and allow give the same (immutable) model, remembered (:class:`ContentMemo`)."""
    key_args = (data, None if file is None else str(file), prefix, None if allow is None else tuple(allow))
    return _VALIDATED.get(schema, key_args, lambda: _validate(schema, data, file, prefix, allow))


def _validate(schema, data, file, prefix, allow):
    data = dict(data)
    own = []
    if ALLOW_KEY in data and ALLOW_KEY not in schema.model_fields:
        own = [_dotted([p for p in (prefix, k) if p]) for k in _allow_list(data.pop(ALLOW_KEY), file, prefix)]
    try:
        model = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_config_error(exc, file, prefix, schema) from None
    if own:
        known = plausible_keys(schema, prefix + "." if prefix else "")
        for k in own:
            if k not in known:
                near = ", ".join(list(known)[:6])
                raise ConfigError(
                    f"expected a number field of this file ({near}, ...), got {k!r}", file=file, key=ALLOW_KEY
                )
    check_plausible(model, file, prefix, list(allow or ()) + own)
    return model


# ---------------------------------------------------------------- overrides


def parse_set(item: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` (value as YAML by :func:`parse_yaml`: numbers, booleans, lists; text
    that is not YAML stays a string)."""
    if "=" not in item:
        raise ConfigError(f"expected KEY=VALUE, got {item!r}", file="--set")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"expected a dotted key like models.llama2-70b.num_layers, got {key!r}", file="--set")
    return key.split("."), parse_value(raw, file="--set", key=key)


def parse_value(raw: str, file: str = "--set", key: str | None = None) -> Any:
    """A command-line value as YAML (:func:`parse_yaml` rules); text that is not YAML stays a string,
    "" for an empty value. Duplicate keys and alias bombs are refused."""
    if not raw.strip():
        return ""
    try:
        return parse_yaml(raw, file=file)
    except ConfigError as exc:
        if not exc.message.startswith("invalid YAML"):
            raise ConfigError(exc.message, file=file, key=key) from None
        return raw


def set_items(sets: Iterable) -> list[tuple[list[str], Any]]:
    """``(path, value)`` of each override: a ``KEY=VALUE`` text (:func:`parse_set`) or an already split
    ``(path, value)`` pair, so that ``attnsim run --set`` and a sweep file's ``set:`` share one code path."""
    out = []
    for item in sets or ():
        if isinstance(item, str):
            out.append(parse_set(item))
        else:
            path, value = item
            out.append((list(path), value))
    return out


def is_experiment_set(item) -> bool:
    """An override of the experiment section (applied before the configs it names are loaded)."""
    path = parse_set(item)[0] if isinstance(item, str) else item[0]
    return path[0] == "experiment"


def set_dotted(tree: dict, path: list[str], value: Any, *, create: bool = False, prefix: Iterable[str] = ()) -> None:
    """Set ``tree[p0][p1]...=value``; lists are indexed by integer parts. Error keys are
    ``prefix + path`` (the whole ``--set`` key, e.g. ``systems.h100_x1.devices.gpu.count``)."""
    pre = [str(p) for p in prefix]

    def where(n: int) -> str:
        return ".".join(pre + [str(p) for p in path[:n]])

    node: Any = tree
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            try:
                node = node[int(part)]
                continue
            except (ValueError, IndexError):
                raise ConfigError(f"no list element {part!r}", file="--set", key=where(i + 1)) from None
        if not isinstance(node, dict):
            raise ConfigError(
                f"expected a mapping to hold key {part!r}, got {_short_repr(node)}", file="--set", key=where(i)
            )
        if part not in node:
            if not create:
                from attnsim.core.suggest import did_you_mean

                raise ConfigError(
                    f"unknown key{did_you_mean(part, node)} (known: {', '.join(map(str, node)) or 'none'})",
                    file="--set",
                    key=where(i + 1),
                )
            node[part] = {}
        node = node[part]
    last = path[-1]
    if isinstance(node, list):
        try:
            node[int(last)] = value
        except (ValueError, IndexError):
            raise ConfigError(f"no list element {last!r}", file="--set", key=where(len(path))) from None
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(
            f"expected a mapping to hold key {last!r}, got {_short_repr(node)}", file="--set", key=where(len(path) - 1)
        )


def get_dotted(tree: Mapping, path: Iterable[str]) -> Any:
    node: Any = tree
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


# ---------------------------------------------------------------- resolved tree

SECTIONS = ("experiment", "models", "systems", "hardware", "scenarios")


@dataclass
class ConfigTree:
    """The whole resolved configuration of an experiment, as plain data.

    ``files`` maps ``(section, name)`` to the file it came from, so that
    validation errors after ``--set`` still name the right file.
    """

    experiment: dict
    models: dict = field(default_factory=dict)
    systems: dict = field(default_factory=dict)
    hardware: dict = field(default_factory=dict)
    scenarios: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {s: copy.deepcopy(getattr(self, s)) for s in SECTIONS}

    def copy(self) -> "ConfigTree":
        return ConfigTree(**self.as_dict(), files=dict(self.files))

    def file_of(self, section: str, name: str | None = None) -> str:
        return self.files.get((section, name), f"{section}/{name}" if name else section)

    def apply_sets(self, sets: Iterable) -> "ConfigTree":
        """Apply ``--set`` overrides in place (structure only; validate afterwards): ``KEY=VALUE`` texts or
        ``(path, value)`` pairs (:func:`set_items`; a sweep file's ``set:`` mapping)."""
        for path, value in set_items(sets):
            section = path[0]
            if section not in SECTIONS:
                from attnsim.core.suggest import did_you_mean

                raise ConfigError(
                    f"unknown section {section!r}{did_you_mean(section, SECTIONS)} (expected one of "
                    f"{', '.join(SECTIONS)})",
                    file="--set",
                    key=".".join(path),
                )
            if section == "experiment":
                if len(path) < 2:
                    raise ConfigError("expected experiment.<key>=VALUE", file="--set", key=section)
                set_dotted(self.experiment, path[1:], value, create=True, prefix=path[:1])
                continue
            table = getattr(self, section)
            if len(path) < 3:
                raise ConfigError(f"expected {section}.<name>.<key>=VALUE", file="--set", key=".".join(path))
            if path[1] not in table:
                from attnsim.core.suggest import did_you_mean

                raise ConfigError(
                    f"{section} '{path[1]}' is not part of this experiment{did_you_mean(path[1], table)} "
                    f"(have: {', '.join(table) or 'none'})",
                    file="--set",
                    key=".".join(path[:2]),
                )
            set_dotted(table[path[1]], path[2:], value, create=True, prefix=path[:2])
        return self
