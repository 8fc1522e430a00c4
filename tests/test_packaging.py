"""The built wheel holds every module and config of the tree, and each module imports from it."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"attnsim": "attnsim", "hwmodels": "attnsim/hwmodels", "isa": "attnsim/isa",
           "workloads": "attnsim/workloads", "mapper": "attnsim/mapper", "configs": "attnsim/configs"}


def _tree_files():
    out = {}
    for folder, dest in FOLDERS.items():
        for p in (ROOT / folder).rglob("*"):
            if "__pycache__" in p.parts or not p.is_file():
                continue
            if p.suffix == ".py" or (folder == "configs" and p.suffix in (".yaml", ".json")):
                out[f"{dest}/{p.relative_to(ROOT / folder).as_posix()}"] = p
    return out


def test_wheel_contains_every_module_and_imports(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("attnsim-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _tree_files()
    missing = sorted(k for k in expected if k not in names)
    assert not missing, f"modules/configs missing from the wheel: {missing}"
    # install the wheel alone into a folder and import every module from there (not from the checkout)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True)
    modules = sorted(k[:-3].replace("/", ".").removesuffix(".__init__") for k in expected if k.endswith(".py")
                     and not k.endswith("__main__.py"))
    code = ("import importlib, sys\n"
            # drop the editable-install finder of the checkout so the wheel's copy is imported
            "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')\n"
            "                 and '__editable__' not in getattr(type(f), '__module__', '')]\n"
            f"mods = {modules!r}\n"
            "for m in mods:\n"
            "    mod = importlib.import_module(m)\n"
            f"    assert mod.__file__.startswith({str(target)!r}), (m, mod.__file__)\n"
            "from attnsim.configs import CONFIG_ROOT\n"
            "assert (CONFIG_ROOT / 'experiments' / 'default.yaml').is_file()\n")
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env)
