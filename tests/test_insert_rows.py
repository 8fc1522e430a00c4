"""mapper/base.py ``insert_rows`` (column by column) builds exactly the trace of the row-by-row reference
(every row as a dict, then ``OpTrace.from_rows``): same columns, dtypes, values, index map and added mask."""

from __future__ import annotations

import numpy as np

from attnsim.mapper import base
from attnsim.studies.serve.run import quick_pool
from attnsim.workloads.optrace import OpTrace
from attnsim.workloads.trace import build_trace


def _reference(trace, before=None, after=None):
    before, after = before or {}, after or {}
    out, old_to_new, added = [], [], []
    for i, r in enumerate(trace.rows()):
        for extra, is_self in ((before.get(i, []), False), ([r], True), (after.get(i, []), False)):
            for row in extra:
                if is_self:
                    old_to_new.append(len(out))
                out.append(row)
                added.append(not is_self)
    kw = dict(phase=trace.phase, model=trace.model, tp=trace.tp, groups=trace.groups, meta=dict(trace.meta))
    new = OpTrace.from_rows(out, query_tokens=trace.query_tokens, context_lens=trace.context_lens, **kw)
    return new, np.array(old_to_new, dtype=np.int64), np.array(added, dtype=bool)


def test_insert_rows_equals_row_by_row_reference():
    pool, _, _ = quick_pool(system="attacc", model="llama2-70b", scenario={"prompt_len": 1024, "output_len": 256})
    co = pool.coster
    for phase, ctx, q in (("prefill", [100, 300, 17], [1, 300, 17]), ("decode", [5, 9, 1000], [1, 1, 1])):
        tr = build_trace(co.model, co.sc, phase, tp=co.tp, context_lens=ctx, query_tokens=q)
        first = {0: [base.transfer_row("x", {"layer_group": 0, "count": 2}, 5.0)]}
        last = {len(tr) - 1: [base.transfer_row("y", {"layer_group": -1, "count": 1}, 7.0)] * 2}
        cases = [(None, base.kv_writeback_rows(tr)), base.attention_io_rows(tr, 2.0), (None, None), (first, last)]
        for before, after in cases:
            want, got = _reference(tr, before, after), base.insert_rows(tr, before, after)
            assert np.array_equal(want[1], got[1]) and want[1].dtype == got[1].dtype
            assert np.array_equal(want[2], got[2])
            assert set(want[0].cols) == set(got[0].cols)
            for k, col in want[0].cols.items():
                assert col.dtype == got[0].cols[k].dtype and np.array_equal(col, got[0].cols[k]), k
            assert want[0].meta == got[0].meta and want[0].groups == got[0].groups
            n_added = sum(len(v) for d in (before or {}, after or {}) for v in d.values())
            assert int(got[2].sum()) == n_added and len(got[0]) == len(tr) + n_added
