"""``attnsim schema KIND``: the JSON Schema (draft 2020-12) of a config kind, from its pydantic schema
class (``model_json_schema``), for editor completion and for checking a file outside attnsim.

Kinds: experiment, sweep, system, model, stack, reproduction (a folder's reference.yaml), the
experiment sections serving and reliability, hardware (any family: one of the ``hardware.<kind>``
schemas, chosen by the file's ``kind:``) and ``hardware.<kind>`` for one family. The JSON Schema checks
structure, types and ranges; attnsim's own checks (cross-references, physical limits) still apply.
"""

from __future__ import annotations

import importlib
import math

# kind -> (module, class) of its attnsim.core.config.Schema subclass
SCHEMAS = {
    "experiment": ("attnsim.sim.experiment", "ExperimentSpec"),
    "sweep": ("attnsim.studies.sweep.spec", "SweepSpec"),
    "system": ("attnsim.hwmodels.system", "SystemSpec"),
    "model": ("attnsim.workloads.model", "ModelSpec"),
    "serving": ("attnsim.studies.serve.spec", "ServingSpec"),
    "reliability": ("attnsim.hwmodels.reliability.spec", "ReliabilitySpec"),
    "stack": ("attnsim.hwmodels.stack", "StackSpec"),
    "reproduction": ("attnsim.studies.reproduce", "ReferenceSpec"),
}
DIALECT = "https://json-schema.org/draft/2020-12/schema"
# a file's allow_out_of_range: list (attnsim.core.config.ALLOW_KEY)
ALLOW_PROPERTY = {
    "type": "array",
    "items": {"type": "string"},
    "description": "dotted keys of this file whose values may leave their plausible ranges "
    "(docs/reference/ranges.md); noted in the run documents",
}
# a hardware or system file's choices: block (hwmodels/registry.py check_choices; attnsim.studies.verdict)
CHOICES_PROPERTY = {
    "type": "object",
    "description": "other plausible values of categorical fields (verdict flips re-run each): "
    "{field: {values, source}}",
}


def kinds() -> list[str]:
    """Every exportable kind: SCHEMAS, ``hardware`` and ``hardware.<kind>`` per hardware family."""
    from attnsim.hwmodels import registry

    return list(SCHEMAS) + ["hardware"] + [f"hardware.{k}" for k in registry.kinds()]


def _hardware_defs(names: list[str]) -> tuple[dict, dict]:
    """(per-family {kind: {"$ref": ...}}, shared $defs) of the hardware families ``names``; each family's
    ``kind`` is a required constant and it may hold a ``ranges:`` block (attnsim sensitivity)."""
    from pydantic.json_schema import models_json_schema

    from attnsim.core.config import ALLOW_KEY
    from attnsim.hwmodels import registry
    from attnsim.hwmodels.registry import CHOICES_KEY, EVIDENCE_KEY, EVIDENCE_TAGS, RANGES_KEY

    classes = [registry.schema_for(k) for k in names]
    refs, top = models_json_schema([(c, "validation") for c in classes], ref_template="#/$defs/{model}")
    defs = top.get("$defs", {})
    out = {}
    for k, c in zip(names, classes):
        ref = refs[(c, "validation")]["$ref"]
        d = defs[ref.rsplit("/", 1)[1]]
        d.setdefault("properties", {})["kind"] = {"const": k, "description": "hardware family"}
        d["required"] = sorted(set(d.get("required", [])) | {"kind"})
        d["properties"][RANGES_KEY] = {
            "type": "object",
            "description": "legal ranges of number fields (attnsim sensitivity): {field: {low, high, source}}",
        }
        d["properties"][EVIDENCE_KEY] = {
            "type": "object",
            "description": "evidence of values: {field: {tag, source}}, "
            f"tag one of {', '.join(EVIDENCE_TAGS)} (assumed needs a ranges entry)",
        }
        d["properties"][CHOICES_KEY] = CHOICES_PROPERTY
        d["properties"][ALLOW_KEY] = ALLOW_PROPERTY
        out[k] = {"$ref": ref}
    return out, defs


