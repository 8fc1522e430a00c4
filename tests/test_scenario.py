"""Scenario: per-request lengths (lists and seeded distributions) and validation errors."""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.core.config import ConfigError, validate
from attnsim.workloads.scenario import Scenario


def _sc(**kw) -> Scenario:
    return validate(Scenario, kw, file="experiments/x.yaml", prefix="scenarios.s")


def test_default_prompt_len_for_all():
    assert list(_sc(batch_size=3, prompt_len=77).prompt_lens()) == [77, 77, 77]


def test_explicit_list():
    lens = _sc(batch_size=3, context_lens=[5, 6, 7]).prompt_lens()
    assert lens.dtype == np.int64 and list(lens) == [5, 6, 7]


def test_list_length_mismatch_names_file_and_key():
    with pytest.raises(ConfigError) as ei:
        _sc(batch_size=4, context_lens=[5, 6, 7])
    assert ei.value.file == "experiments/x.yaml"
    assert ei.value.key == "scenarios.s.context_lens"
    assert "3 entries, expected batch_size = 4" in str(ei.value)


@pytest.mark.parametrize(
    "dist",
    [
        {"dist": "uniform", "low": 10, "high": 5000},
        {"dist": "normal", "mean": 1000.0, "std": 300.0},
        {"dist": "lognormal", "mean": 1000.0, "std": 800.0},
    ],
)
def test_distribution_deterministic_per_seed(dist):
    a = _sc(batch_size=64, context_lens={**dist, "seed": 3}).prompt_lens()
    b = _sc(batch_size=64, context_lens={**dist, "seed": 3}).prompt_lens()
    c = _sc(batch_size=64, context_lens={**dist, "seed": 4}).prompt_lens()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 1 and len(a) == 64


def test_uniform_bounds_and_fixed():
    u = _sc(batch_size=500, context_lens={"dist": "uniform", "low": 100, "high": 120}).prompt_lens()
    assert u.min() >= 100 and u.max() <= 120 and len(set(u)) > 10
    f = _sc(batch_size=4, context_lens={"dist": "fixed", "mean": 512}).prompt_lens()
    assert list(f) == [512] * 4


def test_lognormal_has_requested_moments():
    x = _sc(batch_size=200_000, context_lens={"dist": "lognormal", "mean": 2000.0, "std": 1000.0}).prompt_lens()
    assert x.mean() == pytest.approx(2000, rel=0.01)
    assert x.std() == pytest.approx(1000, rel=0.03)


def test_normal_is_clipped_to_positive():
    x = _sc(batch_size=1000, context_lens={"dist": "normal", "mean": 5.0, "std": 50.0}).prompt_lens()
    assert x.min() >= 1


def test_distribution_missing_parameter():
    with pytest.raises(ConfigError, match="distribution 'normal' needs std"):
        _sc(batch_size=2, context_lens={"dist": "normal", "mean": 5.0})


def test_bad_values():
    with pytest.raises(ConfigError, match="scenarios.s.batch_size: expected a positive integer, got 0"):
        _sc(batch_size=0)
    with pytest.raises(ConfigError, match="scenarios.s.kv_dtype"):
        _sc(kv_dtype="int3")


def test_error_paths_inside_lists_and_distributions():
    with pytest.raises(ConfigError, match=r"scenarios.s.context_lens.1: expected a positive integer, got -2"):
        _sc(batch_size=2, context_lens=[4, -2])
    with pytest.raises(ConfigError, match=r"scenarios.s.context_lens.dist: expected one of"):
        _sc(batch_size=2, context_lens={"dist": "zipf"})
