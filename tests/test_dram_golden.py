"""attnsim vs golden Ramulator 2.1 results on the cross-check streams (tests/data/dram_golden/*.json, recorded
by bench/crosscheck_dram.py --golden-out; the files name the simulator commit and the command). No reference
simulator is needed: the streams are regenerated (digest checked) and attnsim runs with the preset that
emulates the reference. Streams not yet within 3 % are asserted at their current band (KNOWN_GAPS, one README
line each), so a change that moves them either way shows up here. Also: the controller rule sets keep the
engine == plain-Python reference and the fast/heap schedulers == the reference queue scan."""

import json
from pathlib import Path

import numpy as np
import pytest
from dram_streams import random_stream

from attnsim.cli.dram import device_spec
from attnsim.hwmodels.dram import load_dram_spec, simulate_requests
from attnsim.hwmodels.dram.engine import raw_run
from attnsim.hwmodels.dram.reference_oracle import reference_run
from attnsim.hwmodels.dram.rules import controller_rules
from attnsim.hwmodels.dram.streams import MAPPING, dramsim3_spec, make_stream, stream_digest, stream_options

GOLDEN = Path(__file__).parent / "data" / "dram_golden"
FILES = {p.stem: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("ramulator2_*.json"))}
DS3 = {p.stem: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("dramsim3_*.json"))}
CASES = [(f, kind) for f, g in FILES.items() for kind in g["streams"]]
TOL = 0.03
# (golden file, stream) -> (lo, hi) band of attnsim/reference - 1 in simulated time, where the rule that explains
# the gap is not modelled yet; none since the read/write queues with write drain (rules.py)
KNOWN_GAPS: dict = {}
# streams whose miss/conflict split differs though the time agrees (only their row hits are checked): none since the
# ramulator2 preset's pre_holdback False / refresh_waits_active True (rules.py; the Ramulator 2.1 causes found from its
# CmdTraceRecorder, test_ramulator2_rules_reproduce_its_command_trace). Before them LPDDR5 seq had 548 vs 1165 misses
# and the mixed streams moved up to 1.3 % of the requests between miss and conflict.
COUNT_GAPS: set = set()


# DRAMsim3 (--controller dramsim3) streams outside 3 %, asserted at their band: none since the two-level queues
# (cmdqueue.py: 32-entry read queue / write buffer ahead of 8-entry command queues per bank, round robin over them)
DS3_GAPS: dict = {}


@pytest.mark.parametrize("fname,kind", [(f, k) for f, g in DS3.items() for k in g["streams"]])
def test_dramsim3_golden(fname, kind):
    """attnsim (dramsim3 preset, the spec mirroring the .ini) on the requests DRAMsim3 finished in its cycles."""
    g = DS3[fname]
    assert g["repository"] == "umd-memsys/DRAMsim3" and g["commit"] and g["command"] and g["ini"]
    s = g["streams"][kind]
    spec = dramsim3_spec(fname.split("_", 1)[1])
    addr, w = make_stream(spec.org, kind, g["requests"], g["seed"])
    assert stream_digest(addr, w) == s["digest"] and s["done"] < g["requests"]
    n = s["done"]
    r = simulate_requests(spec, addr[:n], w[:n], mapping=g["mapping"], controller="dramsim3", refresh="ab")
    d = r.cycles / s["cycles"] - 1
    lo, hi = DS3_GAPS.get((fname, kind), (-TOL, TOL))
    assert lo <= d <= hi, f"{fname} {kind}: attnsim {r.cycles} vs DRAMsim3 {s['cycles']} cycles ({d:+.2%})"
    assert abs(r.row_hits - s["row_hits"]) <= max(TOL * s["row_hits"], 0.01 * n)
    assert abs(r.counts["bank_acts"] - s["acts"]) <= max(TOL * s["acts"], 0.01 * n)
    # equal time: column commands issued in DRAMsim3's cycles on the whole stream (no truncated-stream tail; DRAMsim3
    # posts a write as done when it accepts it); the two-level queue kernel emits commands at their issue cycle
    c = simulate_requests(
        spec, addr[: n + 2000], w[: n + 2000], mapping=g["mapping"], controller="dramsim3", refresh="ab", emit=True
    ).commands
    cols = int(np.count_nonzero(np.isin(c["op"], (4, 5)) & (c["arrival"] < s["cycles"])))
    assert abs(cols / s["col_cmds"] - 1) <= 0.01, (cols, s["col_cmds"])  # measured: equal on all 10 streams
    if not spec.timing.separate_row_col_bus:  # DRAMsim3 counts a PRE for a miss in ArbitratePrecharge, also when
        # its HBM dual-issue pass then drops it (command_queue.cc:106, controller.cc:85-88): compared without HBM
        assert abs(r.row_conflicts - s["ondemand_pres"]) <= max(TOL * s["ondemand_pres"], 0.01 * n)


