"""Run a user's PIM/PNM program on a PIM device: ``attnsim.pim.run(program, device) -> PimResult``
(CLI: ``attnsim pim run prog.s --device NAME``).

``program``: assembly text as ``attnsim asm`` reads it, a path to a ``.s`` file or to the ``.bin`` words
``attnsim asm`` writes, those words as ``bytes``, or an :class:`attnsim.isa.base.Program`; it is read
with the device's ISA (text and words are validated: errors name the file and line / word).
``device``: a hardware config of ``kind: pim`` (built-in name or path).

Execution reuses the device model the mapper times lowered ops with (:class:`attnsim.hwmodels.pim.PIMDevice`
``.run``: batches of channels on the DRAM bank-timing engine, ``refresh`` as the device sets it):

- attacc / newton: the program's ``ch`` field places every instruction on a channel of one unit (DRAM
  spec instance); each channel's instructions become engine records (isa/lower.py ``attacc_commands``,
  isa/lower_newton.py ``newton_commands``).
- aim: an ISR runs on every channel of its ``ch_mask`` (SYNC/EOC on every channel the program uses),
  records by ``aim_commands``; the device's host-request rate bounds the time as in the mapper.
- fimdram: the program is a CRF kernel; one pass of it on one channel = the host's all-bank column
  stream ACTAB, ``column_commands(kernel)`` MACAB column commands (a new row every ``columns``), PREA.
- cxl_pnm: the accelerator streams every GEMV's matrix over all channels (PIMDevice.run); time =
  max(stream, 2 x MACs / ``pu.tflops``); a program without GEMV runs its SOFTMAX lengths on the vector unit.
  LOAD_VEC / STORE / REDUCE (vector-sized next to the matrices) are not timed, as in the mapper's costing.

A program runs once, on the channels it names (the rest of the device idles; its static power still counts).

Energy by command class, from the engine's counts and per-event energies (hwmodels/dram/spec.py
``energy_params``, ``pim.access_pj_per_bit`` / ``buf_pj_per_bit``) plus the device's PU energies:
``act_pre`` (bank activations), ``mac`` (bank->PU column reads + ``pu.pj_per_mac`` per MAC),
``column_rw`` (host RD/WR array access + I/O), ``buffer`` (PIM datapath transfers + ``pu.sram_pj_per_byte``),
``refresh``, ``controller`` (device-side PHY / transaction energy, ``pu.phy_pj_per_command``), and
``static`` (the device's static power x time). The dynamic classes sum to PIMDevice.run's energy.

Time by command class (``busy_s_by_class``): the mean per-channel occupancy of the resource each class
holds, from the engine's counts and the device's timing (commands overlap in a pipelined DRAM, so the
classes are not additive; each is <= the program's time): ``act_pre`` = ACT x nRCDRD + PRE x nRP (the row
command windows; per-bank ones overlap across banks), ``mac`` = all-bank MAC x nCCDAB + bank-group /
single-bank MAC x nCCD_L + fixed-latency PU work (softmax), or 2 x MACs / ``pu.tflops`` on cxl_pnm,
``column_rw`` = bursts x nBL (data bus), ``buffer`` = buffer units x max(nBL, nCCD_S), ``refresh`` =
all-bank refreshes x nRFC + per-bank ones x nRFCpb / banks per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

from attnsim.core.config import ConfigError

TEXT_SUFFIXES = (".s", ".asm")
MAX_RECORDS = 1 << 22  # engine command records one program may expand to (all channels; checked before expanding)


@dataclass
class PimResult:
    """Time and energy of one program run (``to_dict()`` is what ``attnsim pim run --json`` prints)."""

    device: str
    isa: str
    program: str  # file name, or "<text>" / "<bytes>" / "<Program>"
    instructions: int
    channels_used: int
    channels: int  # channels of the device (all units)
    time_s: float
    cycles: int  # DRAM command clock (tCK)
    tck_s: float
    bound: str  # dram | host_requests | compute
    energy_j: float  # dynamic + static
    energy_j_by_class: dict = field(default_factory=dict)
    busy_s_by_class: dict = field(default_factory=dict)  # per-channel occupancy (module docstring)
    commands_by_class: dict = field(default_factory=dict)
    instructions_by_mnemonic: dict = field(default_factory=dict)
    macs: float = 0.0

    @property
    def dynamic_energy_j(self) -> float:
        return float(sum(v for k, v in self.energy_j_by_class.items() if k != "static"))

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "isa": self.isa,
            "program": self.program,
            "instructions": self.instructions,
            "channels_used": self.channels_used,
            "channels": self.channels,
            "time_s": self.time_s,
            "cycles": self.cycles,
            "tck_s": self.tck_s,
            "bound": self.bound,
            "energy_j": self.energy_j,
            "dynamic_energy_j": self.dynamic_energy_j,
            "energy_j_by_class": dict(self.energy_j_by_class),
            "busy_s_by_class": dict(self.busy_s_by_class),
            "commands_by_class": dict(self.commands_by_class),
            "macs": self.macs,
            "instructions_by_mnemonic": dict(self.instructions_by_mnemonic),
        }

    def table(self) -> str:
        """The per-class table ``attnsim pim run`` prints."""
        from attnsim.core.report import _fmt, table

        total = self.energy_j or 1.0
        t = self.time_s or 1.0
        rows = [
            [
                k,
                str(self.commands_by_class.get(k, "")),
                _fmt(self.busy_s_by_class[k] * 1e6) if k in self.busy_s_by_class else "",
                f"{self.busy_s_by_class[k] / t:.1%}" if k in self.busy_s_by_class else "",
                _fmt(v),
                f"{v / total:.1%}",
            ]
            for k, v in self.energy_j_by_class.items()
        ]
        rows.append(
            [
                "total",
                "",
                _fmt(self.time_s * 1e6),
                "100.0%" if self.time_s else "-",
                _fmt(self.energy_j),
                "100.0%" if self.energy_j else "-",
            ]
        )
        head = (
            f"{self.program}: {self.instructions} {self.isa} instructions on {self.device} "
            f"({self.channels_used} of {self.channels} channels)\n"
            f"time: {_fmt(self.time_s * 1e6)} us = {self.cycles} cycles (tCK {self.tck_s * 1e9:.4g} ns, "
            f"{self.bound}-bound)\n"
        )
        return (
            head
            + table(rows, ["class", "commands", "busy us", "of time", "energy J", "share"])
            + ("\nbusy: mean per-channel occupancy of the class's resource (classes overlap; not additive)")
        )

    def __repr__(self) -> str:
        return f"<PimResult {self.program} on {self.device}: {self.time_s:.4g} s, {self.energy_j:.4g} J>"


# ---------------------------------------------------------------- inputs


def load_device(device: Union[str, Path]):
    """(PIMDevice, display file) of a hardware config of kind pim; refused otherwise."""
    from attnsim.core.config import display_path, find_config, load_yaml
    from attnsim.hwmodels import registry

    try:
        p = find_config("hardware", str(device))
    except ConfigError as e:
        raise ConfigError(e.message, file=e.file or "--device") from None
    hw = load_yaml(p)
    f = display_path(p)
    if hw.get("kind") != "pim":
        from attnsim.core.config import available

        pims = [n for n in available("hardware") if _kind_of(n) == "pim"]
        raise ConfigError(
            f"expected a hardware config of kind pim ({', '.join(pims)}), got {str(device)!r} of kind "
            f"{hw.get('kind')!r}",
            file="--device",
        )
    try:
        return registry.build(hw, file=f), f
    except ConfigError as e:
        raise ConfigError(e.message, file=e.file or f, key=e.key) from None


def _kind_of(name: str) -> Optional[str]:
    from attnsim.core.config import find_config, load_yaml

    try:
        return load_yaml(find_config("hardware", name)).get("kind")
    except ConfigError:
        return None


def load_program(program, isa):
    """(Program, label) from text, a .s / .bin path, binary words or a Program, read with ``isa``."""
    from attnsim.isa.base import Program, assemble, assemble_file, decode, decode_file, validate_program

    if isinstance(program, Program):
        if program.isa.name != isa.name:
            raise ConfigError(
                f"expected a program for isa {isa.name} (the device's), got a {program.isa.name} program",
                file="<Program>",
            )
        return validate_program(program, file="<Program>"), "<Program>"
    if isinstance(program, (bytes, bytearray, memoryview)):
        if not len(program):
            raise ConfigError("empty: no instruction words", file="<bytes>")
        return decode(isa, bytes(program), file="<bytes>"), "<bytes>"
    if isinstance(program, str) and ("\n" in program or not _looks_like_path(program)):
        prog = assemble(isa, program, file="<text>")
        if not len(prog):
            raise ConfigError("no instructions (only blank lines, comments or labels)", file="<text>")
        return prog, "<text>"
    if not isinstance(program, (str, Path)):
        raise ConfigError(
            f"expected assembly text, a .s/.bin path, bytes or a Program, got {type(program).__name__}", file="program"
        )
    path = Path(program)
    if not path.is_file():
        raise ConfigError("file not found" if not path.exists() else "expected a file", file=str(path))
    if path.suffix in TEXT_SUFFIXES or (path.suffix != ".bin" and _is_text(path)):
        return assemble_file(isa, path), str(path)
    return decode_file(isa, path), str(path)


def _looks_like_path(s: str) -> bool:
    return s.endswith(TEXT_SUFFIXES + (".bin",)) or "/" in s or Path(s).is_file()


def _is_text(path: Path) -> bool:
    """Assembly text: UTF-8 without NUL bytes (the words ``attnsim asm`` writes hold zero bytes)."""
    from attnsim.core.fileio import InputRefused, read_head

    try:
        head = read_head(path, 1 << 16)
    except InputRefused:
        return True  # the text reader names the problem (one ConfigError)
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > len(head) - 4  # a multi-byte character cut by the 64 KiB read
    return True


# ---------------------------------------------------------------- execution


def _subset(prog, mask: np.ndarray):
    from attnsim.isa.base import Program

    return Program(
        prog.isa,
        prog.opcode[mask],
        {k: v[mask] for k, v in prog.fields.items()},
        lines=None if prog.lines is None else prog.lines[mask],
    )


def _where(prog, i: int) -> str:
    return f"line {int(prog.lines[i])}" if prog.lines is not None else f"instruction {i}"


def _check_channels(prog, chans: np.ndarray, n: int, label: str, field_name: str) -> None:
    bad = np.flatnonzero(chans >= n)
    if len(bad):
        i = int(bad[0])
        raise ConfigError(
            f"{prog.mnemonics()[i]}: {field_name} {int(chans[i])} is beyond the device's {n} channels "
            f"per unit (0-{n - 1})",
            file=label,
            key=_where(prog, i),
        )


def _check_addresses(prog, org, label: str) -> None:
    """Every row / bank / rank / bank-group operand inside the device's organisation (the ISA's fields are
    wider than any one device), so an address error names the program line, not an engine record."""
    bank_limit = {"attacc": org.banks, "aim": org.bank_groups * org.banks_per_group}.get(
        prog.isa.name, org.banks_per_group
    )
    limits = {"row": org.rows, "bank": bank_limit, "rank": org.ranks, "bg": org.bank_groups}
    bad = None
    for code in np.unique(prog.opcode):
        op = prog.isa.by_code[int(code)]
        sel = prog.opcode == code
        for f in op.fields:
            if f.name in limits:
                over = np.flatnonzero(sel & (prog[f.name] >= limits[f.name]))
                if len(over) and (bad is None or over[0] < bad[0]):
                    bad = (int(over[0]), op.mnemonic, f.name, limits[f.name])
    if bad is not None:
        i, mn, name, lim = bad
        raise ConfigError(
            f"{mn}: operand {name}: expected an integer in [0, {lim - 1}] (the device's "
            f"organisation), got {int(prog[name][i])}",
            file=label,
            key=_where(prog, i),
        )


def _check_open_rows(prog, chans: np.ndarray, label: str) -> None:
    """AttAcc: a bank MAC (MACAB, MACSB) reads the open row, so each needs an ACTAB on its channel before it with
    no PREA between; a device refuses a column command to a precharged bank (JESD238 HBM3 state diagram)."""
    names = prog.mnemonics()
    for c in np.unique(chans):
        is_open = False
        for i in np.flatnonzero(chans == c):
            mn = names[i]
            if mn == "ACTAB":
                is_open = True
            elif mn == "PREA":
                is_open = False
            elif mn in ("MACAB", "MACSB") and not is_open:
                raise ConfigError(
                    f"{mn}: expected an open row on channel {int(c)} (an ACTAB before it, no PREA between), got none",
                    file=label,
                    key=_where(prog, int(i)),
                )


def _check_size(records: float, label: str) -> None:
    if records > MAX_RECORDS:
        raise ConfigError(
            f"the program expands to {records:.4g} engine command records, the limit is {MAX_RECORDS}", file=label
        )


def lower_program(prog, dev, label: str):
    """The :class:`attnsim.isa.lower.Lowered` the device model times, and the useful MACs of the program."""
    from attnsim.isa.lower import Lowered, aim_commands, attacc_commands

    isa, org, pu = prog.isa.name, dev.org, dev.pu
    n_ch = dev.dram.org.channels
    _check_addresses(prog, org, label)
    progs, cmds = [], []
    macs = 0.0
    if isa in ("attacc", "newton"):
        ch = prog["ch"]
        _check_channels(prog, ch, n_ch, label, "ch")
        if isa == "attacc":
            _check_open_rows(prog, ch, label)
        _check_size(len(prog) * (org.pseudo_channels if isa == "attacc" else 1), label)  # BUF: one record per pCH
        for c in np.unique(ch):
            sub = _subset(prog, ch == c)
            progs.append(sub)
            if isa == "attacc":
                cmds.append(attacc_commands(sub, org, pu))
            else:
                from attnsim.isa.lower_newton import newton_commands

                cmds.append(newton_commands(sub, org))
        if isa == "newton" and dev.port_interval_cycles is not None:  # the NPU issue port, in program order
            from attnsim.isa.lower_newton import port_arrivals

            arrivals, _ = port_arrivals(
                progs,
                dev.port_interval_cycles,
                dev.spec.comp_instructions,
                positions=[np.flatnonzero(ch == c) for c in np.unique(ch)],
            )
            for c, a in zip(cmds, arrivals):
                c["arrival"] = a
    elif isa == "aim":
        masks = prog["ch_mask"]
        has_mask = np.array([any(f.name == "ch_mask" for f in prog.isa.by_code[int(c)].fields) for c in prog.opcode])
        used = 0
        for m in masks[has_mask]:
            used |= int(m)
        chans = [c for c in range(max(used.bit_length(), 1)) if used >> c & 1]
        if chans and chans[-1] >= n_ch:
            i = int(np.flatnonzero(has_mask & (masks >> n_ch > 0))[0])
            raise ConfigError(
                f"{prog.mnemonics()[i]}: ch_mask 0x{int(masks[i]):x} names channels beyond the device's "
                f"{n_ch} per unit (0-{n_ch - 1})",
                file=label,
                key=_where(prog, i),
            )
        _check_size(2 * sum(int(np.sum(~has_mask | ((masks >> c) & 1).astype(bool))) for c in chans), label)
        for c in chans:
            sub = _subset(prog, ~has_mask | ((masks >> c) & 1).astype(bool))
            progs.append(sub)
            cmds.append(aim_commands(sub, org, pu))
    elif isa == "fimdram":
        from attnsim.isa.fimdram import DATA_OPS, column_commands, execute_trace
        from attnsim.isa.lower import _Cmds

        try:
            n = column_commands(prog)
        except ValueError as exc:  # a JUMP nest beyond execute_trace's step limit
            raise ConfigError(str(exc), file=label) from None
        _check_size(3 * -(-n // org.columns), label)
        c, row, left = _Cmds(), 0, n
        while left > 0:
            k = min(left, org.columns)
            c.add("ACTAB", row=row % org.rows)
            c.add("MACAB", row=row % org.rows, repeat=k)
            c.add("PREA")
            left -= k
            row += 1
        if n == 0:
            c.add("BARRIER")
        progs.append(prog)
        cmds.append(c.arrays())
        data = sum(1 for pc in execute_trace(prog) if prog.isa.by_code[int(prog.opcode[pc])].mnemonic in DATA_OPS)
        macs = float(data) * pu.macs_per_command * (org.banks // 2)  # one 16-lane op per PCU (a PCU per 2 banks)
    elif isa == "cxl_pnm":
        gemv = prog.opcode == prog.isa.code("GEMV")
        macs = float(np.sum((prog["rows"] * prog["cols"] * prog["vectors"])[gemv]))
        from attnsim.isa.cxl_pnm import DTYPE_BYTES, DTYPES

        size = np.array([DTYPE_BYTES[t] for t in DTYPES])
        nbytes = float(np.sum((prog["rows"].astype(float) * prog["cols"] * size[prog["dtype"]])[gemv]))
        _check_size(nbytes / dev.channels / (org.columns * org.burst_bytes), label)  # whole-row reads per channel
        progs.append(prog)
        cmds.append(None)
    else:  # pragma: no cover - PIMSpec.isa lists the ISAs above
        raise ConfigError(f"no program runner for isa {isa!r}", file=label)
    low = Lowered(isa, "program", progs, cmds, np.ones(len(progs), np.int64), macs=macs)
    return low


def _mac_ops(counts: dict, pu) -> float:
    return float(counts.get("mac_bank_ops", 0)) * pu.macs_per_command


def _busy_by_class(counts: dict, dev, channels: int, compute_s: Optional[float]) -> dict:
    """Mean per-channel occupancy (s) of each command class's resource (module docstring)."""
    t, o = dev.dram.timing, dev.dram.org
    pim = dev.dram.pim
    n = max(int(channels), 1)
    c = lambda k: float(counts.get(k, 0))  # noqa: E731 - engine count (all channels x multiplicity)
    mac_cyc = (
        c("macab_ops") * (pim.nCCDAB if pim else t.nCCD_L)
        + (c("macsb_ops") + c("macbg_ops")) * t.nCCD_L
        + c("fix_cycles")
    )
    cyc = {
        "act_pre": c("act_cmds") * t.nRCDRD + c("pre_cmds") * t.nRP,
        "mac": mac_cyc,
        "column_rw": (c("rd_bursts") + c("wr_bursts")) * t.nBL,
        "buffer": c("buf_units") * max(t.nBL, t.nCCD_S),
        "refresh": c("refs") * t.nRFC + c("refpbs") * t.nRFCpb / max(o.bank_groups * o.banks_per_group, 1),
    }
    busy = {k: v / n * dev.tck_s for k, v in cyc.items()}
    if compute_s is not None:  # cxl_pnm: the accelerator's arithmetic, not bank commands
        busy["mac"] = float(compute_s)
    return busy


