"""Start-up (issue 30): what the fast paths skip must not change what the command prints or computes.

`attnsim --version` without the simulator's imports; YAML through libyaml with the pure-Python loader deciding
every refusal; PIM step costs answered from the sub-result cache equal to a fresh search. Speed itself is
measured by bench/bench_startup.py (no timed tests)."""

import glob
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnsim.cli import build_parser, main
from attnsim.core import cache, config

ROOT = Path(__file__).resolve().parent.parent


def test_version_fast_path_prints_what_argparse_prints(capsys):
    assert main(["--version"]) == 0
    fast = capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # argparse's version action on the full parser
        build_parser(["--version"]).parse_args(["--version"])
    assert exc.value.code == 0
    assert fast == capsys.readouterr().out and fast.startswith("attnsim ")


def test_version_imports_none_of_the_simulator():
    """The modules `attnsim --version` skips (numpy, pydantic, yaml, numba, attnsim.core.config: ~0.2 s of CPU)."""
    code = (
        "import sys; sys.argv = ['attnsim', '--version']; from attnsim.cli import main; main(); "
        "print(sorted(m for m in ('numpy', 'pydantic', 'yaml', 'numba', 'attnsim.core.config') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_config_error_is_one_line_after_lazy_import(capsys):
    """main() turns a ConfigError into `error: ...` and 2 although attnsim.cli no longer imports it up front."""
    assert main(["run", "--no-write", "--set", "experiment.scenarios.chat.batch_size=-1"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


YAML_FILES = sorted(
    set(
        glob.glob(str(ROOT / "configs" / "**" / "*.yaml"), recursive=True)
        + glob.glob(str(ROOT / "tests" / "**" / "*.yaml"), recursive=True)
    )
)


def test_libyaml_and_python_loaders_agree_on_every_config():
    """parse_yaml (libyaml where PyYAML has it, as in the wheels) = the pure-Python loader, on every YAML file of
    the project."""
    assert len(YAML_FILES) > 50  # every built-in hardware, model, system, experiment and sweep file
    for f in YAML_FILES:
        text = config.read_text_file(f)
        assert repr(config.parse_yaml(text, f)) == repr(config._parse_yaml(text, f, config._Loader)), f


BAD_YAML = [  # each refused by a rule of parse_yaml; the message is the pure-Python loader's
    "a: 1\nb: 2\na: 3\n",  # duplicate key (line 3, first at line 1)
    "a: [1, 2\n",  # unclosed flow sequence
    "a: b: c\n",  # mapping values not allowed here
    "a: \x07\n",  # control character
    "x: &a [*a]\n",  # recursive alias
    "[" * 70 + "]" * 70,  # deeper than YAML_MAX_DEPTH = 64
    "a: !!python/object:os.system ls\n",  # unsafe tag
]


@pytest.mark.parametrize("text", BAD_YAML)
def test_refusals_are_worded_by_the_python_loader(text):
    with pytest.raises(config.ConfigError) as ref:
        config._parse_yaml(text, "f.yaml", config._Loader)
    with pytest.raises(config.ConfigError) as got:
        config.parse_yaml(text, "f.yaml")
    assert str(got.value) == str(ref.value)


def test_pim_cost_from_the_cache_equals_a_fresh_search(monkeypatch):
    """A PIM step answered by the sub-result cache (key pim.cost) has the costs and mapping of the search, and
    arrays of its own (a caller scaling them in place does not change the next answer)."""
    from test_pim_mapping import SEARCH_CASES, _search_case, device

    tr, rows, over = _search_case(*SEARCH_CASES[2])
    monkeypatch.setenv("ATTNSIM_CACHE_DIR", "off")
    fresh = device(SEARCH_CASES[2][0], **over).cost(tr, rows)
    monkeypatch.setenv("ATTNSIM_CACHE_DIR", "")  # the in-process memo
    cache.reset()
    dev = device(SEARCH_CASES[2][0], **over)
    first = dev.cost(tr, rows)
    assert cache.stats()["misses"] >= 1
    first.time_s *= 2.0
    first.energy_j["dram_io"][:] = -1.0
    before = cache.stats()
    second = dev.cost(tr, rows)
    assert cache.stats()["hits"] == before["hits"] + 1 and cache.stats()["misses"] == before["misses"]
    for got in (second,):
        assert got.time_s.tolist() == fresh.time_s.tolist()
        assert {k: v.tolist() for k, v in got.energy_j.items()} == {k: v.tolist() for k, v in fresh.energy_j.items()}
        assert {k: v.tolist() for k, v in got.bytes_by_level.items()} == {
            k: v.tolist() for k, v in fresh.bytes_by_level.items()
        }
        assert got.flops.tolist() == fresh.flops.tolist() and list(got.bound) == list(fresh.bound)
        assert list(got.mapping) == list(fresh.mapping)
    cache.reset()


def test_pim_cost_key_sees_the_trace():
    """Two traces that differ only in their requests' context lengths are two keys (not one cached answer)."""
    from test_pim_mapping import SEARCH_CASES, _search_case, device

    tr, rows, over = _search_case(*SEARCH_CASES[2])
    dev = device(SEARCH_CASES[2][0], **over)
    k1 = cache.cache_key(dev._cost_key(tr, rows))
    tr.context_lens = np.asarray(tr.context_lens) + 1
    assert cache.cache_key(dev._cost_key(tr, rows)) != k1


def test_compile_notice_names_each_kernel_group_once(monkeypatch, caplog):
    """A cold compile says where (first line) and then one line per further kernel group (source file)."""
    import logging

    from numba.core import event

    from attnsim.core import jitcache
    from attnsim.hwmodels.dram import kernel
    from attnsim.hwmodels.dram import sched_flat as flat

    monkeypatch.setattr(jitcache._LISTENER, "said", False)  # as a process's first compile
    monkeypatch.setattr(jitcache._LISTENER, "groups", None)
    with caplog.at_level(logging.INFO, logger="attnsim.kernels"):
        for disp in (kernel.run_kernel, kernel.run_kernel, flat.ctrl_kernel_flat, kernel.run_kernel):
            with event.trigger_event("numba:compile", data={"dispatcher": disp, "args": (), "return_type": None}):
                pass
    lines = [r.getMessage() for r in caplog.records if r.name == "attnsim.kernels"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("compiling Numba kernels into ") and lines[0].endswith(": hwmodels/dram/kernel.py")
    assert lines[1] == "compiling Numba kernels: hwmodels/dram/sched_flat.py"
