"""Bad input to the Python API (attnsim.run / load / serve / sweep / pim.run) is one ConfigError whose str is one
line naming where the problem is ("<file>: <key>: ..."), never another exception, and nothing is written
(the same contract as the CLI's bad-input suite, tests/test_bad_inputs.py). Every case fails while the
experiment, store or program is read and checked: no case simulates anything."""

import copy
import os

import pytest

import attnsim
import attnsim.api
from attnsim.core.config import ConfigError

EXP = {
    "name": "tiny",
    "systems": ["h100_x1"],
    "models": ["llama2-7b"],
    "scenarios": {"chat": {"batch_size": 1, "prompt_len": 128, "output_len": 4}},
    "generation": {"mode": "sampled", "samples": 2},
}
STACK = "attacc_hbm3_pim_stack"


def scenario(**kw) -> dict:
    d = copy.deepcopy(EXP)
    d["scenarios"]["chat"].update(kw)
    return d


def aim_program():
    from attnsim.isa import get_isa
    from attnsim.isa.base import assemble

    return assemble(get_isa("aim"), "MAC_ABK 8, 0x1, 5\nEOC\n")


# (id, call, strings the message must contain)
CASES = [
    ("run-dict-batch-zero", lambda: attnsim.run(scenario(batch_size=0)), ("<dict>", "scenarios.chat.batch_size")),
    ("run-dict-unknown-key", lambda: attnsim.run({**EXP, "sytems": ["h100_x1"]}), ("<dict>", "sytems", "systems")),
    (
        "run-dict-speculative-tokens",
        lambda: attnsim.run(scenario(speculative={"draft_model": "llama2-7b", "draft_tokens": 0})),
        ("<dict>", "scenarios.chat.speculative.draft_tokens"),
    ),
    ("run-unknown-name", lambda: attnsim.run("no_such_experiment"), ("no_such_experiment",)),
    ("run-not-an-experiment", lambda: attnsim.run(42), ("experiment", "int")),
    (
        "run-sets-negative-layers",
        lambda: attnsim.run(EXP, sets={"models.llama2-7b.num_layers": -1}),
        ("llama2-7b.yaml", "num_layers"),
    ),
    ("run-sets-a-string", lambda: attnsim.run(EXP, sets="models.llama2-7b.num_layers=1"), ("sets", "str")),
    ("run-sets-empty-key", lambda: attnsim.run(EXP, sets={"": 1}), ("sets",)),
    (
        "run-sets-object-value",
        lambda: attnsim.run(EXP, sets={"scenarios.chat.batch_size": object()}),
        ("sets", "scenarios.chat.batch_size"),
    ),
    ("run-sets-unknown-section", lambda: attnsim.run(EXP, sets={"bogus.x": 1}), ("bogus",)),
    (
        "run-sets-list-without-equals",
        lambda: attnsim.run(EXP, sets=["scenarios.chat.batch_size"]),
        ("scenarios.chat.batch_size",),
    ),
    ("run-sets-list-of-ints", lambda: attnsim.run(EXP, sets=[1]), ("sets",)),
    (
        "run-sets-nan",
        lambda: attnsim.run(EXP, sets={"scenarios.chat.prompt_len": float("nan")}),
        ("<dict>", "scenarios.chat.prompt_len"),
    ),
    ("run-systems-unknown", lambda: attnsim.run(EXP, systems=["no_such_system"]), ("systems", "no_such_system")),
    ("run-systems-int", lambda: attnsim.run(EXP, systems=5), ("systems", "5")),
    ("run-models-list-of-ints", lambda: attnsim.run(EXP, models=[1, 2]), ("models",)),
    (
        "run-with-serving",
        lambda: attnsim.run({**scenario(), "serving": {"trace": {"num_requests": 2}}}),
        ("<dict>", "serving"),
    ),
    ("load-text-file", lambda: attnsim.load("t.txt"), ("t.txt",)),
    ("load-yaml-file", lambda: attnsim.load("e.yaml"), ("e.yaml",)),
    ("load-missing", lambda: attnsim.load("nope.h5"), ("nope.h5",)),
    ("load-directory", lambda: attnsim.load("d"), ("d",)),
    ("load-not-a-path", lambda: attnsim.load(5), ("path", "int")),
    (
        "pim-text-for-another-isa",
        lambda: attnsim.pim.run("GEMV 1, 0, 0, 64, 64\nHALT\n", STACK),
        ("<text>", "line 1", "GEMV"),
    ),
    ("pim-program-of-another-isa", lambda: attnsim.pim.run(aim_program(), STACK), ("<Program>", "attacc", "aim")),
    ("pim-empty-bytes", lambda: attnsim.pim.run(b"", STACK), ("<bytes>",)),
    ("pim-only-comments", lambda: attnsim.pim.run("# nothing\n\n", STACK), ("<text>",)),
    ("pim-not-a-program", lambda: attnsim.pim.run(123, STACK), ("program", "int")),
    ("pim-device-is-gpu", lambda: attnsim.pim.run("ACTAB 0, 0\n", "h100_sxm"), ("h100_sxm",)),
    ("pim-device-unknown", lambda: attnsim.pim.run("ACTAB 0, 0\n", "no_such_pim"), ("no_such_pim",)),
    ("pim-row-beyond-device", lambda: attnsim.pim.run("ACTAB 0, 20000\n", STACK), ("<text>", "line 1", "row")),
    ("serve-static-batch", lambda: attnsim.serve(EXP), ("<dict>", "scenarios.chat.batch_size")),
    ("sweep-not-a-sweep", lambda: attnsim.sweep(42, "o.h5"), ("sweep", "int")),
    (
        "sweep-dict-unknown-base",
        lambda: attnsim.sweep({"name": "s", "base": "nope", "parameters": []}, "o.h5"),
        ("<dict>", "base"),
    ),
    (
        "sweep-out-not-a-path",
        lambda: attnsim.sweep({"name": "s", "base": "default", "parameters": []}, 5),
        ("out", "int"),
    ),
    (
        "sweep-out-is-a-directory",
        lambda: attnsim.sweep({"name": "s", "base": "default", "parameters": []}, "d"),
        ("d", "out"),
    ),
    ("save-not-a-path", lambda: attnsim.api.Results([], "x", tree={}).save(5), ("save", "int")),
    ("save-to-a-directory", lambda: attnsim.api.Results([], "x", tree={}).save("d"), ("d", "save")),
]


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNSIM_CONFIG_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("not a results file\n")
    (tmp_path / "e.yaml").write_text("name: x\n")
    (tmp_path / "d").mkdir()
    return tmp_path


def _tree(folder) -> set:
    return {os.path.relpath(os.path.join(r, n), folder) for r, ds, fs in os.walk(folder) for n in ds + fs}


@pytest.mark.parametrize("call,names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_api_input_is_one_clean_error(call, names, folder):
    before = _tree(folder)
    with pytest.raises(ConfigError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text and text, repr(text)
    assert all(n in text for n in names), text
    assert _tree(folder) == before, "files written"


def test_a_generator_of_names_is_read_once():
    """systems= / models= accept any iterable (a generator is consumed once, not emptied by the check)."""
    from attnsim.api import _list_sets

    assert _list_sets((s for s in ["h100_x1", "dgx_h100"]), None) == ["experiment.systems=[h100_x1, dgx_h100]"]
