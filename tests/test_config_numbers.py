"""Numbers, YAML and JSON rules shared by every reader (issue 10: no non-finite or wrapped numbers)."""

from __future__ import annotations

import math

import pytest

from attnsim.core.config import (
    INT_LIMIT,
    YAML_MAX_VALUES,
    ConfigError,
    check_float,
    check_int,
    load_yaml,
    parse_set,
    parse_yaml,
    read_text_file,
    validate,
)

# ---------------------------------------------------------------- check_int / check_float


@pytest.mark.parametrize(
    "value, expected", [(5, 5), ("12", 12), ("0x10", 16), (" -3 ", -3), (4.0, 4), (INT_LIMIT, INT_LIMIT)]
)
def test_check_int_accepts(value, expected):
    assert check_int(value) == expected


@pytest.mark.parametrize(
    "value", [2**63, INT_LIMIT + 1, "18446744073709551616", True, 1.5, "1e30", "12abc", None, math.inf, "1_000"]
)
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


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", "nan", "1e999", 10**400])
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


# ---------------------------------------------------------------- YAML rules (parse_yaml / load_yaml / --set)


def test_duplicate_keys_refused_with_both_lines():
    with pytest.raises(ConfigError) as e:
        parse_yaml("scenarios:\n  s:\n    batch_size: 16\n    prompt_len: 8\n    batch_size: 1\n", file="exp.yaml")
    assert str(e.value) == "exp.yaml: line 5: duplicate key 'batch_size' (first at line 3)"


def test_merge_keys_still_override():
    assert parse_yaml("a: &base {x: 1, y: 2}\nb:\n  <<: *base\n  y: 3\n") == {
        "a": {"x": 1, "y": 2},
        "b": {"x": 1, "y": 3},
    }


def _laughs(levels: int = 9) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    names = "abcdefghijklmnop"
    for i in range(1, levels):
        text += f"{names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]\n"
    return text


def test_alias_bomb_refused_with_count_and_limit():
    text = _laughs()
    assert len(text) < 1024
    with pytest.raises(ConfigError) as e:
        parse_yaml(text, file="bomb.yaml")
    n = sum(9**k for k in range(1, 10)) + 9 + 1  # lists + 'lol's + keys + the top mapping, as expanded
    assert "bomb.yaml: YAML aliases expand the document to" in str(e.value)
    assert f"the limit is {YAML_MAX_VALUES:,}" in str(e.value)
    count = int(str(e.value).split("to ")[1].split(" values")[0].replace(",", ""))
    assert count > YAML_MAX_VALUES and count >= n - 10


def test_small_aliases_are_fine():
    assert parse_yaml(_laughs(3))["c"][0][0] == ["lol"] * 9


@pytest.mark.parametrize(
    "text, words",
    [
        ("a: [1\n", "f.yaml: line 2: invalid YAML ("),
        ("a: \x07\n", "f.yaml: line 1: invalid YAML (control character 0x07 not allowed)"),
        ("[" * 200 + "]" * 200, "f.yaml: line 1: invalid YAML (nested deeper than 64 levels)"),
        (
            "a:\n" + "".join(" " * i + "- \n" for i in range(1, 80)),
            "f.yaml: line 65: invalid YAML (nested deeper than 64",
        ),
    ],
)
def test_yaml_syntax_errors_are_one_line(text, words):
    with pytest.raises(ConfigError) as e:
        parse_yaml(text, file="f.yaml")
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_load_yaml_non_utf8_and_non_mapping(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"m.yaml: not UTF-8 text: invalid byte 0xe9 at byte offset 9$"):
        load_yaml(p)
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got list"):
        load_yaml(p)


