"""Timings in nanoseconds + a speed bin -> the spec's cycle timings (``timing_ns:`` of a DRAM spec YAML).

    org: {data_rate_mtps: 6400, transfers_per_ck: 4, ...}   # tck_ns = 1000 * transfers_per_ck / data_rate_mtps
    timing_ns: {nRCDRD: 19.2, nRP: 16.0, ...}                # keys of timing:, values in ns
    timing: {nBL: 2, nCL: 20, ...}                           # cycle values win where both are given

Cycles use the JEDEC rounding algorithm: nCK = floor(tPARAM / tCK + 0.974), i.e. ceil(tPARAM / tCK - 0.026)
with a 2.6 % guard band against a tCK that is itself rounded (JESD21-C Annex L / JESD79-4 "rounding
algorithms": nCK = truncate((tPARAM_ps * 1000 / tCK_ps + 974) / 1000) in integer picoseconds, used here).
A speed change is then one value (data_rate_mtps). Keys are consumed before validation, so a derived value
is validated like a written one (errors name timing_ns.<key>).
"""

from __future__ import annotations

import math

from attnsim.core.config import ConfigError


def ns_to_cycles(t_ns: float, tck_ns: float) -> int:
    """JEDEC rounding in integer picoseconds: truncate((tPARAM_ps * 1000 / tCK_ps + 974) / 1000)."""
    t_ps = round(t_ns * 1000)
    tck_ps = round(tck_ns * 1000)
    return (t_ps * 1000 // tck_ps + 974) // 1000


def resolve_timing_ns(data: dict, file: str | None = None) -> dict:
    """Return ``data`` with ``timing_ns`` (and ``org.transfers_per_ck``) turned into cycle timings / tck_ns."""
    org_in = data.get("org")
    if org_in is not None and not isinstance(org_in, dict):  # the schema refuses it with its own message
        return data
    if "timing_ns" not in data and "transfers_per_ck" not in (org_in or {}):
        return data
    d = dict(data)
    org = dict(d.get("org") or {})
    tpc = org.pop("transfers_per_ck", None)
    if tpc is not None:
        rate = org.get("data_rate_mtps")
        if not isinstance(tpc, int) or isinstance(tpc, bool) or tpc not in (1, 2, 4, 8, 16):
            raise ConfigError(
                f"expected 1, 2, 4, 8 or 16 transfers per CK, got {tpc!r}", file=file, key="org.transfers_per_ck"
            )
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 1e6:
            raise ConfigError(
                f"expected a data rate in (0, 1e6] MT/s to derive tck_ns from, got {rate!r}",
                file=file,
                key="org.data_rate_mtps",
            )
        if "tck_ns" in org:
            raise ConfigError(
                "give either tck_ns or transfers_per_ck (tck_ns is derived from it)", file=file, key="org.tck_ns"
            )
        org["tck_ns"] = round(1000.0 * tpc / rate, 6)
    d["org"] = org
    tns = d.pop("timing_ns", None)
    if tns is None:
        return d
    if not isinstance(tns, dict):
        raise ConfigError(
            f"expected a mapping of timing name -> ns, got {type(tns).__name__}", file=file, key="timing_ns"
        )
    tck = org.get("tck_ns")
    if not isinstance(tck, (int, float)) or isinstance(tck, bool) or not tck > 0:
        raise ConfigError(
            f"timing_ns needs org.tck_ns or org.transfers_per_ck, got tck_ns {tck!r}", file=file, key="org.tck_ns"
        )
    timing = dict(d.get("timing") or {})
    for k, v in tns.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 0 <= v <= 1e9:
            raise ConfigError(f"expected a time in [0, 1e9] ns, got {v!r}", file=file, key=f"timing_ns.{k}")
        if k not in timing:  # a cycle value written in timing: wins (e.g. nBL, nCL that are defined in nCK)
            timing[k] = ns_to_cycles(float(v), float(tck))
    d["timing"] = timing
    return d
