"""Paged KV: a block allocator and the block -> (channel, bank, row) mapping policy.

Allocator (vLLM PagedAttention, Kwon et al., SOSP 2023): the KV capacity of the placed plan is
cut into blocks of ``block_tokens`` tokens (all layers, one TP rank); a request holds
ceil(tokens / block_tokens) blocks, so up to block_tokens - 1 token slots per request are lost to
internal fragmentation. In the ``contiguous`` layout (the pre-paging baseline) a request reserves
its maximum length up front, so the reservation it does not use is lost too. The allocator
refuses (``CapacityError``) to hand out more blocks than exist, and the scheduler asserts it.

Mapping: KV block b of the KV region lives at byte address ``b x block_bytes``; the DRAM spec's
address mapping (``default_mapping``, e.g. RoRaBaCoBgPcCh) then fixes its (channel, pseudo-channel,
bank group, bank, row, column). :func:`block_addresses` yields the burst addresses one step reads
for a request; :func:`kv_read_locality` replays them through the DRAM engine's request-level
controller (``attnsim.hwmodels.dram.simulate_requests``) to measure row-buffer hits and achieved
bandwidth, so a contiguous layout and the scattered block lists the allocator really hands out
can be compared on real bank timing.

On PIM devices the layout is simulated by the DRAM engine directly: with ``kv.layout: paged`` every
PIM device lowers attention over ``block_tokens``-token blocks, each starting a new row in every
bank (``attnsim.studies.serve.run.pim_hardware_for_layout``, isa/lower.py ``Partition.kv_block_tokens``), so
small blocks cost extra ACT/PRE rounds in the command streams the engine times.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from attnsim.mapper.base import CapacityError


class BlockAllocator:
    """Free list of KV block ids; allocation never exceeds ``total_blocks``."""

    def __init__(self, total_blocks: int, block_tokens: int):
        if total_blocks < 0:
            raise ValueError("total_blocks must be >= 0")
        self.total = int(total_blocks)
        self.block_tokens = int(block_tokens)
        self._free = list(range(self.total - 1, -1, -1))  # pop() hands out 0, 1, 2, ... first
        self.peak_used = 0

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.total - len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise CapacityError(f"KV allocator: {n} blocks requested, {len(self._free)} of {self.total} free")
        out = [self._free.pop() for _ in range(n)]
        used = self.used
        assert 0 <= used <= self.total, "KV capacity exceeded"
        if used > self.peak_used:
            self.peak_used = used
        return out

    def release(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))
        assert len(self._free) <= self.total, "KV block released twice"

    def blocks_for(self, tokens) -> np.ndarray:
        return -(-np.asarray(tokens, dtype=np.int64) // self.block_tokens)


# ---------------------------------------------------------------- mapping onto DRAM


def block_addresses(blocks, block_bytes: int, burst_bytes: int = 32) -> np.ndarray:
    """Byte addresses (one per burst) of reading ``blocks`` in order; block b occupies
    [b * block_bytes, (b + 1) * block_bytes)."""
    b = np.asarray(blocks, dtype=np.int64)
    offs = np.arange(0, block_bytes, burst_bytes, dtype=np.int64)
    return (b[:, None] * block_bytes + offs[None, :]).ravel()


def kv_read_locality(dram_spec, blocks, block_bytes: int, address_mapping: Optional[str] = None) -> dict:
    """Replay the reads of ``blocks`` through the DRAM request engine; row hits and bandwidth."""
    from attnsim.hwmodels.dram import load_dram_spec, simulate_requests

    dram_spec = load_dram_spec(dram_spec)
    addr = block_addresses(blocks, block_bytes, burst_bytes=int(dram_spec.org.burst_bytes))
    res = simulate_requests(dram_spec, addr, np.zeros(len(addr), dtype=bool), mapping=address_mapping)
    hits, misses, conf = res.row_hits, res.row_misses, res.row_conflicts
    return {
        "time_s": res.time_s,
        "bandwidth_gbps": res.bandwidth_gbps,
        "row_hits": int(hits),
        "row_misses": int(misses),
        "row_conflicts": int(conf),
        "row_hit_rate": hits / max(1, hits + misses + conf),
    }


# ---------------------------------------------------------------- a decode step as a DRAM request stream

# decode_step_stream's serving mix (assumed, stated in docs/validation/dram-crosscheck.md): Llama-3-70B's KV per
# token of one layer on one of 8 TP ranks (1 KV head x 128 dims x 2 B = 256 B for K, as much for V), vLLM's default
# 16-token blocks, 32 running requests, prompts 256-4096 and outputs 64-1024 tokens (uniform)
KV_TOKEN_BYTES = 256
KV_BATCH = 32
KV_PROMPT = (256, 4096)
KV_OUTPUT = (64, 1024)
KV_WARMUP_STEPS = 3000  # decode steps of churn before the recorded one (finished requests free scattered blocks)


def decode_step_stream(spec, n: int, seed: int = 1, block_tokens: int = 16, mapping: str | None = None):
    """(byte address uint64, is_write bool) of ``n`` reads of paged-KV decode steps on one DRAM channel, in the
    field order of hwmodels.dram.streams (MAPPING), for the cross-check against other simulators.

    A continuous batch of KV_BATCH requests runs KV_WARMUP_STEPS decode steps on this module's BlockAllocator
    (a request takes ceil(prompt / block_tokens) blocks when admitted, one more at each block boundary, and
    releases them when done; a finished request is replaced at once), so the block lists are the scattered ones
    the allocator really hands out. Then each decode step reads, request after request, the filled bytes of its
    K blocks and then of its V blocks (one layer: the K region is the first half of the channel, V the second,
    block b of each at b x block bytes), steps following until ``n`` reads. The device's own address mapping
    (``mapping``, default ``spec.default_mapping``) places the bytes on banks, rows and columns (streams.refield)."""
    from attnsim.hwmodels.dram.streams import refield

    o = spec.org
    cap_bytes = o.rows * o.columns * o.burst_bytes * o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group
    block_bytes = block_tokens * KV_TOKEN_BYTES
    half = cap_bytes // 2
    alloc = BlockAllocator(half // block_bytes, block_tokens)
    rng = np.random.default_rng(seed)

    def admit():
        prompt = int(rng.integers(*KV_PROMPT))
        return [prompt, int(rng.integers(*KV_OUTPUT)), alloc.allocate(int(alloc.blocks_for(prompt)))]

    running = [admit() for _ in range(KV_BATCH)]

    def step():
        for i, r in enumerate(running):
            if r[0] % block_tokens == 0:
                r[2] += alloc.allocate(1)
            r[0] += 1
            r[1] -= 1
            if r[1] == 0:
                alloc.release(r[2])
                running[i] = admit()

    for _ in range(KV_WARMUP_STEPS):
        step()
    parts, total = [], 0
    offs = np.arange(0, block_bytes, o.burst_bytes, dtype=np.int64)
    while total < n:
        for tokens, _, blocks in running:
            filled = np.arange(len(blocks) * len(offs)) < -(-tokens * KV_TOKEN_BYTES // o.burst_bytes)
            k = (np.asarray(blocks, np.int64)[:, None] * block_bytes + offs[None, :]).ravel()[filled]
            parts += [k, k + half]
            total += 2 * k.shape[0]
        step()
    addr = np.concatenate(parts)[:n].astype(np.uint64)
    return refield(o, addr, mapping or spec.default_mapping), np.zeros(n, bool)
