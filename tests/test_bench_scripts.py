"""Every benchmark script under bench/ loads: its module-level code (data tables it reads, imports) runs.

A moved data file once made bench/bench_gpu.py crash at import; this catches that class without timing
anything (benchmarks measure, tests assert)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

BENCH = sorted((Path(__file__).resolve().parent.parent / "bench").glob("*.py"))


def test_bench_folder_has_scripts():
    assert len(BENCH) >= 6


@pytest.mark.parametrize("path", BENCH, ids=[p.stem for p in BENCH])
def test_bench_script_loads(path):
    ns = runpy.run_path(str(path), run_name="bench_loaded_by_test")
    assert callable(ns.get("main")), f"{path.name} has no main()"
