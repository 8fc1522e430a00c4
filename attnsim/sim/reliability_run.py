"""Reliability section of ``attnsim run``: accuracy risk of where and how the KV cache is stored.

An experiment's ``reliability:`` section (schema: attnsim.hwmodels.reliability.spec.ReliabilitySpec;
a scenario may override parts of it with its own ``reliability:`` mapping) names memory tiers with
their error models, ECC per bit-field group and refresh intervals, and maps the system's device roles
onto tiers (``role_tiers``). After the timing run, the KV read per generated token from each tier and
the KV's residency (the simulated generation time, unless ``residency_s`` is set) give the expected
silent and detected errors per token, the accuracy proxy and whether the SLO holds.

Refresh is one knob with two effects: the retention BER here, and the refresh overhead and energy of
PIM/PNM devices whose DRAM runs on the bank-timing engine: each device role mapped to a tier gets the
tier's effective refresh interval (``refresh_interval_ms`` of its PIM config; rows of each bit-field
group refreshed at their own interval, so the refresh rate is the bit-share-weighted mean of 1/interval).
"""

from __future__ import annotations

import copy

from attnsim.core.config import ConfigError


def merged_section(exp_rel: dict | None, scenario_rel: dict | None) -> dict | None:
    if exp_rel is None and scenario_rel is None:
        return None
    from attnsim.hwmodels.pim import _deep_merge

    return _deep_merge(copy.deepcopy(exp_rel or {}), scenario_rel or {})


def load_spec(section: dict, file: str, prefix: str, allow: list[str] | None = None):
    """``allow``: the experiment file's allow_out_of_range keys (attnsim.sim.experiment.experiment_allow)."""
    from attnsim.hwmodels.reliability.spec import ReliabilitySpec

    return ReliabilitySpec.load(section, file=file, prefix=prefix, allow=allow)


def high_bit_fraction(kv_format: str) -> float:
    """Share of a KV element's stored bits in the 'high' field group (sign/exponent, code MSB)."""
    from attnsim.hwmodels.reliability.formats import (
        FIELD_GROUPS,
        FIELD_ID,
        FLOAT_FORMATS,
        FORMAT_BITS,
        float_field_of_bit,
        int_field_of_bit,
    )

    fields = float_field_of_bit(kv_format) if kv_format in FLOAT_FORMATS else int_field_of_bit(FORMAT_BITS[kv_format])
    high = {FIELD_ID[f] for f in FIELD_GROUPS["high"]}
    return float(sum(int(f) in high for f in fields)) / len(fields)


def effective_refresh_ms(spec, tier: str) -> float:
    """Interval whose refresh rate equals the bit-share-weighted rate of the tier's field groups."""
    h = high_bit_fraction(spec.kv_format)
    rate = h / spec.refresh_of(tier, "high") + (1 - h) / spec.refresh_of(tier, "low")
    return 1.0 / rate


def role_tiers(spec, system_spec) -> dict[str, str]:
    mapping = dict(spec.role_tiers)
    if not mapping:
        if len(spec.tiers) != 1:
            raise ConfigError(
                f"reliability.role_tiers must map device roles ({', '.join(system_spec.devices)}) to "
                f"tiers ({', '.join(spec.tiers)}) when there is more than one tier",
                key="reliability.role_tiers",
            )
        (tier,) = spec.tiers
        mapping = {role: tier for role in system_spec.devices}
    for role, tier in mapping.items():
        if tier not in spec.tiers:
            raise ConfigError(
                f"expected one of {', '.join(spec.tiers)}, got {tier!r}", key=f"reliability.role_tiers.{role}"
            )
    return mapping


def hardware_with_refresh(hardware: dict, system_spec, spec) -> dict:
    """Copy of the hardware table with each tier-mapped PIM device's refresh interval set."""
    hw = copy.deepcopy(hardware)
    for role, tier in role_tiers(spec, system_spec).items():
        pool = system_spec.devices.get(role)
        if pool is None:
            continue
        from attnsim.hwmodels.system import ref_name

        cfg = hw[ref_name(pool.hardware)]
        if cfg.get("kind") == "pim":
            cfg["refresh_interval_ms"] = effective_refresh_ms(spec, tier)
    return hw


