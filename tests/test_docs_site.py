"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing anchor or a page outside
the nav fails), its generated pages are current, every section of the former 2,260-line README is reachable from
its navigation, and README.md stays an entry point whose links, sweep file and notebook block work."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "bench" / "docs_pages.py")
docs_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_pages)


def _fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def _headings(text: str) -> list[str]:
    """Heading texts outside code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.append(line.split(" ", 1)[1].strip())
    return out


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (MkDocs) and, for these headings, GitHub's: lower case, punctuation dropped."""
    s = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", s)


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_pages(v)]
    return [p for item in nav for p in _nav_pages(item)]


def _mkdocs_config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_mkdocs_build_strict(tmp_path):
    # what CI's site build is: the test command runs it (MkDocs' own check of links, anchors and the nav)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    out = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "index.html").is_file()
    api = (out / "reference" / "python-api" / "index.html").read_text()
    assert "attnsim.api.sweep" in api or 'id="attnsim.api.sweep"' in api  # mkdocstrings rendered the API
    assert (out / "figures" / "first_study_throughput.png").is_file()


def test_strict_build_fails_on_a_broken_link(tmp_path):
    # the check above can fail: a copy of the site with one dead link and one dead anchor is refused
    site = tmp_path / "repo"
    shutil.copytree(DOCS, site / "docs")
    shutil.copy(ROOT / "mkdocs.yml", site / "mkdocs.yml")
    cfg = (site / "mkdocs.yml").read_text().replace("paths: [.]", f"paths: [{ROOT}]")
    (site / "mkdocs.yml").write_text(cfg)
    with open(site / "docs" / "limitations.md", "a") as f:
        f.write("\nSee [the missing page](guide/nope.md) and [a missing anchor](guide/install.md#nope).\n")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=site,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode != 0
    assert "guide/nope.md" in r.stderr and "#nope" in r.stderr


def test_generated_pages_are_current():
    stale = [
        str(p.relative_to(ROOT)) for p, text in docs_pages.pages().items() if not p.is_file() or p.read_text() != text
    ]
    assert not stale, f"stale generated pages (run python bench/docs_pages.py): {stale}"


def test_schema_pages_cover_every_config_kind():
    from attnsim.cli.schema import kinds

    nav = _nav_pages(_mkdocs_config()["nav"])
    for k in kinds():
        assert f"reference/schemas/{k}.md" in nav
    # a field of each kind's schema is on its page: system's `devices`, the GPU's `idle_power_w`
    assert "| `devices` |" in (DOCS / "reference" / "schemas" / "system.md").read_text()
    assert "| `idle_power_w` |" in (DOCS / "reference" / "schemas" / "hardware.gpu.md").read_text()


def test_cli_page_lists_every_subcommand():
    from attnsim.cli import build_parser

    (sub,) = docs_pages._subparsers(build_parser())
    text = (DOCS / "reference" / "cli.md").read_text()
    for name in sub.choices:
        assert f"## `attnsim {name}`" in text


# The section headings of README.md before it became an entry point (commit 878b7fc, 2,260 lines); each must be a
# heading of a page in the site's nav or of README.md. Renamed ones map to their new title.
OLD_README_SECTIONS = [
    "Assumptions that can flip your verdict",
    "Usage",
    "Python API (`docs/api.md`)",
    "Metrics (definitions)",
    "Configs",
    "Trust: every setting takes effect or is refused",
    "Models",
    "GPU, NPU and link models",
    "GPU power (`hwmodels/gpu_power.py`, `attnsim validate --set power`)",
    "Collectives (`hwmodels/collectives.py`, `attnsim validate --set nccl`)",
    "Static power, host servers and software stacks",
    "Sensitivity to unpublished parameters (`attnsim sensitivity`)",
    "GPU calibration (`attnsim validate --set gpu`)",
    "Systems and mapper policies",
    "Systems of the field: IANUS, SpecPIM, Sangam, Samsung CXL-PNM, CXL-NDP, KV pools and flash",
    "Parallelism: tensor (even or not), pipeline, replicas",
    "Reproductions (`attnsim validate --set reproductions`)",
    "DRAM bank-timing engine (`hwmodels/dram/`, `attnsim dram`)",
    "DRAM cross-check against Ramulator 2.1 and DRAMsim3",
    "PIM command sets (`isa/`) and the PIM device model",
    "Your own PIM program: `attnsim pim run`",
    "PIM mapping (how attention and FC work is laid out on a PIM device)",
    "Reliability-aware KV (`hwmodels/reliability/`)",
    "Reliability-aware tiering end to end: `attnsim plan`",
    "Perplexity calibration of the accuracy proxy",
    "Sweeps, results store, figures",
    "Sweep files",
    "Commands",
    "Exporting: CSV, Parquet, pandas, xarray",
    "Baselines inside sweeps",
    "On a cluster (SLURM)",
    "Tested on a real Slurm",
    "Running on your cluster",
    "Kill safety",
    "HDF5 layout (`format = attnsim.sweep/1`)",
    "Figures",
    "Measured (2-core machine, `python bench/bench_sweep.py`)",
    "Results of `attnsim run` (HDF5)",
    "Timeline (Perfetto)",
    "Serving (request-level simulation)",
    "Benchmarks (`bench/`, they print figures; no test depends on wall time)",
    "Layout",
    "Known limitations",
]
RENAMED = {
    "Usage": "Running experiments",
    "Python API (`docs/api.md`)": "Python API reference",
    "Metrics (definitions)": "Metrics",
    "Trust: every setting takes effect or is refused": "Every setting takes effect or is refused",
    "GPU, NPU and link models": "GPU, NPU and link models: power, collectives, calibration",
    "Sweeps, results store, figures": "Sweeps and clusters",
    "Benchmarks (`bench/`, they print figures; no test depends on wall time)": "Benchmarks",
    "Layout": "Code layout",
}


