"""NeuPIMs' NPU PIM-instruction issue port (npu_issue_per_ns, comp_instructions; isa/lower_newton.py): the
instruction counts from the tile shapes (casys-kaist/NeuPIMs e51a4af NeuPIMSLogitSoftmax.cc / NeuPIMSAttend.cc),
the channel-by-channel issue order, and the time an in-order port of one instruction per cycle imposes."""

import csv
from pathlib import Path

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.isa.lower_newton import (
    channel_program,
    lower_newton,
    placement_load,
    port_arrivals,
    record_instructions,
    request_channels,
)

DATA = Path(__file__).parent / "data" / "neupims"


def assumption(name):
    """An assumption of the NeuPIMs reproduction (configs/reproductions/neupims/reference.yaml)."""
    from attnsim.studies import reproduce

    (a,) = [a for a in reproduce.read_spec(reproduce.find("neupims")).assumptions if a.name == name]
    return a


@pytest.fixture
def npupim(tmp_path):
    """The built-in neupims_hbm2_pim with the reproduction's npu_issue_port assumption applied (the PIM of the
    npu+pim rows: validate applies the same keys as --set overrides), as a file for `attnsim pim run`."""
    import yaml

    hw = load_yaml(find_config("hardware", "neupims_hbm2_pim"))
    hw.update({k.split(".", 2)[2]: v for k, v in assumption("npu_issue_port").set.items()})
    p = tmp_path / "neupims_hbm2_pim_port.yaml"
    p.write_text(yaml.safe_dump(hw))
    return str(p)


def pim(**over):
    hw = load_yaml(find_config("hardware", "neupims_hbm2_pim"))
    hw.update(over)
    return registry.build(hw, file="neupims_hbm2_pim")


DEV = pim()
KW = dict(heads=8, dhead=128, group=1, elem_bytes=2.0)  # GPT-3 7B at TP 4: 8 heads of 128 per device


def _instr(phase, t, mode):
    p = channel_program([t], phase, DEV.org, DEV.pu, **KW)
    return int(record_instructions(p, mode).sum())


def test_instruction_counts_from_the_tile_shapes():
    # K GEMV, 64 tokens: E = 1024 over 512-element rows = 2 chunks (GWRITE each); ceil(64 / 32 banks) = 2 tiles per
    # chunk, each a P_HEADER + 4 heads x (ceil(128 / 16) = 8 COMPs + READRES) = 37 instructions, fused 1 + 4 = 5
    assert _instr("score", 64, "per_comp") == 2 * (1 + 2 * (1 + 4 * (8 + 1))) == 150
    assert _instr("score", 64, "fused") == 2 * (1 + 2 * 5) == 22
    # V GEMV, 600 tokens: per head 2 chunks of a row's 512 tokens (GWRITE each), ceil(128 / 32) = 4 tiles per chunk,
    # a tile P_HEADER + COMPs (512 / 16 = 32; last chunk ceil(88 / 16) = 6) + READRES
    assert _instr("context", 600, "per_comp") == 8 * ((1 + 4 * (1 + 32 + 1)) + (1 + 4 * (1 + 6 + 1))) == 1360
    assert _instr("context", 600, "fused") == 8 * 2 * (1 + 4 * 2) == 144
    with pytest.raises(ConfigError, match="comp_instructions"):
        _instr("score", 64, "per_head")


def test_artefact_instruction_total_on_its_batch():
    """The artefact's batch (clb-0 seq_len, its own channels): the per-COMP instructions of the two GEMVs are the
    374,280 + 358,832 an instrumented npu+pim e51a4af counted through its port (run here, reference.yaml)."""
    rows = list(csv.DictReader(open(DATA / "clb0_attnsim_greedy.csv")))
    lens = [int(r["seq_len"]) for r in rows]
    chans = [int(x) for x in assumption("trace_placement_clb0").set["hardware.neupims_hbm2_pim.channel_assignment"]]
    tot = {}
    for phase in ("score", "context"):  # the port path's programs (lower_newton), without the engine records
        progs = [
            channel_program([t for t, c in zip(lens, chans) if c == ch], phase, DEV.org, DEV.pu, **KW)
            for ch in sorted(set(chans))
        ]
        tot[phase] = port_arrivals(progs, 1.0, "per_comp")[1]
    assert tot == {"score": 374280, "context": 358832}