def test_set_values_follow_the_same_rules():
    assert parse_set("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_set("a.b=not: yaml: here") == (["a", "b"], "not: yaml: here")  # not YAML: stays text
    with pytest.raises(ConfigError, match=r"^--set: a.b: duplicate key 'x' \(first at line 1\)$"):
        parse_set("a.b={x: 1, x: 2}")
    bomb = "[" + ",".join(["&a [1,1,1,1,1,1,1,1,1,1]"] + ["*a"] * 9) + "]"
    assert len(parse_set(f"a.b={bomb}")[1]) == 10  # small: fine


def test_no_direct_yaml_safe_load_in_the_package():
    """Every YAML read goes through attnsim.core.config.parse_yaml (one loader, one set of rules)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = [
        str(p.relative_to(root))
        for d in ("attnsim", "hwmodels", "workloads", "mapper", "isa")
        for p in (root / d).rglob("*.py")
        if p.name != "config.py" and ("yaml.safe_load" in p.read_text() or "yaml.load(" in p.read_text())
    ]
    assert offenders == []


# ---------------------------------------------------------------- schemas: finite floats, bounded ints


def _all_schemas():
    import importlib
    import importlib.util
    import pkgutil

    from attnsim.core.config import Schema

    for top in ("attnsim", "attnsim.hwmodels", "attnsim.workloads", "attnsim.mapper", "attnsim.isa"):
        pkg = importlib.import_module(top)
        for mod in pkgutil.walk_packages(pkg.__path__, top + "."):
            spec = importlib.util.find_spec(mod.name)
            if not mod.ispkg and spec.origin and "Spec" in open(spec.origin).read():  # modules that may define schemas
                importlib.import_module(mod.name)
    out, todo = set(), [Schema]
    while todo:
        c = todo.pop()
        for s in c.__subclasses__():
            if s not in out:
                out.add(s)
                todo.append(s)
    return out


def test_every_schema_refuses_inf_nan():
    schemas = _all_schemas()
    assert len(schemas) > 40
    names = {c.__name__ for c in schemas}
    assert {
        "ModelSpec",
        "Scenario",
        "SystemSpec",
        "GPUSpec",
        "DRAMSpec",
        "SweepSpec",
        "ServingSpec",
        "ReliabilitySpec",
        "LinkSpec",
        "PIMSpec",
    } <= names
    for cls in schemas:
        assert cls.model_config.get("allow_inf_nan") is False, cls.__name__
        for name, f in cls.model_fields.items():
            assert all(getattr(m, "allow_inf_nan", None) is not True for m in f.metadata), (cls.__name__, name)


def test_schema_number_rule_reaches_free_form_sections():
    from attnsim.hwmodels.system import MapperSpec

    for value, words in [
        (math.inf, "expected a finite number, got inf"),
        (math.nan, "expected a finite number, got nan"),
        (2**63, "expected an integer in [-2**53, 2**53], got 9223372036854775808"),
    ]:
        with pytest.raises(ConfigError) as e:
            validate(
                MapperSpec,
                {"policy": "gpu_only", "options": {"split": [1, {"x": value}]}},
                file="s.yaml",
                prefix="mapper",
            )
        assert str(e.value) == f"s.yaml: mapper.options.split.1.x: {words}"


def test_float_field_refuses_overflowing_string():
    from attnsim.hwmodels.links import LinkSpec

    base = {"kind": "link", "name": "l", "bandwidth_gbps": 100, "latency_us": 1.0, "energy_pj_per_bit": 1.0}
    assert validate(LinkSpec, base).latency_us == 1.0
    with pytest.raises(ConfigError, match=r"^l.yaml: latency_us: expected a finite number, got '1e999'$"):
        validate(LinkSpec, {**base, "latency_us": "1e999"}, file="l.yaml")


# ---------------------------------------------------------------- the CLI: exit 2, one line, nothing written

TINY = """name: tiny
systems: [dgx_a100]
models: [llama3-8b]
scenarios:
  s: {batch_size: 1, prompt_len: 64, output_len: 4}
"""


def _cli(capsys, *argv):
    from attnsim.cli import main

    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize(
    "setting, words",
    [
        ("hardware.nvlink3.latency_us=.inf", "hardware/nvlink3.yaml: latency_us: expected a finite number, got inf"),
        (
            "hardware.nvlink3.bandwidth_gbps=.nan",
            "hardware/nvlink3.yaml: bandwidth_gbps: expected a finite number, got nan",
        ),
        (
            "hardware.nvlink3.energy_pj_per_bit=1e999",
            "hardware/nvlink3.yaml: energy_pj_per_bit: expected a finite number, got '1e999'",
        ),
        (
            "hardware.a100_80gb_sxm.peak_fp16_tflops=-.inf",
            "hardware/a100_80gb_sxm.yaml: peak_fp16_tflops: expected a finite number",
        ),
        (
            "hardware.a100_80gb_sxm.kernel_overhead_us=.inf",
            "a100_80gb_sxm.yaml: kernel_overhead_us: expected a finite number, got inf",
        ),
        (
            "systems.dgx_a100.mapper.options.x=.inf",
            "systems/dgx_a100.yaml: mapper.options.x: expected a finite number, got inf",
        ),
        (
            "experiment.serving={trace: {rate_per_s: .inf}}",
            "serving.trace.rate_per_s: expected a finite number, got inf",
        ),
        (
            "experiment.seed=9223372036854775808",
            "seed: expected an integer in [-2**53, 2**53], got 9223372036854775808",
        ),
        ("scenarios.s.batch_size=1.0e+30", "scenarios.s.batch_size: expected an integer in [-2**53, 2**53], got 1e+30"),
        ("scenarios.s.batch_size={a: 1, a: 2}", "--set: scenarios.s.batch_size: duplicate key 'a' (first at line 1)"),
        ("scenarios.s.batch_size=true", "tiny.yaml: scenarios.s.batch_size: expected an integer, got True"),
        ("scenarios.s.context_lens=[1, true]", "scenarios.s.context_lens.1: expected an integer, got True"),
        ("hardware.nvlink3.latency_us=false", "hardware/nvlink3.yaml: latency_us: expected a number, got False"),
        (
            "systems.dgx_a100.devices.gpu.count.x=1",
            "--set: systems.dgx_a100.devices.gpu.count: expected a mapping to hold key 'x', got 8",
        ),
    ],
)
def test_run_refuses_bad_numbers(tmp_path, capsys, setting, words):
    exp = tmp_path / "tiny.yaml"
    exp.write_text(TINY)
    out = tmp_path / "out"
    rc, stdout, err = _cli(capsys, "run", str(exp), "--set", setting, "--out", str(out))
    assert rc == 2 and stdout == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_run_refuses_duplicate_key_and_non_utf8_file(tmp_path, capsys):
    exp = tmp_path / "dup.yaml"
    exp.write_text(TINY + "  t: {batch_size: 16, output_len: 4, batch_size: 1}\n")
    rc, _, err = _cli(capsys, "run", str(exp), "--out", str(tmp_path / "o"))
    assert rc == 2 and err == f"error: {exp}: line 6: duplicate key 'batch_size' (first at line 6)\n"
    exp.write_bytes(TINY.encode() + b"# \xff\n")
    rc, _, err = _cli(capsys, "run", str(exp), "--out", str(tmp_path / "o"))
    assert rc == 2 and err == f"error: {exp}: not UTF-8 text: invalid byte 0xff at byte offset {len(TINY) + 2}\n"
    assert not (tmp_path / "o").exists()


def test_sweep_alias_bomb_refused(tmp_path, capsys):
    sweep = tmp_path / "bomb.yaml"
    sweep.write_text("name: bomb\nexperiment: default\n" + _laughs().replace("a: &a", "x_a: &a", 1))
    rc, _, err = _cli(capsys, "sweep", str(sweep), "--out", str(tmp_path / "s.h5"))
    assert rc == 2 and "YAML aliases expand the document to" in err and "the limit is 1,000,000" in err
    assert err.count("\n") == 1 and not (tmp_path / "s.h5").exists()


# ---------------------------------------------------------------- strict JSON and finite run documents


def test_dumps_is_strict():
    import numpy as np

    from attnsim.sim.results import dumps

    assert dumps({"a": np.float64(1.5), "b": np.int64(2)}) == '{"a": 1.5, "b": 2}'
    for bad in (math.inf, math.nan, np.float32("nan")):
        with pytest.raises(ValueError):
            dumps({"x": [bad]})


def test_finalize_doc_turns_non_finite_ok_runs_into_errors():
    import numpy as np

    from attnsim.sim.results import check_finite_doc, dumps, finalize_doc

    doc = {
        "status": "ok",
        "metrics": {"ttft_s": math.inf, "tpot_s": 0.1, "memory": {"gpu": {"used": np.nan}}},
        "breakdown": {"decode_step": {"time_s": 1.0}},
        "_requests": {"tpot_s": np.array([np.nan])},
    }
    assert check_finite_doc(doc) == ["metrics.memory.gpu.used", "metrics.ttft_s"]
    finalize_doc(doc)
    assert doc["status"] == "error"
    assert doc["error"] == "non-finite result: metrics.memory.gpu.used = nan, metrics.ttft_s = inf"
    assert doc["metrics"]["ttft_s"] is None and doc["metrics"]["tpot_s"] == 0.1
    assert check_finite_doc(doc) == []
    dumps({k: v for k, v in doc.items() if k != "_requests"})  # strict JSON now
    fine = {"status": "does_not_fit", "metrics": {"ttft_s": None}}
    assert finalize_doc(fine) == {"status": "does_not_fit", "metrics": {"ttft_s": None}}


def _strict_loads(text):
    import json

    def refuse(const):
        raise ValueError(f"non-standard JSON constant {const}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_overflowing_metric_gives_error_status_and_strict_json(tmp_path, capsys):
    exp = tmp_path / "tiny.yaml"
    exp.write_text(TINY)
    # finite in the config (1.7e302 s per ring step of the ring formula), but the run's energy overflows to inf;
    # outside latency_us's plausible range (<= 1e6 us), so the file opts out of that range (allow_out_of_range)
    rc, out, _ = _cli(
        capsys,
        "run",
        str(exp),
        "--set",
        "hardware.nvlink3.allreduce=ring",
        "--set",
        "hardware.nvlink3.latency_us=1.7e+308",
        "--set",
        "hardware.nvlink3.allow_out_of_range=[latency_us]",
        "--json",
        "--no-write",
    )
    assert rc == 0
    (run,) = _strict_loads(out)["runs"]
    assert run["status"] == "error"
    assert run["error"].startswith("non-finite result: ") and "energy" in run["error"]
    # and a normal run is strict JSON with status ok
    rc, out, _ = _cli(capsys, "run", str(exp), "--json", "--no-write")
    (run,) = _strict_loads(out)["runs"]
    assert rc == 0 and run["status"] == "ok" and run["metrics"]["ttft_s"] > 0


def test_serving_aggregates_undefined_are_none_not_nan():
    import numpy as np

    from attnsim.sim.results import check_finite_doc
    from attnsim.studies.serve.metrics import request_table, summarize
    from attnsim.studies.serve.spec import SLOSpec

    one = np.ones(3)
    req = request_table(
        arrival=np.zeros(3),
        prompt=np.full(3, 8),
        output=np.ones(3, dtype=np.int64),
        first_token=one,
        finish=one,
        admit=np.zeros(3),
        energy=one,
        preemptions=np.zeros(3, np.int64),
        prefix_hit=np.zeros(3, np.int64),
    )
    m = summarize(req, SLOSpec(), total_energy_j=3.0)
    assert m["tpot_mean"] is None and m["tpot_p99"] is None  # one-token outputs: TPOT undefined
    assert m["arrival_rate_per_s"] is None and m["littles_law_rhs"] is None  # all arrive at once
    assert m["ttft_mean"] == 1.0 and check_finite_doc({"metrics": m}) == []


def test_show_json_is_strict_for_an_old_file_with_infinity(tmp_path, capsys):
    import json

    import h5py

    exp = tmp_path / "tiny.yaml"
    exp.write_text(TINY)
    out = tmp_path / "res"
    rc, _, _ = _cli(capsys, "run", str(exp), "--out", str(out), "--no-figures")
    assert rc == 0
    with h5py.File(out / "results.h5", "r+") as f:  # what an older attnsim could write
        doc = json.loads(f["run_docs"][0])
        doc["metrics"]["ttft_s"] = math.inf
        f["run_docs"][0] = json.dumps(doc)
    rc, text, _ = _cli(capsys, "show", str(out / "results.h5"), "--json")
    (run,) = _strict_loads(text)["runs"]
    assert rc == 0 and run["status"] == "error" and run["error"] == "non-finite result: metrics.ttft_s = inf"


def test_replications_keep_undefined_metrics_undefined():
    from attnsim.studies.serve.replicate import combine

    docs = [{"status": "ok", "metrics": {"ttft_mean": t, "tpot_mean": p}} for t, p in ((1.0, None), (3.0, 0.5))]
    m = combine(docs, [0, 1], 0.95, 0)["metrics"]
    assert m["ttft_mean"] == 2.0 and m["tpot_mean"] is None
    assert m["ttft_mean_ci_low"] <= 2.0 <= m["ttft_mean_ci_high"]


def test_check_numbers_names_the_nested_key():
    from attnsim.core.config import check_numbers

    check_numbers({"a": [1, 2.5, {"b": "x"}]}, file="c.json")
    with pytest.raises(ConfigError, match=r"^c.json: cfg.rope_scaling.factor: expected a finite number, got inf$"):
        check_numbers({"rope_scaling": {"factor": math.inf}}, file="c.json", key="cfg")
    with pytest.raises(ConfigError, match=r"^c.json: 0.1: expected an integer in \[-2\*\*53, 2\*\*53\]"):
        check_numbers([[0, 2**64]], file="c.json")


def test_trace_with_non_finite_times_is_refused_before_writing(tmp_path):
    from attnsim.sim.timeline import write_trace

    out = tmp_path / "sub" / "t.json"
    with pytest.raises(ConfigError, match=r"t.json: expected finite event times, got inf/NaN"):
        write_trace(out, [{"ph": "X", "name": "x", "ts": 0.0, "dur": math.inf}])
    assert not (tmp_path / "sub").exists()
    write_trace(out, [{"ph": "X", "name": "x", "ts": 0.0, "dur": 1.0}])
    assert _strict_loads(out.read_text())["traceEvents"][0]["dur"] == 1.0


def test_config_errors_are_one_line_even_for_keys_with_newlines(tmp_path):
    from attnsim.core.config import ConfigError, validate
    from attnsim.sim.experiment import GenerationSpec

    with pytest.raises(ConfigError) as exc:
        validate(GenerationSpec, {"mode": "exact", "bad\nkey\r\x1b": 1}, file="g.yaml")
    text = str(exc.value)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert "bad\\nkey" in text and text.startswith("g.yaml: ")


def test_text_reader_refuses_devices():
    from attnsim.core.config import ConfigError, read_text_file

    with pytest.raises(ConfigError, match="regular file"):
        read_text_file("/dev/zero")
