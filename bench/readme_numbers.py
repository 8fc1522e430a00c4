"""Regenerate (or check) the simulated numbers quoted in README.md and the docs site, so they cannot go stale.

README.md and the pages under docs/ (every ``docs/**/*.md``) hold blocks between ``<!-- readme-numbers:NAME -->``
and ``<!-- /readme-numbers:NAME -->``; each NAME is produced by one generator below from real attnsim runs
(simulated quantities only, never wall times, so the output is deterministic) and may appear in several files
(README.md and the site's copy of it, docs/index.md). tests/test_readme_numbers.py regenerates every block and
compares it with every file that holds it, so a table stays true wherever it moves.

    python bench/readme_numbers.py            # rewrite the blocks in README.md and docs/**/*.md
    python bench/readme_numbers.py --check    # exit 1 and print a diff if a file is stale
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# the opening marker may be followed by one blank line, kept on rewrite (Python-Markdown, which builds the docs site,
# needs it before a table: without it the table joins the comment's raw-HTML block)
BLOCK = re.compile(
    r"(<!-- readme-numbers:(?P<name>[\w-]+) -->\n\n?)(?P<body>.*?)(<!-- /readme-numbers:(?P=name) -->)", re.S
)


def _serve(experiment: str, sets: list[str] = ()) -> list[dict]:
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    return serve_experiment(*load_serving_experiment(experiment, list(sets)))


def _lat(m: dict, what: str) -> str:
    p50, p99 = m[f"{what}_p50"], m[f"{what}_p99"]
    if what == "tpot":
        return f"{p50 * 1e3:.1f} / {p99 * 1e3:.1f} ms"
    if p50 >= 10:
        return f"{p50:.0f} / {p99:.0f} s"
    return f"{p50 * 1e3:.0f} / {p99 * 1e3:.0f} ms"


def _pct(x: float) -> str:
    return f"{x:.1%}".replace("%", " %")


def serve_examples() -> str:
    """The serving examples table (configs/experiments/serve_*.yaml)."""
    lines = [
        "| example | variant | req/s | TTFT p50 / p99 | TPOT p50 / p99 | SLO | goodput | note |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def add(example, variant, run, note):
        m = run["metrics"]
        lines.append(
            f"| {example} | {variant} | {m['throughput_rps']:.2f} | {_lat(m, 'ttft')} | {_lat(m, 'tpot')} | "
            f"{_pct(m['slo_attainment'])} | {m['goodput_rps']:.2f}/s | {note} |"
        )

    rate5 = ["experiment.serving.trace.rate_per_s=5"]
    for i, (variant, sets) in enumerate(
        (
            ("paged, 16-token blocks", rate5),
            ("contiguous (prompt + 1024 reserved)", rate5 + ["experiment.serving.kv.layout=contiguous"]),
        )
    ):
        (run,) = _serve("serve_paging", sets)
        s = run["serving"]
        add(
            "`serve_paging` (Llama-2-13B, 1 x H100, 5 req/s*)" if i == 0 else "",
            variant,
            run,
            f"fragmentation {_pct(s['mean_fragmentation'])}, max batch {s['max_batch']}",
        )
    for i, (variant, sets) in enumerate((("caching on", []), ("off", ["experiment.serving.kv.prefix_caching=false"]))):
        (run,) = _serve("serve_prefix", sets)
        s, m = run["serving"], run["metrics"]
        note = (
            f"hit rate {_pct(s['prefix_hit_rate'])}, " if s["prefix_hits"] else ""
        ) + f"{m['energy_per_request_j']:.0f} J/request"
        add(
            "`serve_prefix` (Llama-3-8B, 1 x H100, 12 req/s, 90 % share 4 x 1536-token prefixes)" if i == 0 else "",
            variant,
            run,
            note,
        )
    policies = (
        ("none", "experiment.serving.kv.policy={kind: none}"),
        ("streaming (4 + 1020)", "experiment.serving.kv.policy={kind: streaming, sink_tokens: 4, window_tokens: 1020}"),
        ("h2o (256 + 256)", "experiment.serving.kv.policy={kind: h2o, heavy_tokens: 256, recent_tokens: 256}"),
        ("snapkv (1024)", None),
        ("quest (1024, pages 16)", "experiment.serving.kv.policy={kind: quest, budget_tokens: 1024, page_tokens: 16}"),
    )
    for i, (variant, s) in enumerate(policies):
        (run,) = _serve("serve_eviction", [s] if s else [])
        acc = run["serving"].get("kv_policy_accuracy")
        note = "KV full, overloaded" if acc is None else f"attention error {acc['rel_err']:.3f}"
        if variant.startswith(("h2o", "snapkv")):
            note += " (optimistic scores)"
        add("`serve_eviction` (Llama-2-13B, 1 x H100, 4-8k prompts, 1.5 req/s)" if i == 0 else "", variant, run, note)
    labels = {"a100_hbm3_x8": "A100-HBM3 x8 colocated", "attacc": "AttAcc colocated"}
    for i, run in enumerate(_serve("serve_disagg")):
        m = run["metrics"]
        add(
            "`serve_disagg` (GPT-3 175B, 1 req/s)" if i == 0 else "",
            labels.get(run["system"], run["system"] + ", NVLink3"),
            run,
            ("two systems: " if run.get("disaggregation") else "") + f"{m['energy_per_request_j']:.0f} J/request",
        )
    return "\n".join(lines) + "\n"


def serve_slo_load() -> str:
    """SLO attainment vs arrival rate on serve_disagg (what ``attnsim serve --slo-vs-load`` plots)."""
    names = {"a100_hbm3_x8": "A100", "attacc": "AttAcc"}
    parts = []
    for rate in (2, 2.5):
        runs = _serve(
            "serve_disagg", [f"experiment.serving.trace.rate_per_s={rate}", "experiment.serving.trace.num_requests=300"]
        )
        slo = " / ".join(f"{r['metrics']['slo_attainment']:.0%}".replace("%", " %") for r in runs)
        good = " / ".join(f"{r['metrics']['goodput_rps']:.2f}" for r in runs)
        who = ", ".join(names.get(r["system"], "disaggregated") for r in runs)
        parts.append(f"at {rate:g} req/s SLO attainment {slo} ({who}), goodput {good} req/s")
    return "SLO attainment vs load on `serve_disagg` (300 requests per point): " + "; ".join(parts) + ".\n"


def _run(experiment: str, sets: list[str] = ()) -> list[dict]:
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    return run_experiment(load_experiment(experiment, list(sets)))


def systems_compare() -> str:
    """``attnsim run systems_compare``'s table (one system of each family)."""
    from attnsim.core.report import summary_table

    return (
        "```\n$ attnsim run systems_compare          # Llama-2-70B, batch 16, 2048 + 128 tokens, fp16 "
        "(baseline a100_hbm3_x8)\n" + summary_table(_run("systems_compare")).rstrip("\n") + "\n```\n"
    )


