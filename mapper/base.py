"""Plan and the mapper-policy registry.

A policy places each op of an OpTrace on a device role of a System and places
weights and KV in memory; it never computes a time (device models do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attnsim.core.config import ConfigError


class CapacityError(ConfigError):
    """Weights + KV do not fit the devices a plan puts them on."""


@dataclass
class MemoryPlacement:
    """Bytes placed on ONE device of a role."""

    role: str
    weights_bytes: float
    kv_bytes: float
    capacity_bytes: float

    @property
    def used_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.capacity_bytes


@dataclass
class Plan:
    """Where each op of a trace runs, and how many devices run it in parallel.

    ``device[i]`` is the role that runs row i (allreduce rows name the link);
    ``parallel[i]`` is how many devices of that role run their own copy (TP ranks).
    """

    policy: str
    trace: Any  # OpTrace
    device: np.ndarray  # str per row: a device role, "link" (the compute pool's collective link) or "link:<name>"
    parallel: np.ndarray  # int per row
    memory: list[MemoryPlacement] = field(default_factory=list)
    stage: np.ndarray | None = None  # int per row; rows sharing a stage id >= 0 run concurrently across devices
    # stage id -> share of each hidden (non-critical) device's time that stays exposed: the fill and
    # drain of a pipeline over that many items (e.g. 1 / heads for head-granular pipelining); default 0
    stage_exposed: dict = field(default_factory=dict)
    pipeline_subbatches: int = 1  # >1: decode layers pipelined over sub-batches across devices (engine)
    # the sub-batches of a pipelined step: [(request indices, channel per request or None)]; empty: the batch's
    # contiguous slices (engine.subbatch_parts)
    subbatch_parts: list = field(default_factory=list)
    added: np.ndarray | None = None  # rows the mapper added (overheads not in the model: merges, copies)
    programs: dict = field(default_factory=dict)  # PIM/PNM isa programs per row (later policies)
    # unified memory (hwmodels/pim_scheduling.py): {"compute": role, "pim": role, "exclusion", "partitions"}:
    # PIM and normal accesses share channels; the engine applies the PIM access schedule per layer group
    pim_schedule: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def check_capacity(self) -> None:
        for mp in self.memory:
            if not mp.fits:
                gb = 1e9
                raise CapacityError(
                    f"{mp.role}: weights {mp.weights_bytes / gb:.1f} GB + KV {mp.kv_bytes / gb:.1f} GB = "
                    f"{mp.used_bytes / gb:.1f} GB per device exceed its capacity {mp.capacity_bytes / gb:.1f} GB "
                    f"by {(mp.used_bytes - mp.capacity_bytes) / gb:.1f} GB"
                )


_POLICIES: dict[str, Callable] = {}
_OPTIONS: dict[str, dict] = {}  # policy -> its mapper.options (name -> default)
_NEEDS: dict[str, dict] = {}  # policy -> {option: (other option, value it must have for the option to be read)}
_ATTENTION_ON: set = set()  # policies that place decode attention with ``mapper.attention_on`` (place_attention)
_VALUES: dict[str, dict] = {}  # policy -> {option: its legal values} (a named option, e.g. cxl_pnm tp_vector_ops)


def register(
    name: str,
    options: dict | None = None,
    needs: dict | None = None,
    attention_on: bool = False,
    values: dict | None = None,
):
    """Register a policy and the ``mapper.options`` it accepts (name -> default; none if omitted);
    ``needs`` = {option: (other, value)}: the option is read only when ``other == value``, so giving it
    otherwise is refused (a setting takes effect or is refused). ``attention_on``: the policy honours the
    system's ``mapper.attention_on`` (the shared attention placement below); others refuse it. ``values`` =
    {option: its legal values}: any other value is refused at load (check_options)."""

    def deco(fn):
        _POLICIES[name] = fn
        _OPTIONS[name] = dict(options or {})
        _NEEDS[name] = dict(needs or {})
        _VALUES[name] = dict(values or {})
        if attention_on:
            _ATTENTION_ON.add(name)
        return fn

    return deco


def validate_options(name: str, options: dict, file: str | None = None, attention_on: str | None = None) -> dict:
    """A system's ``mapper.policy``, ``mapper.options`` and ``mapper.attention_on`` checked before any run
    (ConfigError naming ``file``); returns the options with defaults filled in. Policies call
    ``check_options`` too; the device kind behind ``attention_on`` is checked once the system is built
    (``attention_roles``)."""
    get_policy(name, file=file)
    if attention_on is not None and name not in _ATTENTION_ON:
        raise ConfigError(
            f"not used by policy {name} (attention placement is read by {', '.join(sorted(_ATTENTION_ON))}); remove it",
            file=file,
            key="mapper.attention_on",
        )
    try:
        return check_options(options or {}, _OPTIONS[name], name)
    except ConfigError as e:
        raise ConfigError(e.message, file=file, key=e.key) from None


def get_policy(name: str, file: str | None = None) -> Callable:
    _load_builtin()
    if name not in _POLICIES:
        raise ConfigError(
            f"expected one of {', '.join(sorted(_POLICIES))}, got {name!r}", file=file, key="mapper.policy"
        )
    return _POLICIES[name]


def _load_builtin() -> None:
    """Import the built-in policy modules (each registers itself)."""
    import importlib

    for mod in ("gpu_only", "attacc", "neupims", "cxl_pnm", "offload", "tiered", "ianus"):
        importlib.import_module(f"attnsim.mapper.{mod}")


def policies() -> list[str]:
    _load_builtin()
    return sorted(_POLICIES)


# ---------------------------------------------------------------- helpers shared by policies

ATTENTION_CLASSES = ("attn_score", "softmax", "attn_context")


def is_attention(cls: np.ndarray) -> np.ndarray:
    """``np.isin(cls, ATTENTION_CLASSES)`` by three equality tests: np.isin sorts string arrays: 16 vs 5 us on
    a 30-row trace, measured; a serving run asks ~3 times per new iteration shape, bench_serve)."""
    return (cls == "attn_score") | (cls == "softmax") | (cls == "attn_context")


MODEL_COLUMNS = ("flops", "weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes")


def role_of_kind(system, *kinds: str) -> str | None:
    """First device role whose model kind is one of ``kinds``."""
    for role, pool in system.pools.items():
        if pool.model.kind in kinds:
            return role
    return None


def link_name_between(system, a: str, b: str, file: str | None = None) -> str:
    """Name of the link connecting roles a and b (ConfigError if none)."""
    for name, roles in system.link_roles.items():
        if set(roles) == {a, b}:
            return name
    raise ConfigError(
        f"policy needs a link between '{a}' and '{b}' (have: "
        f"{', '.join(f'{n}: {r[0]}-{r[1]}' for n, r in system.link_roles.items()) or 'none'})",
        file=file,
        key="links",
    )


def insert_rows(trace, before: dict[int, list[dict]] | None = None, after: dict[int, list[dict]] | None = None):
    """A copy of ``trace`` with extra rows placed before / after given row indices.

    Returns (new trace, index map old row -> new row, mask of the inserted rows).
    """
    from attnsim.workloads.optrace import COLUMNS, DEFAULTS, INT_COLUMNS, OP_CLASSES, OpTrace

    before, after = before or {}, after or {}
    extra, where = [], []  # the inserted rows and their positions in the new trace
    old_to_new = np.empty(len(trace), np.int64)
    pos = 0
    for i in range(len(trace)):
        for row in before.get(i, ()):
            extra.append(row)
            where.append(pos)
            pos += 1
        old_to_new[i] = pos
        pos += 1
        for row in after.get(i, ()):
            extra.append(row)
            where.append(pos)
            pos += 1
    added = np.zeros(pos, dtype=bool)
    added[where] = True
    # column by column, as OpTrace.from_rows converts the rows (the trace's own rows keep their values)
    cols = {}
    for c in COLUMNS:
        d = DEFAULTS.get(c, 0)
        new_vals = [r.get(c, d) for r in extra]
        if c in ("op", "cls"):
            col = np.empty(pos, dtype=object)
            col[old_to_new] = np.asarray(trace.cols[c], dtype=object)
            col[where] = new_vals
            cols[c] = col.astype(str)
        else:
            dtype = np.int64 if c in INT_COLUMNS else np.float64
            col = np.empty(pos, dtype=dtype)
            col[old_to_new] = np.asarray(trace.cols[c]).astype(dtype)
            col[where] = np.array(new_vals, dtype=dtype)
            cols[c] = col
    bad = set(cols["cls"]) - set(OP_CLASSES)
    if bad:
        raise ValueError(f"unknown op classes {sorted(bad)}")
    new = OpTrace(
        cols=cols,
        phase=trace.phase,
        model=trace.model,
        tp=trace.tp,
        query_tokens=trace.query_tokens,
        context_lens=trace.context_lens,
        groups=trace.groups,
        meta=dict(trace.meta),
    )
    return new, old_to_new, added


def transfer_row(op: str, like: dict, nbytes: float) -> dict:
    """A point-to-point transfer row repeated like ``like`` (same layer group and count)."""
    return {
        "op": op,
        "cls": "transfer",
        "layer_group": like["layer_group"],
        "count": like["count"],
        "m": 0,
        "n": 0,
        "k": 0,
        "batch": 1,
        "flops": 0.0,
        "weight_bytes": 0.0,
        "act_bytes": 0.0,
        "kv_read_bytes": 0.0,
        "kv_write_bytes": 0.0,
        "comm_bytes": float(nbytes),
    }


def model_totals(trace, added: np.ndarray | None = None) -> dict[str, float]:
    """FLOPs and bytes of the model's own ops, one rank: mapper-added rows (transfers, and the rows
    in ``added``, e.g. a partial-softmax merge) excluded."""
    keep = trace["cls"] != "transfer"
    if added is not None:
        keep &= ~added
    return {c: float(np.sum(trace[c][keep] * trace["count"][keep])) for c in MODEL_COLUMNS}


def rank_weights(model_bytes: dict, trace, tp: int) -> float:
    """Weight bytes on the fullest tensor-parallel rank: weights / tp, or with uneven tp the
    largest shard's fraction the trace carries (workloads.trace.weight_bytes_per_rank)."""
    f = trace.meta.get("weights_per_rank_fraction")
    return model_bytes["weights"] / tp if f is None else model_bytes["weights"] * f