@pytest.mark.parametrize("std", ["hbm2", "lpddr4"])
def test_dramsim3_command_trace(std):
    """The dramsim3 preset issues DRAMsim3's own commands, cycle for cycle, refresh included: the first 1700 / 1800
    of its command trace on the mixed stream (tests/data/dram_golden/cmdtrace_dramsim3_<std>_mixed.json). HBM2:
    dual issue, no command bus in the second pick, nRTP 5; LPDDR4: two ranks (nRTRS, staggered refresh), nPPD."""
    g = json.loads((GOLDEN / f"cmdtrace_dramsim3_{std}_mixed.json").read_text())
    assert g["repository"] == "umd-memsys/DRAMsim3" and g["commit"] and g["command"]
    spec = dramsim3_spec(std)
    addr, w = make_stream(spec.org, "mixed", 60000, 1)
    r = simulate_requests(spec, addr[:4000], w[:4000], mapping=MAPPING, controller="dramsim3", refresh="ab", emit=True)
    names = {1: "A", 2: "P", 4: "R", 5: "W", 6: "F"}
    got = []
    for x in r.commands[: len(g["commands"])]:
        op = int(x["op"])
        got.append(
            [int(x["arrival"]), names[op], int(x["rank"])]
            + ([] if op == 6 else [int(x["bg"]), int(x["bank"])])
            + ([int(x["row"])] if op == 1 else [])
        )
    assert got == g["commands"]


def test_golden_files_name_their_source():
    assert FILES, "no golden data"
    for g in FILES.values():
        assert g["repository"] == "CMU-SAFARI/ramulator2" and g["commit"] and g["command"]
        assert g["requests"] <= 100_000 and set(g["streams"]) >= {"seq", "random"}


@pytest.mark.parametrize("fname,kind", CASES)
def test_time_and_row_counts_match_golden(fname, kind):
    g = FILES[fname]
    s = g["streams"][kind]
    spec = device_spec(g["attnsim_preset"], channels=1)
    addr, w = make_stream(spec.org, kind, g["requests"], g["seed"])
    assert stream_digest(addr, w) == s["digest"]  # the very stream the reference ran
    r = simulate_requests(spec, addr, w, mapping=g["mapping"], controller="ramulator2", **stream_options(kind))
    d = r.time_s / s["time_s"] - 1
    lo, hi = KNOWN_GAPS.get((fname, kind), (-TOL, TOL))
    assert lo <= d <= hi, f"{fname} {kind}: attnsim {r.time_s * 1e6:.2f} us vs {s['time_s'] * 1e6:.2f} us ({d:+.2%})"
    if (fname, kind) not in KNOWN_GAPS:  # where times agree, counts agree: 3 % or 1 % of the requests
        n = g["requests"]
        gap = kind in COUNT_GAPS or (fname, kind) in COUNT_GAPS
        for key in ("row_hits",) if gap else ("row_hits", "row_misses", "row_conflicts"):
            a, b = getattr(r, key), s[key]
            assert abs(a - b) <= max(TOL * b, 0.01 * n), (key, a, b)