def test_every_former_readme_section_is_reachable_from_the_nav():
    nav = _nav_pages(_mkdocs_config()["nav"])
    headings = set(_headings(README.read_text()))
    for page in nav:
        headings |= set(_headings((DOCS / page).read_text()))
    missing = [h for h in OLD_README_SECTIONS if RENAMED.get(h, h) not in headings]
    assert not missing


def test_every_docs_page_is_in_the_nav():
    nav = set(_nav_pages(_mkdocs_config()["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set()
    assert nav - pages == set()


def test_readme_is_an_entry_point():
    text = README.read_text()
    assert len(text.splitlines()) < 300
    # the two set-up commands stay at the very top (tests/test_packaging.py runs them in sequence)
    assert text.splitlines()[:5] == [
        "# attnsim",
        "",
        "```bash",
        "python3 -m pip install . && attnsim run",
        'python3 -m pip install -e ".[test]" && python3 -m pytest -q -n 2',
    ]
    heads = _headings(text)
    for h in (
        "A first study, end to end",
        "Metrics",
        "Config concepts",
        "Assumptions that can flip your verdict",
        "Documentation",
    ):
        assert h in heads


def test_readme_links_and_anchors_resolve():
    text = README.read_text()
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)
    assert len(links) >= 20  # the links section alone has over 20
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else README
        assert target.is_file(), f"README.md links to a missing file: {link}"
        if anchor:
            assert anchor in {_slug(h) for h in _headings(target.read_text())}, f"README.md: no anchor {link}"


def test_readme_sweep_file_is_the_builtin_first_study():
    yamls = [body for lang, body in _fences(README.read_text()) if lang == "yaml"]
    assert (ROOT / "configs" / "sweeps" / "first_study.yaml").read_text() in yamls
    assert len((ROOT / "configs" / "sweeps" / "first_study.yaml").read_text().splitlines()) <= 15


def test_readme_notebook_block_runs_and_its_claims_hold(tmp_path, monkeypatch, capsys):
    (block,) = [body for lang, body in _fences(README.read_text()) if lang == "python"]
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(block, "README.md", "exec"), ns)  # noqa: S102 - the README's own example
    df = ns["df"]
    assert len(df) == 12  # 3 systems x 4 batch sizes (configs/sweeps/first_study.yaml)
    assert (tmp_path / "first_study.png").is_file() and (tmp_path / "first_study.pdf").is_file()
    thr = df.pivot(index="batch_size_count", columns="system", values="decode_tokens_per_s")
    # README: HBM-PIM attention leads at every batch, its lead shrinking; CXL-PNM trails everywhere ...
    assert (thr["attacc_h100"] > thr["dgx_h100"]).all() and (thr["cxl_pnm"] < thr["dgx_h100"]).all()
    lead = thr["attacc_h100"] / thr["dgx_h100"]
    assert lead.is_monotonic_decreasing
    # ... and at batch 64 its decode step is bound by compute (the PNM's assumed compute peak)
    row = df[(df.system == "cxl_pnm") & (df.batch_size_count == 64)].iloc[0]
    bounds = {c.rsplit("/", 1)[1]: row[c] for c in df.columns if c.startswith("decode_step/time_s_by_bound/")}
    assert max(bounds, key=lambda k: bounds[k] if bounds[k] == bounds[k] else -1) == "compute"
    assert "attacc_h100" in capsys.readouterr().out  # the block prints the pivot table
