"""The Numba kernel cache (attnsim.core.jitcache): stamped by every source of the kernel's folder (an edit of a file
that a cached kernel inlines recompiles it instead of running stale machine code), kept outside the package
($NUMBA_CACHE_DIR, else $ATTNSIM_CACHE_DIR/kernels/<install>, else the user cache folder), and announced once
per process when a kernel compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from attnsim.core import jitcache
from attnsim.core.fingerprint import digest_sources, folder_sources

_KERNEL = textwrap.dedent("""
    from numba import njit
    from . import helper

    @njit(cache=True)
    def kernel():
        return helper.rule() + helper.K
""")


def _make_package(root: Path, k: int, stamped: bool) -> Path:
    pkg = root / "kpkg"
    pkg.mkdir(exist_ok=True)
    install = "from attnsim.core import jitcache\njitcache.install(__import__('pathlib').Path(__file__).parent)\n"
    (pkg / "__init__.py").write_text(install if stamped else "")
    (pkg / "helper.py").write_text(
        f"from numba import njit\nK = {k}\n\n@njit(inline='always')\ndef rule():\n    return 10 * K\n"
    )
    (pkg / "kern.py").write_text(_KERNEL)
    return pkg


def _run(root: Path, numba_dir: bool = True, **env) -> dict:
    code = (
        "import json, kpkg.kern as m; from attnsim.core import notices; notices.to_stderr(); v = m.kernel(); "
        "print(json.dumps({'value': int(v), 'hits': sum(m.kernel.stats.cache_hits.values()), "
        "'locator': type(m.kernel._cache._impl._locator).__name__, "
        "'path': m.kernel._cache._impl._locator.get_cache_path()}))"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "ATTNSIM_CACHE_DIR")}
    env = dict(
        base,
        HOME=str(root / "home"),
        XDG_CACHE_HOME=str(root / "xdg"),
        **env,
        PYTHONPATH=os.pathsep.join(
            [str(root), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    if numba_dir:
        env["NUMBA_CACHE_DIR"] = str(root / "nbcache")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def test_editing_an_inlined_sibling_recompiles_the_cached_kernel(tmp_path):
    _make_package(tmp_path, 1, stamped=True)
    first = _run(tmp_path)
    assert (first["value"], first["hits"], first["locator"]) == (11, 0, "KernelCacheLocator")
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
    from hwmodels.dram import sched_flat as flat

    locator = flat.ctrl_kernel_flat._cache._impl._locator
    assert type(locator) is jitcache.KernelCacheLocator
    folder = Path(flat.__file__).resolve().parent
    assert locator.get_source_stamp() == "attnsim-folder-sha256:" + digest_sources(folder_sources(folder))


def test_files_outside_the_installed_roots_keep_numbas_locators(tmp_path):
    outside = tmp_path / "mod.py"
    outside.write_text("def f():\n    return 1\n")
    assert jitcache.KernelCacheLocator.from_function(lambda: 1, str(outside)) is None
    # Numba's __pycache__-beside-the-source locator still serves other code, never attnsim's kernels
    assert jitcache._NotInPackage.from_function(lambda: 1, str(outside)) is not None
    from hwmodels.dram import sched_flat as flat

    assert jitcache._NotInPackage.from_function(flat.ctrl_kernel_flat.py_func, flat.__file__) is None


def test_kernels_go_to_attnsim_cache_dir_else_the_user_cache_and_never_beside_the_source(tmp_path):
    pkg = _make_package(tmp_path, 1, stamped=True)
    tag = jitcache.install_tag()
    # no variable: platformdirs' user cache folder ($XDG_CACHE_HOME/attnsim on Linux), by folder under the root
    first = _run(tmp_path, numba_dir=False)
    assert first["path"] == str(tmp_path / "xdg" / "attnsim" / "kernels" / tag / "kpkg")
    assert (first["value"], first["hits"]) == (11, 0)
    # the compile is announced once, with where it goes; a cache hit says nothing
    assert first["stderr"].count("attnsim: compiling Numba kernels into ") == 1, first["stderr"]
    again = _run(tmp_path, numba_dir=False)
    assert again["hits"] == 1 and "compiling" not in again["stderr"]
    # ATTNSIM_CACHE_DIR: its kernels/ folder; NUMBA_CACHE_DIR wins over both (Numba's own layout)
    own = _run(tmp_path, numba_dir=False, ATTNSIM_CACHE_DIR=str(tmp_path / "ac"))
    assert own["path"] == str(tmp_path / "ac" / "kernels" / tag / "kpkg") and own["hits"] == 0
    nb = _run(tmp_path, ATTNSIM_CACHE_DIR=str(tmp_path / "ac"))
    assert nb["path"].startswith(str(tmp_path / "nbcache")) and nb["hits"] == 0
    # the sub-result cache's other forms (off, SQLite) leave the kernels in the user cache folder
    for value in ("off", "sqlite:" + str(tmp_path / "s.sqlite")):
        assert _run(tmp_path, numba_dir=False, ATTNSIM_CACHE_DIR=value)["path"] == first["path"]
    assert not (pkg / "__pycache__").exists() or not list((pkg / "__pycache__").glob("*.nb*"))


def test_a_kernel_folder_others_can_write_is_refused(tmp_path):
    """Numba's cache files are pickles: a kernels/ folder writable by group or others (shared scratch) is not
    used (one warning; the user cache folder instead)."""
    _make_package(tmp_path, 1, stamped=True)
    shared = tmp_path / "shared" / "kernels"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    out = _run(tmp_path, numba_dir=False, ATTNSIM_CACHE_DIR=str(tmp_path / "shared"))
    assert out["path"].startswith(str(tmp_path / "xdg" / "attnsim" / "kernels"))
    assert "writable by group or others" in out["stderr"] and list(shared.iterdir()) == []
