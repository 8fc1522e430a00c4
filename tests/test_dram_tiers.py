"""The command engine's two tiers (hwmodels/dram/engine.py kernel_tier): the same kernels run interpreted (plain
Python) and compiled (Numba) give identical state arrays, on random streams of every op over the PIM and plain
specs, all refresh modes and both idle-gap treatments, and on the default experiment's own command streams."""

import io
from contextlib import redirect_stdout

import numpy as np
import pytest
from dram_streams import random_stream

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import engine, load_dram_spec
from attnsim.hwmodels.dram import kernel as K


def _short_refresh(spec):
    t = spec.timing.model_copy(update=dict(nREFI=400, nRFC=100, nREFIpb=100, nRFCpb=40))
    return spec.model_copy(update=dict(timing=t))


SPECS = {n: _short_refresh(load_dram_spec(n)) for n in ("hbm3_5200_pim", "lpddr5_6400", "ddr5_4800", "gddr6_aim")}


def _walk(monkeypatch, tier, spec, cmds, T):
    monkeypatch.setenv(engine.TIER_ENV, tier)
    engine._WALK_MEMO.clear()  # the memo would answer the second tier with the first one's arrays
    return engine.walk(spec, cmds, T)


def _both(monkeypatch, spec, cmds, T):
    a = _walk(monkeypatch, "interpreted", spec, cmds, T)
    b = _walk(monkeypatch, "compiled", spec, cmds, T)
    for name, x, y in zip(("BS", "GS", "RS", "US", "CS", "ST"), a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("name", sorted(SPECS))
def test_interpreted_equals_compiled_on_random_streams(monkeypatch, name):
    spec = SPECS[name]
    for seed in range(24):
        rng = np.random.default_rng(20_000 + seed)
        c = random_stream(rng, spec, 24, pim=spec.pim is not None, channels=2, max_gap=2_000)
        mode = ("ab", "pb", "none")[seed % 3]
        _both(monkeypatch, spec, c, engine.timing_vector(spec, mode, idle_skip=bool(seed % 2)))


def test_interpreted_equals_compiled_on_the_default_experiments_streams(monkeypatch):
    """Every distinct stream the default experiment's PIM and PNM systems walk (one layer, a short scenario)."""
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    seen = {}
    real = engine.walk

    def record(spec, cmds, T):
        seen[(cmds.tobytes(), T.tobytes())] = (spec, cmds.copy(), T.copy())
        return real(spec, cmds, T)

    monkeypatch.setattr(engine, "walk", record)
    sets = [
        "experiment.systems=[attacc_h100, cxl_pnm]",
        "experiment.baseline=null",
        "models.llama2-70b.num_layers=1",
        "experiment.scenarios={s: {batch_size: 4, prompt_len: 64, output_len: 2}}",
    ]
    with redirect_stdout(io.StringIO()):
        run_experiment(load_experiment("default", sets))
    monkeypatch.setattr(engine, "walk", real)
    assert len(seen) >= 10  # both systems' lowered ops (attention, FC, all-bank macros, interleaved reads)
    ops = set()
    for spec, cmds, T in seen.values():
        ops |= set(np.unique(cmds["op"]).tolist())
        _both(monkeypatch, spec, cmds, T)
    assert len(ops) >= 4, ops


def test_auto_walks_interpreted_within_the_budget_then_compiled(monkeypatch):
    monkeypatch.delenv(engine.TIER_ENV, raising=False)
    monkeypatch.setattr(K, "compiled_active", lambda: False)
    monkeypatch.setattr(K, "compiled_cached", lambda: False)
    monkeypatch.setattr(engine, "_interpreted_records", 0)
    assert engine.kernel_tier(10) == "interpreted"
    assert engine.kernel_tier(engine.INTERPRET_BUDGET_RECORDS + 1) == "compiled"
    monkeypatch.setattr(engine, "_interpreted_records", engine.INTERPRET_BUDGET_RECORDS - 5)
    assert engine.kernel_tier(10) == "compiled"  # the process's budget is spent: compile from here on
    monkeypatch.setattr(engine, "_interpreted_records", 0)
    monkeypatch.setattr(K, "compiled_cached", lambda: True)  # compiled into the cache before: load it
    assert engine.kernel_tier(10) == "compiled"


def test_a_bad_tier_is_refused(monkeypatch):
    monkeypatch.setenv(engine.TIER_ENV, "fast")
    with pytest.raises(ConfigError, match="ATTNSIM_DRAM_TIER: expected auto, interpreted or compiled, got 'fast'"):
        engine.kernel_tier(1)


def test_the_memo_answers_an_identical_walk_with_fresh_arrays(monkeypatch):
    spec = SPECS["hbm3_5200_pim"]
    c = random_stream(np.random.default_rng(5), spec, 16, pim=True, channels=2)
    T = engine.timing_vector(spec, "ab")
    a = _walk(monkeypatch, "interpreted", spec, c, T)
    b = engine.walk(spec, c, T)  # from the memo
    assert all(np.array_equal(x, y) and x is not y for x, y in zip(a, b))
    b[5][:] = -1  # a caller's change (summarize adds tail refreshes into ST) does not reach the memo
    assert np.array_equal(engine.walk(spec, c, T)[5], a[5])
