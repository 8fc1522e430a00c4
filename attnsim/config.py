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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

try:  # installed package
    from attnsim.configs import CONFIG_ROOT
except ImportError:  # pragma: no cover - running from an odd layout
    CONFIG_ROOT = Path(__file__).resolve().parent.parent / "configs"

CONFIG_KINDS = ("hardware", "models", "systems", "experiments", "sweeps")


class ConfigError(ValueError):
    """A config, CLI argument or input file is invalid.

    ``str(err)`` is ``"<file>: <key.path>: <message>"`` (parts omitted when unknown).
    """

    def __init__(self, message: str, file: str | os.PathLike | None = None, key: str | None = None):
        self.file = str(file) if file is not None else None
        self.key = key
        self.message = message
        parts = [p for p in (self.file, key) if p]
        super().__init__(": ".join(parts + [message]))


class Schema(BaseModel):
    """Base of every config schema: unknown keys rejected, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------- file helpers

def display_path(path: Path) -> str:
    """Short name for messages: ``systems/dgx_a100.yaml`` for built-ins, else the path."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(CONFIG_ROOT))
    except ValueError:
        return str(path)


def load_yaml(path: str | os.PathLike) -> dict:
    """Read a YAML mapping; syntax errors and non-mappings become ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise ConfigError(f"invalid YAML ({getattr(exc, 'problem', exc)})", file=display_path(path), key=where) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping at the top level, got {type(data).__name__}", file=display_path(path))
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


def find_config(kind: str, ref: str, relative_to: Path | None = None) -> Path:
    """Resolve a config reference: a path (``*.yaml``/``*.json``) or a built-in name."""
    ref = str(ref)
    if ref.endswith((".yaml", ".yml", ".json")) or os.sep in ref:
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None and not p.exists():
            p = relative_to / p
        if not p.is_file():
            raise ConfigError(f"file not found: {ref}")
        return p
    for d in search_dirs(kind):
        p = d / f"{ref}.yaml"
        if p.is_file():
            return p
    names = ", ".join(available(kind)) or "none"
    raise ConfigError(f"unknown {kind} config '{ref}' (available: {names})")


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
    if t in ("float_parsing", "float_type"):
        return "expected a number"
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


def _positive_int_hint(msg: str, value: Any) -> str:
    if msg == "expected a positive number" and isinstance(value, int) and not isinstance(value, bool):
        return "expected a positive integer"
    return msg


def validation_error_to_config_error(exc: ValidationError, file: str | None, prefix: str = "") -> ConfigError:
    """Turn the first pydantic error into a ConfigError with a dotted key path."""
    err = exc.errors(include_url=False)[0]
    loc = [str(x) for x in err.get("loc", ()) if not str(x).startswith("function-")]
    key = ".".join(([prefix] if prefix else []) + loc) or None
    value = err.get("input")
    msg = _positive_int_hint(_describe_expected(err), value)
    if err.get("type") not in ("missing", "extra_forbidden") and not isinstance(value, (dict, list)):
        msg = f"{msg}, got {value!r}"
    return ConfigError(msg, file=file, key=key)


def validate(schema: type[BaseModel], data: Mapping, file: str | None = None, prefix: str = ""):
    """Validate ``data`` with ``schema``; raise ConfigError naming file and key path."""
    try:
        return schema.model_validate(dict(data))
    except ValidationError as exc:
        raise validation_error_to_config_error(exc, file, prefix) from None


# ---------------------------------------------------------------- overrides

def parse_set(item: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` (value as YAML: numbers, booleans, lists)."""
    if "=" not in item:
        raise ConfigError(f"expected KEY=VALUE, got {item!r}", file="--set")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"expected a dotted key like models.llama2-70b.num_layers, got {key!r}", file="--set")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def set_dotted(tree: dict, path: list[str], value: Any, *, create: bool = False) -> None:
    """Set ``tree[p0][p1]...=value``; lists are indexed by integer parts."""
    node: Any = tree
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            try:
                node = node[int(part)]
                continue
            except (ValueError, IndexError):
                raise ConfigError(f"no list element {part!r}", file="--set", key=".".join(path[: i + 1])) from None
        if not isinstance(node, dict):
            raise ConfigError("cannot descend into a non-mapping value", file="--set", key=".".join(path[:i + 1]))
        if part not in node:
            if not create:
                raise ConfigError(f"unknown key (known: {', '.join(map(str, node)) or 'none'})", file="--set", key=".".join(path[: i + 1]))
            node[part] = {}
        node = node[part]
    last = path[-1]
    if isinstance(node, list):
        try:
            node[int(last)] = value
        except (ValueError, IndexError):
            raise ConfigError(f"no list element {last!r}", file="--set", key=".".join(path)) from None
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError("cannot set a key inside a non-mapping value", file="--set", key=".".join(path))


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

    def apply_sets(self, sets: Iterable[str]) -> "ConfigTree":
        """Apply ``--set`` overrides in place (structure only; validate afterwards)."""
        for item in sets or ():
            path, value = parse_set(item)
            section = path[0]
            if section not in SECTIONS:
                raise ConfigError(f"unknown section {section!r} (expected one of {', '.join(SECTIONS)})", file="--set", key=".".join(path))
            if section == "experiment":
                if len(path) < 2:
                    raise ConfigError("expected experiment.<key>=VALUE", file="--set", key=section)
                set_dotted(self.experiment, path[1:], value, create=True)
                continue
            table = getattr(self, section)
            if len(path) < 3:
                raise ConfigError(f"expected {section}.<name>.<key>=VALUE", file="--set", key=".".join(path))
            if path[1] not in table:
                raise ConfigError(f"{section} '{path[1]}' is not part of this experiment (have: {', '.join(table) or 'none'})",
                                  file="--set", key=".".join(path[:2]))
            set_dotted(table[path[1]], path[2:], value, create=True)
        return self
