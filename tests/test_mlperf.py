"""MLPerf Inference serving validation data (configs/validation/mlperf.yaml, attnsim.studies.mlperf): the rows and the
submission settings load and take effect; the Offline steady-state throughput on a hand-built request table;
the GPT-J model preset. (The rows themselves run in `attnsim validate --set mlperf`: minutes, not a unit test.)"""

from __future__ import annotations

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.studies import mlperf
from attnsim.studies.serve.run import load_serving_experiment
from attnsim.workloads.trace import param_count
from attnsim.workloads.zoo import load_model


def test_rows_name_their_summary_and_the_rounds_their_commit():
    spec = mlperf.load()
    assert {r.round for r in spec.rows} == {"v4.0", "v4.1"}
    assert {r.benchmark for r in spec.rows} == {"llama2-70b", "gptj", "mixtral-8x7b"}
    assert all(len(c.commit) == 40 for c in spec.rounds.values())
    assert all(r.role == "validation" for r in spec.rows) and spec.tolerance == 0.10
    assert mlperf.summary_path(spec.rows[0]) == (
        "closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99.9/"
        "Offline/performance/run_1/mlperf_log_summary.txt"
    )
    # -99 and -99.9 of a round are the same FP8 run (identical summaries), so their references are equal
    by = {}
    for r in spec.rows:
        by.setdefault((r.round, r.benchmark, r.scenario), set()).add(r.reference)
    assert all(len(v) == 1 for v in by.values())


@pytest.mark.parametrize(
    "bench,tp,replicas,batch",
    [
        ("llama2-70b", 2, 4, {"Offline": 896, "Server": 1024}),
        ("gptj", 1, 8, {"Offline": 192, "Server": 256}),
        ("mixtral-8x7b", 1, 8, {"Offline": 896, "Server": 896}),
    ],
)
def test_submission_settings_take_effect(bench, tp, replicas, batch):
    b = mlperf.load().benchmarks[bench]
    for scenario in ("Offline", "Server"):
        exp, sv = load_serving_experiment(
            mlperf.CONFIG_ROOT / "validation" / b.experiment, mlperf.scenario_sets(b, scenario, requests=10)
        )
        sysm = exp.systems["dgx_h100"]
        assert (sysm.parallelism.tp, sysm.parallelism.replicas, sysm.software) == (tp, replicas, "trtllm")
        (sc,) = exp.scenarios.values()
        assert sc.weight_dtype == "fp8_e4m3" and sc.kv_dtype == "fp8_e4m3"
        assert sv.scheduler.max_batch == batch[scenario] and sv.trace.num_requests == 10
        assert sv.trace.rate_per_s is None  # Offline: every request at t = 0; the Server search sets the rate
    assert mlperf.instances(b) == replicas  # the Server search serves one instance at rate / replicas


def test_steady_tokens_per_s_by_hand():
    # three requests, all arriving at 0; the third is admitted last at t = 4 s (the queue empties then)
    req = {
        "arrival_s": np.zeros(3),
        "queue_s": np.array([0.0, 0.0, 4.0]),
        "ttft_s": np.array([1.0, 1.0, 5.0]),
        "latency_s": np.array([3.0, 9.0, 8.0]),
        "tpot_s": np.array([0.5, 0.5, 0.5]),
        "output_tokens": np.array([5, 17, 7]),
    }
    tok_s, t_end = mlperf.steady_tokens_per_s(req)
    # by t = 4: request 0 finished (5 tokens); request 1 has its first token at 1 s + (4 - 1) / 0.5 = 6 more = 7;
    # request 2 (first token at 5 s) none: 12 tokens in 4 s
    assert t_end == 4.0 and tok_s == pytest.approx(12 / 4)


