"""vs_baseline columns of sweep stores (attnsim.studies.sweep.baselines): hand-computed quotients of the stored
metrics, marked missing values, shards + merge, unfolded journal records, the same ratios as attnsim run."""

import h5py
import numpy as np
import pytest
import yaml
from sweep_helpers import TINY_EXPERIMENT, write_sweep

from attnsim.core.config import ConfigError
from attnsim.sim.results import BASELINE_RATIOS
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.merge import merge_stores
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import StoreWriter, iter_records, open_store

RUN_KW = dict(workers=1, progress=False, log=lambda s: None)
# batch 1 fits both systems; at batch 1024 the KV cache (~138 GB) does not fit one H100 (the baseline)
GRID = [{"grid": {"scenario.batch_size": [1, 1024], "system": ["h100_x1", "dgx_h100"]}}]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("bl")
    sw = load_sweep(write_sweep(d, GRID, baseline="h100_x1"))
    run_sweep(sw, d / "full.h5", **RUN_KW)
    return d, sw


def _meta(path):
    with h5py.File(path) as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def _by(cols, system, batch):
    i = np.nonzero((cols["system"] == system) & (cols["scenario.batch_size"] == batch))[0]
    assert len(i) == 1
    return int(i[0])


def test_ratios_are_the_quotients_of_the_stored_metrics(stores):
    d, sw = stores
    assert sw.baseline == "h100_x1"
    c = open_store(d / "full.h5").columns()
    b, p = _by(c, "h100_x1", 1), _by(c, "dgx_h100", 1)
    assert c["status"][b] == c["status"][p] == "ok"
    assert c["vs_baseline.throughput_ratio"][p] == c["tokens_per_s"][p] / c["tokens_per_s"][b]
    assert c["vs_baseline.energy_efficiency_ratio"][p] == c["energy_per_token_j"][b] / c["energy_per_token_j"][p]
    assert c["vs_baseline.tpot_speedup"][p] == c["tpot_s"][b] / c["tpot_s"][p]
    assert c["vs_baseline.throughput_ratio"][p] > 1  # eight GPUs outrun one at batch 1
    assert c["vs_baseline.status"][b] == "is_baseline" and np.isnan(c["vs_baseline.throughput_ratio"][b])
    # the ratios are stored in the HDF5 file itself (readable without attnsim)
    with h5py.File(d / "full.h5") as f:
        keys = [k.decode() for k in f["points/key"][()]]
        stored = f["points/vs_baseline.throughput_ratio"][keys.index(c["key"][p])]
        assert stored == c["vs_baseline.throughput_ratio"][p]
        assert f.attrs["baseline"] == "h100_x1"


def test_a_failed_baseline_partner_gives_a_marked_missing_ratio(stores):
    c = open_store(stores[0] / "full.h5").columns()
    b, p = _by(c, "h100_x1", 1024), _by(c, "dgx_h100", 1024)
    assert c["status"][b] == "does_not_fit" and c["status"][p] == "ok"
    assert c["vs_baseline.status"][p] == "baseline_not_ok"
    for name, _, _ in BASELINE_RATIOS:  # missing (NaN in the store, null in Parquet), never inf
        assert np.isnan(c["vs_baseline." + name][p])
    assert c["vs_baseline.status"][b] == "not_ok"


