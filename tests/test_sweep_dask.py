"""A real small sweep on a dask LocalCluster gives the same store as the local executor."""

import os

from sweep_helpers import write_sweep
from test_sweep_store import _same_points

from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import open_store


def test_dask_localcluster_sweep_equals_local(tmp_path):
    import dask.distributed  # noqa: F401 - fails loudly if the [dask] extra is missing

    p = write_sweep(tmp_path, [{"grid": {"model": ["llama2-7b", "mistral-7b"], "scenario.batch_size": [1, 4]}}])
    sw = load_sweep(p)
    s = run_sweep(sw, tmp_path / "dask.h5", executor="dask", workers=2, progress=False, log=lambda m: None)
    assert s.simulated == 4 and s.status_counts == {"ok": 4}
    workers = open_store(tmp_path / "dask.h5").columns()["worker"].tolist()
    assert all(w.split(":")[1] != str(os.getpid()) for w in workers)  # ran in the cluster's processes
    run_sweep(sw, tmp_path / "local.h5", workers=1, progress=False, log=lambda m: None)
    _same_points(tmp_path / "dask.h5", tmp_path / "local.h5")
