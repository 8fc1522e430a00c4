"""Mutation testing of the mapper policies and the link / collective models: how many small code changes the tests
catch (issue 28 §5).

mutmut 3.8 installs from the local registry but cannot find the code under this layout (``attnsim.mapper`` lives in
``mapper/`` through setuptools package-dir: "Could not figure out where the code to mutate is"), so this is a small
AST mutator. Operators (one change per mutant): ``+ <-> -``, ``* <-> /``, ``// -> *``, ``< <-> <=``,
``> <-> >=``, ``== <-> !=``, ``and <-> or``, a number ``c -> c + 1`` and ``c -> 0``, and dropping the right-hand
term of ``a + b`` / ``a - b``. Sites are enumerated over the whole module (docstrings and annotations excluded),
``--mutants`` of them sampled with a fixed seed. Each mutant is written over the source file (the original is
restored, mtime included, after every run and on exit), then the module's test files run with ``-x -q`` under a
timeout; a failing, erroring or timed-out run kills the mutant.

Per module two test sets: ``base`` (the tests that existed before the exact-number tests) and ``new``; a mutant
survives the base set, then the new set runs, so one pass gives the score before and after.

    nice -n 10 python bench/mutation.py                       # mapper/tiered.py and hwmodels/links.py, 40 each
    nice -n 10 python bench/mutation.py mapper/attacc.py --mutants 20 --survivors
"""

from __future__ import annotations

import argparse
import ast
import atexit
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# module -> (base tests, new tests); base: the tests before issue 28 §5's exact-number tests
TARGETS = {
    "mapper/tiered.py": (["tests/test_policies.py", "tests/test_pipeline.py"], ["tests/test_tiered_mapper_exact.py"]),
    "hwmodels/links.py": (["tests/test_links.py", "tests/test_collectives.py"], ["tests/test_links_collectives.py"]),
    "hwmodels/collectives.py": (["tests/test_collectives.py"], ["tests/test_links_collectives.py"]),
    "mapper/attacc.py": (["tests/test_policies.py", "tests/test_attacc_faithful.py"], []),
    "mapper/offload.py": (["tests/test_policies.py"], []),
    "mapper/base.py": (["tests/test_policies.py", "tests/test_tiered_mapper_exact.py"], []),
}
DEFAULT = ["mapper/tiered.py", "hwmodels/links.py"]

_SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult}
_SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_SWAP_BOOL = {ast.And: ast.Or, ast.Or: ast.And}


def _skip_ids(tree: ast.AST) -> set[int]:
    """Nodes not to mutate: docstrings and annotations."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            skip.update(id(n) for n in ast.walk(body[0]))
        for ann in [getattr(node, "annotation", None), getattr(node, "returns", None)]:
            if ann is not None:
                skip.update(id(n) for n in ast.walk(ann))
    return skip


def sites(source: str) -> list[tuple[ast.AST, str, ast.AST]]:
    """Every (original node, description, replacement node) the operators offer."""
    tree = ast.parse(source)
    skip = _skip_ids(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        if isinstance(node, ast.BinOp):
            new = _SWAP_BIN.get(type(node.op))
            if new:
                out.append(
                    (
                        node,
                        f"{type(node.op).__name__} -> {new.__name__}",
                        ast.BinOp(left=node.left, op=new(), right=node.right),
                    )
                )
            if isinstance(node.op, (ast.Add, ast.Sub)):
                out.append((node, "drop the right term", node.left))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            new = _SWAP_CMP.get(type(node.ops[0]))
            if new:
                out.append(
                    (
                        node,
                        f"{type(node.ops[0]).__name__} -> {new.__name__}",
                        ast.Compare(left=node.left, ops=[new()], comparators=node.comparators),
                    )
                )
        elif isinstance(node, ast.BoolOp):
            new = _SWAP_BOOL[type(node.op)]
            out.append((node, f"{type(node.op).__name__} -> {new.__name__}", ast.BoolOp(op=new(), values=node.values)))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            out.append((node, f"{node.value!r} -> {node.value + 1!r}", ast.Constant(node.value + 1)))
            if node.value != 0:
                out.append((node, f"{node.value!r} -> 0", ast.Constant(type(node.value)(0))))
    return out


def apply(source: str, node: ast.AST, replacement: ast.AST) -> str:
    """source with node's text replaced by the unparsed replacement (the rest byte for byte)."""
    lines = source.splitlines(keepends=True)
    offs = [0]
    for ln in lines:
        offs.append(offs[-1] + len(ln.encode()))
    raw = source.encode()
    a = offs[node.lineno - 1] + node.col_offset
    b = offs[node.end_lineno - 1] + node.end_col_offset
    text = ast.unparse(replacement)
    if isinstance(replacement, (ast.BinOp, ast.Compare, ast.BoolOp)):
        text = f"({text})"
    return (raw[:a] + text.encode() + raw[b:]).decode()