def default_run() -> str:
    """What ``attnsim run`` (the default experiment) prints: the table and the "what differs" lines with each
    compared system's verdict line (attnsim.studies.verdict; the cost line after them holds a wall time: left out)."""
    from attnsim.core.report import differ_lines, summary_table
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment
    from attnsim.studies.verdict import add_flips

    exp = load_experiment("default")
    docs = run_experiment(exp)
    add_flips(exp.tree, docs, exp.spec.baseline)
    return (
        "```\n$ attnsim run\n" + summary_table(docs).rstrip("\n") + "\n\nwhat differs and why (decode step = one "
        "token for the whole batch; attention = attn_score + softmax + attn_context):\n"
        + "\n".join(differ_lines(docs))
        + "\n```\n"
    )


def reliability_tiering() -> str:
    """The relaxed-refresh table of ``attnsim run reliability_tiering``."""
    docs = _run("reliability_tiering")
    label = {"jedec": "64 ms (JEDEC)", "relaxed_1s": "1 s", "relaxed_20s": "20 s"}
    lines = [
        "| mantissa refresh | effective refresh | refresh energy / decode step | TPOT | J/token "
        "| silent errors / token "
        "| accuracy proxy | SLO (0.05) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ref = docs[0]
    e0 = ref["breakdown"]["decode_step"]["energy_j_by_component"]["dram_refresh"]
    for d in docs:
        m = d["metrics"]
        e = d["breakdown"]["decode_step"]["energy_j_by_component"]["dram_refresh"]
        rel = "" if d is ref else f" ({e / e0 - 1:+.0%})".replace("%", " %")
        jrel = (
            ""
            if d is ref
            else f" ({m['energy_per_token_j'] / ref['metrics']['energy_per_token_j'] - 1:+.1%})".replace("%", " %")
        )
        se = m["silent_errors_per_token"]
        se_txt = f"{se:.1e}".replace("e+0", "e").replace("e-0", "e-") if (se < 0.01 or se >= 1e4) else f"{se:.0f}"
        lines.append(
            f"| {label[d['scenario']['name']]} | {m['refresh_interval_ms']['cxl']:.0f} ms | {e:.3f} J{rel} | "
            f"{m['tpot_s'] * 1e3:.3f} ms | {m['energy_per_token_j']:.2f}{jrel} | {se_txt} | "
            f"{m['accuracy_proxy']:.4f} | {'met' if m['slo_met'] else '**broken**'} |"
        )
    return "\n".join(lines) + "\n"


def first_study() -> str:
    """What ``attnsim show`` prints for README's first study (configs/sweeps/first_study.yaml), run into a temporary
    store (the simulated columns only: no wall time is printed)."""
    import tempfile

    from attnsim.api import sweep
    from attnsim.studies.sweep.store import read_results
    from attnsim.studies.sweep.table import load_table, sweep_text

    with tempfile.TemporaryDirectory() as d:
        res = sweep("first_study", Path(d) / "first_study.h5")
        text = f"experiment: {read_results(res.path)[0].get('experiment')}\n" + sweep_text(load_table(res.path))
    return "```\n$ attnsim show results/first_study.h5\n" + text.rstrip("\n") + "\n```\n"


def plan_tiering() -> str:
    """What ``attnsim plan plan_tiering --accuracy-slo 0.01 --tpot-slo-s 0.05`` prints (simulated numbers only)."""
    import contextlib
    import io

    from attnsim.cli import main as cli

    argv = ["plan", "plan_tiering", "--accuracy-slo", "0.01", "--tpot-slo-s", "0.05"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli(argv)
    if rc != 0:
        raise SystemExit(f"error: attnsim {' '.join(argv)}: exit status {rc}")
    return "```\n$ attnsim " + " ".join(argv) + "\n" + buf.getvalue().rstrip("\n") + "\n```\n"


def long_context() -> str:
    """``attnsim run`` of the default systems on Llama-3-70B at 32k context, batch 4: the table and the "what
    differs" lines with each compared system's verdict line (as :func:`default_run`)."""
    from attnsim.core.report import differ_lines, summary_table
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment
    from attnsim.studies.verdict import add_flips

    exp = load_experiment("default", LONG_CONTEXT_SETS)
    docs = run_experiment(exp)
    add_flips(exp.tree, docs, exp.spec.baseline)
    sets = " ".join(f"--set {s}" if "[" not in s else f"--set '{s}'" for s in LONG_CONTEXT_SETS)
    return (
        f"```\n$ attnsim run {sets}\n"
        + summary_table(docs).rstrip("\n")
        + "\n\n"
        + "\n".join(differ_lines(docs))
        + "\n```\n"
    )


LONG_CONTEXT_SETS = [
    "experiment.models=[llama3-70b]",
    "scenarios.chat.prompt_len=32768",
    "scenarios.chat.beyond_max_position=allow",
    "scenarios.chat.batch_size=4",
]

GENERATORS = {
    "long-context": long_context,
    "plan-tiering": plan_tiering,
    "default-run": default_run,
    "first-study": first_study,
    "serve-examples": serve_examples,
    "serve-slo-load": serve_slo_load,
    "systems-compare": systems_compare,
    "reliability-tiering": reliability_tiering,
}


def files() -> list[Path]:
    """The files scanned for blocks: README.md, then every docs/**/*.md (sorted)."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def render(text: str, names=None, *, file: str = "README.md", cache: dict | None = None) -> str:
    """``text`` with every block (or those in ``names``) regenerated; ``cache`` holds generator outputs already
    computed (a block in several files runs its generator once)."""
    cache = {} if cache is None else cache

    def sub(mt):
        name = mt.group("name")
        if names is not None and name not in names:
            return mt.group(0)
        if name not in GENERATORS:
            raise SystemExit(f"error: {file}: readme-numbers:{name}: no generator (have: {', '.join(GENERATORS)})")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return mt.group(1) + cache[name] + mt.group(4)

    return BLOCK.sub(sub, text)


def blocks(text: str) -> dict[str, str]:
    return {mt.group("name"): mt.group("body") for mt in BLOCK.finditer(text)}


def all_blocks() -> list[tuple[Path, str, str]]:
    """(file, name, body) of every block in :func:`files`."""
    return [(f, mt.group("name"), mt.group("body")) for f in files() for mt in BLOCK.finditer(f.read_text())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if a file is stale")
    ap.add_argument("names", nargs="*", help="blocks to regenerate (default: all)")
    args = ap.parse_args()
    cache: dict = {}
    stale = []
    for f in files():
        old = f.read_text()
        if not BLOCK.search(old):
            continue
        rel = str(f.relative_to(ROOT))
        new = render(old, set(args.names) or None, file=rel, cache=cache)
        if new == old:
            continue
        stale.append(rel)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, "generated"))
        else:
            f.write_text(new)
    if args.check:
        if stale:
            sys.exit(1)
        print("README.md and docs numbers are current")
        return
    print(f"{len(stale)} file(s) regenerated{': ' + ', '.join(stale) if stale else ''}")


if __name__ == "__main__":
    main()