def test_default_rules_match_ramulator2():
    """Evidence of the default rule set (rules.DEFAULT_CONTROLLER; the spec names no controller): within 3 % of
    Ramulator 2.1's simulated time on every stream of every golden file (28 streams: 4 standards x seq, random,
    strided, mixed, fewbanks, closed (ClosedCAP cap 4), norefresh)."""
    from attnsim.hwmodels.dram.rules import DEFAULT_CONTROLLER

    assert DEFAULT_CONTROLLER == "ramulator2" and len(CASES) == 28
    worst = 0.0
    for fname, kind in CASES:
        g = FILES[fname]
        s = g["streams"][kind]
        base = load_dram_spec(g["attnsim_preset"])
        assert "controller" not in base.model_fields_set and base.controller_rules is None  # no controller named
        spec = device_spec(g["attnsim_preset"], channels=1)
        addr, w = make_stream(spec.org, kind, g["requests"], g["seed"])
        r = simulate_requests(spec, addr, w, mapping=g["mapping"], **stream_options(kind))
        d = r.time_s / s["time_s"] - 1
        assert abs(d) <= TOL, (
            f"{fname} {kind}: default {r.time_s * 1e6:.2f} us vs {s['time_s'] * 1e6:.2f} us ({d:+.2%})"
        )
        worst = max(worst, abs(d))
    # the streams are not trivially equal (docs/validation/dram-crosscheck.md: largest -2.6 %, LPDDR5 no refresh)
    assert worst > 0.01


@pytest.mark.parametrize("ctrl", ["ramulator2", "dramsim3"])
def test_rule_sets_keep_engine_equal_to_reference(ctrl):
    """Per-pseudo-channel windows/turnarounds and nCCDR in the Numba engine == the history-based reference."""
    base = load_dram_spec("hbm3_6400")
    t = base.timing.model_copy(update=dict(nREFI=400, nRFC=100, nREFIpb=100, nRFCpb=40))
    spec = base.model_copy(update=dict(timing=t, controller=ctrl))
    for seed in range(40):
        c = random_stream(np.random.default_rng(seed), spec, 20, channels=2)
        a, sa = raw_run(spec, c, "ab")
        b, sb = reference_run(spec, c, "ab")
        assert np.array_equal(a, b) and np.array_equal(sa, sb), seed


@pytest.mark.parametrize("name", ["hbm3_6400", "hbm2_2000", "lpddr5_6400", "ddr5_4800"])
def test_rule_sets_schedulers_issue_the_scan_order(name):
    """ramulator2 rules (windows, turnarounds, write drain, no PRE hold-back, refresh after the active requests) with
    frequent all-bank / per-bank refreshes on random and sequential runs: flat and heap == queue scan."""
    spec = load_dram_spec(name)
    spec = spec.model_copy(update=dict(timing=spec.timing.model_copy(update=dict(nREFI=900, nREFIpb=200))))
    rng = np.random.default_rng(3)
    for it in range(6):
        n = int(rng.integers(50, 400))
        addr = rng.integers(0, 1 << 12, n) * spec.org.burst_bytes
        if it % 2:  # sequential runs: row boundaries with queued hits
            addr = (int(rng.integers(0, 1 << 12)) + np.arange(n)) * spec.org.burst_bytes
        w = rng.random(n) < 0.3
        kw = dict(
            controller="ramulator2",
            emit=True,
            page=("open", "closed")[int(rng.integers(2))],
            refresh=("ab", "pb")[it % 3 == 2],
        )
        b = simulate_requests(spec, addr, w, scheduler="scan", **kw)
        for sched in ("fast", "heap"):
            a = simulate_requests(spec, addr, w, scheduler=sched, **kw)
            assert np.array_equal(a.commands, b.commands) and a.cycles == b.cycles


def _reopens(c):
    """(ACTs to the row the bank's previous ACT opened, those of them where a REF closed that row before any RD/WR
    to the bank): the command-trace signatures of rules.py pre_holdback and refresh_waits_active."""
    last, served, refd, n, nref = {}, {}, set(), 0, 0
    for op, b, row in zip(
        c["op"].tolist(), zip(c["rank"].tolist(), c["bg"].tolist(), c["bank"].tolist()), c["row"].tolist()
    ):
        if op == 6:
            refd.update(last)
        elif op == 1:
            if last.get(b) == row:
                n += 1
                nref += b in refd and not served[b]
            last[b], served[b] = row, False
            refd.discard(b)
        elif op in (4, 5):
            served[b] = True
    return n, nref


