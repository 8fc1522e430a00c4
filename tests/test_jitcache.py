"""The Numba kernel cache is stamped by every source of the kernel's folder (attnsim.jitcache): an edit of a file
that a cached kernel inlines recompiles it instead of running stale machine code."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from attnsim import jitcache
from attnsim.fingerprint import digest_sources, folder_sources

_KERNEL = textwrap.dedent('''
    from numba import njit
    from . import helper

    @njit(cache=True)
    def kernel():
        return helper.rule() + helper.K
''')


def _make_package(root: Path, k: int, stamped: bool) -> Path:
    pkg = root / "kpkg"
    pkg.mkdir(exist_ok=True)
    install = "from attnsim import jitcache\njitcache.install(__import__('pathlib').Path(__file__).parent)\n"
    (pkg / "__init__.py").write_text(install if stamped else "")
    (pkg / "helper.py").write_text(
        f"from numba import njit\nK = {k}\n\n@njit(inline='always')\ndef rule():\n    return 10 * K\n")
    (pkg / "kern.py").write_text(_KERNEL)
    return pkg


def _run(root: Path) -> dict:
    code = ("import json, kpkg.kern as m; v = m.kernel(); "
            "print(json.dumps({'value': int(v), 'hits': sum(m.kernel.stats.cache_hits.values()), "
            "'locator': type(m.kernel._cache._impl._locator).__name__}))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(root / "nbcache"), PYTHONPATH=os.pathsep.join(
        [str(root), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_editing_an_inlined_sibling_recompiles_the_cached_kernel(tmp_path):
    _make_package(tmp_path, 1, stamped=True)
    first = _run(tmp_path)
    assert first == {"value": 11, "hits": 0, "locator": "FolderStampedUserProvidedCacheLocator"}
    assert _run(tmp_path)["hits"] == 1  # unchanged sources: the cached machine code is used
    _make_package(tmp_path, 2, stamped=True)  # only helper.py changes; kern.py (Numba's own stamp) does not
    edited = _run(tmp_path)
    assert edited["value"] == 22 and edited["hits"] == 0


def test_numbas_own_stamp_would_keep_the_stale_kernel(tmp_path):
    """The control: without the folder stamp Numba reuses machine code compiled from the old helper.py."""
    _make_package(tmp_path, 1, stamped=False)
    assert _run(tmp_path)["value"] == 11
    _make_package(tmp_path, 2, stamped=False)
    stale = _run(tmp_path)
    assert stale["value"] == 11 and stale["hits"] == 1


def test_folder_stamp_follows_every_py_file_and_only_those(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "b.py").write_text("B = 1\n")
    (tmp_path / "notes.txt").write_text("x")
    before = digest_sources(folder_sources(tmp_path))
    (tmp_path / "notes.txt").write_text("y")
    assert digest_sources(folder_sources(tmp_path)) == before
    (tmp_path / "b.py").write_text("B = 2\n")
    assert digest_sources(folder_sources(tmp_path)) != before
    (tmp_path / "b.py").write_text("B = 1\n")
    (tmp_path / "b.py").rename(tmp_path / "c.py")  # same bytes, other name
    assert digest_sources(folder_sources(tmp_path)) != before


def test_the_dram_scheduler_kernel_is_stamped_by_its_folder():
    from hwmodels.dram import flat
    locator = flat.ctrl_kernel_flat._cache._impl._locator
    assert type(locator).__name__.startswith("FolderStamped")
    folder = Path(flat.__file__).resolve().parent
    assert locator.get_source_stamp() == "attnsim-folder-sha256:" + digest_sources(folder_sources(folder))


def test_files_outside_the_installed_roots_keep_numbas_locators(tmp_path):
    outside = tmp_path / "mod.py"
    outside.write_text("def f():\n    return 1\n")
    for cls in jitcache._LOCATORS:
        assert cls.from_function(lambda: 1, str(outside)) is None
