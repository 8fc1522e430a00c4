"""The sub-result cache: canonical keys, disk sharing across processes, hit counting."""

import multiprocessing as mp

import numpy as np
import pytest

from attnsim.core import cache


def test_keys_are_canonical_and_type_aware():
    k = cache.cache_key
    assert k({"a": 1, "b": [2, 3]}) == k({"b": [2, 3], "a": 1})  # mapping order does not matter
    assert len({k(1), k(1.0), k("1"), k(True), k(None), k([1]), k((1,))}) == 6  # list == tuple by design
    assert k(np.arange(4)) == k(np.arange(4)) != k(np.arange(4).astype(np.int32)) != k(np.arange(5))
    assert k(0.1) != k(0.30000000000000004 - 0.2)  # floats hashed exactly (0.10000000000000003)
    with pytest.raises(TypeError):
        k(object())


def _worker(d, q):
    import os

    os.environ[cache.ENV] = d
    cache.reset()
    calls = []
    v = cache.cached(("shared", 1), lambda: calls.append(1) or np.full(3, 7.0))
    q.put((cache.stats(), len(calls), v.tolist()))


def test_entries_are_shared_across_processes(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    cache.reset()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    for expect_miss in (1, 0):  # the first process computes, the second finds it on disk
        p = ctx.Process(target=_worker, args=(str(tmp_path), q))
        p.start()
        stats, calls, v = q.get(timeout=30)
        p.join()
        assert calls == expect_miss and stats == {"hits": 1 - expect_miss, "misses": expect_miss}
        assert v == [7.0] * 3
    assert len(list(tmp_path.glob("*/*.json"))) == 1 and not list(tmp_path.glob("*/.tmp-*"))


def test_in_process_memo_and_off_switch(monkeypatch):
    monkeypatch.delenv(cache.ENV, raising=False)
    cache.reset()
    n = []
    for _ in range(3):
        assert cache.cached(("m", 2), lambda: n.append(1) or 5) == 5
    assert len(n) == 1 and cache.stats() == {"hits": 2, "misses": 1}
    assert cache.hit_rate(2, 1) == pytest.approx(2 / 3)
    monkeypatch.setenv(cache.ENV, "off")
    cache.cached(("m", 2), lambda: n.append(1) or 5)
    assert len(n) == 2