@pytest.mark.parametrize("kind", ["seq", "mixed"])
def test_ramulator2_rules_reproduce_its_command_trace(kind):
    """Ramulator 2.1's LPDDR5 command trace (tests/data/dram_golden/cmdtrace_ramulator2_lpddr5.json): its FRFCFS closes
    a row at a row boundary of the sequential stream while hits to it are queued, and they reopen it (pre_holdback
    False: 1149 reopens, 1933 ACTs; holding the PRE back gives ~1320 ACTs); its refresh waits for requests whose ACT
    issued (refresh_waits_active: no reopen after a REF; without the rule ~240 on the mixed stream)."""
    import dataclasses

    from attnsim.hwmodels.dram import rules as RL

    g = json.loads((GOLDEN / "cmdtrace_ramulator2_lpddr5.json").read_text())
    assert g["repository"] == "CMU-SAFARI/ramulator2" and g["commit"] and g["command"]
    s = g["streams"][kind]
    spec = device_spec(g["attnsim_preset"], channels=1)
    addr, w = make_stream(spec.org, kind, g["requests"], g["seed"])
    assert stream_digest(addr, w) == s["digest"]
    c = simulate_requests(spec, addr, w, mapping=g["mapping"], controller="ramulator2", emit=True).commands
    n, nref = _reopens(c)
    assert abs(int(np.count_nonzero(c["op"] == 1)) - s["acts"]) <= 0.01 * s["acts"]
    assert abs(n - s["reopens"]) <= max(0.03 * s["reopens"], 5) and nref == s["refresh_reopens"] == 0
    assert abs(int(np.count_nonzero(c["op"] == 6)) - s["refs"]) <= 2
    old = dataclasses.replace(RL.PRESETS["ramulator2"], pre_holdback=True, refresh_waits_active=False)
    RL.PRESETS["rules_test"] = old
    try:
        b = simulate_requests(spec, addr, w, mapping=g["mapping"], controller="rules_test", emit=True).commands
    finally:
        del RL.PRESETS["rules_test"]
    nb, nrefb = _reopens(b)
    if kind == "seq":  # held back: a row is reopened only for requests admitted after its PRE
        assert np.count_nonzero(b["op"] == 1) < 0.75 * s["acts"] and nb < 0.6 * s["reopens"]
    else:
        assert nrefb > 100


def test_write_drain_serves_writes_in_batches():
    """Read/write queues with drain watermarks (ramulator2): on a mixed random stream the RD<->WR turnarounds fall
    from about one per write (one mixed FR-FCFS queue) to a few per drained batch of about 0.8 x 32 - 0.2 x 32
    writes; the same rules with one mixed queue are slower."""
    import dataclasses

    from attnsim.hwmodels.dram import rules as RL

    spec = device_spec("hbm3_6400", channels=1)
    addr, w = make_stream(spec.org, "mixed", 6000, 1)
    a = simulate_requests(spec, addr, w, mapping=MAPPING, controller="ramulator2", emit=True)
    mixed = dataclasses.replace(RL.PRESETS["ramulator2"], write_queue_entries=0)
    RL.PRESETS["mixed_test"] = mixed
    try:
        b = simulate_requests(spec, addr, w, mapping=MAPPING, controller="mixed_test", emit=True)
    finally:
        del RL.PRESETS["mixed_test"]

    def switches(r):
        col = r.commands[np.isin(r.commands["op"], (4, 5))]["op"]
        return int(np.count_nonzero(np.diff(col) != 0))

    nw = int(np.count_nonzero(w))
    assert switches(b) > 0.5 * nw and switches(a) < 2 * nw / (0.8 * 32 - 0.2 * 32) + 20
    assert a.cycles < b.cycles


