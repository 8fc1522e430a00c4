"""Per-run metric helpers shared by the runner and speculative decoding (attnsim.sim.runner, attnsim.sim.speculative):
the keys of a run document's metrics, a replica's share of a static batch, achieved bandwidth and memory use.
A module of their own so that speculative.py does not import the runner that calls it (no import cycle)."""

from __future__ import annotations

import math

from attnsim.sim.engine import StepResult

#: The keys of a run document's ``metrics`` (every status: null values when the run did not complete)
SYSTEM_KEYS = ("mapper", "devices", "links", "parallelism")  # keys of a system file (errors raised while planning)
METRIC_KEYS = (
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "decode_tokens_per_s",
    "energy_per_token_j",
    "dynamic_energy_per_token_j",
    "static_energy_per_token_j",
    "decode_energy_per_token_j",
    "decode_dynamic_energy_per_token_j",
    "total_time_s",
    "prefill_time_s",
    "decode_time_s",
    "batch_per_replica",
    "replicas",
    "active_replicas",
    "tp",
    "tp_imbalance",
    "pp",
    "decode_steps_simulated",
    "bandwidth",
    "memory",
    "fits",
)


def null_metrics(fits: bool | None = None) -> dict:
    """``metrics`` of a run that produced none: every key of METRIC_KEYS, null (``fits`` as given)."""
    return {**dict.fromkeys(METRIC_KEYS), "fits": fits}


def _replica_scenario(scenario, replicas: int):
    """The share of a static batch that one data-parallel replica serves."""
    if replicas == 1:
        return scenario
    b = math.ceil(scenario.batch_size / replicas)
    upd = {"batch_size": b}
    if isinstance(scenario.context_lens, list):
        upd["context_lens"] = scenario.context_lens[:b]
    return scenario.model_copy(update=upd)


def _bandwidth(system, step: StepResult) -> dict:
    """Achieved vs peak main-memory bandwidth per device during a mean decode step."""
    out = {}
    for key, b in step.bytes_by_device.items():
        role, level = key.split(":", 1)
        pool = system.pools.get(role)
        if pool is None or step.time_s <= 0:
            continue
        peak = pool.model.peak_bandwidth_bytes_per_s
        achieved = b / step.time_s
        out[key] = {
            "achieved_gbps": achieved / 1e9,
            "peak_gbps": peak / 1e9,
            "utilization": achieved / peak if peak else 0.0,
        }
    return out


def _memory(plan) -> dict:
    return {
        mp.role: {
            "weights_gb": mp.weights_bytes / 1e9,
            "kv_gb": mp.kv_bytes / 1e9,
            "capacity_gb": mp.capacity_bytes / 1e9,
            "used_fraction": mp.used_bytes / mp.capacity_bytes if mp.capacity_bytes else math.inf,
        }
        for mp in plan.memory
    }
