"""The fast AttAcc channel build (isa/lower.py ``_attacc_channel_fast``: items' records concatenated, rows renumbered)
and the vectorised ``assign_items`` give exactly the records / placements of the record-by-record reference."""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import Counter

import numpy as np

from attnsim.isa import lower
from attnsim.isa.lowered import PU, Org


def _assign_reference(tokens, n_channels, channels_per_item=1):
    """The loop form of ``assign_items`` (as it was before vectorising): slices per item, LPT placement."""
    slices = []
    for t in tokens:
        q, r = divmod(int(t), channels_per_item)
        slices += [q + 1] * r + [q] * (channels_per_item - r)
    slices = sorted((s for s in slices if s > 0), reverse=True)
    if not slices:
        return []
    if slices[0] == slices[-1]:
        q, r = divmod(len(slices), n_channels)
        return ([((slices[0],) * (q + 1), r)] if r else []) + ([((slices[0],) * q, n_channels - r)] if q else [])
    heap = [(0, c) for c in range(min(n_channels, len(slices)))]
    work = {c: [] for _, c in heap}
    for s in slices:
        load, c = heapq.heappop(heap)
        work[c].append(s)
        heapq.heappush(heap, (load + s, c))
    return sorted(Counter(tuple(w) for w in work.values()).items(), key=lambda kv: -sum(kv[0]))


def test_assign_items_matches_loop_reference():
    rng = random.Random(2)
    for _ in range(1500):
        n = rng.randint(0, 60)
        if rng.random() < 0.7:
            toks = [rng.choice([0, 1, 2, 3, 7, 64, 65, 100, 513]) for _ in range(n)]
        else:
            toks = [rng.randint(0, 9)] * n  # uniform: the closed form
        ch, cpi = rng.choice([1, 3, 8, 64]), rng.choice([1, 2, 4, 8])
        got = lower.assign_items(toks, ch, cpi)
        assert got == _assign_reference(toks, ch, cpi), (toks, ch, cpi)
        assert all(type(x) is int for sl, _ in got for x in sl)


def test_fast_channel_equals_record_build():
    # 37 rows: programs longer than a bank's rows wrap the row counter (row % rows) inside and across items
    org = Org(2, 2, 4, 4, 37, 32, 32)
    pu = PU(16, 32, 2, 0.5)
    rng = random.Random(1)
    checked = 0
    for phase in ("score", "softmax", "context"):
        for block_tokens in (0, 16, 48):  # contiguous and paged KV (a block's slice starts a new row)
            part = dataclasses.replace(lower.get_partition("attacc_bank", 1), kv_block_tokens=block_tokens)
            for _ in range(12):
                sl = tuple(rng.choice([1, 5, 33, 64, 100, 257, 1000, 2049]) for _ in range(rng.randint(1, 6)))
                for dhead, eb, group in ((128, 2.0, 1), (64, 1.0, 8), (128, 0.5, 4)):
                    ref = lower._attacc_channel(list(sl), phase, org, part, pu, dhead, eb, group)
                    ref_cmds = lower.attacc_commands(ref, org, pu)
                    prog, cmds = lower._attacc_channel_fast(sl, phase, org, part, pu, dhead, eb, group)
                    assert prog == ref and prog.opcode.dtype == ref.opcode.dtype
                    assert set(cmds) == set(ref_cmds)
                    for k in cmds:
                        assert np.array_equal(cmds[k], ref_cmds[k]) and cmds[k].dtype == ref_cmds[k].dtype, (k, sl)
                    checked += 1
    assert checked == 3 * 3 * 12 * 3
