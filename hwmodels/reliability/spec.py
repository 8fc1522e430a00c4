"""The ``reliability:`` section of an experiment, and the per-token error summary.

Example (units in the key names)::

    reliability:
      seed: 0
      temperature_c: 45
      refresh_interval_ms: 64          # default for every tier and field group
      kv_format: bf16                  # kv bits: bf16/fp16 (16), fp8_e4m3/fp8_e5m2/int8 (8), int4, int2
      accuracy_slo: {max_rel_attention_error: 0.05}
      due_policy: recompute            # recompute (latency) | drop (accuracy)
      tiers:
        cxl: {read_gbps: 1100, read_pj_per_byte: 32, refresh_mw_per_gb: 14.5, capacity_gb: 512,
              ecc: {high: secded, low: none}, refresh_ms: {low: 1000},
              errors: {lambda_soft_per_bit_h: 2.4e-11}}
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveFloat, model_validator

from attnsim.core.config import Plausible, Schema, validate
from attnsim.hwmodels.reliability import ecc as _ecc
from attnsim.hwmodels.reliability.errors import JEDEC_REFRESH_MS, RawErrorModel, field_fault_modes
from attnsim.hwmodels.reliability.formats import FORMATS
from attnsim.hwmodels.reliability.planner import KVBlock, Option, Planner, TierSpec

EccName = Literal[tuple(_ecc.SCHEMES)]
KVFormat = Literal[FORMATS]


class ErrorModelSpec(Schema):
    plausible = {
        "retention_anchor_ber": Plausible(0, 0.5, "a bit error rate (0.5 is a random bit)"),
        "ber_approx": Plausible(0, 0.5, "a bit error rate (0.5 is a random bit)"),
        "fault_device_fit": Plausible(
            0, 1e7, "FIT per device (failures per 1e9 h): DRAM devices ~10-100 (Sridharan SC 2013, ASPLOS 2015)"
        ),
        "lambda_soft_per_bit_h": Plausible(
            0,
            1e-3,
            "soft errors per bit-hour: DRAM ~1e-15-1e-10 (Schroeder "
            "SIGMETRICS 2009: 25,000-70,000 FIT/Mbit is ~3e-14 per bit-hour)",
        ),
    }

    lambda_soft_per_bit_h: float = Field(2.4e-11, ge=0)  # 25k FIT/Mbit (Schroeder SIGMETRICS'09)
    retention_anchor_s: list[float] = [1.0, 10.0, 20.0]  # Flikker ASPLOS'11 [M], cxl_reliability.md §3.1
    retention_anchor_ber: list[float] = [3.0e-8, 1.0e-5, 1.0e-4]
    retention_ref_temp_c: float = 25.0
    ber_approx: float = Field(0.0, ge=0, le=1)
    fault_device_fit: float = Field(0.0, ge=0)  # permanent faults per 1e9 device-hours
    fault_exposure_h: float = Field(0.0, ge=0)

    def build(self) -> RawErrorModel:
        try:
            return RawErrorModel(
                self.lambda_soft_per_bit_h,
                tuple(self.retention_anchor_s),
                tuple(self.retention_anchor_ber),
                self.retention_ref_temp_c,
                10.0,
                0.5,
                self.ber_approx,  # true-cell fraction: injection only (uniform bits here)
                field_fault_modes(self.fault_device_fit) if self.fault_device_fit else (),
                fault_exposure_h=self.fault_exposure_h,
            )
        except ValueError as exc:
            raise ValueError(str(exc)) from None


class FieldEcc(Schema):
    high: EccName = "none"  # sign + exponent, integer code MSB, scales / zero-points
    low: EccName = "none"  # mantissa, low integer code bits


class FieldRefresh(Schema):
    plausible = {"*": Plausible(1e-3, 1e8, "refresh interval, ms (the _ms range)")}
    high: Optional[float] = Field(None, gt=0)
    low: Optional[float] = Field(None, gt=0)


class TierSchema(Schema):
    read_gbps: float = Field(gt=0)
    read_pj_per_byte: float = Field(ge=0)
    refresh_mw_per_gb: float = Field(ge=0)
    capacity_gb: float = Field(gt=0)
    ecc: FieldEcc = FieldEcc()
    refresh_ms: FieldRefresh = FieldRefresh()
    ecc_options: list[EccName] = []  # planner choices (default: the configured ecc)
    refresh_options_ms: list[PositiveFloat] = []  # planner choices (default: the configured refresh)
    errors: ErrorModelSpec = ErrorModelSpec()


class AccuracySlo(Schema):
    plausible = {
        "max_rel_attention_error": Plausible(
            0, 10, "relative attention error: SLOs of 1e-4-1e-1 (reference/reliability); above 10x the output is noise"
        ),
    }

    max_rel_attention_error: float = Field(gt=0)


class ReliabilitySpec(Schema):
    plausible = {
        "quant_group": Plausible(1, 1 << 20, "values per quantisation group: 32-128 in KV quantisers (KIVI, KVQuant)"),
    }

    temperature_c: float = 45.0
    refresh_interval_ms: float = Field(JEDEC_REFRESH_MS, gt=0)
    kv_format: KVFormat = "bf16"
    quant_group: int = Field(32, gt=0)
    accuracy_slo: AccuracySlo
    due_policy: Literal["recompute", "drop"] = "recompute"
    objective: Literal["latency_x_energy", "energy", "latency"] = "latency_x_energy"
    residency_s: Optional[float] = Field(None, gt=0)  # KV lifetime; None: the simulated generation time
    tiers: dict[str, TierSchema]
    role_tiers: dict[str, str] = {}  # system device role -> tier (default: the only tier)

    @model_validator(mode="after")
    def _check(self):
        if not self.tiers:
            raise ValueError("expected at least one tier")
        for name, t in self.tiers.items():
            try:
                t.errors.build()
            except ValueError as exc:
                raise ValueError(f"tier {name}: {exc}") from None
        return self

    @classmethod
    def load(
        cls, data: dict, file: str | None = None, prefix: str = "reliability", allow: list[str] | None = None
    ) -> "ReliabilitySpec":
        return validate(cls, data, file=file, prefix=prefix, allow=allow)

    def refresh_of(self, tier: str, which: str) -> float:
        v = getattr(self.tiers[tier].refresh_ms, which)
        return float(v if v is not None else self.refresh_interval_ms)

    def tier_specs(self) -> list[TierSpec]:
        out = []
        for name, t in self.tiers.items():
            eccs = tuple(t.ecc_options) or tuple(dict.fromkeys((t.ecc.high, t.ecc.low)))
            refs = tuple(t.refresh_options_ms) or tuple(
                dict.fromkeys((self.refresh_of(name, "high"), self.refresh_of(name, "low")))
            )
            out.append(
                TierSpec(
                    name,
                    1.0 / (t.read_gbps * 1e9),
                    t.read_pj_per_byte * 1e-12,
                    t.refresh_mw_per_gb * 1e-3 / 1e9,
                    t.capacity_gb * 1e9,
                    t.errors.build(),
                    self.temperature_c,
                    eccs,
                    refs,
                )
            )
        return out

    def configured_option(self, tier: str) -> Option:
        t = self.tiers[tier]
        return Option(
            tier, self.kv_format, t.ecc.high, t.ecc.low, self.refresh_of(tier, "high"), self.refresh_of(tier, "low")
        )


def expected_errors(
    footprint_bytes: dict,
    residency_s: float,
    spec: ReliabilitySpec,
    *,
    kv_heads_total: int,
    head_dim: int = 128,
    context_tokens: int = 4096,
    requests: int = 1,
) -> dict:
    """Expected silent / detected errors per generated token, the accuracy proxy, and the planner's
    ``storage_plan`` for one request's KV (the tiers' capacities shared by ``requests``): the option
    per tier share (from ``ecc_options`` / ``refresh_options_ms``, else the configured one) that
    minimises ``objective`` within the accuracy SLO, with its cost (planner.Plan.summary).

    ``footprint_bytes``: KV bytes read per token from each tier (as stored in ``spec.kv_format``);
    each tier's share of the KV is assumed to hold the same share of the attention mass.
    ``kv_heads_total`` = layers x KV heads. Silent errors are data-bit flips left after ECC,
    detected errors are data bits in detected-uncorrectable units, both in the KV read for one token.
    """
    from attnsim.hwmodels.reliability.formats import FORMAT_BITS
    from attnsim.hwmodels.reliability.quant import storage_bits_per_element

    unknown = set(footprint_bytes) - set(spec.tiers)
    if unknown:
        raise ValueError(f"footprint names unknown tiers: {', '.join(sorted(unknown))}")
    bits = FORMAT_BITS[spec.kv_format]
    bpe = bits if spec.kv_format.startswith(("bf", "fp")) else storage_bits_per_element(bits, spec.quant_group)
    elems = {t: b * 8.0 / bpe for t, b in footprint_bytes.items() if b > 0}
    total = sum(elems.values())
    if total <= 0:
        return {
            "silent_errors_per_token": 0.0,
            "detected_errors_per_token": 0.0,
            "accuracy_proxy": 0.0,
            "slo_met": True,
        }
    tiers = spec.tier_specs()
    opts = [spec.configured_option(t) for t in elems]
    blocks = []
    for t, n in elems.items():  # one pseudo-block per tier spanning all heads, mass = element share
        tokens = max(1, int(round(n / (2 * kv_heads_total * head_dim))))
        share = n / total
        blocks.append(
            KVBlock(0, 0, 0, tokens, kv_heads_total, head_dim, max(tokens, int(round(tokens / share))), share)
        )
    planner = Planner(
        tiers,
        formats=(spec.kv_format,),
        budget=spec.accuracy_slo.max_rel_attention_error,
        residency_s=residency_s,
        group=spec.quant_group,
        due_policy=spec.due_policy,
        options=opts,
    )
    M = planner._matrices(blocks)
    # each pseudo-block uses its own tier's configured option; sum its element counts exactly
    silent = due = eps = 0.0
    for i, (t, n) in enumerate(elems.items()):
        scale = n / blocks[i].n_elements
        silent += M["silent"][i, i] * scale
        due += M["due"][i, i] * scale * bits
        eps += M["eps"][i, i]  # pseudo-blocks span every head: already a mean head error
    import dataclasses

    shared = [dataclasses.replace(t, capacity_bytes=t.capacity_bytes / max(1, requests)) for t in tiers]
    try:
        plan = Planner(
            shared,
            formats=(spec.kv_format,),
            budget=spec.accuracy_slo.max_rel_attention_error,
            objective=spec.objective,
            residency_s=residency_s,
            group=spec.quant_group,
            due_policy=spec.due_policy,
        ).plan(blocks)
        storage = {"fits": True, "options": [dataclasses.asdict(o) for o in plan.options], **plan.summary()}
    except ValueError as exc:  # no option fits the tiers' capacities
        storage = {"fits": False, "note": str(exc)}
    return {
        "silent_errors_per_token": float(silent),
        "detected_errors_per_token": float(due),
        "accuracy_proxy": float(eps),
        "slo_met": bool(eps <= spec.accuracy_slo.max_rel_attention_error),
        "storage_plan": storage,
    }
