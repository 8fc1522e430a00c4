"""Sweep files: expansion (grid, zip, ranges, seeded random), implicit axes, keys, validation errors."""

import itertools

import numpy as np
import pytest
from sweep_helpers import TINY_EXPERIMENT, write_sweep

from attnsim.core.config import ConfigError
from attnsim.studies.sweep.spec import RangeSpec, config_key, load_sweep


def _load(tmp_path, parameters, **extra):
    return load_sweep(write_sweep(tmp_path, parameters, **extra))


def test_grid_is_the_cross_product_in_row_major_order(tmp_path):
    sw = _load(tmp_path, [{"grid": {"scenario.batch_size": [1, 2, 4], "scenario.prompt_len": [128, 256]}}])
    assert sw.n_points == 6
    got = [(p["scenario.batch_size"], p["scenario.prompt_len"]) for _, p in sw.iter_params()]
    assert got == list(itertools.product([1, 2, 4], [128, 256]))
    # random access agrees with iteration (used by shards and resume)
    assert all(sw.params_at(i) == p for i, p in sw.iter_params())
    # implicit axes (the base experiment's single system/model/scenario) are present as columns
    assert sw.param_names[:3] == ["system", "model", "scenario"]


def test_zip_pairs_elementwise_and_blocks_cross(tmp_path):
    sw = _load(
        tmp_path,
        [
            {"zip": {"scenario.batch_size": [1, 8], "scenario.output_len": [4, 6]}},
            {"grid": {"scenario.prompt_len": [64, 128, 512]}},
        ],
    )
    assert sw.n_points == 6
    pairs = {(p["scenario.batch_size"], p["scenario.output_len"]) for _, p in sw.iter_params()}
    assert pairs == {(1, 4), (8, 6)}


def test_zip_of_unequal_lengths_is_an_error_naming_the_block(tmp_path):
    with pytest.raises(ConfigError, match=r"parameters\.0\.zip: zipped lists differ"):
        _load(tmp_path, [{"zip": {"scenario.batch_size": [1, 2], "scenario.output_len": [4]}}])


@pytest.mark.parametrize(
    "spec, expect",
    [
        ({"start": 512, "stop": 4096, "factor": 2}, [512, 1024, 2048, 4096]),
        ({"start": 1, "stop": 10, "step": 3}, [1, 4, 7, 10]),
        ({"start": 1, "stop": 9, "step": 3}, [1, 4, 7]),
        ({"start": 1, "stop": 1000, "num": 4, "scale": "log"}, [1, 10, 100, 1000]),
        ({"start": 0.5, "stop": 1.0, "num": 3}, [0.5, 0.75, 1.0]),
    ],
)
def test_ranges_are_inclusive_and_keep_integers(tmp_path, spec, expect):
    sw = _load(tmp_path, [{"grid": {"scenario.prompt_len": spec}}])
    vals = [p["scenario.prompt_len"] for _, p in sw.iter_params()]
    assert np.allclose(vals, expect)
    assert all(isinstance(v, int) for v in vals) == all(float(x).is_integer() for x in expect)


def test_bad_range_is_rejected_with_key_path(tmp_path):
    with pytest.raises(
        ConfigError, match=r"parameters\.0\.grid\.scenario\.prompt_len.*exactly one of step, num, factor"
    ):
        _load(tmp_path, [{"grid": {"scenario.prompt_len": {"start": 1, "stop": 8}}}])


def test_random_samples_are_seeded_and_within_bounds(tmp_path):
    blk = {
        "random": {
            "samples": 50,
            "seed": 7,
            "params": {
                "scenario.batch_size": {"randint": [1, 4]},
                "scenario.prompt_len": {"loguniform": [100, 1000]},
                "scenario.kv_dtype": {"choice": ["fp16", "fp8"]},
            },
        }
    }
    a = [p for _, p in _load(tmp_path / "a", [blk]).iter_params()]
    b = [p for _, p in _load(tmp_path / "b", [blk]).iter_params()]
    assert a == b and len(a) == 50
    bs = [p["scenario.batch_size"] for p in a]
    assert set(bs) <= {1, 2, 3, 4} and len(set(bs)) == 4  # inclusive upper bound reached
    assert all(100 <= p["scenario.prompt_len"] <= 1000 for p in a)
    blk["random"]["seed"] = 8
    c = [p for _, p in _load(tmp_path / "c", [blk]).iter_params()]
    assert c != a


