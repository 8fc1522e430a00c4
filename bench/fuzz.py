"""Fuzz the input readers for a given time, with the harnesses of tests/bad_inputs/harness.py (the same ones
tests/test_fuzz_readers.py runs with a bounded number of examples), and print executions and the distinct
failures (exception type + innermost repository frame) with one example each. Inputs: hypothesis examples
for the first 20 % of each reader's time (the seed corpus), then fast type-aware mutations of the corpus
(hypothesis generation costs more than most readers).

    python bench/fuzz.py --seconds 60                 # every reader, 60 s each
    nice -n 10 python bench/fuzz.py --seconds 20 --total 1000000   # the 1M-execution campaign (docs/robustness.md)
    python bench/fuzz.py --reader asm --seconds 300
    python bench/fuzz.py --cases [ID-SUBSTRING ...]   # classify the bad-input cases (clean / traceback / ...)

Exit status 1 if any failure was found.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bad_inputs.harness import HARNESSES, UNUSABLE, mutate  # noqa: E402
from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402


class _TimeUp(BaseException):
    pass


class ReaderState:
    """One reader's fuzzing state across passes: its corpus, executions and distinct failures."""

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.h = HARNESSES[name]
        self.corpus: list = []
        self.failures: dict = {}  # signature -> (count, first Failure, example)
        self.n = 0
        self.seconds = 0.0
        self.rng = random.Random(seed)

    @property
    def skipped(self) -> int:
        """Inputs the feed function could not build (not counted as executions)."""
        return UNUSABLE.get(self.name, 0)

    def record(self, example) -> None:
        before = self.skipped
        f = self.h.check(example)
        self.n += self.skipped == before
        if f is not None:
            count, first, ex = self.failures.get(f.signature, (0, f, example))
            self.failures[f.signature] = (count + 1, first, ex)

    def seed(self, seconds: float) -> None:
        """Hypothesis examples for ``seconds`` (they become the corpus)."""
        end = time.monotonic() + seconds

        @settings(
            max_examples=10**9,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
        )
        @given(self.h.strategy)
        def seeds(example):
            self.corpus.append(example)  # at least one seed, however slow the strategy's first example
            self.record(example)
            if time.monotonic() > end:
                raise _TimeUp

        t0 = time.monotonic()
        try:
            seeds()
        except _TimeUp:
            pass
        self.seconds += time.monotonic() - t0

    def mutate(self, seconds: float) -> None:
        """:func:`mutate` rounds on the corpus for ``seconds`` (5 % of the mutants join it, up to 2000)."""
        t0 = time.monotonic()
        end = t0 + seconds
        rng = self.rng
        while self.corpus and time.monotonic() < end:
            x = rng.choice(self.corpus)
            for _ in range(rng.randrange(1, 4)):
                x = mutate(x, rng)
            self.record(x)
            if len(self.corpus) < 2000 and rng.random() < 0.05:
                self.corpus.append(x)
        self.seconds += time.monotonic() - t0


def fuzz(name: str, seconds: float, seed_share: float = 0.2, hypothesis_only: bool = False) -> tuple[int, dict]:
    """Run one harness for ``seconds``: hypothesis examples for ``seed_share`` of the time (all of it with
    ``hypothesis_only``), then :func:`mutate` rounds on that corpus. Returns (executions,
    {signature: (count, Failure, example)})."""
    r = ReaderState(name)
    r.seed(seconds if hypothesis_only else seconds * seed_share)
    if not hypothesis_only:
        r.mutate(seconds * (1 - seed_share))
    return r.n, r.failures


def _report(r: ReaderState) -> None:
    print(
        f"{r.name:12s} {r.n:9d} executions in {r.seconds:7.1f} s ({r.n / max(r.seconds, 1e-9):7.0f}/s), "
        f"{len(r.failures)} distinct failures ({r.skipped} unusable mutants skipped)",
        flush=True,
    )
    for (kind, loc), (count, f, ex) in sorted(r.failures.items(), key=lambda kv: -kv[1][0]):
        print(f"    {count:6d} x {kind} at {loc}: {f.message[:160]}")
        print(f"             e.g. {ex!r:.300}")


