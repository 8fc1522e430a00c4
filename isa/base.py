"""ISA as data: operand fields, opcodes, programs, fixed-width binary words, text assembly.

An :class:`ISA` is a table of :class:`Opcode` records; each opcode lists its operand
:class:`Field` s (bit width, range, symbolic names, bit position), the engine timing class it
maps onto (``ENGINE_OPS``, the command ops of ``hwmodels/dram/API.md``), a description and the
public source it follows. Nothing about an instruction set lives in code paths.

A :class:`Program` is a structure of numpy arrays: ``opcode`` (codes) plus one int64 column per
operand field of the ISA (the union over opcodes; unused = 0). The fields named ``ch``/
``ch_mask``, ``bank``/``bank_mask``, ``row``, ``col`` and ``repeat`` are the address columns the
lowering and the device models read. ``multiplicity`` says on how many identical channels the
program runs at once (symmetry), ``count`` how many times it runs back to back.

Binary format: one fixed-width little-endian word per instruction (``ISA.word_bits``), the
opcode in the top ``opcode_bits``, each field at its ``lsb``; signed fields in two's complement;
unused bits must be zero (so decoding is exact and ``encode(decode(b)) == b``).

Text syntax, one instruction a line::

    [label:] MNEMONIC [operand {, operand}]   ; comment  (also '#' or '//')

An operand is positional (in the opcode's field order) or ``name=value``; a value is an integer
(``12``, ``0x1f``, ``0b101``, ``-3`` for signed fields), a symbolic name (``GRF_A``), a symbolic
name with an index (``GRF_A[3]``, which also sets the partner index field) or, for jump fields,
a label. Every error is an :class:`attnsim.core.config.ConfigError` naming the file and ``line N``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from attnsim.core.config import ConfigError, read_bytes_file, read_text_file

MAX_INSTRUCTIONS = 1 << 24  # program length read from text or binary (count before allocating)

# Command ops of the DRAM engine (hwmodels/dram/API.md) an opcode is timed as.
# NONE: no DRAM/engine activity (e.g. a CRF control instruction executed inside the PU).
ENGINE_OPS = (
    "ACT",
    "PRE",
    "RD",
    "WR",
    "REF",
    "REFPB",
    "ACTAB",
    "PREA",
    "MACAB",
    "MACSB",
    "ACTBG",
    "MACBG",
    "BUF",
    "FIX",
    "BARRIER",
    "NONE",
)


@dataclass(frozen=True)
class Field:
    """One operand field of an opcode.

    ``lo``/``hi`` bound the value (default: the full range of ``bits``); ``enum`` gives symbolic
    names (code = position), ``allowed`` restricts them for this opcode; ``index`` names the
    partner field written as ``NAME[idx]``; ``default`` makes the operand optional; ``label``
    (``"back"``: value = own index - label index, ``"abs"``: label index) lets jump targets be
    labels; ``lsb`` fixes the bit position (None: packed right below the previous field).
    """

    name: str
    bits: int
    lo: int | None = None
    hi: int | None = None
    signed: bool = False
    enum: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()
    index: str | None = None
    default: int | None = None
    label: str | None = None
    lsb: int | None = None
    doc: str = ""

    @property
    def min(self) -> int:
        if self.lo is not None:
            return self.lo
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        if self.hi is not None:
            return self.hi
        if self.enum:
            return len(self.enum) - 1
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def allowed_codes(self) -> tuple[int, ...] | None:
        if not self.enum:
            return None
        names = self.allowed or self.enum
        return tuple(self.enum.index(n) for n in names)

    def check(self, value: int) -> str | None:
        """None if ``value`` is legal, else what is wrong."""
        codes = self.allowed_codes()
        if codes is not None:
            if value not in codes:
                names = self.allowed or self.enum
                got = self.enum[value] if 0 <= value < len(self.enum) else value
                return f"operand {self.name}: expected one of {', '.join(names)}, got {got}"
            return None
        if not self.min <= value <= self.max:
            return f"operand {self.name}: expected an integer in [{self.min}, {self.max}], got {value}"
        return None


@dataclass(frozen=True)
class Opcode:
    """One instruction: mnemonic, binary code, operand fields, engine timing class, semantics."""

    mnemonic: str
    code: int
    fields: tuple[Field, ...]
    engine: str
    doc: str
    source: str = ""

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass
class ISA:
    """An instruction set as data (see module docstring)."""

    name: str
    word_bits: int
    opcode_bits: int
    opcodes: tuple[Opcode, ...]
    doc: str
    source: str
    max_len: int | None = None  # program length limit (e.g. 32-entry CRF)
    checks: tuple[Callable[["Program"], list[tuple[int, str]]], ...] = ()  # whole-program rules

    def __post_init__(self):
        self.by_mnemonic = {op.mnemonic: op for op in self.opcodes}
        self.by_code = {op.code: op for op in self.opcodes}
        if len(self.by_mnemonic) != len(self.opcodes) or len(self.by_code) != len(self.opcodes):
            raise ValueError(f"{self.name}: duplicate mnemonic or opcode")
        names: list[str] = []
        self.layout: dict[int, tuple[tuple[Field, int], ...]] = {}
        top = self.word_bits - self.opcode_bits
        for op in self.opcodes:
            if op.engine not in ENGINE_OPS:
                raise ValueError(f"{self.name}.{op.mnemonic}: unknown engine op {op.engine}")
            if not 0 <= op.code < (1 << self.opcode_bits):
                raise ValueError(f"{self.name}.{op.mnemonic}: code does not fit {self.opcode_bits} bits")
            pos, used, lay = top, 0, []
            for f in op.fields:
                lsb = f.lsb if f.lsb is not None else pos - f.bits
                mask = ((1 << f.bits) - 1) << lsb
                if lsb < 0 or lsb + f.bits > top or used & mask:
                    raise ValueError(f"{self.name}.{op.mnemonic}.{f.name}: field overlaps or does not fit")
                if f.min < (-(1 << (f.bits - 1)) if f.signed else 0) or f.max > (
                    (1 << (f.bits - 1)) - 1 if f.signed else (1 << f.bits) - 1
                ):
                    raise ValueError(f"{self.name}.{op.mnemonic}.{f.name}: range does not fit {f.bits} bits")
                used |= mask
                pos = lsb
                lay.append((f, lsb))
                if f.name not in names:
                    names.append(f.name)
            self.layout[op.code] = tuple(lay)
        self.field_names = tuple(names)
        self.word_bytes = self.word_bits // 8

    def op(self, mnemonic: str) -> Opcode:
        return self.by_mnemonic[mnemonic]

    def code(self, mnemonic: str) -> int:
        return self.by_mnemonic[mnemonic].code

    # ------------------------------------------------------------ binary words
    def encode_word(self, code: int, values: dict[str, int]) -> int:
        word = code << (self.word_bits - self.opcode_bits)
        for f, lsb in self.layout[code]:
            v = int(values.get(f.name, 0))
            word |= (v & ((1 << f.bits) - 1)) << lsb
        return word

    def decode_word(self, word: int) -> tuple[int, dict[str, int]]:
        """(code, field values) of one word; ValueError on an unknown opcode or stray bits."""
        code = word >> (self.word_bits - self.opcode_bits)
        if code not in self.by_code:
            raise ValueError(f"unknown opcode 0x{code:x}")
        used, vals = code << (self.word_bits - self.opcode_bits), {}
        for f, lsb in self.layout[code]:
            raw = (word >> lsb) & ((1 << f.bits) - 1)
            used |= ((1 << f.bits) - 1) << lsb
            if f.signed and raw >> (f.bits - 1):
                raw -= 1 << f.bits
            vals[f.name] = raw
        if word & ~used:
            raise ValueError(f"{self.by_code[code].mnemonic}: reserved bits set (0x{word & ~used:x})")
        return code, vals


class Program:
    """A PIM/PNM program as numpy columns (see module docstring)."""

    def __init__(
        self,
        isa: ISA,
        opcode,
        fields: dict | None = None,
        lines=None,
        multiplicity: int = 1,
        count: int = 1,
        meta: dict | None = None,
    ):
        self.isa = isa
        self.opcode = np.asarray(opcode, dtype=np.int16).reshape(-1)
        n = len(self.opcode)
        self.fields: dict[str, np.ndarray] = {}
        for name in isa.field_names:
            col = (fields or {}).get(name)
            self.fields[name] = (
                np.zeros(n, np.int64) if col is None else np.broadcast_to(np.asarray(col, np.int64), (n,)).copy()
            )
        extra = set(fields or {}) - set(isa.field_names)
        if extra:
            raise ValueError(f"{isa.name}: unknown fields {sorted(extra)}")
        self.lines = None if lines is None else np.asarray(lines, np.int64)
        self.multiplicity = int(multiplicity)
        self.count = int(count)
        self.meta = dict(meta or {})

    def __len__(self) -> int:
        return len(self.opcode)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Program)
            and other.isa.name == self.isa.name
            and np.array_equal(self.opcode, other.opcode)
            and all(np.array_equal(self.fields[k], other.fields[k]) for k in self.fields)
        )

    def mnemonics(self) -> list[str]:
        return [self.isa.by_code[int(c)].mnemonic for c in self.opcode]

    def counts(self) -> dict[str, int]:
        """Instructions per mnemonic."""
        codes, n = np.unique(self.opcode, return_counts=True)
        return {self.isa.by_code[int(c)].mnemonic: int(k) for c, k in zip(codes, n)}

    def where(self, mnemonic: str) -> np.ndarray:
        return self.opcode == self.isa.code(mnemonic)

    def record(self, i: int) -> tuple[str, dict[str, int]]:
        op = self.isa.by_code[int(self.opcode[i])]
        return op.mnemonic, {f.name: int(self.fields[f.name][i]) for f in op.fields}

    @staticmethod
    def from_records(isa: ISA, records: Sequence[tuple[str, dict]], **kw) -> "Program":
        """Build from ``[(mnemonic, {field: value}), ...]`` (defaults filled, not validated)."""
        n = len(records)
        # per opcode: (code, ((field, default), ...), field names); columns built as lists (a Python loop
        # over numpy element assignment was the cost of lowering large programs)
        ops = {
            mn: (op.code, tuple((f.name, f.default) for f in op.fields), frozenset(f.name for f in op.fields))
            for mn, op in isa.by_mnemonic.items()
        }
        opc = [0] * n
        cols = {k: [0] * n for k in isa.field_names}
        for i, (mn, vals) in enumerate(records):
            try:
                code, fields, names = ops[mn]
            except KeyError:
                raise KeyError(mn) from None
            opc[i] = code
            for name, default in fields:
                v = vals.get(name, default)
                if v is None:
                    raise ValueError(f"{mn}: missing operand {name}")
                cols[name][i] = v
            if not vals.keys() <= names:
                raise KeyError(next(k for k in vals if k not in names))  # a stray operand
        return Program(isa, np.array(opc, np.int16), {k: np.array(v, np.int64) for k, v in cols.items()}, **kw)

    @staticmethod
    def concat(progs: Sequence["Program"]) -> "Program":
        isa = progs[0].isa
        return Program(
            isa,
            np.concatenate([p.opcode for p in progs]),
            {k: np.concatenate([p.fields[k] for p in progs]) for k in isa.field_names},
        )


# ---------------------------------------------------------------- validation


def _where(prog: Program, i: int) -> str:
    if prog.lines is not None and i < len(prog.lines):
        return f"line {int(prog.lines[i])}"
    return f"instruction {i}"


def validate_program(prog: Program, file: str | None = None) -> Program:
    """Check every operand against its field and the ISA's whole-program rules (vectorised)."""
    isa = prog.isa
    known = np.isin(prog.opcode, np.array(list(isa.by_code), np.int16))
    if not known.all():
        i = int(np.argmin(known))
        raise ConfigError(f"unknown opcode 0x{int(prog.opcode[i]):x}", file=file, key=_where(prog, i))
    if isa.max_len is not None and len(prog) > isa.max_len:
        raise ConfigError(
            f"program has {len(prog)} instructions, the {isa.name} limit is {isa.max_len}",
            file=file,
            key=_where(prog, isa.max_len),
        )
    bad_at, bad_msg = len(prog), None
    for code, lay in isa.layout.items():
        sel = np.flatnonzero(prog.opcode == code)
        if not len(sel):
            continue
        for f, _ in lay:
            v = prog.fields[f.name][sel]
            codes = f.allowed_codes()
            ok = np.isin(v, codes) if codes is not None else (v >= f.min) & (v <= f.max)
            if not ok.all():
                j = int(sel[np.argmin(ok)])
                if j < bad_at:
                    bad_at, bad_msg = j, f"{isa.by_code[code].mnemonic}: " + f.check(int(prog.fields[f.name][j]))
    if bad_msg:
        raise ConfigError(bad_msg, file=file, key=_where(prog, bad_at))
    for check in isa.checks:
        errs = check(prog)
        if errs:
            i, msg = min(errs)
            raise ConfigError(msg, file=file, key=_where(prog, i))
    return prog