def check_options(options: dict, allowed: dict, policy: str) -> dict:
    """``options`` with defaults filled in; unknown names and values not of the default's type (bool,
    integer, number) raise ConfigError naming ``mapper.options[.<name>]``."""
    from attnsim.core.config import check_float, check_int

    bad = sorted(set(options) - set(allowed))
    if bad:
        from attnsim.core.suggest import did_you_mean

        raise ConfigError(
            f"unknown option(s) {', '.join(bad)}{did_you_mean(bad[0], allowed)} for policy {policy} "
            f"(known: {', '.join(allowed) or 'none'})",
            key="mapper.options",
        )
    out = dict(allowed)
    for name, v in options.items():
        d, key = allowed[name], f"mapper.options.{name}"
        if isinstance(d, bool):
            if not isinstance(v, bool):
                raise ConfigError(f"expected true or false, got {v!r}", key=key)
        elif isinstance(d, int):
            v = check_int(v, key=key, lo=0)
        elif isinstance(d, float):
            v = check_float(v, key=key)
        legal = _VALUES.get(policy, {}).get(name)
        if legal is not None and v not in legal:
            raise ConfigError(f"expected one of {', '.join(map(str, legal))}, got {v!r}", key=key)
        out[name] = v
    for name, (other, value) in _NEEDS.get(policy, {}).items():
        if name in options and out[other] != value:
            raise ConfigError(
                f"not used unless {other}: {str(value).lower()} (got {other}: {str(out[other]).lower()}); remove it",
                key=f"mapper.options.{name}",
            )
    return out


