"""The package's layers (docs/architecture.md; DESIGN.md "Top-level layout"): every module sits in one layer,
imports only its own layer and the layers before it, and no import cycle exists -- counting every import
statement, lazy ones inside functions and ``if TYPE_CHECKING:`` blocks included.

An AST walk rather than import-linter: it needs no extra dependency, it reads the folders mapped by pyproject's
package-dir (``hwmodels/`` is ``attnsim.hwmodels``) without installing anything, and it counts the imports
inside functions, which is where this project's upward imports and cycles hid (issue 28)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# lowest first; a module may import its own layer and the layers listed before it
LAYERS = (
    ("core", ("attnsim", "attnsim._version", "attnsim.configs", "attnsim.core")),
    ("workloads", ("attnsim.workloads",)),
    ("isa", ("attnsim.isa",)),
    ("hwmodels", ("attnsim.hwmodels",)),
    ("mapper", ("attnsim.mapper",)),
    ("sim", ("attnsim.sim",)),
    ("studies", ("attnsim.studies",)),
    ("plots", ("attnsim.plots",)),
    ("cli/api", ("attnsim.cli", "attnsim.api", "attnsim.__main__")),
)


def package_dirs() -> dict[str, str]:
    """pyproject's [tool.setuptools.package-dir] (read with a regex: tomllib is Python >= 3.11)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"(?ms)^\[tool\.setuptools\.package-dir\]\n(.*?)(?:^\[|\Z)", text).group(1)
    return dict(re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', block, re.M))


def modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in package_dirs().items():
        base = ROOT / folder
        for f in sorted(base.rglob("*.py")):
            rel = f.relative_to(base).with_suffix("").parts
            if "__pycache__" in rel:
                continue
            name = ".".join((pkg, *rel[:-1]) if rel[-1] == "__init__" else (pkg, *rel))
            mods.setdefault(name, f)
    return mods


def layer_of(name: str) -> int | None:
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if name == p or (p != "attnsim" and name.startswith(p + ".")):
                return i
    return None


def import_edges(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported attnsim module: line}, every import statement (lazy ones included)."""

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges = {}
    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        base = m if path.name == "__init__.py" else m.rpartition(".")[0]
        out = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    b = base
                    for _ in range(node.level - 1):
                        b = b.rpartition(".")[0]
                    mod = f"{b}.{mod}" if mod else b
                targets = [f"{mod}.{a.name}" for a in node.names] + [mod]
            else:
                continue
            for t in targets:
                r = resolve(t)
                # a module importing a package's __init__ it lives in is the package itself, not an edge
                if r and r != m and not m.startswith(r + "."):
                    out.setdefault(r, node.lineno)
        edges[m] = out
    return edges


def test_every_module_has_a_layer():
    mods = modules()
    assert len(mods) > 100  # the walk found the package (149 modules when the layers were drawn)
    homeless = sorted(m for m in mods if layer_of(m) is None)
    assert not homeless, f"modules outside every layer (place them in a layer folder, tests/test_layers.py): {homeless}"


def test_no_import_runs_up_a_layer():
    mods = modules()
    edges = import_edges(mods)
    up = [
        f"{mods[m].relative_to(ROOT)}:{line}: {m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, out in sorted(edges.items())
        for t, line in sorted(out.items())
        if layer_of(m) is not None and layer_of(t) is not None and layer_of(t) > layer_of(m)
    ]
    assert not up, "imports that run up a layer:\n" + "\n".join(up)


def strongly_connected(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle():
    cycles = strongly_connected(import_edges(modules()))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_checks_catch_a_cycle_and_an_upward_import():
    # the graph walk itself: a -> b -> a is one component; c -> a alone is none
    assert strongly_connected({"a": {"b": 1}, "b": {"a": 2}, "c": {"a": 3}}) == [["a", "b"]]
    # a device model importing the runner runs up from hwmodels (3) to sim (5); the CLI importing core does not
    assert layer_of("attnsim.hwmodels.dram.engine") < layer_of("attnsim.sim.runner")
    assert layer_of("attnsim.cli.run") > layer_of("attnsim.core.config")
    assert layer_of("attnsim") == 0 and layer_of("attnsim.nowhere") is None
