"""Shared helpers of the sweep tests: a tiny real experiment + sweep files in a temp folder."""

from pathlib import Path

import yaml

TINY_EXPERIMENT = {
    "name": "tiny",
    "systems": ["h100_x1"],
    "models": ["llama2-7b"],
    "scenarios": {"chat": {"batch_size": 2, "prompt_len": 256, "output_len": 8}},
    "generation": {"mode": "sampled", "samples": 2},
}


def write_sweep(folder: Path, parameters, name="t", base=None, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exp = folder / "tiny.yaml"
    exp.write_text(yaml.safe_dump(base or TINY_EXPERIMENT))
    data = {"name": name, "base": "tiny.yaml", "parameters": parameters, **extra}
    p = folder / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def cached_point(tree_dict, files):
    """A point function that runs the real simulation and caches one sub-result by model name."""
    from attnsim.core.cache import cached
    from attnsim.studies.sweep.executors import simulate_point

    model = next(iter(tree_dict["models"]))
    layers = cached(("test.layers", 1, model), lambda: tree_dict["models"][model]["num_layers"])
    doc = simulate_point(tree_dict, files)
    doc["metrics"]["cached_layers"] = layers
    return doc


def read_store_rows(path):
    """{key: finished_unix_s} of every point visible in a store (HDF5 + journal)."""
    from attnsim.studies.sweep.store import open_store

    st = open_store(path)
    c = st.columns()
    return dict(zip(c["key"].tolist(), c["finished_unix_s"].tolist())) if len(st) else {}


def infinite_point(tree_dict, files):
    """A point function whose result overflows: the sweep must record it as an error, not ok."""
    from attnsim.studies.sweep.executors import simulate_point

    doc = simulate_point(tree_dict, files)
    doc["metrics"]["tpot_s"] = float("inf")
    return doc
