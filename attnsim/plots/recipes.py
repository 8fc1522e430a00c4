"""Figure recipes: small functions over a results :class:`~attnsim.studies.sweep.table.Table` -> matplotlib Figure.

Every recipe takes ``(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts)``
(rows already selected with ``--where``; ``opts``: the recipe's own options, e.g. ``baseline``) and
returns the Figure; the axes carry labelled units and, for series, a legend with one entry per series
(names through :func:`attnsim.plots.labels.display`), so tests and users can inspect what was drawn.
Points whose status is ``does_not_fit`` (the model or KV cache exceeds the memory) are drawn as an
"x" with a "does not fit" legend entry, never dropped silently. Each data axis records the factors
from the stored (SI) values to the drawn ones (``ax._attnsim_units``) for ``xlim``/``ylim``.
"""

from __future__ import annotations

import textwrap

import numpy as np

from attnsim.core.config import ConfigError
from attnsim.plots.labels import display
from attnsim.plots.style import (
    HATCHES,
    KNOWN,
    LINE_COLOURS,
    MARKERS,
    OKABE_ITO,
    label_for,
    new_figure,
    op_class_style,
    scale_for,
    segment_style,
    series_style,
)

MAX_BARS = 64  # one bar per run: 64 fit a double-column figure with rotated labels
TOP_SEGMENTS = 7  # stacked bars: the largest segments, the rest summed as "other"
ALWAYS_SHOWN = ("pim_compute",)  # never summed into "other": what a PIM design is compared on (issue 28)


def _need(table, what: str):
    if len(table) == 0:
        raise ConfigError(f"no rows to plot ({what}); check --where", file=table.path)


DOES_NOT_FIT = "does_not_fit"  # run/point status when weights or KV exceed the memory (attnsim.sim.runner)
DNF_LABEL = "does not fit"


def _status_is(table, *values) -> np.ndarray:
    if "status" not in table.columns:
        return np.full(len(table), "ok" in values)
    st = table.columns["status"]
    return np.array([str(v) in values for v in st], dtype=bool)


def _ok(table, dnf: bool = False):
    """The ok rows (and, with ``dnf``, the does-not-fit rows too)."""
    return _take(table, np.nonzero(_status_is(table, "ok", *((DOES_NOT_FIT,) if dnf else ())))[0])


def _units(ax, xf=1.0, yf=1.0):
    ax._attnsim_units = (xf, yf)


def _mark_dnf(ax, xs, colours, legend=True):
    """An "x" on the x axis at each x (drawn coordinates) of a point that does not fit (it has no y)."""
    from matplotlib.transforms import blended_transform_factory

    if not len(xs):
        return
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for xv, c in zip(xs, colours):
        ax.plot(
            [xv],
            [0.0],
            marker="x",
            markersize=5,
            markeredgewidth=1.2,
            linestyle="none",
            color=c,
            transform=tr,
            clip_on=False,
            zorder=4,
            label="_nolegend_",
        )
    if legend:
        ax.plot([], [], marker="x", markersize=5, markeredgewidth=1.2, linestyle="none", color="black", label=DNF_LABEL)


def _take(table, idx):
    from attnsim.studies.sweep.table import Table

    return Table(
        table.path,
        table.kind,
        table.attrs,
        {k: v[idx] for k, v in table.columns.items()},
        {k: v[idx] for k, v in table.breakdown.items()},
        table.parameters,
        table._docs,
        lambda r: table.resolved(int(idx[r])),
    )


def _varying(table, candidates) -> list[str]:
    out = []
    for c in candidates:
        if c in table.columns and len({str(v) for v in table.columns[c]}) > 1:
            out.append(c)
    return out


def _row_labels(table) -> list[str]:
    cols = _varying(
        table,
        ["system", "model", "scenario"] + [p for p in table.parameters if p not in ("system", "model", "scenario")],
    )
    if not cols:
        cols = ["system"]
    return [
        ", ".join(
            display(table.columns[c][i])
            if c in ("system", "model", "scenario")
            else _param_text(c, table.columns[c][i])
            for c in cols
        )
        for i in range(len(table))
    ]


def _param_text(column: str, value) -> str:
    """A swept value as a tick label: "512 tokens", "Batch size 16", "tp=4" (unknown names)."""
    name, _ = label_for(column)
    v = display(_fmt(value))
    if name.endswith(")"):  # a unit: "Context length (tokens)"
        return f"{v} {name[name.rindex('(') + 1 : -1]}"
    if column.split(".")[-1] in KNOWN:  # a known name without a unit: "Batch size 16"
        return f"{name} {v}"
    return f"{column.split('.')[-1]}={v}"


# ---------------------------------------------------------------- stacked breakdowns


