"""``attnsim merge SHARDS... -o FILE.h5``: combine shard stores of one sweep into one store.

Shards must share ``sweep_id`` (same sweep definition and base config); anything else is refused.
Points are streamed shard by shard (never all in memory), keys seen twice are kept once, and the
output is written atomically like every store fold. Unfolded journals of killed shards are included.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnsim.core.config import ConfigError
from attnsim.studies.sweep.store import (
    _attrs,
    _ds_kind,
    _h5name,
    _reading,
    check_layout,
    fold_into,
    iter_records,
    parameters_attr,
)


def shard_attrs(path: Path) -> dict:
    """Attributes of a shard store after checking its layout (ConfigError naming what is wrong)."""
    if not path.exists():
        raise ConfigError("file not found", file=path)
    with _reading(path) as f:
        check_layout(f, path)
        return _attrs(f)


def merge_stores(shards: list[str | Path], out: str | Path, allow_version_mismatch: bool = False) -> int:
    """Merge shard stores into ``out``; returns the number of points written.

    Shards written by different attnsim versions are refused unless ``allow_version_mismatch`` (the
    merged store then keeps the first shard's version and lists the others in ``other_versions``)."""
    paths = [Path(p) for p in shards]
    if not paths:
        raise ConfigError("no shard files given", file="merge")
    attrs = [shard_attrs(p) for p in paths]
    ids = {a["sweep_id"] for a in attrs}
    if len(ids) != 1:
        detail = ", ".join(f"{p.name}: {a.get('sweep_name')} ({a['sweep_id']})" for p, a in zip(paths, attrs))
        raise ConfigError(f"refusing to merge different sweeps ({detail})", file="merge")
    versions = {p.name: a.get("attnsim_version") for p, a in zip(paths, attrs)}
    if len(set(versions.values())) > 1 and not allow_version_mismatch:
        detail = ", ".join(f"{k}: {v}" for k, v in versions.items())
        raise ConfigError(
            f"expected shards of one attnsim version, got {detail}; pass --allow-version-mismatch to merge them anyway",
            file="merge",
        )
    out = Path(out)
    if out.exists():
        raise ConfigError("output exists; remove it or choose another -o", file=out)
    a0 = attrs[0]
    meta = {k: a0[k] for k in a0 if k not in ("created_utc", "updated_utc", "cache_hits", "cache_misses")}
    meta["shard"] = "merged"
    meta["merged_from"] = json.dumps([f"{p.name} (shard {a.get('shard')})" for p, a in zip(paths, attrs)])
    meta["cache_hits"] = sum(int(a.get("cache_hits", 0)) for a in attrs)
    meta["cache_misses"] = sum(int(a.get("cache_misses", 0)) for a in attrs)
    others = {
        f"{a.get('attnsim_version')} ({a.get('git_revision', 'unknown')})"
        for a in attrs
        if a.get("attnsim_version") != a0.get("attnsim_version")
    }
    for a in attrs:
        others |= set(json.loads(a.get("other_versions", "[]") or "[]"))
    if others:
        meta["other_versions"] = json.dumps(sorted(others))
    kinds = _param_kinds(paths[0], parameters_attr(a0, paths[0]))

    def all_records():
        for p in paths:
            yield from iter_records(p)

    return fold_into(out, all_records(), meta, kinds, skip_keys=set())


def _param_kinds(path: Path, params: list[str]) -> dict:
    with _reading(path) as f:
        pts = f["points"]
        return {_h5name(p): _ds_kind(pts[_h5name(p)]) for p in params if _h5name(p) in pts}
