"""Controller rule sets (``attnsim dram --controller``, the ``controller:`` key of a DRAM spec).

Where JEDEC fixes a rule it is a device fact and lives in the spec (``timing.nCCDR``: HBM3 RD->RD to another
SID, JESD238 tCCDR; ``timing.act_cmd_cycles``: row-bus cycles of an ACT, JESD235 HBM2 ACT is a two-cycle row
command). The rules below are where the standards are silent or the established simulators differ; a preset
is named after the simulator whose controller it emulates:

- ``act_scope``: the window of nRRD_S and tFAW. "rank" = per rank / SID; "pseudo_channel" = one window shared
  by all SIDs of a pseudo-channel (Ramulator 2.1 python/ramulator/dram/hbm3.py: nRRDS, nFAW at level
  PseudoChannel). JESD238 was not checked (not public); DDR4 3DS (JESD79-4 3DS) defines both a same-logical-rank
  (tFAW_slr) and a different-logical-rank window, so per-SID with no cross-SID window is the optimistic end.
- ``turnaround_scope``: RD->WR (nRTW) and WR->RD (nWTR_S) between ranks/SIDs of one pseudo-channel. "rank" =
  only within a rank (DRAMsim3; JEDEC specifies tWTR within a rank, the inter-rank bus turnaround is
  controller-defined), "pseudo_channel" = across its SIDs too (Ramulator 2.1 HBM3: nRTW and nCWL+nBL+nWTRS at
  level PseudoChannel).
- ``queue_entries`` / ``queue_scope``: depth of the request queue, per pseudo-channel (ideal, DRAMsim3's
  trans queue 32 per HBM pseudo-channel channel) or per channel (Ramulator 2.1 HBM34/HBM12/LPDDR5 controllers:
  32 reads + 32 writes per channel).
- ``write_queue_entries`` / ``wr_low_watermark`` / ``wr_high_watermark``: 0 = one mixed FR-FCFS queue
  (ideal, DRAMsim3's unified trans queue). Else reads and writes have separate queues per channel (reads
  ``queue_entries``, writes ``write_queue_entries``; a full queue stalls the in-order front end) and the
  scheduler serves one class at a time: it switches to writes when more than high x entries are queued (or
  no read is), back to reads when fewer than low x entries are (and a read is queued); a request whose ACT
  already issued stays eligible and keeps its row open (Ramulator 2.1 @ c5b1c3a
  src/ramulator/controller/controller_base.cpp:46-49 wr_low/high_watermark 0.2/0.8, read/write_buffer_size
  32/32; :403-413 set_write_mode; :305-314 pick_rw_if; hbm_controller_base.cpp:45-91 the active buffer).
  JEDEC is silent (a controller policy).

- ``closed_cap``: closed page closes a row after its last queued hit (0, ideal) or only after ``closed_cap``
  column accesses since its ACT (Ramulator 2.1 row_policy ClosedCAP, a parameter: ``cap``, default 4, the
  golden closed-page streams ran with 4: a random stream then keeps rows open); JEDEC is silent (a controller
  policy).
- ``refresh_stagger``: all ranks of a pseudo-channel refresh at the same due (ideal, Ramulator 2.1 AllBank
  refresh) or in turn, rank r first at (r + 1) x nREFI / ranks (DRAMsim3 RANK_LEVEL_STAGGERED, its default);
  JEDEC leaves the phase of each rank's refresh to the controller.
- ``cmd_queue_entries`` / ``cmd_queue_scope``: 0 = requests are scheduled from the request queue(s) above. Else
  DRAMsim3's two-level queues (cmdqueue.py): a request waits in the read queue (``queue_entries``) or write
  buffer (``write_queue_entries``, drained when full or above 8 with empty command queues; the watermarks do
  not apply) until it moves into the command queue of its bank ("bank") or rank ("rank") of this depth; commands
  come from the command queues in round robin (DRAMsim3 @ 2981759 controller.cc, command_queue.cc). The spec's
  ``timing.nRTRS`` and ``timing.nPPD`` apply there. JEDEC is silent (a controller structure).
- ``pre_holdback``: True (ideal): a PRE that would close a row waits while a hit to that row is queued. False
  (Ramulator 2.1 @ c5b1c3a): it waits only while the request whose ACT opened the row has not issued its column
  command (the active buffer: src/ramulator/controller/controller_base.cpp:305-314 pick_rw_if refuses a request
  whose command would_close_active, :316-330); otherwise its FRFCFS (scheduler/impl/frfcfs.cpp:17-55: ready first,
  then the oldest) closes the row for an older request to another row while hits to it are queued, and they
  reopen it (at the row boundaries of a sequential stream). JEDEC is silent (a controller policy).
- ``refresh_waits_active``: False (ideal): a due refresh precharges its banks at once, also a row opened by an
  ACT whose request has not issued its column command yet (the request then activates its row again). True
  (Ramulator 2.1): those requests issue their column commands first, then the refresh precharges: the refresh
  request (priority buffer) may not close a bank of the active buffer (controller_base.cpp:281-303
  pick_priority_if, :292 would_close_active), the active buffer is served before it and the read/write buffers
  only when no refresh is pending (impl/lpddr_controller_base.cpp:237-252 select_normal_candidate,
  impl/hbm_controller_base.cpp:45-60 try_issue_slot). JEDEC is silent (it fixes tRFC/tREFI, not the order).
- ``device_rules``: whether the spec's nCCDR and act_cmd_cycles apply ("ideal" and "dramsim3": no inter-SID RD
  rule, every row command ``row_cmd_cycles`` long: optimistic by about 1-2 % on sequential HBM3 (nCCDR) and by up
  to 30 % on random HBM2 (2-cycle ACT)).

Default ("ramulator2", every DRAM spec and PIM device; spec.py ``controller``): the best evidence. It is the only
rule set measured against a reference on every stream: Ramulator 2.1 @ c5b1c3a, 50k requests per stream, HBM2 /
HBM3 / LPDDR5 / DDR5 x seq / random / strided / mixed / fewbanks / closed / norefresh (golden files
tests/data/dram_golden/ramulator2_{hbm2,hbm3,lpddr5,ddr5}.json): all 28 within 3 % of Ramulator's simulated time,
at most 2.6 % (tests/test_dram_golden.py test_default_rules_match_ramulator2). "ideal" (the historical attnsim
rules: per-SID windows and turnarounds, no nCCDR, 1-slot ACT, one mixed queue, PRE held back for queued hits)
is the optimistic end on the same streams: HBM3 -35 % random / -27 % mixed / -44 % closed, HBM2 -31 % random
(shared/reference/dram_crosscheck.md; docs/validation/dram-crosscheck.md). "dramsim3" emulates DRAMsim3's controller
(tests/data/dram_golden/dramsim3_*.json, within 3 %). The name "attnsim" (the default before) is refused: it is
now called "ideal". A spec's ``controller_rules:`` sets single fields over the chosen preset (``RuleOverrides``;
e.g. ``closed_cap: 1``; ``attnsim dram --closed-cap N``); a field the resulting rule set does not read is
refused (``override_error``; a run that does not read it: ``refuse_unread``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from pydantic import Field

from attnsim.core.config import ConfigError, Plausible, Schema

# Default rule set of every DRAM spec (request streams and PIM command programs): the best evidence, within 3 % of
# Ramulator 2.1 on all 28 golden streams (tests/data/dram_golden/ramulator2_*.json; module docstring), and on the five
# held-out realistic HBM3 streams at 1M requests, tuned on nothing (-0.5 ... -1.5 %; realistic_ramulator2_hbm3.json,
# tests/test_dram_realistic.py).
DEFAULT_CONTROLLER = "ramulator2"
CONTROLLERS = ("ramulator2", "ideal", "dramsim3")
RENAMED = {"attnsim": "ideal"}  # old preset name -> its name now (refused with the new name)
MAX_QUEUE = 1 << 16  # queue entries per pseudo-channel (controller.py)


@dataclass(frozen=True)
class ControllerRules:
    act_scope: str  # "rank" | "pseudo_channel"
    turnaround_scope: str  # "rank" | "pseudo_channel"
    queue_entries: int
    queue_scope: str  # "pseudo_channel" | "channel"
    device_rules: bool  # apply the spec's nCCDR and act_cmd_cycles (else: no inter-SID RD rule, 1-slot ACT)
    closed_cap: int = 0  # closed page: close after this many column ops since ACT (0: after the last queued hit)
    write_queue_entries: int = 0  # per channel; 0: one mixed queue (no write drain)
    wr_low_watermark: float = 0.2  # write drain ends below low x write_queue_entries queued writes
    wr_high_watermark: float = 0.8  # and starts above high x write_queue_entries
    refresh_stagger: bool = False  # ranks refresh in turn, tREFI / ranks apart (DRAMsim3 RANK_LEVEL_STAGGERED)
    cmd_queue_entries: int = 0  # > 0: two-level queues (cmdqueue.py), command queues of this depth
    cmd_queue_scope: str = "bank"  # "bank" | "rank": one command queue per bank / per rank
    pre_holdback: bool = True  # a PRE waits for queued hits to the open row (else: for the active request)
    refresh_waits_active: bool = False  # a due refresh first lets requests whose ACT issued do their column op

    def queue_per_pseudo_channel(self, pseudo_channels: int) -> int:
        if self.queue_scope == "channel":
            return max(1, self.queue_entries // pseudo_channels)
        return self.queue_entries


PRESETS = {
    # the optimistic end (formerly "attnsim"): per-SID windows and turnarounds, no nCCDR, 1-slot ACT, one mixed
    # 32-entry queue per pseudo-channel, PRE held back for queued hits, closed page after the last queued hit
    "ideal": ControllerRules("rank", "rank", 32, "pseudo_channel", False),
    # trans_queue_size 32 (HBM2 / LPDDR4 .ini; unified_queue False: 32 reads + a 32-entry write buffer,
    # controller.cc:30-35), cmd_queue_size 8 per bank (queue_structure PER_BANK, command_queue.cc:16-21); refresh
    # staggered across ranks (DRAMsim3 @ 2981759 src/refresh.cc:16-17, 41-45, 64-65: every tREFI / ranks cycles
    # the next rank, round robin; the default refresh_policy)
    "dramsim3": ControllerRules(
        "rank", "rank", 32, "pseudo_channel", False, write_queue_entries=32, refresh_stagger=True, cmd_queue_entries=8
    ),
    # the default (DEFAULT_CONTROLLER). ClosedCAP cap 4 (Ramulator 2.1's default cap, the golden closed streams'); 32
    # reads + 32 writes per channel, watermarks 0.2 / 0.8 (controller_base.cpp:46-49); PRE held back only for the active
    # buffer, refresh after it (would_close_active, controller_base.cpp:281-330)
    "ramulator2": ControllerRules(
        "pseudo_channel",
        "pseudo_channel",
        32,
        "channel",
        True,
        4,
        32,
        0.2,
        0.8,
        pre_holdback=False,
        refresh_waits_active=True,
    ),
}


Scope = Literal["rank", "pseudo_channel"]
Entries = Annotated[int, Field(ge=0, le=MAX_QUEUE)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class RuleOverrides(Schema):
    """A DRAM spec's ``controller_rules:``: fields of ControllerRules set over the chosen preset."""

    plausible = {
        "*": Plausible(0, 1 << 16, "controller queue entries / watermarks (rules.MAX_QUEUE)"),
        "wr_low_watermark": Plausible(0, 1, "a fraction of the write queue"),
        "wr_high_watermark": Plausible(0, 1, "a fraction of the write queue"),
    }
    act_scope: Optional[Scope] = None
    turnaround_scope: Optional[Scope] = None
    queue_entries: Optional[Annotated[int, Field(ge=1, le=MAX_QUEUE)]] = None
    queue_scope: Optional[Literal["pseudo_channel", "channel"]] = None
    device_rules: Optional[bool] = None
    closed_cap: Optional[Annotated[int, Field(ge=0, le=1 << 24)]] = None
    write_queue_entries: Optional[Entries] = None
    wr_low_watermark: Optional[Fraction] = None
    wr_high_watermark: Optional[Fraction] = None
    refresh_stagger: Optional[bool] = None
    cmd_queue_entries: Optional[Annotated[int, Field(ge=0, le=1 << 10)]] = None  # x banks: the command queues' state
    cmd_queue_scope: Optional[Literal["bank", "rank"]] = None
    pre_holdback: Optional[bool] = None
    refresh_waits_active: Optional[bool] = None


