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
- ``queue_entries`` / ``queue_scope``: depth of the request queue, per pseudo-channel (attnsim, DRAMsim3's
  trans queue 32 per HBM pseudo-channel channel) or per channel (Ramulator 2.1 HBM34/HBM12/LPDDR5 controllers:
  32 reads + 32 writes per channel).
- ``write_queue_entries`` / ``wr_low_watermark`` / ``wr_high_watermark``: 0 = one mixed FR-FCFS queue
  (attnsim, DRAMsim3's unified trans queue). Else reads and writes have separate queues per channel (reads
  ``queue_entries``, writes ``write_queue_entries``; a full queue stalls the in-order front end) and the
  scheduler serves one class at a time: it switches to writes when more than high x entries are queued (or
  no read is), back to reads when fewer than low x entries are (and a read is queued); a request whose ACT
  already issued stays eligible and keeps its row open (Ramulator 2.1 @ c5b1c3a
  src/ramulator/controller/controller_base.cpp:46-49 wr_low/high_watermark 0.2/0.8, read/write_buffer_size
  32/32; :403-413 set_write_mode; :305-314 pick_rw_if; hbm_controller_base.cpp:45-91 the active buffer).
  JEDEC is silent (a controller policy).

- ``closed_cap``: closed page closes a row after its last queued hit (0, attnsim) or only after ``closed_cap``
  column accesses since its ACT (Ramulator 2.1 row_policy ClosedCAP, cap 4: a random stream then keeps rows
  open); JEDEC is silent (a controller policy).
- ``refresh_stagger``: all ranks of a pseudo-channel refresh at the same due (attnsim, Ramulator 2.1 AllBank
  refresh) or in turn, rank r first at (r + 1) x nREFI / ranks (DRAMsim3 RANK_LEVEL_STAGGERED, its default);
  JEDEC leaves the phase of each rank's refresh to the controller.
- ``cmd_queue_entries`` / ``cmd_queue_scope``: 0 = requests are scheduled from the request queue(s) above. Else
  DRAMsim3's two-level queues (cmdqueue.py): a request waits in the read queue (``queue_entries``) or write
  buffer (``write_queue_entries``, drained when full or above 8 with empty command queues; the watermarks do
  not apply) until it moves into the command queue of its bank ("bank") or rank ("rank") of this depth; commands
  come from the command queues in round robin (DRAMsim3 @ 2981759 controller.cc, command_queue.cc). The spec's
  ``timing.nRTRS`` and ``timing.nPPD`` apply there. JEDEC is silent (a controller structure).
- ``pre_holdback``: True (attnsim): a PRE that would close a row waits while a hit to that row is queued. False
  (Ramulator 2.1 @ c5b1c3a): it waits only while the request whose ACT opened the row has not issued its column
  command (the active buffer: src/ramulator/controller/controller_base.cpp:305-314 pick_rw_if refuses a request
  whose command would_close_active, :316-330); otherwise its FRFCFS (scheduler/impl/frfcfs.cpp:17-55: ready first,
  then the oldest) closes the row for an older request to another row while hits to it are queued, and they
  reopen it (at the row boundaries of a sequential stream). JEDEC is silent (a controller policy).
- ``refresh_waits_active``: False (attnsim): a due refresh precharges its banks at once, also a row opened by an
  ACT whose request has not issued its column command yet (the request then activates its row again). True
  (Ramulator 2.1): those requests issue their column commands first, then the refresh precharges: the refresh
  request (priority buffer) may not close a bank of the active buffer (controller_base.cpp:281-303
  pick_priority_if, :292 would_close_active), the active buffer is served before it and the read/write buffers
  only when no refresh is pending (impl/lpddr_controller_base.cpp:237-252 select_normal_candidate,
  impl/hbm_controller_base.cpp:45-60 try_issue_slot). JEDEC is silent (it fixes tRFC/tREFI, not the order).