def test_port_issues_channel_by_channel_and_bounds_the_time():
    lens = [300, 40, 700, 120, 5, 260]
    chans = [2, 0, 2, 1, 0, 1]
    low = lower_newton(
        "score",
        lens,
        n_channels=32,
        org=DEV.org,
        pu=DEV.pu,
        assignment=chans,
        port_interval_cycles=1.0,
        comp_instructions="per_comp",
        **KW,
    )
    # one program per used channel, ascending, its requests in batch order
    per = [[t for t, c in zip(lens, chans) if c == ch] for ch in (0, 1, 2)]
    n = [sum(_instr("score", t, "per_comp") for t in p) for p in per]
    assert low.meta["npu_instructions"] == sum(n) and list(low.multiplicity) == [1, 1, 1]
    firsts = [int(c["arrival"][0]) for c in low.commands]
    assert firsts == [0, n[0], n[0] + n[1]]  # channel k starts after every instruction of channels < k
    assert all(np.all(np.diff(c["arrival"][c["arrival"] > 0]) >= 1) for c in low.commands)  # in order, 1/cycle
    t_port = DEV.run(low)[0] / DEV.tck_s
    free = lower_newton("score", lens, n_channels=32, org=DEV.org, pu=DEV.pu, assignment=chans, **KW)
    t_free = DEV.run(free)[0] / DEV.tck_s
    last_alone = (
        DEV.run(
            lower_newton("score", per[2], n_channels=32, org=DEV.org, pu=DEV.pu, assignment=[0] * len(per[2]), **KW)
        )[0]
        / DEV.tck_s
    )
    # N instructions through a 1/cycle port: >= N cycles; the last channel cannot start before its turn
    assert t_port >= sum(n) and t_port >= n[0] + n[1] + 0.95 * last_alone and t_port > t_free
    # a port far faster than the channels costs (almost) nothing; fused instructions arrive sooner than per COMP
    fast = lower_newton(
        "score",
        lens,
        n_channels=32,
        org=DEV.org,
        pu=DEV.pu,
        assignment=chans,
        port_interval_cycles=1e-3,
        comp_instructions="per_comp",
        **KW,
    )
    assert abs(DEV.run(fast)[0] / DEV.tck_s - t_free) <= 0.01 * t_free
    fused = lower_newton(
        "score",
        lens,
        n_channels=32,
        org=DEV.org,
        pu=DEV.pu,
        assignment=chans,
        port_interval_cycles=1.0,
        comp_instructions="fused",
        **KW,
    )
    assert fused.meta["npu_instructions"] < low.meta["npu_instructions"] and DEV.run(fused)[0] < DEV.run(low)[0]


def test_a_port_without_a_limit_times_as_no_port(assignment="greedy"):
    """Each channel runs its requests in the order they were placed with or without the port (greedy: longest
    first; online / lists: batch order either way), so a port far faster than the channels gives the no-port time,
    refresh guard included (review finding: batch order under the port moved a 256-request greedy batch by
    +0.5 / +0.9 %)."""
    rng = np.random.default_rng(7)
    lens = rng.integers(50, 900, 256).tolist()  # 8 per channel: the order within a channel matters
    for phase in ("score", "context"):
        free = lower_newton(phase, lens, n_channels=32, org=DEV.org, pu=DEV.pu, assignment=assignment, **KW)
        fast = lower_newton(
            phase, lens, n_channels=32, org=DEV.org, pu=DEV.pu, assignment=assignment, port_interval_cycles=1e-3, **KW
        )
        t_free, t_fast = DEV.run(free)[0], DEV.run(fast)[0]
        assert t_fast == pytest.approx(t_free, rel=1e-3), (phase, t_fast / t_free - 1)