def _experiment_schema() -> dict:
    """ExperimentSpec with its free-form sections replaced by the schemas attnsim validates them with:
    scenarios (workloads.scenario.Scenario), serving (ServingSpec), reliability (ReliabilitySpec)."""
    from pydantic.json_schema import models_json_schema

    from attnsim.hwmodels.reliability.spec import ReliabilitySpec
    from attnsim.sim.experiment import ExperimentSpec
    from attnsim.studies.serve.spec import ServingSpec
    from attnsim.workloads.scenario import Scenario

    classes = (ExperimentSpec, Scenario, ServingSpec, ReliabilitySpec)
    refs, top = models_json_schema([(c, "validation") for c in classes], ref_template="#/$defs/{model}")
    defs = top["$defs"]
    ref = {c: refs[(c, "validation")] for c in classes}
    doc = dict(defs.pop(ref[ExperimentSpec]["$ref"].rsplit("/", 1)[1]), **{"$defs": defs})
    props = doc["properties"]
    props["scenarios"] = dict(props["scenarios"], additionalProperties=ref[Scenario])
    for name, c in (("serving", ServingSpec), ("reliability", ReliabilitySpec)):
        props[name] = {"anyOf": [ref[c], {"type": "null"}], "default": None}
    return doc


def schema_doc(kind: str) -> dict:
    """The JSON Schema document of one kind of :func:`kinds` (ConfigError for another name)."""
    from attnsim.core.config import ALLOW_KEY, ConfigError
    from attnsim.core.suggest import did_you_mean

    names = kinds()
    if kind not in names:
        raise ConfigError(f"expected one of {', '.join(names)}, got {kind!r}{did_you_mean(kind, names)}", file="schema")
    if kind == "experiment":  # its sections are validated by their own schemas: inline them
        doc = _experiment_schema()
    elif kind in SCHEMAS:
        mod, cls = SCHEMAS[kind]
        doc = getattr(importlib.import_module(mod), cls).model_json_schema()
    else:
        from attnsim.hwmodels import registry

        fams = registry.kinds() if kind == "hardware" else [kind.split(".", 1)[1]]
        refs, defs = _hardware_defs(fams)
        doc = {"$defs": defs, **(next(iter(refs.values())) if kind != "hardware" else {"oneOf": list(refs.values())})}
    if kind in ("experiment", "system", "model") and "properties" in doc:  # a file's top level (attnsim.core.config)
        doc["properties"][ALLOW_KEY] = ALLOW_PROPERTY
    if kind == "system":  # attnsim.sim.experiment system_choices
        doc["properties"]["choices"] = CHOICES_PROPERTY
    return {"$schema": DIALECT, **_finite(doc), "title": f"attnsim {kind} config"}


def _finite(node):
    """``node`` without entries holding a non-finite float (a default of inf: JSON has no infinity)."""
    if isinstance(node, dict):
        return {k: _finite(v) for k, v in node.items() if not (isinstance(v, float) and not math.isfinite(v))}
    if isinstance(node, list):
        return [_finite(v) for v in node if not (isinstance(v, float) and not math.isfinite(v))]
    return node


def register(sub) -> None:
    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of a config kind (editor completion)",
        description="Print (or write with -o) the JSON Schema of a config kind: experiment, sweep, "
        "system, model, hardware, hardware.<kind>, serving, reliability, stack, reproduction. "
        "--list: the kinds.",
    )
    p.add_argument("kind", nargs="?", default=None, help="config kind (see --list)")
    p.add_argument("--list", action="store_true", help="list the kinds")
    p.add_argument("-o", "--output", default=None, metavar="FILE.json", help="write the schema to FILE.json")
    p.set_defaults(func=schema_cmd)


def schema_cmd(args) -> int:
    from attnsim.core.config import ConfigError
    from attnsim.sim.results import dumps

    if args.list:
        if args.kind or args.output:
            raise ConfigError("expected --list alone, got a kind or -o as well", file="--list")
        print("\n".join(kinds()))
        return 0
    if not args.kind:
        raise ConfigError(f"expected a kind ({', '.join(kinds())}), got none", file="schema")
    out = None
    if args.output is not None:  # checked before any work (attnsim.core.outputs): an existing folder, writable
        from attnsim.core.outputs import check_output

        out = check_output(args.output, "-o")
    text = dumps(schema_doc(args.kind), indent=1) + "\n"
    if out is None:
        print(text, end="")
        return 0
    from attnsim.core.fileio import atomic_path

    with atomic_path(out) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"schema: {out}")
    return 0