def _stacked(
    table,
    prefix: str,
    ylabel_name: str,
    unit: str,
    per_token: bool,
    width: str,
    title,
    split: tuple | None = None,
    components=None,
):
    """``split`` = (segment, prefix2, label): segment ``segment`` of ``prefix`` is replaced by the
    ``prefix2`` columns (labelled ``label: <name>``) where the file has them (same total). ``components``:
    the segments to draw (names as stored, e.g. ``pim_compute``, ``static: gpu``), the rest as "other";
    default: the TOP_SEGMENTS largest plus any of ALWAYS_SHOWN."""
    table = _ok(table, dnf=True)
    _need(table, "stacked breakdown")
    dnf = _status_is(table, DOES_NOT_FIT)
    if len(table) > MAX_BARS:
        raise ConfigError(f"{len(table)} bars; select at most {MAX_BARS} rows with --where", file=table.path)
    names = sorted(k[len(prefix) :] for k in table.breakdown if k.startswith(prefix))
    if not names:
        raise ConfigError(f"the file has no breakdown {prefix.rstrip('/')!r}", file=table.path)
    cols = [prefix + n for n in names]
    if split is not None and split[0] in names and any(k.startswith(split[1]) for k in table.breakdown):
        subs = sorted(k for k in table.breakdown if k.startswith(split[1]))
        i = names.index(split[0])
        names = names[:i] + [f"{split[2]}: {k[len(split[1]) :]}" for k in subs] + names[i + 1 :]
        cols = cols[:i] + subs + cols[i + 1 :]
    data = np.nan_to_num(np.array([table.breakdown[c] for c in cols]))  # segments x rows
    if per_token:
        data = data / np.maximum(1, table.col("batch_size").astype(float))[None, :]
    order = np.argsort(-data.sum(axis=1))
    if components is not None:  # the caller's segments, in its order; the rest summed as "other"
        unknown = [c for c in components if c not in names]
        if unknown:
            from attnsim.core.suggest import did_you_mean

            raise ConfigError(
                f"expected segments of the file's {prefix.rstrip('/')!r} ({', '.join(names)}), got "
                f"{unknown[0]!r}{did_you_mean(unknown[0], names)}",
                file="plot",
                key="components",
            )
        keep = [names.index(c) for c in components]
    else:  # the largest segments, plus the ones never summed into "other" (ALWAYS_SHOWN) when present
        keep = [i for i in order[:TOP_SEGMENTS] if data[i].sum() > 0]
        keep += [i for i in order if names[i] in ALWAYS_SHOWN and i not in keep and data[i].sum() > 0]
        keep = [i for i in order if i in keep]
    rest = [i for i in order if i not in keep]
    segs = [(names[i], data[i]) for i in keep]
    if rest and data[rest].sum() > 0:
        segs.append(("other", data[rest].sum(axis=0)))
    f, u = scale_for(data.sum(axis=0), unit)
    fig, ax = new_figure(width)
    x = np.arange(len(table))
    bottom = np.zeros(len(table))
    used = set()
    for j, (name, vals) in enumerate(segs):
        st = segment_style(name)  # one fill per name in every figure (attnsim.plots.style.SEGMENTS)
        k = 0
        while (st["color"], st["hatch"]) in used:  # two names on one fill in this figure: the next hatch
            k += 1
            st["hatch"] = HATCHES[(HATCHES.index(st["hatch"]) + 1) % len(HATCHES)] if k < len(HATCHES) else "/" * k
        used.add((st["color"], st["hatch"]))
        ax.bar(
            x,
            vals * f,
            bottom=bottom,
            label=display(name),
            color=st["color"],
            hatch=st["hatch"],
            edgecolor="white",
            linewidth=0.3,
            width=0.7,
        )
        bottom += vals * f
    for c in ax.containers:  # a segment's bottom is "sticky"; a 0-height one on top of a stack would cut the margin
        for patch in c:
            patch.sticky_edges.y[:] = [v for v in patch.sticky_edges.y if v == 0]
    ax.set_xticks(x, _row_labels(table))  # attnsim.plots.ticks wraps / rotates them when they collide
    ax.set_ylabel(f"{ylabel_name} ({u}{'/token' if per_token else ''})")
    ax.grid(axis="x", visible=False)
    _mark_dnf(ax, x[dnf], ["black"] * int(dnf.sum()))
    h, lab = ax.get_legend_handles_labels()
    order = [i for i in range(len(lab)) if lab[i] != DNF_LABEL][::-1] + [
        i for i in range(len(lab)) if lab[i] == DNF_LABEL
    ]
    ax.legend(
        [h[i] for i in order], [lab[i] for i in order], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6
    )  # top to bottom as stacked
    _units(ax, 1.0, f)
    if title:
        ax.set_title(title)
    return fig


def latency_by_op(table, x=None, y=None, hue=None, z=None, width="single", title=None, components=None, **opts):
    """Stacked step latency per run, by op kind (--y PHASE: decode_step (default) or prefill)."""
    phase = y or "decode_step"
    return _stacked(
        table,
        f"{phase}/time_s_by_op/",
        f"{_phase_name(phase)} latency",
        "s",
        False,
        width,
        title,
        components=components,
    )


def latency_by_device(table, x=None, y=None, hue=None, z=None, width="single", title=None, components=None, **opts):
    """Stacked step latency per run, by device (--y PHASE: decode_step (default) or prefill)."""
    phase = y or "decode_step"
    return _stacked(
        table,
        f"{phase}/time_s_by_device/",
        f"{_phase_name(phase)} latency",
        "s",
        False,
        width,
        title,
        components=components,
    )


def energy_breakdown(table, x=None, y=None, hue=None, z=None, width="single", title=None, components=None, **opts):
    """Stacked energy per generated token of a step, by component (DRAM, PIM, GPU, links), static energy
    by device (``static: <device>``); --components picks the segments (pim_compute is never in "other")."""
    phase = y or "decode_step"
    return _stacked(
        table,
        f"{phase}/energy_j_by_component/",
        f"{_phase_name(phase)} energy",
        "J",
        True,
        width,
        title,
        split=("static", f"{phase}/static_energy_j_by_device/", "static"),
        components=components,
    )


def _phase_name(phase: str) -> str:
    return {"decode_step": "Decode-step", "prefill": "Prefill"}.get(phase, phase)


# ---------------------------------------------------------------- lines


