"""DRAMsim3's two-level queues (hwmodels/dram/sched_cmdqueue.py, the ``dramsim3`` controller preset): a hand-derived
small case, and the emitted command stream replaying to the same cycles."""

import dataclasses

import numpy as np
import pytest

from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram import raw_run, simulate_requests
from attnsim.hwmodels.dram import rules as RL
from attnsim.hwmodels.dram import sched_cmdqueue as CQ
from attnsim.hwmodels.dram.engine import timing_vector
from attnsim.hwmodels.dram.streams import MAPPING, dramsim3_spec, make_stream


def _addr(org, bank, row):
    """Byte address of (rank 0, bank group 0, bank ``bank``, row, column 0) in the Pc Ra Bg Ba Ro Co mapping."""
    return (bank * org.rows + row) * org.columns * org.burst_bytes


def _with_rules(name, **kw):
    RL.PRESETS[name] = dataclasses.replace(RL.PRESETS["dramsim3"], **kw)


# DRAMsim3 @ 2981759 built with cmake -DCMD_TRACE=ON, LPDDR4_8Gb_x16_2400.ini with channels = 1, address_mapping =
# chrabgbaroco, cmd_queue_size = 2, trans_queue_size = 4 / 3; `dramsim3main <ini> -c 300 -t <the 6 reads at cycle
# 0>`: its ch_0cmd.trace as (cycle, command, bank); every other field is rank 0, bank group 0.
_A, _P, _R = "activate", "precharge", "read"
_TAIL = [
    (34, _P, 0),
    (49, _A, 0),
    (64, _R, 0),
    (81, _P, 0),
    (96, _A, 0),
    (111, _R, 0),
    (128, _P, 0),
    (143, _A, 0),
    (158, _R, 0),
    (175, _P, 0),
    (190, _A, 0),
    (205, _R, 0),
]
DRAMSIM3_CMDS = {
    4: [(2, _A, 0), (10, _A, 1), (17, _R, 0), (25, _R, 1)] + _TAIL,
    3: [(2, _A, 0), (17, _R, 0), (19, _A, 1)] + _TAIL[:1] + [(35, _R, 1)] + _TAIL[1:],
}


@pytest.mark.parametrize("read_queue,act1_cycle", [(4, 10), (3, 19)])
def test_transaction_bypasses_a_full_command_queue(read_queue, act1_cycle):
    """Five reads to bank 0 (rows 0-4), then one to bank 1; command queues of 2 per bank. Per cycle DRAMsim3
    issues, then moves one transaction, then accepts one request (controller.cc:65-149, cpu.cc:73-90):
    r0 in at 0, moved at 1, its ACT at 2; r1 in at 1, moved at 2 (bank 0's queue full); r2, r3, r4 in at 2-4.
    Read queue of 4: r5 in at 5, moved at 6 past r2-r4 (the oldest whose command queue has room), its ACT at
    2 + nRRD_L = 10. Read queue of 3: r5 waits for room: r0's RD at 2 + nRCD = 17 frees a slot, r2 moves
    and r5 enters at 17, moves at 18, ACT at 19 (bank 0 has nothing legal: r1's PRE waits for the hit r2).
    The whole command stream is DRAMsim3's own (its command trace, DRAMSIM3_CMDS)."""
    spec = dramsim3_spec("lpddr4")
    t = spec.timing
    assert (t.nRRD_L, t.nRCDRD) == (8, 15)  # the hand derivation's timings
    o = spec.org
    addr = np.array([_addr(o, 0, r) for r in range(5)] + [_addr(o, 1, 0)], np.uint64)
    _with_rules("ds3_test", queue_entries=read_queue, cmd_queue_entries=2)
    try:
        r = simulate_requests(spec, addr, False, mapping=MAPPING, controller="ds3_test", refresh="none", emit=True)
    finally:
        del RL.PRESETS["ds3_test"]
    c = r.commands
    acts = c[c["op"] == 1]
    assert int(acts["arrival"][0]) == 2 and int(acts["bank"][0]) == 0
    b1 = acts[acts["bank"] == 1]
    assert len(b1) == 1 and int(b1["arrival"][0]) == act1_cycle
    first_rd = c[c["op"] == 4][0]
    assert int(first_rd["arrival"]) == 2 + t.nRCDRD and int(first_rd["bank"]) == 0
    assert r.row_hits + r.row_misses + r.row_conflicts == 6 and r.counts["rd_bursts"] == 6
    names = {1: _A, 2: _P, 4: _R}
    assert [(int(x["arrival"]), names[int(x["op"])], int(x["bank"])) for x in c] == DRAMSIM3_CMDS[read_queue]


