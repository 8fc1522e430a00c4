"""Iteration costing: a mixed batch (decodes + prefill chunks) timed by the device models.

Each iteration becomes one OpTrace (workloads/trace.build_trace with per-request
``context_lens`` and ``query_tokens``: a decode is q = 1 with its context, a prefill chunk is
q = chunk with context = tokens done + chunk), placed by the system's mapper policy and costed
by ``engine.cost_step`` -- the same path as ``attnsim run`` (with the system's software-stack host time per
iteration, hwmodels/stack.py). A batch of decodes alone uses phase
``decode``; a batch with prefill chunks uses phase ``prefill`` (lm_head on one row per request).

Memo (so repeated shapes are not re-simulated). An iteration is described by three numbers,
each placed on a grid and linearly interpolated between its two neighbouring grid points:

* n, the number of decodes: exact by default; with ``batch_relative_bucket`` r > 0 geometric
  above 1 / r (step = 2^floor(log2 n) x r). Off by default: mixed batches put the mean query
  tokens per request (which depends on n) into the attention rows, so interpolating in n errs
  by ~2-3 % on TTFT (measured), against ~1.5x fewer memo entries;
* m, the mean decode context (tokens read): step ``context_bucket``, geometric above
  context_bucket / relative_bucket (8 points per octave by default). A batch of n decodes with contexts summing to n m
  is costed as n decodes of context g at the grid points g: for every trace row of a decode batch
  without sliding-window layers, FLOPs and bytes depend on the contexts only through their sum,
  so equal contexts represent unequal ones exactly (sliding-window layers read min(c, window)
  per request: exact only while contexts stay below the window);
* q, the length of the largest prefill chunk: step ``token_bucket`` (uniform: a geometric grid
  here spans whole GEMM tiles and biased TTFT by ~2 %, measured). The
  tokens already done d of each chunk are rounded to the nearest grid point, the length of
  any further chunk to the nearest multiple of ``token_bucket``.

Up to 2 x 2 x 2 memo points are combined per iteration. Interpolation is exact where the step
cost is linear in the interpolated quantity (memory-bound decode attention is linear in m) and
otherwise errs by the curvature over one grid interval, or by one tile/wave-quantisation step
of a device model when an interval straddles such a step. ``tests/test_serve_costing.py``
measures it against exact costing: pure decode batches within 1e-9 in m, single iterations
with median error < 0.2 % and worst < 5 %, and whole runs' mean TTFT/TPOT/latency within 1 %
(measured 0.5 % TTFT, 0.1 % TPOT; Llama-3-8B on one H100). Setting ``context_bucket = token_bucket = 1`` and
``relative_bucket = 0`` makes the memo exact (every distinct shape simulated).

Speculative decoding (a scenario's ``speculative:``, workloads/speculative.py): a decode of the
iteration is a target verification of gamma + 1 query tokens (context + gamma) plus gamma draft decode
passes (the draft model's own coster, same grid: its iterations x gamma), and each prefill chunk is
prefilled by the draft too. The draft's weights share the memory (kv_capacity_per_rank_bytes).

Beam search (a scenario's ``beam_width`` B > 1, scheduler.py): with ``beam_prompt_reads: per_beam`` (default)
a decoding request is B decodes of its context (every beam reads the whole context, the shared prompt
included: TensorRT-LLM's masked MHA kernel, one thread block per beam); with ``once`` it is B query rows (one
per beam, lm_head on each) over one context of prompt + B x generated tokens: the prompt's KV is read once per
step for all B beams, each beam's own tokens once, as TensorRT-LLM's XQA kernel does for MQA/GQA models
(cpp/kernels/xqa/mha.cu: ``nbValidRows = headGrpSize * beamWidth``, a request's beam rows share one CTA's
K/V tile loads). There attention FLOPs count each row over the whole context (B - 1 x generated tokens per
row too many: < 1 % for MLPerf gpt-j's ~800-token prompts and <= 128 outputs).
"""

from __future__ import annotations

import math

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.hwmodels.stack import add_step_overhead, sampler_cost
from attnsim.mapper.base import CapacityError, get_policy
from attnsim.sim.engine import StepResult, cost_step
from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes


