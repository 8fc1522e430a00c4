"""Model zoo: resolve a model reference (zoo name, model YAML, HF config.json) to a ModelSpec.

Built-in models live in ``configs/models/<name>.yaml`` (dims and sources in each file);
``$ATTNSIM_CONFIG_PATH/models/`` is searched first (see ``attnsim.core.config.search_dirs``).
"""

from __future__ import annotations

import os

from attnsim.core.config import available, display_path, find_config, load_yaml, validate
from attnsim.workloads.model import ModelSpec


def list_models() -> list[str]:
    """Names of the models that ``load_model`` accepts by name."""
    return available("models")


def load_model(ref: str | os.PathLike) -> ModelSpec:
    """Load a model by zoo name, path to a model YAML, or path to a HF ``config.json``.

    Any problem raises ``attnsim.core.config.ConfigError`` naming the file and key.
    """
    ref = str(ref)
    if ref.endswith(".json"):
        from attnsim.workloads.hf import model_from_hf_config

        return model_from_hf_config(find_config("models", ref))
    path = find_config("models", ref)
    return validate(ModelSpec, load_yaml(path), file=display_path(path))
