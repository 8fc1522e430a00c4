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
