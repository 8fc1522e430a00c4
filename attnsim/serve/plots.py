"""Figure recipes for serving: latency CDFs and SLO attainment vs load, for several systems.

    python -m attnsim.serve.plots cdf results/serve_disagg/results.h5 -o figs/serve_cdf.pdf
    python -m attnsim.serve.plots load serve_disagg --rates 2,4,6,8 -o figs/serve_slo.pdf

``cdf`` reads the ``/requests`` table of an ``attnsim serve`` results file and draws the CDF of
TTFT, TPOT and end-to-end latency per run. ``load`` re-serves an experiment at each arrival rate
(``experiment.serving.trace.rate_per_s``) and draws SLO attainment and goodput per system.
Uses the paper style of attnsim.plots.style (Okabe-Ito palette, IEEE column widths).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from attnsim.plots.style import new_figure, paper_style, save

_PANELS = (("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (ms)"), ("latency_s", "end-to-end latency (s)"))


def _read_requests(path) -> tuple[np.ndarray, list]:
    import h5py
    from attnsim.config import ConfigError
    with h5py.File(path, "r") as f:
        if "requests" not in f:
            raise ConfigError("not an attnsim serve results file (no /requests)", file=str(path))
        return f["requests"][()], None


def latency_cdf(requests: np.ndarray, out) -> list[Path]:
    """One panel per metric, one line per run (labelled by system)."""
    with paper_style():
        fig, axes = new_figure("double", aspect=0.3, ncols=3, sharey=True)
        runs = np.unique(requests["run"])
        for run in runs:
            rows = requests[requests["run"] == run]
            label = rows["system"][0]
            label = label.decode() if isinstance(label, bytes) else str(label)
            for ax, (col, name) in zip(axes, _PANELS):
                x = np.sort(rows[col][np.isfinite(rows[col])]) * (1e3 if col == "tpot_s" else 1.0)
                ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=label)
        for ax, (_, name) in zip(axes, _PANELS):
            ax.set_xlabel(name)
            ax.set_ylim(0, 1.0)
        axes[0].set_ylabel("fraction of requests")
        h, lab = axes[0].get_legend_handles_labels()
        fig.legend(h, lab, loc="lower center", ncol=len(lab), bbox_to_anchor=(0.5, 1.0))
        paths = save(fig, out)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return paths


def slo_vs_load(experiment: str, rates: list[float], out, sets=None) -> tuple[list[Path], dict]:
    """Serve ``experiment`` at each rate; plot SLO attainment and goodput per system."""
    from attnsim.serve.run import load_serving_experiment, serve_experiment
    table: dict = {}
    for rate in rates:
        exp, sv = load_serving_experiment(experiment, list(sets or ()) + [f"experiment.serving.trace.rate_per_s={rate}"])
        for d in serve_experiment(exp, sv):
            ok = d["status"] == "ok"
            m = d.get("metrics", {})
            table.setdefault(d["system"], []).append((rate, m.get("slo_attainment", 0.0) if ok else np.nan,
                                                      m.get("goodput_rps") if ok and m.get("goodput_rps") is not None else np.nan))
    with paper_style():
        fig, axes = new_figure("double", aspect=0.35, ncols=2)
        for name, rows in table.items():
            r = np.array(rows)
            axes[0].plot(r[:, 0], 100 * r[:, 1], marker="o", label=name)
            axes[1].plot(r[:, 0], r[:, 2], marker="o", label=name)
        axes[0].set_xlabel("arrival rate (requests/s)")
        axes[0].set_ylabel("SLO attainment (%)")
        axes[0].set_ylim(0, 105)
        axes[1].set_xlabel("arrival rate (requests/s)")
        axes[1].set_ylabel("goodput (requests/s)")
        axes[0].legend(loc="lower left")
        paths = save(fig, out)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return paths, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnsim.serve.plots", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cdf")
    c.add_argument("results")
    c.add_argument("-o", "--out", default="serve_cdf.pdf")
    ld = sub.add_parser("load")
    ld.add_argument("experiment")
    ld.add_argument("--rates", required=True, help="comma-separated arrival rates (requests/s)")
    ld.add_argument("--set", dest="sets", action="append", default=[])
    ld.add_argument("-o", "--out", default="serve_slo.pdf")
    a = ap.parse_args(argv)
    if a.what == "cdf":
        req, _ = _read_requests(a.results)
        paths = latency_cdf(req, a.out)
    else:
        paths, table = slo_vs_load(a.experiment, [float(x) for x in a.rates.split(",")], a.out, a.sets)
        for name, rows in table.items():
            print(name, ", ".join(f"{r:g}/s: {100 * s:.0f}% SLO, {g:.2f} good/s" for r, s, g in rows))
    print("wrote", ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