@pytest.mark.parametrize("nacc,want", [(3, (1, CQ.KIND_COL)), (4, (0, CQ.KIND_PRE)), (9, (0, CQ.KIND_PRE))])
def test_row_hit_limit_lets_a_waiting_miss_close_the_row(nacc, want):
    """ArbitratePrecharge (command_queue.cc:77-110): the bank's queue holds [miss to row 1, hit to row 0] with row
    0 open and both commands legal. The queue order puts the miss's PRE first, but it is held back while a hit
    is queued, unless the row already served ROW_HIT_LIMIT = 4 column commands."""
    spec = dramsim3_spec("lpddr4")
    T = timing_vector(spec, "none", rules=RL.PRESETS["dramsim3"])
    BS, GS, RS, US, CS, ST = K.new_state(1, T)
    BS[0, K.B_ROW] = 0
    BS[0, K.B_NACC] = nacc
    kq = np.zeros(2, np.int64)
    rowq = np.array([1, 0], np.int64)
    wq = np.zeros(2, np.int64)
    Q = np.array([[0, 1]], np.int64)
    drank = np.full(2 * US.shape[0], -1, np.int64)
    lastpre = np.full(RS.shape[0], K.NEG, np.int64)
    j, kind, e = CQ._pick(0, 2, Q, 100, kq, rowq, wq, T, BS, GS, RS, US, CS, 0, drank, 0, lastpre)
    assert (j, kind) == want and e <= 100
    j, kind, e = CQ._pick(0, 1, Q[:, 1:], 100, kq, rowq, wq, T, BS, GS, RS, US, CS, 0, drank, 0, lastpre)  # hit alone
    assert (j, kind) == (0, CQ.KIND_COL)


@pytest.mark.parametrize("std,kind", [("lpddr4", "mixed"), ("hbm2", "mixed"), ("lpddr4", "seq")])
def test_emitted_commands_replay_to_same_cycles(std, kind):
    spec = dramsim3_spec(std)
    spec = spec.model_copy(update=dict(controller="dramsim3", timing=spec.timing.model_copy(update=dict(nREFI=1200))))
    addr, w = make_stream(spec.org, kind, 3000, 2)
    for page in ("open", "closed"):
        r = simulate_requests(spec, addr, w, mapping=MAPPING, refresh="ab", emit=True, page=page)
        cyc, _ = raw_run(spec, r.commands, refresh="none")
        assert int(cyc.max()) == r.cycles, page
        assert r.row_hits + r.row_misses + r.row_conflicts == 3000
        assert r.counts["rd_bursts"] + r.counts["wr_bursts"] == 3000
        assert r.refreshes >= r.cycles // 1200 - 1


def test_rank_switch_and_ppd_timings_refused_outside_the_dramsim3_preset():
    """timing.nRTRS / nPPD only act in the two-level queue kernel: under another preset they are refused."""
    import numpy as np
    import pytest

    from attnsim.core.config import ConfigError
    from attnsim.hwmodels.dram.controller import simulate_requests

    spec = dramsim3_spec("lpddr4")  # nRTRS 1, nPPD 2
    addr = np.arange(64, dtype=np.int64) * 64
    for preset in ("ideal", "ramulator2"):
        with pytest.raises(ConfigError, match=r"timing\.nRTRS: 0 unless the controller preset is dramsim3"):
            simulate_requests(spec, addr, np.zeros(64, bool), controller=preset)
    assert simulate_requests(spec, addr, np.zeros(64, bool), controller="dramsim3") is not None