# ---------------------------------------------------------------- attention placement (one mechanism)
# Decode attention (score, softmax, context) and the KV cache on an attention-capable memory device while
# every GEMM stays on the compute pool: AttAcc's split (pim_dram.md b.1, b.6), the seeds' heterogeneous
# pattern for CXL-PNM (shared/seeds/). Any pool of model kind ``pim`` can take it: HBM-PIM (isa attacc,
# fimdram, newton), GDDR6-AiM (aim), CXL-PNM / CXL-NDP (cxl_pnm): each lowers and costs the three ops.

ATTENTION_KINDS = ("pim",)  # device-model kinds that cost attn_score / softmax / attn_context in memory


def attention_roles(system, policy: str, role: str | None = None, file: str | None = None):
    """(compute role, attention role, link device id) for placing decode attention on ``role`` (default: the
    system's first pool of an attention-capable kind). Refuses (one line) a role that is not a pool, a pool
    that cannot run attention, a system without a gpu/npu pool or without a link between the two, and an
    attention pool whose count differs from the compute ranks (one attention device per rank holds its KV
    heads)."""
    key = "mapper.attention_on" if role is not None else "devices"
    gpu = role_of_kind(system, "gpu", "npu")
    if role is not None and role not in system.pools:
        raise ConfigError(
            f"expected a device role of the system ({', '.join(system.pools)}), got {role!r}", file=file, key=key
        )
    pim = role if role is not None else role_of_kind(system, *ATTENTION_KINDS)
    have = ", ".join(f"{r}: {p.model.kind}" for r, p in system.pools.items())
    if pim is not None and system.pools[pim].model.kind not in ATTENTION_KINDS:
        raise ConfigError(
            f"expected a device that can run attention (kind {' or '.join(ATTENTION_KINDS)}: HBM-PIM, "
            f"CXL-PNM, NDP), got {pim!r} of kind {system.pools[pim].model.kind}",
            file=file,
            key=key,
        )
    if gpu is None or pim is None:
        raise ConfigError(f"policy {policy} needs a gpu/npu pool and a pim pool (have: {have})", file=file, key=key)
    par = system.spec.parallelism
    if system.pools[pim].count != par.devices_per_replica * par.replicas:
        raise ConfigError(
            f"policy {policy} pairs each tensor-parallel rank (of each pipeline device group) with one "
            f"PIM device: expected {par.device_formula()} PIM devices, got {system.pools[pim].count}",
            key=f"devices.{pim}.count",
        )
    return gpu, pim, "link:" + link_name_between(system, gpu, pim, file=file)


