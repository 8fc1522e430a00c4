"""GPU serving power and J/token per batch: ML.ENERGY v3 (H100, vLLM, lm-arena-chat) measured vs attnsim.

Rows of configs/validation/power.yaml (shared/reference/calibration/mlenergy_v3_h100.csv), each run as its
serving equivalent under software: vllm (attnsim.studies.validate.power_runs: prefill + decode steps at the
token-weighted mean context). Columns: Llama-3.1-8B TP1
(calibration: the h100_sxm power parameters were fitted to its power), Llama-3.1-70B TP4 (held out). Rows:
per-GPU power (700 W board cap dashed), J/token (log), and the time side: attnsim's step time per output
token (prefill amortised, and the decode step) vs the measured mean step (batch / output tok/s) and median
ITL. Prints a per-batch table, measured / attnsim / error (power, J/token, step vs batch / tok/s, decode step
vs median ITL) for every model of the set (Llama-3.3-70B TP4 too).

Run: python bench/bench_power.py [--out results/figures/gpu_power_mlenergy.png] [--set KEY=VALUE ...]
(--set: overrides applied to every row, e.g. hardware.h100_sxm.sm_active_power_w=300 for a before/after)
"""

from __future__ import annotations

import argparse

import numpy as np

MODELS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B, 1 x H100 (calibration)"),
    ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B, 4 x H100 TP4 (held out)"),
)


def columns(runs):
    out = []
    for mid, label in MODELS:
        rs = sorted((r for r in runs if r["model_id"] == mid), key=lambda r: r["avg_batch_size"])
        col = {
            k: np.array([r[k] for r in rs], dtype=np.float64)
            for k in (
                "avg_batch_size",
                "avg_power_w_per_gpu",
                "model_power_w_per_gpu",
                "energy_per_token_j",
                "model_energy_per_token_j",
                "median_itl_ms",
                "model_tpot_ms",
                "model_step_ms",
                "output_tok_per_s",
            )
        }
        col["step_ms"] = col["avg_batch_size"] / col["output_tok_per_s"] * 1e3
        out.append((label, col))
    return out


def table(runs) -> str:
    """Per row: batch, role, measured / attnsim W per GPU, J/token, step per output token (measured: batch /
    output tok/s) and decode step (measured: median ITL), with attnsim's relative error of each."""
    lines = [
        f"{'model':24s} {'batch':>6s} {'role':11s} {'W/GPU meas/model':>22s} {'J/tok meas/model':>25s} "
        f"{'step ms meas/model':>24s} {'ITL/TPOT ms':>24s}"
    ]
    for r in sorted(runs, key=lambda r: (r["model_id"], r["avg_batch_size"])):
        step = r["avg_batch_size"] / r["output_tok_per_s"] * 1e3
        cells = []
        for meas, mod, fmt in (
            (r["avg_power_w_per_gpu"], r["model_power_w_per_gpu"], "6.1f"),
            (r["energy_per_token_j"], r["model_energy_per_token_j"], "7.4f"),
            (step, r["model_step_ms"], "6.2f"),
            (r["median_itl_ms"], r["model_tpot_ms"], "6.2f"),
        ):
            cells.append(f"{meas:{fmt}} {mod:{fmt}} {mod / meas - 1:+6.1%}")
        lines.append(
            f"{r['model_id'].split('/')[-1]:24s} {r['avg_batch_size']:6.0f} {r['role']:11s} " + "  ".join(cells)
        )
    return "\n".join(lines)


def figure(data):
    from attnsim.plots.style import new_figure

    fig, axes = new_figure("double", aspect=1.25, nrows=3, ncols=len(data), sharex="col")
    for j, (label, c) in enumerate(data):
        b = c["avg_batch_size"]
        ax = axes[0][j]
        ax.semilogx(b, c["avg_power_w_per_gpu"], "ko", ms=3, label="ML.ENERGY (measured)")
        ax.semilogx(b, c["model_power_w_per_gpu"], "s-", color="C0", ms=3, lw=0.8, label="attnsim")
        ax.fill_between(b, 0.85 * c["avg_power_w_per_gpu"], 1.15 * c["avg_power_w_per_gpu"], color="0.9", zorder=0)
        ax.axhline(700, color="0.5", ls="--", lw=0.6)
        ax.set_ylim(300, 760)
        ax.set_title(label, fontsize=7)
        ax = axes[1][j]
        ax.loglog(b, c["energy_per_token_j"], "ko", ms=3, label="measured")
        ax.loglog(b, c["model_energy_per_token_j"], "s-", color="C0", ms=3, lw=0.8, label="attnsim")
        ax.fill_between(b, 0.85 * c["energy_per_token_j"], 1.15 * c["energy_per_token_j"], color="0.9", zorder=0)
        ax = axes[2][j]
        ax.loglog(b, c["step_ms"], "ko", ms=3, label="measured batch / tok/s")
        ax.loglog(b, c["median_itl_ms"], "k^", ms=3, mfc="none", label="measured median ITL")
        ax.loglog(b, c["model_step_ms"], "s-", color="C0", ms=3, lw=0.8, label="attnsim step (prefill amortised)")
        ax.loglog(b, c["model_tpot_ms"], ":", color="C0", lw=0.8, label="attnsim decode step")
        ax.set_xlabel("average batch (requests)")
    axes[0][0].set_ylabel("W per GPU")
    axes[1][0].set_ylabel("J / output token")
    axes[2][0].set_ylabel("step [ms]")
    fig.align_ylabels(axes[:, 0])
    axes[0][0].legend(fontsize=5, loc="lower right")
    axes[2][0].legend(fontsize=5, loc="upper left")
    return fig


def main(argv=None):
    from attnsim.core.outputs import check_output
    from attnsim.plots.style import paper_style, save
    from attnsim.studies import validate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/figures/gpu_power_mlenergy.png")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every row")
    args = ap.parse_args(argv)
    check_output(args.out, "--out")
    runs = validate.power_runs(sets=tuple(args.set))
    print(table(runs))
    data = columns(runs)
    for label, c in data:
        ep = c["model_power_w_per_gpu"] / c["avg_power_w_per_gpu"] - 1
        ej = c["model_energy_per_token_j"] / c["energy_per_token_j"] - 1
        et = c["model_step_ms"] / c["step_ms"] - 1
        print(
            f"{label}: W/GPU max |err| {np.abs(ep).max():.1%}, J/token max |err| {np.abs(ej).max():.1%}, "
            f"step time err {et.min():+.1%} .. {et.max():+.1%}"
        )
    with paper_style():
        paths = save(figure(data), args.out)
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
