"""Command engine: hand-derived cycles, PIM closed form, refresh, reference/walk/symmetry equivalence."""

import numpy as np
import pytest
from dram_streams import random_stream
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import F_AP, Op, cmds_from, expand_macros, load_dram_spec, make_cmds, raw_run, run_commands
from attnsim.hwmodels.dram.kernel import STAT_NAMES
from attnsim.hwmodels.dram.reference_oracle import reference_run

HBM3 = load_dram_spec("hbm3_6400")


def test_single_read_latency():
    t = HBM3.timing
    c = cmds_from(op=[Op.RD], pch=0, rank=0, bg=0, bank=0, row=7)
    r = run_commands(HBM3, c, refresh="none")
    assert r.cycles == t.nRCDRD + t.nCL + t.nBL  # ACT at 0, RD at nRCD, data done
    assert (r.row_misses, r.row_hits, r.row_conflicts) == (1, 0, 0)
    assert r.time_s == pytest.approx(r.cycles * 0.625e-9)


def test_same_bank_bursts_spaced_by_ccd_l_and_conflict_costs_row_cycle():
    t = HBM3.timing
    c = cmds_from(op=[Op.RD], pch=0, rank=0, bg=0, bank=0, row=1, repeat=8)
    assert run_commands(HBM3, c, refresh="none").cycles == t.nRCDRD + 7 * t.nCCD_L + t.nCL + t.nBL
    c2 = cmds_from(op=[Op.RD, Op.RD], pch=0, rank=0, bg=0, bank=0, row=[1, 2])
    r = run_commands(HBM3, c2, refresh="none")
    # second row: PRE at max(nRAS, nRCD + nRTP), ACT nRP later (and >= nRC after the first ACT)
    act2 = max(max(t.nRAS, t.nRCDRD + t.nRTP) + t.nRP, t.nRC)
    assert r.cycles == act2 + t.nRCDRD + t.nCL + t.nBL
    assert r.row_conflicts == 1


def test_two_bank_groups_interleave_at_bus_rate():
    t = HBM3.timing
    n = 16
    c = cmds_from(op=[Op.RD] * (2 * n), pch=0, rank=0, bg=[0, 1] * n, bank=0, row=1)
    c2 = cmds_from(op=[Op.ACT, Op.ACT], pch=0, rank=0, bg=[0, 1], bank=0, row=1)
    r = run_commands(HBM3, np.concatenate([c2, c]), refresh="none")
    # ACT bg0 at 0, ACT bg1 at nRRD_S; RD bg0 at nRCDRD, RD bg1 at nRRD_S + nRCDRD, then one burst per nBL
    # (nCCD_L = 2 x nBL is met by alternating bank groups)
    last = t.nRRD_S + t.nRCDRD + (2 * n - 2) * max(t.nCCD_S, t.nBL)
    assert r.cycles == last + t.nCL + t.nBL


def _pim_closed_form(spec, rows, macs):
    t, p = spec.timing, spec.pim
    mac_span = t.nRCDRD + (macs - 1) * p.nCCDAB
    # PREA at max(nRAS, last MAC + nRTP); next ACTAB nRP later and >= nRC after the previous one
    period = max(max(mac_span + t.nRTP, t.nRAS) + t.nRP, t.nRC)
    return (rows - 1) * period + mac_span + t.nCL + t.nBL


@pytest.mark.parametrize("name", ["hbm3_5200_pim", "hbm3_5200_pim_npc"])
def test_allbank_pim_matches_closed_form(name):
    spec = load_dram_spec(name)
    rows, macs = 20, 32
    c = cmds_from(op=[Op.MACAB] * rows, row=np.arange(rows) % 7 + 1, repeat=macs, flags=F_AP)
    r = run_commands(spec, c, refresh="none", multiplicity=16)
    assert r.cycles == _pim_closed_form(spec, rows, macs)
    banks = spec.banks_per_channel * 16
    assert r.pim_bytes == rows * macs * banks * 32  # banks x bytes per column per MACAB
    assert r.counts["bank_acts"] == rows * banks


