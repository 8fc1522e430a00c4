"""Decode-attention GEMVs lowered onto Newton/NeuPIMs commands (isa/newton.py), as NeuPIMs builds them.

Layout and loops follow casys-kaist/NeuPIMs f299af3 ``src/operations/NeuPIMSLogitSoftmax.cc``,
``NeuPIMSAttend.cc`` and ``src/tensor/PIMTensor.cc``: a request's K and V live in ONE channel
(the request, not a (request, head) pair, is the unit placed on a channel).

* Logit (K GEMV): a token's keys of all the device's heads (E = heads x dhead elements) lie in
  one bank, a 1 KB row per ``page`` = row bytes / element bytes elements; the banks of a channel hold
  consecutive tokens. Per ``chunk`` of E (ceil(E / page) of them) the query slice is written to the
  global buffer (GWRITE); per tile of ``banks`` tokens the row is opened in every bank group (G_ACT,
  2 ranks x 4 BGs) and, per head in the chunk, ceil(dhead / 16) COMPs and one READRES bring
  ``banks`` scores back to the NPU.
* Attend (V GEMV): a row of a bank holds ``page`` tokens of one output element; per head and chunk
  of ``page`` tokens the probabilities are written to the global buffer (GWRITE), then per tile of
  ``banks`` output elements (ceil(dhead / banks) tiles) G_ACT, ceil(tokens / 16) COMPs and a READRES.
* Softmax is not a PIM op: the NPU's vector units do it between the two (mapper/neupims.py), on
  the scores READRES returned; GWRITE sends the probabilities back.

Request placement on channels (``channel_assignment``):

* ``greedy`` (attnsim's own, offline): the whole batch, by decreasing estimated load (row openings of
  both GEMVs), each to the least loaded channel (LPT over the batch's current lengths).
* ``online`` (the artefact's, NeuPIMs' ``ch_load_balancing``: trace-generator/get_distributions.py
  ``_channel_load_balancing``, which wrote the ``ch_idx`` of its request traces): requests in arrival
  order (the batch's order), each to the channel of least accumulated load known then, the lowest
  channel on ties (Python ``min``); load = the artefact's ``estimate_mha_latency``
  (:func:`artefact_load`).
* ``round_robin``: request i on channel i mod channels (the npu+pim baseline without load balancing).
* a list: an explicit channel per request (a fixed batch's placement, e.g. an artefact trace's ``ch_idx``).

NPU issue port (``port_interval_cycles``, the PIM preset's ``npu_issue_per_ns``): the NPU sends every PIM
instruction of an op through one in-order port shared by all channels (casys-kaist/NeuPIMs e51a4af
``NeuPIMSystolicWS.cc:153`` issues one per core cycle; main f299af3 issues all queued ones, no limit), the batch
channel by channel, ascending, each channel's requests in batch order (``Scheduler.cc group_sub_batches``), with no
back-pressure (the per-channel queues behind it are unbounded). Each engine record gets the cycle its first
instruction leaves the port as ``arrival``: a GWRITE and a tile's P_HEADER (its G_ACTs) are one instruction; a
head's COMP run + READRES is one fused COMPS_READRES (``comp_instructions: fused``, main) or one instruction per
COMP + one READRES (``per_comp``: the npu+pim branch with dram_type newton, ``NeuPIMSLogitSoftmax.cc:231``,
``NeuPIMSAttend.cc:204``). Channels are then no longer interchangeable: one program per channel.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from typing import Sequence

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.isa import get_isa
from attnsim.isa.base import Program
from attnsim.isa.lowered import PU, Lowered, Org, _Cmds

ASSIGNMENTS = ("greedy", "online", "round_robin")
COMP_INSTRUCTIONS = ("fused", "per_comp")
# the artefact's MHA latency estimate (casys-kaist/NeuPIMs f299af3 src/scheduler/Scheduler.cc _gwrite_latency,
# _gemv_latency; trace-generator/get_distributions.py MemoryConfig) [V: artefact code]: cycles per GWRITE of a
# chunk and per GEMV tile (a row opened in every bank); used only to place requests (``online``)
ARTEFACT_GWRITE_CYCLES = 100
ARTEFACT_GEMV_CYCLES = 184
UNIT_BYTES = 32  # GWRITE / READRES operand units (BUF units of the engine)
NO_SOFTMAX = (
    "expected score or context: the Newton/NeuPIMs PIM has no softmax unit (the NPU's vector units "
    "run softmax; mapper neupims places it there)"
)


def request_load(t: int, org: Org, *, heads: int, dhead: int, elem_bytes: float) -> int:
    """Row openings (tiles) of one request's logit + attend GEMVs: NeuPIMs' estimate_mha_latency
    (trace-generator/channel_load_balancing.py) in tiles, the same for both phases (K and V share a channel)."""
    page = max(1, int(org.columns * org.burst_bytes // elem_bytes))
    return (-(-heads * dhead // page)) * (-(-t // org.banks)) + heads * (-(-t // page)) * (-(-dhead // org.banks))


def artefact_load(t: int, org: Org, *, heads: int, dhead: int, elem_bytes: float) -> int:
    """NeuPIMs' ``estimate_mha_latency`` of one request of ``t`` tokens (Scheduler.cc; get_distributions.py
    ``Request.estimate_latency``): per GEMV, chunks x GWRITE cycles + chunks x tiles x GEMV cycles; K: chunks of
    the device's heads x dhead elements per row, tiles of ``banks`` tokens; V: per head, chunks of a row's
    tokens, tiles of ``banks`` output elements. ``heads`` = the device's heads, as Scheduler.cc counts them
    (get_distributions.py counts V chunks over the model's heads: see reference.yaml)."""
    page = max(1, int(org.columns * org.burst_bytes // elem_bytes))
    k_chunks, v_chunks = -(-heads * dhead // page), heads * (-(-t // page))
    return ARTEFACT_GWRITE_CYCLES * (k_chunks + v_chunks) + ARTEFACT_GEMV_CYCLES * request_load(
        t, org, heads=heads, dhead=dhead, elem_bytes=elem_bytes
    )


def request_channels(lens: Sequence[int], n_channels: int, assignment="greedy", load=None) -> np.ndarray:
    """The channel of each request (-1: no tokens), by ``assignment`` (see :func:`assign_requests`)."""
    return _placement([int(t) for t in lens], n_channels, assignment, load)[0]


def _placement(lens: list, n_channels: int, assignment, load):
    """(channel per request, -1 for none; the order requests were placed in)."""
    if n_channels < 1:
        raise ConfigError(f"expected a positive channel count, got {n_channels}")
    chan = np.full(len(lens), -1, dtype=np.int64)
    if not isinstance(assignment, str):
        given = [int(c) for c in assignment]
        if len(given) != len(lens) or any(not 0 <= c < n_channels for c in given):
            raise ConfigError(
                f"expected one channel in [0, {n_channels - 1}] per request ({len(lens)} requests: "
                "an explicit list fits one whole batch, subbatches: 1 or subbatch_split: per_channel), "
                f"got a list of {len(given)} from {min(given, default=0)} to {max(given, default=0)}",
                key="channel_assignment",
            )
        order = [i for i, t in enumerate(lens) if t > 0]
        chan[order] = [given[i] for i in order]
        return chan, order
    if assignment not in ASSIGNMENTS:
        raise ConfigError(
            f"expected one of {', '.join(ASSIGNMENTS)} or a list, got {assignment!r}", key="channel_assignment"
        )
    load = load or (lambda t: t)
    if assignment == "greedy":
        heap = [(0, c) for c in range(min(n_channels, len(lens)))]
        order = sorted((i for i, t in enumerate(lens) if t > 0), key=lambda i: (-load(lens[i]), -lens[i]))
    elif assignment == "online":
        heap = [(0, c) for c in range(n_channels)]  # (load, channel): the lowest channel among equal loads
        order = [i for i, t in enumerate(lens) if t > 0]
    else:
        order = [i for i, t in enumerate(lens) if t > 0]
        chan[order] = [i % n_channels for i in order]
        return chan, order
    for i in order:
        w, c = heapq.heappop(heap)
        chan[i] = c
        heapq.heappush(heap, (w + load(lens[i]), c))
    return chan, order


def assign_requests(lens: Sequence[int], n_channels: int, assignment="greedy", load=None):
    """Distinct per-channel request lists (token counts) with multiplicity (idle channels omitted).

    greedy: requests by decreasing ``load(t)`` (default: t) each to the least loaded channel (LPT);
    online: requests in order, each to the least loaded channel so far (lowest index on ties);
    round_robin: request i on channel i mod ``n_channels``; a list: request i on channel ``assignment[i]``."""
    lens = [int(t) for t in lens]
    chan, order = _placement(lens, n_channels, assignment, load)
    work: dict[int, list[int]] = {int(c): [] for c in sorted(set(chan[order].tolist()))}
    for i in order:
        work[int(chan[i])].append(lens[i])
    return sorted(Counter(tuple(w) for w in work.values()).items(), key=lambda kv: -sum(kv[0]))


def _units(nbytes: float) -> int:
    return max(1, math.ceil(nbytes / UNIT_BYTES))


def _tile(recs: list, org: Org, row: int, comps: Sequence[int], readres_units: int) -> None:
    """One row opened in every bank (G_ACT per rank and bank group), COMP runs each followed by READRES."""
    for g in range(org.bank_groups):  # ranks alternate (their tFAW windows are independent)
        for r in range(org.ranks):
            recs.append(("GACT", dict(ch=0, rank=r, bg=g, row=row % org.rows)))
    for n in comps:
        while n > 0:  # repeat field is 12 bits
            recs.append(("COMP", dict(ch=0, col=0, repeat=min(n, 4095))))
            n -= 4095
        recs.append(("READRES", dict(ch=0, bursts=readres_units)))
    recs.append(("PIM_PRECHARGE", dict(ch=0)))


def channel_program(
    slices,
    phase: str,
    org: Org,
    pu: PU,
    *,
    heads: int,
    dhead: int,
    group: int,
    elem_bytes: float,
    row0: int = 0,
    starts: list | None = None,
) -> Program:
    """Newton program of one channel running the requests ``slices`` (token counts) in order (``starts``, when
    given, receives the index of each request's first record)."""
    banks = org.banks
    page = max(1, int(org.columns * org.burst_bytes // elem_bytes))  # elements per 1 KB row
    lanes = pu.macs_per_command  # pim_comp_coverage
    res_units = _units(banks * pu.acc_bytes * group)  # one result per bank and query
    recs, row = [], row0
    for t in slices:
        if starts is not None:
            starts.append(len(recs))
        if phase == "score":
            E = heads * dhead
            for c in range(-(-E // page)):
                lo, hi = c * page, min(E, (c + 1) * page)
                # heads whose keys overlap this chunk of the row: one COMP run + READRES each
                segs = [
                    min(hi, (h + 1) * dhead) - max(lo, h * dhead)
                    for h in range(heads)
                    if h * dhead < hi and (h + 1) * dhead > lo
                ]
                recs.append(("GWRITE", dict(ch=0, bursts=_units((hi - lo) * elem_bytes * group))))
                recs.append(("BARRIER", dict(ch=0)))
                comps = [-(-s // lanes) * group for s in segs]
                for _ in range(-(-t // banks)):
                    _tile(recs, org, row, comps, res_units)
                    row += 1
        elif phase == "context":
            for _ in range(heads):
                for c in range(-(-t // page)):
                    n_tok = min(page, t - c * page)
                    recs.append(("GWRITE", dict(ch=0, bursts=_units(n_tok * pu.acc_bytes * group))))
                    recs.append(("BARRIER", dict(ch=0)))
                    for _ in range(-(-dhead // banks)):
                        _tile(recs, org, row, [-(-n_tok // lanes) * group], res_units)
                        row += 1
        else:
            raise ConfigError(NO_SOFTMAX + f", got phase {phase!r}", key="phase")
    recs.append(("BARRIER", dict(ch=0)))
    return Program.from_records(get_isa("newton"), recs)


def newton_commands(prog: Program, org: Org) -> dict[str, np.ndarray]:
    """Engine records of a Newton program (one channel): G_ACT = ACTBG of one bank group of one rank
    (counting ``pim.actbg_faw_acts`` ACTs in tFAW), COMP = MACAB over every bank, GWRITE/READRES = BUF
    units, PIM_PRECHARGE = PREA."""
    cmd = _Cmds()
    f = prog.fields
    open_row = 0
    for i, mn in enumerate(prog.mnemonics()):
        if mn == "GACT":
            open_row = int(f["row"][i])
            cmd.add("ACTBG", pch=0, rank=int(f["rank"][i]), bg=int(f["bg"][i]), row=open_row)
        elif mn == "COMP":
            cmd.add("MACAB", row=open_row, col=int(f["col"][i]), repeat=int(f["repeat"][i]))
        elif mn in ("GWRITE", "READRES"):
            cmd.add("BUF", pch=0, repeat=int(f["bursts"][i]))
        elif mn == "PIM_PRECHARGE":
            cmd.add("PREA")
        elif mn == "BARRIER":
            cmd.add("BARRIER")
        else:  # RD / WR
            cmd.add(
                mn,
                pch=0,
                rank=int(f["rank"][i]),
                bg=int(f["bg"][i]),
                bank=int(f["bank"][i]),
                row=int(f["row"][i]),
                col=int(f["col"][i]),
                repeat=int(f["repeat"][i]),
            )
    return cmd.arrays()


def record_instructions(prog: Program, comp_instructions: str = "fused") -> np.ndarray:
    """NPU instructions each record of a Newton program takes through the issue port: GWRITE 1, the first G_ACT of
    a tile 1 (the P_HEADER); ``per_comp``: COMP its repeat count and READRES 1; ``fused``: 1 on the first COMP of a
    run (the whole COMPS_READRES), 0 on the rest of the run and its READRES; PIM_PRECHARGE / BARRIER 0 (no
    instruction: NewtonSim closes the tile after its last READRES)."""
    if comp_instructions not in COMP_INSTRUCTIONS:
        raise ConfigError(
            f"expected one of {', '.join(COMP_INSTRUCTIONS)}, got {comp_instructions!r}", key="comp_instructions"
        )
    isa = prog.isa
    op = prog.opcode
    gact, comp, readres = op == isa.code("GACT"), op == isa.code("COMP"), op == isa.code("READRES")
    after = lambda m: np.concatenate([[False], m[:-1]])  # noqa: E731 (the previous record is an m)
    header = gact & ~after(gact)
    n = (header | (op == isa.code("GWRITE"))).astype(np.int64)
    if comp_instructions == "per_comp":
        n += readres + np.where(comp, prog.fields["repeat"], 0)
    else:  # one COMPS_READRES per COMP run: carried by the run's first COMP, so no COMP starts before it arrives
        n += (comp & ~after(comp)) | (readres & ~after(comp))
    return n


def port_arrivals(
    progs: Sequence[Program],
    interval_cycles: float,
    comp_instructions: str = "fused",
    positions: Sequence[np.ndarray] | None = None,
):
    """Per program (channel) the ``arrival`` cycle of each record through an in-order port of one instruction per
    ``interval_cycles``, and the total instruction count. Issue order: ``positions[c]`` are program c's records'
    places in one sequence over all programs (a user's program as written, ``attnsim pim run``); None: the
    programs one after another (NeuPIMs issues channel by channel, Scheduler.cc group_sub_batches)."""
    ns = [record_instructions(p, comp_instructions) for p in progs]
    if positions is None:
        ends = np.cumsum([len(n) for n in ns])
        positions = [np.arange(e - len(n), e) for n, e in zip(ns, ends)]
    issued = np.zeros(sum(len(n) for n in ns), np.int64)
    for n, pos in zip(ns, positions):
        issued[pos] = n
    before = np.cumsum(issued) - issued  # instructions issued before each record's first one
    out = [
        np.where(n > 0, np.ceil(before[pos] * float(interval_cycles)), 0).astype(np.int64)
        for n, pos in zip(ns, positions)
    ]
    return out, int(issued.sum())


def placement_load(assignment, org: Org, *, heads: int, dhead: int, elem_bytes: float):
    """The per-request load ``assignment`` places by: the artefact's estimate (online), else row openings."""
    load_fn = artefact_load if assignment == "online" else request_load
    return lambda t: load_fn(t, org, heads=heads, dhead=dhead, elem_bytes=elem_bytes)


def lower_newton(
    phase: str,
    lens: Sequence[int],
    *,
    heads: int,
    dhead: int,
    group: int,
    elem_bytes: float,
    n_channels: int,
    org: Org,
    pu: PU,
    assignment="greedy",
    port_interval_cycles: float | None = None,
    comp_instructions: str = "fused",
) -> Lowered:
    """Lower the logit ("score") or attend ("context") GEMV of every request (``lens``: tokens per
    request; ``heads``: KV heads of a request on this device; ``group``: query heads per KV head).
    ``port_interval_cycles``: DRAM cycles per instruction of the NPU issue port (None: no port limit)."""
    if phase not in ("score", "context"):
        raise ConfigError(NO_SOFTMAX + f", got phase {phase!r}", key="phase")
    lens = np.asarray(lens, np.int64)
    progs, cmds, mult = [], [], []
    load = placement_load(assignment, org, heads=heads, dhead=dhead, elem_bytes=elem_bytes)
    extra = {}
    if port_interval_cycles is None:
        for slices, m in assign_requests(lens, n_channels, assignment, load):
            p = channel_program(slices, phase, org, pu, heads=heads, dhead=dhead, group=group, elem_bytes=elem_bytes)
            p.multiplicity = m
            progs.append(p)
            cmds.append(newton_commands(p, org))
            mult.append(m)
    else:  # one program per channel, channels in issue order (ascending), each channel's requests in the order
        # they were placed (as assign_requests: batch order for online / round_robin / a list, the artefact's; greedy
        # longest first), so a port without a limit times exactly as no port
        chan, order = _placement([int(t) for t in lens], n_channels, assignment, load)
        for c in sorted(set(chan[chan >= 0].tolist())):
            p = channel_program(
                [int(lens[i]) for i in order if chan[i] == c],
                phase,
                org,
                pu,
                heads=heads,
                dhead=dhead,
                group=group,
                elem_bytes=elem_bytes,
            )
            p.multiplicity = 1
            progs.append(p)
            mult.append(1)
        arrivals, n_instr = port_arrivals(progs, port_interval_cycles, comp_instructions)
        for p, a in zip(progs, arrivals):
            c = newton_commands(p, org)
            c["arrival"] = a
            cmds.append(c)
        extra = dict(npu_instructions=n_instr, issue_port_key=(float(port_interval_cycles), comp_instructions))
    tok = float(lens.sum()) * heads
    return Lowered(
        "newton",
        phase,
        progs,
        cmds,
        np.array(mult, np.int64),
        macs=tok * dhead * group,
        pim_bytes=tok * dhead * elem_bytes,
        meta=dict(
            partition="neupims",
            items=len(lens),
            elements=tok * group,
            assignment=assignment if isinstance(assignment, str) else "explicit",
            **extra,
        ),
    )