# fields the two-level queues (cmd_queue_entries > 0, cmdqueue.py) do not read
_NOT_TWO_LEVEL = ("closed_cap", "wr_low_watermark", "wr_high_watermark", "pre_holdback", "refresh_waits_active")
# fields a PIM command program (engine.run_commands: no request queue, no page policy) does not read
CONTROLLER_ONLY = (
    "queue_entries",
    "queue_scope",
    "closed_cap",
    "write_queue_entries",
    "wr_low_watermark",
    "wr_high_watermark",
    "cmd_queue_entries",
    "cmd_queue_scope",
    "pre_holdback",
    "refresh_waits_active",
)


def given_overrides(spec) -> dict:
    """The fields a spec's ``controller_rules:`` sets ({} without one)."""
    o = getattr(spec, "controller_rules", None)
    return {} if o is None else {k: v for k, v in o.model_dump().items() if v is not None}


def name_error(name) -> str | None:
    """Why ``name`` is no preset (None if it is one): the old name "attnsim" says what it is called now."""
    if name in PRESETS:
        return None
    if name in RENAMED:
        return (
            f"expected one of {', '.join(CONTROLLERS)}, got {name!r} (did you mean {RENAMED[name]}? the optimistic "
            f"rule set once called {name} is now called {RENAMED[name]}; the default is {DEFAULT_CONTROLLER})"
        )
    return f"expected one of {', '.join(CONTROLLERS)}, got {name!r}"