# ---------------------------------------------------------------- binary


def encode(prog: Program, validate: bool = True) -> bytes:
    """Program -> fixed-width little-endian words."""
    if validate:
        validate_program(prog)
    isa, out = prog.isa, bytearray()
    for i in range(len(prog)):
        code = int(prog.opcode[i])
        word = isa.encode_word(code, {f.name: int(prog.fields[f.name][i]) for f, _ in isa.layout[code]})
        out += word.to_bytes(isa.word_bytes, "little")
    return bytes(out)


def decode(isa: ISA, data: bytes, file: str | None = None) -> Program:
    """Fixed-width words -> validated Program; errors name ``word N`` (0-based)."""
    wb = isa.word_bytes
    if len(data) % wb:
        raise ConfigError(f"size {len(data)} B is not a multiple of the {wb}-byte {isa.name} word", file=file)
    recs = []
    for i in range(len(data) // wb):
        word = int.from_bytes(data[i * wb : (i + 1) * wb], "little")
        try:
            code, vals = isa.decode_word(word)
        except ValueError as exc:
            raise ConfigError(str(exc), file=file, key=f"word {i}") from None
        recs.append((isa.by_code[code].mnemonic, vals))
    prog = Program.from_records(isa, recs)
    try:
        validate_program(prog)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=file, key=exc.key.replace("instruction", "word")) from None
    return prog


