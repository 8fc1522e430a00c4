"""Each DRAM timing rule at its boundary, as Ramulator 2's tests/device_timings do: two commands to the engine, the
second issues exactly the named parameter after the first (its earliest legal cycle), not one cycle earlier.

The command engine issues in order, each command at its earliest legal cycle or its ``arrival`` (not-before cycle),
whichever is later. A pair (A, B) runs after an optional setup (rows opened long before); A carries arrival T0, so
it issues at T0 once every setup constraint has expired, and B's issue cycle minus T0 is the rule's gap.
B's issue cycle is the engine's last-issue register (kernel C_LAST). Setting B's arrival one cycle before the
boundary must not move it earlier (refused); one cycle after, B waits for its arrival.
Parameters: JEDEC names as in hwmodels/dram/spec.py (JESD238 HBM3, JESD79-5 DDR5, JESD209-5 LPDDR5); presets in
configs/hardware via load_dram_spec.
"""

import pytest

from attnsim.hwmodels.dram import Op, cmds_from, load_dram_spec
from attnsim.hwmodels.dram import kernel as K
from attnsim.hwmodels.dram.engine import check_cmds, timing_vector, walk

T0 = 2000  # > every setup constraint (nRC <= 111, nRFC <= 710 cycles in these presets), refresh off


def _issue_of_last(spec, cmds) -> int:
    """Issue cycle of the last command of ``cmds`` (the engine's C_LAST after the walk), refresh off."""
    check_cmds(spec, cmds)
    CS = walk(spec, cmds, timing_vector(spec, "none"))[4]
    return int(CS[0, K.C_LAST])


def _cmds(seq):
    """seq: (op, bg, bank, row, arrival) tuples on channel 0, pseudo-channel 0, rank 0 (bg/bank -1: all)."""
    ops, bgs, banks, rows, arr = zip(*seq)
    return cmds_from(
        op=list(ops), ch=0, pch=0, rank=0, bg=list(bgs), bank=list(banks), row=list(rows), arrival=list(arr)
    )


# rule -> (setup, A, [commands between A and B], B, gap(timing)); A gets arrival T0, the rest arrival 0
ACT, PRE, RD, WR = Op.ACT, Op.PRE, Op.RD, Op.WR
RULES = {
    # ACT -> RD / WR to the opened row
    "nRCDRD": ([], (ACT, 0, 0, 1), [], (RD, 0, 0, 1), lambda t: t.nRCDRD),
    "nRCDWR": ([], (ACT, 0, 0, 1), [], (WR, 0, 0, 1), lambda t: t.nRCDWR),
    # ACT -> PRE, same bank
    "nRAS": ([], (ACT, 0, 0, 1), [], (PRE, 0, 0, 0), lambda t: t.nRAS),
    # PRE -> ACT, same bank (opened long before T0: nRC and nRAS expired)
    "nRP": ([(ACT, 0, 0, 1)], (PRE, 0, 0, 0), [], (ACT, 0, 0, 2), lambda t: t.nRP),
    # ACT -> ACT, same bank, other row, PRE between at its earliest (nRAS): max(nRC, nRAS + nRP)
    "nRC": ([], (ACT, 0, 0, 1), [(PRE, 0, 0, 0)], (ACT, 0, 0, 2), lambda t: max(t.nRC, t.nRAS + t.nRP)),
    # ACT -> ACT, other bank group / same bank group
    "nRRD_S": ([], (ACT, 0, 0, 1), [], (ACT, 1, 0, 1), lambda t: t.nRRD_S),
    "nRRD_L": ([], (ACT, 0, 0, 1), [], (ACT, 0, 1, 1), lambda t: t.nRRD_L),
    # four ACTs to four bank groups, the fifth waits for the window: max(nFAW, 4 x nRRD_S)
    "nFAW": (
        [],
        (ACT, 0, 0, 1),
        [(ACT, 1, 0, 1), (ACT, 2, 0, 1), (ACT, 3, 0, 1)],
        (ACT, 0, 1, 1),
        lambda t: max(t.nFAW, 4 * t.nRRD_S),
    ),
    # RD -> RD, other / same bank group (rows open); the data bus also needs nBL between bursts
    "nCCD_S": ([(ACT, 0, 0, 1), (ACT, 1, 0, 1)], (RD, 0, 0, 1), [], (RD, 1, 0, 1), lambda t: max(t.nCCD_S, t.nBL)),
    "nCCD_L": ([(ACT, 0, 0, 1), (ACT, 0, 1, 1)], (RD, 0, 0, 1), [], (RD, 0, 1, 1), lambda t: max(t.nCCD_L, t.nBL)),
    "nCCD_L(WR)": ([(ACT, 0, 0, 1), (ACT, 0, 1, 1)], (WR, 0, 0, 1), [], (WR, 0, 1, 1), lambda t: max(t.nCCD_L, t.nBL)),
    # WR -> RD: from the end of the write burst (nCWL + nBL), other / same bank group
    "nWTR_S": ([(ACT, 0, 0, 1), (ACT, 1, 0, 1)], (WR, 0, 0, 1), [], (RD, 1, 0, 1), lambda t: t.nCWL + t.nBL + t.nWTR_S),
    "nWTR_L": ([(ACT, 0, 0, 1), (ACT, 0, 1, 1)], (WR, 0, 0, 1), [], (RD, 0, 1, 1), lambda t: t.nCWL + t.nBL + t.nWTR_L),
    # RD -> WR (bus turnaround)
    "nRTW": ([(ACT, 0, 0, 1), (ACT, 1, 0, 1)], (RD, 0, 0, 1), [], (WR, 1, 0, 1), lambda t: t.nRTW),
    # RD -> PRE, WR -> PRE (write recovery from the end of the burst), same bank
    "nRTP": ([(ACT, 0, 0, 1)], (RD, 0, 0, 1), [], (PRE, 0, 0, 0), lambda t: t.nRTP),
    "nWR": ([(ACT, 0, 0, 1)], (WR, 0, 0, 1), [], (PRE, 0, 0, 0), lambda t: t.nCWL + t.nBL + t.nWR),
    # all-bank refresh -> ACT
    "nRFC": ([], (Op.REF, -1, -1, 0), [], (ACT, 0, 0, 1), lambda t: t.nRFC),
}
PRESETS = ["hbm3_6400", "ddr5_4800", "lpddr5_6400"]


