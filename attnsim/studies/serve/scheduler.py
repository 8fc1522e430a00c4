"""Iteration-level continuous batching (Orca / vLLM style) on one pool of one system.

Each iteration, in this order (vLLM's scheduler order):

1. running requests, oldest admission first: a decoding request schedules one token and needs
   KV blocks for it; a request still in (chunked) prefill schedules its next chunk. When blocks
   run out: unreferenced prefix-cache entries are evicted, then the most recently admitted
   running request is preempted (``recompute``: its KV is dropped and it re-enters the queue
   front, later re-prefilling prompt + generated tokens; ``swap``: its blocks are copied to host
   memory over ``swap_link``, time and energy counted in the iteration, and copied back before
   any new request is admitted);
2. swapped requests come back while blocks allow;
3. waiting requests are admitted first-come-first-served while the batch (``max_batch``), the token
   budget (``max_tokens_per_iter``) and the free blocks allow; a request needs blocks for its whole
   prompt at admission (minus a prefix-cache hit); the head of the queue blocks the rest.
   Without chunked prefill a prompt is scheduled whole (a prompt over the budget only alone).

The iteration is then costed (costing.IterationCoster) and every scheduled token advances:
a finished prefill emits the first token (TTFT), a decode emits one token; a request finishes
when it has emitted ``output_tokens`` tokens. Token t of a request's decode phase attends to
prompt + t tokens, as in ``attnsim run``. Iteration energy is split among the iteration's
requests in proportion to the tokens each processed. While no request is present the system idles
(static power only; counted in the pool's energy, not in any request's).

Speculative decoding (a scenario's ``speculative:``): a decode verifies gamma + 1 tokens (KV blocks and
token budget for all of them, costing in costing.py) and emits the expected accepted tokens E per
iteration as whole tokens (its k-th decode emits floor(k E) - floor((k - 1) E): deterministic, mean E).

Beam search (a scenario's ``beam_width`` B > 1; TensorRT-LLM and vLLM offer it, MLPerf gpt-j runs B = 4): a
request's prompt is prefilled once and its KV is shared by the B beams; every decode step then runs B sequences
of the request, each reading the shared prompt KV plus its own generated tokens' KV and writing one token
(TensorRT-LLM cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp: a request's context blocks are allocated
``shareAmongBeams``, its generation blocks one per beam). So a decoding request holds prompt + B x (context -
prompt) tokens of KV, takes B tokens of the iteration's token budget and is costed as B decodes of its
context (``beam_prompt_reads: per_beam``) or as B query rows over its KV, the shared prompt read once per step
(``once``; costing.py); it counts once against ``max_batch`` (TensorRT-LLM's max_batch_size counts requests,
each with its beams) and returns one sequence of ``output_tokens`` tokens. Refused with speculative decoding
and with a KV policy other than ``none`` (attnsim.studies.serve.run).

Modes: ``colocated`` (prefill + decode), ``prefill`` (a request leaves after its prefill: the
prefill pool of a disaggregated system) and ``decode`` (requests arrive with their prompt KV
computed elsewhere and one token emitted).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.studies.serve.kvpolicy import KVPolicy
from attnsim.studies.serve.paging import BlockAllocator
from attnsim.studies.serve.prefix import PrefixCache
from attnsim.workloads.trace import kv_bytes_per_token_per_layer


class ServeError(ConfigError):
    """A trace that cannot be served on a pool (the message says why)."""


@dataclass
class PoolResult:
    """Per-request arrays (NaN where not reached) and pool totals."""

    first_token_s: np.ndarray
    finish_s: np.ndarray
    prefill_done_s: np.ndarray
    last_prefill_iter_s: np.ndarray
    admit_s: np.ndarray
    energy_j: np.ndarray
    preemptions: np.ndarray
    prefix_hit_tokens: np.ndarray
    iterations: int = 0
    busy_s: float = 0.0
    idle_s: float = 0.0
    busy_energy_j: float = 0.0
    idle_energy_j: float = 0.0
    swap_energy_j: float = 0.0
    in_system_area: float = 0.0  # integral of (requests in system) dt, sampled at iteration starts
    end_s: float = 0.0
    stats: dict = field(default_factory=dict)


class Pool:
    """A system serving one model: costing, KV capacity (in blocks) and the KV policies."""

    def __init__(self, system, model, scenario, serving, coster, swap_link=None, name: str | None = None):
        self.system, self.model, self.sc, self.serving = system, model, scenario, serving
        self.name = name or system.name
        self.coster = coster
        self.swap_link = swap_link
        self.tp = system.spec.parallelism.tp
        self.sched = serving.scheduler
        kv = serving.kv
        self.kvpol = KVPolicy(kv.policy, model.num_layers)
        # KV bytes of one token on one rank, all layers (sliding-window layers counted in full:
        # blocks are not freed when tokens leave a window; conservative)
        self.token_bytes = kv_bytes_per_token_per_layer(model, scenario.kv_dtype, self.tp) * model.num_layers
        self.block_tokens = kv.block_tokens
        self.block_bytes = self.token_bytes * kv.block_tokens
        cap, self.kv_role = coster.kv_capacity_per_rank_bytes(self.sched.memory_fraction)
        self.kv_capacity_bytes = cap
        self.total_blocks = int(cap // self.block_bytes)

    def describe(self) -> dict:
        return {
            "kv_capacity_gb_per_rank": self.kv_capacity_bytes / 1e9,
            "kv_role": self.kv_role,
            "kv_blocks": self.total_blocks,
            "block_tokens": self.block_tokens,
            "kv_bytes_per_token_per_rank": self.token_bytes,
        }


def beam_tokens(ctx, prompt, beams: int):
    """KV tokens a request of ``beams`` beams holds at context ``ctx``: the prompt's once (shared by the beams),
    each generated token once per beam (TensorRT-LLM kvCacheManager.cpp: context blocks ``shareAmongBeams``)."""
    ctx = np.asarray(ctx, dtype=np.int64)
    prompt = np.asarray(prompt, dtype=np.int64)
    return ctx + (beams - 1) * np.maximum(ctx - prompt, 0)


def _check_servable(pool: Pool, prompt, output, reserve, mode: str, labels) -> None:
    kvp = pool.kvpol
    beams = pool.sc.beam_width
    need_tokens = kvp.max_retained(prompt, output) if mode != "prefill" else kvp.retained_tokens(prompt, prompt)
    if mode != "prefill":
        need_tokens = beam_tokens(need_tokens, prompt, beams)
    if reserve is not None:
        need_tokens = np.maximum(need_tokens, prompt + beams * reserve)
    need = -(-need_tokens // pool.block_tokens)
    bad = np.nonzero(need > pool.total_blocks)[0]
    if len(bad):
        i = int(bad[0])
        raise ServeError(
            f"request {labels[i]} (prompt {int(prompt[i])} + output {int(output[i])} tokens) needs {int(need[i])} KV "
            f"blocks of {pool.block_tokens} tokens ({need[i] * pool.block_bytes / 1e9:.2f} GB per rank) but "
            f"{pool.name} holds only {pool.total_blocks} blocks ({pool.kv_capacity_bytes / 1e9:.2f} GB per rank on "
            f"{pool.kv_role} after weights); {len(bad)} request(s) cannot be served",
            key="serving.trace",
        )
    if not pool.sched.chunked_prefill:
        big = np.nonzero(prompt > pool.sched.max_tokens_per_iter)[0]
        if len(big) and mode != "decode":
            i = int(big[0])
            raise ServeError(
                f"request {labels[i]}: prompt of {int(prompt[i])} tokens exceeds "
                f"max_tokens_per_iter {pool.sched.max_tokens_per_iter} without chunked prefill",
                key="serving.scheduler.max_tokens_per_iter",
            )


def simulate_pool(
    pool: Pool,
    arrival_s,
    prompt,
    output,
    prefix_id=None,
    prefix_tokens=None,
    mode: str = "colocated",
    labels=None,
    remote=None,
) -> PoolResult:
    """Serve requests (sorted by ``arrival_s``) on ``pool``; see the module docstring. ``remote``: a
    shared KV pool (hwmodels/kv_pool.SharedPrefixPool) consulted on a local prefix miss: a hit skips the
    prefill of the pooled tokens, but the request's prefill waits for the lookup + transfer."""
    arrival = np.asarray(arrival_s, dtype=np.float64)
    stack = getattr(pool.system, "stack", None)
    if stack is not None and stack.request_us and mode != "decode":  # hwmodels/stack.py: tokenize + front end
        arrival = arrival + stack.request_us * 1e-6  # before entering the engine (TTFT from the true arrival)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    n = len(arrival)
    if n and np.any(np.diff(arrival) < 0):
        raise ValueError("arrivals must be sorted")
    pid = np.full(n, -1, np.int64) if prefix_id is None else np.asarray(prefix_id, dtype=np.int64)
    ptok = np.zeros(n, np.int64) if prefix_tokens is None else np.asarray(prefix_tokens, dtype=np.int64)
    labels = np.arange(n) if labels is None else labels
    sched = pool.sched
    kvs = pool.serving.kv
    reserve = None
    if kvs.layout == "contiguous":
        reserve = np.full(n, kvs.reserve_tokens if kvs.reserve_tokens else int(output.max(initial=1)), np.int64)
    # speculative decoding (workloads/speculative.py): a decode verifies gamma + 1 tokens (KV and token
    # budget for all of them) and advances by the expected accepted tokens E per iteration, as whole
    # tokens: its k-th decode emits floor(k E) - floor((k - 1) E) (deterministic; mean E)
    spec = getattr(pool.coster, "spec", None)
    gamma = spec.draft_tokens if spec is not None else 0
    e_tok = 1.0
    if spec is not None:
        from attnsim.workloads.speculative import expected_tokens

        e_tok = expected_tokens(gamma, spec.acceptance_rate)
    credit = np.zeros(n)  # expected accepted tokens so far (speculative)
    beams = pool.sc.beam_width  # beam search: sequences per decoding request (module docstring)
    reads_once = pool.sc.beam_prompt_reads == "once"
    per_dec = beams * (1 + gamma)  # tokens a decoding request puts through the iteration
    _check_servable(pool, prompt, output + gamma, reserve, mode, labels)

    kvp = pool.kvpol
    bt = pool.block_tokens
    alloc = BlockAllocator(pool.total_blocks, bt)
    pcache = PrefixCache(alloc, enabled=kvs.prefix_caching)
    coster = pool.coster
    static_w = pool.system.static_power_w() / max(1, pool.system.spec.parallelism.replicas)

    target = prompt.copy()  # tokens to prefill before the next token is emitted
    computed = np.zeros(n, np.int64)  # tokens whose KV exists
    generated = np.zeros(n, np.int64)  # tokens emitted
    if mode == "decode":
        computed[:] = prompt
        generated[:] = 1
    nblocks = np.zeros(n, np.int64)  # own blocks held (prefix-cache blocks excluded)
    blocks: list[list] = [[] for _ in range(n)]
    shared = np.zeros(n, np.int64)  # tokens read from a prefix-cache entry
    holds_ref = np.zeros(n, dtype=bool)
    swapped_blocks = np.zeros(n, np.int64)
    ready = np.full(n, -np.inf)  # a prefill waits for its pooled KV until then
    fetched = np.zeros(n, dtype=bool)  # its prefix came from the pool (not written back)
    res = PoolResult(
        *(np.full(n, np.nan) for _ in range(5)),
        energy_j=np.zeros(n),
        preemptions=np.zeros(n, np.int64),
        prefix_hit_tokens=np.zeros(n, np.int64),
    )
    waiting: deque = deque()
    swapped: deque = deque()
    running: list = []
    na = 0
    done = 0
    t = 0.0
    frag_area = 0.0
    n_preempt = n_swap = 0
    max_batch_seen = 0
    swap_bytes_per_block = pool.block_bytes  # per rank; ranks swap in parallel over their own links
    tp = pool.tp
    from attnsim.studies.timeline_serve import active_recorder

    recorder = active_recorder()
    log = [] if recorder is not None else None  # iterations, for a timeline (attnsim/studies/timeline_serve.py)

    dense = kvp.kind in ("none", "quest")  # every token's KV retained (quest reads a subset, keeps all)

    def hold(i, ctx):
        h = int(ctx) if dense else int(kvp.retained_tokens(ctx, prompt[i]))
        if beams > 1:  # the generated tokens' KV once per beam (the policy is "none": refused otherwise)
            h = int(beam_tokens(h, prompt[i], beams))
        if reserve is not None:
            h = max(h, int(prompt[i] + beams * reserve[i]))
        return max(0, h - int(shared[i]))

    def release_all(i):
        alloc.release(blocks[i])
        blocks[i] = []
        nblocks[i] = 0
        if holds_ref[i]:
            pcache.release(int(pid[i]))
            holds_ref[i] = False
        shared[i] = 0

    def make_room(need, keep_pid=-1):
        if alloc.free < need and pcache.enabled:
            pcache.evict(need, keep=keep_pid)
        return alloc.free >= need

    swap_s = 0.0
    swap_e = 0.0
    sample_blocks: list = []

    def preempt(v):
        nonlocal n_preempt, n_swap, swap_s, swap_e
        running.remove(v)
        res.preemptions[v] += 1
        n_preempt += 1
        if sched.preemption == "swap" and computed[v] >= target[v] and pool.swap_link is not None and not holds_ref[v]:
            nb = len(blocks[v])
            b = nb * swap_bytes_per_block
            swap_s += float(pool.swap_link.transfer_time_s(b))
            e = float(pool.swap_link.transfer_energy_j(b * tp))
            swap_e += e
            res.energy_j[v] += e
            alloc.release(blocks[v])
            blocks[v] = []
            nblocks[v] = 0
            swapped_blocks[v] = nb
            swapped.append(v)
            n_swap += 1
            return
        # recompute: drop the KV; re-prefill prompt + emitted tokens (vLLM recompute semantics)
        release_all(v)
        if generated[v] > 0:
            target[v] = prompt[v] + generated[v]
        computed[v] = 0
        waiting.appendleft(v)

    while done < n:
        while na < n and arrival[na] <= t:
            waiting.append(na)
            na += 1
        if not running and not waiting and not swapped:
            gap = float(arrival[na]) - t
            res.idle_s += gap
            t = float(arrival[na])
            continue
        budget = sched.max_tokens_per_iter
        dec: list = []
        pre: list = []  # (request, chunk)
        swap_s = 0.0
        swap_e = 0.0
        # ---- 1. running requests
        k = 0
        while k < len(running):
            r = running[k]
            if computed[r] >= target[r]:
                need = -(-hold(r, computed[r] + 1 + gamma) // bt) - nblocks[r]
                ok = True
                while need > alloc.free and not make_room(need):
                    v = running[-1]
                    preempt(v)
                    if v == r:
                        ok = False
                        break
                if not ok:
                    continue
                if need > 0:
                    blocks[r].extend(alloc.allocate(int(need)))
                    nblocks[r] += need
                dec.append(r)
                budget -= per_dec
            elif ready[r] > t:
                pass  # pooled KV still in flight
            else:
                chunk = int(target[r] - computed[r])
                if sched.chunked_prefill:
                    chunk = min(chunk, budget)
                elif chunk > budget and (dec or pre):
                    chunk = 0
                if chunk > 0:
                    pre.append((r, chunk))
                    budget -= chunk
            k += 1
        # ---- 2. swapped requests come back
        while swapped and len(running) < sched.max_batch:
            r = swapped[0]
            need = max(int(swapped_blocks[r]), -(-hold(r, computed[r] + 1 + gamma) // bt))
            if not make_room(need):
                break
            swapped.popleft()
            blocks[r] = alloc.allocate(need)
            nblocks[r] = need
            b = int(swapped_blocks[r]) * swap_bytes_per_block
            swap_s += float(pool.swap_link.transfer_time_s(b))
            e = float(pool.swap_link.transfer_energy_j(b * tp))
            swap_e += e
            res.energy_j[r] += e
            running.append(r)
            dec.append(r)
            budget -= per_dec
        # ---- 3. admit waiting requests (FCFS, head-of-line blocking)
        while waiting and not swapped and len(running) < sched.max_batch and budget > 0:
            r = waiting[0]
            if computed[r] >= target[r]:  # arrives with its prompt KV (decode pool)
                need = -(-hold(r, computed[r] + 1 + gamma) // bt)
                if not make_room(need):
                    break
                waiting.popleft()
                blocks[r] = alloc.allocate(need)
                nblocks[r] = need
                running.append(r)
                dec.append(r)
                budget -= per_dec
                if math.isnan(res.admit_s[r]):
                    res.admit_s[r] = t
                continue
            p = int(pid[r])
            hit = pcache.peek(p)
            if hit >= target[r]:
                hit = 0  # always compute at least the last prompt token
            shared[r] = hit
            need = -(-hold(r, target[r]) // bt)
            if not make_room(need, keep_pid=p):
                shared[r] = 0
                break
            chunk = int(target[r] - hit)
            if sched.chunked_prefill:
                chunk = min(chunk, budget)
            elif chunk > budget and (dec or pre):
                shared[r] = 0
                break
            waiting.popleft()
            pooled = fetch_s = 0
            if remote is not None and hit == 0 and p >= 0 and generated[r] == 0:
                pooled, fetch_s, fetch_e = remote.lookup(p, t, min(int(ptok[r]), int(target[r]) - 1))
                res.energy_j[r] += fetch_e
            if hit:
                got = pcache.acquire(p, t)
                assert got == hit
                holds_ref[r] = True
                res.prefix_hit_tokens[r] += hit
            elif p >= 0:
                pcache.acquire(p, t)  # a miss: counted as a lookup
            computed[r] = hit
            blocks[r] = alloc.allocate(need)
            nblocks[r] = need
            running.append(r)
            if pooled:  # prefill of the rest starts once the pooled KV has arrived
                computed[r] = pooled
                res.prefix_hit_tokens[r] += pooled
                ready[r] = t + fetch_s
                fetched[r] = True
            else:
                pre.append((r, chunk))
                budget -= chunk
            if math.isnan(res.admit_s[r]):
                res.admit_s[r] = t
        if not dec and not pre and running and ready[running].max() > t:  # only pooled KV in flight
            wake = float(ready[running][ready[running] > t].min())
            if na < n:
                wake = min(wake, float(arrival[na]))
            res.idle_s += wake - t
            res.in_system_area += (na - done) * (wake - t)
            t = wake
            continue
        if not dec and not pre:  # cannot happen for a trace that passed _check_servable
            raise ServeError(
                f"{pool.name}: scheduler stalled at t={t:.3f} s with {len(waiting)} waiting, "
                f"{len(swapped)} swapped, {len(running)} running, {alloc.free}/{alloc.total} blocks free"
            )
        # ---- cost the iteration
        if dec:
            d = np.asarray(dec)
            ctx_sum = (
                int(computed[d].sum()) + len(d)
                if kvp.kind == "none"
                else int(kvp.read_tokens(computed[d] + 1, prompt[d]).sum())
            )
        else:
            ctx_sum = 0
        n_dec = len(dec)
        if dec and beams > 1 and reads_once:  # B beam rows over prompt + B x generated (new tokens included)
            ctx_sum = int(beam_tokens(computed[d] + 1, prompt[d], beams).sum())
        elif beams > 1:  # B decodes, each reading its whole context
            ctx_sum, n_dec = beams * ctx_sum, beams * n_dec
        dt, e = coster.cost(ctx_sum, n_dec, [c for _, c in pre], [int(computed[r]) for r, _ in pre])
        dt += swap_s
        if log is not None:  # timeline_serve.LOG_FIELDS
            log.append(
                (
                    t,
                    dt,
                    len(dec),
                    len(pre),
                    sum(c for _, c in pre),
                    len(dec) * per_dec,
                    alloc.used,
                    len(running),
                    len(waiting),
                    e + swap_e,
                )
            )
        res.swap_energy_j += swap_e
        res.in_system_area += (na - done) * dt
        used_slots = alloc.used * bt
        if used_slots:
            ra = np.asarray(running)
            kept = computed[ra] if dense else kvp.retained_tokens(computed[ra], prompt[ra])
            if beams > 1:
                kept = beam_tokens(kept, prompt[ra], beams)
            live = int(np.maximum(kept - shared[ra], 0).sum()) if len(ra) else 0
            live += pcache.blocks_held * bt if pcache.enabled else 0
            frag_area += (1.0 - live / used_slots) * dt
        t += dt
        res.iterations += 1
        res.busy_s += dt
        res.busy_energy_j += e
        max_batch_seen = max(max_batch_seen, len(dec) + len(pre))
        ntok = len(dec) * per_dec + sum(c for _, c in pre)
        per_tok = e / ntok
        # ---- advance
        finished = []
        if spec is None and dec:  # one token each: the loop below as array operations (dec has no repeats)
            d = np.asarray(dec)
            res.energy_j[d] += per_tok * (1 + gamma)
            computed[d] += 1
            generated[d] += 1
            finished = d[generated[d] >= output[d]].tolist()
            dec = ()
        for r in dec:
            res.energy_j[r] += per_tok * per_dec
            adv = 1
            if spec is not None:
                adv = int(math.floor(credit[r] + e_tok + 1e-9) - math.floor(credit[r] + 1e-9))
                credit[r] += e_tok
                adv = max(1, min(adv, int(output[r] - generated[r])))
            computed[r] += adv
            generated[r] += adv
            if generated[r] >= output[r]:
                finished.append(r)
        for r, c in pre:
            res.energy_j[r] += per_tok * c
            computed[r] += c
            if computed[r] >= target[r]:
                generated[r] += 1
                res.last_prefill_iter_s[r] = dt
                if math.isnan(res.first_token_s[r]):
                    res.first_token_s[r] = t
                    res.prefill_done_s[r] = t
                p = int(pid[r])
                if remote is not None and p >= 0 and not holds_ref[r] and not fetched[r]:
                    res.energy_j[r] += remote.publish(p, pcache.shareable(ptok[r]), t)
                if pcache.enabled and p >= 0 and not holds_ref[r]:
                    st = pcache.shareable(ptok[r])
                    nsh = st // bt
                    if 0 < nsh <= len(blocks[r]) and pcache.donate(p, blocks[r][:nsh], st, t):
                        blocks[r] = blocks[r][nsh:]
                        nblocks[r] -= nsh
                        shared[r] = st
                        holds_ref[r] = True
                if mode == "prefill" or generated[r] >= output[r]:
                    finished.append(r)
        for r in finished:
            res.finish_s[r] = t
            if len(blocks[r]) > len(sample_blocks):
                sample_blocks = list(blocks[r])  # the longest block list the allocator handed out
            release_all(r)
            running.remove(r)
            done += 1
    res.end_s = t
    res.idle_energy_j = static_w * res.idle_s
    res.stats = {
        "preemptions": n_preempt,
        "swaps": n_swap,
        "peak_kv_blocks": alloc.peak_used,
        "kv_blocks": alloc.total,
        "peak_kv_fraction": alloc.peak_used / alloc.total if alloc.total else 0.0,
        "mean_fragmentation": frag_area / res.busy_s if res.busy_s else 0.0,
        "max_batch": max_batch_seen,
        "prefix_lookups": pcache.lookups,
        "prefix_hits": pcache.hits,
        "prefix_hit_rate": pcache.hits / pcache.lookups if pcache.lookups else 0.0,
        "prefix_hit_tokens": pcache.hit_tokens,
        "memo_entries": len(coster.memo),
        "memo_lookups": coster.lookups,
        "sample_block_ids": sample_blocks,
    }
    if recorder is not None:
        recorder.append(
            {
                "pool": pool.name,
                "mode": mode,
                "labels": np.asarray(labels),
                "arrival_s": arrival,
                "log": log,
                "result": res,
                "kv_blocks": pool.total_blocks,
                "static_w": static_w,
            }
        )
    return res
