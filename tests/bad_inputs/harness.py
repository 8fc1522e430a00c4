"""Fuzz harnesses, one per input reader: a hypothesis strategy of inputs and a function that feeds one input
to the reader. The contract: the reader returns a result or raises a one-line ConfigError; any other
exception, a multi-line message or an execution over :data:`HANG_S` seconds is a failure.

Used by tests/test_fuzz_readers.py (a bounded number of hypothesis examples) and bench/fuzz.py (for a given
time: hypothesis examples as a seed corpus, then fast :func:`mutate` rounds on them)::

    failure = HARNESSES["asm"].check(example)   # None, or Failure(kind, location, message)
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import json
import os
import shutil
import signal
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

from attnsim.core.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
HANG_S = 10.0  # one execution longer than this is reported as a hang
_WORK = Path(tempfile.mkdtemp(prefix="attnsim-fuzz-"))
atexit.register(shutil.rmtree, _WORK, True)


@dataclass(frozen=True)
class Failure:
    kind: str  # exception type, "multi-line ConfigError" or "hang"
    location: str  # innermost repository frame "path:line (function)"
    message: str

    @property
    def signature(self) -> tuple[str, str]:
        return self.kind, self.location


class _Hang(BaseException):
    pass


UNUSABLE: dict[str, int] = {}  # per reader: inputs a feed function could not build (not executions of the reader)


class Unusable(Exception):
    """Raised by a feed function when it cannot build the reader's input from an example (not a failure)."""


@contextlib.contextmanager
def _untimed():
    """Suspend the hang timer of :meth:`Harness.check` (one-time set-up inside a feed function: building a valid
    store runs a sweep, the first trace compiles the parsers), then restart it."""
    left = signal.setitimer(signal.ITIMER_REAL, 0)[0] if hasattr(signal, "setitimer") else 0
    try:
        yield
    finally:
        if left:
            signal.setitimer(signal.ITIMER_REAL, HANG_S)


def _alarm(signum, frame):
    raise _Hang()


def _location(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(REPO)) and "/tests/" not in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    return (
        f"{os.path.relpath(f.filename, REPO) if f.filename.startswith(str(REPO)) else f.filename}:{f.lineno} ({f.name})"
    )


@dataclass(frozen=True)
class Harness:
    name: str
    strategy: Any  # hypothesis strategy of one input
    feed: Callable[[Any], Any]  # run the reader on one input

    def check(self, example) -> Failure | None:
        """Run one input; None if the reader returned or raised a one-line ConfigError."""
        use_alarm = hasattr(signal, "setitimer")
        if use_alarm:
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            self.feed(example)
        except Unusable:
            UNUSABLE[self.name] = UNUSABLE.get(self.name, 0) + 1
            return None
        except ConfigError as exc:
            if "\n" in str(exc):
                return Failure("multi-line ConfigError", _location(exc), str(exc)[:200])
        except _Hang as exc:
            return Failure("hang", _location(exc), f"over {HANG_S:.0f} s")
        except Exception as exc:  # noqa: BLE001 - what is looked for
            return Failure(type(exc).__name__, _location(exc), str(exc)[:200])
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        return None


# ---------------------------------------------------------------- value strategies

HUGE = 2**63
INTS = st.one_of(
    st.integers(-3, 70),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**31, HUGE - 1, HUGE, 2**64, 10**9, 10**30]),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 1.5, 1e-9, 1e30, 1e300, float("inf"), float("nan")]),
)
TEXT = st.text(max_size=8)
LEAF = st.one_of(INTS, FLOATS, TEXT, st.booleans(), st.none())
VALUE = st.one_of(LEAF, st.lists(LEAF, max_size=3), st.dictionaries(TEXT, LEAF, max_size=2))
# textual tokens for line-based formats
TOKENS = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "-1",
            "1.5",
            "1e30",
            "1e400",
            "inf",
            "-inf",
            "nan",
            "NaN",
            "",
            str(HUGE),
            str(2**64),
            "0x40",
            "0x" + "f" * 17,
            "R",
            "W",
            "x",
            "true",
            "null",
            "\xff",
            "\x00",
            "#",
            ",",
            "[1",
            "{",
            '"',
        ]
    ),
    INTS.map(str),
    FLOATS.map(repr),
    st.text(max_size=6),
)


