"""KV on NAND flash (KVNAND-style, arXiv 2512.03608): ``kind: flash``, a capacity tier like ``kind: memory``.

Layout (KVNAND's page-level KV mapping with head-group parallelism): a read of ``nbytes`` of KV is
``P = ceil(nbytes / page_bytes)`` pages, spread round-robin (by head group) over the ``C`` channels and
the ``W = dies_per_channel x planes_per_die`` units of each channel. The busiest channel holds
``P_c = ceil(P / C)`` pages, sensed in ``ceil(P_c / W)`` waves of ``t_read_us`` (tR) and moved over the
channel bus with the ECC parity (``page_bytes x (1 + ECC storage overhead)`` per page); writes (the
prompt's KV stored at prefill: ``store`` rows) take tPROG per wave and no decode::

    w = ceil(P_c / W), bus = P_c x page_bytes x (1 + overhead) / channel_gbps
    one die per channel:  t = w x tR + bus + t_decode (last codeword)
    several dies:         t = tR + max((w - 1) x tR, bus (w - 1) / w) + bus / w + t_decode

(with several dies, the others sense while one die uses the bus; one die cannot: no cache read), so
small reads are latency-bound (tR) and large ones bandwidth-bound (channels x channel_gbps). Channels
work in parallel. Reads add expected read retries: a page holding a codeword with more than t raw errors
(probability from the ECC's binomial tail at the RBER) is sensed and moved again, once (``p_retry`` x
P_c x (tR + one page on the bus)). Energy: ``read_pj_per_byte`` (array + channel I/O, booked as ``dram_read_write``)
plus the ECC decoder's pJ/B (``ecc``).

Reliability: the raw bit error rate grows with wear and retention (:func:`nand_rber`); the ECC
(``bch_nand`` / ``ldpc_nand`` in hwmodels/reliability/ecc.py) turns it into a codeword failure rate and
UBER (:func:`uber`). :meth:`FlashModel.reliability_tier` gives the tier entry of a ``reliability:``
section, so the accuracy proxy and the tiering planner see the same tier.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import HARDWARE_COUNT, ConfigError, Plausible, Schema
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import OpCost
from attnsim.hwmodels.reliability import ecc as _ecc

# Raw bit error rate of 3D TLC NAND vs wear and retention [M]: ~1e-4 early in life rising to ~1e-3 at the
# rated endurance, roughly exponential in P/E cycles (Mielke et al., "Bit error rate in NAND flash
# memories", IRPS'08; Cai et al., "Error characterization, mitigation, and recovery in flash-memory-based
# solid-state drives", Proc. IEEE 2017), and growing with retention time (same sources). Anchors [M]:
RBER_FRESH = 1.0e-4  # 0 P/E cycles, freshly written
PE_RATED = 3000.0  # rated endurance of 3D TLC [M]; RBER x10 at the rated P/E count
RETENTION_DOUBLING_DAYS = 365.0  # RBER x(1 + days / 365): doubles after a year of retention [M]

NAND_ECC = ("bch_nand", "ldpc_nand")


def nand_rber(pe_cycles: float, retention_days: float) -> float:
    """Raw bit error probability per read (see the anchors above)."""
    if pe_cycles < 0 or retention_days < 0:
        raise ValueError("pe_cycles and retention_days must be >= 0")
    # clamp in log space: 10 ** (pe_cycles / PE_RATED) overflows a float beyond ~3e5 rated lifetimes
    log10 = math.log10(RBER_FRESH) + pe_cycles / PE_RATED + math.log10(1.0 + retention_days / RETENTION_DOUBLING_DAYS)
    return float(min(0.5, 10.0 ** min(log10, math.log10(0.5))))


def uber(scheme: _ecc.EccScheme, p: float) -> float:
    """Uncorrectable bit error rate after ECC (JEDEC JESD218 style: failed codewords per data bit read):
    P(more than t bit errors in the n-bit codeword) / k, the binomial tail of the scheme's outcome."""
    o = scheme.outcome(p)
    return (o.due + o.sdc) / scheme.k_bits


class FlashSpec(Schema):
    plausible = {
        "channels": HARDWARE_COUNT,
        "dies_per_channel": HARDWARE_COUNT,
        "planes_per_die": Plausible(1, 64, "planes per NAND die: 2-6 (ONFI 5; Micron 232-layer: 6)"),
        "pe_cycles": Plausible(
            0, 1e6, "program/erase cycles: QLC ~1e3, TLC ~3e3, SLC ~1e5 rated (JESD218; Cai et al., Proc. IEEE 2017)"
        ),
    }

    kind: Literal["flash"] = "flash"
    name: str
    description: str = ""
    source: str = ""
    capacity_gb: PositiveFloat
    channels: PositiveInt
    dies_per_channel: PositiveInt
    planes_per_die: PositiveInt
    page_kb: PositiveFloat = Field(description="data bytes per page / 1024")
    t_read_us: PositiveFloat = Field(description="page sensing time tR")
    t_program_us: PositiveFloat = Field(description="page program time tPROG (KV written at prefill)")
    channel_gbps: PositiveFloat = Field(description="channel bus rate, 1e9 B/s")
    read_pj_per_byte: float = Field(ge=0, description="array read + channel I/O energy per data byte")
    ecc: Literal[NAND_ECC] = "ldpc_nand"
    pe_cycles: float = Field(0.0, ge=0, description="program/erase cycles of the blocks holding the KV (wear)")
    retention_days: float = Field(0.0, ge=0, description="time since the KV was written")
    static_power_w: float = Field(0.0, ge=0)


