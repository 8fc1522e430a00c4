"""README.md's simulated numbers are what the code produces today (bench/readme_numbers.py generates them)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "readme_numbers.py"
_spec = importlib.util.spec_from_file_location("readme_numbers", _PATH)
readme_numbers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_numbers)

BLOCKS = readme_numbers.blocks(readme_numbers.README.read_text())


def test_readme_has_every_generated_block():
    assert set(BLOCKS) == set(readme_numbers.GENERATORS)


@pytest.mark.parametrize("name", sorted(readme_numbers.GENERATORS))
def test_readme_block_is_current(name):
    assert BLOCKS[name] == readme_numbers.GENERATORS[name](), (
        f"README.md block {name} is stale: run python bench/readme_numbers.py {name}")
