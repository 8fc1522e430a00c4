"""All-reduce time vs message size: nccl-tests measured vs attnsim's collectives model, per topology.

Rows of configs/validation/nccl.yaml (calibration/nccl_allreduce.csv: N1 8 x A100 NVSwitch, N4 4 x A100
NVLink mesh, N6 4 x H100 NVSwitch in a VM), modelled through the link presets (nvlink3, nvlink4 without
NVLS for N6), with the ring formula (``allreduce: ring``, the model before the tuner) and the framework
custom all-reduce (``allreduce: custom``) for comparison. Top: time (log-log), the tuner's protocol per
size marked; bottom: model / measured - 1. Prints the worst row per topology.

Run: python bench/bench_nccl.py [--out results/figures/nccl_allreduce.png]
"""

from __future__ import annotations

import argparse

import numpy as np

MARK = {"LL": "o", "LL128": "s", "Simple": "^", "Simple-nvls": "D"}


def curves():
    """Per topology: (label, sizes, measured us, tuned us, tuned choice, ring-formula us, custom us)."""
    from attnsim.core.config import CONFIG_ROOT, load_yaml
    from attnsim.hwmodels.gpu import load_hardware
    from attnsim.hwmodels.links import LinkModel

    data = load_yaml(CONFIG_ROOT / "validation" / "nccl.yaml")
    out = []
    for key, topo in data["topologies"].items():
        spec = load_hardware(topo["link"]).spec
        if not topo["nvls"]:
            spec = spec.model_copy(update={"nccl": spec.nccl.model_copy(update={"nvls": None})})
        n = int(topo["gpus"])
        s = np.array([r[0] for r in topo["rows"]], dtype=np.float64)
        meas = np.array([r[1] for r in topo["rows"]], dtype=np.float64)
        t, choice = LinkModel(spec).collective("allreduce", s, n)
        ring = LinkModel(spec.model_copy(update={"allreduce": "ring"})).collective("allreduce", s, n)[0]
        custom = LinkModel(spec.model_copy(update={"allreduce": "custom"})).collective("allreduce", s, n)[0]
        short = (
            f"{key}: {n} x {'H100' if 'H100' in topo['topology'] else 'A100'}, "
            + ("NVLink mesh" if "all-to-all" in topo["topology"] else "NVSwitch")
            + ("" if topo["nvls"] else " (no NVLS)")
        )
        out.append((short, s, meas, t * 1e6, choice, ring * 1e6, custom * 1e6))
    return out


def figure(data):
    from attnsim.plots.style import new_figure

    fig, axes = new_figure("double", aspect=0.9, nrows=2, ncols=len(data), sharex="col")
    for j, (label, s, meas, t, choice, ring, custom) in enumerate(data):
        top, bot = axes[0][j], axes[1][j]
        top.loglog(s, meas, "k.", ms=4, label="nccl-tests (measured)")
        top.loglog(s, t, "-", color="C0", lw=1, label="attnsim nccl (tuner)")
        for proto, m in MARK.items():
            sel = np.array(
                [
                    c.split("/")[-1] == proto.split("-")[0] and (c.startswith("nvls") == proto.endswith("nvls"))
                    for c in choice
                ]
            )
            if sel.any():
                top.loglog(s[sel], t[sel], m, color="C0", ms=3, mfc="none", label=proto)
        top.loglog(s, ring, "--", color="C1", lw=0.8, label="ring formula (old)")
        top.loglog(s, custom, ":", color="C2", lw=0.8, label="custom one/two-shot")
        top.set_title(label, fontsize=7)
        bot.semilogx(s, 100 * (t / meas - 1), "o-", color="C0", ms=2, lw=0.8)
        bot.axhspan(-15, 15, color="0.9", zorder=0)
        bot.set_ylim(-40, 40)
        bot.set_xlabel("message size [B]")
    axes[0][0].set_ylabel("all-reduce time [us]")
    axes[1][0].set_ylabel("model/measured - 1 [%]")
    fig.align_ylabels(axes[:, 0])
    axes[0][-1].legend(fontsize=5, loc="upper left", ncol=1)
    return fig


def main(argv=None):
    from attnsim.core.outputs import check_output
    from attnsim.plots.style import paper_style, save

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/figures/nccl_allreduce.png")
    args = ap.parse_args(argv)
    check_output(args.out, "--out")
    data = curves()
    for label, s, meas, t, *_ in data:
        e = t / meas - 1
        i = int(np.argmax(np.abs(e)))
        print(f"{label}: {len(s)} rows, max |error| {abs(e[i]):.1%} at {int(s[i])} B")
    with paper_style():
        paths = save(figure(data), args.out)
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