def pim_pair(system, policy: str):
    """(gpu role, pim role, link device id) with the PIM pool matched to the TP ranks: ``attention_roles``
    with the system's ``mapper.attention_on`` (default: its first attention-capable pool)."""
    return attention_roles(system, policy, getattr(system.spec.mapper, "attention_on", None))


def attention_memory(system, trace, model_bytes: dict, gpu: str, att: str, tp: int, att_weights: float = 0.0):
    """Memory of the split: each compute rank holds its weight shard, its attention device the rank's KV
    (as the device stores it: a compression section's ratio, hwmodels/compression.py) and ``att_weights``."""
    dev = system.pools[att].model
    rk = getattr(dev, "stored_ratio", lambda kind, dtype=None: 1.0)("kv", trace.meta.get("kv_dtype"))
    return [
        MemoryPlacement(gpu, rank_weights(model_bytes, trace, tp), 0.0, system.pools[gpu].model.capacity_bytes),
        MemoryPlacement(att, att_weights, model_bytes["kv_per_rank"] * rk, dev.capacity_bytes),
    ]


def attention_prefill(trace, gpu: str, link: str):
    """Prefill with the attention split: every op on the compute pool, the prompt's K/V written to the
    attention devices over ``link`` (``kv_writeback_rows``). Returns (trace, device per row)."""
    tr, _, added = insert_rows(trace, after=kv_writeback_rows(trace))
    device = np.where(tr["cls"] == "allreduce", "link", gpu).astype(object)
    device[added] = link
    return tr, device


