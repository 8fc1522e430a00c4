"""DRAM specs: presets load, derived peak bandwidth by hand, impossible specs rejected with file + key."""

import copy

import pytest
import yaml

from attnsim.core.config import ConfigError
from attnsim.hwmodels import registry
from attnsim.hwmodels.dram import energy_params, load_dram_spec

PRESETS = [
    "hbm2_2000",
    "hbm3_5200_pim",
    "hbm3_5200_pim_npc",
    "hbm3_6400",
    "hbm3e_9600",
    "lpddr5_6400",
    "lpddr5x_8533",
    "gddr6_aim",
    "ddr5_4800",
]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_register(name):
    spec = load_dram_spec(name)
    assert spec.name == name
    dev = registry.build(yaml.safe_load(open(f"configs/hardware/{name}.yaml")), file=name)
    assert dev.spec == spec
    e = energy_params(spec)
    assert e.act_pj > 0 and e.rd_pj_per_bit > 0 and e.background_w > 0


@pytest.mark.parametrize(
    "name,gbps",
    [
        ("hbm2_2000", 8 * 2 * 16.0),  # dram_timing.md: 16 GB/s per PC, 8 ch x 2 PC
        ("hbm3_6400", 16 * 2 * 25.6),  # 25.6 GB/s per PC
        ("lpddr5_6400", 4 * 12.8),  # x16 12.8 GB/s
        ("lpddr5x_8533", 4 * 17.07),  # devices.md (a)
        ("hbm3e_9600", 1228.8),  # devices.md (b)
        ("ddr5_4800", 38.4),  # devices.md (c) DIMM
    ],
)
def test_peak_bandwidth_matches_public_figures(name, gbps):
    assert load_dram_spec(name).peak_bandwidth_gbps == pytest.approx(gbps, rel=0.002)


def test_hbm2_idd_energy_matches_dramsim3_derivation():
    # dram_timing.md §2: DRAMsim3 HBM2 REFab 60.8 nJ at tRFC 260 -> per cycle (250-55) mA x 1.2 V x 1 ns
    e = energy_params(load_dram_spec("hbm2_2000"))
    assert e.ref_pj == pytest.approx(1.2 * 195 * 350)  # our nRFC = 350
    assert e.background_w == pytest.approx(0.066)  # 66 mW active


def _data(name):
    return yaml.safe_load(open(f"configs/hardware/{name}.yaml"))


def _bad(tmp_path, mutate, name="hbm3_6400"):
    d = copy.deepcopy(_data(name))
    mutate(d)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError) as ei:
        load_dram_spec(str(p))
    return str(ei.value)


def test_rejects_nrc_below_nras_plus_nrp(tmp_path):
    msg = _bad(tmp_path, lambda d: d["timing"].update(nRC=40))
    assert "bad.yaml" in msg and "timing.nRC" in msg and "40" in msg


def test_rejects_zero_banks(tmp_path):
    msg = _bad(tmp_path, lambda d: d["org"].update(banks_per_group=0))
    assert "org.banks_per_group" in msg and "positive" in msg


def test_rejects_faw_below_rrd(tmp_path):
    assert "timing.nFAW" in _bad(tmp_path, lambda d: d["timing"].update(nFAW=2))


def test_rejects_inconsistent_burst(tmp_path):
    assert "burst_bytes" in _bad(tmp_path, lambda d: d["org"].update(burst_bytes=64))


def test_rejects_unknown_key_and_bad_mapping(tmp_path):
    assert "timing.nFOO" in _bad(tmp_path, lambda d: d["timing"].update(nFOO=3))
    assert "default_mapping" in _bad(tmp_path, lambda d: d.update(default_mapping="RoBaXxCh"))
    assert "default_mapping" in _bad(tmp_path, lambda d: d.update(default_mapping="RoBaCoCh"))  # Bg missing


def test_rejects_missing_energy(tmp_path):
    def m(d):
        d["energy"].pop("idd")

    assert "energy.ref_pj" in _bad(tmp_path, m)
