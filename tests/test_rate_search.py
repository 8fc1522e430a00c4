"""``attnsim serve --max-rate-under-slo`` (attnsim.studies.rate_search): the bisection brackets a monotone threshold,
and on a single-server queue with a fixed service time (M/D/1) it finds the rate the queueing formula gives."""

from __future__ import annotations

import json
import math

import pytest

from attnsim.cli import main
from attnsim.studies.rate_search import Probe, bisect_rate, max_rate_under_slo, probe_from_doc
from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

# One request at a time (max_batch 1), every request 512 prompt tokens + 2 output tokens: a FIFO single server
# whose service time D (one prefill iteration + one decode iteration) is the same for every request.
MD1 = """name: md1
description: M/D/1 queue
systems: [h100_x1]
models: [llama3-8b]
scenarios:
  fixed: {prompt_len: 512, output_len: 2}
serving:
  trace: {num_requests: 200, rate_per_s: 1.0, seed: 3}
  scheduler: {max_batch: 1}
  slo: {ttft_s: 1.0, tpot_s: 100.0}
"""


@pytest.mark.parametrize("threshold,start", [(7.3, 1.0), (7.3, 50.0), (0.01, 3.0), (123.4, 123.4)])
def test_bisection_brackets_a_monotone_threshold(threshold, start):
    (lo, hi), probes = bisect_rate(lambda r: Probe(r, r <= threshold, {}), start, rel_tol=0.01)
    assert lo <= threshold < hi and hi - lo <= 0.01 * lo
    passed = [p.rate_per_s for p in probes if p.ok]
    failed = [p.rate_per_s for p in probes if not p.ok]
    assert max(passed) == lo and min(failed) == hi  # the bracket's ends are the closest probes on each side
    assert max(passed) < min(failed)  # monotone: no pass above a fail
    # at most: doubling / halving to the bracket (log2 of the ratio) + bisection to 1 % (log2(1 / 0.01) < 7)
    assert len(probes) <= abs(math.log2(threshold / start)) + 2 + 7


def test_bisection_reports_an_open_bracket():
    (lo, hi), probes = bisect_rate(lambda r: Probe(r, True, {}), 1.0, max_probes=5)
    assert math.isinf(hi) and lo == 16.0 and len(probes) == 5  # 1, 2, 4, 8, 16 all pass
    (lo, hi), probes = bisect_rate(lambda r: Probe(r, False, {}), 1.0, max_probes=4)
    assert lo == 0.0 and hi == 0.125  # 1, 1/2, 1/4, 1/8 all fail
    with pytest.raises(ValueError):
        bisect_rate(lambda r: Probe(r, True, {}), 0.0)


def test_probe_verdict_and_confidence():
    m = {
        "ttft_p99": 1.0,
        "tpot_p99": 0.1,
        "ttft_p99_ci_low": 0.9,
        "ttft_p99_ci_high": 1.1,
        "tpot_p99_ci_low": 0.09,
        "tpot_p99_ci_high": 0.11,
    }
    lim = {"ttft_p99": 1.05, "tpot_p99": 0.2}
    p = probe_from_doc({"status": "ok", "metrics": m}, 3.0, lim)
    assert p.ok and not p.decided  # mean below the limit, the interval straddles it
    p = probe_from_doc({"status": "ok", "metrics": m}, 3.0, {"ttft_p99": 1.2, "tpot_p99": 0.2})
    assert p.ok and p.decided
    p = probe_from_doc({"status": "ok", "metrics": m}, 3.0, {"ttft_p99": 0.5, "tpot_p99": 0.2})
    assert not p.ok and p.decided  # the TTFT interval lies above the limit
    assert not probe_from_doc({"status": "does_not_fit"}, 3.0, lim).ok


def _md1_wait_cdf(t: float, lam: float, d: float) -> float:
    """P(W <= t) of the FIFO M/D/1 queue (Erlang 1909; e.g. Kleinrock, Queueing Systems vol. 1, or Brun & Garcia,
    J. Appl. Prob. 37 (2000) eq. 2): with rho = lam d < 1,
        P(W <= t) = (1 - rho) sum_{k=0}^{floor(t/d)} [lam (k d - t)]^k / k! exp(-lam (k d - t)).
    (At t < d only k = 0 remains: (1 - rho) exp(lam t), the probability that the work found on arrival is <= t.)"""
    rho = lam * d
    return (1 - rho) * sum(
        (lam * (k * d - t)) ** k / math.factorial(k) * math.exp(-lam * (k * d - t))
        for k in range(int(math.floor(t / d)) + 1)
    )


