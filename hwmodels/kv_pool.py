"""Shared KV pool tier reachable by several hosts: ``kind: kv_pool`` (used by ``serving.kv_pool``).

Two archetypes of the KV-management survey, one cost model (presets differ by their numbers):

- Pond-style CXL memory pool (Li et al., ASPLOS'23; shared/reference/cxl_reliability.md §1.2): a
  multi-headed memory device (no switch, +70-90 ns load-to-use over local DRAM) or a switched pool
  (> 180 ns), each host on its own CXL port;
- Mooncake-style disaggregated KV store (Qin et al., FAST'25): the cluster's CPU DRAM holds prefix
  KV blocks, located by a metadata service (hash of the prefix blocks -> location), moved by RDMA.

Cost of fetching ``K`` blocks (``nbytes``) for one request (:meth:`KVPool.fetch_time_s`)::

    t = lookup_rpc_us + K x lookup_us_per_block + access_latency_us + nbytes / bw
    bw = min(host_link_gbps, pool_bandwidth_gbps / hosts_sharing)

``hosts_sharing`` = serving instances attached to the pool; every instance is assumed to stream at
once (an upper bound on contention). Writing a prefix into the pool costs the same transfer (no lookup)
and makes the entry visible when it ends. Energy = ``energy_pj_per_byte`` x bytes moved.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import HARDWARE_COUNT, ConfigError, Plausible, Schema
from attnsim.hwmodels import registry


class KVPoolSpec(Schema):
    plausible = {"hosts": HARDWARE_COUNT, "lookup_us_per_block": Plausible(0, 1e6, "us (the _us range)")}
    kind: Literal["kv_pool"] = "kv_pool"
    name: str
    description: str = ""
    source: str = ""
    capacity_gb: PositiveFloat = Field(description="prefix KV the pool holds (entries that do not fit are not stored)")
    hosts: PositiveInt = Field(description="hosts (ports / nodes) that can attach to the pool")
    host_link_gbps: PositiveFloat = Field(description="achieved bandwidth of one host's path to the pool, 1e9 B/s")
    pool_bandwidth_gbps: PositiveFloat = Field(description="pool-side bandwidth shared by all hosts, 1e9 B/s")
    access_latency_us: float = Field(ge=0, description="latency of one transfer (load-to-use / one-sided read)")
    lookup_rpc_us: float = Field(ge=0, description="metadata lookup per request (one round trip)")
    lookup_us_per_block: float = Field(ge=0, description="metadata lookup per KV block (hash -> location)")
    energy_pj_per_byte: float = Field(ge=0, description="energy per byte moved (link + pool memory)")


class KVPool:
    kind = "kv_pool"
    peak_flops = 0.0
    static_power_w = 0.0

    def __init__(self, spec: KVPoolSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def capacity_bytes(self) -> float:
        return self.spec.capacity_gb * 1e9

    def bandwidth_bytes_per_s(self, hosts_sharing: int) -> float:
        s = self.spec
        return min(s.host_link_gbps, s.pool_bandwidth_gbps / max(1, int(hosts_sharing))) * 1e9

    def fetch_time_s(self, blocks, nbytes, hosts_sharing: int = 1) -> np.ndarray:
        """Lookup of ``blocks`` blocks + one transfer of ``nbytes`` (see the module docstring)."""
        s = self.spec
        lookup = (s.lookup_rpc_us + np.asarray(blocks, dtype=np.float64) * s.lookup_us_per_block) * 1e-6
        return lookup + self.store_time_s(nbytes, hosts_sharing)

    def store_time_s(self, nbytes, hosts_sharing: int = 1) -> np.ndarray:
        """One transfer of ``nbytes`` to or from the pool (no lookup)."""
        b = np.asarray(nbytes, dtype=np.float64)
        return self.spec.access_latency_us * 1e-6 + b / self.bandwidth_bytes_per_s(hosts_sharing)

    def energy_j(self, nbytes) -> np.ndarray:
        return np.asarray(nbytes, dtype=np.float64) * self.spec.energy_pj_per_byte * 1e-12

    def cost(self, trace, rows):
        raise ConfigError(
            f"kv_pool {self.name!r} is a serving tier (serving.kv_pool), not a system device", key="devices"
        )


registry.register("kv_pool", KVPoolSpec, KVPool)


class SharedPrefixPool:
    """Run-time state of one pool shared by ``instances`` serving instances (serve/run.py).

    Entries are prefix ids with the tokens stored and the time they became visible. Instances are
    simulated one after another, so an instance also sees what the others published in the previous
    pass (:meth:`next_pass`); passes repeat until the entries stop changing (:meth:`converged`).
    """

    def __init__(self, pool: KVPool, bytes_per_token: float, block_tokens: int, instances: int):
        if instances > pool.spec.hosts:
            raise ConfigError(
                f"expected at most hosts = {pool.spec.hosts} serving instances on kv_pool "
                f"{pool.name!r}, got {instances}",
                key="hosts",
            )
        self.pool, self.bpt, self.bt, self.instances = pool, float(bytes_per_token), int(block_tokens), int(instances)
        self.known: dict[int, tuple[float, int]] = {}  # previous pass: pid -> (visible_s, tokens)
        self.live: dict[int, tuple[float, int]] = {}  # this pass
        self.stored_bytes = 0.0
        self.reset_counters()

    def reset_counters(self):
        self.lookups = self.hits = self.hit_tokens = 0
        self.fetch_s = self.energy = 0.0

    def converged(self) -> bool:
        """The last pass reproduced the entries of the one before (a fixed point)."""
        return self.live == self.known

    def next_pass(self) -> None:
        """Start another pass that sees the entries of the last one."""
        self.known, self.live, self.stored_bytes = self.live, {}, 0.0
        self.reset_counters()

    def _entry(self, pid: int, now: float):
        cands = [e for e in (self.known.get(pid), self.live.get(pid)) if e is not None and e[0] <= now]
        return min(cands) if cands else None

    def lookup(self, pid: int, now: float, limit: int) -> tuple[int, float, float]:
        """(tokens reused, fetch time, energy) of a request with prefix ``pid`` admitted at ``now``;
        ``limit``: at most this many tokens (the request's prompt minus its last token)."""
        if pid < 0:
            return 0, 0.0, 0.0
        self.lookups += 1
        e = self._entry(pid, now)
        tok = 0 if e is None else min(e[1], (int(limit) // self.bt) * self.bt)
        if tok <= 0:
            return 0, 0.0, 0.0
        nbytes = tok * self.bpt
        t = float(self.pool.fetch_time_s(tok // self.bt, nbytes, self.instances))
        en = float(self.pool.energy_j(nbytes))
        self.hits += 1
        self.hit_tokens += tok
        self.fetch_s += t
        self.energy += en
        return tok, t, en

    def publish(self, pid: int, tokens: int, now: float) -> float:
        """An instance computed prefix ``pid``: its whole blocks are written to the pool (if they fit).
        Returns the write energy."""
        tokens = (int(tokens) // self.bt) * self.bt
        if pid < 0 or tokens <= 0:
            return 0.0
        nbytes = tokens * self.bpt
        visible = now + float(self.pool.store_time_s(nbytes, self.instances))
        if pid in self.live:  # instances run one after another: the earliest writer's entry is the one kept
            self.live[pid] = min(self.live[pid], (visible, tokens))
            return 0.0
        if self.stored_bytes + nbytes > self.pool.capacity_bytes:
            return 0.0
        self.stored_bytes += nbytes
        self.live[pid] = (visible, tokens)
        e = float(self.pool.energy_j(nbytes))
        self.energy += e
        return e

    def stats(self) -> dict:
        return {
            "pool_lookups": self.lookups,
            "pool_hits": self.hits,
            "pool_hit_rate": self.hits / self.lookups if self.lookups else 0.0,
            "pool_hit_tokens": self.hit_tokens,
            "pool_fetch_s_total": self.fetch_s,
            "pool_entries": len(self.live),
            "pool_stored_gb": self.stored_bytes / 1e9,
            "pool_energy_j": self.energy,
        }