def test_port_options_refused_where_they_do_nothing():
    with pytest.raises(ConfigError, match="comp_instructions: expected fused"):
        pim(comp_instructions="per_comp")  # per-COMP counting needs a port rate
    with pytest.raises(ConfigError, match="npu_issue_per_ns: expected null"):
        hw = load_yaml(find_config("hardware", "attacc_hbm3_pim_stack"))
        hw["npu_issue_per_ns"] = 1.0
        registry.build(hw, file="attacc_hbm3_pim_stack")
    assert pim(npu_issue_per_ns=1.0, comp_instructions="per_comp").spec.npu_issue_per_ns == 1.0


def test_recorded_placements_are_attnsims():
    """The artefact runs behind the greedy / online rows (reference.yaml) took these channel lists: they must be
    what attnsim places the same batch on (context = seq_len + 1 at the decode step)."""
    for name in ("greedy", "online"):
        rows = list(csv.DictReader(open(DATA / f"clb0_attnsim_{name}.csv")))
        lens = [int(r["seq_len"]) + 1 for r in rows]
        load = placement_load(name, DEV.org, heads=8, dhead=128, elem_bytes=2.0)
        assert request_channels(lens, 32, name, load).tolist() == [int(r["ch_idx"]) for r in rows]


def test_pim_run_applies_the_issue_port(npupim):
    """`attnsim pim run` on a newton device with a port (the npu+pim assumption: 1 per ns, per COMP) times the
    program's instructions through it: no faster than one per ns, slower than the same device without a port."""
    from attnsim.sim.pim import load_device, run

    dev, _ = load_device(npupim)
    p = channel_program([300, 200], "score", dev.org, dev.pu, **KW)
    p.fields["ch"][len(p) // 2 :] = 1  # two channels: the second waits for the first one's instructions
    n_instr = int(record_instructions(p, "per_comp").sum())  # (a lower bound of the two channels' count)
    t_port, t_free = run(p, npupim).time_s, run(p, "neupims_hbm2_pim").time_s
    assert t_port >= n_instr * 1e-9 and t_port > 1.05 * t_free


def test_row_memo_tells_apart_lowerings_that_share_the_length_key():
    """Two batches with equal token sums and chunk counts ([100, 300] and [200, 200] on two channels) lower to
    records of equal lengths, multiplicities and byte counts; with the port each channel is its own program, so
    the per-trace memo must compare the records themselves (it returned the first batch's time for both)."""
    dev = pim(npu_issue_per_ns=1.0, comp_instructions="per_comp")
    interval = dev.port_interval_cycles
    lows = [
        lower_newton(
            "context",
            lens,
            n_channels=2,
            org=dev.org,
            pu=dev.pu,
            port_interval_cycles=interval,
            comp_instructions="per_comp",
            **KW,
        )
        for lens in ([100, 300], [200, 200])
    ]
    assert [len(c["op"]) for c in lows[0].commands] == [len(c["op"]) for c in lows[1].commands]
    direct = [dev.run(low)[0] for low in lows]
    assert direct[0] != direct[1]
    dev.lower_row = lambda trace, i, part=None: lows[i]  # the two rows of one trace
    memo = {}
    got = [dev._lowered_cost(None, i, dev.partition, memo)["time"] for i in (0, 1, 0)]
    assert got == [direct[0], direct[1], direct[0]]


def test_pim_run_issues_a_program_in_the_order_it_is_written(npupim):
    """`attnsim pim run` sends a user's Newton program through the port in program order: the same two-channel
    work interleaved at its GWRITEs lets channel 1 start before channel 0 is done (faster than channel by
    channel, which times as the port's channel-after-channel order); without the port the order changes nothing."""
    from attnsim.isa.base import Program
    from attnsim.sim.pim import run

    p = channel_program([300], "score", DEV.org, DEV.pu, **KW)
    n = len(p)

    def build(order):  # (channel, record) pairs in program order
        f = {k: np.array([p.fields[k][i] for _, i in order]) for k in p.fields}
        f["ch"] = np.array([c for c, _ in order])
        return Program(p.isa, np.array([p.opcode[i] for _, i in order]), f)

    seq = [(0, i) for i in range(n)] + [(1, i) for i in range(n)]
    cuts = [i for i in range(n) if p.mnemonics()[i] == "GWRITE"] + [n]
    inter = [(c, i) for a, b in zip(cuts[:-1], cuts[1:]) for c in (0, 1) for i in range(a, b)]
    t_seq, t_inter = run(build(seq), npupim).time_s, run(build(inter), npupim).time_s
    assert t_inter < t_seq
    sub = [channel_program([300], "score", DEV.org, DEV.pu, **KW) for _ in (0, 1)]
    a_default, _ = port_arrivals(sub, 1.0, "per_comp")
    a_seq, _ = port_arrivals(sub, 1.0, "per_comp", positions=[np.arange(n), np.arange(n, 2 * n)])
    assert all(np.array_equal(x, y) for x, y in zip(a_default, a_seq))
    assert run(build(seq), "neupims_hbm2_pim").time_s == run(build(inter), "neupims_hbm2_pim").time_s


def test_a_slow_port_under_the_refresh_guard_ends_after_its_last_instruction():
    """A port far slower than the engine (one instruction per 1e8 DRAM cycles) leaves gaps of ~1e5 refresh periods
    between a channel's operations: the guard walk counts them in closed form (it walked them one by one, for
    minutes), and the channel ends after its last instruction's arrival, within one operation's guarded time."""
    dev = pim(refresh_guard=True)
    low = lower_newton(
        "score",
        [300, 200],
        n_channels=2,
        org=dev.org,
        pu=dev.pu,
        port_interval_cycles=1e8,
        comp_instructions="per_comp",
        **KW,
    )
    t_cycles = dev.run(low)[0] / dev.tck_s
    last = max(int(c["arrival"].max()) for c in low.commands)
    alone = max(dev.run(lower_newton("score", [t], n_channels=1, org=dev.org, pu=dev.pu, **KW))[0] for t in (300, 200))
    assert last <= t_cycles <= last + alone / dev.tck_s


def test_the_reproductions_port_and_placements_are_assumptions():
    """The NeuPIMs reproduction copies no PIM preset: the npu+pim rows' PIM is the built-in neupims_hbm2_pim with
    exactly the port's two keys, on the naive baseline's built-in system; the artefact's clb-0 placement (its
    trace's 512-entry ch_idx column, 32 channels) is one assumption shared by every row on that placement."""
    from attnsim.studies import reproduce

    spec = reproduce.read_spec(reproduce.find("neupims"))
    port = assumption("npu_issue_port")
    # npu+pim e51a4af: one instruction per 1 GHz core cycle, a COMP instruction per 16 elements (reference.yaml)
    assert port.set == {
        "hardware.neupims_hbm2_pim.npu_issue_per_ns": 1.0,
        "hardware.neupims_hbm2_pim.comp_instructions": "per_comp",
    }
    assert {r.select["system"] for r in spec.rows if r.experiment in port.experiments} == {"neupims_naive"}
    hw = load_yaml(find_config("hardware", "neupims_hbm2_pim"))
    assert "npu_issue_per_ns" not in hw and "comp_instructions" not in hw  # the built-in keeps no port limit
    clb0 = assumption("trace_placement_clb0")
    chans = clb0.set["hardware.neupims_hbm2_pim.channel_assignment"]
    assert len(chans) == 512 and set(chans) == set(range(32))
    assert set(port.experiments) | {"clb_noref", "clb_noguard", "clb_trace"} <= set(clb0.experiments)
    rows = list(csv.DictReader(open(DATA / "clb0_attnsim_greedy.csv")))  # the same batch: clb-0's seq_len column
    assert len(rows) == len(chans)