def run(program, device) -> PimResult:
    """Execute ``program`` on ``device`` (see the module docstring); bad input raises ConfigError."""
    from attnsim.core import notices
    from attnsim.hwmodels.dram.spec import energy_params
    from attnsim.isa import get_isa

    notices.to_stderr()  # 'attnsim: compiling Numba kernels ...' when this call compiles them (attnsim.core.jitcache)
    dev, _ = load_device(device)
    isa = get_isa(dev.spec.isa)
    prog, label = load_program(program, isa)
    low = lower_program(prog, dev, label)
    t, energy, counts = dev.run(low)  # the device model's engine run (hwmodels/pim.py PIMDevice.run)
    bound = "dram"
    if isa.name == "aim":  # the device decodes one host request per tCK (isa/aim.py), as the mapper times it
        from attnsim.isa.aim import HOST_REQUESTS_PER_CYCLE
        from attnsim.isa.lower import host_requests

        th = host_requests(low) * dev.tck_s / HOST_REQUESTS_PER_CYCLE
        if th > t:
            t, bound = th, "host_requests"
    if isa.name == "cxl_pnm" and dev.spec.pu.tflops:
        tc = 2.0 * low.macs / (dev.spec.pu.tflops * 1e12)
        if tc > t:
            t, bound = tc, "compute"
    macs = low.macs if isa.name in ("fimdram", "cxl_pnm") else _mac_ops(counts, dev.spec.pu)

    # dynamic energy by command class: the engine's read/write energy split by its per-event parameters
    d, pu = dev.dram, dev.spec.pu
    ep = energy_params(d)
    bits = 8 * d.org.burst_bytes
    from attnsim.hwmodels.dram.engine import BUF_UNIT_BYTES

    rw = (counts.get("rd_bursts", 0) * ep.rd_pj_per_bit + counts.get("wr_bursts", 0) * ep.wr_pj_per_bit) * bits
    mac = counts.get("mac_bank_ops", 0) * bits * (d.pim.access_pj_per_bit if d.pim else ep.rd_pj_per_bit)
    buf = counts.get("buf_units", 0) * BUF_UNIT_BYTES * 8 * (d.pim.buf_pj_per_bit if d.pim else 0.0)
    scale = energy.get("dram_read_write", 0.0) / (rw + mac + buf) if rw + mac + buf > 0 else 0.0
    io = (counts.get("rd_bursts", 0) + counts.get("wr_bursts", 0)) * bits * ep.io_pj_per_bit * 1e-12
    by_class = {
        "act_pre": energy.get("dram_activate", 0.0),
        "mac": mac * scale + macs * pu.pj_per_mac * 1e-12,
        "column_rw": rw * scale + min(io, energy.get("dram_io", 0.0)),
        "buffer": buf * scale + counts.get("buf_bytes", 0) * pu.sram_pj_per_byte * 1e-12,
        "refresh": energy.get("dram_refresh", 0.0),
        "controller": max(energy.get("dram_io", 0.0) - io, 0.0),
        "static": dev.static_power_w * t,
    }
    cmd = {
        "act_pre": int(counts.get("act_cmds", 0) + counts.get("pre_cmds", 0)),
        "mac": int(counts.get("macab_ops", 0) + counts.get("macsb_ops", 0) + counts.get("macbg_ops", 0)),
        "column_rw": int(counts.get("rd_bursts", 0) + counts.get("wr_bursts", 0)),
        "buffer": int(counts.get("buf_units", 0)),
        "refresh": int(counts.get("refs", 0) + counts.get("refpbs", 0)),
    }
    used = dev.channels if isa.name == "cxl_pnm" and low.programs and macs else len(low.programs)
    busy = _busy_by_class(
        counts,
        dev,
        used,
        2.0 * macs / (dev.spec.pu.tflops * 1e12) if isa.name == "cxl_pnm" and dev.spec.pu.tflops else None,
    )
    return PimResult(
        device=dev.name,
        isa=isa.name,
        program=label,
        instructions=len(prog),
        channels_used=int(used),
        channels=int(dev.channels),
        time_s=float(t),
        cycles=int(round(t / dev.tck_s)),
        tck_s=dev.tck_s,
        bound=bound,
        energy_j=float(sum(by_class.values())),
        energy_j_by_class=by_class,
        busy_s_by_class=busy,
        commands_by_class=cmd,
        instructions_by_mnemonic=prog.counts(),
        macs=float(macs),
    )
