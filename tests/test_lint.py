"""The lint and format gate (issue 28 §5): ``ruff check .`` and ``ruff format --check .`` pass on the whole
checkout under pyproject's [tool.ruff] (line length 120, py310, rules E F W I); docs/internals/layout.md
"Lint and format" says how to run it. The gate is checked to be live: it sees every tracked Python file and
refuses a known violation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The ruff of this interpreter's environment (the ``test`` extra installs it), run at the checkout's root."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=300
    )


def test_ruff_check_passes():
    r = _ruff("check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_check_passes():
    r = _ruff("format", "--check", "--no-cache", ".")
    assert r.returncode == 0, "run `ruff format .`:\n" + r.stdout + r.stderr


def test_the_gate_sees_every_tracked_python_file():
    """No tracked .py file escapes the gate through an exclude (attnsim/_version.py is generated, not tracked)."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    r = _ruff("check", "--no-cache", "--show-files", ".")
    assert r.returncode == 0, r.stderr
    seen = {Path(p).resolve().relative_to(ROOT).as_posix() for p in r.stdout.split()}
    missing = set(tracked.stdout.split()) - seen
    assert tracked.stdout.split() and not missing, sorted(missing)


def test_the_gate_refuses_a_known_violation():
    """A module in the package with an unused import (F401), a 121-character line (E501: the limit is 120) and
    unsorted imports (I001) fails the check, with each code named."""
    src = "import sys\nimport os\n\nX = " + '"' + "a" * 115 + '"' + "\n"  # 4 + 117 = 121 characters
    assert len(src.splitlines()[-1]) == 121
    r = _ruff(
        "check",
        "--no-cache",
        "--output-format",
        "concise",
        "--stdin-filename",
        "attnsim/_lint_probe.py",
        "-",
        stdin=src,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    for code in ("F401", "E501", "I001"):
        assert code in r.stdout, (code, r.stdout)
