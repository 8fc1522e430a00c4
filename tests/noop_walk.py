"""Walk config schemas field by field, pick another legal value for each, and run a small experiment.

Used by tests/test_no_silent_noop.py. A *leaf* is one schema field at one place of a config tree
(``(section, name, key, ...)``, the ``--set`` path); ``alternative(leaf)`` is another value of its
type within its bounds; ``run_doc(base, sets)`` runs a base experiment with ``--set`` overrides and
returns its ``--json`` runs with the keys that only echo the configuration removed.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import numpy as np
import yaml
from pydantic import BaseModel

# keys of a run document that repeat the configuration instead of reporting a result: a change of
# the field they echo must show up elsewhere in the document to count
ECHO_KEYS = ("scenario", "disaggregation")
ECHO_METRICS = ("refresh_interval_ms",)
ECHO_SERVING = ("block_tokens",)


@dataclass(frozen=True)
class Leaf:
    schema: str  # class name (or "mapper.<policy>" for policy options)
    field: str
    path: tuple  # tree path: ("models", "llama2-7b", "num_layers"), ("experiment", "seed"), ...
    value: Any  # current (or default) value
    kind: Any  # bare annotation (Optional / Annotated stripped)
    optional: bool
    bounds: dict  # gt / ge / lt / le

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.field}"


def unwrap(ann) -> tuple[Any, bool, list]:
    """(bare type, Optional?, Annotated metadata) of an annotation."""
    meta, opt = [], False
    while True:
        o = get_origin(ann)
        if o is Annotated:
            args = get_args(ann)
            ann, meta = args[0], meta + list(args[1:])
            continue
        if o in (Union, types.UnionType):
            args = [a for a in get_args(ann) if a is not type(None)]
            opt = opt or len(args) < len(get_args(ann))
            if len(args) == 1:
                ann = args[0]
                continue
        return ann, opt, meta


def _model_class(t):
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _dict_model_class(t):
    if get_origin(t) is dict:
        return _model_class(unwrap(get_args(t)[1])[0])
    return None


def _union_models(t) -> list:
    if get_origin(t) in (Union, types.UnionType):
        return [m for m in (_model_class(unwrap(a)[0]) for a in get_args(t)) if m]
    return []


def _bounds(meta) -> dict:
    out = {}
    for m in meta:
        for k in ("gt", "ge", "lt", "le"):
            v = getattr(m, k, None)
            if v is not None:
                out[k] = v
        for sub in getattr(m, "metadata", ()) or ():
            out.update(_bounds([sub]))
    return out


def reachable(schema, seen: Optional[set] = None) -> set:
    """Every schema class reachable from ``schema`` through its fields (itself included)."""
    seen = set() if seen is None else seen
    if schema in seen:
        return seen
    seen.add(schema)

    def visit(ann):
        t = unwrap(ann)[0]
        m = _model_class(t)
        if m:
            reachable(m, seen)
        for a in get_args(t):
            visit(a)

    for f in schema.model_fields.values():
        visit(f.annotation)
    return seen


def walk(schema, data: dict, path: tuple, options: Optional[dict] = None):
    """Leaves of ``schema`` at ``path`` of a tree whose value there is ``data`` (a raw dict).

    Nested models, lists and mappings of models and the model branch of a union are walked into (their own
    fields are the leaves). ``options`` maps (class name, field) of a free-form ``dict`` field to a
    hook ``(value, parent data) ->`` a schema class to walk it with, or ``[(schema name, {option:
    default})]`` whose options become leaves, or None (nothing to walk).
    """
    options = options or {}
    for name, f in schema.model_fields.items():
        t, opt, meta = unwrap(f.annotation)
        bounds = _bounds(meta + list(f.metadata))
        key = name if f.alias is None else f.alias
        cur = data[key] if key in data else f.get_default(call_default_factory=True)
        if isinstance(cur, BaseModel):
            cur = cur.model_dump()
        sub = _model_class(t) or next((m for m in _union_models(t) if isinstance(cur, dict)), None)
        if sub is not None and isinstance(cur, dict):
            yield ("container", schema.__name__, name)
            yield from walk(sub, cur, path + (key,), options)
            continue
        dsub = _dict_model_class(t)
        if dsub is not None and isinstance(cur, dict):
            yield ("container", schema.__name__, name)
            for k, v in cur.items():
                yield from walk(dsub, v, path + (key, k), options)
            continue
        lsub = _model_class(unwrap(get_args(t)[0])[0]) if get_origin(t) is list and get_args(t) else None
        if lsub is not None and isinstance(cur, list) and cur:
            yield ("container", schema.__name__, name)
            for i, v in enumerate(cur):
                yield from walk(lsub, v, path + (key, i), options)
            continue
        hook = options.get((schema.__name__, name))
        if hook is not None:
            yield ("container", schema.__name__, name)
            res = hook(cur, data)
            if isinstance(res, type):
                yield from walk(res, cur or {}, path + (key,), options)
            for sname, opts in res if isinstance(res, list) else ():
                for oname, default in opts.items():
                    v = (cur or {}).get(oname, default)
                    yield Leaf(sname, oname, path + (key, oname), v, type(v), False, {})
            continue
        yield Leaf(schema.__name__, name, path + (key,), cur, t, opt, bounds)


def _ok(v, b: dict) -> bool:
    return (
        ("gt" not in b or v > b["gt"])
        and ("ge" not in b or v >= b["ge"])
        and ("lt" not in b or v < b["lt"])
        and ("le" not in b or v <= b["le"])
    )


class NoAlternative(Exception):
    pass


@dataclass(frozen=True)
class Alt:
    """An explicit change: ``value``; ``extra``: ``--set`` overrides for both runs (to make the field
    reachable); ``also``: coupled fields changed with it (path relative to the leaf's parent -> value),
    where a validator ties fields together (e.g. tck_ns and data_rate_mtps)."""

    value: Any
    extra: tuple = ()
    also: tuple = ()


def alternative(leaf: Leaf):
    """Another legal value of the leaf's type: bools flipped, another Literal choice, numbers
    scaled by 1.5 (integers: at least +1) within their bounds, None -> 1; else NoAlternative."""
    v, t, b = leaf.value, leaf.kind, leaf.bounds
    if get_origin(t) is Literal:
        others = [c for c in get_args(t) if c != v]
        if others:
            return others[0]
        raise NoAlternative("a Literal with one choice")
    if isinstance(v, bool) or t is bool:
        return not v
    number = t in (int, float) or isinstance(v, (int, float))
    if v is None and number:
        return 1 if t is int else 1.0
    if isinstance(v, int) or t is int:
        for c in (max(v + 1, round(v * 1.5)), v - 1, 2 * v):
            if _ok(c, b):
                return c
    if isinstance(v, float) or t is float:
        cands = (2.0,) if math.isinf(v) else ((1.0, 0.5) if v == 0 else (v * 1.5, v / 1.5))
        for c in cands:
            if _ok(c, b):
                return c
    raise NoAlternative(f"no automatic alternative for a {getattr(t, '__name__', t)} (value {v!r})")


def set_arg(path: tuple, value) -> str:
    """``--set`` text for ``path = value`` (value written as flow-style YAML)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return ".".join(str(p) for p in path) + "=" + text


# ---------------------------------------------------------------- running one base


def _clean(docs: list[dict]) -> list[dict]:
    from attnsim.sim.results import dumps

    out = []
    for d in json.loads(dumps([{k: v for k, v in d.items() if not k.startswith("_")} for d in docs])):
        for k in ECHO_KEYS:
            d.pop(k, None)
        for k in ECHO_METRICS:
            d.get("metrics", {}).pop(k, None)
        for k in ECHO_SERVING:
            d.get("serving", {}).pop(k, None)
        out.append(d)
    return out


@contextlib.contextmanager
def cached_yaml():
    """Within: ``load_yaml`` of an unchanged file returns a copy of its first parse (the walk
    reloads the same few configs hundreds of times; YAML parsing would dominate)."""
    import attnsim.core.config as cfg
    import attnsim.hwmodels.dram.spec as ds
    import attnsim.sim.experiment as ex
    import attnsim.studies.serve.run as sr

    original = cfg.load_yaml
    memo: dict = {}

    def load_yaml(path):
        p = Path(path)
        key = (str(p.resolve()), p.stat().st_mtime_ns) if p.is_file() else None
        if key is None:
            return original(path)
        if key not in memo:
            memo[key] = original(path)
        return copy.deepcopy(memo[key])

    mods = [m for m in (cfg, ex, ds, sr) if getattr(m, "load_yaml", None) is original]
    for m in mods:
        m.load_yaml = load_yaml
    try:
        yield
    finally:
        for m in mods:
            m.load_yaml = original


def _is_experiment_set(item: str) -> bool:
    return item.split("=", 1)[0].split(".")[0] == "experiment"


@functools.lru_cache(maxsize=256)
def _tree(experiment: str, exp_sets: tuple):
    from attnsim.sim.experiment import load_tree

    return load_tree(experiment, list(exp_sets))


def load(kind: str, experiment: str, sets: list[str]):
    """Load (and validate) a base: ``run`` / ``serve`` experiments; ``dram`` = an experiment whose
    first DRAM spec is run on a request stream. Same as ``load_experiment`` (the tree read for the
    ``experiment.*`` overrides is cached: YAML parsing dominates a small run)."""
    if kind == "serve":
        from attnsim.studies.serve.run import load_serving_experiment

        return load_serving_experiment(experiment, sets)
    from attnsim.sim.experiment import validate_tree

    tree, src = _tree(experiment, tuple(s for s in sets if _is_experiment_set(s)))
    tree = tree.copy()
    tree.apply_sets([s for s in sets if not _is_experiment_set(s)])
    return validate_tree(tree, src), None


DRAM_REQUESTS = 3000


def run_doc(kind: str, experiment: str, sets: list[str], dram: Optional[str] = None):
    """The result documents of a base with ``sets`` applied (echo keys removed)."""
    exp, serving = load(kind, experiment, sets)
    if kind == "serve":
        from attnsim.studies.serve.run import serve_experiment

        return _clean(serve_experiment(exp, serving))
    if kind == "dram":
        from attnsim.hwmodels.dram.controller import simulate_requests
        from attnsim.hwmodels.dram.spec import spec_from_dict

        spec = spec_from_dict(exp.tree.hardware[dram], file=exp.tree.file_of("hardware", dram))
        rng = np.random.default_rng(0)
        n = DRAM_REQUESTS
        # half sequential (row hits), half random (conflicts), 30 % writes, spread over time
        addr = np.concatenate(
            [
                np.arange(n // 2, dtype=np.int64) * spec.org.burst_bytes,
                rng.integers(0, spec.capacity_bytes // spec.org.burst_bytes, n - n // 2) * spec.org.burst_bytes,
            ]
        )
        w = rng.random(n) < 0.3
        arr = np.sort(rng.integers(0, 4 * spec.timing.nREFI, n)).astype(np.int64)
        r = simulate_requests(spec, addr, w, arr, refresh=spec.default_refresh)
        out = {
            "cycles": int(r.cycles),
            "time_s": r.time_s,
            "bandwidth_gbps": r.bandwidth_gbps,
            "peak_bandwidth_gbps": r.peak_bandwidth_gbps,
            "row_hits": r.row_hits,
            "row_misses": r.row_misses,
            "row_conflicts": r.row_conflicts,
            "refresh_time_s": r.refresh_time_s,
            "energy_j": {k: float(v) for k, v in r.energy_j.items()},
            "mean_latency_cycles": r.mean_latency_cycles,
            "capacity_bytes": spec.capacity_bytes,
        }
        if spec.pim is not None:  # PIM commands no request stream uses (single-bank MACs, mode switches)
            from attnsim.hwmodels.dram.engine import Op, cmds_from, run_commands

            c = cmds_from(
                op=[Op.ACTAB, Op.MACAB, Op.PREA, Op.MODE, Op.BARRIER, Op.ACT, Op.MACSB, Op.MACSB, Op.PRE],
                pch=0,
                rank=0,
                bg=[-1, -1, -1, -1, -1, 0, 0, 0, 0],
                bank=[-1, -1, -1, -1, -1, 0, 0, 0, 0],
                row=1,
                repeat=[1, 8, 1, 1, 1, 1, 8, 8, 1],
            )
            pr = run_commands(spec, c, refresh="none")
            out["pim_commands"] = {"cycles": int(pr.cycles), "energy_j": {k: float(v) for k, v in pr.energy_j.items()}}
            if spec.default_refresh != "none":  # all-bank PIM rows long enough to meet refreshes (scope_refresh)
                rows = cmds_from(op=[Op.MACAB] * 20, row=np.arange(20) % 5 + 1, repeat=32, flags=1)  # F_AP
                out["pim_rows_refreshed_cycles"] = int(run_commands(spec, rows, refresh=spec.default_refresh).cycles)
        return json.loads(json.dumps(out, default=float))
    from attnsim.sim.runner import run_experiment

    return _clean(run_experiment(exp))


def module_options(policy: str) -> dict:
    """``mapper.options`` defaults of a policy (its module's ``OPTIONS``)."""
    from attnsim.mapper.base import get_policy

    fn = get_policy(policy)
    return dict(getattr(sys.modules[fn.__module__], "OPTIONS", {}))
