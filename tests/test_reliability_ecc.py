"""ECC closed forms vs Monte Carlo (real decoders), and hand-derived facts about the codes."""

from itertools import combinations
from math import comb

import numpy as np
import pytest

from attnsim.hwmodels.reliability import ecc
from attnsim.hwmodels.reliability.inject import monte_carlo_outcomes


@pytest.mark.parametrize(
    "name,p,n",
    [
        ("none", 3e-3, 20000),
        ("secded", 3e-3, 40000),
        ("secded", 1e-2, 40000),
        ("secded_8_4", 2e-2, 100000),
        ("ondie_sec", 1e-2, 20000),
        ("chipkill", 1e-2, 20000),
        ("hbm3_ondie", 3e-3, 20000),
        ("rs2", 1e-2, 1500),
    ],
)
def test_monte_carlo_matches_closed_form(name, p, n):
    cf = ecc.get_scheme(name).outcome(p)
    mc = monte_carlo_outcomes(name, p, n, seed=7)
    for key in ("ok", "corrected", "due", "sdc"):
        pc = getattr(cf, key)
        sigma = np.sqrt(max(pc * (1 - pc), 1.0 / n) / n)
        assert abs(mc[key] / n - pc) < 4.5 * sigma + 1e-12, (key, mc[key] / n, pc)


def test_outcomes_sum_to_one_and_none_is_binomial():
    for s in ecc.SCHEMES.values():
        o = s.outcome(1e-3)
        assert o.ok + o.corrected + o.due + o.sdc == pytest.approx(1.0, abs=1e-9)
    o = ecc.get_scheme("none").outcome(1e-3)
    assert o.ok == pytest.approx((1 - 1e-3) ** 64)


def test_secded_weight_classes_by_brute_force():
    cols = ecc.hamming_columns("secded_hsiao_72_64")
    assert np.all([bin(int(c)).count("1") % 2 == 1 for c in cols])  # Hsiao: odd-weight columns
    frac = ecc._weight_fractions("secded_hsiao_72_64", True)
    assert tuple(frac[1][:3]) == (1.0, 0.0, 0.0)  # single errors corrected
    assert tuple(frac[2][:3]) == (0.0, 1.0, 0.0)  # double errors detected
    colset = set(int(c) for c in cols)
    mis = sum(1 for a, b, c in combinations(cols.tolist(), 3) if (a ^ b ^ c) in colset)
    assert frac[3][2] == pytest.approx(mis / comb(72, 3))


def test_ondie_sec_is_silent_beyond_one_error():
    o = ecc.get_scheme("ondie_sec").outcome(1e-3)
    assert o.due == 0.0
    pmf1 = 136 * 1e-3 * (1 - 1e-3) ** 135
    assert o.corrected == pytest.approx(pmf1)
    assert o.sdc == pytest.approx(1 - (1 - 1e-3) ** 136 - pmf1)


def test_overheads():
    assert ecc.get_scheme("secded").storage_overhead == pytest.approx(0.125)
    assert ecc.get_scheme("ondie_sec").storage_overhead == pytest.approx(0.0625)
    assert ecc.get_scheme("ondie_sec").visible_overhead == 0.0
    assert ecc.get_scheme("chipkill").storage_overhead == pytest.approx(0.125)
    assert ecc.get_scheme("rs2").storage_overhead == pytest.approx(36 * 34 / (32 * 32) - 1)
    assert ecc.get_scheme("rs2").energy_pj_per_byte == pytest.approx(17.5 / 3.56e12 * 1e12, rel=0.01)  # REACH


def test_strong_codes_reduce_silent_errors():
    p = 1e-3
    silent = {n: ecc.get_scheme(n).outcome(p).silent_bits_per_data_bit for n in ("none", "secded", "chipkill", "rs2")}
    assert silent["none"] == pytest.approx(p)
    assert max(silent["rs2"], silent["chipkill"]) < silent["secded"] / 5 < silent["none"] / 5
    # REACH: two-level RS keeps the detected-uncorrectable rate low at raw BER 1e-3 (per 1 KB group),
    # where a 32 B on-die-style symbol code alone fails several per cent of its codewords
    assert ecc.get_scheme("rs2").outcome(1e-3).due < 1e-3 < ecc.get_scheme("hbm3_ondie").outcome(1e-3).due
