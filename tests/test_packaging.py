"""The built wheel holds every module and config of the tree, and each module imports from it; installed, it
writes nothing into its own folder, and README's two install commands work one after the other in one venv."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numba

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "attnsim": "attnsim",
    "hwmodels": "attnsim/hwmodels",
    "isa": "attnsim/isa",
    "workloads": "attnsim/workloads",
    "mapper": "attnsim/mapper",
    "configs": "attnsim/configs",
}


def _tree_files():
    out = {}
    for folder, dest in FOLDERS.items():
        for p in (ROOT / folder).rglob("*"):
            if "__pycache__" in p.parts or not p.is_file():
                continue
            if p.suffix == ".py" or (folder == "configs" and p.suffix in (".yaml", ".json")):
                out[f"{dest}/{p.relative_to(ROOT / folder).as_posix()}"] = p
    return out


def _build_wheel(tmp_path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        cwd=tmp_path,
    )
    return next((tmp_path / "dist").glob("attnsim-*.whl"))


def test_wheel_contains_every_module_and_imports(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _tree_files()
    missing = sorted(k for k in expected if k not in names)
    assert not missing, f"modules/configs missing from the wheel: {missing}"
    # install the wheel alone into a folder and import every module from there (not from the checkout)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True
    )
    modules = sorted(
        k[:-3].replace("/", ".").removesuffix(".__init__")
        for k in expected
        if k.endswith(".py") and not k.endswith("__main__.py")
    )
    code = (
        "import importlib, sys\n"
        # drop the editable-install finder of the checkout so the wheel's copy is imported
        "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')\n"
        "                 and '__editable__' not in getattr(type(f), '__module__', '')]\n"
        f"mods = {modules!r}\n"
        "for m in mods:\n"
        "    mod = importlib.import_module(m)\n"
        f"    assert mod.__file__.startswith({str(target)!r}), (m, mod.__file__)\n"
        "from attnsim.configs import CONFIG_ROOT\n"
        "assert (CONFIG_ROOT / 'experiments' / 'default.yaml').is_file()\n"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env)


# A tiny PIM program (docs/api.md "Your own PIM program"): `attnsim pim run` compiles the DRAM command engine's
# kernels (attnsim.hwmodels.dram.kernel, ~16 s of CPU), the cheapest command that compiles any.
_PROGRAM = "ACTAB 0, 0\nMACAB 0, 0, 32\nPREA 0\n"


def _files(folder: Path) -> set:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_readme_install_then_editable_install_in_one_venv(tmp_path):
    """Issue 28: `pip install . && attnsim run`, then `pip install -e .` in the same venv broke every later
    `attnsim` (the Numba cache files the run wrote into site-packages/attnsim outlived the uninstall, and the
    leftover folder shadowed the editable package). Now the run writes nothing into the install: the kernels go
    to $ATTNSIM_CACHE_DIR/kernels/<install>/, one folder per install, so the wheel's stay valid afterwards."""
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the dependencies (numba, numpy, ...) from this environment, after the venv's own packages; .pth files of
    # that folder (this checkout's editable finder) are not processed for a folder named in a .pth file
    (site / "deps.pth").write_text(str(Path(numba.__file__).resolve().parents[1]) + "\n")
    cache = tmp_path / "cache"
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "ATTNSIM_CACHE_DIR": str(cache),
        "PYTHONDONTWRITEBYTECODE": "1",
        "ATTNSIM_DRAM_TIER": "compiled",  # this small program would walk interpreted: compile, to see where it goes
    }  # then any new file under site-packages is attnsim's doing

    def pip(*args):
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", *args],
            check=True,
            cwd=tmp_path,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )

    def attnsim(*args):
        return subprocess.run(
            [str(venv / "bin" / "attnsim"), *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )

    (tmp_path / "p.s").write_text(_PROGRAM)
    run = ("pim", "run", "p.s", "--device", "attacc_hbm3_pim_stack")
    pip(str(wheel))
    top, pkg = set(os.listdir(site)), _files(site / "attnsim")
    first = attnsim(*run)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "total" in first.stdout
    # the compile is announced, with where it goes (attnsim.core.jitcache)
    assert f"attnsim: compiling Numba kernels into {cache / 'kernels'}" in first.stderr, first.stderr
    wheel_kernels = {p.parent.parent.name for p in (cache / "kernels").glob("*/hwmodels/dram")}
    assert len(wheel_kernels) == 1 and list((cache / "kernels").rglob("kernel.run_kernel-*.nbi"))
    assert _files(site / "attnsim") == pkg  # nothing written into the installed package
    assert set(os.listdir(site)) == top  # no stray top-level folder (hwmodels/ ...)
    # README's second command in the same venv: the editable install of the checkout replaces the wheel
    pip("--no-build-isolation", "-e", str(ROOT))
    version = attnsim("--version")
    assert version.returncode == 0 and version.stdout.startswith("attnsim "), version.stderr[-3000:]
    where = subprocess.run(
        [str(py), "-c", "import attnsim; print(attnsim.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout.strip()
    assert Path(where).resolve() == ROOT / "attnsim" / "__init__.py"
    assert not (site / "attnsim").exists()  # the uninstall left no folder behind to shadow the checkout
    second = attnsim(*run)
    assert second.returncode == 0 and second.stdout == first.stdout, second.stderr[-3000:]
    tags = {p.parent.parent.name for p in (cache / "kernels").glob("*/hwmodels/dram")}
    assert len(tags) == 2 and wheel_kernels < tags  # the checkout's kernels beside the wheel's, one folder each
    # the other order: the wheel again over the editable install; its kernels are still cached (no notice)
    pip("--force-reinstall", str(wheel))
    third = attnsim(*run)
    assert third.returncode == 0 and third.stdout == first.stdout, third.stderr[-3000:]
    assert "compiling" not in third.stderr
    assert set(os.listdir(site)) == top
