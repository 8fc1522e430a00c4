"""Per-model perplexity calibration (configs/calibration/kv_ppl_models.yaml, ppl_calibration.py): entry choice
by model, family and context; refusal of uncovered models; slopes equal to hand computations from the
published numbers; the toy entry labelled; bad files refused with file and key."""

import math

import pytest

from attnsim.core.config import ConfigError
from attnsim.hwmodels.reliability import ppl_calibration as C
from attnsim.hwmodels.reliability.accuracy import quant_error
from attnsim.hwmodels.reliability.perplexity import load_calibration, ppl_increase

# KVQuant (Hooper et al., NeurIPS'24, arXiv 2401.18079) Appendix O Table 18, Wikitext-2 perplexity, fp16 baseline
# and ATOM-4bit KV (uniform, group 64): (baseline, ATOM-4bit, measured sequence length)
KVQUANT = {
    "llama2-7b": (5.12, 5.32, 4096),
    "llama2-13b": (4.57, 4.71, 4096),
    "llama2-70b": (3.12, 3.16, 4096),
    "llama3-8b": (5.54, 5.78, 8192),
    "llama3-70b": (2.59, 2.73, 8192),
    "mistral-7b": (4.76, 4.82, 8192),
}


@pytest.fixture(scope="module")
def table():
    return C.load_table()


@pytest.mark.parametrize("model", sorted(KVQUANT))
def test_published_entry_slopes_are_the_hand_computation(table, model):
    base, ppl, ctx = KVQUANT[model]
    r = C.resolve(table, model, ctx)  # measured sequence length: covered
    assert r["covered"] and r["matched_by"] == "model" and not r["toy"] and "Table 18" in r["source"]
    # one point: s_quant = ln(ppl / base) / (attnsim's int4 proxy error at group 32)
    s_q = math.log(ppl / base) / quant_error("int4", 32)
    assert r["fit"]["s_quant"] == pytest.approx(s_q, rel=1e-12)
    assert r["fit"]["s_quant_upper"] == pytest.approx(s_q, rel=1e-12)
    # a plan storing every KV block in int4 without bit errors predicts the published increase exactly
    assert ppl_increase(quant_error("int4", 32), 0.0, r["fit"]) == pytest.approx(ppl / base - 1, rel=1e-9)
    # no published bit-error data: the slope is the toy model's, and the label says so
    toy = load_calibration()["fit"]
    assert r["fit"]["s_bit"] == toy["s_bit"] and r["fit"]["s_bit_upper"] == toy["s_bit_upper"]
    assert "bit-error part extrapolated from the toy model" in r["label"]
    assert "TOY MODEL" in r["bit_error_source"]


def test_models_with_different_entries_get_different_slopes(table):
    a, b = (C.resolve(table, m, 1040)["fit"]["s_quant"] for m in ("llama2-70b", "llama3-70b"))
    # ln(3.16 / 3.12) = 0.01274 vs ln(2.73 / 2.59) = 0.05264: Llama-3-70B feels int4 KV 4.1x more
    assert b / a == pytest.approx(math.log(2.73 / 2.59) / math.log(3.16 / 3.12), rel=1e-12)


def test_family_then_context_decide_coverage(table):
    assert C.family_of("llama3-70b") == "llama3" and C.family_of("llama3.1-405b") == "llama3.1"
    assert C.family_of("mixtral-8x7b") == "mixtral" and C.family_of("gpt2") == "gpt2"
    r = C.resolve(table, "llama2-34b", 2048)  # no exact entry: the family's (llama2-7b, +3.9 %)
    assert r["covered"] and r["matched_by"] == "family" and r["entry"] == "kvquant-llama2-7b"
    assert C.resolve(table, "llama2-70b", 4096)["covered"]  # context = the measured 4096-token windows
    with pytest.raises(ConfigError) as exc:
        C.resolve(table, "llama2-70b", 4097)
    msg = str(exc.value)
    assert msg.startswith("--max-ppl-increase: expected a model the perplexity calibration covers, got llama2-70b")
    assert "4097" in msg and "llama3-70b" in msg and "--allow-uncalibrated" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"got llama3\.1-405b: no entry covers llama3\.1-405b \(family llama3\.1\)"):
        C.resolve(table, "llama3.1-405b", 1000)


def test_allow_uncalibrated_extrapolates_and_labels(table):
    r = C.resolve(table, "llama3-70b", 32768, allow_uncalibrated=True)  # its own entry, beyond 8192 tokens
    assert not r["covered"] and r["entry"] == "kvquant-llama3-70b"
    assert r["label"].startswith("extrapolated from Llama-3-70B (measured at 8192 tokens, plan at 32768)")
    assert "does NOT cover" in r["coverage"]
    toy = C.resolve(table, "qwen3-8b", 1000, allow_uncalibrated=True)  # no entry or family: the fallback
    assert toy["toy"] and toy["entry"] == "toy-char-level" and not toy["covered"]
    assert toy["label"].startswith("extrapolated from TOY MODEL: char-level")
    assert toy["fit"]["s_quant"] == load_calibration()["fit"]["s_quant"]


def test_the_toy_entry_covers_nothing(table):
    toy = [e for e in table["entries"] if e.get("toy")]
    assert len(toy) == 1 and toy[0]["models"] == [] and toy[0]["families"] == []
    assert toy[0]["model"].startswith("TOY MODEL") and table["fallback"] == toy[0]["id"]


def test_a_single_curve_file_covers_no_model():
    from attnsim.hwmodels.reliability.perplexity import calibration_path

    t = C.load_table(calibration_path())  # bench/calibrate_perplexity.py output
    with pytest.raises(ConfigError, match="covered: none"):
        C.resolve(t, "llama2-70b", 1000)
    r = C.resolve(t, "llama2-70b", 1000, allow_uncalibrated=True)
    assert r["label"].startswith("extrapolated from char-level")
    assert r["fit"]["s_bit"] == load_calibration()["fit"]["s_bit"]


@pytest.mark.parametrize(
    "edit, key",
    [
        (
            ("models: [llama2-13b]\n  families: []", "models: [llama2-13b]\n  families: [llama2]"),
            "entries[2].families",
        ),  # llama2 claimed twice
        (("bit_errors: {from: toy-char-level}", "bit_errors: {from: nobody}"), "entries[1].bit_errors.from"),
        (("fallback: toy-char-level", "fallback: nobody"), "fallback"),
        (("format: int4", "format: int3"), "entries[1].quantization.points[0].format"),
    ],
)
def test_bad_tables_name_file_and_key(tmp_path, edit, key):
    text = C.default_path().read_text()
    old, new = edit
    assert old in text
    bad = tmp_path / "cal.yaml"
    bad.write_text(text.replace(old, new, 1))
    (tmp_path / "kv_error_ppl.yaml").write_text(C.default_path().with_name("kv_error_ppl.yaml").read_text())
    with pytest.raises(ConfigError) as exc:
        C.load_table(bad)
    assert str(exc.value).startswith(f"{bad}: {key}: expected")
