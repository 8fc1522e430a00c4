"""Numbers, YAML and JSON rules shared by every reader (issue 10: no non-finite or wrapped numbers)."""
from __future__ import annotations

import math

import pytest

from attnsim.config import (INT_LIMIT, YAML_MAX_VALUES, ConfigError, check_float, check_int, load_yaml,
                            parse_set, parse_yaml, read_text_file, validate)


# ---------------------------------------------------------------- check_int / check_float

@pytest.mark.parametrize("value, expected", [(5, 5), ("12", 12), ("0x10", 16), (" -3 ", -3), (4.0, 4),
                                             (INT_LIMIT, INT_LIMIT)])
def test_check_int_accepts(value, expected):
    assert check_int(value) == expected


@pytest.mark.parametrize("value", [2 ** 63, INT_LIMIT + 1, "18446744073709551616", True, 1.5, "1e30",
                                   "12abc", None, math.inf, "1_000"])
def test_check_int_refuses_with_one_line(value):
    with pytest.raises(ConfigError) as e:
        check_int(value, file="trace.csv", key="line 3")
    msg = str(e.value)
    assert msg.startswith("trace.csv: line 3: expected an integer in [-2**53, 2**53], got ")
    assert "\n" not in msg


def test_check_int_tighter_bounds():
    assert check_int(7, lo=0, hi=7) == 7
    with pytest.raises(ConfigError, match=r"p.s: line 2: expected an integer in \[0, 255\], got '256'"):
        check_int("256", file="p.s", key="line 2", lo=0, hi=255)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", "nan", "1e999", 10 ** 400])
def test_check_float_refuses_non_finite(value):
    with pytest.raises(ConfigError, match=r"^t.csv: arrival_s: expected a finite number, got (-?inf|nan)$"):
        check_float(value, file="t.csv", key="arrival_s")


def test_check_float_accepts_and_bounds():
    assert check_float("2.5") == 2.5 and check_float(3) == 3.0
    with pytest.raises(ConfigError, match="expected a number in"):
        check_float(-1, lo=0)


# ---------------------------------------------------------------- read_text_file

def test_read_text_file_non_utf8_names_offset(tmp_path):
    p = tmp_path / "reqs.csv"
    p.write_bytes(b"arrival_s,prompt\n0.0,1\xff\n")
    with pytest.raises(ConfigError) as e:
        read_text_file(p, file="reqs.csv")
    assert str(e.value) == "reqs.csv: not UTF-8 text: invalid byte 0xff at byte offset 22"


def test_read_text_file_errors_and_bom(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        read_text_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="expected a file, got a directory"):
        read_text_file(tmp_path)
    p = tmp_path / "bom.yaml"
    p.write_bytes("\ufeffa: 1\n".encode())
    assert read_text_file(p) == "a: 1\n"
