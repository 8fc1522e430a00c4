"""Built-in YAML configs shipped with attnsim (hardware/, models/, systems/, experiments/, sweeps/)."""

from pathlib import Path

CONFIG_ROOT = Path(__file__).resolve().parent
