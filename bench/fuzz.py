"""Fuzz the input readers for a given time, with the harnesses of tests/bad_inputs/harness.py (the same ones
tests/test_fuzz_readers.py runs with a bounded number of examples), and print executions and the distinct
failures (exception type + innermost repository frame) with one example each. Inputs: hypothesis examples
for the first 20 % of each reader's time (the seed corpus), then fast type-aware mutations of the corpus
(hypothesis generation costs more than most readers).

    python bench/fuzz.py --seconds 60                 # every reader, 60 s each
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

from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402

from bad_inputs.harness import HARNESSES, mutate  # noqa: E402


class _TimeUp(BaseException):
    pass


def fuzz(name: str, seconds: float, seed_share: float = 0.2, hypothesis_only: bool = False) -> tuple[int, dict]:
    """Run one harness for ``seconds``: hypothesis examples for ``seed_share`` of the time (all of it with
    ``hypothesis_only``), then :func:`mutate` rounds on that corpus. Returns (executions,
    {signature: (count, Failure, example)})."""
    h = HARNESSES[name]
    start = time.monotonic()
    seed_end = start + (seconds if hypothesis_only else seconds * seed_share)
    end = start + seconds
    failures: dict = {}
    corpus: list = []
    n = [0]

    def record(example):
        n[0] += 1
        f = h.check(example)
        if f is not None:
            count, first, ex = failures.get(f.signature, (0, f, example))
            failures[f.signature] = (count + 1, first, ex)

    @settings(max_examples=10 ** 9, deadline=None, database=None, phases=[Phase.generate], verbosity=Verbosity.quiet,
              suppress_health_check=list(HealthCheck))
    @given(h.strategy)
    def seeds(example):
        if time.monotonic() > seed_end:
            raise _TimeUp
        corpus.append(example)
        record(example)

    try:
        seeds()
    except _TimeUp:
        pass
    rng = random.Random(0)
    while corpus and time.monotonic() < end:
        for _ in range(50):
            x = rng.choice(corpus)
            for _ in range(rng.randrange(1, 4)):
                x = mutate(x, rng)
            record(x)
            if len(corpus) < 2000 and rng.random() < 0.05:
                corpus.append(x)
    return n[0], failures


def run_fuzz(readers: list[str], seconds: float, hypothesis_only: bool = False) -> int:
    total, found = 0, 0
    for name in readers:
        t0 = time.monotonic()
        n, failures = fuzz(name, seconds, hypothesis_only=hypothesis_only)
        dt = time.monotonic() - t0
        total += n
        found += len(failures)
        print(f"{name:11s} {n:8d} executions in {dt:6.1f} s ({n / dt:7.0f}/s), {len(failures)} distinct failures",
              flush=True)
        for (kind, loc), (count, f, ex) in sorted(failures.items(), key=lambda kv: -kv[1][0]):
            print(f"    {count:6d} x {kind} at {loc}: {f.message[:160]}")
            print(f"             e.g. {ex!r:.300}")
    print(f"total: {total} executions, {found} distinct failures")
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
    p.add_argument("--reader", action="append", choices=sorted(HARNESSES), help="reader to fuzz (repeatable; default all)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per reader")
    p.add_argument("--hypothesis-only", action="store_true", help="no mutation rounds: every input from hypothesis")
    p.add_argument("--cases", nargs="*", default=None, metavar="ID", help="classify the bad-input cases instead")
    a = p.parse_args(argv)
    if a.cases is not None:
        return run_cases(a.cases)
    return run_fuzz(a.reader or list(HARNESSES), a.seconds, a.hypothesis_only)


if __name__ == "__main__":
    sys.exit(main())