def test_shards_lack_partners_and_the_merge_has_them(stores, tmp_path):
    d, _ = stores
    # shard 1 of 2 (points 1, 3: the dgx_h100 ones), folded as a shard's writer folds it: no baseline here
    with StoreWriter(tmp_path / "s1.h5", dict(_meta(d / "full.h5"), shard="1/2"), {}) as w:
        for rec in iter_records(d / "full.h5"):
            if rec["index"] % 2 == 1:
                w.append(rec)
    shard1 = open_store(tmp_path / "s1.h5").columns()
    assert set(shard1["system"]) == {"dgx_h100"} and set(shard1["vs_baseline.status"]) == {"baseline_missing"}
    # merged with a store holding the baselines (shard 1's rows come first; duplicate keys are kept once)
    n = merge_stores([tmp_path / "s1.h5", d / "full.h5"], tmp_path / "merged.h5")
    assert n == 4
    full, merged = open_store(d / "full.h5").columns(), open_store(tmp_path / "merged.h5").columns()
    for k in [k for k in full if k.startswith("vs_baseline.")]:
        assert (
            full[k].tolist() == pytest.approx(merged[k].tolist(), nan_ok=True)
            if full[k].dtype.kind == "f"
            else full[k].tolist() == merged[k].tolist()
        ), k


def test_unfolded_journal_records_get_ratios_when_read(stores, tmp_path):
    d, _ = stores
    w = StoreWriter(tmp_path / "j.h5", _meta(d / "full.h5"), {"scenario.batch_size": "i8"}, checkpoint_s=1e9)
    try:
        for rec in iter_records(d / "full.h5"):
            w.append(rec)  # journal only (the next fold is at close)
        with h5py.File(tmp_path / "j.h5") as f:
            assert f["points/key"].shape == (0,)
        live = open_store(tmp_path / "j.h5").columns()
    finally:
        w.close()
    full = open_store(d / "full.h5").columns()
    p = _by(live, "dgx_h100", 1)
    assert live["vs_baseline.throughput_ratio"][p] == full["vs_baseline.throughput_ratio"][_by(full, "dgx_h100", 1)]
    assert sorted(live["vs_baseline.status"]) == sorted(full["vs_baseline.status"])


def test_same_ratios_as_attnsim_run(stores, tmp_path):
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = dict(
        TINY_EXPERIMENT,
        systems=["h100_x1", "dgx_h100"],
        baseline="h100_x1",
        scenarios={"chat": {"batch_size": 1, "prompt_len": 256, "output_len": 8}},
    )
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(exp))
    docs = run_experiment(load_experiment(str(tmp_path / "e.yaml")))
    run = [doc for doc in docs if doc["system"] == "dgx_h100"][0]
    c = open_store(stores[0] / "full.h5").columns()
    p = _by(c, "dgx_h100", 1)
    for name, _, _ in BASELINE_RATIOS:
        assert c["vs_baseline." + name][p] == pytest.approx(run["vs_baseline"][name], rel=1e-12), name
    # a run results file's table (and so its exports) carries the same columns, from the documents
    from attnsim.studies.sweep.table import table_from_docs

    t = table_from_docs(tmp_path / "r.h5", {}, docs)
    assert t.columns["vs_baseline.status"].tolist() == ["is_baseline", "ok"]
    assert t.columns["vs_baseline.throughput_ratio"][1] == run["vs_baseline"]["throughput_ratio"]


def test_baseline_must_be_swept_and_is_inherited(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_sweep(write_sweep(tmp_path / "a", GRID, baseline="cent_x1"))
    assert e.value.key == "baseline" and "expected one of the swept systems (h100_x1, dgx_h100)" in str(e.value)
    base = dict(TINY_EXPERIMENT, systems=["h100_x1", "dgx_h100"], baseline="dgx_h100")
    sw = load_sweep(write_sweep(tmp_path / "b", [{"grid": {"scenario.batch_size": [1, 2]}}], base=base))
    assert sw.baseline == "dgx_h100"  # the base experiment's, swept as the implicit system axis
    one = dict(base, systems=["h100_x1"], baseline=None)
    assert load_sweep(write_sweep(tmp_path / "c", [{"grid": {"scenario.batch_size": [1]}}], base=one)).baseline is None
    # the baseline only adds ratio columns: the same points, so the same sweep (a store can be resumed with one)
    a = load_sweep(write_sweep(tmp_path / "d", GRID)).sweep_id
    assert a == load_sweep(write_sweep(tmp_path / "e", GRID, baseline="h100_x1")).sweep_id
