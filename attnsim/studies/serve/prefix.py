"""Prefix caching: requests that share a prefix id reuse its KV blocks.

After the first request with prefix id p finishes its prefill, the full blocks of the prefix
(floor(prefix_tokens / block_tokens) blocks; only whole blocks are shared, as in vLLM's automatic
prefix caching) move into the cache. A later request with prefix p that is admitted while the
entry exists skips prefill of those tokens (its prefill starts at the shared length) and needs
blocks only for the rest; the shared blocks are counted once in capacity. Entries no running
request references are evicted least-recently-used when blocks run out (before preemption).
Hit rate = admitted lookups that found their prefix / admitted lookups.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Entry:
    blocks: list
    tokens: int
    refs: int
    last_used_s: float


class PrefixCache:
    def __init__(self, allocator, enabled: bool = True):
        self.alloc = allocator
        self.enabled = enabled
        self.entries: dict[int, _Entry] = {}
        self.lookups = 0
        self.hits = 0
        self.hit_tokens = 0

    @property
    def blocks_held(self) -> int:
        return sum(len(e.blocks) for e in self.entries.values())

    def shareable(self, prefix_tokens: int) -> int:
        bt = self.alloc.block_tokens
        return (int(prefix_tokens) // bt) * bt

    def peek(self, pid: int) -> int:
        """Shared tokens a request with prefix ``pid`` would reuse now (0 on a miss)."""
        if not self.enabled or pid < 0:
            return 0
        e = self.entries.get(pid)
        return e.tokens if e is not None else 0

    def acquire(self, pid: int, now: float) -> int:
        """Admit a request with prefix ``pid``: count the lookup, take a reference on a hit."""
        if not self.enabled or pid < 0:
            return 0
        self.lookups += 1
        e = self.entries.get(pid)
        if e is None:
            return 0
        e.refs += 1
        e.last_used_s = now
        self.hits += 1
        self.hit_tokens += e.tokens
        return e.tokens

    def donate(self, pid: int, blocks: list, tokens: int, now: float) -> bool:
        """A request that computed prefix ``pid`` hands its first blocks to the cache (if absent)."""
        if not self.enabled or pid < 0 or pid in self.entries or tokens <= 0:
            return False
        self.entries[pid] = _Entry(list(blocks), int(tokens), 1, now)
        return True

    def release(self, pid: int) -> None:
        e = self.entries.get(pid)
        if e is not None:
            e.refs -= 1
            assert e.refs >= 0

    def evict(self, blocks_needed: int, keep: int = -1) -> int:
        """Free unreferenced entries, least recently used first, until ``blocks_needed`` blocks
        are free (or nothing is left to evict); ``keep`` is never evicted. Returns blocks freed."""
        freed = 0
        while self.alloc.free < blocks_needed:
            cands = [(e.last_used_s, p) for p, e in self.entries.items() if e.refs == 0 and p != keep]
            if not cands:
                break
            _, p = min(cands)
            e = self.entries.pop(p)
            self.alloc.release(e.blocks)
            freed += len(e.blocks)
        return freed