class FlashModel:
    kind = "flash"
    peak_flops = 0.0

    def __init__(self, spec: FlashSpec):
        self.spec = spec
        self.name = spec.name
        self.scheme = _ecc.get_scheme(spec.ecc)
        o = self.scheme.outcome(self.rber)
        cw = self.page_bytes * 8.0 / self.scheme.k_bits  # codewords per page
        # a page with a codeword beyond t is read again (read retry with shifted references, assumed to
        # succeed [M]): probability per page read
        self.p_retry = float(-np.expm1(cw * np.log1p(-min(o.due + o.sdc, 1.0)))) if o.due + o.sdc < 1.0 else 1.0

    @property
    def page_bytes(self) -> float:
        return self.spec.page_kb * 1024.0

    @property
    def capacity_bytes(self) -> float:
        return self.spec.capacity_gb * 1e9

    @property
    def static_power_w(self) -> float:
        return self.spec.static_power_w

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        """Data bandwidth of all channels (parity excluded)."""
        return self.spec.channels * self.spec.channel_gbps * 1e9 / (1.0 + self.scheme.storage_overhead)

    @property
    def rber(self) -> float:
        return nand_rber(self.spec.pe_cycles, self.spec.retention_days)

    def read_time_s(self, nbytes, write: bool = False) -> np.ndarray:
        """Time to read (``write``: program, tPROG per wave, no decode) ``nbytes`` of KV (module docstring)."""
        s = self.spec
        b = np.asarray(nbytes, dtype=np.float64)
        pages = np.ceil(b / self.page_bytes)
        per_ch = np.ceil(pages / s.channels)
        waves = np.ceil(per_ch / (s.dies_per_channel * s.planes_per_die))
        bus = per_ch * self.page_bytes * (1.0 + self.scheme.storage_overhead) / (s.channel_gbps * 1e9)
        t_cell = (s.t_program_us if write else s.t_read_us) * 1e-6
        if s.dies_per_channel == 1:  # one die cannot sense (program) and use the bus at once
            t = waves * t_cell + bus
        else:  # other dies sense while one transfers: only the first wave is exposed
            t = (
                t_cell
                + np.maximum((waves - 1) * t_cell, bus * (waves - 1) / np.maximum(waves, 1))
                + bus / np.maximum(waves, 1)
            )
        if not write:  # + decode of the last codeword + expected read retries on the busiest channel
            page_bus = self.page_bytes * (1.0 + self.scheme.storage_overhead) / (s.channel_gbps * 1e9)
            t = t + self.scheme.decode_latency_s + self.p_retry * per_ch * (t_cell + page_bus)
        return np.where(b > 0, t, 0.0)

    def cost(self, trace, rows) -> OpCost:
        rows = np.asarray(rows, dtype=np.int64)
        bad = rows[trace["cls"][rows] != "transfer"]
        if len(bad):
            raise ConfigError(f"no operator can run on flash {self.name!r}", key=str(trace["op"][bad[0]]))
        nbytes = trace["comm_bytes"][rows].astype(np.float64)
        write = np.char.find(trace["op"][rows].astype(str), "store") >= 0  # mapper/offload.py: (host_)store_kv
        time = np.where(write, self.read_time_s(nbytes, write=True), self.read_time_s(nbytes))
        return OpCost(
            time_s=time,
            energy_j={
                "dram_read_write": nbytes * self.spec.read_pj_per_byte * 1e-12,
                "ecc": nbytes * self.scheme.energy_pj_per_byte * 1e-12,
            },
            bytes_by_level={"flash": nbytes},
            flops=np.zeros(len(rows)),
            bound=np.full(len(rows), "memory", dtype=object),
        )

    def reliability_tier(self) -> dict:
        """This device as a tier of a ``reliability:`` section (hwmodels/reliability/spec.py TierSchema):
        streaming rate, read energy, no refresh, its ECC on every field, RBER as the static raw error
        rate (``ber_approx``; NAND has no DRAM-like soft or retention mechanism in this model)."""
        return {
            "read_gbps": self.peak_bandwidth_bytes_per_s / 1e9,
            "read_pj_per_byte": self.spec.read_pj_per_byte + self.scheme.energy_pj_per_byte,
            "refresh_mw_per_gb": 0.0,
            "capacity_gb": self.spec.capacity_gb,
            "ecc": {"high": self.spec.ecc, "low": self.spec.ecc},
            "errors": {"lambda_soft_per_bit_h": 0.0, "ber_approx": self.rber},
        }


registry.register("flash", FlashSpec, FlashModel)