def run_tests(files: list[str], timeout_s: float) -> str:
    """'killed', 'survived' or 'timeout' for one pytest run (-x -q, serial, no bytecode or cache writes)."""
    if not files:
        return "survived"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *files]
    try:
        rc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s
        ).returncode
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if rc == 0 else "killed"


def mutate_module(path: str, n: int, seed: int, timeout_s: float, base: list[str], new: list[str]) -> dict:
    target = ROOT / path
    backup = target.with_suffix(target.suffix + ".mutation-orig")
    shutil.copy2(target, backup)

    def restore():
        if backup.exists():
            shutil.copy2(backup, target)  # content and mtime: the original's bytecode cache stays valid
            backup.unlink()

    atexit.register(restore)
    source = target.read_text()
    all_sites = sites(source)
    chosen = sorted(random.Random(seed).sample(range(len(all_sites)), min(n, len(all_sites))))
    st = backup.stat()
    res = {"module": path, "sites": len(all_sites), "mutants": 0, "killed_base": 0, "killed_after": 0, "survivors": []}
    t0 = time.perf_counter()
    try:
        for j, i in enumerate(chosen):
            node, what, repl = all_sites[i]
            mutant = apply(source, node, repl)
            try:
                compile(mutant, path, "exec")
            except SyntaxError:
                continue
            target.write_text(mutant)
            os.utime(target, (st.st_atime, st.st_mtime + 10 + j))  # never the original's mtime (stale .pyc)
            before = run_tests(base, timeout_s)
            after = before if before != "survived" else run_tests(new, timeout_s)
            shutil.copy2(backup, target)
            res["mutants"] += 1
            res["killed_base"] += before != "survived"
            res["killed_after"] += after != "survived"
            if after == "survived":
                res["survivors"].append(f"{path}:{node.lineno}: {what}")
            print(
                f"  [{j + 1}/{len(chosen)}] {path}:{node.lineno} {what}: base {before}, after {after}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        restore()
    res["wall_s"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", default=DEFAULT, help=f"among {', '.join(TARGETS)}")
    ap.add_argument("--mutants", type=int, default=40, help="mutants sampled per module (default 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0, help="per test run")
    ap.add_argument("--survivors", action="store_true", help="list the surviving mutants")
    args = ap.parse_args(argv)
    bad = [m for m in args.modules if m not in TARGETS]
    if bad:
        print(
            f"error: bench/mutation.py: modules: expected one of {', '.join(TARGETS)}, got {', '.join(bad)}",
            file=sys.stderr,
        )
        return 2
    rows = []
    for m in args.modules:
        base, new = TARGETS[m]
        rows.append(mutate_module(m, args.mutants, args.seed, args.timeout_s, base, new))
    print(f"{'module':26} {'sites':>5} {'mutants':>7} {'score before':>12} {'score after':>11} {'wall s':>7}")
    for r in rows:
        n = max(r["mutants"], 1)
        print(
            f"{r['module']:26} {r['sites']:5d} {r['mutants']:7d} {100 * r['killed_base'] / n:11.0f}% "
            f"{100 * r['killed_after'] / n:10.0f}% {r['wall_s']:7.0f}"
        )
        if args.survivors:
            for s in r["survivors"]:
                print("    survived: " + s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