def test_pim_power_constraint_ratio_and_refresh_overhead():
    pc, npc = load_dram_spec("hbm3_5200_pim"), load_dram_spec("hbm3_5200_pim_npc")
    rows, macs = 400, 32
    c = cmds_from(op=[Op.MACAB] * rows, row=np.arange(rows) % 5 + 1, repeat=macs, flags=F_AP)
    res = {}
    for s in (pc, npc):
        base = _pim_closed_form(s, rows, macs)
        r = run_commands(s, c)  # with all-bank refresh
        frac = s.timing.nRFC / s.timing.nREFI
        # refresh steals ~nRFC per nREFI (plus re-activation of the interrupted row)
        assert base / (1 - frac) * 0.98 <= r.cycles <= base / (1 - frac) * 1.06
        res[s.name] = base
    t = pc.timing
    expect = (t.nRCDRD + 31 * 6 + t.nRTP + t.nRP) / (t.nRCDRD + 31 * 4 + t.nRTP + t.nRP)
    assert res["hbm3_5200_pim"] / res["hbm3_5200_pim_npc"] == pytest.approx(expect, rel=0.01)
    assert 1.3 < expect < 1.5  # ideal 6/4 = 1.5 diluted by the ACT/PRE overhead per row


def test_perbank_refresh_pulls_in_a_round_for_allbank_commands():
    """HBM3-PIM has nRFCpb 260 > nREFIpb 159 (AttAcc's nRFCSB / nREFISB, pim_dram.md): per-bank refreshes walked one
    per nREFIpb always keep some bank of a rank refreshing, so an ACTAB/MACAB over every bank never found a window
    and the kernel looped forever (4 ranks per channel here: 2 pseudo-channels x 2 SIDs). A command over several
    banks now pulls in the rank's round (each bank once, nRREFD apart): it finishes, every bank is still refreshed
    once per round of 16 x nREFIpb, and the stream pays one round per 16 x nREFIpb."""
    spec = load_dram_spec("hbm3_5200_pim")
    t = spec.timing
    assert t.nRFCpb > t.nREFIpb
    rows, macs = 40, 32
    c = cmds_from(op=[Op.MACAB] * rows, row=np.arange(rows) % 5 + 1, repeat=macs, flags=F_AP)
    pb = run_commands(spec, c, refresh="pb")
    ab = run_commands(spec, c, refresh="ab")
    base = _pim_closed_form(spec, rows, macs)
    ng = spec.banks_per_rank  # one bank per REFpb on HBM3 (nREFI / nREFIpb = 32 > 16)
    rnd = ng * t.nREFIpb  # cycles between two refreshes of one bank
    ranks = spec.org.ranks * spec.org.pseudo_channels
    # the rounds of a rank start at its dues nREFIpb, nREFIpb + rnd, ... up to the stream's end (tail included)
    n_rounds = (pb.cycles - t.nREFIpb) // rnd + 1
    assert pb.refreshes == ranks * ng * n_rounds
    # each round blocks the banks for 15 x nRREFD + nRFCpb, then the interrupted row is opened again (<= nRC)
    per_round = (ng - 1) * t.nRREFD + t.nRFCpb
    assert base + (n_rounds - 1) * per_round <= pb.cycles <= base + n_rounds * (per_round + t.nRC + t.nRP)
    # a REFab (nRFC 456 per nREFI 5070) costs an all-bank stream less than 16 REFpb (425 per 2544)
    assert ab.cycles < pb.cycles


def test_allbank_refresh_fraction_on_long_read_stream():
    # two bank groups streaming at bus rate: achieved/peak -> 1 - nRFC/nREFI (+ reopen cost)
    t = HBM3.timing
    n = 4000
    c = cmds_from(op=[Op.RD] * n, pch=0, rank=0, bg=np.arange(n) % 4, bank=0, row=1)
    r = run_commands(HBM3, c)
    ideal = n * t.nBL
    assert r.refreshes >= 1
    assert ideal / (1 - t.nRFC / t.nREFI) <= r.cycles <= ideal / (1 - t.nRFC / t.nREFI) * 1.05


def test_bandwidth_never_exceeds_peak():
    rng = np.random.default_rng(0)
    for _ in range(20):
        c = random_stream(rng, HBM3, 40, channels=3)
        r = run_commands(HBM3, c)
        if r.cycles:
            assert r.bytes / r.time_s <= HBM3.peak_bandwidth_gbps * 1e9 * 3 / 16 + 1e-6


def test_symmetric_channels_equal_full_simulation():
    spec = load_dram_spec("hbm3_5200_pim")
    rng = np.random.default_rng(3)
    one = random_stream(rng, spec, 30, pim=True, channels=1)
    full = np.repeat(one, 4)  # record j of channel i at position 4 j + i: channels interleaved
    full["ch"] = np.tile(np.arange(4), 30)
    a = run_commands(spec, one, multiplicity=4)
    b = run_commands(spec, full)
    assert a.cycles == b.cycles
    for k in a.counts:
        assert a.counts[k] == b.counts[k]
    for k in a.energy_j:
        assert a.energy_j[k] == pytest.approx(b.energy_j[k])


