"""The simulated numbers in README.md and the docs site are what the code produces today (bench/readme_numbers.py
generates them, wherever a block sits: README.md or any docs/**/*.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "readme_numbers.py"
_spec = importlib.util.spec_from_file_location("readme_numbers", _PATH)
readme_numbers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_numbers)

BLOCKS = readme_numbers.all_blocks()


def test_every_generated_block_is_somewhere():
    assert {name for _, name, _ in BLOCKS} == set(readme_numbers.GENERATORS)


def test_docs_pages_are_scanned():
    # the serving tables moved from README.md to the site (docs/guide/serving.md): the scan must reach them there
    files = {f.relative_to(readme_numbers.ROOT).as_posix() for f, name, _ in BLOCKS if name == "serve-examples"}
    assert "docs/guide/serving.md" in files


@pytest.mark.parametrize("name", sorted(readme_numbers.GENERATORS))
def test_readme_block_is_current(name):
    want = readme_numbers.GENERATORS[name]()
    for f, n, body in BLOCKS:
        if n == name:
            assert body == want, f"{f}: block {name} is stale: run python bench/readme_numbers.py {name}"