def _series_points(table, x, y, hue, replicate=None, what="line"):
    """{hue value: (xs, mean ys, (lo, hi) or None, does-not-fit xs)} with one point per (hue, x): the
    mean +- sample standard deviation over ``replicate`` values where given, else the stored
    ``<y>_ci_low`` / ``<y>_ci_high`` bounds (serving replications, attnsim.studies.serve.replicate) if any."""
    table = _ok(table, dnf=True)
    _need(table, what)
    dnf = _status_is(table, DOES_NOT_FIT)
    xs, ys = table.col(x).astype(float), table.col(y).astype(float)
    hs = np.array([str(v) for v in table.col(hue)])
    reps = np.array([str(v) for v in table.col(replicate)]) if replicate else np.full(len(table), "")
    triples = list(zip(hs, xs, reps))
    if len(set(triples)) != len(triples):
        others = [
            c
            for c in _varying(table, list(dict.fromkeys(["model", "scenario"] + table.parameters)))
            if c not in (x, hue, replicate) and c.split(".")[-1] != x
        ]
        raise ConfigError(
            f"several rows share a ({hue}, {x}{', ' + replicate if replicate else ''}) "
            f"{'triple' if replicate else 'pair'}; fix the other swept columns with --where "
            f"(varying: {', '.join(others) or 'none'})",
            file="plot",
        )
    lo_name, hi_name = f"{y}_ci_low", f"{y}_ci_high"
    ci = (
        (table.col(lo_name).astype(float), table.col(hi_name).astype(float))
        if not replicate and table.has(lo_name) and table.has(hi_name)
        else None
    )
    out = {}
    for h in dict.fromkeys(hs):
        m = hs == h
        ux = np.unique(xs[m])
        mean, lo, hi, bad = [], [], [], []
        for xv in ux:
            sel = m & (xs == xv) & ~dnf
            if not sel.any():
                bad.append(xv)
                continue
            v = ys[sel]
            mean.append(v.mean())
            if replicate:
                sd = v.std(ddof=1) if len(v) > 1 else 0.0
                lo.append(v.mean() - sd)
                hi.append(v.mean() + sd)
            elif ci is not None:
                lo.append(ci[0][sel][0])
                hi.append(ci[1][sel][0])
        good = np.array([xv for xv in ux if xv not in bad])
        band = (np.array(lo), np.array(hi)) if (replicate or ci is not None) else None
        if band is not None and not (np.all(np.isfinite(band[0])) and np.all(np.isfinite(band[1]))):
            band = None
        out[h] = (good, np.array(mean), band, np.array(bad))
    return out, xs, ys


def _draw_series(ax, series, xf, yf):
    any_dnf = False
    for j, (h, (sx, sy, band, bad)) in enumerate(series.items()):
        st = dict(series_style(j), label=display(h))
        if band is not None and len(sx):
            err = np.vstack([sy - band[0], band[1] - sy]) * yf
            ax.errorbar(sx * xf, sy * yf, yerr=np.clip(err, 0, None), capsize=2, **st)
        else:
            ax.plot(sx * xf, sy * yf, **st)
        if len(bad):
            _mark_dnf(ax, bad * xf, [st["color"]] * len(bad), legend=False)
            any_dnf = True
    if any_dnf:
        ax.plot([], [], marker="x", markersize=5, markeredgewidth=1.2, linestyle="none", color="black", label=DNF_LABEL)