def _compare(spec, c, mode):
    a, sa = raw_run(spec, c, mode)
    b, sb = reference_run(spec, c, mode)
    w, sw = raw_run(spec, expand_macros(c), mode)
    assert np.array_equal(a, b), (a, b)
    assert np.array_equal(sa, sb), [(n, x, y) for n, x, y in zip(STAT_NAMES, sa.sum(0), sb.sum(0)) if x != y]
    assert np.array_equal(a, w)
    assert np.array_equal(sa, sw)


def _short_refresh(spec):
    t = spec.timing.model_copy(update=dict(nREFI=400, nRFC=100, nREFIpb=100, nRFCpb=40))
    return spec.model_copy(update=dict(timing=t))


SPECS = {n: _short_refresh(load_dram_spec(n)) for n in ("hbm3_5200_pim", "lpddr5_6400", "ddr5_4800", "gddr6_aim")}


@settings(max_examples=250, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(sorted(SPECS)), mode=st.sampled_from(["ab", "pb", "none"]))
def test_engine_equals_reference_and_walk(seed, name, mode):
    """Numba engine == plain-Python reference (history formulation, per-burst walk) == fine-grained walk."""
    spec = SPECS[name]
    c = random_stream(np.random.default_rng(seed), spec, 20, pim=spec.pim is not None, channels=2)
    _compare(spec, c, mode)


def test_engine_equals_reference_many_streams():
    n = 0
    for name, spec in SPECS.items():
        for seed in range(200):
            c = random_stream(np.random.default_rng(10_000 + seed), spec, 16, pim=spec.pim is not None, channels=2)
            _compare(spec, c, ("ab", "pb", "none")[seed % 3])
            n += 1
    assert n == 800


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_more_row_hits_never_slower(seed):
    rng = np.random.default_rng(seed)
    n = 30
    c = cmds_from(
        op=np.where(rng.random(n) < 0.7, Op.RD, Op.WR).astype(np.uint8),
        pch=rng.integers(0, 2, n),
        rank=rng.integers(0, 2, n),
        bg=rng.integers(0, 4, n),
        bank=rng.integers(0, 4, n),
        row=rng.integers(0, 4, n),
        repeat=rng.integers(1, 4, n),
    )
    # pointwise more hits: on a random subset of banks every access goes to one row, so each access of
    # those banks is a hit (or the first access), while every other bank's accesses are unchanged
    hits = c.copy()
    keys = list(zip(c["pch"], c["rank"], c["bg"], c["bank"]))
    chosen = {k for k in set(keys) if rng.random() < 0.5}
    for i, k in enumerate(keys):
        if k in chosen:
            hits["row"][i] = 0
    a = run_commands(HBM3, c, refresh="none")
    b = run_commands(HBM3, hits, refresh="none")
    assert b.row_hits >= a.row_hits
    assert b.cycles <= a.cycles


def test_bad_records_raise_config_error():
    c = make_cmds(2)
    c["op"] = [Op.RD, 99]
    c["pch"] = 0
    c["rank"] = 0
    c["bg"] = 0
    c["bank"] = 0
    with pytest.raises(ConfigError, match="record 1.*unknown op"):
        run_commands(HBM3, c)
    c = cmds_from(op=[Op.RD], pch=0, rank=0, bg=0, bank=-1)
    with pytest.raises(ConfigError, match="record 0 \\(RD\\).*bank must be >= 0"):
        run_commands(HBM3, c)
    c = cmds_from(op=[Op.ACTAB], row=HBM3.org.rows)
    with pytest.raises(ConfigError, match="row"):
        run_commands(HBM3, c)
    with pytest.raises(ConfigError, match="CMD_DTYPE"):
        run_commands(HBM3, np.zeros(3))


def test_buf_fix_barrier_mode():
    spec = load_dram_spec("gddr6_aim")
    t, p = spec.timing, spec.pim
    c = cmds_from(
        op=[Op.BUF, Op.FIX, Op.BARRIER, Op.MODE, Op.FIX], pch=0, repeat=[8, 1, 1, 1, 1], cycles=[0, 100, 0, 0, 7]
    )
    r = run_commands(spec, c, refresh="none")
    unit = max(t.nBL, t.nCCD_S)
    # BUF (8 units) and FIX overlap from cycle 0/0; barrier at 100; mode switch; FIX 7
    assert r.cycles == max(8 * unit, 100) + p.mode_switch_cycles + 7
