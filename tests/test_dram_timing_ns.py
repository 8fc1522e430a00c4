"""timing_ns: + org.transfers_per_ck -> cycle timings with the JEDEC rounding algorithm (hwmodels/dram/timing_ns.py)."""

import pytest
import yaml

from attnsim.core.config import ConfigError
from attnsim.hwmodels.dram import load_dram_spec
from attnsim.hwmodels.dram.spec import spec_from_dict
from attnsim.hwmodels.dram.timing_ns import ns_to_cycles

# LPDDR5 16 Gb, JESD209-5 values in ns (tRCD, tRPpb, tRAS, tFAW, tRRD, tRFCab, tRFCpb, tREFI): with tCK 1.25 ns
# (6400 MT/s, 8 transfers per CK: WCK 4:1, DDR) they round to the cycles of configs/hardware/lpddr5_6400.yaml
LPDDR5_NS = {
    "nRCDRD": 18,
    "nRCDWR": 18,
    "nRP": 18,
    "nRAS": 42,
    "nFAW": 20,
    "nRRD_S": 5,
    "nRFC": 280,
    "nRFCpb": 140,
    "nREFI": 3906,
}


def _lpddr5(**org):
    d = yaml.safe_load(open("configs/hardware/lpddr5_6400.yaml"))
    for k in LPDDR5_NS:
        d["timing"].pop(k)
    d["timing_ns"] = dict(LPDDR5_NS)
    del d["org"]["tck_ns"]
    d["org"].update({"transfers_per_ck": 8, **org})
    return d


def test_rounding_algorithm():
    assert ns_to_cycles(18, 1.25) == 15  # 14.4 -> 15
    assert ns_to_cycles(3906, 1.25) == 3125  # 3124.8 -> 3125
    assert ns_to_cycles(12.5, 1.25) == 10  # exact: no extra cycle
    assert ns_to_cycles(12.48, 1.25) == 10  # 9.984: within the 2.6 % guard band -> 10, not 11
    assert ns_to_cycles(12.4, 1.25) == 10  # 9.92 -> 10
    assert ns_to_cycles(12.0, 1.25) == 10  # 9.6 -> 10


def test_ns_spec_equals_cycle_preset_and_speed_is_one_value():
    ref = load_dram_spec("lpddr5_6400")
    s = spec_from_dict(_lpddr5(), file="t.yaml")
    assert s.org.tck_ns == ref.org.tck_ns and s.timing == ref.timing
    slow = spec_from_dict(_lpddr5(data_rate_mtps=3200), file="t.yaml")  # tCK 2.5 ns: every ns timing halves
    assert slow.org.tck_ns == 2.5 and slow.timing.nRCDRD == 8 and slow.timing.nREFI == 1563


def test_bad_ns_inputs_are_refused_naming_the_key():
    d = _lpddr5()
    d["timing_ns"]["nRAS"] = "long"
    with pytest.raises(ConfigError, match=r"t.yaml: timing_ns.nRAS: expected a time"):
        spec_from_dict(d, file="t.yaml")
    d = _lpddr5(transfers_per_ck=3)
    with pytest.raises(ConfigError, match=r"org.transfers_per_ck: expected 1, 2, 4, 8 or 16"):
        spec_from_dict(d, file="t.yaml")
    d = _lpddr5(tck_ns=1.25)
    with pytest.raises(ConfigError, match=r"org.tck_ns: give either tck_ns or transfers_per_ck"):
        spec_from_dict(d, file="t.yaml")
