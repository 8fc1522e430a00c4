"""Bad-input suite (issue 10): every case of tests/bad_inputs/cases.py runs ``attnsim.cli.main(argv)`` in an
empty folder and must exit 2 with exactly one stderr line ``error: ...`` naming the file and the key (or
line), without a traceback and without writing or changing any file (the folder tree is compared before
and after). ``python bench/fuzz.py --cases`` classifies the same cases in a watched child process
(clean / traceback / silent / message / wrote / hang / memory)."""

import signal
import subprocess
import sys

import pytest
from bad_inputs.cases import CASES, PENDING
from bad_inputs.runner import make_stores, materialise, run_case

ACTIVE = [c for c in CASES if c.id not in PENDING]
WATCHDOG_S = 60  # a case that takes longer is a hang (they take well under a second)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return make_stores(tmp_path_factory.mktemp("stores"))


def test_the_suite_covers_every_surface():
    surfaces = {c.surface for c in ACTIVE}
    assert len(ACTIVE) >= 500
    assert {
        "experiment",
        "system",
        "hardware",
        "model",
        "set",
        "hf-config",
        "request-trace",
        "serving",
        "dram-trace",
        "dram-spec",
        "asm",
        "disasm",
        "sweep",
        "store",
        "output",
        "pim",
        "plan",
        "list",
        "schema",
        "warmup",
        "speculative",
        "ianus",
        "compression",
        "systolic",
        "kv-pool",
        "flash",
    } <= surfaces
    assert PENDING <= {c.id for c in CASES}, "PENDING names a case that does not exist"


def _hang(signum, frame):
    raise TimeoutError(f"case still running after {WATCHDOG_S} s")


@pytest.mark.parametrize("case", ACTIVE, ids=lambda c: c.id)
def test_bad_input_is_one_clean_error(case, tmp_path, monkeypatch, stores):
    monkeypatch.delenv("ATTNSIM_CONFIG_PATH", raising=False)
    monkeypatch.delenv("ATTNSIM_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    materialise(case, tmp_path, stores)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(WATCHDOG_S)
    try:
        outcome = run_case(case, tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert outcome.klass == "clean", f"{outcome.klass}: {outcome.detail}"


@pytest.mark.parametrize("case_id", ["experiment-non-utf8", "dram-trace-bad-hex", "store-show-text-file"])
def test_the_real_command_line_agrees(case_id, tmp_path, stores):
    """The in-process runner sees what a user sees: `python -m attnsim ...` exits 2 with one error line."""
    case = next(c for c in CASES if c.id == case_id)
    work = materialise(case, tmp_path, stores)
    r = subprocess.run(
        [sys.executable, "-m", "attnsim", *case.argv], cwd=work, capture_output=True, text=True, timeout=300
    )
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert all(n in lines[0] for n in case.names)