def _paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path (mapping keys and list indices) of a nested structure."""
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


def _apply(d: Any, path: tuple, value: Any, delete: bool) -> None:
    node = d
    for p in path[:-1]:
        node = node[p]
    if delete and isinstance(node, dict):
        node.pop(path[-1], None)
    elif isinstance(node, (dict, list)):
        node[path[-1]] = value


def mutations(base: Any, n: int = 3):
    """Strategy: a deep copy of ``base`` with up to ``n`` values replaced, removed, or keys added."""
    paths = _paths(base)
    one = st.tuples(st.sampled_from(paths), VALUE, st.sampled_from(["set", "set", "delete", "add"]), TEXT)

    def build(muts):
        d = copy.deepcopy(base)
        for path, value, how, newkey in muts:
            try:
                if how == "add":
                    parent = path[:-1]
                    node = d
                    for p in parent:
                        node = node[p]
                    if isinstance(node, dict):
                        node[newkey or "extra"] = value
                else:
                    _apply(d, path, value, how == "delete")
            except (KeyError, IndexError, TypeError):
                pass  # an earlier mutation removed or replaced the parent
        return d

    return st.lists(one, max_size=n).map(build)


def corrupt(text_strategy):
    """Strategy: the bytes of a text, sometimes with bytes inserted, replaced or cut off."""

    def apply(args):
        text, how, pos, junk = args
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        pos = pos % (len(data) + 1)
        if how == "insert":
            return data[:pos] + junk + data[pos:]
        if how == "replace":
            return data[:pos] + junk + data[pos + len(junk) :]
        if how == "truncate":
            return data[:pos]
        return data

    return st.tuples(
        text_strategy,
        st.sampled_from(["none", "none", "insert", "replace", "truncate"]),
        st.integers(0, 1 << 16),
        st.binary(min_size=1, max_size=4),
    ).map(apply)


def _write(name: str, data) -> Path:
    p = _WORK / name
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    p.write_bytes(data)
    return p


def _dump(d) -> str:
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------- readers

from bad_inputs.cases import DRAM, EXP, HF, HW, MODEL, SWEEP, SYS  # noqa: E402  (base documents)

_EXP_LOCAL = {**copy.deepcopy(EXP), "systems": ["sys.yaml"], "models": ["model.yaml"]}
_SYS_LOCAL = copy.deepcopy(SYS)
_SYS_LOCAL["devices"]["gpu"]["hardware"] = "hw.yaml"


def _config_strategy():
    doc = st.sampled_from(["exp", "sys", "hw", "model"])
    texts = st.tuples(mutations(_EXP_LOCAL), mutations(_SYS_LOCAL), mutations(HW), mutations(MODEL)).map(
        lambda t: [_dump(x) for x in t]
    )
    return st.tuples(texts, doc, corrupt(st.just(b""))).map(lambda a: (a[0], a[1], a[2]))


def feed_config(example) -> None:
    """Experiment + system + hardware + model YAML -> attnsim.sim.experiment.load_experiment (load + validate)."""
    from attnsim.sim.experiment import load_experiment

    texts, which, junk = example
    names = ["exp", "sys", "hw", "model"]
    for name, text in zip(names, texts):
        data = text.encode("utf-8", "surrogatepass")
        if name == which and junk:
            data = data[: len(data) // 2] + junk + data[len(data) // 2 :]
        _write(f"{name}.yaml", data)
    load_experiment(str(_WORK / "exp.yaml"))


_TREE = None


def _base_tree():
    global _TREE
    if _TREE is None:
        from attnsim.sim.experiment import load_tree

        p = _write("set_exp.yaml", _dump(EXP))
        _TREE = load_tree(str(p))[0]
    return _TREE


def _set_strategy():
    tree_keys = st.sampled_from(
        sorted(
            {
                ".".join(map(str, p))
                for s in ("experiment", "models", "systems", "hardware", "scenarios")
                for p in [(s,) + q for q in _paths(_set_base_dict()[s])]
            }
        )
    )
    key = st.one_of(tree_keys, tree_keys.map(lambda k: k + ".x"), st.text(max_size=12))
    value = st.one_of(
        TOKENS,
        st.sampled_from(
            [".inf", ".nan", "-.inf", "[1, 2", "{a: 1}", "[]", "~", "1e400", "!!python/none ''", "&a [*a]", "*b"]
        ),
    )
    item = st.one_of(st.tuples(key, value).map(lambda kv: f"{kv[0]}={kv[1]}"), st.text(max_size=16))
    return st.lists(item, min_size=1, max_size=3)


def _set_base_dict():
    return _base_tree().as_dict()


def feed_set(items) -> None:
    """``--set`` items -> parse_set + ConfigTree.apply_sets + validate_tree."""
    from attnsim.sim.experiment import validate_tree

    tree = _base_tree().copy()
    tree.apply_sets(items)
    validate_tree(tree)


def feed_hf(data) -> None:
    """HF config.json bytes -> workloads.hf.model_from_hf_config."""
    from attnsim.workloads.hf import model_from_hf_config

    d = _WORK / "hf"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_bytes(data)
    model_from_hf_config(d / "config.json")


_REQ_COLS = ["arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens"]


def _requests_strategy():
    header = st.one_of(
        st.just(_REQ_COLS[:3]), st.just(_REQ_COLS), st.lists(st.sampled_from(_REQ_COLS + ["x", ""]), max_size=6)
    )
    csv_text = st.tuples(header, st.lists(st.lists(TOKENS, max_size=6), max_size=4)).map(
        lambda hr: "\n".join([",".join(hr[0])] + [",".join(r) for r in hr[1]]) + "\n"
    )
    json_val = st.one_of(LEAF, st.lists(LEAF, max_size=2))
    jsonl_text = st.lists(
        st.one_of(
            st.dictionaries(st.sampled_from(_REQ_COLS + ["x"]), json_val, max_size=6).map(json.dumps),
            st.builds(
                lambda a, p, o: json.dumps({"arrival_s": a, "prompt_tokens": p, "output_tokens": o}), FLOATS, INTS, INTS
            ),
            TEXT,
        ),
        max_size=4,
    ).map(lambda rows: "\n".join(rows) + "\n")
    return st.one_of(st.tuples(st.just("csv"), corrupt(csv_text)), st.tuples(st.just("jsonl"), corrupt(jsonl_text)))


def feed_requests(example) -> None:
    """CSV / JSONL request trace -> attnsim.studies.serve.requests.read_trace_file."""
    from attnsim.studies.serve.requests import read_trace_file

    suffix, data = example
    read_trace_file(_write("req.jsonl" if suffix == "jsonl" else "req.csv", data))


_TRACE_DATA = Path(__file__).resolve().parent.parent / "data" / "traces"
_TRACE_SEEDS = {  # format -> file excerpts shipped under tests/data/traces (their first lines) and BurstGPT's columns
    "azure": ["azure_conv_2023_head300.csv", "azure_code_2023_head200.csv", "azure_conv_2024_head5.csv"],
    "mooncake": ["mooncake_conversation_head300.jsonl"],
}
_BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _trace_lines(fmt: str) -> list[str]:
    if fmt == "burstgpt":
        return [_BURST_HEAD, "5,ChatGPT,472,18,490,Conversation log\n", "45,GPT-4,1087,0,1087,API log\n"]
    out = []
    for name in _TRACE_SEEDS[fmt]:
        out += (_TRACE_DATA / name).read_text().splitlines(keepends=True)[:4]
    return out


def _traces_strategy():
    """(format, bytes): shipped trace lines re-ordered, dropped or duplicated, fields replaced by tokens, then
    corrupted bytes: the Azure, BurstGPT and Mooncake readers (attnsim.studies.serve.traces)."""

    def one(fmt):
        lines = _trace_lines(fmt)
        row = st.lists(st.sampled_from(lines), min_size=0, max_size=6)
        sep = "," if fmt != "mooncake" else ", "
        field_swap = st.tuples(st.sampled_from(lines), TOKENS).map(
            lambda lt: sep.join(lt[0].rstrip("\n").split(sep)[:-1] + [lt[1]]) + "\n"
        )
        body = st.lists(st.one_of(st.sampled_from(lines), field_swap), max_size=6)
        text = st.tuples(st.sampled_from(lines[:1]), body, row).map(lambda t: t[0] + "".join(t[1]) + "".join(t[2]))
        return st.tuples(st.just(fmt), corrupt(text))

    return st.one_of(one("azure"), one("burstgpt"), one("mooncake"))


def feed_traces(example) -> None:
    """Azure / BurstGPT / Mooncake trace -> attnsim.studies.serve.requests.read_trace (format named)."""
    from attnsim.studies.serve.requests import read_trace

    fmt, data = example
    read_trace(_write("t.jsonl" if fmt == "mooncake" else "t.csv", data), fmt)


def _dram_trace_strategy():
    addr = st.one_of(st.integers(0, 1 << 34).map(hex), st.integers(0, 1 << 70).map(hex), TOKENS)
    line = st.one_of(
        st.tuples(addr, st.sampled_from(["R", "W", "r", "w", "X"]), st.one_of(st.just(""), TOKENS)).map(
            lambda t: " ".join(x for x in t if x)
        ),
        TOKENS,
        st.just("# comment"),
    )
    return corrupt(st.lists(line, max_size=6).map(lambda ls: "\n".join(ls) + "\n"))


def feed_dram_trace(data) -> None:
    """DRAM request trace -> attnsim.cli.dram.read_trace."""
    from attnsim.cli.dram import read_trace

    read_trace(str(_write("t.txt", data)))


def feed_dram_spec(data) -> None:
    """DRAM spec mapping -> hwmodels.dram.spec.spec_from_dict (then its derived sizes)."""
    from attnsim.hwmodels.dram.spec import spec_from_dict

    spec = spec_from_dict(data, file="d.yaml")
    spec.capacity_bytes


def _asm_strategy():
    from attnsim.isa import ISA_NAMES, get_isa

    def program(isa_name):
        isa = get_isa(isa_name)
        mn = st.sampled_from(sorted(op.mnemonic for op in isa.opcodes) + ["FLY", ""])
        names = sorted({n for op in isa.opcodes for f in op.fields for n in f.enum} | {"L0", "L1"})
        operand = st.one_of(
            TOKENS,
            st.sampled_from(names),
            st.tuples(st.sampled_from(names), TOKENS).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(st.sampled_from(sorted(isa.field_names) or ["x"]), TOKENS).map(lambda t: f"{t[0]}={t[1]}"),
        )
        line = st.tuples(st.sampled_from(["", "", "L0: ", "L1: "]), mn, st.lists(operand, max_size=4)).map(
            lambda t: f"{t[0]}{t[1]} {', '.join(t[2])}"
        )
        return corrupt(st.lists(line, max_size=6).map(lambda ls: "\n".join(ls) + "\n")).map(lambda b: (isa_name, b))

    return st.sampled_from(ISA_NAMES).flatmap(program)


def feed_asm(example) -> None:
    """Assembly text -> isa.base.assemble_file + encode (what `attnsim asm` does)."""
    from attnsim.isa import get_isa
    from attnsim.isa.base import assemble_file, encode

    isa_name, data = example
    isa = get_isa(isa_name)
    encode(assemble_file(isa, _write("p.s", data)), validate=False)


def _disasm_strategy():
    from attnsim.isa import ISA_NAMES, get_isa

    def words(isa_name):
        isa = get_isa(isa_name)
        wb = isa.word_bytes
        codes = sorted(op.code for op in isa.opcodes)
        word = st.one_of(
            st.tuples(st.sampled_from(codes), st.integers(0, (1 << (isa.word_bits - isa.opcode_bits)) - 1)).map(
                lambda t: (t[0] << (isa.word_bits - isa.opcode_bits) | t[1]).to_bytes(wb, "little")
            ),
            st.binary(min_size=wb, max_size=wb),
        )
        return st.one_of(st.lists(word, max_size=6).map(b"".join), st.binary(max_size=3 * wb)).map(
            lambda b: (isa_name, b)
        )

    return st.sampled_from(ISA_NAMES).flatmap(words)


def feed_disasm(example) -> None:
    """Binary words -> isa.base.decode_file + disassemble (what `attnsim disasm` does)."""
    from attnsim.isa import get_isa
    from attnsim.isa.base import decode_file, disassemble

    isa_name, data = example
    disassemble(decode_file(get_isa(isa_name), _write("p.bin", data)))


def feed_sweep(data) -> None:
    """Sweep mapping -> attnsim.studies.sweep.spec.build_sweep, then the first points resolved."""
    from attnsim.studies.sweep.spec import build_sweep

    sw = build_sweep(data, file="sweep.yaml", source=_sweep_base())
    for i in range(min(sw.n_points, 3)):
        sw.resolve(i)


def _sweep_base() -> Path:
    d = _WORK / "sweepdir"
    if not d.is_dir():
        d.mkdir()
        (d / "exp.yaml").write_text(_dump(EXP))
    return d / "sweep.yaml"


def _sweep_strategy():
    values = st.one_of(
        st.lists(LEAF, max_size=4),
        LEAF,
        st.fixed_dictionaries(
            {"start": LEAF, "stop": LEAF},
            optional={"step": LEAF, "num": LEAF, "factor": LEAF, "scale": st.sampled_from(["linear", "log", "x"])},
        ),
    )
    keys = st.sampled_from(
        [
            "scenario.batch_size",
            "scenario.prompt_len",
            "model.num_layers",
            "system",
            "hardware.h100_sxm.hbm_bandwidth_gbps",
            "experiment.seed",
            "bogus.key",
            "scenario",
        ]
    )
    block = st.one_of(
        st.dictionaries(keys, values, max_size=2).map(lambda g: {"grid": g}),
        st.dictionaries(keys, st.lists(LEAF, max_size=3), max_size=2).map(lambda z: {"zip": z}),
        st.builds(
            lambda n, k, d: {"random": {"samples": n, "params": {k: d}}},
            INTS,
            keys,
            st.dictionaries(
                st.sampled_from(["uniform", "loguniform", "randint", "choice", "x"]),
                st.lists(LEAF, max_size=3),
                max_size=1,
            ),
        ),
    )
    base = st.lists(block, max_size=2).map(lambda ps: {**SWEEP, "parameters": ps})
    return st.one_of(base, mutations(SWEEP))


_STORE = None


def _valid_store() -> Path:
    global _STORE
    if _STORE is None:
        import contextlib
        import io

        from attnsim.cli import main

        d = _WORK / "store_src"
        d.mkdir(exist_ok=True)
        (d / "exp.yaml").write_text(_dump(EXP))
        (d / "sweep.yaml").write_text(_dump(SWEEP))
        old = os.getcwd()
        os.chdir(d)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                assert (
                    main(["sweep", "sweep.yaml", "--workers", "1", "--no-progress", "--out", "s.h5", "--cache", "off"])
                    == 0
                )
        finally:
            os.chdir(old)
        _STORE = (d / "s.h5").read_bytes()
    return _STORE


_STORE_OBJECTS = [
    "/points",
    "/points/index",
    "/points/key",
    "/points/status",
    "/points/ttft_s",
    "/points/system",
    "/docs",
    "/resolved",
    "/breakdown",
]
_STORE_ATTRS = ["format", "sweep_definition", "parameters", "n_points_total", "shard", "sweep_id", "attnsim_version"]


def _store_strategy():
    edit = st.one_of(
        st.tuples(st.just("del"), st.sampled_from(_STORE_OBJECTS), st.none()),
        st.tuples(
            st.just("data"),
            st.sampled_from(_STORE_OBJECTS[1:7]),
            st.one_of(
                st.lists(INTS.filter(lambda x: abs(x) < HUGE), max_size=3),
                st.lists(FLOATS, max_size=3),
                st.lists(TEXT, max_size=3),
            ),
        ),
        st.tuples(
            st.just("attr"),
            st.sampled_from(_STORE_ATTRS),
            st.one_of(TEXT, INTS.filter(lambda x: abs(x) < HUGE), FLOATS),
        ),
        st.tuples(st.just("delattr"), st.sampled_from(_STORE_ATTRS), st.none()),
    )
    raw = st.tuples(
        st.sampled_from(["none", "none", "none", "truncate", "flip"]),
        st.integers(0, 1 << 20),
        st.binary(min_size=1, max_size=8),
    )
    return st.tuples(st.lists(edit, max_size=3), raw, st.sampled_from(["show", "table"]))


def feed_store(example) -> None:
    """A valid sweep store with objects / attributes deleted or replaced, or bytes cut or flipped ->
    attnsim.studies.sweep.store.read_results (``attnsim show``) or attnsim.studies.sweep.table.load_table
    (export / plot)."""
    import h5py
    import numpy as np

    from attnsim.studies.sweep.store import read_results
    from attnsim.studies.sweep.table import load_table

    edits, (how, pos, junk), reader = example
    if _STORE is None:
        with _untimed():  # the first call runs a sweep to build the valid store, then reads it once
            _valid_store()
            load_table(_write("s.h5", _STORE))
            read_results(_write("s.h5", _STORE))
    p = _write("s.h5", _valid_store())
    try:
        with h5py.File(p, "r+") as f:
            for kind, name, value in edits:
                if kind == "del" and name in f:
                    del f[name]
                elif kind == "data":
                    if name in f:
                        del f[name]
                    arr = (
                        np.array(value, dtype=h5py.string_dtype())
                        if value and isinstance(value[0], str)
                        else np.array(value)
                    )
                    f.create_dataset(name, data=arr)
                elif kind == "attr":
                    f.attrs[name] = value
                elif kind == "delattr" and name in f.attrs:
                    del f.attrs[name]
        if how != "none":
            data = p.read_bytes()
            pos %= len(data)
            p.write_bytes(data[:pos] if how == "truncate" else data[:pos] + junk + data[pos + len(junk) :])
    except Exception as exc:  # noqa: BLE001 - h5py refused the edit itself: nothing to read
        raise Unusable(exc) from None
    if reader == "show":
        read_results(p)
    else:
        load_table(p)


# ---------------------------------------------------------------- fast mutation (bench/fuzz.py)

_INTERESTING = [
    0,
    1,
    -1,
    2,
    3,
    7,
    64,
    255,
    4096,
    2**31,
    2**53 + 1,
    HUGE - 1,
    HUGE,
    2**64,
    10**9,
    10**30,
    -HUGE,
    0.0,
    -0.0,
    0.5,
    1e-9,
    1e30,
    1e300,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    False,
    None,
    "",
    "x",
    "\n",
    "\xff",
    "../../x",
    "/abs",
    "1e400",
    "0x" + "f" * 17,
    [],
    {},
    [1, 2],
    {"a": 1},
]
_BYTE_TOKENS = [
    b"\xff",
    b"\x00",
    b"\n",
    b",",
    b":",
    b" ",
    b"#",
    b"[",
    b"{",
    b"}",
    b"'",
    b'"',
    b"*a",
    b"&a",
    b"!!",
    b"0x",
    b"-",
    b"9223372036854775808",
    b"18446744073709551616",
    b"1e400",
    b"nan",
    b"inf",
    b"\t",
    b"\xc3\x28",
]


def _mutate_bytes(b: bytes, rng) -> bytes:
    pos = rng.randrange(len(b) + 1)
    r = rng.random()
    if r < 0.3:
        return b[:pos] + rng.choice(_BYTE_TOKENS) + b[pos:]
    if r < 0.5 and b:
        end = min(len(b), pos + rng.randrange(1, 9))
        return b[:pos] + b[end:]
    if r < 0.7 and b:
        i = rng.randrange(len(b))
        return b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1 :]
    if r < 0.85 and b:
        i, j = sorted(rng.randrange(len(b) + 1) for _ in range(2))
        return b[:pos] + b[i:j] + b[pos:]  # duplicate a span
    return b[:pos] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4))) + b[pos:]


def mutate(x, rng, depth: int = 0):
    """A randomly changed copy of an example (bytes/str edited, numbers swapped for edge values, list items
    and mapping keys removed, duplicated or replaced); ``rng`` is a ``random.Random``."""
    if isinstance(x, bytes):
        return _mutate_bytes(x, rng)
    if isinstance(x, str):
        if rng.random() < 0.2:
            return rng.choice([v for v in _INTERESTING if isinstance(v, str)])
        return _mutate_bytes(x.encode("utf-8", "surrogatepass"), rng).decode("utf-8", "surrogateescape")
    if isinstance(x, (bool, int, float)) or x is None:
        return rng.choice(_INTERESTING)
    if isinstance(x, (list, tuple)):
        items = list(x)
        r = rng.random()
        if items and (r < 0.7 or depth > 6):
            i = rng.randrange(len(items))
            items[i] = mutate(items[i], rng, depth + 1)
        elif items and r < 0.85 and isinstance(x, list):
            del items[rng.randrange(len(items))]
        elif items and isinstance(x, list):
            items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(items)))
        return tuple(items) if isinstance(x, tuple) else items
    if isinstance(x, dict):
        d = dict(x)
        r = rng.random()
        if d and r < 0.7:
            k = rng.choice(list(d))
            d[k] = mutate(d[k], rng, depth + 1)
        elif d and r < 0.85:
            del d[rng.choice(list(d))]
        else:
            d[rng.choice(["extra", "", "\n", "name", "kind"])] = copy.deepcopy(rng.choice(_INTERESTING))
        return d
    return x


_REPRO_EXP = {
    "name": "fuzz_repro",
    "systems": ["dgx_a100", "dgx_h100"],
    "models": ["llama2-7b"],
    "scenarios": {
        "s1": {"batch_size": 1, "prompt_len": 64, "output_len": 4},
        "s4": {"batch_size": 4, "prompt_len": 64, "output_len": 4},
    },
    "baseline": "dgx_a100",
}
_REPRO = {
    "system": "toy",
    "title": "t",
    "source": "s",
    "paper": [{"claim": "c", "value": 2.0, "note": "n"}],
    "experiments": {"e": "exp.yaml"},
    "figure": {"recipe": "reproduction", "out": "toy.pdf"},
    "rows": [
        {
            "name": "a",
            "experiment": "e",
            "select": {"system": "dgx_h100", "batch_size": 1},
            "metric": "vs_baseline.decode_throughput_ratio",
            "reference": 1.5,
            "tolerance": 0.5,
            "role": "calibration",
        },
        {
            "name": "b",
            "experiment": "e",
            "select": {"system": "dgx_h100", "scenario": "s4"},
            "metric": "metrics.tpot_s",
            "scale": 1000.0,
            "reference": 5.0,
            "tolerance": 0.9,
            "role": "validation",
            "source": "x",
        },
    ],
}


def feed_reproduction(data) -> None:
    """reference.yaml bytes -> attnsim.studies.reproduce.load (schema, experiments, select; nothing simulated)."""
    from attnsim.studies import reproduce

    d = _WORK / "repro" / "toy"
    d.mkdir(parents=True, exist_ok=True)
    (d / "exp.yaml").write_text(_dump(_REPRO_EXP))
    (d / "reference.yaml").write_bytes(data)
    reproduce.load(d)


# ---------------------------------------------------------------- config files of every other kind


def _builtin_docs() -> list[tuple[str, str, dict]]:
    """(kind, file name, parsed document) of every built-in hardware, model, stack and calibration file: the
    seeds of the ``kinds`` reader (experiments, systems, sweeps, DRAM specs and references have their own)."""
    from attnsim.configs import CONFIG_ROOT

    out = []
    for kind in ("hardware", "models", "stacks", "calibration"):
        for f in sorted((CONFIG_ROOT / kind).glob("*.yaml")):
            out.append((kind, f.name, yaml.safe_load(f.read_text())))
    return out


_DOCS = None


def _docs():
    global _DOCS
    if _DOCS is None:
        _DOCS = _builtin_docs()
    return _DOCS


def _kinds_strategy():
    def one(i):
        return corrupt(mutations(_docs()[i][2], 4).map(_dump)).map(lambda b: (i, b))

    return st.integers(0, len(_docs()) - 1).flatmap(one)


def feed_kinds(example) -> None:
    """A hardware (any device kind: GPU, PIM, CXL, flash, link, ...), model, stack or calibration file ->
    its loader: hwmodels.gpu.load_hardware (registry build + validation), workloads.zoo.load_model,
    stack.load_stack, ppl_calibration.load_table + resolve / perplexity.load_calibration."""
    i, data = example
    if isinstance(i, bool) or not isinstance(i, int):
        raise Unusable(i)  # the mutator replaced the file index: not an input of this reader
    kind, name, _ = _docs()[i % len(_docs())]
    d = _WORK / "kinds"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    if kind == "hardware":
        from attnsim.hwmodels.gpu import load_hardware

        load_hardware(str(p))
    elif kind == "models":
        from attnsim.workloads.zoo import load_model

        load_model(str(p))
    elif kind == "stacks":
        from attnsim.hwmodels.stack import load_stack

        load_stack(str(p))
    else:
        from attnsim.hwmodels.reliability.perplexity import load_calibration
        from attnsim.hwmodels.reliability.ppl_calibration import load_table, resolve

        if name.startswith("kv_error"):  # a single measured curve (bench/calibrate_perplexity.py)
            load_calibration(p)
        table = load_table(p)
        for model in ("llama2-7b", "unknown-1b"):
            resolve(table, model, 4096, allow_uncalibrated=True)


# ---------------------------------------------------------------- DRAM traces in every format (compiled reader)


def _dram_any_strategy():
    addr = st.one_of(st.integers(0, 1 << 34).map(hex), st.integers(0, 1 << 34).map(str), TOKENS)
    ramulator = st.one_of(
        st.tuples(st.sampled_from(["LD", "ST", "R", "W", "X"]), addr).map(" ".join),
        st.tuples(st.sampled_from(["R", "W"]), st.lists(st.integers(-1, 70).map(str), max_size=8)).map(
            lambda t: " ".join([t[0]] + t[1])
        ),
    )
    dramsim3 = st.tuples(
        addr,
        st.sampled_from(["READ", "WRITE", "read", "P_MEM_RD", "BOFF", "X"]),
        st.one_of(st.integers(0, 1 << 20).map(str), TOKENS),
    ).map(" ".join)
    attn = st.tuples(addr, st.sampled_from(["R", "W", "X"]), st.one_of(st.just(""), TOKENS)).map(
        lambda t: " ".join(x for x in t if x)
    )
    lines = {"ramulator": ramulator, "dramsim3": dramsim3, "attnsim": attn}
    text = st.sampled_from(sorted(lines)).flatmap(
        lambda f: corrupt(
            st.lists(st.one_of(lines[f], TOKENS, st.just("# c")), max_size=6).map(lambda ls: "\n".join(ls) + "\n")
        ).map(lambda b: (f, b))
    )
    npy = st.tuples(
        st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 1), st.integers(-5, 1 << 40)), max_size=5),
        st.integers(0, 1 << 12),
        st.binary(min_size=1, max_size=4),
    ).map(_npy_bytes)
    return st.one_of(text, npy.map(lambda b: ("npy", b)), st.tuples(st.just("auto"), corrupt(st.just(b"0x40 R\n"))))


def _npy_bytes(args) -> bytes:
    import io

    import numpy as np

    from attnsim.hwmodels.dram.traces import TRACE_DTYPE

    rows, pos, junk = args
    t = np.zeros(len(rows), TRACE_DTYPE)
    for i, (a, w, arr) in enumerate(rows):
        t[i] = (a, w, arr)
    buf = io.BytesIO()
    np.save(buf, t, allow_pickle=False)
    b = buf.getvalue()
    pos %= len(b) + 1
    return b[:pos] + junk + b[pos + len(junk) :]


_SPEC = None


def feed_dram_any(example) -> None:
    """DRAM request trace of any format (attnsim, Ramulator, DRAMsim3, .npy, auto-detected) ->
    hwmodels.dram.traces.read_trace_any against the HBM3 spec (what ``attnsim dram --trace`` reads first)."""
    global _SPEC
    from attnsim.hwmodels.dram.traces import read_trace_any

    if _SPEC is None:  # first call: load the spec and compile the parsers, untimed (a JIT compile is no hang)
        with _untimed():
            from attnsim.hwmodels.dram.spec import load_dram_spec

            _SPEC = load_dram_spec("hbm3_6400")
            for fmt, text in (
                ("attnsim", b"0x40 R 1\nx\n"),
                ("ramulator", b"R 0 0 0 0 0 0 0\nLD 0x40\n"),
                ("dramsim3", b"0x40 READ 1\n"),
            ):
                with contextlib.suppress(ConfigError):
                    read_trace_any(str(_write("warm.trace", text)), _SPEC, fmt, 1 << 12)
    fmt, data = example
    p = _write("any.npy" if fmt == "npy" else "any.trace", data)
    read_trace_any(str(p), _SPEC, fmt, 1 << 12)


# ---------------------------------------------------------------- sub-result cache entries

_CACHE_VALUES = [
    None,
    True,
    3,
    -2.5,
    float("inf"),
    "s",
    b"\x00\xff",
    [1, [2.0, "x"]],
    (1, 2),
    {"a": 1, 2: [3]},
    {(1, "k"): None},
]


def _cache_strategy():
    import numpy as np

    arrays = st.sampled_from(
        [np.arange(4, dtype=np.int32), np.ones((2, 3)), np.array([True, False]), np.float32(1.5), np.int64(7)]
    )
    value = st.recursive(
        st.one_of(st.sampled_from(_CACHE_VALUES), arrays, INTS.filter(lambda x: abs(x) < HUGE), FLOATS, TEXT),
        lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(TEXT, c, max_size=2)),
        max_leaves=6,
    )
    return st.tuples(value.map(_cache_payload), st.sampled_from(["authentic", "authentic", "raw", "fifo", "link"]))


def _cache_payload(value) -> bytes:
    import json as _json

    from attnsim.core.cache import _FORMAT, encode_value

    return _json.dumps([_FORMAT, encode_value(value)], separators=(",", ":")).encode()


_CACHE_STORE = None


def feed_cache(example) -> None:
    """A cache entry file (the payload, authentic = signed with the folder's key, so the decoder is reached;
    raw = written as the whole file; or a FIFO / a symlink to /dev/zero planted as the entry) ->
    sweep.cache.DirStore.get. Clean outcomes are the ones cached() handles: KeyError (absent), ValueError
    (forged, malformed, not a regular file), TypeError / RecursionError (malformed structure)."""
    global _CACHE_STORE
    from attnsim.core.cache import DirStore

    if _CACHE_STORE is None:
        _CACHE_STORE = DirStore(_WORK / "cache")
    payload, how = example
    if not isinstance(payload, bytes):
        payload = str(payload).encode("utf-8", "surrogatepass")
    k = "ab" + "0" * 62
    p = _CACHE_STORE.root / k[:2] / f"{k}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink() or p.exists():
        p.unlink()
    if how == "fifo":
        os.mkfifo(p)
    elif how == "link":
        p.symlink_to("/dev/zero")
    else:
        mac = _CACHE_STORE._mac(k, payload) if how == "authentic" else "0" * 64
        p.write_bytes(payload if how == "raw" else mac.encode() + b"\n" + payload)
    try:
        _CACHE_STORE.get(k)
    except (KeyError, ValueError, TypeError, RecursionError):
        pass


HARNESSES: dict[str, Harness] = {}


def _register(name, strategy_fn, feed):
    HARNESSES[name] = Harness(name, st.deferred(strategy_fn), feed)


_register("config", _config_strategy, feed_config)
_register("set", _set_strategy, feed_set)
_register("hf", lambda: corrupt(mutations(HF).map(lambda d: json.dumps(d, allow_nan=True))), feed_hf)
_register("requests", _requests_strategy, feed_requests)
_register("traces", _traces_strategy, feed_traces)
_register("dram_trace", _dram_trace_strategy, feed_dram_trace)
_register("dram_spec", lambda: mutations(DRAM, 4), feed_dram_spec)
_register("asm", _asm_strategy, feed_asm)
_register("disasm", _disasm_strategy, feed_disasm)
_register("sweep", _sweep_strategy, feed_sweep)
_register("store", _store_strategy, feed_store)
_register("reproduction", lambda: corrupt(mutations(_REPRO, 4).map(_dump)), feed_reproduction)
_register("kinds", _kinds_strategy, feed_kinds)
_register("dram_any", _dram_any_strategy, feed_dram_any)
_register("cache", _cache_strategy, feed_cache)


def _import_readers() -> None:
    """Import every reader's modules now, outside any timed execution: numba and h5py take seconds to import on
    a busy machine, and a hang alarm inside an import leaves a half-initialised module behind."""
    import h5py  # noqa: F401

    import attnsim.cli  # noqa: F401
    import attnsim.cli.dram  # noqa: F401
    import attnsim.core.cache  # noqa: F401
    import attnsim.hwmodels.dram.spec  # noqa: F401
    import attnsim.hwmodels.dram.traces  # noqa: F401
    import attnsim.hwmodels.gpu  # noqa: F401
    import attnsim.hwmodels.reliability.perplexity  # noqa: F401
    import attnsim.hwmodels.reliability.ppl_calibration  # noqa: F401
    import attnsim.hwmodels.stack  # noqa: F401
    import attnsim.isa.base  # noqa: F401
    import attnsim.sim.experiment  # noqa: F401
    import attnsim.sim.results  # noqa: F401
    import attnsim.studies.reproduce  # noqa: F401
    import attnsim.studies.serve.requests  # noqa: F401
    import attnsim.studies.serve.traces  # noqa: F401
    import attnsim.studies.sweep.spec  # noqa: F401
    import attnsim.studies.sweep.table  # noqa: F401
    import attnsim.workloads.hf  # noqa: F401
    import attnsim.workloads.zoo  # noqa: F401


_import_readers()
