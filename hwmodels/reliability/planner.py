"""Reliability-aware KV tiering (cxl_reliability.md §5(5)).

For every KV block (layer x head group x token range, with an importance class and the
attention mass it holds) choose an :class:`Option` -- tier, storage format (bits), ECC on the
high-significance fields (sign/exponent, code MSB, scales) and on the low ones (mantissa, low
code bits), and a refresh interval for each of those two field groups (SHIELD/Kelle-style
bit-significance refresh, §4.1) -- minimising a named objective under an accuracy budget and
tier capacities.

Accuracy (L0 proxy, one error space for quantization, silent bit errors and dropped tokens):
the contribution of block b to the mean per-head relative attention error is

    eps_b = [ h_b m_b eps_q(fmt) + N_b sum_f bits_f s_f (sK_f max(1, r_b) + sV_f r_b) / 2
              + h_b m_b P_drop ] / H_total

with h_b heads, m_b the attention mass of its tokens, r_b = m_b / token share (importance
ratio), N_b KV elements, s_f the silent rate per data bit of field f after ECC, sK_f / sV_f
the per-flip sensitivities of :func:`accuracy.field_sensitivity` (a key flip that raises a
logit hurts whatever the token's weight, hence max(1, r); a value error scales with the
weight, §4.1) and eps_q the quantization error of :func:`accuracy.quant_error`. The sum over
blocks bounds the mean head error (triangle inequality); it is constrained to ``budget``.
``error_weights`` (w_q, w_bit) weigh its quantization term and its bit-error + drop terms in the
constraint (default 1, 1: the proxy itself); perplexity.error_weights gives the weights that turn a
measured perplexity-increase SLO into this form (budget 1). Plans report both parts unweighted.

Cost per decode step: time T = sum bytes x (1 + inline overhead) x read time per byte (+ refetch
of detected-uncorrectable data), dynamic energy E_dyn = bytes x (1 + check bits) x read energy
+ ECC decode energy, refresh power P = cells x refresh power per byte x (64 ms / interval).
Energy per step E = E_dyn + P T. Objectives: ``latency_x_energy`` (T E, default), ``energy``,
``latency``. Solver: Lagrangian-ratio greedy -- repair (reduce eps at the least objective cost
per unit of eps) until within budget, then improve (take the move with the largest objective
gain per unit of added eps) until no move helps; both respect capacities. ``replan`` restarts
from a previous assignment when importance drifts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from attnsim.hwmodels.reliability import accuracy as acc
from attnsim.hwmodels.reliability import ecc as _ecc
from attnsim.hwmodels.reliability.errors import JEDEC_REFRESH_MS, RawErrorModel, refresh_power_scale
from attnsim.hwmodels.reliability.formats import FIELD_GROUPS, FORMAT_BITS

OBJECTIVES = ("latency_x_energy", "energy", "latency")
HIGH = FIELD_GROUPS["high"]
LOW = FIELD_GROUPS["low"]


@dataclass(frozen=True)
class TierSpec:
    """A memory tier as the planner sees it (inputs; not derived from device models yet)."""

    name: str
    read_s_per_byte: float  # effective streaming time per byte read
    read_j_per_byte: float  # dynamic energy per byte read
    refresh_w_per_byte: float  # refresh power per stored byte at the JEDEC 64 ms interval
    capacity_bytes: float
    errors: RawErrorModel = field(default_factory=RawErrorModel)
    temp_c: float = 45.0
    ecc_options: tuple = ("none",)
    refresh_options_ms: tuple = (JEDEC_REFRESH_MS,)


@dataclass(frozen=True)
class KVBlock:
    layer: int
    head_group: int
    token_start: int
    token_end: int
    n_heads: int
    head_dim: int
    context_tokens: int  # tokens of the heads this block belongs to
    attention_mass: float  # share of those heads' attention held by this token range
    importance: str = "normal"  # class label (reporting / drift)
    reads_per_step: float = 1.0

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start

    @property
    def n_elements(self) -> int:  # K and V
        return 2 * self.n_heads * self.n_tokens * self.head_dim

    @property
    def importance_ratio(self) -> float:
        return self.attention_mass / max(self.n_tokens / self.context_tokens, 1e-30)


@dataclass(frozen=True)
class Option:
    tier: str
    fmt: str
    ecc_high: str
    ecc_low: str
    refresh_high_ms: float
    refresh_low_ms: float

    @property
    def label(self) -> str:
        return (
            f"{self.tier}/{self.fmt}/ecc:{self.ecc_high}+{self.ecc_low}/"
            f"ref:{self.refresh_high_ms:g}+{self.refresh_low_ms:g}ms"
        )


def enumerate_options(tiers: Sequence[TierSpec], formats: Sequence[str]) -> list[Option]:
    """Every (tier, format, full or high-only ECC, refresh of low fields / of all fields) combination
    (an on-die code, e.g. hbm3_ondie, covers every field: no high-only variant)."""
    opts = []
    for t in tiers:
        for fmt in formats:
            for e in t.ecc_options:
                # high-only protection, unless the code is on-die (mandatory on every bit: HBM3)
                eccs = [(e, e)] + ([(e, "none")] if e != "none" and not _ecc.get_scheme(e).hidden else [])
                refs = [(JEDEC_REFRESH_MS, JEDEC_REFRESH_MS)]
                for r in t.refresh_options_ms:
                    if r > JEDEC_REFRESH_MS:
                        refs += [(JEDEC_REFRESH_MS, r), (r, r)]
                for eh, el in eccs:
                    for rh, rl in refs:
                        opts.append(Option(t.name, fmt, eh, el, float(rh), float(rl)))
    return opts


@dataclass
class OptionTable:
    """Block-independent per-option quantities (per KV element)."""

    options: list
    tier_idx: np.ndarray
    eps_q: np.ndarray
    sk: np.ndarray  # sum_f bits_f s_f sK_f / 2 (per element)
    sv: np.ndarray
    silent_bits: np.ndarray  # silent data-bit flips per element
    due_frac: np.ndarray  # probability a data bit lies in a DUE unit
    due_units_per_element: np.ndarray  # expected DUE units per element (for P_drop)
    stored_bytes: np.ndarray  # visible bytes per element (capacity)
    time_s: np.ndarray  # read time per element per read
    energy_j: np.ndarray  # dynamic energy per element per read
    refresh_w: np.ndarray  # refresh power per element


def option_table(
    options: list[Option], tiers: Sequence[TierSpec], residency_s: float, group: int = 32, due_policy: str = "recompute"
) -> OptionTable:
    tiers_by = {t.name: t for t in tiers}
    names = [t.name for t in tiers]
    n = len(options)
    cols = {k: np.zeros(n) for k in ("eps_q", "sk", "sv", "silent", "due", "pdrop", "bytes", "time", "energy", "ref")}
    for i, o in enumerate(options):
        t = tiers_by[o.tier]
        fbits = acc.field_bits(o.fmt, group)
        sk, sv = acc.field_sensitivity(o.fmt, "k", group), acc.field_sensitivity(o.fmt, "v", group)
        cols["eps_q"][i] = acc.quant_error(o.fmt, group)
        bits_total = sum(fbits.values())
        for fields, ecc_name, ref_ms in ((HIGH, o.ecc_high, o.refresh_high_ms), (LOW, o.ecc_low, o.refresh_low_ms)):
            gbits = sum(b for f, b in fbits.items() if f in fields)
            if gbits == 0:
                continue
            s = _ecc.get_scheme(ecc_name)
            p = t.errors.p_bit(residency_s, ref_ms, t.temp_c) + t.errors.fault_flips(1.0, residency_s)
            out = s.outcome(min(p, 1.0))
            for f, b in fbits.items():
                if f in fields:
                    cols["sk"][i] += b * out.silent_bits_per_data_bit * sk.get(f, 0.0) / 2
                    cols["sv"][i] += b * out.silent_bits_per_data_bit * sv.get(f, 0.0) / 2
            cols["silent"][i] += gbits * out.silent_bits_per_data_bit
            cols["due"][i] += gbits / bits_total * out.due_fraction
            cols["pdrop"][i] += gbits * out.due_fraction / s.group_data_bits
            byt = gbits / 8.0
            cols["bytes"][i] += byt * (1 + s.visible_overhead)
            cols["time"][i] += byt * (1 + s.bandwidth_overhead) * t.read_s_per_byte
            cols["energy"][i] += byt * ((1 + s.storage_overhead) * t.read_j_per_byte + s.energy_pj_per_byte * 1e-12)
            cols["ref"][i] += (
                byt * (1 + s.storage_overhead) * t.refresh_w_per_byte * refresh_power_scale(ref_ms, t.temp_c)
            )
        if due_policy == "recompute":  # refetch what was detected uncorrectable
            cols["time"][i] += cols["due"][i] * bits_total / 8 * t.read_s_per_byte
            cols["energy"][i] += cols["due"][i] * bits_total / 8 * t.read_j_per_byte
    return OptionTable(
        options,
        np.array([names.index(o.tier) for o in options]),
        cols["eps_q"],
        cols["sk"],
        cols["sv"],
        cols["silent"],
        cols["due"],
        cols["pdrop"],
        cols["bytes"],
        cols["time"],
        cols["energy"],
        cols["ref"],
    )


@dataclass
class Plan:
    blocks: list
    options: list  # chosen Option per block
    choice: np.ndarray  # option index per block
    eps: float  # accuracy proxy (bound on mean relative attention error)
    budget: float
    feasible: bool
    latency_s: float
    energy_j: float
    refresh_w: float
    objective: float
    tier_bytes: dict
    silent_errors_per_token: float
    detected_errors_per_token: float
    migrations: int = 0
    eps_quant: float = 0.0  # quantization part of eps (unweighted)
    eps_bit: float = 0.0  # silent bit-error (+ dropped-token) part of eps (unweighted)

    def summary(self) -> dict:
        return {
            "eps": self.eps,
            "budget": self.budget,
            "slo_met": self.feasible,
            "latency_s": self.latency_s,
            "energy_j": self.energy_j,
            "refresh_w": self.refresh_w,
            "objective": self.objective,
            "tier_bytes": self.tier_bytes,
            "silent_errors_per_token": self.silent_errors_per_token,
            "detected_errors_per_token": self.detected_errors_per_token,
            "migrations": self.migrations,
            "eps_quant": self.eps_quant,
            "eps_bit": self.eps_bit,
        }


class Planner:
    def __init__(
        self,
        tiers: Sequence[TierSpec],
        formats: Sequence[str] = ("bf16", "fp8_e4m3", "int8", "int4"),
        budget: float = 0.05,
        objective: str = "latency_x_energy",
        residency_s: float = 1.0,
        group: int = 32,
        due_policy: str = "recompute",
        options: list[Option] | None = None,
        error_weights: tuple = (1.0, 1.0),
    ):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        for f in formats:
            if f not in FORMAT_BITS:
                raise ValueError(f"unknown KV format {f!r}")
        self.tiers = list(tiers)
        self.budget, self.objective, self.due_policy = float(budget), objective, due_policy
        w = tuple(float(x) for x in error_weights)
        if len(w) != 2 or not all(np.isfinite(x) and x >= 0 for x in w) or not any(w):
            raise ValueError(f"error_weights must be two finite weights >= 0, not both 0, got {error_weights!r}")
        self.error_weights = w
        self.options = options if options is not None else enumerate_options(self.tiers, formats)
        self.group = group
        self.table = option_table(self.options, self.tiers, residency_s, group, due_policy)
        self.cap = np.array([t.capacity_bytes for t in self.tiers], dtype=float)

    # ------------------------------------------------------------ matrices (blocks x options)
    def _matrices(self, blocks):
        tb = self.table
        N = np.array([b.n_elements for b in blocks], float)[:, None]
        reads = np.array([b.reads_per_step for b in blocks], float)[:, None]
        H_total = float(sum({(b.layer, b.head_group): b.n_heads for b in blocks}.values()))
        hm = np.array([b.n_heads * b.attention_mass for b in blocks], float)[:, None]
        r = np.array([b.importance_ratio for b in blocks], float)[:, None]
        tok_elems = np.array([b.head_dim * 2 for b in blocks], float)[:, None]  # K+V elements of one token/head
        eps_q = hm * tb.eps_q[None] / H_total
        eps_b = N * (np.maximum(r, 1.0) * tb.sk[None] + r * tb.sv[None])
        if self.due_policy == "drop":
            p_drop = np.minimum(1.0, tok_elems * tb.due_units_per_element[None])
            eps_b = eps_b + hm * p_drop
        eps_b = eps_b / H_total
        wq, wb = self.error_weights
        eps = eps_q + eps_b if (wq, wb) == (1.0, 1.0) else wq * eps_q + wb * eps_b
        return {
            "eps": eps,
            "eps_q": eps_q,
            "eps_b": eps_b,
            "time": N * reads * tb.time_s[None],
            "energy": N * reads * tb.energy_j[None],
            "ref": N * tb.refresh_w[None],
            "bytes": N * tb.stored_bytes[None],
            "silent": N * tb.silent_bits[None],
            "due": N * tb.due_frac[None],
        }

    def _obj(self, T, E, P):
        if self.objective == "latency":
            return T
        if self.objective == "energy":
            return E + P * T
        return T * (E + P * T)

    # ------------------------------------------------------------ solver
    def _solve(self, blocks, choice, max_iter=None):
        M = self._matrices(blocks)
        B, O = M["eps"].shape
        rows = np.arange(B)
        tier_of = self.table.tier_idx
        max_iter = max_iter or 50 * B + 100
        for phase in ("repair", "improve"):
            for _ in range(max_iter):
                cur = choice
                T, E, P = (M[k][rows, cur].sum() for k in ("time", "energy", "ref"))
                eps = M["eps"][rows, cur].sum()
                use = np.bincount(tier_of[cur], weights=M["bytes"][rows, cur], minlength=len(self.tiers))
                obj = self._obj(T, E, P)
                dT = M["time"] - M["time"][rows, cur][:, None]
                dE = M["energy"] - M["energy"][rows, cur][:, None]
                dP = M["ref"] - M["ref"][rows, cur][:, None]
                dobj = self._obj(T + dT, E + dE, P + dP) - obj
                deps = M["eps"] - M["eps"][rows, cur][:, None]
                same = tier_of[None, :] == tier_of[cur][:, None]
                room = (
                    self.cap[tier_of][None, :]
                    - use[tier_of][None, :]
                    + np.where(same, M["bytes"][rows, cur][:, None], 0.0)
                )
                ok_cap = M["bytes"] <= room * (1 + 1e-12)
                if phase == "repair":
                    if eps <= self.budget:
                        break
                    cand = ok_cap & (deps < 0)
                    score = np.where(cand, -deps / np.maximum(dobj, 1e-30 * max(abs(obj), 1e-300)), -np.inf)
                else:
                    tol = 1e-12 * max(abs(obj), 1e-300)
                    cand = ok_cap & (dobj < -tol) & (eps + deps <= self.budget)
                    score = np.where(cand, -dobj / np.maximum(deps, 1e-30), -np.inf)
                if not cand.any():
                    break
                b, o = np.unravel_index(np.argmax(score), score.shape)
                choice = choice.copy()
                choice[b] = o
        return choice, M

    def _initial(self, blocks):
        """Most accurate option per block that still fits, most important blocks first."""
        M = self._matrices(blocks)
        B = len(blocks)
        use = np.zeros(len(self.tiers))
        choice = np.zeros(B, dtype=np.int64)
        order = np.argsort([-(b.importance_ratio) for b in blocks], kind="stable")
        for b in order:
            key = np.lexsort((M["time"][b] * M["energy"][b], M["eps"][b]))
            for o in key:
                t = self.table.tier_idx[o]
                if use[t] + M["bytes"][b, o] <= self.cap[t] * (1 + 1e-12):
                    choice[b] = o
                    use[t] += M["bytes"][b, o]
                    break
            else:
                raise ValueError("the KV blocks do not fit the tier capacities in any format")
        return choice

    def _finish(self, blocks, choice, M, migrations=0) -> Plan:
        rows = np.arange(len(blocks))
        T, E, P = (float(M[k][rows, choice].sum()) for k in ("time", "energy", "ref"))
        eps = float(M["eps"][rows, choice].sum())
        use = np.bincount(self.table.tier_idx[choice], weights=M["bytes"][rows, choice], minlength=len(self.tiers))
        return Plan(
            list(blocks),
            [self.options[i] for i in choice],
            choice,
            eps,
            self.budget,
            eps <= self.budget * (1 + 1e-9),
            T,
            E + P * T,
            P,
            self._obj(T, E, P),
            {t.name: float(u) for t, u in zip(self.tiers, use)},
            float(M["silent"][rows, choice].sum()),
            float(M["due"][rows, choice].sum()),
            migrations,
            float(M["eps_q"][rows, choice].sum()),
            float(M["eps_b"][rows, choice].sum()),
        )

    def plan(self, blocks: Sequence[KVBlock]) -> Plan:
        blocks = list(blocks)
        choice, M = self._solve(blocks, self._initial(blocks))
        return self._finish(blocks, choice, M)

    def replan(self, blocks: Sequence[KVBlock], previous: Plan) -> Plan:
        """Re-solve for new importance (same blocks, new masses), starting from ``previous``."""
        blocks = list(blocks)
        if len(blocks) != len(previous.blocks):
            raise ValueError("replan needs the same blocks as the previous plan")
        choice, M = self._solve(blocks, previous.choice.copy())
        return self._finish(blocks, choice, M, int(np.sum(choice != previous.choice)))


def uniform_blocks(
    n_layers: int,
    n_head_groups: int,
    heads_per_group: int,
    head_dim: int,
    context_tokens: int,
    block_tokens: int,
    n_sinks: int = 4,
    sink_mass: float = 0.3,
    recent_tokens: int = 256,
    recent_mass: float = 0.3,
) -> list[KVBlock]:
    """Blocks of ``block_tokens`` with a sink / recent / normal importance profile.

    The first ``n_sinks`` tokens hold ``sink_mass`` of the attention (attention sinks), the
    last ``recent_tokens`` hold ``recent_mass`` (locality), the rest is spread evenly.
    """
    blocks = []
    mid_tokens = max(context_tokens - n_sinks - recent_tokens, 1)
    for layer in range(n_layers):
        for g in range(n_head_groups):
            for s in range(0, context_tokens, block_tokens):
                e = min(s + block_tokens, context_tokens)
                sinks = max(0, min(e, n_sinks) - s)
                recent = max(0, e - max(s, context_tokens - recent_tokens))
                mid = (e - s) - sinks - recent
                mass = (
                    sinks / n_sinks * sink_mass
                    + recent / recent_tokens * recent_mass
                    + mid / mid_tokens * (1 - sink_mass - recent_mass)
                )
                cls = "sink" if sinks else ("recent" if recent else "normal")
                blocks.append(KVBlock(layer, g, s, e, heads_per_group, head_dim, context_tokens, mass, cls))
    return blocks