def attention_decode_rows(trace, act_bytes: float):
    """The decode trace with the q / new K,V (in) and attention output (out) transfer rows around each
    attention block (``attention_io_rows``)."""
    before, after = attention_io_rows(trace, act_bytes)
    return insert_rows(trace, before, after)[0]


def attention_devices(trace, gpu: str, att: str, link: str) -> np.ndarray:
    """Device per row of a decode trace with the attention split: attention ops on ``att``, transfers on
    ``link``, collectives on the compute pool's link, everything else (the GEMMs) on ``gpu``."""
    ncls = trace["cls"]
    device = np.where(ncls == "allreduce", "link", gpu).astype(object)
    device[is_attention(ncls)] = att
    device[ncls == "transfer"] = link
    return device


def place_attention(trace, system, model_bytes: dict, policy: str, role: str | None = None) -> Plan:
    """The plan of a step with decode attention and the KV on the attention device ``role`` and every other
    op on the compute pool (tensor parallel, one attention device per rank): the mechanism behind
    ``mapper.attention_on`` (and AttAcc's placement, mapper/attacc.py)."""
    from attnsim.workloads.model import DTYPE_BYTES

    gpu, att, link = attention_roles(system, policy, role)
    tp = system.spec.parallelism.tp
    memory = attention_memory(system, trace, model_bytes, gpu, att, tp)
    if trace.phase == "prefill":
        tr, device = attention_prefill(trace, gpu, link)
    else:
        tr = attention_decode_rows(trace, DTYPE_BYTES[trace.meta.get("act_dtype", "fp16")])
        device = attention_devices(tr, gpu, att, link)
    return Plan(
        policy,
        tr,
        device,
        np.full(len(tr), tp, dtype=np.int64),
        memory,
        notes=[f"decode attention and KV on {att} (mapper.attention_on), GEMMs on {gpu}"],
    )


def attention_io_rows(trace, act_bytes: float) -> tuple[dict, dict]:
    """Transfer rows around each attention block: q + the new token's K/V in, the output back.

    Returns (before, after) insert maps for ``insert_rows``.
    """
    meta, cls, grp = trace.meta, trace["cls"], trace["layer_group"]
    b = float(np.sum(trace.query_tokens))
    q_bytes = b * meta["heads_per_rank"] * meta.get("attn_score_dim", meta["head_dim"]) * act_bytes
    o_bytes = b * meta["heads_per_rank"] * meta.get("attn_context_dim", meta["head_dim"]) * act_bytes
    before, after = {}, {}
    att = is_attention(cls)
    for i in np.nonzero(cls == "attn_score")[0]:
        same = (grp == grp[i]) & att
        kv_new = float(np.sum(trace["kv_write_bytes"][same]))
        like = {"layer_group": grp[i], "count": trace["count"][i]}
        before[int(i)] = [transfer_row("pim_send_q_kv", like, q_bytes + kv_new)]
    for j in np.nonzero(cls == "attn_context")[0]:
        like = {"layer_group": grp[j], "count": trace["count"][j]}
        after[int(j)] = [transfer_row("pim_recv_out", like, o_bytes)]
    return before, after


def kv_writeback_rows(trace, far_fraction: float = 1.0, op: str = "pim_write_kv") -> dict:
    """After each attention block: write ``far_fraction`` of the K/V its rows write into the far (PIM) tier
    (prefill: the prompt's K/V; 1.0 when the far tier holds all of it)."""
    cls, grp = trace["cls"], trace["layer_group"]
    after = {}
    att = is_attention(cls)
    for j in np.nonzero(cls == "attn_context")[0]:
        same = (grp == grp[j]) & att
        like = {"layer_group": grp[j], "count": trace["count"][j]}
        after[int(j)] = [transfer_row(op, like, far_fraction * float(np.sum(trace["kv_write_bytes"][same])))]
    return after