def _auto_log2(ax, xs):
    """A log2 x axis when positive x values span >= 16x, ticked at the values (<= 12 of them) as plain numbers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    pos = np.unique(xs[np.isfinite(xs)])
    if not (len(pos) and np.all(pos > 0) and pos.max() / pos.min() >= 16):
        return
    ax.set_xscale("log", base=2)
    if len(pos) <= 12:
        ax.xaxis.set_major_locator(FixedLocator(pos))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def line(table, x=None, y=None, hue=None, z=None, width="single", title=None, replicate=None, **opts):
    """Y versus X, one line per HUE (default system); needs one row per (hue, x) (use --where), or
    several differing only in --replicate COLUMN (a seed axis: drawn as mean +- standard deviation).
    Where the table has ``<y>_ci_low`` / ``<y>_ci_high`` (serving replications), draws them as error bars."""
    if not x or not y:
        raise ConfigError("the line recipe needs --x and --y", file="plot")
    hue = hue or "system"
    series, xs, ys = _series_points(table, x, y, hue, replicate)
    xl, xf = label_for(x, xs)
    yl, yf = label_for(y, ys[np.isfinite(ys)])
    fig, ax = new_figure(width)
    _draw_series(ax, series, xf, yf)
    _auto_log2(ax, xs * xf)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.legend(title=label_for(hue)[0] if hue not in ("system", "model") else None)
    _units(ax, xf, yf)
    if title:
        ax.set_title(title)
    return fig


def _line_preset(xcol, ycol, doc):
    def recipe(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts):
        return line(table, x=x or xcol, y=y or ycol, hue=hue, width=width, title=title, **opts)

    recipe.__doc__ = doc
    return recipe


throughput_vs_batch = _line_preset(
    "batch_size", "decode_tokens_per_s", "Decode throughput vs batch size, one line per system."
)
tpot_vs_batch = _line_preset("batch_size", "tpot_s", "TPOT vs batch size, one line per system.")
throughput_vs_context = _line_preset(
    "prompt_len", "decode_tokens_per_s", "Decode throughput vs context length, one line per system."
)
tpot_vs_context = _line_preset("prompt_len", "tpot_s", "TPOT vs context length, one line per system.")


PANELS_DEFAULT = ("decode_tokens_per_s", "decode_energy_per_token_j")  # decode-only: throughput, J/token


def panels(table, x=None, y=None, hue=None, z=None, width="double", title=None, replicate=None, **opts):
    """Side-by-side panels of one X (default batch_size): one panel per metric of --y (comma-separated;
    default decode_tokens_per_s,decode_energy_per_token_j), one line per HUE (default system) in the same
    style in every panel, one legend shared above them."""
    x = x or "batch_size"
    ys = [v.strip() for v in (y.split(",") if isinstance(y, str) else (y or PANELS_DEFAULT)) if str(v).strip()]
    if not 1 <= len(ys) <= 4:
        raise ConfigError(f"expected 1 to 4 comma-separated metrics, got {len(ys)}", file="plot", key="--y")
    hue = hue or "system"
    for col in [x, hue] + ys:
        table.col(col)  # an unknown column is refused before anything is drawn
    fig, axes = new_figure(width, aspect=0.62, ncols=len(ys), squeeze=False)  # double: ~2.2 in high
    fig.subplots_adjust(wspace=0.35)
    for ax, yc in zip(axes[0], ys):
        series, xs, yv = _series_points(table, x, yc, hue, replicate, what="panels")
        xl, xf = label_for(x, xs)
        yl, yf = label_for(yc, yv[np.isfinite(yv)])
        _draw_series(ax, series, xf, yf)  # series j has the same colour, dashes and marker in every panel
        _auto_log2(ax, xs * xf)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        _units(ax, xf, yf)
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(
        h,
        lab,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.9),
        ncol=min(len(lab), 5),
        title=label_for(hue)[0] if hue not in ("system", "model") else None,
    )
    if title:  # above the shared legend
        fig.suptitle(title, y=1.0, va="bottom")
    return fig


# ---------------------------------------------------------------- ratio vs a baseline


def ratio(table, x=None, y=None, hue=None, z=None, width="single", title=None, baseline=None, **opts):
    """--y (default decode_tokens_per_s) / the --baseline system's at the same point, vs --x, one line per
    other system, with the y = 1 reference; ``vs_baseline.*`` columns (stores with a baseline) drawn as stored."""
    from attnsim.sim import results

    ratios = getattr(results, "BASELINE_RATIOS", ())  # (name, metric, higher_is_better) of vs_baseline columns
    if not x:
        raise ConfigError("the ratio recipe needs --x", file="plot")
    hue = hue or "system"
    baseline = baseline or (table.attrs.get("baseline") or None)
    y = y or "decode_tokens_per_s"
    if baseline is None:
        raise ConfigError(
            f"the ratio recipe needs --baseline SYSTEM (one of: "
            f"{', '.join(dict.fromkeys(str(v) for v in table.col('system')))})",
            file="plot",
        )
    stored = {metric: name for name, metric, up in ratios if up}  # same formula: metric / baseline's
    col = y if y.startswith("vs_baseline.") else ("vs_baseline." + stored[y] if y in stored else None)
    use_col = col is not None and table.has(col) and table.attrs.get("baseline") == baseline
    if y.startswith("vs_baseline.") and not use_col:
        raise ConfigError(
            f"the file has no {y} column against {baseline!r} (its baseline: "
            f"{table.attrs.get('baseline') or 'none'}); give a metric as --y",
            file="plot",
            key="--y",
        )
    # a stored ratio needs no baseline row (a --where on a swept key the baseline does not use drops them:
    # docs/sweep-files.md); a recomputed one does
    if not use_col and str(baseline) not in {str(v) for v in table.col(hue)}:
        raise ConfigError(f"expected a {hue} of the selected rows, got {baseline!r}", file="plot", key="--baseline")
    table = _ok(table, dnf=True)
    _need(table, "ratio")
    hs = np.array([str(v) for v in table.col(hue)])
    keys = [
        c
        for c in _varying(table, list(dict.fromkeys(["model", "scenario"] + table.parameters)))
        if c != hue and c.split(".")[-1] != hue and c.split(".")[-1] != x.split(".")[-1]
    ]
    rowkey = list(zip(*[[str(v) for v in table.col(c)] for c in keys + [x]]))
    if use_col:
        vals = table.col(col).astype(float)
        name = col[len("vs_baseline.") :].replace("_", " ")
        name = name[:1].upper() + name[1:]
    else:
        metric = table.col(y).astype(float)
        ok = _status_is(table, "ok")
        base = {k: metric[i] for i, k in enumerate(rowkey) if hs[i] == baseline and ok[i]}
        vals = np.array([metric[i] / base[k] if k in base and base[k] else np.nan for i, k in enumerate(rowkey)])
        name = label_for(y)[0].split(" (")[0]
    # a point whose own or whose baseline's run does not fit gets the capacity marker
    base_dnf = {k for i, k in enumerate(rowkey) if hs[i] == baseline and _status_is(table, DOES_NOT_FIT)[i]}
    status = np.array(
        [
            DOES_NOT_FIT if (s == DOES_NOT_FIT or k in base_dnf) else s
            for s, k in zip(table.col("status") if "status" in table.columns else ["ok"] * len(table), rowkey)
        ],
        dtype=object,
    )
    keep = np.nonzero(hs != baseline)[0]
    t = _take(table, keep)
    t.columns = {**t.columns, "status": status[keep], "_ratio": vals[keep]}
    series, xs, ys = _series_points(t, x, "_ratio", hue, what="ratio")
    xl, xf = label_for(x, xs)
    fig, ax = new_figure(width)
    ax.axhline(1.0, color="0.35", linewidth=0.8, linestyle=(0, (4, 2)), zorder=1, label=f"{display(baseline)} (= 1)")
    _draw_series(ax, series, xf, 1.0)
    _auto_log2(ax, xs * xf)
    ax.set_xlabel(xl)
    ax.set_ylabel(f"{name} vs {display(baseline)} (\u00d7)")
    ax.legend(title=label_for(hue)[0] if hue not in ("system", "model") else None)
    _units(ax, xf, 1.0)
    if title:
        ax.set_title(title)
    fig._ratio = {"column": col if use_col else None, "baseline": baseline}
    return fig


# ---------------------------------------------------------------- heatmap


def heatmap(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts):
    """A metric (--z) over two swept parameters (--x, --y); one row per cell (use --where)."""
    z = z or hue
    if not (x and y and z):
        raise ConfigError("the heatmap recipe needs --x, --y and --z (the metric)", file="plot")
    table = _ok(table, dnf=True)
    _need(table, "heatmap")
    xs, ys, zs = table.col(x), table.col(y), table.col(z).astype(float)
    dnf = _status_is(table, DOES_NOT_FIT)
    ux, uy = sorted(set(xs.tolist()), key=_num_key), sorted(set(ys.tolist()), key=_num_key)
    grid = np.full((len(uy), len(ux)), np.nan)
    seen, dnf_cells = set(), []
    for a, b, v, bad in zip(xs.tolist(), ys.tolist(), zs, dnf):
        i, j = uy.index(b), ux.index(a)
        if (i, j) in seen:
            raise ConfigError(
                f"several rows per ({x}, {y}) cell; fix the other swept columns with --where", file="plot"
            )
        seen.add((i, j))
        if bad:
            dnf_cells.append((j, i))
        else:
            grid[i, j] = v
    zl, zf = label_for(z, zs)
    fig, ax = new_figure(width, aspect=0.8)
    im = ax.imshow(grid * zf, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(ux)), [display(_fmt(v)) for v in ux])
    ax.set_yticks(range(len(uy)), [display(_fmt(v)) for v in uy])
    ax.set_xlabel(label_for(x)[0])
    ax.set_ylabel(label_for(y)[0])
    ax.grid(False)
    cb = fig.colorbar(im, ax=ax)
    cb.set_label(zl)
    if dnf_cells:
        cx, cy = zip(*dnf_cells)
        ax.plot(cx, cy, marker="x", markersize=7, markeredgewidth=1.4, linestyle="none", color="black", label=DNF_LABEL)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), borderaxespad=0.2)
    if grid.size <= 64 and np.isfinite(grid).any():
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        for i in range(len(uy)):
            for j in range(len(ux)):
                if np.isfinite(grid[i, j]):
                    dark = (grid[i, j] - lo) < 0.5 * (hi - lo)
                    v = grid[i, j] * zf
                    ax.text(
                        j,
                        i,
                        f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if dark else "black",
                    )
    if title:
        ax.set_title(title, pad=18 if dnf_cells else 6)  # above the "does not fit" legend
    return fig


def _num_key(v):
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float, np.integer, np.floating)) else str(v)


# ---------------------------------------------------------------- Pareto

MAXIMISE_HINTS = ("per_s", "accuracy", "throughput", "ratio", "speedup")


def pareto_front(xs: np.ndarray, ys: np.ndarray, max_x: bool = False, max_y: bool = False) -> np.ndarray:
    """Indices of the non-dominated points (minimising both unless ``max_*``), sorted by x."""
    a = np.where(max_x, -xs, xs)
    b = np.where(max_y, -ys, ys)
    idx = []
    for i in range(len(a)):
        dominated = np.any((a <= a[i]) & (b <= b[i]) & ((a < a[i]) | (b < b[i])))
        if not dominated and np.isfinite(a[i]) and np.isfinite(b[i]):
            idx.append(i)
    idx = np.array(idx, dtype=int)
    return idx[np.argsort(xs[idx], kind="stable")]


def pareto(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts):
    """Pareto front of two metrics (--x, --y; default decode: tpot_s vs decode_energy_per_token_j); --z colours by
    a third (accuracy)."""
    x, y = x or "tpot_s", y or "decode_energy_per_token_j"  # decode-only on both axes (TPOT is a decode metric)
    n_dnf = int(_status_is(table, DOES_NOT_FIT).sum())
    table = _ok(table)
    _need(table, "pareto")
    xs, ys = table.col(x).astype(float), table.col(y).astype(float)
    mx, my = any(h in x for h in MAXIMISE_HINTS), any(h in y for h in MAXIMISE_HINTS)
    front = pareto_front(xs, ys, mx, my)
    xl, xf = label_for(x, xs)
    yl, yf = label_for(y, ys)
    fig, ax = new_figure(width)
    if z is not None:
        zs = table.col(z).astype(float)
        sc = ax.scatter(xs * xf, ys * yf, c=zs, s=12, cmap="viridis", label="points")
        fig.colorbar(sc, ax=ax).set_label(label_for(z, zs)[0])
    else:
        hue = hue or "system"
        hs = np.array([str(v) for v in table.col(hue)])
        for j, h in enumerate(dict.fromkeys(hs)):
            m = hs == h
            ax.scatter(
                xs[m] * xf,
                ys[m] * yf,
                s=12,
                color=LINE_COLOURS[j % len(LINE_COLOURS)],
                marker=MARKERS[j % len(MARKERS)],
                label=display(h),
            )
    ax.plot(
        xs[front] * xf, ys[front] * yf, color="black", linewidth=0.8, linestyle="--", label="Pareto front", zorder=3
    )
    if n_dnf:  # no metrics to place them by: counted in the legend
        ax.plot(
            [],
            [],
            marker="x",
            markersize=5,
            markeredgewidth=1.2,
            linestyle="none",
            color="black",
            label=f"{DNF_LABEL} ({n_dnf} not drawn)",
        )
    ax.set_xlabel(xl + (" \u2191" if mx else " \u2193"))
    ax.set_ylabel(yl + (" \u2191" if my else " \u2193"))
    ax.legend()
    _units(ax, xf, yf)
    if title:
        ax.set_title(title)
    fig._pareto_front = front  # row indices on the front (for inspection)
    return fig


# ---------------------------------------------------------------- roofline


def placed_ops(resolved: dict, step: str = "decode") -> dict:
    """Re-place one step of a stored point: per device role, per op row (op class, FLOPs, bytes, time)."""
    from attnsim.core.config import ConfigTree
    from attnsim.hwmodels.system import build_system
    from attnsim.mapper.base import get_policy
    from attnsim.sim.experiment import validate_tree
    from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes

    files = {}
    tree = ConfigTree(
        **{k: resolved[k] for k in ("experiment", "models", "systems", "hardware", "scenarios")}, files=files
    )
    exp = validate_tree(tree)
    ((sname, sspec),) = exp.systems.items()
    ((mname, model),) = exp.models.items()
    ((_, sc),) = exp.scenarios.items()
    from attnsim.sim.runner import _replica_scenario

    system = build_system(sspec, tree.hardware, tree.file_of)
    tp = sspec.parallelism.tp
    policy = get_policy(sspec.mapper.policy, file=None)
    sc = _replica_scenario(sc, sspec.parallelism.replicas)  # as attnsim.sim.runner.simulate_generation places it
    final_ctx = sc.prompt_lens() + sc.output_len
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, final_ctx),
        "kv_per_rank": kv_cache_bytes(model, sc, final_ctx, tp=tp),
    }
    from attnsim.hwmodels.stack import sampler_cost

    plan = policy(build_trace(model, sc, step, tp=tp, sampler=sampler_cost(system)), system, mb, sspec.mapper.options)
    trace = plan.trace  # the placed rows: a mapper may split rows and add transfers (Plan.added)
    out = {}
    for role in np.unique(plan.device):
        if role == "link" or role not in system.pools:
            continue
        rows = np.nonzero(plan.device == role)[0]
        dev = system.pools[role].model
        c = dev.cost(trace, rows)
        if c.flops is None or not c.bytes_by_level:
            continue
        level = max(c.bytes_by_level, key=lambda k: float(np.sum(c.bytes_by_level[k])))
        out[str(role)] = {
            "ops": np.asarray(trace["cls"])[rows],
            "flops": np.asarray(c.flops, dtype=float),
            "bytes": np.asarray(c.bytes_by_level[level], dtype=float),
            "time_s": np.asarray(c.time_s, dtype=float),
            "level": level,
            "peak_flops": float(dev.peak_flops),
            "peak_bw": float(dev.peak_bandwidth_bytes_per_s),
            "device": getattr(dev, "name", role),
        }
    return {"system": sname, "model": mname, "devices": out}


def roofline(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts):
    """Roofline per device of one run (select it with --where) with its placed decode ops (--y prefill for prefill)."""
    if len(table) == 1 and _status_is(table, DOES_NOT_FIT)[0]:
        raise ConfigError(
            "the selected run does not fit in memory (status does_not_fit): nothing was placed", file="plot"
        )
    table = _ok(table)
    _need(table, "roofline")
    if len(table) != 1:
        raise ConfigError(f"the roofline recipe draws one run; {len(table)} rows selected (use --where)", file="plot")
    info = placed_ops(table.resolved(0), step="prefill" if y == "prefill" else "decode")
    devs = info["devices"]
    if not devs:
        raise ConfigError("no device of this run reports FLOPs and bytes", file="plot")
    fig, axes = new_figure(width, aspect=0.75 if len(devs) == 1 else 0.5, ncols=len(devs), squeeze=False)
    fig.subplots_adjust(wspace=0.35)  # room between panels for the tick labels (constrained layout: 10x slower)
    for ax, (role, d) in zip(axes[0], devs.items()):
        ok = (d["bytes"] > 0) & (d["flops"] > 0) & (d["time_s"] > 0)
        ai = d["flops"][ok] / d["bytes"][ok]
        perf = d["flops"][ok] / d["time_s"][ok]
        lo = min(ai.min() if len(ai) else 1.0, 0.1) / 2
        ridge = d["peak_flops"] / d["peak_bw"]
        hi = max(ai.max() if len(ai) else 1.0, ridge) * 4
        grid = np.geomspace(lo, hi, 200)
        ax.loglog(
            grid, np.minimum(d["peak_flops"], grid * d["peak_bw"]) / 1e12, color="black", linewidth=1.0, label="roof"
        )
        ops = d["ops"][ok]
        for op in dict.fromkeys(ops.tolist()):  # one colour + marker per op class, the same in every panel
            m = ops == op
            ax.scatter(ai[m], perf[m] / 1e12, s=14, **op_class_style(op), label=display(op), zorder=3)
        ax.set_xlabel(f"Arithmetic intensity{chr(10) if len(devs) > 1 else ' '}(FLOP/B, {d['level']})")
        if ax is axes[0][0]:
            ax.set_ylabel("Performance (TFLOP/s)")
        ax.set_title(f"{display(role)}: {d['device']}", fontsize=7)
        ax.legend(fontsize=5, loc="lower right")
        _units(ax, 1.0, 1e-12)
    if title:
        fig.suptitle(title)
    fig._roofline = info
    return fig


# ---------------------------------------------------------------- verdict flips (attnsim.studies.verdict)


def verdict_tornado(table, x=None, y=None, hue=None, z=None, width="single", title=None, **opts):
    """For one compared run: its throughput ratio against the baseline with each assumed parameter at its low
    and high end (bars from the default ratio), the default ratio and the 1.0 line (the verdict flips across it)."""
    runs = [
        d for d in table.docs() if isinstance(d.get("verdict_flips"), dict) and d["verdict_flips"].get("parameters")
    ]
    if len(runs) != 1:
        names = ", ".join(f"system={d['system']} model={d['model']} scenario={d['scenario']['name']}" for d in runs)
        raise ConfigError(
            f"expected one run with verdict flips (attnsim run with a baseline, attnsim sweep --flips; "
            f"select it with --where), got {len(runs)}" + (f": {names}" if names else ""),
            file="--where",
        )
    d = runs[0]
    sec = d["verdict_flips"]
    r0 = sec["ratio_base"]
    val = lambda v: r0 if v is None else v  # an end that did not complete: no bar
    rows = sorted(sec["parameters"], key=lambda r: abs(val(r["ratio_high"]) - val(r["ratio_low"])))
    fig, ax = new_figure(width, aspect=max(0.35, 0.09 * len(rows) + 0.25))
    yy = np.arange(len(rows))
    ranged = [i for i, r in enumerate(rows) if not r.get("choice")]  # a range: bars to its low and high end
    for end, height, colour in (("low", 0.6, OKABE_ITO[0]), ("high", 0.35, OKABE_ITO[4])):
        ax.barh(
            yy[ranged],
            [val(rows[i][f"ratio_{end}"]) - r0 for i in ranged],
            left=r0,
            height=height,
            color=colour,
            label=f"parameter at {end}",
        )
    label = "alternative (choices:)"  # a categorical choice: one labelled mark per alternative, not low/high bars
    for i, r in enumerate(rows):
        if not r.get("choice"):
            continue
        for k, (alt, ratio) in enumerate(zip(r.get("alternatives") or [], r.get("ratio_alternatives") or [])):
            if ratio is None:
                continue
            ax.plot([r0, ratio], [i, i], color=OKABE_ITO[2], linewidth=0.6, linestyle="-", gid="choice")
            ax.plot(
                [ratio], [i], marker="D", markersize=2.5, color=OKABE_ITO[2], linestyle="", label=label, gid="choice"
            )
            text = alt if isinstance(alt, str) else ", ".join(f"{k}: {v}" for k, v in alt.items())
            up = k % 2 == 0  # alternate above / below the row: close ratios keep readable labels
            ax.annotate(
                text[:28],
                (ratio, i),
                xytext=(2, 2 if up else -2),
                textcoords="offset points",
                va="bottom" if up else "top",
                fontsize=4,
                gid="choice",
            )
            label = "_nolegend_"
    ax.axvline(r0, color="black", linewidth=0.6, label=f"default ({r0:.3g}\u00d7)")
    ax.axvline(1.0, color=LINE_COLOURS[1], linestyle="--", linewidth=0.8, label="1\u00d7 (verdict flips)")
    ax.set_yticks(yy)
    ax.set_yticklabels(
        [r["parameter"].removeprefix("hardware.") + (" *" if r["flips"] else "") for r in rows], fontsize=5
    )
    ax.set_xlabel(f"Throughput vs {display(sec['baseline'])} (\u00d7)")
    ax.set_ylabel("Assumed parameter (* flips)")
    _units(ax)
    lo, hi = ax.get_xlim()
    for t in ax.texts:  # a label in the right quarter runs left of its mark (it would cross the frame)
        if t.get_gid() == "choice" and t.xy[0] > lo + 0.75 * (hi - lo):
            t.set_ha("right")
            t.set_position((-2, t.get_position()[1]))
    ncol = 3 if any(r.get("choice") for r in rows) else 2  # five entries with choices: two rows, as four without
    ax.legend(fontsize=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, borderaxespad=0.2)
    ax.set_title(title or f"{display(d['system'])}, {display(d['model'])}, {d['scenario']['name']}", fontsize=6, pad=18)
    return fig


# ---------------------------------------------------------------- attnsim plan


def plan_front(doc: dict, width="double", title=None, logx=None):
    """The front of an ``attnsim plan`` document (``attnsim plan -o PLAN.json``): TPOT and energy per token
    against the relative attention error (the accuracy proxy), one panel each; the Pareto front as a line, the
    chosen plan (star) and the configured placement "as run" (square); each SLO as a dashed line."""
    try:
        front = [
            (float(f["rel_attention_error"]), float(f["tpot_s"]), float(f["energy_per_token_j"])) for f in doc["front"]
        ]
        marks = [
            (name, float(doc[k]["rel_attention_error"]), float(doc[k]["tpot_s"]), float(doc[k]["energy_per_token_j"]))
            for name, k in (("plan", "plan"), ("as run", "configured"))
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"expected an attnsim plan document (front, plan, configured), got none ({exc})", file="plan"
        ) from None
    if not front:
        raise ConfigError("the plan document has an empty front (attnsim plan --front-points)", file="plan")
    fr = np.array(front)
    slos = doc.get("slos") or {}
    fig, axes = new_figure(width, aspect=0.62, ncols=2, squeeze=False)
    fig.subplots_adjust(wspace=0.35)
    for ax, j, col in ((axes[0][0], 1, "tpot_s"), (axes[0][1], 2, "energy_per_token_j")):
        yl, yf = label_for(col, np.concatenate([fr[:, j], [m[j + 1] for m in marks]]))
        ax.plot(fr[:, 0], fr[:, j] * yf, label="Pareto front", **series_style(0))
        for k, (name, err, tpot, e) in enumerate(marks):
            ax.plot(
                [err],
                [(tpot, e)[j - 1] * yf],
                linestyle="none",
                marker="*" if k == 0 else "s",
                markersize=8 if k == 0 else 5,
                color=LINE_COLOURS[1 + k],
                label=name,
                zorder=4,
            )
        acc = slos.get("accuracy")
        if acc:
            a = float(acc["limit"])
            ax.axvline(a, color="0.35", linestyle="--", linewidth=0.8, label=f"accuracy SLO {a:.3g}")
        lim = slos.get(col)
        if lim:  # named with its limit, e.g. "TPOT SLO 50 ms" (the two panels' lines are distinct entries)
            v = float(lim["limit"]) * yf
            name, _, unit = yl.partition(" (")
            what = "TPOT" if col == "tpot_s" else name
            ax.axhline(v, color="0.35", linestyle=":", linewidth=0.8, label=f"{what} SLO {v:.3g} {unit.rstrip(')')}")
        if logx is not False and fr[:, 0].min() > 0 and fr[:, 0].max() / fr[:, 0].min() >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(label_for("rel_attention_error")[0])
        ax.set_ylabel(yl)
        _units(ax, 1.0, yf)
    h, lab = [], []
    for ax in axes[0]:  # one legend for both panels (each entry once)
        for hh, ll in zip(*ax.get_legend_handles_labels()):
            if ll not in lab:
                h.append(hh)
                lab.append(ll)
    fig.legend(h, lab, loc="lower center", bbox_to_anchor=(0.5, 0.9), ncol=min(len(lab), 5))
    fig.suptitle(title or f"{display(doc.get('system', ''))}, {doc.get('model', '')}", y=1.0, va="bottom")
    return fig


# ---------------------------------------------------------------- reproductions (attnsim validate --figures)


def reproduction(rows, width="single", title=None):
    """attnsim / reference per row of a reproduction (:class:`attnsim.studies.validate.Row` s): a dot per row on
    its tolerance band around 1, coloured by role (calibration in-sample, validation held out)."""
    if not rows:
        raise ConfigError("no rows to plot (reproduction)", file="--figures")
    if len(rows) > MAX_BARS:
        raise ConfigError(f"{len(rows)} rows; a reproduction figure draws at most {MAX_BARS}", file="--figures")
    ratio = np.array([r.measured / r.published for r in rows])
    tol = np.array([r.tolerance for r in rows])
    y = np.arange(len(rows))[::-1]
    fig, ax = new_figure(width, aspect=max(0.35, 0.085 * len(rows)))
    ax.barh(y, 2 * tol, left=1 - tol, height=0.6, color="0.85", label="tolerance band", zorder=1)
    ax.axvline(1.0, color="black", linewidth=0.6, zorder=2)
    colours = {"calibration": LINE_COLOURS[2], "validation": LINE_COLOURS[0]}  # >= 3:1 on white
    for role, colour in colours.items():
        m = np.array([r.role == role for r in rows])
        if m.any():
            ax.scatter(ratio[m], y[m], s=16, color=colour, marker="o", label=f"{role}", zorder=3)
    bad = np.array([not r.ok for r in rows])
    if bad.any():
        ax.scatter(
            ratio[bad],
            y[bad],
            s=40,
            facecolors="none",
            edgecolors=LINE_COLOURS[1],
            marker="o",
            label="outside tolerance",
            zorder=4,
        )
    ax.set_yticks(y)
    ax.set_yticklabels(
        [r.name if len(r.name) <= 48 else r.name[:23] + "\u2026" + r.name[-24:] for r in rows], fontsize=5
    )
    ax.set_xlabel("attnsim / reference (dimensionless)")
    lo, hi = min(ratio.min(), (1 - tol).min()), max(ratio.max(), (1 + tol).max())
    pad = 0.05 * (hi - lo)
    ax.set_xlim(lo - pad, hi + pad)
    ax.legend(fontsize=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, borderaxespad=0.2)
    if title:
        ax.set_title(title, fontsize=6, pad=12)
    return fig


def waterfall(wf, rows=None, width="double", title=None):
    """A reproduction's waterfall (:class:`attnsim.studies.reproduce.Waterfall`, ``attnsim validate --explain``): per
    row a panel of bars, the artefact's number, attnsim with every assumption, then after each assumption is
    removed (in the file's order), ending at attnsim's defaults; a run that did not complete is marked with its
    status. ``rows``: names or indices of the rows to draw (default: every row, at most 12)."""
    idx = (
        list(range(len(wf.rows)))
        if rows is None
        else [r if isinstance(r, int) else next((i for i, x in enumerate(wf.rows) if x.name == r), -1) for r in rows]
    )
    bad = [r for r, i in zip(rows or idx, idx) if not 0 <= i < len(wf.rows)]
    if bad:
        raise ConfigError(
            f"expected row names or indices of reproduction {wf.system}, got {bad[0]!r}", file="waterfall"
        )
    if not idx or len(idx) > 12:
        raise ConfigError(f"expected 1 to 12 rows in a waterfall figure, got {len(idx)}", file="waterfall")
    cols = min(3, len(idx))
    nrows = -(-len(idx) // cols)
    fig, axes = new_figure(width, aspect=0.46 * nrows, nrows=nrows, ncols=cols, squeeze=False)  # ~1.6 in a row
    axes = np.atleast_1d(axes).ravel()
    labels = wf.labels
    colour = {"artefact": OKABE_ITO[5], "all assumptions": OKABE_ITO[0], "defaults": OKABE_ITO[4]}
    for ax, i in zip(axes, idx):
        bars = wf.bars(i)
        x = np.arange(len(bars))
        vals = [b if isinstance(b, float) else 0.0 for b in bars]
        ax.bar(x, vals, color=[colour.get(lab, OKABE_ITO[1]) for lab in labels], width=0.7)
        for xi, b in zip(x, bars):
            if isinstance(b, float):
                ax.annotate(f"{b:.3g}", (xi, b), ha="center", va="bottom", fontsize=4.5)
            else:
                ax.annotate(str(b), (xi, 0.0), ha="center", va="bottom", fontsize=4.5, rotation=90)
        ax.axhline(wf.rows[i].reference, color=OKABE_ITO[5], linewidth=0.6, linestyle="--")
        ax.set_xticks(x)
        last_row = list(axes).index(ax) + cols >= len(idx)  # step labels under the lowest panel of each column
        ax.set_xticklabels(labels if last_row else [], rotation=35, ha="right", fontsize=4.5)
        ax.set_ylim(0, max(vals + [wf.rows[i].reference]) * 1.15)
        ax.set_title(textwrap.fill(wf.rows[i].name, 48), fontsize=4.5)
    for ax in axes[len(idx) :]:
        ax.set_visible(False)
    fig.subplots_adjust(hspace=0.55, wspace=0.3)
    if title:  # the figure's title in its own 0.15 in band above the top panels' titles (two lines of 4.5 pt)
        h_in = fig.get_figheight()
        fig.subplots_adjust(top=1.0 - 0.45 / h_in)
        fig.suptitle(title, fontsize=6, y=1.0 - 0.04 / h_in, va="top")
    return fig


# ---------------------------------------------------------------- sensitivity (attnsim sensitivity)


def tornado(doc: dict, output: str, width="single", title=None):
    """One output of an :mod:`attnsim.studies.sensitivity` document per parameter: OAT bars from the base to
    the value at the parameter's low and high end (relative change, largest swing on top; a ratio's
    1.0 drawn as a dashed line); Morris mu* / |base| or Sobol S_T bars for the sampled methods."""
    rows = [r for r in doc["rows"] if r["output"] == output]
    if not rows:
        raise ConfigError(
            f"expected an output of the sensitivity result ({', '.join(doc['base'])}), got {output!r}",
            file="--figure-output",
        )
    base = doc["base"][output]
    fig, ax = new_figure(width, aspect=max(0.35, 0.09 * len(rows) + 0.2))
    if doc["method"] == "oat":
        rel = lambda v: 100.0 * (v / base - 1.0) if v is not None and base else 0.0
        rows = sorted(rows, key=lambda r: abs(r["relative_swing"] or 0.0))
        y = np.arange(len(rows))
        ax.barh(y, [rel(r["low"]) for r in rows], height=0.6, color=OKABE_ITO[0], label="parameter at low")
        ax.barh(y, [rel(r["high"]) for r in rows], height=0.35, color=OKABE_ITO[4], label="parameter at high")
        ax.axvline(0.0, color="black", linewidth=0.6)
        if output.split(":", 1)[1].startswith("vs_baseline.") and base:
            ax.axvline(rel(1.0), color=OKABE_ITO[5], linestyle="--", linewidth=0.8, label="ratio = 1 (verdict flips)")
        ax.set_xlabel(f"change of {output.split(':', 1)[1]} vs base {'-' if base is None else f'{base:.4g}'} (%)")
    else:
        key, what = (
            ("mu_star", "Morris \u03bc* / |base|") if doc["method"] == "morris" else ("ST", "Sobol total index S_T")
        )
        scale = abs(base) if key == "mu_star" and base else 1.0
        rows = sorted(rows, key=lambda r: abs(r[key] or 0.0))
        y = np.arange(len(rows))
        ax.barh(y, [(r[key] or 0.0) / scale for r in rows], height=0.6, color=OKABE_ITO[0], label=what)
        ax.set_xlabel(f"{what} of {output.split(':', 1)[1]} (dimensionless)")
    ax.set_yticks(y)
    ax.set_yticklabels([r["parameter"] for r in rows], fontsize=5)
    ax.legend(fontsize=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, borderaxespad=0.2)
    ax.set_title(title or output.split(":", 1)[0], fontsize=6, pad=12)
    return fig
