"""Raw (pre-ECC) error model of one memory tier (shared/reference/cxl_reliability.md §5(1)).

Three independent per-bit mechanisms plus permanent faults:

- soft (transient) errors at ``lambda_soft_per_bit_h`` per bit-hour, bidirectional. Default
  2.4e-11 /bit/h = 25,000 FIT/Mbit (Schroeder et al., SIGMETRICS'09; §3.1);
- retention errors: a per-write probability that a *charged* cell loses its charge before
  the next refresh, ``ber_retention(interval, T)``, from a calibratable log-log table.
  Default anchors (§3.1, Flikker ASPLOS'11 [M]): 0 at the JEDEC interval (64 ms at <= 85 C,
  32 ms above), 3e-8 at 1 s (middle of 1e-8..1e-7), 1e-5 at 10 s and 1e-4 at 20 s, at room
  temperature (25 C); x2 per +10 C (leakage doubles per ~10 C, §3.1). Retention flips are
  one-directional (charged -> discharged): in a true cell a stored 1 can decay to 0, in an
  anti cell a stored 0 can decay to 1; ``true_cell_fraction`` sets the mix ("Content Aware
  Refresh", IEEE TC; §3.1). For random data the per-bit flip probability is half the
  per-charged-cell BER;
- ``ber_approx``: reduced voltage/timing or low-cost binning (EDEN MICRO'19; REACH "cheap HBM"
  up to 1e-3, §3.1), bidirectional;
- permanent faults (bit, row, column, pin, chip) with rates in FIT per device; each covers a
  footprint of the device and its stuck bits differ from the data half of the time.

Refresh interval also scales refresh power: :func:`refresh_power_scale`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

JEDEC_REFRESH_MS = 64.0  # tREF at <= 85 C (JEDEC; §3.1 "Retention (refresh)")
JEDEC_REFRESH_HOT_MS = 32.0  # tREF above 85 C (same row)
HOT_THRESHOLD_C = 85.0
HOURS_PER_S = 1.0 / 3600.0
FIT_HOURS = 1.0e9  # 1 FIT = 1 failure per 1e9 device-hours (§3.1)


def refresh_power_scale(interval_ms: float, temp_c: float = 45.0) -> float:
    """Refresh power relative to the JEDEC default: 64 ms / interval (32 ms above 85 C).

    Refresh energy per second is proportional to the number of refresh operations per second,
    i.e. inversely proportional to the refresh interval; 1.0 at the JEDEC default interval.
    """
    if interval_ms <= 0:
        raise ValueError(f"refresh interval must be positive, got {interval_ms} ms")
    base = JEDEC_REFRESH_HOT_MS if temp_c > HOT_THRESHOLD_C else JEDEC_REFRESH_MS
    return base / float(interval_ms)


@dataclass(frozen=True)
class FaultMode:
    """A permanent fault class: rate per device and the bits of the device it covers."""

    name: str  # bit | row | column | pin | chip
    fit_per_device: float  # faults per 1e9 device-hours
    footprint_bits: float  # bits of the device the fault covers


def field_fault_modes(
    device_fit: float = 40.0,
    device_bits: float = 16 * 2**30,
    row_bits: float = 8192,
    rows_per_bank: float = 65536,
    banks: int = 16,
    width: int = 4,
) -> tuple[FaultMode, ...]:
    """Permanent fault modes with field-study shares.

    ``device_fit`` total: "tens of FIT/device" (Sridharan et al., ASPLOS'15; §3.1 [M]). Shares:
    47 % single-bit and 22.5 % single row or column (split evenly), Sridharan & Liberty SC'12
    (§3.1 [V]); pin and chip 5 % each [M]; the rest (bank and others) is left out. Geometry
    (16 Gbit device, 1 KB rows, 64 K rows per bank, 16 banks, x4) is DDR4/DDR5-like [M].
    """
    col_bits = rows_per_bank * width  # one column address of a bank over all rows
    return (
        FaultMode("bit", 0.47 * device_fit, 1.0),
        FaultMode("row", 0.1125 * device_fit, row_bits),
        FaultMode("column", 0.1125 * device_fit, col_bits),
        FaultMode("pin", 0.05 * device_fit, device_bits / width),
        FaultMode("chip", 0.05 * device_fit, device_bits),
    )


@dataclass(frozen=True)
class RawErrorModel:
    lambda_soft_per_bit_h: float = 2.4e-11
    retention_anchor_s: tuple = (1.0, 10.0, 20.0)
    retention_anchor_ber: tuple = (3.0e-8, 1.0e-5, 1.0e-4)
    retention_ref_temp_c: float = 25.0
    retention_doubling_c: float = 10.0
    true_cell_fraction: float = 0.5
    ber_approx: float = 0.0
    fault_modes: tuple = ()
    device_bits: float = 16 * 2**30
    fault_exposure_h: float = 0.0  # service time before the data is written (accumulated faults)

    def __post_init__(self):
        t, b = np.asarray(self.retention_anchor_s, float), np.asarray(self.retention_anchor_ber, float)
        if t.size != b.size or t.size < 2 or np.any(np.diff(t) <= 0) or np.any(b <= 0) or np.any(np.diff(b) < 0):
            raise ValueError("retention anchors need >= 2 increasing intervals with positive, non-decreasing BER")
        if not 0.0 <= self.true_cell_fraction <= 1.0:
            raise ValueError(f"true_cell_fraction must be in [0, 1], got {self.true_cell_fraction}")
        if self.lambda_soft_per_bit_h < 0 or not 0.0 <= self.ber_approx <= 1.0:
            raise ValueError("error rates must be non-negative probabilities")

    @classmethod
    def zero(cls) -> "RawErrorModel":
        """Every error rate zero (the error-free reference)."""
        return cls(lambda_soft_per_bit_h=0.0, retention_anchor_ber=(1e-300, 1e-300, 1e-300))

    @property
    def is_zero(self) -> bool:
        return (
            self.lambda_soft_per_bit_h == 0
            and self.ber_approx == 0
            and not self.fault_modes
            and max(self.retention_anchor_ber) < 1e-200
        )

    # ------------------------------------------------------------ retention
    def ber_retention(self, interval_ms: float, temp_c: float = 45.0) -> float:
        """Probability that a charged cell decays before the next refresh."""
        if interval_ms <= 0:
            raise ValueError(f"refresh interval must be positive, got {interval_ms} ms")
        if self.is_zero:
            return 0.0
        t0 = (JEDEC_REFRESH_HOT_MS if temp_c > HOT_THRESHOLD_C else JEDEC_REFRESH_MS) / 1e3
        t = interval_ms / 1e3
        if t <= t0:
            return 0.0
        ts = np.log(np.asarray(self.retention_anchor_s, float))
        bs = np.log(np.asarray(self.retention_anchor_ber, float))
        lt = np.log(t)
        if lt <= ts[0]:  # from 0 at the JEDEC interval up to the first anchor
            slope = (bs[1] - bs[0]) / (ts[1] - ts[0])
            t1 = self.retention_anchor_s[0]
            ber = np.exp(bs[0]) * ((t - t0) / (t1 - t0)) ** slope if t1 > t0 else np.exp(bs[0])
        elif lt >= ts[-1]:
            slope = (bs[-1] - bs[-2]) / (ts[-1] - ts[-2])
            ber = np.exp(bs[-1] + slope * (lt - ts[-1]))
        else:
            ber = np.exp(np.interp(lt, ts, bs))
        ber *= 2.0 ** ((temp_c - self.retention_ref_temp_c) / self.retention_doubling_c)
        return float(min(ber, 1.0))

    # ------------------------------------------------------------ per bit
    def p_soft(self, residency_s: float) -> float:
        return float(-np.expm1(-self.lambda_soft_per_bit_h * residency_s * HOURS_PER_S))

    def p_bidirectional(self, residency_s: float) -> float:
        """Per-bit flip probability of the direction-free mechanisms (soft + approximate)."""
        ps, pa = self.p_soft(residency_s), self.ber_approx
        return ps + pa - ps * pa

    def p_bit(self, residency_s: float, interval_ms: float, temp_c: float = 45.0) -> float:
        """Mean per-bit raw flip probability for random data (retention counts half)."""
        pb = self.p_bidirectional(residency_s)
        pr = 0.5 * self.ber_retention(interval_ms, temp_c)
        return pb + pr - pb * pr

    def fault_flips(self, n_bits: float, residency_s: float) -> float:
        """Expected bits of an ``n_bits`` block corrupted by permanent faults."""
        hours = residency_s * HOURS_PER_S + self.fault_exposure_h
        frac = n_bits / self.device_bits
        return sum(
            m.fit_per_device / FIT_HOURS * hours * min(m.footprint_bits, self.device_bits) * frac * 0.5
            for m in self.fault_modes
        )

    def expected_raw_flips(self, n_bits: float, residency_s: float, interval_ms: float, temp_c: float = 45.0) -> float:
        """N (lambda_soft t + BER_ret/2 + BER_approx) + permanent-fault bits (§5(1))."""
        return n_bits * self.p_bit(residency_s, interval_ms, temp_c) + self.fault_flips(n_bits, residency_s)