# ---------------------------------------------------------------- text

_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*)\s*:(.*)$")
_IDENT = re.compile(r"^[A-Za-z_.$][\w.$]*$")
_INDEXED = re.compile(r"^([A-Za-z_]\w*)\s*\[\s*([^\]]+?)\s*\]$")


def _strip_comment(line: str) -> str:
    for mark in (";", "#", "//"):
        k = line.find(mark)
        if k >= 0:
            line = line[:k]
    return line.strip()


def _int(tok: str) -> int:
    if len(tok) > 80:  # longer than any 64-bit literal (and than Python's int-string limit)
        raise ValueError(tok)
    return int(tok.replace("_", ""), 0)


def _tok(val: str) -> str:
    """An operand for messages (long ones cut)."""
    return repr(val if len(val) <= 40 else val[:37] + "...")


def assemble(isa: ISA, text: str, file: str | None = None) -> Program:
    """Parse assembly text into a validated Program (errors: ``<file>: line N: ...``)."""
    stmts, labels = [], {}
    lines_in = text.splitlines()
    if len(lines_in) > 4 * MAX_INSTRUCTIONS:
        raise ConfigError(f"{len(lines_in)} lines, the limit is {4 * MAX_INSTRUCTIONS}", file=file)
    for ln, raw in enumerate(lines_in, start=1):
        line = _strip_comment(raw)
        while True:
            m = _LABEL.match(line)
            if not m or "=" in m.group(1):
                break
            name = m.group(1)
            if name.upper() in isa.by_mnemonic:
                break
            if name in labels:
                raise ConfigError(f"label {name!r} defined twice", file=file, key=f"line {ln}")
            labels[name] = len(stmts)
            line = m.group(2).strip()
        if line:
            if len(stmts) >= MAX_INSTRUCTIONS:
                raise ConfigError(f"more than {MAX_INSTRUCTIONS} instructions (the limit)", file=file, key=f"line {ln}")
            stmts.append((ln, line))
    recs, lines = [], []
    for idx, (ln, line) in enumerate(stmts):
        where = f"line {ln}"
        parts = line.split(None, 1)
        mn = parts[0].upper()
        op = isa.by_mnemonic.get(mn)
        if op is None:
            raise ConfigError(
                f"unknown opcode {_tok(parts[0])} for ISA {isa.name} (known: {', '.join(isa.by_mnemonic)})",
                file=file,
                key=where,
            )
        toks = [t.strip() for t in parts[1].split(",")] if len(parts) > 1 else []
        if any(not t for t in toks):
            raise ConfigError("empty operand", file=file, key=where)
        vals: dict[str, int] = {}
        partners = {f.index for f in op.fields if f.index}
        positional = [f for f in op.fields if f.name not in partners]
        pos = 0
        seen_named = False
        for tok in toks:
            if "=" in tok:
                key, val = (s.strip() for s in tok.split("=", 1))
                seen_named = True
                try:
                    f = op.field(key)
                except KeyError:
                    raise ConfigError(
                        f"{mn}: unknown operand {_tok(key)} (operands: {', '.join(x.name for x in op.fields)})",
                        file=file,
                        key=where,
                    ) from None
            else:
                if seen_named:
                    raise ConfigError(f"{mn}: positional operand {_tok(tok)} after a named one", file=file, key=where)
                if pos >= len(positional):
                    raise ConfigError(
                        f"{mn}: too many operands (expected at most {len(positional)})", file=file, key=where
                    )
                f, val = positional[pos], tok
                pos += 1
            if f.name in vals:
                raise ConfigError(f"{mn}: operand {f.name} given twice", file=file, key=where)
            _parse_value(isa, op, f, val, vals, labels, idx, file, where)
        for f in op.fields:
            if f.name not in vals:
                if f.default is None:
                    raise ConfigError(f"{mn}: missing operand {f.name}", file=file, key=where)
                vals[f.name] = f.default
        recs.append((mn, vals))
        lines.append(ln)
    prog = Program.from_records(isa, recs, lines=lines)
    return validate_program(prog, file=file)


