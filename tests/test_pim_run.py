"""attnsim.pim.run / `attnsim pim run`: a user's PIM program on a device, against hand-derived numbers."""

import json

import pytest

from attnsim.cli import main
from attnsim.core.config import ConfigError
from attnsim.sim.pim import load_device, run

STACK = "attacc_hbm3_pim_stack"  # hbm3_5200_pim: act_pj 901.1, pim.access_pj_per_bit 0.55; pu.pj_per_mac 0.32


def groups(n: int, r: int, ch: int = 0) -> str:
    """n all-bank groups on channel ch: ACTAB row i, r MAC columns, PREA."""
    return "\n".join(f"ACTAB {ch}, {i}\nMACAB {ch}, 0, {r}\nPREA {ch}" for i in range(n)) + "\n"


def test_allbank_groups_time_and_energy_by_hand():
    n, r = 8, 32
    res = run(groups(n, r), STACK)
    dev, _ = load_device(STACK)
    t, p, o = dev.dram.timing, dev.dram.pim, dev.dram.org
    rcd = p.nRCDRDMAC or t.nRCDRD
    # row period: the next ACTAB waits for nRC and for PREA (last MAC + nRTP, >= nRAS) + nRP
    period = max(t.nRC, max(t.nRAS, rcd + (r - 1) * p.nCCDAB + t.nRTP) + t.nRP)
    assert n * period < t.nREFI  # no refresh falls inside
    # the last group ends when its last MAC's data completes (nCL + nBL after issue)
    assert res.cycles == (n - 1) * period + rcd + (r - 1) * p.nCCDAB + t.nCL + t.nBL
    assert res.time_s == pytest.approx(res.cycles * o.tck_ns * 1e-9)
    banks = o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group  # 64 per channel
    e = res.energy_j_by_class
    assert e["act_pre"] == pytest.approx(n * banks * 901.1e-12)
    assert e["mac"] == pytest.approx(n * r * banks * (32 * 8 * 0.55e-12 + 16 * 0.32e-12))
    assert e["column_rw"] == e["buffer"] == e["refresh"] == 0.0
    assert e["static"] == pytest.approx(dev.static_power_w * res.time_s)
    assert res.commands_by_class["act_pre"] == 2 * n and res.commands_by_class["mac"] == n * r
    assert res.channels_used == 1 and res.macs == n * r * banks * 16
    # time by class: occupancy of each class's resource, by hand; each within the program's time
    b, tck = res.busy_s_by_class, o.tck_ns * 1e-9
    assert b["mac"] == pytest.approx(n * r * p.nCCDAB * tck)
    assert b["act_pre"] == pytest.approx(n * (t.nRCDRD + t.nRP) * tck)
    assert b["column_rw"] == b["buffer"] == b["refresh"] == 0.0
    assert all(0.0 <= v <= res.time_s for v in b.values())


def test_long_program_pays_refresh_and_channels_run_in_parallel():
    one = run(groups(40, 32), STACK)
    dev, _ = load_device(STACK)
    t = dev.dram.timing
    assert one.commands_by_class["refresh"] >= 1 and one.energy_j_by_class["refresh"] > 0
    assert one.cycles > 40 * 232 - 232  # not faster than the refresh-free row period (232 cycles, closed form)
    two = run(groups(40, 32, 0) + groups(40, 32, 5), STACK)  # same stream on channels 0 and 5
    assert two.channels_used == 2 and two.cycles == one.cycles
    for k in ("act_pre", "mac", "refresh"):
        assert two.energy_j_by_class[k] == pytest.approx(2 * one.energy_j_by_class[k])
    assert t.nREFI < 40 * 232
    # 400 rows: the all-bank stream rate, refresh included, within 1 % of the closed form (pim_dram.md; 334 GB/s)
    from attnsim.hwmodels.pim import allbank_closed_form

    long = run(groups(400, 32), STACK)
    o = dev.dram.org
    rate = 400 * 32 * o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group * o.burst_bytes / long.time_s
    assert rate == pytest.approx(allbank_closed_form(dev.dram, 32)["bytes_per_s"], rel=0.01)


def test_aim_mask_broadcast_and_cxl_stream_bound():
    a1 = run("MAC_ABK 8, 0x1, 5\nEOC\n", "aim_gddr6_channel")
    a3 = run("MAC_ABK 8, 0x7, 5\nEOC\n", "aim_gddr6_channel")
    assert a3.channels_used == 3 and a3.cycles == a1.cycles
    dev, _ = load_device("aim_gddr6_channel")  # ACT16, then 8 MAC16 nCCDAB apart; the last one's data after nCL + nBL
    t, p = dev.dram.timing, dev.dram.pim
    assert a1.cycles == p.nRCDRDMAC + 7 * p.nCCDAB + t.nCL + t.nBL
    assert a3.energy_j_by_class["mac"] == pytest.approx(3 * a1.energy_j_by_class["mac"])
    res = run("GEMV 1, 0, 0, 4096, 4096\nHALT\n", "cxl_pnm_lpddr5x")  # 4096 x 4096 FP16 = 32 MiB streamed once
    dev, _ = load_device("cxl_pnm_lpddr5x")
    assert res.time_s >= 4096 * 4096 * 2 / (dev.dram.peak_bandwidth_gbps * 1e9 * dev.spec.units)
    assert res.macs == 4096 * 4096 and res.commands_by_class["column_rw"] == 4096 * 4096 * 2 // dev.dram.org.burst_bytes


def test_cli_text_and_binary_agree_and_bad_input_is_one_line(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text(groups(3, 16))
    assert main(["asm", "--isa", "attacc", str(src)]) == 0
    capsys.readouterr()
    docs = []
    for f in (src, tmp_path / "p.bin"):
        assert main(["pim", "run", str(f), "--device", STACK, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert {**docs[0], "program": ""} == {**docs[1], "program": ""}
    assert main(["pim", "run", str(src), "--device", STACK]) == 0
    out = capsys.readouterr().out
    assert "act_pre" in out and f"{docs[0]['cycles']} cycles" in out
    bad = tmp_path / "bad.s"
    bad.write_text("ACTAB 0, 1\nMAC_ABK 8, 0x1, 5\n")  # an AiM instruction in an AttAcc program
    cases = [
        ([str(bad), "--device", STACK], f"{bad}: line 2: unknown opcode 'MAC_ABK' for ISA attacc"),
        ([str(src), "--device", "h100_sxm"], "--device: expected a hardware config of kind pim"),
        ([str(src), "--device", STACK, "--isa", "aim"], "expected a program for isa attacc"),
        ([str(tmp_path / "p.bin"), "--device", "aim_gddr6_channel"], "p.bin: word"),
    ]
    out_json = tmp_path / "o.json"
    for args, msg in cases:
        assert main(["pim", "run", *args, "-o", str(out_json)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err and err.count("\n") == 1, err
        assert not out_json.exists()
    with pytest.raises(ConfigError, match=r"<text>: line 1: ACTAB: ch 16 is beyond the device's 16 channels"):
        run("ACTAB 16, 0\n", STACK)
    with pytest.raises(ConfigError, match=r"<text>: line 2: ACTAB: operand row: expected an integer in \[0, 16383\]"):
        run("BARRIER 0\nACTAB 0, 16384\n", STACK)  # the ISA's 16-bit row field is wider than the stack's rows
    with pytest.raises(ConfigError, match=r"<text>: the program expands to .* engine command records, the limit"):
        run("GEMV 1, 0, 0, 16000000, 60000, FP32\nHALT\n", "cxl_pnm_lpddr5x")  # 3.8 TB: refused before expanding