- ``device_rules``: whether the spec's nCCDR and act_cmd_cycles apply. The "attnsim" preset keeps attnsim's
  historical rule set (no inter-SID RD rule, every row command ``row_cmd_cycles`` long) so its results,
  including the PIM reproductions and the steady-state extrapolation bounds, are unchanged; it is therefore
  optimistic by about 1-2 % on sequential HBM3 (nCCDR) and by up to 30 % on random HBM2 (2-cycle ACT).

PIM devices use "attnsim" (the default): their reproductions (AttAcc, NeuPIMs, CENT, AiM) were calibrated
against artefacts that time commands per SID/rank (AttAcc's and NeuPIMs' Ramulator 1 forks, DRAMsim3-based
CENT/AiM), and the preset keeps their results unchanged. Request streams that should match Ramulator 2.1 use
"ramulator2" (`--controller ramulator2` or `controller: ramulator2` in the spec).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnsim.config import ConfigError

CONTROLLERS = ("attnsim", "ramulator2", "dramsim3")


@dataclass(frozen=True)
class ControllerRules:
    act_scope: str          # "rank" | "pseudo_channel"
    turnaround_scope: str   # "rank" | "pseudo_channel"
    queue_entries: int
    queue_scope: str        # "pseudo_channel" | "channel"
    device_rules: bool      # apply the spec's nCCDR and act_cmd_cycles (else: no inter-SID RD rule, 1-slot ACT)
    closed_cap: int = 0     # closed page: close after this many column ops since ACT (0: after the last queued hit)
    write_queue_entries: int = 0     # per channel; 0: one mixed queue (no write drain)
    wr_low_watermark: float = 0.2    # write drain ends below low x write_queue_entries queued writes
    wr_high_watermark: float = 0.8   # and starts above high x write_queue_entries
    refresh_stagger: bool = False    # ranks refresh in turn, tREFI / ranks apart (DRAMsim3 RANK_LEVEL_STAGGERED)
    cmd_queue_entries: int = 0       # > 0: two-level queues (cmdqueue.py), command queues of this depth
    cmd_queue_scope: str = "bank"    # "bank" | "rank": one command queue per bank / per rank
    pre_holdback: bool = True        # a PRE waits for queued hits to the open row (else: for the active request)
    refresh_waits_active: bool = False  # a due refresh first lets requests whose ACT issued do their column op

    def queue_per_pseudo_channel(self, pseudo_channels: int) -> int:
        if self.queue_scope == "channel":
            return max(1, self.queue_entries // pseudo_channels)
        return self.queue_entries


PRESETS = {
    "attnsim": ControllerRules("rank", "rank", 32, "pseudo_channel", False),
    # trans_queue_size 32 (HBM2 / LPDDR4 .ini; unified_queue False: 32 reads + a 32-entry write buffer,
    # controller.cc:30-35), cmd_queue_size 8 per bank (queue_structure PER_BANK, command_queue.cc:16-21); refresh
    # staggered across ranks (DRAMsim3 @ 2981759 src/refresh.cc:16-17, 41-45, 64-65: every tREFI / ranks cycles
    # the next rank, round robin; the default refresh_policy)
    "dramsim3": ControllerRules("rank", "rank", 32, "pseudo_channel", False, write_queue_entries=32,
                                refresh_stagger=True, cmd_queue_entries=8),
    # ClosedCAP cap 4; 32 reads + 32 writes per channel, watermarks 0.2 / 0.8 (controller_base.cpp:46-49); PRE
    # held back only for the active buffer, refresh after it (would_close_active, controller_base.cpp:281-330)
    "ramulator2": ControllerRules("pseudo_channel", "pseudo_channel", 32, "channel", True, 4, 32, 0.2, 0.8,
                                  pre_holdback=False, refresh_waits_active=True),
}


def controller_rules(name: str | None, spec=None) -> ControllerRules:
    """Rule set of preset ``name`` (None: the spec's ``controller``, else "attnsim")."""
    if name is None:
        name = getattr(spec, "controller", "attnsim") if spec is not None else "attnsim"
    if name not in PRESETS:
        raise ConfigError(f"expected one of {', '.join(CONTROLLERS)}, got {name!r}", key="controller")
    return PRESETS[name]
