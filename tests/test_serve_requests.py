"""Request traces: seeded synthetic arrivals/lengths and user files with line-numbered errors."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, validate
from attnsim.studies.serve.requests import LengthDist, TraceSpec, read_trace_file, synthetic_trace


def _spec(**kw):
    return validate(TraceSpec, kw)


def test_same_seed_same_trace_and_other_seed_differs():
    s = _spec(
        num_requests=500,
        rate_per_s=3.0,
        prompt={"dist": "lognormal", "mean": 700, "std": 300},
        output={"dist": "uniform", "low": 10, "high": 90},
        prefix={"num_prefixes": 3, "tokens": 64, "fraction": 0.5},
        seed=4,
    )
    a, b = synthetic_trace(s, 1, 1), synthetic_trace(s, 1, 1)
    for f in ("arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    c = synthetic_trace(s.model_copy(update={"seed": 5}), 1, 1)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_poisson_rate_and_exponential_gaps():
    n, rate = 20000, 4.0
    t = synthetic_trace(_spec(num_requests=n, rate_per_s=rate, seed=1), 10, 10).arrival_s
    gaps = np.diff(t)
    # mean gap 1/rate within 4 standard errors (exponential: sd = mean)
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / np.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # CV of the exponential is 1
    assert t[0] == 0.0 and np.all(gaps >= 0)


def test_gamma_burstiness_cv():
    t = synthetic_trace(_spec(num_requests=20000, rate_per_s=2.0, arrival="gamma", cv=3.0, seed=2), 1, 1).arrival_s
    g = np.diff(t)
    assert abs(g.mean() - 0.5) < 0.05
    assert 2.7 < g.std() / g.mean() < 3.3


def test_length_distributions():
    rng = np.random.default_rng(0)
    x = validate(LengthDist, {"dist": "lognormal", "mean": 1000, "std": 400}).sample(rng, 40000)
    assert abs(x.mean() - 1000) < 10 and abs(x.std() - 400) < 12
    u = validate(LengthDist, {"dist": "uniform", "low": 5, "high": 9}).sample(rng, 5000)
    assert u.min() == 5 and u.max() == 9
    c = validate(LengthDist, {"dist": "lognormal", "mean": 1000, "std": 2000, "high": 1500}).sample(rng, 1000)
    assert c.max() <= 1500 and c.min() >= 1


def test_defaults_and_prefix_lengths():
    t = synthetic_trace(_spec(num_requests=50, prefix={"tokens": 32, "fraction": 1.0, "num_prefixes": 2}), 100, 7)
    assert np.all(t.arrival_s == 0) and np.all(t.output_tokens == 7)
    assert np.all(t.prompt_tokens == 132) and np.all(t.prefix_tokens == 32) and set(t.prefix_id) <= {0, 1}


def test_csv_and_jsonl_files(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id\n0.5,100,10,\n0.1,200,20,3\n")
    t = read_trace_file(p, default_prefix=64)
    assert list(t.arrival_s) == [0.1, 0.5] and list(t.prompt_tokens) == [200, 100]
    assert list(t.prefix_id) == [3, -1] and list(t.prefix_tokens) == [64, 0]
    j = tmp_path / "r.jsonl"
    j.write_text(
        '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n\n{"arrival_s": 1, "prompt_tokens": 6, '
        '"output_tokens": 3, "prefix_id": 0, "prefix_tokens": 4}\n'
    )
    t = read_trace_file(j)
    assert list(t.prefix_tokens) == [0, 4]


@pytest.mark.parametrize(
    "body,line,words",
    [
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,abc,5\n", "line 3", "prompt_tokens: expected a number"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10,0\n", "line 2", "output_tokens: expected an integer >= 1"),
        ("arrival_s,prompt_tokens,output_tokens\n-1,10,3\n", "line 2", "arrival_s"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10.5,3\n", "line 2", "expected an integer"),
        (
            "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,3,1,20\n",
            "line 2",
            "exceed prompt_tokens",
        ),
        ("arrival_s,prompt_tokens,colour\n0,10,3\n", "line 2", "unknown column"),
    ],
)
def test_bad_rows_name_the_line(tmp_path, body, line, words):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ConfigError) as e:
        read_trace_file(p)
    assert line in str(e.value) and words in str(e.value) and "bad.csv" in str(e.value)


def test_bad_jsonl_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n{"arrival_s": 0, "prompt_tokens": 5\n')
    with pytest.raises(ConfigError, match="line 2: invalid JSON"):
        read_trace_file(p)
