"""GEMV lowering for decode attention (score q*K^T, context s*V) and FC layers onto the PIM ISAs.

Work items are (request, KV head) pairs; each reads its K (score) or V (context) slice of
``tokens x head_dim`` elements and multiplies it with ``group`` query vectors (GQA: query heads
per KV head). Items are placed on channels (optionally split over ``channels_per_item``
channels by tokens) with a longest-first greedy assignment; inside a channel the
:class:`Partition` spreads tokens and head-dim elements over pseudo-channels, ranks, bank groups
and banks. Presets follow AttAcc's schemes (shared/reference/pim_dram.md b.6,
``gen_trace_attacc_bank.py``): ``attacc_bank`` = one head per channel, tokens over
pCH x rank x BG, dhead over the banks of a BG, 16 MACs per MACAB of 32 B;
``attacc_bg`` = PU per bank group (MACBG, tokens over pCH x rank, dhead over BGs);
``attacc_buffer`` = PU on the buffer die fed by normal reads at the pseudo-channel bus rate.

Symmetry: channels with identical work share one program (``Program.multiplicity``), and the
caller multiplies identical layers by their ``count``; only distinct channel workloads are
lowered and simulated, which keeps a 70B decode step at a few hundred records.

The result of a lowering is a :class:`Lowered`: the ISA programs (one per distinct channel
workload, channel field 0) and, for each, the engine command records of that channel
(hwmodels/dram/API.md fields; op codes in ``ENGINE_CODES``). For FIMDRAM the ISA program is the
CRF kernel; the host-side column-command stream that drives it is given as engine records.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.isa import get_isa
from attnsim.isa.base import Program
from attnsim.isa.fimdram import column_commands, gemv_kernel
from attnsim.isa.lowered import (
    CMD_FIELDS,
    ENGINE_CODES,
    ENGINE_FLAGS,
    LEVELS,
    PU,
    Lowered,  # noqa: F401
    Org,
    _Cmds,
)  # (lower.X keeps these names)


@dataclass(frozen=True)
class Partition:
    """Where tokens and head-dim elements of one work item go inside a channel."""

    name: str
    token_levels: tuple[str, ...]
    dhead_levels: tuple[str, ...]
    pu_level: str = "bank"  # "bank" | "bg" | "buffer"
    channels_per_item: int = 1
    # paged KV: tokens per KV block (0 = contiguous). A block's slice in every bank starts a new row
    # (the rest of a physical row holds other blocks, which this item's all-bank MACs cannot use), so
    # small blocks cost extra ACT/PRE rounds per item: the row-buffer locality of the paged layout.
    kv_block_tokens: int = 0

    def block_cols(self, org: "Org", cols_tok: int) -> int:
        """Columns of one KV block in each bank (0 = contiguous)."""
        if self.kv_block_tokens <= 0:
            return 0
        T, _ = self.slots(org)
        return -(-self.kv_block_tokens // T) * cols_tok

    def slots(self, org: Org) -> tuple[int, int]:
        for lv in self.token_levels + self.dhead_levels:
            if lv not in LEVELS:
                raise ConfigError(f"expected levels from {', '.join(LEVELS)}, got {lv!r}", key="partition")
        if len(set(self.token_levels + self.dhead_levels)) != len(self.token_levels + self.dhead_levels):
            raise ConfigError("a level is used twice", key="partition")
        return (
            math.prod(org.size(lv) for lv in self.token_levels),
            math.prod(org.size(lv) for lv in self.dhead_levels),
        )


PARTITIONS = {
    "attacc_bank": Partition("attacc_bank", ("pch", "rank", "bg"), ("bank",), "bank"),
    "attacc_bg": Partition("attacc_bg", ("pch", "rank"), ("bg",), "bg"),
    "attacc_buffer": Partition("attacc_buffer", ("pch",), (), "buffer"),
}


def get_partition(name: str, channels_per_item: int = 1) -> Partition:
    if name not in PARTITIONS:
        raise ConfigError(f"expected one of {', '.join(PARTITIONS)}, got {name!r}", key="partition")
    p = PARTITIONS[name]
    return Partition(p.name, p.token_levels, p.dhead_levels, p.pu_level, channels_per_item)


# ---------------------------------------------------------------- placement


def assign_items(
    tokens: Sequence[int], n_channels: int, channels_per_item: int = 1
) -> list[tuple[tuple[int, ...], int]]:
    """Place item slices on channels; returns distinct per-channel slice lists with multiplicity.

    Each item of ``tokens[i]`` tokens is cut into ``channels_per_item`` slices (sizes differ by
    at most one); slices go longest first to the least loaded channel (LPT). Idle channels are
    not listed.
    """
    if n_channels < 1 or channels_per_item < 1:
        raise ConfigError(f"expected positive channel counts, got {n_channels}, {channels_per_item}")
    tokens = np.asarray(tokens, np.int64).reshape(-1)
    q, r = np.divmod(tokens, channels_per_item)  # per item: r slices of q + 1 tokens, the others q
    slices = np.concatenate([np.repeat(q + 1, r), np.repeat(q, channels_per_item - r)])
    slices = np.sort(slices[slices > 0])[::-1].tolist()
    if not slices:
        return []
    if slices[0] == slices[-1]:  # uniform: closed form
        q, r = divmod(len(slices), n_channels)
        out = []
        if r:
            out.append(((slices[0],) * (q + 1), r))
        if q:
            out.append(((slices[0],) * q, n_channels - r))
        return out
    heap = [(0, c) for c in range(min(n_channels, len(slices)))]
    work: dict[int, list[int]] = {c: [] for _, c in heap}
    for s in slices:
        load, c = heapq.heappop(heap)
        work[c].append(s)
        heapq.heappush(heap, (load + s, c))
    return sorted(Counter(tuple(w) for w in work.values()).items(), key=lambda kv: -sum(kv[0]))


# ---------------------------------------------------------------- engine records


def attacc_commands(prog: Program, org: Org, pu: PU) -> dict[str, np.ndarray]:
    """Expand an AttAcc program (one channel) into engine records."""
    cmd = _Cmds()
    f = prog.fields
    open_row = 0  # MACAB records carry the row opened by the last ACTAB (the engine checks it)
    for i, mn in enumerate(prog.mnemonics()):
        ch = int(f["ch"][i])
        if mn == "ACTAB":
            open_row = int(f["row"][i])
            cmd.add("ACTAB", ch, row=open_row)
        elif mn == "PREA":
            cmd.add("PREA", ch)
        elif mn == "MACAB":
            cmd.add("MACAB", ch, row=open_row, col=int(f["col"][i]), repeat=int(f["repeat"][i]))
        elif mn in ("WRGB", "MVSB", "MVGB"):
            for p in range(org.pseudo_channels):
                cmd.add("BUF", ch, pch=p, repeat=int(f["bursts"][i]))
        elif mn == "SFM":
            cmd.add("FIX", ch, cycles=max(1, math.ceil(int(f["length"][i]) * pu.softmax_cycles_per_element)))
        elif mn == "BARRIER":
            cmd.add("BARRIER", ch)
        elif mn == "REFAB":
            cmd.add("REF", ch)
        elif mn in ("RD", "WR", "MACSB"):
            b = int(f["bank"][i])
            bpg, bgs, rk = org.banks_per_group, org.bank_groups, org.ranks
            cmd.add(
                mn,
                ch,
                pch=b // (bpg * bgs * rk),
                rank=(b // (bpg * bgs)) % rk,
                bg=(b // bpg) % bgs,
                bank=b % bpg,
                col=int(f["col"][i]),
                repeat=int(f["repeat"][i]),
            )
    return cmd.arrays()


def aim_commands(prog: Program, org: Org, pu: PU, af_cycles: int = 1) -> dict[str, np.ndarray]:
    """Expand an AiM program (channel 0 of its mask) into engine records.

    A MODE record (nMODCH, the simulator's TMOD) precedes every ISR that enters or leaves the
    register-RW mode (isa/aim.py ``REGISTER_ISRS``); the channel starts outside it."""
    from attnsim.isa.aim import REGISTER_ISRS

    cmd = _Cmds()
    f = prog.fields
    open_row = -1
    reg_mode = False
    mns = list(prog.mnemonics())
    for i, mn in enumerate(mns):
        if mn not in ("SYNC", "EOC") and (mn in REGISTER_ISRS) != reg_mode:
            cmd.add("MODE", 0)
            reg_mode = not reg_mode
        if mn in ("WR_GB", "WR_AFLUT"):
            cmd.add("BUF", 0, pch=0, repeat=int(f["opsize"][i]))
        elif mn in ("MAC_ABK", "EWMUL", "EWADD"):
            r = int(f["row"][i])
            nxt = i + 1  # the row stays open for the next MAC_ABK on it (register reads/writes between)
            while nxt < len(mns) and mns[nxt] in ("RD_MAC", "WR_BIAS", "WR_GB"):
                nxt += 1
            if not (i > 0 and open_row == r):
                cmd.add("ACTAB", 0, row=r)
            cmd.add("MACAB", 0, row=r, repeat=int(f["opsize"][i]))
            open_row = r
            if not (nxt < len(mns) and mns[nxt] == mn and int(f["row"][nxt]) == r):
                cmd.add("PREA", 0)
                open_row = -1
        elif mn in ("RD_MAC", "RD_AF", "WR_BIAS"):
            cmd.add("BUF", 0, pch=0, repeat=max(1, org.bank_groups * org.banks_per_group * pu.acc_bytes // 32))
        elif mn == "AF":
            cmd.add("FIX", 0, cycles=af_cycles)
        elif mn in ("SYNC", "EOC"):
            cmd.add("BARRIER", 0)
        elif mn in ("MAC_SBK", "COPY_BKGB", "COPY_GBBK", "RD_SBK", "WR_SBK"):
            b = int(f["bank"][i])
            op = {"MAC_SBK": "MACSB", "COPY_BKGB": "RD", "COPY_GBBK": "WR", "RD_SBK": "RD", "WR_SBK": "WR"}[mn]
            cmd.add(
                op,
                0,
                pch=0,
                rank=0,
                bg=b // org.banks_per_group,
                bank=b % org.banks_per_group,
                row=int(f["row"][i]),
                repeat=int(f["opsize"][i]),
            )
    return cmd.arrays()


# ---------------------------------------------------------------- per-channel schedules


def _item_dims(org: Org, part: Partition, pu: PU, tokens: int, dhead: int, elem_bytes: float, group: int):
    T, D = part.slots(org)
    tok_slot = -(-tokens // T)
    cols_tok = max(1, math.ceil(math.ceil(dhead / D) * elem_bytes / pu.column_bytes))
    # a column holds e = column_bytes / elem_bytes elements; the PU has macs_per_command lanes, so a
    # query needs ceil(e / lanes) commands per column (fp8/int8/int4 KV: 2/2/4 at 16 lanes and 32 B
    # columns), and one command serves lanes // e queries when e < lanes (GQA groups)
    e = max(1, int(pu.column_bytes // elem_bytes))
    per_cmd = max(1, pu.macs_per_command // e)
    cmds_per_col = max(1, -(-e // pu.macs_per_command))
    passes = -(-group // per_cmd) * cmds_per_col
    return T, D, tok_slot, cols_tok, passes


def _attacc_channel(slices, phase, org, part, pu, dhead, elem_bytes, group, row0=0) -> Program:
    """AttAcc bank-level program of one channel running ``slices`` (token counts) in order."""
    recs, row = [], row0
    for t in slices:
        T, D, tok_slot, cols_tok, passes = _item_dims(org, part, pu, t, dhead, elem_bytes, group)
        if phase == "softmax":
            recs.append(("SFM", dict(ch=0, length=t * group)))
            recs.append(("BARRIER", dict(ch=0)))
            continue
        cols = tok_slot * cols_tok
        per_pch = T // org.pseudo_channels
        if phase == "score":
            recs.append(("WRGB", dict(ch=0, bursts=max(1, math.ceil(dhead * elem_bytes * group / 32)))))
        else:  # context: softmax output of this pCH's tokens into the GEMV buffers
            recs.append(("MVGB", dict(ch=0, bursts=max(1, math.ceil(tok_slot * per_pch * group * pu.acc_bytes / 32)))))
        done = 0
        bcols = part.block_cols(org, cols_tok)
        while done < cols:
            n = min(org.columns, cols - done)
            if bcols:  # a row holds (part of) one block only
                n = min(n, bcols - done % bcols)
            recs.append(("ACTAB", dict(ch=0, row=row % org.rows)))
            rep = n * passes
            while rep > 0:  # repeat field is 12 bits
                recs.append(("MACAB", dict(ch=0, col=0, repeat=min(rep, 4095))))
                rep -= 4095
            recs.append(("PREA", dict(ch=0)))
            if phase == "score":  # scores of the tokens finished in this row, per pCH
                toks = n / cols_tok
                recs.append(("MVSB", dict(ch=0, bursts=max(1, math.ceil(toks * per_pch * group * pu.acc_bytes / 32)))))
            done += n
            row += 1
        if phase == "context":  # per-token-slot partial outputs of this pCH
            recs.append(("MVSB", dict(ch=0, bursts=max(1, math.ceil(dhead * group * pu.acc_bytes * per_pch / 32)))))
        recs.append(("BARRIER", dict(ch=0)))
    return Program.from_records(get_isa("attacc"), recs)


def _bg_channel(slices, phase, org, part, pu, dhead, elem_bytes, group, row0=0) -> dict[str, np.ndarray]:
    """BG-level PU (one PU per bank group): interleaved MACBG records, engine form only."""
    cmd, row = _Cmds(), row0
    for t in slices:
        T, D, tok_slot, cols_tok, passes = _item_dims(org, part, pu, t, dhead, elem_bytes, group)
        if phase == "softmax":
            cmd.add("FIX", cycles=max(1, math.ceil(t * group * pu.softmax_cycles_per_element)))
            continue
        # one PU per bank group reads its banks one after the other: an ACTBG round opens one row
        # in every bank of each BG, i.e. columns x banks_per_group column ops per PU
        cols = tok_slot * cols_tok
        for p in range(org.pseudo_channels):
            cmd.add("BUF", pch=p, repeat=max(1, math.ceil(dhead * elem_bytes * group / 32)))
        done = 0
        bcols = part.block_cols(org, cols_tok) * org.banks_per_group
        while done < cols:
            n = min(org.columns * org.banks_per_group, cols - done)
            if bcols:
                n = min(n, bcols - done % bcols)
            for b in range(org.bank_groups):
                cmd.add("ACTBG", bg=b, row=row % org.rows)
            for _ in range(n * passes):
                for b in range(org.bank_groups):
                    cmd.add("MACBG", bg=b, row=row % org.rows)
            cmd.add("PREA")
            done += n
            row += 1
        cmd.add("BARRIER")
    return cmd.arrays()


def stream_reads(org: Org, nbytes: float, row0: int = 0) -> dict[str, np.ndarray]:
    """Sequential read stream of ``nbytes`` on one channel, shaped the way a streaming controller reads
    (CXL-PNM / buffer-die PUs): a round opens ``row`` in one bank of every (pseudo-channel, bank group)
    and reads those rows out interleaved at burst granularity (one F_IL record: pseudo-channel fastest,
    then bank group, so the data buses stay busy at tCCD_S instead of tCCD_L), each bank
    auto-precharging after its last burst. The next round's rows (next bank, then rank, then row) are
    activated during the current round, one ACT group per bank group (its pseudo-channels) from the
    middle of the round on, so tRCD is hidden. Records: 2 x bank groups + 1 per round; the engine's
    F_IL closed form keeps a 100 MB stream fast (bench/bench_stream_reads.py)."""
    P, R, G, B, C = org.pseudo_channels, org.ranks, org.bank_groups, org.banks_per_group, org.columns
    nb = P * G
    per_round = nb * C
    bursts = int(math.ceil(max(0.0, nbytes) / org.burst_bytes))
    n_rounds = -(-bursts // per_round)
    out = {k: np.zeros(0, np.int64) for k in CMD_FIELDS + ("flags",)}
    if n_rounds == 0:
        return out
    il, ap = ENGINE_FLAGS["IL"], ENGINE_FLAGS["AP"]
    # one round's template: (op, pch, bg, of next round, rotations, flags)
    tpl = []
    if R * B >= 2 and C >= 2:  # ACT-ahead needs the next round in other banks
        after = [min(C - 2, C // 2 + g) for g in range(G)]  # ACT group g after rotation after[g]
        done = 0
        for g in range(G):
            if after[g] + 1 > done:
                tpl.append((ENGINE_CODES["RD"], -1, -1, 0, after[g] + 1 - done, il))
                done = after[g] + 1
            tpl += [(ENGINE_CODES["ACT"], p, g, 1, 0, 0) for p in range(P)]
        tpl.append((ENGINE_CODES["RD"], -1, -1, 0, C - done, il | ap))
    else:
        tpl.append((ENGINE_CODES["RD"], -1, -1, 0, C, il | ap))
    t = np.array(tpl, np.int64)
    k = np.repeat(np.arange(n_rounds - 1, dtype=np.int64), len(t)) + np.tile(t[:, 3], n_rounds - 1)
    last = np.array([[ENGINE_CODES["RD"], -1, -1, 0, 0, il | ap]], np.int64)
    f = np.concatenate([np.tile(t, (n_rounds - 1, 1)), last])
    k = np.concatenate([k, [n_rounds - 1]])
    rep = f[:, 4] * nb
    rep[-1] = bursts - (n_rounds - 1) * per_round
    out.update(
        op=f[:, 0],
        pch=f[:, 1],
        bg=f[:, 2],
        rank=(k // B) % R,
        bank=k % B,
        row=(row0 + k // (B * R)) % org.rows,
        repeat=rep,
        flags=f[:, 5],
    )
    n = len(rep)
    for key in ("ch", "col", "cycles"):
        out[key] = np.zeros(n, np.int64)
    return out


def _aim_channel(slices, phase, org, pu, dhead, elem_bytes, group) -> Program:
    """AiM program of one channel: tokens over the 16 banks (score, FC outputs) / outputs over banks (context).

    Each bank has one MAC register (RD_MAC reads the 16 into a GPR), so every dot product a bank finishes
    is read out and the register re-biased (WR_BIAS: zero, or the partial sum of earlier GB fills) before
    the next one: score = one token per bank, ``ceil(dhead x bytes / 32 B)`` MAC16 per dot product (CENT
    Vector_Matrix_Mul_score_pim: WR_BIAS, MAC_ABK, RD_MAC per head and 16 tokens); context = one output
    dim per bank over the <= 1024 probabilities a 2 KB GB fill holds (CENT intra-device output GEMV).
    Consecutive MAC_ABKs on one row keep it open (aim_commands)."""
    if phase == "softmax_io":
        return _aim_softmax_io(slices, org, pu, group)
    recs, row = [], 0
    banks = org.bank_groups * org.banks_per_group
    fill_cols = max(1, min(org.columns, pu.gb_bytes // pu.column_bytes))  # GB columns per fill (64)
    for t in slices:
        if phase == "softmax":
            recs.append(("AF", dict(ch_mask=1)))  # softmax approximated by the LUT activation unit
            continue
        if phase in ("score", "fc"):
            cols_dot = math.ceil(dhead * elem_bytes / pu.column_bytes)  # MAC16 per dot product
            dots = -(-t // banks)  # token groups (one per bank)
            fills = [min(fill_cols, cols_dot - f * fill_cols) for f in range(-(-cols_dot // fill_cols))]
            # FC: CENT's reuse-GB order (TransformerBlock.py Vector_Matrix_Mul_weight_pim_only_trace): per GB
            # fill, groups of <= mac_registers outputs per bank as WR_BIAS x n, MAC_ABK x n, RD_MAC x n
            reg = max(1, pu.mac_registers) if phase == "fc" else 1
            n_grp = -(-dots // reg)
            size = -(-dots // n_grp) if dots else 0
            for _ in range(group):  # one query vector per pass through the rows
                for f, c in enumerate(fills):
                    recs.append(("WR_GB", dict(opsize=c, ch_mask=1, gb_col=0)))
                    for g0 in range(0, dots, max(size, 1)):
                        grp = range(g0, min(dots, g0 + size))
                        recs.extend(("WR_BIAS", dict(ch_mask=1)) for _ in grp)
                        for d in grp:
                            pos = d * cols_dot + f * fill_cols  # first column of this dot product's slice
                            done = 0
                            while done < c:  # a slice may cross a row boundary
                                n = min(c - done, org.columns - (pos + done) % org.columns)
                                recs.append(
                                    (
                                        "MAC_ABK",
                                        dict(opsize=n, ch_mask=1, row=(row + (pos + done) // org.columns) % org.rows),
                                    )
                                )
                                done += n
                        recs.extend(("RD_MAC", dict(ch_mask=1, reg=0)) for _ in grp)
                row += -(-dots * cols_dot // org.columns)
        else:
            dims = -(-dhead // banks)  # output dims per bank
            per_fill = max(1, pu.gb_bytes // pu.acc_bytes)  # probabilities one GB fill holds (1024)
            for _ in range(group):
                for f in range(-(-t // per_fill)):
                    n_tok = min(per_fill, t - f * per_fill)
                    recs.append(
                        (
                            "WR_GB",
                            dict(
                                opsize=max(1, min(64, math.ceil(n_tok * pu.acc_bytes / pu.column_bytes))),
                                ch_mask=1,
                                gb_col=0,
                            ),
                        )
                    )
                    c = math.ceil(n_tok * elem_bytes / pu.column_bytes)
                    for _ in range(dims):
                        recs.append(("WR_BIAS", dict(ch_mask=1)))
                        done = 0
                        while done < c:
                            n = min(64, org.columns, c - done)
                            recs.append(("MAC_ABK", dict(opsize=n, ch_mask=1, row=row % org.rows)))
                            done += n
                            row += 1
                        recs.append(("RD_MAC", dict(ch_mask=1, reg=0)))
    recs.append(("EOC", {}))
    return Program.from_records(get_isa("aim"), recs)


def _aim_softmax_io(slices, org, pu, group) -> Program:
    """CENT's bank side of a controller softmax on one channel (Yufeng98/CENT @ 8c79786
    ``Llama.py trace_only`` softmax block, ``TransformerBlock.py store_for_EWMUL_score_only_trace`` /
    ``load_from_EWMUL_score_only_trace``): twice (scale the scores, then scale the exponentials) the
    controller writes the score vectors and the scale operand into banks 0 and 1 of the bank groups
    (WR_SBK, one 32 B column each), one EWMUL per row multiplies them into bank 2 and the controller
    reads the result back (RD_SBK), then SYNC: 4 writes + 2 reads of every score. Score vectors
    (item x query head, ``acc_bytes`` each) go round-robin over the bank groups."""
    per_row = org.columns
    vec = [math.ceil(t * pu.acc_bytes / pu.column_bytes) for t in slices for _ in range(group)]
    bgs = org.bank_groups
    cols_bg = [sum(vec[j::bgs]) for j in range(bgs)]  # columns each bank group holds
    recs = []

    def moves(op, bank_in_bg):
        for j in range(bgs):
            left, row = cols_bg[j], 0
            while left > 0:
                n = min(per_row, left)
                recs.append(
                    (op, dict(opsize=n, ch_mask=1, bank=j * org.banks_per_group + bank_in_bg, row=row % org.rows))
                )
                left -= n
                row += 1

    for _ in range(2):  # scale scores; scale exponentials
        moves("WR_SBK", 0)
        moves("WR_SBK", 1)
        left, row = max(cols_bg), 0
        while left > 0:  # the bank groups' EWMUL16 run together
            n = min(per_row, left)
            recs.append(("EWMUL", dict(opsize=n, ch_mask=1, row=row % org.rows)))
            left -= n
            row += 1
        moves("RD_SBK", 2)
        recs.append(("SYNC", {}))
    recs.append(("EOC", {}))
    return Program.from_records(get_isa("aim"), recs)


ACT_OPS = ("mlp_act",)  # the FFN's SiLU(x1) x x3 (CENT: AF in the w1 GEMV, the multiply through the banks)


def lower_aim_vector_io(op: str, n: int, k: int, reps: int, *, n_channels: int, org: Org, pu: PU) -> Lowered:
    """CENT's bank side of a controller RMSNorm (``op`` a norm, ``n`` elements) or RoPE (``op`` rope,
    ``n`` / ``k`` q / k elements) on one AiM device of ``n_channels`` channels, ``reps`` times (one per
    token), as CENT's decode trace runs it (Yufeng98/CENT @ 8c79786 ``Llama.py trace_only``, with
    ``TransformerBlock.py store_for_neighbor_bank_input_only_trace`` / ``store_for_EWMUL_input_only_trace``
    / ``load_from_EWMUL_input_only_trace``: one W MEM / R MEM, a WR_SBK / RD_SBK column, per burst of
    ``column_bytes`` / 2 bf16 elements per bank, the device's B = channels x banks banks):

    - RMSNorm: x into neighbour banks 0 and 1 (ceil(n / (B/2)) elements per bank), WR_BIAS + MAC_ABK +
      RD_MAC (x.pow), the broadcast scalar and x into bank groups 0 and 1 (ceil(n / (B/4)) per bank),
      EWMUL, COPY_BKGB + COPY_GBBK for each bank of group 2, EWMUL, the result read from group 2, SYNC:
      n = 4096 over 512 banks: 256 + 256 + 128 x 2 + 128 x 2 + 128 x 2 = 1280 single-bank accesses.
    - RoPE: xq (2 ceil(n / (B/4)) per bank) and xk (that / (n / k)) stored, EWMUL of n / burst and
      k / burst columns, both read back (CENT's trace counts them with its store helper: W MEM):
      n = k = 4096: 4 x 128 x 4 = 2048.
    - FFN activation (``mlp_act``; CENT's ``trace_activation`` branch for an FFN that fits one row per
      bank): SiLU(x1) and x3 into groups 0 and 1 (ceil(n / (B/4)) per bank), EWMUL, COPY_BKGB + COPY_GBBK
      per bank of group 2, group 0 stored again, EWMUL, the result read from group 2, SYNC:
      n = 11008: 128 banks x 6 bursts x 4 = 3072.
    Each channel runs 1 / n_channels of the single-bank accesses (CENT's bank_index spreads the banks
    over all channels) and every all-bank command."""
    from attnsim.isa.cxl_pnm import ROPE_OPS

    burst = max(1, pu.column_bytes // 2)
    B = n_channels * org.bank_groups * org.banks_per_group
    cdiv = lambda a, b: -(-int(a) // int(b))
    recs = []

    def sbk(mn, bank, total):
        if total > 0:
            recs.append((mn, dict(opsize=cdiv(total, n_channels), ch_mask=1, bank=bank, row=0)))

    def ewmul(cols):
        while cols > 0:  # one row per EWMUL (as ``_aim_softmax_io``)
            c = min(org.columns, cols)
            recs.append(("EWMUL", dict(opsize=c, ch_mask=1, row=0)))
            cols -= c

    ew_len = cdiv(n, max(1, B // 4))
    ew_banks = cdiv(n, ew_len)
    copies = lambda b: [
        r
        for bank in range(2, org.bank_groups * org.banks_per_group, 4)  # CENT: bank % 4 == 2
        for r in (
            ("COPY_BKGB", dict(opsize=b, ch_mask=1, bank=bank, row=0)),
            ("COPY_GBBK", dict(opsize=b, ch_mask=1, bank=bank - 1, row=0)),
        )
    ]
    for _ in range(max(1, reps)):
        if op in ACT_OPS:
            ewb = cdiv(ew_len, burst)
            sbk("WR_SBK", 0, ew_banks * ewb)
            sbk("WR_SBK", 1, ew_banks * ewb)
            ewmul(ewb)
            recs += copies(ewb)
            sbk("WR_SBK", 0, ew_banks * ewb)
            ewmul(ewb)
            sbk("RD_SBK", 2, ew_banks * ewb)
            recs.append(("SYNC", {}))
            continue
        if op in ROPE_OPS:
            q_len = 2 * ew_len
            k_len = q_len // max(1, n // max(k, 1))
            for bank in (1, 2):  # store (group 1), read back (group 2)
                sbk("WR_SBK", bank, ew_banks * cdiv(q_len, burst))
                sbk("WR_SBK", bank, ew_banks * cdiv(k_len, burst))
                if bank == 1:
                    ewmul(n // burst)
                    ewmul(k // burst)
            continue
        nb_len = cdiv(n, max(1, B // 2))
        nb_banks, nbb, ewb = cdiv(n, nb_len), cdiv(nb_len, burst), cdiv(ew_len, burst)
        sbk("WR_SBK", 0, nb_banks * nbb)
        sbk("WR_SBK", 1, nb_banks * nbb)
        recs += [
            ("WR_BIAS", dict(ch_mask=1)),
            ("MAC_ABK", dict(opsize=nbb, ch_mask=1, row=0)),
            ("RD_MAC", dict(ch_mask=1, reg=0)),
        ]
        sbk("WR_SBK", 0, ew_banks * ewb)
        sbk("WR_SBK", 1, ew_banks * ewb)
        ewmul(ewb)
        recs += copies(ewb)
        ewmul(ewb)
        sbk("RD_SBK", 2, ew_banks * ewb)
        recs.append(("SYNC", {}))
    recs.append(("EOC", {}))
    prog = Program.from_records(get_isa("aim"), recs)
    prog.multiplicity = n_channels
    return Lowered(
        "aim",
        "vector_io",
        [prog],
        [aim_commands(prog, org, pu)],
        np.array([n_channels], np.int64),
        meta=dict(partition="cent_vector", items=max(1, reps), elements=float(n + k) * max(1, reps)),
    )


def host_requests(low: "Lowered") -> int:
    """Host requests an AiM device decodes for a lowering (isa/aim.py): every single-bank column
    access on every channel, and each ISR once (broadcast over its channel mask; the longest
    program's count)."""
    mem, isr = 0, 0
    for p, m in zip(low.programs, low.multiplicity):
        if p is None:
            continue
        mns = np.array(list(p.mnemonics()))
        sbk = np.isin(mns, ("RD_SBK", "WR_SBK"))
        mem += int(m) * int(np.sum(p["opsize"][sbk]))
        isr = max(isr, int(np.sum(~sbk)))
    return mem + isr


def _fimdram_channel(slices, phase, org, pu, dhead, elem_bytes, group) -> dict[str, np.ndarray]:
    """Host command stream driving the FIMDRAM GEMV CRF kernel on one channel.

    One PU per 2 banks (b.3); per pass the kernel consumes ``column_commands(gemv_kernel())``
    all-bank column commands (16 MACs of 32 B per PU + 1 NOP), GRF_A is written by the host per
    128-element input tile and GRF_B read back per pass (BUF on every pCH)."""
    cmd, row = _Cmds(), 0
    per_pass = column_commands(gemv_kernel())
    macs_per_pass = per_pass - 1
    pus = org.banks // 2
    for t in slices:
        if phase == "softmax":
            cmd.add("FIX", cycles=max(1, math.ceil(t * group * pu.softmax_cycles_per_element)))
            continue
        nbytes = t * dhead * elem_bytes
        cols_pu = math.ceil(nbytes / (pu.column_bytes * pus))
        passes = math.ceil(cols_pu / macs_per_pass) * group
        tiles = 1 if phase == "score" else math.ceil(t / 128)
        passes_per_row = max(1, org.columns // macs_per_pass)
        for _ in range(tiles):
            for p in range(org.pseudo_channels):
                cmd.add("BUF", pch=p, repeat=8)  # WRIO_TO_GRF: 8 x 256 bit GRF_A
        done = 0
        while done < passes:
            n = min(passes_per_row, passes - done)
            cmd.add("ACTAB", row=row % org.rows)
            cmd.add("MACAB", row=row % org.rows, repeat=n * per_pass)
            cmd.add("PREA")
            for p in range(org.pseudo_channels):
                cmd.add("BUF", pch=p, repeat=8 * n)  # GRF_B -> host
            done += n
            row += 1
        cmd.add("BARRIER")
    return cmd.arrays()


def _cxl_program(slices, phase, dhead, elem_bytes, group) -> Program:
    recs = []
    fmt = 0.5 if elem_bytes < 1.0 else (1.0 if elem_bytes < 2.0 else (2.0 if elem_bytes < 4.0 else 4.0))
    dt = {1.0: 3, 2.0: 1, 4.0: 0, 0.5: 5}[fmt]  # the element format the stored bytes hold
    addr = 0
    for t in slices:
        if phase == "softmax":
            recs.append(("SOFTMAX", dict(buf=1, length=t * group)))
            continue
        n_in = dhead if phase == "score" else t
        recs.append(("LOAD_VEC", dict(dst=0, addr=0, length=n_in * group, dtype=dt)))
        recs.append(
            (
                "GEMV",
                dict(
                    dst=1,
                    src=0,
                    base=addr % (1 << 40),
                    rows=t,
                    cols=dhead,
                    dtype=dt,
                    trans=int(phase == "context"),
                    vectors=group,
                ),
            )
        )
        recs.append(("STORE", dict(src=1, addr=0, length=(t if phase == "score" else dhead) * group, dtype=dt)))
        addr += int(t * dhead * elem_bytes)
    recs.append(("BARRIER", {}))
    return Program.from_records(get_isa("cxl_pnm"), recs)


_CHANNEL_MEMO: dict = {}
MAX_CHANNEL_MEMO = 20_000  # entries (cleared when full; bounds memory: one entry ~ one channel's command arrays)
_ITEM_MEMO: dict = {}  # one item's program and command records (rows counted from 0), by everything they depend on


def _attacc_item(t: int, phase, org, part, pu, dhead, elem_bytes, group):
    """(program, commands) of one item of ``t`` tokens alone on a bank-PU channel (rows from 0)."""
    key = (t, phase, org, part, pu, dhead, elem_bytes, group)
    hit = _ITEM_MEMO.get(key)
    if hit is None:
        p = _attacc_channel([t], phase, org, part, pu, dhead, elem_bytes, group)
        hit = (p, attacc_commands(p, org, pu))
        if len(_ITEM_MEMO) >= MAX_CHANNEL_MEMO:
            _ITEM_MEMO.clear()
        _ITEM_MEMO[key] = hit
    return hit


def _attacc_channel_fast(slices: tuple, phase, org, part, pu, dhead, elem_bytes, group):
    """``_attacc_channel`` + ``attacc_commands`` of a channel, equal records: a channel runs its items one after
    the other, so its program is the items' programs (:func:`_attacc_item`) concatenated, with the row of the k-th
    ACTAB (and of the MACABs after it) = k mod rows (the running row counter). tests/test_lower_fast.py checks
    equality with the record-by-record build."""
    items = [_attacc_item(int(t), phase, org, part, pu, dhead, elem_bytes, group) for t in slices]
    isa = items[0][0].isa
    opcode = np.concatenate([p.opcode for p, _ in items])
    fields = {k: np.concatenate([p.fields[k] for p, _ in items]) for k in isa.field_names}
    act = opcode == isa.code("ACTAB")
    n_act = int(act.sum())
    if n_act:
        fields["row"][act] = np.arange(n_act, dtype=np.int64) % org.rows
    cmds = {k: np.concatenate([c[k] for _, c in items]) for k in CMD_FIELDS}
    op = cmds["op"]
    c_act = op == ENGINE_CODES["ACTAB"]
    if n_act:
        opened = np.cumsum(c_act) - 1  # the ACTAB each record follows
        rowed = c_act | (op == ENGINE_CODES["MACAB"])
        cmds["row"][rowed] = opened[rowed] % org.rows
    return Program(isa, opcode, fields), cmds


def _attacc_bank_channel(slices: tuple, phase, org, part, pu, dhead, elem_bytes, group):
    """(program, commands) of one AttAcc bank-PU channel, memoised on everything they depend on: a serving
    run's decode iterations put the same slices on a channel again and again. The program is a shallow
    copy per call (its ``multiplicity`` is set by the caller); the command arrays are shared, read only."""
    key = (slices, phase, org, part, pu, dhead, elem_bytes, group)
    hit = _CHANNEL_MEMO.get(key)
    if hit is None:
        hit = _attacc_channel_fast(slices, phase, org, part, pu, dhead, elem_bytes, group)
        if len(_CHANNEL_MEMO) >= MAX_CHANNEL_MEMO:
            _CHANNEL_MEMO.clear()
        _CHANNEL_MEMO[key] = hit
    return copy.copy(hit[0]), hit[1]


# ---------------------------------------------------------------- public entry points


def lower_attention(
    isa: str,
    phase: str,
    tokens: Sequence[int],
    *,
    dhead: int,
    group: int,
    elem_bytes: float,
    n_channels: int,
    org: Org,
    pu: PU,
    partition: Partition | None = None,
) -> Lowered:
    """Lower one attention phase ("score" | "softmax" | "context"; aim also "softmax_io", the bank side
    of a controller softmax) of all work items.

    ``tokens``: context length of every (request, KV head) item; ``group``: query heads per KV
    head; ``n_channels``: PIM channels of the whole system (stacks x channels). For ``cxl_pnm``
    the whole device streams each item (``n_channels`` = number of PNM devices).
    """
    if phase not in ("score", "softmax", "context") and not (phase in ("softmax_io", "fc") and isa == "aim"):
        raise ConfigError(f"expected score, softmax or context (softmax_io: isa aim), got {phase!r}", key="phase")
    if isa == "newton":  # NeuPIMs commands (isa/lower_newton.py); here every item is a request of one KV head
        from attnsim.isa.lower_newton import lower_newton

        return lower_newton(
            phase,
            tokens,
            heads=1,
            dhead=dhead,
            group=group,
            elem_bytes=elem_bytes,
            n_channels=n_channels,
            org=org,
            pu=pu,
        )
    part = partition or PARTITIONS["attacc_bank"]
    tokens = np.asarray(tokens, np.int64)
    work = assign_items(tokens, n_channels, part.channels_per_item if isa != "cxl_pnm" else 1)
    progs, cmds, mult = [], [], []
    for slices, m in work:
        if isa == "attacc":
            if part.pu_level == "bank":
                p, c = _attacc_bank_channel(
                    tuple(int(x) for x in slices), phase, org, part, pu, dhead, float(elem_bytes), group
                )
            elif part.pu_level == "bg":
                p, c = None, _bg_channel(slices, phase, org, part, pu, dhead, elem_bytes, group)
            else:  # buffer die: normal reads at the pseudo-channel bus rate
                c = _Cmds()
                if phase == "softmax":
                    c.add("FIX", cycles=max(1, math.ceil(sum(slices) * group * pu.softmax_cycles_per_element)))
                    c = c.arrays()
                else:
                    c = stream_reads(org, sum(slices) * dhead * elem_bytes)
                p = None
        elif isa == "aim":
            p = _aim_channel(slices, phase, org, pu, dhead, elem_bytes, group)
            c = aim_commands(p, org, pu)
        elif isa == "fimdram":
            p = gemv_kernel()
            c = _fimdram_channel(slices, phase, org, pu, dhead, elem_bytes, group)
        elif isa == "cxl_pnm":
            p = _cxl_program(slices, phase, dhead, elem_bytes, group)
            c = None  # filled by the device model: the item is striped over all device channels
        else:
            raise ConfigError(f"expected attacc, fimdram, aim or cxl_pnm, got {isa!r}", key="isa")
        if p is not None:
            p.multiplicity = m
        progs.append(p)
        cmds.append(c)
        mult.append(m)
    soft = phase in ("softmax", "softmax_io")
    macs = 0.0 if soft else float(tokens.sum()) * dhead * group
    pim_bytes = 0.0 if soft else float(tokens.sum()) * dhead * elem_bytes
    meta = dict(partition=part.name, items=len(tokens), elements=float(tokens.sum()) * group)
    if isa == "cxl_pnm":  # stored bytes per element vs the program's element format (see PIMDevice.run)
        fmt = {1.0: 1.0, 2.0: 2.0, 4.0: 4.0, 0.5: 0.5}.get(float(elem_bytes))
        if fmt is None:
            fmt = 0.5 if elem_bytes < 1.0 else (1.0 if elem_bytes < 2.0 else (2.0 if elem_bytes < 4.0 else 4.0))
            meta["storage_bytes_ratio"] = float(elem_bytes) / fmt
    return Lowered(isa, phase, progs, cmds, np.array(mult, np.int64), macs, pim_bytes, meta=meta)


def lower_fc(
    isa: str,
    n_out: int,
    k_in: int,
    vectors: int,
    *,
    elem_bytes: float,
    n_channels: int,
    org: Org,
    pu: PU,
    partition: Partition | None = None,
) -> Lowered:
    """FC GEMV y = W x (``n_out x k_in`` weights, ``vectors`` input vectors), outputs spread over
    all channels; each channel computes its output rows like a score GEMV (rows = outputs,
    cols = k_in), so the attention schedules are reused with tokens = outputs per channel (with
    ``partition``'s PU level; default attacc_bank). Every output row is whole on one channel: no merge."""
    per = -(-n_out // n_channels)
    active = -(-n_out // per)
    tokens = [per] * (active - 1) + [n_out - per * (active - 1)]
    low = lower_attention(
        isa,
        "fc" if isa == "aim" else "score",
        tokens,
        dhead=k_in,
        group=vectors,
        elem_bytes=elem_bytes,
        n_channels=n_channels,
        org=org,
        pu=pu,
        partition=partition,
    )
    low.phase = "fc"
    return low
