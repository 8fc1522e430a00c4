"""``attnsim merge SHARDS... -o FILE.h5``: combine shard stores of one sweep into one store.

Shards must share ``sweep_id`` (same sweep definition and base config); anything else is refused.
Points are streamed shard by shard (never all in memory), keys seen twice are kept once, and the
output is written atomically like every store fold. Unfolded journals of killed shards are included.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import h5py

from attnsim.config import ConfigError
from attnsim.sweep.store import FORMAT, fold_into, read_journal


def _records_of(path: Path) -> Iterator[dict]:
    """Records of a store (HDF5 rows, then journal), reconstructed for re-folding."""
    if path.exists():
        with h5py.File(path, "r") as f:
            pts = f["points"]
            n = pts["key"].shape[0]
            params = json.loads(f.attrs.get("parameters", "[]"))
            cols = {k: pts[k] for k in ("index", "key", "elapsed_s", "finished_unix_s", "worker") + tuple(
                p for p in params if p in pts)}
            step = 512
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                block = {k: ds[lo:hi] for k, ds in cols.items()}
                docs = f["docs"][lo:hi]
                res = f["resolved"][lo:hi]
                for j in range(hi - lo):
                    dec = lambda x: x.decode() if isinstance(x, bytes) else x  # noqa: E731
                    yield {"index": int(block["index"][j]), "key": dec(block["key"][j]),
                           "params": {p: _py(dec(block[p][j])) for p in params if p in block},
                           "doc": json.loads(dec(docs[j])), "resolved": dec(res[j]),
                           "elapsed_s": float(block["elapsed_s"][j]), "finished_unix_s": float(block["finished_unix_s"][j]),
                           "worker": dec(block["worker"][j]), "cache": {}}
    for _, rec in read_journal(path):
        yield rec


def _py(v):
    return v.item() if hasattr(v, "item") else v


def shard_attrs(path: Path) -> dict:
    if not path.exists():
        raise ConfigError("file not found", file=path)
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    except OSError as exc:
        raise ConfigError(f"cannot read HDF5 ({exc})", file=path) from None
    if attrs.get("format") != FORMAT:
        raise ConfigError("not a sweep store", file=path)
    return attrs


def merge_stores(shards: list[str | Path], out: str | Path) -> int:
    """Merge shard stores into ``out``; returns the number of points written."""
    paths = [Path(p) for p in shards]
    if not paths:
        raise ConfigError("no shard files given", file="merge")
    attrs = [shard_attrs(p) for p in paths]
    ids = {a["sweep_id"] for a in attrs}
    if len(ids) != 1:
        detail = ", ".join(f"{p.name}: {a.get('sweep_name')} ({a['sweep_id']})" for p, a in zip(paths, attrs))
        raise ConfigError(f"refusing to merge different sweeps ({detail})", file="merge")
    out = Path(out)
    if out.exists():
        raise ConfigError("output exists; remove it or choose another -o", file=out)
    a0 = attrs[0]
    meta = {k: a0[k] for k in a0 if k not in ("created_utc", "updated_utc", "cache_hits", "cache_misses")}
    meta["shard"] = "merged"
    meta["merged_from"] = json.dumps([f"{p.name} (shard {a.get('shard')})" for p, a in zip(paths, attrs)])
    meta["cache_hits"] = sum(int(a.get("cache_hits", 0)) for a in attrs)
    meta["cache_misses"] = sum(int(a.get("cache_misses", 0)) for a in attrs)
    kinds = _param_kinds(paths[0], json.loads(a0.get("parameters", "[]")))

    def all_records():
        for p in paths:
            yield from _records_of(p)
    return fold_into(out, all_records(), meta, kinds, skip_keys=set())


def _param_kinds(path: Path, params: list[str]) -> dict:
    with h5py.File(path, "r") as f:
        pts = f["points"]
        return {p: ("str" if pts[p].dtype.kind == "O" else pts[p].dtype.str[1:]) for p in params if p in pts}
