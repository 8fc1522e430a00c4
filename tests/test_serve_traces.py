"""Request trace readers (attnsim/studies/serve/traces.py) on excerpts of the public datasets
(tests/data/traces/README.md), their windows and scales, one-line errors for bad rows, and Mooncake hash ids driving the
prefix cache."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import numpy as np
import pytest

import attnsim.studies.serve.traces as traces
from attnsim.core.config import ConfigError
from attnsim.studies.serve.requests import TraceSpec, build_request_trace, read_trace
from attnsim.studies.serve.run import quick_pool
from attnsim.studies.serve.scheduler import simulate_pool

DATA = Path(__file__).parent / "data" / "traces"
AZ23 = DATA / "azure_conv_2023_head300.csv"
MOON = DATA / "mooncake_conversation_head300.jsonl"


def _oracle_azure(path):
    """Independent parse (datetime.fromisoformat on the first 26 characters: 6 fractional digits)."""
    rows = [ln.split(",") for ln in path.read_text().splitlines()[1:]]
    t = np.array([dt.datetime.fromisoformat(r[0][:26]).replace(tzinfo=dt.timezone.utc).timestamp() for r in rows])
    return t - t[0], np.array([int(r[1]) for r in rows]), np.array([int(r[2]) for r in rows])


def test_azure_2023_excerpt_as_shipped():
    tr, facts = read_trace(AZ23, "azure")
    # the excerpt is the file's header + first 300 rows; rows 1-3 (file lines 2-4):
    # 2023-11-16 18:15:46.6805900,374,44 / 18:15:50.9951690,396,109 / 18:15:51.2224670,879,55
    assert facts == {"format": "azure", "rows_read": 300, "requests": 300, "skipped_failed": 0}
    assert list(tr.prompt_tokens[:3]) == [374, 396, 879] and list(tr.output_tokens[:3]) == [44, 109, 55]
    assert tr.arrival_s[0] == 0.0
    assert tr.arrival_s[1] == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)  # 4.314579 s
    t, p, o = _oracle_azure(AZ23)
    assert np.allclose(tr.arrival_s, t, atol=2e-6)  # the oracle drops the 7th fractional digit (<= 1e-6 s)
    assert (tr.prompt_tokens == p).all() and (tr.output_tokens == o).all()
    assert (tr.prefix_id == -1).all()


@pytest.mark.parametrize(
    "name,first,second,prompts",
    [
        # the first rows of the one-week 2024 files as the dataset's notebook prints them (README in tests/data/traces)
        ("azure_code_2024_head5.csv", 0.009930, 0.017335, [2162, 2399, 76, 2376, 7670]),
        ("azure_conv_2024_head5.csv", 0.001163, 0.041683, [1452, 584, 862, 1569, 617]),
    ],
)
def test_azure_2024_timestamps_with_offset(name, first, second, prompts):
    tr, _ = read_trace(DATA / name, "azure")
    assert tr.arrival_s[1] == pytest.approx(second - first, abs=1e-6)
    assert list(tr.prompt_tokens) == prompts


def test_parse_timestamp_offsets():
    base = traces.parse_timestamp("2024-05-10 00:00:00.5")
    assert traces.parse_timestamp("2024-05-10 00:00:00.5+00:00") == base
    assert traces.parse_timestamp("2024-05-10 02:00:00.5+02:00") == base  # 02:00 at UTC+2 = 00:00 UTC
    assert traces.parse_timestamp("2024-05-09T19:00:00.5-0500") == base
    with pytest.raises(ValueError):
        traces.parse_timestamp("2024-13-10 00:00:00")


def test_window_and_time_scale():
    t, _, _ = _oracle_azure(AZ23)
    tr, facts = read_trace(AZ23, "azure", time_scale=0.5, start_s=10.0, duration_s=20.0)
    want = t[(t >= 10.0) & (t < 30.0)]
    assert facts["requests"] == len(want) > 0 and facts["rows_read"] == 300
    assert np.allclose(tr.arrival_s, (want - 10.0) * 0.5, atol=2e-6)  # (trace time - start) x scale
    assert tr.arrival_s.max() < 10.0  # 20 s window x 0.5
    with pytest.raises(ConfigError, match="start_s: expected requests in the window"):
        read_trace(AZ23, "azure", start_s=1e6)


def test_spec_passes_file_options_and_refuses_them_without_a_file(tmp_path):
    spec = TraceSpec(file=str(AZ23), format="azure", duration_s=5.0)
    tr = build_request_trace(spec, 1, 1)
    t, _, _ = _oracle_azure(AZ23)
    assert len(tr) == int((t < 5.0).sum())
    with pytest.raises(ValueError, match="time_scale"):
        TraceSpec(time_scale=2.0)


def test_mooncake_readme_example_shares_twelve_blocks(tmp_path):
    # kvcache-ai/Mooncake FAST25-release/README.md "Trace Format": the two sample requests share their first
    # 12 hash ids, i.e. 12 x 512 = 6144 tokens of prefix KV
    f = tmp_path / "m.jsonl"
    f.write_text(
        '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": '
        "[46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}\n"
        '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": '
        "[46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]}\n"
    )
    tr, facts = read_trace(f, "mooncake")
    assert list(tr.arrival_s) == [0.0, pytest.approx(3.053)]  # ms: (30535 - 27482) / 1000
    assert list(tr.prefix_id) == [57, 57] and list(tr.prefix_tokens) == [6144, 6144]
    assert facts["ideal_reuse_tokens"] == 6144  # the second request reuses 12 blocks


def test_mooncake_excerpt_drives_prefix_caching():
    """The Mooncake excerpt's first 30 s on Llama-3-8B / H100: with prefix caching the hash-id prefixes hit
    (hit tokens > 0, never above the ideal block-level reuse), without it nothing hits."""
    tr, facts = read_trace(MOON, "mooncake", duration_s=30.0)
    # every row of the conversation trace starts with hash id 0 (the shared system prompt block)
    rows = [json.loads(ln) for ln in MOON.read_text().splitlines()]
    assert all(r["hash_ids"][0] == 0 for r in rows)
    assert (tr.prefix_id >= 0).all()
    big = tr.prompt_tokens + tr.output_tokens <= 8192  # llama3-8b's 8192 positions
    tr = tr.subset(np.nonzero(big)[0])
    hits = {}
    for on in (True, False):
        pool, _, _ = quick_pool(serving={"kv": {"prefix_caching": on}})
        r = simulate_pool(pool, tr.arrival_s, tr.prompt_tokens, tr.output_tokens, tr.prefix_id, tr.prefix_tokens)
        hits[on] = int(r.prefix_hit_tokens.sum())
        assert np.isfinite(r.finish_s).all()
    assert hits[False] == 0 and 0 < hits[True] <= facts["ideal_reuse_tokens"]


def test_burstgpt_columns_and_failed_rows(tmp_path, caplog):
    # HPMLL/BurstGPT README "Schema" column names; Response tokens 0 = a failed request (skipped, counted)
    caplog.set_level("INFO", logger="attnsim.traces")
    f = tmp_path / "b.csv"
    f.write_text(
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,s1,1.2,ChatGPT,472,18,490,Conversation log\n"
        "9,s1,0.0,ChatGPT,1087,0,1087,Conversation log\n"
        "12,,3.5,GPT-4,20,300,320,API log\n"
    )
    tr, facts = read_trace(f, "burstgpt")
    assert facts["skipped_failed"] == 1 and facts["requests"] == 2
    assert list(tr.arrival_s) == [0.0, 7.0] and list(tr.prompt_tokens) == [472, 20]
    assert list(tr.output_tokens) == [18, 300]
    assert "1 of 3 rows skipped: failed requests" in caplog.text  # the user hears about the dropped row


@pytest.mark.parametrize(
    "fmt,body,where,words",
    [
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\nyesterday,3,4\n",
            "line 3, column TIMESTAMP",
            "expected a time like",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,-4\n",
            "line 2, column GeneratedTokens",
            "expected a value in [1,",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n",
            "line 1, column GeneratedTokens",
            "expected a azure header",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374\n",
            "line 2",
            "expected 3 values",
        ),
        (
            "burstgpt",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,abc,3,4,API log\n",
            "line 2, column Request tokens",
            "expected a number, got 'abc'",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
            '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}\n',
            "line 2, column hash_ids",
            "at most ceil(input_length / 512) = 2 hash ids, got 3",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 6, "output_length": 5}\n',
            "line 1, column hash_ids",
            "expected a mooncake row",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1,\n',
            "line 2",
            "invalid JSON",
        ),
        (
            "mooncake",
            '{"timestamp": 9, "input_length": 6, "output_length": 5, "hash_ids": [1]}\n'
            '{"timestamp": 1, "input_length": 6, "output_length": 5, "hash_ids": [1]}\n',
            "line 2",
            "at or after the first row's time",
        ),
    ],
)
def test_bad_row_one_line_error(tmp_path, fmt, body, where, words):
    f = tmp_path / f"bad.{fmt}"
    f.write_text(body)
    with pytest.raises(ConfigError) as e:
        read_trace(f, fmt)
    msg = str(e.value)
    assert msg.startswith(f"{f}: {where}: ") and words in msg and "\n" not in msg


def test_bad_line_quote_is_bounded(tmp_path):
    f = tmp_path / "long.csv"
    f.write_text(
        f"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,x{'y' * 5000},3,4,API log\n"
    )
    with pytest.raises(ConfigError) as e:
        read_trace(f, "burstgpt")
    assert len(str(e.value)) < len(str(f)) + 300 and "..." in str(e.value)


def test_size_checked_before_reading(tmp_path, monkeypatch):
    from attnsim.core import fileio

    _, env, what = fileio.INPUT_LIMITS["data"]
    monkeypatch.setitem(fileio.INPUT_LIMITS, "data", (100, env, what))  # the data limit every data reader uses
    with pytest.raises(ConfigError, match=r"file of 11187 B: larger than the 100 B limit \(set ATTNSIM_MAX_DATA_MB"):
        read_trace(AZ23, "azure")  # 11187 bytes: the excerpt's size on disk
    with pytest.raises(ConfigError, match="file not found"):
        read_trace(tmp_path / "missing.csv", "azure")
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"expected a regular file, got a pipe"):  # refused, not waited on
        read_trace(fifo, "azure")


def test_a_line_longer_than_the_bound_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "MAX_LINE_BYTES", 64)
    f = tmp_path / "long.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46," + "9" * 200 + ",4\n")
    with pytest.raises(ConfigError) as e:
        read_trace(f, "azure")
    assert e.value.key == "line 2" and "line longer than 64 B" in str(e.value) and len(str(e.value)) < 400


def test_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "b.csv"
    f.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3\xff,4\n")
    with pytest.raises(ConfigError, match=r"b.csv: line 2: not UTF-8 text: invalid byte 0xff at byte offset 64"):
        read_trace(f, "azure")  # offset: 40-byte header line + 24 bytes before 0xff


def test_mooncake_hash_ids_drive_the_kv_pool(tmp_path):
    """Two Mooncake requests 5 s apart sharing their first 4 hash blocks, on two instances sharing a KV pool
    (configs/experiments/kv_pool.yaml; requests go round-robin: one per instance): the second instance misses
    locally and fetches the 4 x 512 = 2048 prefix tokens the first one published."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    f = tmp_path / "m.jsonl"
    f.write_text(
        '{"timestamp": 0, "input_length": 2100, "output_length": 8, "hash_ids": [1, 2, 3, 4, 5]}\n'
        '{"timestamp": 5000, "input_length": 2200, "output_length": 8, "hash_ids": [1, 2, 3, 4, 6]}\n'
    )
    sets = [
        "experiment.systems=[mooncake_h100_x2]",
        "experiment.serving.kv_pool.systems=[mooncake_h100_x2]",
        f"experiment.serving.trace={{file: {f}, format: mooncake}}",
    ]
    exp, sv = load_serving_experiment("kv_pool", sets)
    doc = serve_experiment(exp, sv)[0]
    kp = doc["serving"]["kv_pool"]
    assert doc["status"] == "ok"
    assert kp["pool_hits"] == 1 and kp["pool_hit_tokens"] == 2048


