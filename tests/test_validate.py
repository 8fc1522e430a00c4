"""attnsim validate: the bundled validation set passes; a row outside tolerance makes the exit non-zero."""

import json

from attnsim.cli import main
from attnsim.studies import validate


def test_attacc_reproduction_and_limits_within_tolerance(capsys):
    rc = main(["validate", "--set", "attacc", "--set", "limits", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0, [r for r in rows if not r["ok"]]
    names = {r["name"] for r in rows if r["set"] == "attacc"}
    assert len(names) >= 6  # the rows of the old configs/validation/attacc.yaml (tests/test_reproductions.py)
    assert sum(r["set"] == "limits" for r in rows) >= 10
    # AttAcc: no attnsim parameter was set from its rows; limits are physical bounds
    assert {r["role"] for r in rows if r["set"] == "limits"} == {"limit"}
    assert all(
        r["role"] in ("validation", "calibration") and r["system"] == "attacc" for r in rows if r["set"] == "attacc"
    )


def test_gpu_calibration_rows_within_stated_tolerance(capsys):
    rc = main(["validate", "--set", "gpu", "--json"])
    rows = json.loads(capsys.readouterr().out)
    fit = [r for r in rows if r["role"] == "calibration"]  # the presets were fitted to every vidur row
    attn = [r for r in fit if "decode attention" in r["name"]]  # + the two FA3 rows h100 attention was set from
    assert len(attn) == 2 and all("FA3" in r["name"] for r in attn)
    assert len(fit) == 2 * (9 + 6) * 5 + 2 and all("tok [us]" in r["name"] for r in fit if r not in attn)
    held = [r for r in rows if r["role"] == "validation"]  # LLMCompass: 10 GEMMs with K >= 1024, decode + prefill
    # layer; H100 decode attention kernels: FA3 ctx 2,000, FA2 x 4, ONNX Runtime x 5
    assert len(held) == 12 + 10 and all(
        any(s in r["name"] for s in ("LLMCompass", "GPT-3 layer", "decode attention")) for r in held
    )
    assert len(rows) == len(fit) + len(held)
    assert rc == 0, [r["name"] for r in rows if not r["ok"]]


def test_row_outside_tolerance_fails_the_command(monkeypatch, capsys):
    monkeypatch.setattr(validate, "SETS", {"fake": lambda: [validate.Row("fake", "x", 1.3, 1.0, 0.25)]})
    assert main(["validate"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_sections_by_role_and_unknown_set(monkeypatch, capsys):
    rows = [
        validate.Row("fake", "fit row", 1.0, 1.0, 0.1, role="calibration"),
        validate.Row("fake", "held-out row", 1.3, 1.0, 0.1, role="validation"),
        validate.Row("fake", "bound row", 0.5, 1.0, 0.0, check="upper_bound", role="limit"),
    ]
    monkeypatch.setattr(validate, "SETS", {"fake": lambda: rows})
    assert main(["validate"]) == 1
    out = capsys.readouterr().out
    parts = [
        out.index(s)
        for s in (
            "calibration rows",
            "fit row",
            "1 of 1 calibration",
            "validation rows",
            "held-out row",
            "0 of 1 validation rows within tolerance; 1 outside",
            "limit rows",
            "bound row",
            "1 of 1 limit",
            "2 of 3 rows within tolerance",
        )
    ]
    assert parts == sorted(parts)
    assert main(["validate", "--set", "nope"]) == 2
    assert "reproductions/NAME" in capsys.readouterr().err


def test_row_semantics():
    assert validate.Row("s", "r", 1.2, 1.0, 0.25).ok
    assert not validate.Row("s", "r", 0.7, 1.0, 0.25).ok
    assert validate.Row("s", "r", 0.99, 1.0, 0.0, check="upper_bound").ok
    assert not validate.Row("s", "r", 1.01, 1.0, 0.0, check="upper_bound").ok


def test_bracket_row_printed_with_its_interval(monkeypatch, capsys):
    # an MLPerf-style Server row: the true value lies in [75.1, 84.48]; 89.9 is 89.9 / 84.48 - 1 = +6.4 % above it
    rows = [validate.Row("fake", "server row", 89.9, 75.1, 0.1, check="bracket", published_high=84.48)]
    monkeypatch.setattr(validate, "SETS", {"fake": lambda: rows})
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "75.10-84.48" in out and "+6.4%" in out and "±10%" in out