def _sequence(rule, b_arrival=0):
    setup, a, mid, b, _ = RULES[rule]
    seq = [(*s, 0) for s in setup] + [(*a, T0)] + [(*m, 0) for m in mid] + [(*b, b_arrival)]
    return _cmds(seq), len(setup)


@pytest.fixture(scope="module", params=PRESETS)
def spec(request):
    return load_dram_spec(request.param)


@pytest.mark.parametrize("rule", list(RULES))
def test_second_command_issues_exactly_at_the_rule(spec, rule):
    gap = RULES[rule][4](spec.timing)
    cmds, n_setup = _sequence(rule)
    if cmds["op"][n_setup] != Op.REF:  # REF does not move the last-issue register; its arrival is its cycle
        assert _issue_of_last(spec, cmds[: n_setup + 1]) == T0, "A must issue at T0 (setup constraints expired)"
    assert _issue_of_last(spec, cmds) == T0 + gap, (spec.name, rule, gap)
    # one cycle before the boundary is refused: B asked at T0 + gap - 1 still issues at T0 + gap
    early, _ = _sequence(rule, b_arrival=T0 + gap - 1)
    assert _issue_of_last(spec, early) == T0 + gap
    late, _ = _sequence(rule, b_arrival=T0 + gap + 1)
    assert _issue_of_last(spec, late) == T0 + gap + 1


def test_named_parameter_binds_where_the_rule_says_max():
    """The max() rules above test the named parameter only where it is the larger term; say where that holds
    (values: configs/hardware/*.yaml timing blocks)."""
    h, d, lp = (load_dram_spec(n).timing for n in PRESETS)
    assert h.nRC > h.nRAS + h.nRP  # HBM3: 72 > 45 + 26 = 71, nRC binds
    assert h.nFAW > 4 * h.nRRD_S and d.nFAW > 4 * d.nRRD_S  # 24 > 16; 48 > 32
    for t in (h, d, lp):
        assert t.nCCD_L > t.nBL  # 4 > 2, 12 > 8, 4 > 2
        assert t.nRTW > t.nCL + t.nBL - t.nCWL  # the turnaround, not the data bus, binds RD -> WR


@pytest.mark.parametrize("name", ["hbm3_5200_pim", "hbm3_5200_pim_npc"])
def test_allbank_mac_to_mac_is_nccdab(name):
    spec = load_dram_spec(name)
    # MACAB (all banks, row opened by an implicit ACTAB) then MACAB to the same row: nCCDAB apart
    cmds = cmds_from(op=[Op.MACAB, Op.MACAB], ch=0, row=[1, 1], arrival=[T0, 0])
    first = _issue_of_last(spec, cmds[:1])
    assert first >= T0
    assert _issue_of_last(spec, cmds) == first + spec.pim.nCCDAB
    early = cmds.copy()
    early["arrival"][1] = first + spec.pim.nCCDAB - 1
    assert _issue_of_last(spec, early) == first + spec.pim.nCCDAB


def test_refpb_to_act_is_nrfcpb():
    spec = load_dram_spec("hbm3_6400")
    cmds = _cmds([(Op.REFPB, 0, 0, 0, T0), (ACT, 0, 0, 1, 0)])
    assert _issue_of_last(spec, cmds) == T0 + spec.timing.nRFCpb  # 320 cycles (hbm3_6400.yaml)