class IterationCoster:
    """Memoised cost of iterations on one system (one replica)."""

    def __init__(
        self,
        system,
        model,
        scenario,
        context_bucket: int = 32,
        token_bucket: int = 16,
        relative_bucket: float = 0.125,
        batch_relative_bucket: float = 0.0,
    ):
        self.system, self.model, self.sc = system, model, scenario
        spec = system.spec
        self.tp = spec.parallelism.tp
        self.policy = get_policy(spec.mapper.policy)
        self.options = spec.mapper.options
        self.cb, self.tb, self.rel = int(context_bucket), int(token_bucket), float(relative_bucket)
        self.batch_rel = float(batch_relative_bucket)
        self.weights = weight_bytes(model, scenario.weight_dtype)
        self.layout = None
        if spec.parallelism.pp > 1:  # attnsim.sim.pipeline: an iteration's requests split into micro-batches
            from attnsim.sim.pipeline import layout_of

            self.layout = layout_of(spec, model)
        self.memo: dict = {}
        self.usage: dict = {}
        self.lookups = 0
        self.spec = getattr(scenario, "speculative", None)
        self.role, self.draft = ("target" if self.spec is not None else None), None
        if self.spec is not None:  # the draft model's iterations, on the same system and grid
            from attnsim.workloads.speculative import load_draft

            if self.layout is not None:
                raise ConfigError("speculative decoding is served with pp = 1 only", key="parallelism.pp")
            self.draft = IterationCoster(
                system,
                load_draft(self.spec),
                scenario.model_copy(update={"speculative": None}),
                context_bucket,
                token_bucket,
                relative_bucket,
                batch_relative_bucket,
            )
            self.draft.role = "draft"

    # ------------------------------------------------------------ exact path
    def model_bytes(self, ctx) -> dict:
        return {
            "weights": self.weights,
            "kv": kv_cache_bytes(self.model, self.sc, ctx),
            "kv_per_rank": kv_cache_bytes(self.model, self.sc, ctx, tp=self.tp),
        }

    def place(self, trace, ctx):
        if self.role is not None:  # a speculative target / draft step (mapper/ianus.py draft_placement)
            trace.meta["speculative"] = self.role
        return self.policy(trace, self.system, self.model_bytes(ctx), self.options)

    def exact(self, context_lens, query_tokens, phase: str | None = None) -> StepResult:
        """Cost one iteration with exact per-request contexts and query tokens (phase: decode when
        every q is 1, else prefill, unless given: a speculative verification is a decode of q tokens)."""
        c = np.asarray(context_lens, dtype=np.int64)
        q = np.asarray(query_tokens, dtype=np.int64)
        phase = phase or ("decode" if np.all(q == 1) else "prefill")
        if self.layout is not None:  # pipeline parallelism: the iteration's micro-batches through the stages
            from attnsim.sim.pipeline import pipeline_step

            def place(cm, qm, subbatch_of=None, channels=None):
                ph = "decode" if np.all(qm == 1) else "prefill"
                sc = self.sc.model_copy(update={"batch_size": len(cm)})
                tr = build_trace(
                    self.model, sc, ph, tp=self.tp, context_lens=cm, query_tokens=qm, sampler=sampler_cost(self.system)
                )
                if subbatch_of is not None:
                    tr.meta["subbatch_of"] = subbatch_of
                if channels is not None:  # the channels the whole batch's requests were placed on
                    tr.meta["channel_assignment"] = [int(c) for c in channels]
                return self.place(tr, c)

            step = pipeline_step(
                self.system, self.model, self.layout, c, q, place, lambda plan: cost_step(plan, self.system)
            ).result
            return add_step_overhead(step, self.system, len(c))
        tr = build_trace(
            self.model, self.sc, phase, tp=self.tp, context_lens=c, query_tokens=q, sampler=sampler_cost(self.system)
        )
        return add_step_overhead(cost_step(self.place(tr, c), self.system), self.system, len(c))

    # ------------------------------------------------------------ memo path
    def _point(self, n_dec: int, g: int, pre: tuple) -> StepResult:
        key = (n_dec, g, pre)
        r = self.memo.get(key)
        if r is None:
            gam = self.spec.draft_tokens if self.role == "target" else 0  # verification: gamma + 1 tokens
            # beam search: the B beams of a request are B query rows over one context g = prompt + B x generated
            # (each beam's new token included; scheduler.beam_tokens), so the prompt's KV is read once per step
            q_dec = self.sc.beam_width if self.sc.beam_prompt_reads == "once" else 1 + gam
            c = [g + gam] * n_dec + [q + d for q, d in pre]
            qq = [q_dec] * n_dec + [q for q, _ in pre]
            r = self.exact(c, qq, "decode" if q_dec > 1 and not pre else None)
            self.memo[key] = r
        return r

    def _axis(self, x: float, step: int, rel: float | None = None) -> list:
        """Grid points around x with linear-interpolation weights. Spacing: ``step`` below
        step / rel, else the power of two below x times ``rel`` (a geometric grid)."""
        rel = self.rel if rel is None else rel
        if rel > 0 and x >= step / rel:
            step = max(step, int(2 ** math.floor(math.log2(x)) * rel))
        lo = int(math.floor(x / step)) * step
        if x == lo or (lo == 0 and x <= 1):
            return [(max(lo, 1), 1.0)]
        lo1 = max(lo, 1)
        f = (x - lo1) / (lo + step - lo1)
        return [(lo1, 1.0 - f), (lo + step, f)]

    def cost(self, dec_ctx_sum: int, n_dec: int, pre_q=(), pre_done=(), scale: float = 1.0) -> tuple[float, float]:
        """(time_s, energy_j) of an iteration: ``n_dec`` decodes whose contexts (tokens read)
        sum to ``dec_ctx_sum``, plus prefill chunks ``pre_q`` after ``pre_done`` tokens each (x ``scale``:
        repeated passes). Speculative: + the draft's gamma decode passes and its prefill chunks."""
        t = e = 0.0
        if self.draft is not None:
            if n_dec:
                td, ed = self.draft.cost(dec_ctx_sum, n_dec, scale=scale * self.spec.draft_tokens)
                t, e = t + td, e + ed
            if len(pre_q):
                td, ed = self.draft.cost(0, 0, pre_q, pre_done, scale=scale)
                t, e = t + td, e + ed
        self.lookups += 1
        # the largest prefill chunk is interpolated in its length; any others are rounded
        parts = sorted(zip((int(q) for q in pre_q), (int(d) for d in pre_done)), reverse=True)
        q_axis = [((), 1.0)]
        if parts:
            q, d = parts[0]
            d = self._round(d, self.cb)
            rest = tuple(
                (qq if qq <= self.tb else int(round(qq / self.tb)) * self.tb, self._round(dd, self.cb))
                for qq, dd in parts[1:]
            )
            q_axis = [(((qq, d),) + rest, w) for qq, w in self._axis(q, self.tb, 0.0)]
        if n_dec == 0:
            nd_axis = [(0, 1.0)]
            g_axis = [(0, 1.0)]
        else:
            nd_axis = self._axis(n_dec, 1, self.batch_rel)
            g_axis = self._axis(dec_ctx_sum / n_dec, self.cb)
        for nd, wn in nd_axis:
            for g, wg in g_axis:
                for pre, wq in q_axis:
                    w = wn * wg * wq * scale
                    if w == 0.0:
                        continue
                    key = (nd, g, tuple(sorted(pre)))
                    r = self._point(*key)
                    self._use(key, w)
                    t += w * r.time_s
                    e += w * r.energy_j
        return t, e

    def _round(self, x: int, step: int, minimum: int = 0) -> int:
        """Nearest grid point (the grid of :meth:`_axis`)."""
        pts = self._axis(x, step) if x > 0 else [(0, 1.0)]
        p = pts[0][0] if pts[0][1] >= 0.5 else pts[-1][0]
        return max(minimum, p)

    def _use(self, key, w: float) -> None:
        self.usage[key] = self.usage.get(key, 0.0) + w

    def total(self) -> StepResult:
        """Sum of every costed iteration (weights of the interpolation included), for breakdowns."""
        out = StepResult()
        for k, w in self.usage.items():
            out.scaled_add(self.memo[k], w)
        if self.draft is not None:  # the draft's ops under their own names
            from attnsim.sim.speculative import prefixed

            out.scaled_add(prefixed(self.draft.total(), "draft."), 1.0)
        return out

    # ------------------------------------------------------------ capacity
    def kv_capacity_per_rank_bytes(self, memory_fraction: float) -> tuple[float, str]:
        """KV bytes one TP rank may hold: the placed plan's free memory after weights.

        The policy is asked to place a probe KV; for each memory placement holding KV, its
        share of the probe and its free bytes (capacity x memory_fraction - weights) give how
        much KV it allows; the smallest bound wins. Assumes placements scale linearly with KV."""
        probe = 1e9
        tr = build_trace(self.model, self.sc, "decode", tp=self.tp, context_lens=[1])
        mb = {"weights": self.weights, "kv": probe * self.tp, "kv_per_rank": probe}
        plan = self.policy(tr, self.system, mb, self.options)
        best, where = math.inf, ""
        placements = plan.memory
        if self.layout is not None:  # per pipeline device group: its layers' weights and share of the KV
            from attnsim.sim.pipeline import stage_memory

            placements = [
                mp
                for group in stage_memory(plan.memory, self.system, self.model, self.layout, [1]).per_group
                for mp in group
            ]
        for mp in placements:
            if mp.kv_bytes <= 0:
                continue
            share = mp.kv_bytes / probe
            free = mp.capacity_bytes * memory_fraction - mp.weights_bytes
            if self.draft is not None:  # the draft's weights beside the target's, its KV per token too
                free -= self.draft.weights / self.tp
                share *= 1.0 + kv_cache_bytes(self.draft.model, self.sc, 1) / kv_cache_bytes(self.model, self.sc, 1)
            if free <= 0:
                raise CapacityError(
                    f"{mp.role}: weights {mp.weights_bytes / 1e9:.1f} GB per device leave no room "
                    f"for KV in {memory_fraction:g} x {mp.capacity_bytes / 1e9:.1f} GB"
                )
            if free / share < best:
                best, where = free / share, mp.role
        if not math.isfinite(best):
            raise ConfigError(f"mapper policy {plan.policy!r} places no KV in memory; cannot size the KV cache")
        return best, where
