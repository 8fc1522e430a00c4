"""Figure recipes for serving: latency CDFs / CCDFs and SLO attainment vs load, for several systems.

    python -m attnsim.plots.serve cdf results/serve_disagg/results.h5 -o figs/serve_cdf.pdf
    python -m attnsim.plots.serve load serve_disagg --rates 2,4,6,8 -o figs/serve_slo.pdf

``cdf`` reads the ``/requests`` table of an ``attnsim serve`` results file and draws the CDF of
TTFT, TPOT and end-to-end latency per run (``--ccdf``: the complementary CDF 1 - F on a log y axis,
down to 1 / requests, with the runs' TTFT / TPOT SLOs (``serving.slo``) as vertical lines: the
tail a paper reports). ``load`` re-serves an experiment at each arrival rate
(``experiment.serving.trace.rate_per_s``) and draws SLO attainment and goodput per system.
Uses the paper style of attnsim.plots.style (Okabe-Ito palette, IEEE column widths).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from attnsim.plots.style import new_figure, paper_style, save, series_style

_PANELS = (("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (ms)"), ("latency_s", "End-to-end latency (s)"))
_SLO = {"ttft_s": "slo_ttft_s", "tpot_s": "slo_tpot_s"}  # run metrics holding the SLO of each panel


def _read_requests(path) -> tuple[np.ndarray, list]:
    import h5py

    from attnsim.core.config import ConfigError

    with h5py.File(path, "r") as f:
        if "requests" not in f:
            raise ConfigError("not an attnsim serve results file (no /requests)", file=str(path))
        return f["requests"][()], None


def read_slos(path) -> dict:
    """{panel column: sorted distinct SLO values (s)} over the ok runs of a serve results file."""
    from attnsim.studies.sweep.store import read_results

    return slos_of(read_results(path)[1])


def slos_of(docs) -> dict:
    """{panel column: sorted distinct SLO values (s)} over the ok runs among serve run documents ``docs``."""
    out: dict = {}
    for d in docs:
        for col, key in _SLO.items():
            v = (d.get("metrics") or {}).get(key)
            if d.get("status") == "ok" and isinstance(v, (int, float)) and np.isfinite(v):
                out.setdefault(col, set()).add(float(v))
    return {k: sorted(v) for k, v in out.items()}


def check_request_labels(labels: dict | None, requests: np.ndarray, file: str = "plot") -> None:
    """Refuse a display label for a name a latency figure never draws (built-in names and the rows' text fields)."""
    if labels is None:
        return
    from attnsim.plots.labels import check_labels, known_keys

    text = {
        str(v)
        for n in (requests.dtype.names or ())
        if requests[n].dtype.kind in "OSU"
        for v in np.unique(requests[n])[:10_000]
    }
    check_labels(labels, file, "labels", known=known_keys() | text)


def cdf_figure(requests: np.ndarray, ccdf: bool = False, slos: dict | None = None, logx=None):
    """One panel per metric, one line per run (labelled by system, through the display labels).
    ``ccdf``: 1 - F(x) on log-log axes (``logx=False``: linear x) with the SLOs in ``slos`` ({column:
    [seconds]}) as vertical lines."""
    from attnsim.core.config import ConfigError
    from attnsim.plots.labels import display
    from attnsim.plots.ticks import fit_ticks

    if len(requests) == 0:
        raise ConfigError("no requests to plot", file="plot")
    fig, axes = new_figure("double", aspect=0.42, ncols=3, sharey=True)
    runs = np.unique(requests["run"])
    n_max = 1
    for j, run in enumerate(runs):
        rows = requests[requests["run"] == run]
        label = rows["system"][0]
        label = display(label.decode() if isinstance(label, bytes) else str(label))
        for ax, (col, name) in zip(axes, _PANELS):
            x = np.sort(rows[col][np.isfinite(rows[col])]) * (1e3 if col == "tpot_s" else 1.0)
            n_max = max(n_max, len(x))
            st = series_style(j, marker=False)
            if ccdf:  # P(X > x) just after each sample; the last sample (1 - F = 0) cannot sit on a log axis
                ax.step(x[:-1], 1.0 - np.arange(1, len(x)) / len(x), where="post", label=label, **st)
            else:
                ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=label, **st)
    slo_label = "SLO"
    for ax, (col, name) in zip(axes, _PANELS):
        ax.set_xlabel(name)
        if ccdf:
            for v in (slos or {}).get(col, []):
                ax.axvline(
                    v * (1e3 if col == "tpot_s" else 1.0),
                    color="0.3",
                    linewidth=0.8,
                    linestyle=(0, (1, 1)),
                    label=slo_label,
                    gid="slo",
                )
                slo_label = "_nolegend_"
        if logx or (logx is None and ccdf):  # tails span decades: log x by default on a CCDF
            ax.set_xscale("log")
        ax._attnsim_units = (1.0, 1.0)
    if ccdf:
        axes[0].set_yscale("log")
        axes[0].set_ylim(0.5 / n_max, 1.0)
        axes[0].set_ylabel("Fraction of requests > x")
    else:
        axes[0].set_ylim(0, 1.0)
        axes[0].set_ylabel("Fraction of requests \u2264 x")
    h, lab = [], []
    for ax in axes:  # the SLO entry may come from the TPOT panel
        for hh, ll in zip(*ax.get_legend_handles_labels()):
            if ll not in lab:
                h.append(hh)
                lab.append(ll)
    fig.legend(h, lab, loc="lower center", ncol=len(lab), bbox_to_anchor=(0.5, 1.0))
    fit_ticks(fig)
    return fig