def kv_footprint(spec, system_spec, model, scenario, doc: dict) -> dict:
    """One request's KV bytes per tier (as placed by the finished run ``doc``)."""
    from attnsim.workloads.trace import kv_cache_bytes

    m = doc["metrics"]
    tiers = role_tiers(spec, system_spec)
    prompts = scenario.prompt_lens()
    per_request_kv = kv_cache_bytes(model, scenario, prompts + scenario.output_len) / len(prompts)
    kv_by_role = {role: v["kv_gb"] * system_spec.devices[role].count for role, v in m["memory"].items()}
    total = sum(kv_by_role.values())
    footprint = {}
    for role, kv in kv_by_role.items():
        if kv > 0 and role in tiers:
            footprint[tiers[role]] = footprint.get(tiers[role], 0.0) + per_request_kv * kv / total
    return footprint


def reliability_metrics(spec, system_spec, model, scenario, doc: dict) -> dict:
    """Expected errors per token, accuracy proxy and SLO for a finished run document."""
    from attnsim.hwmodels.reliability.spec import expected_errors

    m = doc["metrics"]
    prompts = scenario.prompt_lens()
    footprint = kv_footprint(spec, system_spec, model, scenario, doc)
    residency = spec.residency_s if spec.residency_s is not None else m["total_time_s"]
    kv_heads = model.num_layers * (1 if model.mla else model.num_kv_heads)
    head_dim = (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) if model.mla else model.head_dim
    out = expected_errors(
        footprint,
        residency,
        spec,
        kv_heads_total=kv_heads,
        head_dim=head_dim,
        context_tokens=int(prompts.mean() + scenario.output_len),
        requests=len(prompts),
    )
    out["kv_residency_s"] = residency
    # DUE policy: recompute re-fetches the detected-bad KV (one token of one layer per event, from
    # the slowest tier holding KV); drop leaves it out (counted in the accuracy proxy instead)
    if spec.due_policy == "recompute" and footprint:
        from attnsim.workloads.trace import kv_bytes_per_token_per_layer

        per = kv_bytes_per_token_per_layer(model, scenario.kv_dtype)
        slowest = min(spec.tiers[t].read_gbps for t in footprint) * 1e9
        out["due_recompute_time_per_token_s"] = out["detected_errors_per_token"] * per / slowest
    else:
        out["due_recompute_time_per_token_s"] = 0.0
    out["refresh_interval_ms"] = {
        t: effective_refresh_ms(spec, t) for t in sorted(set(role_tiers(spec, system_spec).values()))
    }
    return out


def kv_storage_costs(spec, system_spec) -> dict | None:
    """ECC overheads of the KV's storage per device role, fed into the timing and energy models.

    For each role mapped to a tier: the bit-share-weighted mix of its field groups' codes:
    ``bandwidth`` = inline transfer overhead per KV byte, ``capacity`` = visible storage overhead,
    ``pj_per_byte`` = decode energy per KV byte read, ``decode_latency_s`` (pipelined in the
    controller; reported only). ``combine_storage_costs`` weights them by where the KV is placed.
    Returns None when no code adds any overhead (none, on-die or sideband codes only).
    """
    from attnsim.hwmodels.reliability.ecc import get_scheme

    h = high_bit_fraction(spec.kv_format)
    out = {}
    for role, tier in role_tiers(spec, system_spec).items():
        if role not in system_spec.devices:
            continue
        ecc = spec.tiers[tier].ecc
        hi, lo = get_scheme(ecc.high), get_scheme(ecc.low)
        out[role] = {
            "bandwidth": h * hi.bandwidth_overhead + (1 - h) * lo.bandwidth_overhead,
            "capacity": h * hi.visible_overhead + (1 - h) * lo.visible_overhead,
            "pj_per_byte": h * hi.energy_pj_per_byte + (1 - h) * lo.energy_pj_per_byte,
            "decode_latency_s": max(hi.decode_latency_s, lo.decode_latency_s),
        }
    if all(v["bandwidth"] == 0 and v["capacity"] == 0 and v["pj_per_byte"] == 0 for v in out.values()):
        return None
    return out


def combine_storage_costs(per_role: dict, kv_bytes_by_role: dict) -> dict:
    """Weight per-role ECC overheads by the KV bytes each role holds (a placement's memory)."""
    total = sum(b for r, b in kv_bytes_by_role.items() if r in per_role)
    if total <= 0:
        return {"bytes_scale": 1.0, "capacity_scale": 1.0, "pj_per_byte": 0.0, "role": None}
    w = {r: b / total for r, b in kv_bytes_by_role.items() if r in per_role}
    return {
        "bytes_scale": 1.0 + sum(w[r] * per_role[r]["bandwidth"] for r in w),
        "capacity_scale": 1.0 + sum(w[r] * per_role[r]["capacity"] for r in w),
        "pj_per_byte": sum(w[r] * per_role[r]["pj_per_byte"] for r in w),
        "role": max(w, key=w.get),
    }