def override_error(name: str, given: dict, spec) -> tuple[str, str] | None:
    """(field, message) of the first override of ``given`` that preset ``name`` with them would not read on ``spec``
    (an organisation where the field makes no difference), or of inconsistent watermarks; None if all take effect."""
    r = dataclasses.replace(PRESETS[name], **given)
    o, t = spec.org, spec.timing
    for f in given:
        why = None
        if r.cmd_queue_entries and f in _NOT_TWO_LEVEL:
            why = "the two-level queues (cmd_queue_entries > 0, cmdqueue.py) do not read it"
        elif not r.cmd_queue_entries and f == "cmd_queue_scope":
            why = "only the two-level queues (cmd_queue_entries > 0) read it"
        elif not r.write_queue_entries and f in ("wr_low_watermark", "wr_high_watermark"):
            why = "only a write queue (write_queue_entries > 0) drains between watermarks"
        elif o.ranks == 1 and f in ("act_scope", "turnaround_scope", "refresh_stagger"):
            why = "one rank/SID per pseudo-channel: rank and pseudo-channel are the same"
        elif o.pseudo_channels == 1 and f == "queue_scope":
            why = "one pseudo-channel per channel: per channel and per pseudo-channel are the same"
        elif f == "device_rules" and not t.nCCDR and (t.act_cmd_cycles or t.row_cmd_cycles) == t.row_cmd_cycles:
            why = "the spec has no device rule (timing.nCCDR 0, no timing.act_cmd_cycles above row_cmd_cycles)"
        if why:
            return f, f"expected no value under controller {name} on this device ({why}), got {given[f]!r}"
    if r.cmd_queue_entries and not r.write_queue_entries:  # writes wait in the write buffer of the two-level queues
        f = "cmd_queue_entries" if "cmd_queue_entries" in given else "write_queue_entries"
        return f, (
            f"expected write_queue_entries > 0 with cmd_queue_entries > 0 (the two-level queues hold writes in "
            f"a write buffer), got {r.write_queue_entries} / {r.cmd_queue_entries}"
        )
    wq = r.write_queue_entries  # the drain thresholds of engine.timing_vector (T_WQLO, T_WQHI)
    if wq and not r.cmd_queue_entries and math.ceil(r.wr_low_watermark * wq) > math.floor(r.wr_high_watermark * wq):
        f = next(x for x in ("wr_low_watermark", "wr_high_watermark", "write_queue_entries") if x in given)
        return f, (
            f"expected ceil(wr_low_watermark x {wq}) <= floor(wr_high_watermark x {wq}), got "
            f"{r.wr_low_watermark} / {r.wr_high_watermark}"
        )
    return None