def latency_cdf(
    requests: np.ndarray,
    out,
    ccdf: bool = False,
    slos: dict | None = None,
    logx=None,
    labels: dict | None = None,
    font=None,
) -> list[Path]:
    """Render :func:`cdf_figure` to ``out`` (+ PDF/PNG sibling) with display ``labels`` and ``font``."""
    from attnsim.plots.labels import active

    with paper_style(font), active(labels):
        fig = cdf_figure(requests, ccdf=ccdf, slos=slos, logx=logx)
        paths = save(fig, out)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


def slo_vs_load(experiment: str, rates: list[float], out, sets=None) -> tuple[list[Path], dict]:
    """Serve ``experiment`` at each rate; plot SLO attainment and goodput per system."""
    from attnsim.studies.serve.run import load_serving_experiment, serve_experiment

    table: dict = {}
    for rate in rates:
        exp, sv = load_serving_experiment(
            experiment, list(sets or ()) + [f"experiment.serving.trace.rate_per_s={rate}"]
        )
        for d in serve_experiment(exp, sv):
            ok = d["status"] == "ok"
            m = d.get("metrics", {})
            table.setdefault(d["system"], []).append(
                (
                    rate,
                    m.get("slo_attainment", 0.0) if ok else np.nan,
                    m.get("goodput_rps") if ok and m.get("goodput_rps") is not None else np.nan,
                )
            )
    with paper_style():
        fig, axes = new_figure("double", aspect=0.35, ncols=2)
        from attnsim.plots.labels import display

        for j, (name, rows) in enumerate(table.items()):
            r = np.array(rows)
            axes[0].plot(r[:, 0], 100 * r[:, 1], label=display(name), **series_style(j))
            axes[1].plot(r[:, 0], r[:, 2], label=display(name), **series_style(j))
        axes[0].set_xlabel("Arrival rate (requests/s)")
        axes[0].set_ylabel("SLO attainment (%)")
        axes[0].set_ylim(0, 105)
        axes[1].set_xlabel("Arrival rate (requests/s)")
        axes[1].set_ylabel("Goodput (requests/s)")
        axes[0].legend(loc="lower left")
        paths = save(fig, out)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m attnsim.plots.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cdf")
    c.add_argument("results")
    c.add_argument("-o", "--out", default="serve_cdf.pdf")
    c.add_argument("--ccdf", action="store_true", help="complementary CDF on a log y axis with the SLO lines")
    ld = sub.add_parser("load")
    ld.add_argument("experiment")
    ld.add_argument("--rates", required=True, help="comma-separated arrival rates (requests/s)")
    ld.add_argument("--set", dest="sets", action="append", default=[])
    ld.add_argument("-o", "--out", default="serve_slo.pdf")
    a = ap.parse_args(argv)
    if a.what == "cdf":
        req, _ = _read_requests(a.results)
        paths = latency_cdf(req, a.out, ccdf=a.ccdf, slos=read_slos(a.results) if a.ccdf else None)
    else:
        paths, table = slo_vs_load(a.experiment, [float(x) for x in a.rates.split(",")], a.out, a.sets)
        for name, rows in table.items():
            print(name, ", ".join(f"{r:g}/s: {100 * s:.0f}% SLO, {g:.2f} good/s" for r, s, g in rows))
    print("wrote", ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