def test_pseudo_channel_scope_slows_random_hbm3_and_is_refused_when_unknown():
    spec = device_spec("hbm3_6400", channels=1)
    addr, w = make_stream(spec.org, "random", 4000)
    a = simulate_requests(spec, addr, w, queue=32, mapping=MAPPING, controller="ideal")
    b = simulate_requests(spec, addr, w, queue=32, mapping=MAPPING, controller="ramulator2")
    # random rows: ACT-bound; 2 SIDs share one nRRD_S / tFAW window per pseudo-channel instead of one each
    assert b.cycles > 1.3 * a.cycles
    assert controller_rules("ramulator2").queue_per_pseudo_channel(2) == 16
    from attnsim.core.config import ConfigError

    with pytest.raises(ConfigError, match="controller: expected one of ramulator2, ideal, dramsim3, got 'gem5'$"):
        simulate_requests(spec, addr, w, controller="gem5")
    # the old name of the optimistic set is refused with its new name
    with pytest.raises(ConfigError, match="got 'attnsim' \\(did you mean ideal\\? .* now called ideal"):
        simulate_requests(spec, addr, w, controller="attnsim")
    with pytest.raises(ConfigError, match="controller: .*got 'attnsim' .*now called ideal"):
        load_dram_spec("hbm3_6400", {"controller": "attnsim"})