def test_unknown_benchmark_refused(capsys):
    assert main(["validate", "--set", "mlperf/llama3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set:") and "llama2-70b, gptj, mixtral-8x7b" in err


def test_gpt_j_parameter_count():
    m = load_model("gpt-j-6b")
    # hand formula: wte + lm_head (untied) + layers x (q, k, v, o + fc_in, fc_out); biases and norms < 0.1 %
    h = m.hidden_size
    hand = 2 * m.vocab_size * h + m.num_layers * (4 * h * h + 2 * h * m.intermediate_size)
    assert param_count(m) == pytest.approx(hand, rel=1e-3)
    # EleutherAI's model card: 6,053,381,344 parameters
    assert param_count(m) == pytest.approx(6_053_381_344, rel=1e-3)


@pytest.mark.parametrize(
    "bench,prompt_high,out_mean,out_low,out_high",
    [
        # llama2-70b: prompt <= 1,024 (processorca.py --seqlen_limit=1024; NVIDIA v4.1 builder.py max_input_len);
        # outputs: v4.1 accuracy.txt gen_tok_len 7,134,577 / gen_num 24,576 = 290.3 tokens, 1 - 1,024
        # (generation_config.json min_output_len / max_output_len)
        ("llama2-70b", 1024, round(7_134_577 / 24_576, 1), 1, 1024),
        # gpt-j: prompt <= 1,919 (dataset.py max_length; builder.py --max_input_len=1919); outputs: v4.1 Offline
        # summary 19,739.8 tokens/s / 286.084 samples/s = 69.0, 30 - 128 (generation_config.json)
        ("gptj", 1919, round(19_739.8 / 286.084, 1), 30, 128),
        # mixtral-8x7b: prompt <= 2,048 (builder.py --max_input_len=2048); outputs: v4.1 accuracy.txt
        # gen_tok_len 2,190,383 / gen_num 15,000 = 146.0, 1 - 1,024 (generation_config.json)
        ("mixtral-8x7b", 2048, round(2_190_383 / 15_000, 1), 1, 1024),
    ],
)
def test_length_statistics_are_the_sources(bench, prompt_high, out_mean, out_low, out_high):
    b = mlperf.load().benchmarks[bench]
    _, sv = load_serving_experiment(mlperf.CONFIG_ROOT / "validation" / b.experiment, [])
    tr = sv.trace
    assert tr.prompt.high == prompt_high
    assert (tr.output.mean, tr.output.low, tr.output.high) == (out_mean, out_low, out_high)


def test_server_row_is_a_bracket_between_the_target_and_the_offline_rate():
    from attnsim.studies.validation_row import Row

    # v4.1 llama2-70b: target 75.10 req/s passed, Offline 84.4792 samples/s (both summaries); tolerance 10 %
    def row(x):
        return Row("mlperf", "r", x, 75.10, 0.10, check="bracket", published_high=84.4792)

    assert row(80.0).error == 0.0 and row(80.0).ok  # inside the interval: no error
    assert row(89.9).error == pytest.approx(89.9 / 84.4792 - 1)  # +6.4 % above the Offline rate: within 10 %
    assert row(89.9).ok and not row(93.0).ok  # 93 / 84.4792 = +10.1 %
    assert row(70.0).error == pytest.approx(70.0 / 75.10 - 1) and row(70.0).ok  # -6.8 % below the target
    assert not row(67.0).ok  # -10.8 %
    # the data: every Server row carries its round's Offline samples/s, never below the Server rate
    spec = mlperf.load()
    for r in spec.rows:
        assert (r.offline_samples_per_s is not None) == (r.scenario == "Server")
        if r.scenario == "Server":
            assert r.offline_samples_per_s >= r.reference


def test_server_row_without_its_offline_rate_refused(tmp_path):
    import yaml

    from attnsim.core.config import ConfigError

    data = yaml.safe_load(mlperf.DATA.read_text())
    i = next(i for i, r in enumerate(data["rows"]) if r["scenario"] == "Server")
    data["rows"][i]["offline_samples_per_s"] = data["rows"][i]["reference"] / 2  # below the rate that passed
    f = tmp_path / "mlperf.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=f"rows.{i}.offline_samples_per_s"):
        mlperf.load(f)