def run_fuzz(
    readers: list[str],
    seconds: float,
    hypothesis_only: bool = False,
    total: int = 0,
    max_seconds: float = float("inf"),
    seed: int = 0,
) -> int:
    """Every reader for ``seconds`` (20 % hypothesis seeds, then mutations); then, until ``total`` executions
    in all (or ``max_seconds`` of wall time), more mutation passes of ``seconds`` x readers shared in proportion
    to each reader's rate (the fast readers carry most of the count; every reader gets at least 1 s a pass)."""
    states = [ReaderState(name, seed) for name in readers]
    t0 = time.monotonic()
    for r in states:
        r.seed(seconds if hypothesis_only else seconds * 0.2)
        if not hypothesis_only:
            r.mutate(seconds * 0.8)
        _report(r)
    passes = 1
    while not hypothesis_only and sum(r.n for r in states) < total and time.monotonic() - t0 < max_seconds:
        # a pass lasts seconds x readers; each reader's share follows its rate so far (at least 1 s), so the
        # fast readers (cache, dram_spec, disasm) carry the count while every reader keeps being fuzzed
        rates = [r.n / max(r.seconds, 1e-9) for r in states]
        budget = seconds * len(states)
        for r, rate in zip(states, rates):
            r.mutate(max(1.0, budget * rate / max(sum(rates), 1e-9)))
        passes += 1
        print(
            f"pass {passes}: {sum(r.n for r in states)} executions, "
            f"{sum(len(r.failures) for r in states)} distinct failures",
            flush=True,
        )
    if passes > 1:
        print("\nper reader, all passes:")
        for r in states:
            _report(r)
    n = sum(r.n for r in states)
    found = sum(len(r.failures) for r in states)
    print(
        f"total: {n} executions over {len(states)} readers in {time.monotonic() - t0:.0f} s, {found} distinct failures"
    )
    return 1 if found else 0


def run_cases(patterns: list[str]) -> int:
    from bad_inputs.cases import CASES
    from bad_inputs.runner import classify_all

    cases = [c for c in CASES if not patterns or any(p in c.id for p in patterns)]
    res = classify_all(cases, Path(tempfile.mkdtemp(prefix="attnsim-cases-")))
    per = collections.defaultdict(collections.Counter)
    for c in cases:
        o = res[c.id]
        per[c.surface][o.klass] += 1
        if o.klass != "clean":
            detail = o.detail.strip().splitlines()
            print(f"{o.klass:9s} {c.id}: {(detail[-1] if detail else '')[:200]}")
    classes = sorted({k for v in per.values() for k in v})
    print(f"\n{'surface':15s} {'cases':>5s} " + " ".join(f"{k:>9s}" for k in classes))
    for s, cnt in per.items():
        print(f"{s:15s} {sum(cnt.values()):5d} " + " ".join(f"{cnt[k]:9d}" for k in classes))
    tot = collections.Counter()
    for cnt in per.values():
        tot.update(cnt)
    print(f"{'total':15s} {sum(tot.values()):5d} " + " ".join(f"{tot[k]:9d}" for k in classes))
    return 0 if set(tot) <= {"clean"} else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--reader", action="append", choices=sorted(HARNESSES), help="reader to fuzz (repeatable; default all)"
    )
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per reader")
    p.add_argument("--hypothesis-only", action="store_true", help="no mutation rounds: every input from hypothesis")
    p.add_argument(
        "--total",
        type=int,
        default=0,
        help="keep fuzzing (mutation passes of --seconds per reader) until this many executions in all",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the mutation rounds (a second process: another seed)")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=float("inf"),
        help="with --total: start no pass after this many seconds of wall time",
    )
    p.add_argument("--cases", nargs="*", default=None, metavar="ID", help="classify the bad-input cases instead")
    a = p.parse_args(argv)
    if a.cases is not None:
        return run_cases(a.cases)
    return run_fuzz(a.reader or list(HARNESSES), a.seconds, a.hypothesis_only, a.total, a.max_seconds, a.seed)


if __name__ == "__main__":
    sys.exit(main())