def test_dramsim3_preset_staggers_refresh_across_ranks():
    """DRAMsim3 RANK_LEVEL_STAGGERED: rank r is first due at (r + 1) x nREFI / ranks, then every nREFI; the
    other presets refresh all ranks at nREFI. The ramulator2 records carry the due; the dramsim3 preset emits the
    REF at its issue cycle: after the due, the PREs of the open banks (one per cycle, once legal) and nRP."""
    spec = device_spec("hbm3_6400", channels=1)
    t = spec.timing
    R, refi = spec.org.ranks, t.nREFI
    lag = t.nRAS + t.nRP + spec.org.bank_groups * spec.org.banks_per_group  # tRAS / tRTP wait, PREs, tRP
    addr = np.arange(20000) * spec.org.burst_bytes
    for ctrl, want, slack in (
        ("dramsim3", [(r + 1) * refi // R for r in range(R)], lag),
        ("ramulator2", [refi] * R, 1),
    ):
        c = simulate_requests(spec, addr, False, controller=ctrl, emit=True, refresh="ab").commands
        ref = c[c["op"] == 6]
        first = [int(ref[(ref["pch"] == 0) & (ref["rank"] == r)]["arrival"].min()) for r in range(R)]
        assert all(w <= f < w + slack for f, w in zip(first, want)), (ctrl, first, want)
        r0 = ref[(ref["pch"] == 0) & (ref["rank"] == 0)]["arrival"]
        assert np.all(np.abs(np.diff(r0) - refi) < slack)


def _alt(field, v):
    """A value of rule ``field`` other than ``v`` (the preset's)."""
    if isinstance(v, bool):
        return not v
    other = {"rank": "pseudo_channel", "pseudo_channel": "rank", "channel": "pseudo_channel", "bank": "rank"}
    if field == "queue_scope":
        return "channel" if v == "pseudo_channel" else "pseudo_channel"
    if isinstance(v, str):
        return other[v]
    if isinstance(v, float):
        return 0.5
    return {0: 8, 8: 4, 32: 16}.get(v, 1 if v != 1 else 4)


# rule fields a preset refuses to have set (override_error: the rule set would not read them); every other field
# must change the cycles of a closed-page stream
REFUSED = {
    "ramulator2": {"cmd_queue_scope"},
    # ideal: one mixed queue, no write buffer for the two-level queues of cmd_queue_entries
    "ideal": {"cmd_queue_scope", "wr_low_watermark", "wr_high_watermark", "cmd_queue_entries"},
    "dramsim3": {"closed_cap", "wr_low_watermark", "wr_high_watermark", "pre_holdback", "refresh_waits_active"},
}


@pytest.mark.parametrize("preset", sorted(REFUSED))
def test_every_rule_override_takes_effect_or_is_refused(preset):
    """controller_rules: {FIELD: value} over each preset, on closed-page HBM3 (2 SIDs, 2 pseudo-channels; nCCDR)
    sequential, mixed and two-row streams (reads to 2 rows of each of 2 banks in random order: hits queue behind
    older requests to the other row, where the PRE hold-back decides): it changes the cycles, or the spec is
    refused naming the field."""
    import dataclasses

    from attnsim.core.config import ConfigError
    from attnsim.hwmodels.dram import rules as RL
    from attnsim.hwmodels.dram.spec import spec_from_dict

    base = device_spec("hbm3_6400", channels=1)
    streams = [make_stream(base.org, kind, 3000, 1) for kind in ("seq", "mixed")]
    o, rng = base.org, np.random.default_rng(1)
    row, col, bank = rng.integers(0, 2, 3000), rng.integers(0, o.columns, 3000), rng.integers(0, 2, 3000)
    streams.append((((bank * o.rows + row) * o.columns + col) * o.burst_bytes, np.zeros(3000, bool)))  # MAPPING fields

    def cycles(spec):
        return [simulate_requests(spec, a, w, mapping=MAPPING, page="closed").cycles for a, w in streams]

    d = base.model_dump()
    ref = cycles(spec_from_dict({**d, "controller": preset}))
    refused = set()
    for f in dataclasses.fields(RL.ControllerRules):
        alt = _alt(f.name, getattr(RL.PRESETS[preset], f.name))
        try:
            spec = spec_from_dict({**d, "controller": preset, "controller_rules": {f.name: alt}}, file="t.yaml")
        except ConfigError as exc:
            assert f"controller_rules.{f.name}: expected" in str(exc)
            refused.add(f.name)
            continue
        assert cycles(spec) != ref, (preset, f.name, alt)
    assert refused == REFUSED[preset]


def test_closed_cap_is_a_setting():
    """closed_cap over the default (ramulator2, cap 4): on closed-page sequential HBM3 (32 bursts per row, one bank
    unit after another) cap 1 closes each row after one access, so every request opens its row: the row hits fall to 0
    (cap 4: 3 hits per 4 accesses while a row stays open); spec key and CLI give the same result; refused with open
    page, under dramsim3 (its two-level queues auto-precharge) and by `convert`."""
    import json
    import subprocess
    import sys

    from attnsim.core.config import ConfigError
    from attnsim.hwmodels.dram.spec import spec_from_dict

    base = device_spec("hbm3_6400", channels=1)
    addr, w = make_stream(base.org, "seq", 4000, 1)
    one = spec_from_dict({**base.model_dump(), "controller_rules": {"closed_cap": 1}})
    a = simulate_requests(one, addr, w, mapping=MAPPING, page="closed")
    b = simulate_requests(base, addr, w, mapping=MAPPING, page="closed")
    assert a.row_hits == 0 and b.row_hits > 0.5 * len(addr) and a.cycles > b.cycles
    with pytest.raises(ConfigError, match="controller_rules.closed_cap: expected no value \\(page open"):
        simulate_requests(one, addr, w, mapping=MAPPING)
    with pytest.raises(ConfigError, match="controller_rules.closed_cap: expected no value under controller dramsim3"):
        spec_from_dict({**base.model_dump(), "controller": "dramsim3", "controller_rules": {"closed_cap": 1}})
    with pytest.raises(ConfigError, match="controller_rules.closed_capp: unknown key \\(did you mean closed_cap\\?\\)"):
        spec_from_dict({**base.model_dump(), "controller_rules": {"closed_capp": 1}})

    def cli(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "attnsim",
                "dram",
                "--device",
                "hbm3_6400",
                "--channels",
                "1",
                "--pattern",
                "sequential",
                "--requests",
                "4000",
                *args,
            ],
            capture_output=True,
            text=True,
        )

    r1, r4 = (json.loads(cli("--page", "closed", "--closed-cap", str(c), "--json").stdout) for c in (1, 4))
    assert r1["row_hits"] == 0 and r4["row_hits"] > 2000 and r1["cycles"] > r4["cycles"]
    for args, msg in (
        (("--closed-cap", "1"), "error: --closed-cap: has no effect with open page"),
        (
            ("--page", "closed", "--closed-cap", "1", "--controller", "dramsim3"),
            "error: --closed-cap: expected no value under controller dramsim3",
        ),
        (("--controller", "attnsim"), "now called ideal"),
    ):
        r = cli(*args)
        assert r.returncode != 0 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