def _parse_value(isa, op, f: Field, val: str, vals: dict, labels: dict, idx: int, file, where) -> None:
    mn = op.mnemonic
    m = _INDEXED.match(val)
    if f.enum:
        name, index = (m.group(1), m.group(2)) if m else (val, None)
        if name.upper() not in f.enum:
            raise ConfigError(
                f"{mn}: operand {f.name}: expected one of {', '.join(f.allowed or f.enum)}, got {_tok(val)}",
                file=file,
                key=where,
            )
        vals[f.name] = f.enum.index(name.upper())
        if index is not None:
            if not f.index:
                raise ConfigError(f"{mn}: operand {f.name} takes no index, got {_tok(val)}", file=file, key=where)
            part = op.field(f.index)
            try:
                iv = _int(index)
            except ValueError:
                raise ConfigError(f"{mn}: bad index {_tok(index)} in {_tok(val)}", file=file, key=where) from None
            vals[part.name] = _in_range(op, part, iv, file, where)
        return
    try:
        v = _int(val)
    except ValueError:
        v = None
    if v is not None:
        vals[f.name] = _in_range(op, f, v, file, where)
        return
    if f.label and _IDENT.match(val):
        if val not in labels:
            raise ConfigError(f"{mn}: undefined label {val!r}", file=file, key=where)
        vals[f.name] = idx - labels[val] if f.label == "back" else labels[val]
        return
    raise ConfigError(f"{mn}: operand {f.name}: expected an integer, got {_tok(val)}", file=file, key=where)


