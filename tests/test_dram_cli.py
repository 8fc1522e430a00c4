"""`attnsim dram` CLI: JSON keys, trace parsing errors with file:line, overrides."""

import json

import pytest

from attnsim.cli import main
from attnsim.cli.dram import JSON_KEYS


def run(capsys, *argv):
    rc = main(["dram", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_the_contract_keys_and_respects_peak(capsys):
    rc, out, _ = run(
        capsys,
        "--device",
        "lpddr5_6400",
        "--pattern",
        "random",
        "--requests",
        "3000",
        "--write-fraction",
        "0.3",
        "--json",
        "--channels",
        "2",
        "--banks",
        "8",
    )
    assert rc == 0
    d = json.loads(out)
    for k in JSON_KEYS:
        assert k in d
    assert d["bandwidth_gbps"] <= d["peak_bandwidth_gbps"]
    assert d["peak_bandwidth_gbps"] == pytest.approx(2 * 12.8)
    assert d["row_hits"] + d["row_misses"] + d["row_conflicts"] == 3000
    assert d["time_s"] == pytest.approx(d["cycles"] * d["tck_s"])
    assert set(d["energy_j"]) == {"dram_activate", "dram_read_write", "dram_io", "dram_refresh", "dram_background"}


def test_no_refresh_and_table_output(capsys):
    rc, out, _ = run(capsys, "--device", "hbm2_2000", "--requests", "20000", "--no-refresh", "--json")
    assert json.loads(out)["refresh_time_s"] == 0
    rc, out, _ = run(capsys, "--device", "hbm2_2000", "--requests", "2000", "--pattern", "strided", "--stride", "8192")
    assert rc == 0 and "bandwidth" in out


def test_trace_and_errors(capsys, tmp_path):
    t = tmp_path / "ok.trace"
    t.write_text("# addr rw arrival\n0x0 R\n0x20 W 4\n0x40 r 9\n")
    rc, out, _ = run(capsys, "--device", "hbm2_2000", "--trace", str(t), "--json")
    assert rc == 0 and json.loads(out)["bytes"] == 96
    bad = tmp_path / "bad.trace"
    for text, what in (
        ("0x0 R\n0x20 X\n", ": line 2: expected R or W"),
        ("0x0 R\nqq R\n", ": line 2: expected a hex address"),
        ("0x0 R 5\n0x20 R 2\n", ": line 2: arrival cycles must not decrease"),
        ("0x0 R 1 2\n", ": line 1: expected '<hex address>"),
    ):
        bad.write_text(text)
        rc, out, err = run(capsys, "--device", "hbm2_2000", "--trace", str(bad))
        assert rc == 2 and what in err and out == ""
    rc, out, err = run(capsys, "--device", "nosuch_dram")
    assert rc == 2 and "unknown hardware config" in err
    rc, out, err = run(capsys, "--device", "hbm2_2000", "--banks", "3")
    assert rc == 2 and "--banks" in err
    rc, out, err = run(capsys, "--device", "hbm2_2000", "--mapping", "RoCh")
    assert rc == 2 and "mapping" in err


def test_periodic_pattern_is_extrapolated_unless_disabled(capsys):
    argv = ("--device", "lpddr5_6400", "--channels", "1", "--requests", "400000", "--json")
    d = json.loads(run(capsys, *argv)[1])
    full = json.loads(run(capsys, *argv, "--no-extrapolate")[1])
    assert d["extrapolated"] is True and full["extrapolated"] is False and full["steady"] is None
    assert d["steady"]["simulated_requests"] < 400000
    assert d["cycles"] == pytest.approx(full["cycles"], rel=1e-3)
    rnd = json.loads(run(capsys, "--device", "lpddr5_6400", "--pattern", "random", "--requests", "2000", "--json")[1])
    assert rnd["extrapolated"] is False


def test_dram_command_imports_only_the_dram_path():
    """`attnsim dram` registers only its own command and loads neither the rest of the simulator nor scipy.linalg /
    h5py / pandas / matplotlib (start-up counts in the whole-process speed, issue 13); `attnsim` lists every command."""
    import subprocess
    import sys

    from attnsim.cli import build_parser

    assert set(build_parser(["dram"])._subparsers._group_actions[0].choices) == {"dram"}
    assert {"dram", "run", "sweep"} <= set(build_parser([])._subparsers._group_actions[0].choices)
    code = (
        "import sys; from attnsim.cli import main; "
        "rc = main(['dram', '--device', 'hbm2_2000', '--requests', '64', '--json']); "
        "print(rc, sorted(m for m in sys.modules if m.startswith(('attnsim.', 'scipy.linalg', 'h5py', 'pandas', "
        "'matplotlib')))); import scipy.linalg"
    )  # the BLAS probe left scipy importable
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rc, mods = p.stdout.strip().splitlines()[-1].split(" ", 1)
    assert rc == "0"
    heavy = [
        m
        for m in eval(mods)
        if not m.startswith(("attnsim.hwmodels.dram", "attnsim.cli", "attnsim.core.config"))
        and m
        not in (
            "attnsim.hwmodels",
            "attnsim.hwmodels.registry",
            "attnsim.cli.warmup",
            "attnsim._version",
            "attnsim.core.jitcache",
            "attnsim.core.fingerprint",
            "attnsim.core.notices",
            "attnsim.core.fileio",  # fileio: the bounded reader of every file (stdlib only)
            "attnsim.core",
            "attnsim.configs",
        )
    ]  # the layer package (a docstring), built-in YAML
    assert heavy == []