def test_shorthands_load_configs_outside_the_base_and_cross_implicitly(tmp_path):
    base = dict(
        TINY_EXPERIMENT, scenarios={"a": {"batch_size": 1, "output_len": 4}, "b": {"batch_size": 2, "output_len": 4}}
    )
    sw = load_sweep(write_sweep(tmp_path, [{"grid": {"model": ["llama2-7b", "mistral-7b"]}}], base=base))
    assert sw.n_points == 4  # 2 models x implicit scenario axis (a, b); implicit system axis of 1
    pts = [sw.resolve(i) for i in range(sw.n_points)]
    assert {(p.model, p.scenario) for p in pts} == {(m, s) for m in ("llama2-7b", "mistral-7b") for s in "ab"}
    for p in pts:  # each point is exactly one run
        d = p.tree.as_dict()
        assert list(d["models"]) == [p.model] and list(d["scenarios"]) == [p.scenario]
        assert d["experiment"]["systems"] == ["h100_x1"] and p.error is None
        assert set(d["hardware"]) == {"h100_sxm"}


def test_key_is_a_hash_of_the_resolved_config(tmp_path):
    sw = _load(tmp_path, [{"grid": {"scenario.batch_size": [1, 2]}}])
    p0, p1 = sw.resolve(0), sw.resolve(1)
    assert p0.key != p1.key
    assert p0.key == config_key(p0.tree.as_dict())
    assert p0.tree.scenarios["chat"]["batch_size"] == 1 and p1.tree.scenarios["chat"]["batch_size"] == 2
    # the same config reached by another sweep gives the same key (resume across edits of the file)
    sw2 = _load(tmp_path / "x", [{"grid": {"scenario.batch_size": [2, 1, 3]}}])
    assert sw2.resolve(1).key == p0.key


def test_invalid_point_is_reported_with_its_error(tmp_path):
    sw = _load(tmp_path, [{"grid": {"scenario.batch_size": [1, -3, 2]}}])
    errs = [sw.resolve(i).error for i in range(3)]
    assert errs[0] is None and errs[2] is None
    assert "scenarios.chat.batch_size" in errs[1] and "positive" in errs[1]


@pytest.mark.parametrize(
    "params, match",
    [
        ([{"grid": {"models.nope.num_layers": [1]}}], r"parameters\.models\.nope\.num_layers.*have: llama2-7b"),
        ([{"grid": {"bogus.x": [1]}}], r"unknown section 'bogus'"),
        ([{"grid": {"system": ["no_such_system"]}}], r"unknown systems config 'no_such_system'"),
        ([{"grid": {"scenario": ["zzz"]}}], r"scenario 'zzz' is not one of the base"),
        ([{"grid": {"scenario.batch_size": [1]}}, {"grid": {"scenario.batch_size": [2]}}], r"more than one block"),
        ([{"grid": {"a": [1]}, "zip": {"b": [1]}}], r"parameters\.0: .*exactly one of grid, zip, random"),
    ],
)
def test_spec_errors_name_file_and_key(tmp_path, params, match):
    with pytest.raises(ConfigError, match=match) as ei:
        _load(tmp_path, params)
    assert "t.yaml" in str(ei.value) or "systems" in str(ei.value)


def test_unknown_top_level_key_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"t\.yaml: colour: unknown key"):
        _load(tmp_path, [], colour="red")


def test_fixed_sets_apply_to_every_point_and_change_the_identity(tmp_path):
    a = _load(tmp_path / "a", [{"grid": {"scenario.batch_size": [1]}}])
    b = _load(tmp_path / "b", [{"grid": {"scenario.batch_size": [1]}}], set={"scenarios.chat.output_len": 6})
    assert b.resolve(0).tree.scenarios["chat"]["output_len"] == 6
    assert a.resolve(0).key != b.resolve(0).key and a.sweep_id != b.sweep_id


def test_range_values_direct():
    assert RangeSpec(start=2, stop=32, factor=2).values(True) == [2, 4, 8, 16, 32]
