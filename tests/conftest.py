"""Test configuration: under CI (CI=true) hypothesis runs derandomized (the same examples every run, no
example database), so a green CI is reproducible; locally it explores new random examples each run."""

import os

from hypothesis import settings

from attnsim.core import jitcache

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Numba kernels (attnsim.core.jitcache): their folder is chosen once per process, here, before a test points
# ATTNSIM_CACHE_DIR at a temporary sub-result folder (which would otherwise move every kernel of this worker
# into it, to compile again); and the "attnsim: compiling Numba kernels" line, printed at the first compile of
# a process, is marked said, so that whichever test happens to compile first (an empty cache in CI) still sees
# the stderr it expects. The tests of the line reset it.
jitcache.kernel_dir()
jitcache.ensure()  # Numba with attnsim's cache locator (kernel modules call it at their import too)
jitcache._LISTENER.said = True

# The slowest tests run first (measured with --durations on 2 cores; each takes minutes, the median test
# well under a second), so that under `pytest -n 2` (xdist's load scheduling sends the first quarter of the
# tests round-robin) they run side by side on different workers instead of one of them finishing the run
# alone. Only the order changes (a stable sort: the rest keeps the collection order); none of these tests
# uses a module- or session-scoped fixture, so moving them sets nothing up twice. Ids not collected are
# ignored.
SLOW_FIRST = (
    "tests/test_readme_numbers.py::test_readme_block_is_current[serve-examples]",
    "tests/test_readme_numbers.py::test_readme_block_is_current[serve-slo-load]",
    "tests/test_readme_numbers.py::test_readme_block_is_current[long-context]",
    "tests/test_reproductions.py::test_every_builtin_reproduction_runs[neupims]",
    "tests/test_sweep_store.py::test_sigkill_mid_sweep_then_resume_loses_and_duplicates_nothing",
    "tests/test_sweep_threads.py::test_dask_threads_processes_and_local_give_equal_stores",
    "tests/test_serve_scheduler.py::test_littles_law",
    "tests/test_sweep_dask.py::test_dask_localcluster_sweep_equals_local",
    "tests/test_sweep_store.py::test_sigkill_at_random_moments_of_folds_never_corrupts",
)


def pytest_collection_modifyitems(config, items):
    rank = {nodeid: i for i, nodeid in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