def test_replay_experiment_serves_a_window_of_the_shipped_trace(capsys):
    """serve_azure_conv from the built-in configs: its shipped 1-in-10 Azure file, first 120 s, on dgx_h100."""
    from attnsim.cli import main
    from attnsim.core.config import find_config

    shipped = find_config("experiments", "serve_azure_conv").parent / "traces" / "azure_conv_2023_1in10.csv"
    t, p, _ = _oracle_azure(shipped)
    assert len(t) == 1937  # every 10th of the 19,366 requests (tests/data/traces/README.md)
    rc = main(
        [
            "serve",
            "serve_azure_conv",
            "--set",
            "experiment.systems=[dgx_h100]",
            "--set",
            "experiment.serving.trace.duration_s=120",
            "--json",
            "--no-write",
        ]
    )
    assert rc == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["status"] == "ok" and run["metrics"]["requests"] == int((t < 120).sum())


@pytest.mark.parametrize(
    "fmt,head",
    [
        ("azure", b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"),
        (
            "burstgpt",
            b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,API log\n",
        ),
        ("mooncake", b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'),
    ],
)
def test_any_bytes_give_a_trace_or_one_config_error(tmp_path, fmt, head):
    """A valid head followed by arbitrary bytes: a trace, or one ConfigError on one line (never another exception)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(tail=st.binary(max_size=200))
    def check(tail):
        f = tmp_path / "fuzz.txt"
        f.write_bytes(head + tail)
        try:
            read_trace(f, fmt)
        except ConfigError as e:
            assert "\n" not in str(e) and str(e).startswith(str(f))

    check()