def _in_range(op: Opcode, f: Field, v: int, file, where) -> int:
    """``v`` if the field can hold it (bounded before it reaches an int64 column), else the field's error."""
    if not f.min <= v <= f.max:
        raise ConfigError(
            f"{op.mnemonic}: {f.check(v) or f'operand {f.name}: out of range, got {v}'}", file=file, key=where
        )
    return v


def format_instruction(isa: ISA, code: int, vals: dict[str, int]) -> str:
    op = isa.by_code[code]
    partners = {f.index for f in op.fields if f.index}
    out = []
    for f in op.fields:
        if f.name in partners:
            continue
        v = int(vals.get(f.name, 0))
        if f.enum:
            s = f.enum[v] if 0 <= v < len(f.enum) else str(v)
            if f.index:
                s += f"[{int(vals.get(f.index, 0))}]"
        else:
            s = str(v)
        out.append(f"{f.name}={s}")
    return op.mnemonic + (" " + ", ".join(out) if out else "")


def disassemble(prog: Program) -> str:
    """Canonical text (every operand named); ``assemble(disassemble(p)) == p``."""
    lines = [f"; {prog.isa.name} program, {len(prog)} instructions"]
    for i in range(len(prog)):
        code = int(prog.opcode[i])
        lines.append(format_instruction(prog.isa, code, {k: int(v[i]) for k, v in prog.fields.items()}))
    return "\n".join(lines) + "\n"


def assemble_file(isa: ISA, path: str | Path) -> Program:
    """Assemble a UTF-8 text file (non-UTF-8 bytes: one error with the byte offset; no instructions: refused)."""
    text = read_text_file(path, file=str(path), limit_bytes=64 * MAX_INSTRUCTIONS)  # sized before it is read
    prog = assemble(isa, text, file=str(path))
    if not len(prog):
        raise ConfigError("no instructions (only blank lines, comments or labels)", file=str(path))
    return prog


def decode_file(isa: ISA, path: str | Path) -> Program:
    path = Path(path)
    data = read_bytes_file(path, file=str(path), limit_bytes=MAX_INSTRUCTIONS * isa.word_bytes)
    if not data:
        raise ConfigError("empty file: no instruction words", file=str(path))
    return decode(isa, data, file=str(path))


def describe(isa: ISA) -> str:
    """Human-readable opcode table (for docs and ``attnsim asm --list``)."""
    rows = [f"{isa.name}: {isa.word_bits}-bit words. {isa.doc}", f"source: {isa.source}"]
    for op in isa.opcodes:
        ops = ", ".join(f"{f.name}:{f.bits}b" for f in op.fields)
        rows.append(f"  {op.mnemonic:<10} 0x{op.code:02x} [{op.engine}] ({ops}) {op.doc}")
    return "\n".join(rows)