def _md1_rate_for_p99_wait(w99: float, d: float) -> float:
    """The arrival rate whose p99 waiting time is ``w99``: P(W <= w99) falls as the rate rises (bisection on it)."""
    lo, hi = 1e-9, (1 - 1e-9) / d
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _md1_wait_cdf(w99, mid, d) >= 0.99 else (lo, mid)
    return lo


def test_md1_known_answer(tmp_path):
    exp = tmp_path / "md1.yaml"
    exp.write_text(MD1)
    (alone,) = serve_experiment(
        *load_serving_experiment(
            exp, ["experiment.serving.trace.num_requests=3", "experiment.serving.trace.rate_per_s=0.01"]
        )
    )
    # requests 100 s apart never queue: TTFT = the prefill, latency = the whole service time D
    prefill_s, d = float(alone["metrics"]["ttft_p50"]), float(alone["metrics"]["latency_p50"])
    assert alone["metrics"]["ttft_p99"] == pytest.approx(prefill_s, rel=1e-9)
    # TTFT = W + prefill: p99 TTFT <= prefill + 4 D  <=>  p99 W <= 4 D
    w99 = 4 * d
    lam_star = _md1_rate_for_p99_wait(w99, d)
    # sanity of the formula: P(W = 0) = 1 - rho; a p99 wait of 4 D needs a load of about 0.56 (computed: 0.5608)
    assert _md1_wait_cdf(0.0, 0.5 / d, d) == pytest.approx(0.5)
    assert 0.55 < lam_star * d < 0.57
    n = 20000
    (s,) = max_rate_under_slo(
        exp,
        [f"experiment.serving.trace.num_requests={n}", f"experiment.serving.slo.ttft_s={prefill_s + w99}"],
        start=1.0,
        rel_tol=0.01,
    )
    lo, hi = s.bracket_per_s
    assert s.rate_per_s == lo and hi - lo <= 0.01 * lo
    # The empirical p99 of 20,000 correlated waits scatters around the formula's: at lam_star, dP(W <= 4D)/d lam
    # x 5 % of lam_star moves the CDF by ~0.004 (computed below), several times the binomial error of a p99 from
    # 20,000 samples (sqrt(0.99 x 0.01 / 20000) = 0.0007, inflated by the queue's correlation); 5 % holds
    assert _md1_wait_cdf(w99, 1.05 * lam_star, d) < 0.99 - 0.003
    assert lo == pytest.approx(lam_star, rel=0.05)
    assert s.at_rate.values["ttft_p99"] <= prefill_s + w99


def test_cli_text_and_json(tmp_path, capsys):
    exp = tmp_path / "md1.yaml"
    exp.write_text(MD1)
    args = [
        "serve",
        str(exp),
        "--set",
        "experiment.serving.trace.num_requests=300",
        "--set",
        "experiment.serving.slo.ttft_s=0.1",
        "--max-rate-under-slo",
        "5",
        "--rate-tolerance",
        "0.1",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "h100_x1 / llama3-8b / fixed: max rate" in out and "p99 TTFT <= 100 ms" in out and "bracket" in out
    assert main(args + ["--json", "--set", "experiment.serving.replications=3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["searches"]
    assert doc["command"] == "serve --max-rate-under-slo"
    lo, hi = s["bracket_per_s"]
    assert s["rate_per_s"] == lo < hi <= 1.1 * lo + 1e-12
    assert s["limits"] == {"ttft_p99": 0.1, "tpot_p99": 100.0} and s["replications"] == 3 and s["confidence"] == 0.95
    at = s["at_rate"]
    assert at["ok"] and at["values"]["ttft_p99"] <= 0.1
    assert at["ci"]["ttft_p99"][0] <= at["values"]["ttft_p99"] <= at["ci"]["ttft_p99"][1]
    assert isinstance(s["decided"], bool) and len(s["probes"]) >= 2


@pytest.mark.parametrize(
    "extra,key",
    [
        (["--rate-tolerance", "0.1"], "--rate-tolerance"),  # only with the search
        (["--max-rate-under-slo", "fast"], "--max-rate-under-slo"),  # not a number
        (["--max-rate-under-slo", "-2"], "--max-rate-under-slo"),  # not positive
        (["--max-rate-under-slo", "--rate-tolerance", "1.5"], "--rate-tolerance"),  # outside (0, 1)
        (["--max-rate-under-slo", "--csv", "x.csv"], "--max-rate-under-slo"),  # writes no results
    ],
)
def test_cli_refusals(tmp_path, capsys, extra, key):
    exp = tmp_path / "md1.yaml"
    exp.write_text(MD1)
    assert main(["serve", str(exp)] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {key}:") and len(err.strip().splitlines()) == 1