def refuse_unread(spec, fields, why: str, file: str | None = None) -> None:
    """ConfigError for the first of ``fields`` that the spec's ``controller_rules:`` sets (a run that does not read
    it: ``why``)."""
    given = given_overrides(spec)
    for f in fields:
        if f in given:
            raise ConfigError(
                f"expected no value ({why}), got {given[f]!r}",
                file=file or getattr(spec, "name", None),
                key=f"controller_rules.{f}",
            )


def refuse_unread_by_stream(spec, page: str, refresh: str, queue, file: str | None = None) -> None:
    """The spec's ``controller_rules:`` fields a request-stream run with these options does not read."""
    if page == "open":
        refuse_unread(spec, ("closed_cap",), "page open: closed_cap is the closed-page policy", file)
    if refresh == "none":
        refuse_unread(spec, ("refresh_stagger", "refresh_waits_active"), "refresh none", file)
    if queue is not None:
        refuse_unread(spec, ("queue_entries",), "the queue argument sets the depth", file)


def controller_rules(name: str | None, spec=None) -> ControllerRules:
    """Rule set of preset ``name`` (None: the spec's ``controller``, else DEFAULT_CONTROLLER) with the fields the
    spec's ``controller_rules:`` sets over it."""
    if name is None:
        name = getattr(spec, "controller", DEFAULT_CONTROLLER) if spec is not None else DEFAULT_CONTROLLER
    err = name_error(name)
    if err:
        raise ConfigError(err, key="controller")
    given = given_overrides(spec)
    if not given:
        return PRESETS[name]
    bad = override_error(name, given, spec)
    if bad:
        raise ConfigError(bad[1], key=f"controller_rules.{bad[0]}")
    return dataclasses.replace(PRESETS[name], **given)
