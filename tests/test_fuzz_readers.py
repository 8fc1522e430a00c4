"""Fuzz every input reader with hypothesis (issue 10): config YAML loading + validation, ``--set``, HF
config.json, request traces, DRAM traces and specs, asm, disasm, sweep files and stores. Each input must give
a result or one clean one-line ConfigError, never another exception. The harnesses live in
tests/bad_inputs/harness.py; ``python bench/fuzz.py`` runs them for a given time. Under CI (CI=true, see
conftest.py) the examples are derandomized."""

import pytest
from bad_inputs.harness import HARNESSES
from hypothesis import HealthCheck, given, settings

EXAMPLES = {"config": 25, "store": 25, "sweep": 30}  # the slow ones (files + full validation per example)
DEFAULT_EXAMPLES = 60


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_reader_gives_a_result_or_a_clean_error(name):
    h = HARNESSES[name]

    @settings(
        max_examples=EXAMPLES.get(name, DEFAULT_EXAMPLES),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(h.strategy)
    def run(example):
        f = h.check(example)
        assert f is None, f"{f.kind} at {f.location}: {f.message}"

    run()


def test_the_harness_reports_a_crash_and_passes_a_clean_error():
    """The harness itself: a reader that raises KeyError is a failure, one that raises ConfigError is not."""
    from bad_inputs.harness import Harness

    from attnsim.core.config import ConfigError

    def crash(x):
        raise KeyError(x)

    def refuse(x):
        raise ConfigError("expected a number, got 'x'", file="f.yaml", key="a.b")

    class TwoLines(ConfigError):
        def __str__(self):
            return "f.yaml: bad\nvalue"

    def refuse_two_lines(x):
        raise TwoLines("bad value", file="f.yaml")

    assert Harness("crash", None, crash).check(1).kind == "KeyError"
    assert Harness("refuse", None, refuse).check(1) is None
    assert Harness("two", None, refuse_two_lines).check(1).kind == "multi-line ConfigError"
