"""Figure recipes: small functions over a results :class:`~attnsim.sweep.table.Table` -> matplotlib Figure.

Every recipe takes ``(table, x=None, y=None, hue=None, z=None, width="single", title=None)`` (rows
already selected with ``--where``) and returns the Figure; the axes carry labelled units and, for
series, a legend with one entry per series, so tests and users can inspect what was drawn.
"""
from __future__ import annotations

import numpy as np

from attnsim.config import ConfigError
from attnsim.plots.style import HATCHES, OKABE_ITO, label_for, new_figure, scale_for

MAX_BARS = 40
TOP_SEGMENTS = 7  # stacked bars: the largest segments, the rest summed as "other"


def _need(table, what: str):
    if len(table) == 0:
        raise ConfigError(f"no rows to plot ({what}); check --where", file=table.path)


def _ok(table):
    if "status" not in table.columns:
        return table
    st = table.columns["status"]
    idx = np.nonzero(st == "ok")[0] if st.dtype.kind in "OU" else np.arange(len(table))
    return _take(table, idx)


def _take(table, idx):
    from attnsim.sweep.table import Table
    return Table(table.path, table.kind, table.attrs, {k: v[idx] for k, v in table.columns.items()},
                 {k: v[idx] for k, v in table.breakdown.items()}, table.parameters, table._docs,
                 lambda r: table.resolved(int(idx[r])))


def _varying(table, candidates) -> list[str]:
    out = []
    for c in candidates:
        if c in table.columns and len({str(v) for v in table.columns[c]}) > 1:
            out.append(c)
    return out


def _row_labels(table) -> list[str]:
    cols = _varying(table, ["system", "model", "scenario"] + [p for p in table.parameters
                                                             if p not in ("system", "model", "scenario")])
    if not cols:
        cols = ["system"]
    return [", ".join(str(table.columns[c][i]) if c in ("system", "model", "scenario")
                      else f"{c.split('.')[-1]}={table.columns[c][i]}" for c in cols) for i in range(len(table))]


# ---------------------------------------------------------------- stacked breakdowns

def _stacked(table, prefix: str, ylabel_name: str, unit: str, per_token: bool, width: str, title,
             split: tuple | None = None):
    """``split`` = (segment, prefix2, label): segment ``segment`` of ``prefix`` is replaced by the
    ``prefix2`` columns (labelled ``label: <name>``) where the file has them (same total)."""
    table = _ok(table)
    _need(table, "stacked breakdown")
    if len(table) > MAX_BARS:
        raise ConfigError(f"{len(table)} bars; select at most {MAX_BARS} rows with --where", file=table.path)
    names = sorted(k[len(prefix):] for k in table.breakdown if k.startswith(prefix))
    if not names:
        raise ConfigError(f"the file has no breakdown {prefix.rstrip('/')!r}", file=table.path)
    cols = [prefix + n for n in names]
    if split is not None and split[0] in names and any(k.startswith(split[1]) for k in table.breakdown):
        subs = sorted(k for k in table.breakdown if k.startswith(split[1]))
        i = names.index(split[0])
        names = names[:i] + [f"{split[2]}: {k[len(split[1]):]}" for k in subs] + names[i + 1:]
        cols = cols[:i] + subs + cols[i + 1:]
    data = np.nan_to_num(np.array([table.breakdown[c] for c in cols]))  # segments x rows
    if per_token:
        data = data / np.maximum(1, table.columns["batch_size"].astype(float))[None, :]
    order = np.argsort(-data.sum(axis=1))
    keep = [i for i in order[:TOP_SEGMENTS] if data[i].sum() > 0]
    rest = [i for i in order if i not in keep]
    segs = [(names[i], data[i]) for i in keep]
    if rest and data[rest].sum() > 0:
        segs.append(("other", data[rest].sum(axis=0)))
    f, u = scale_for(data.sum(axis=0), unit)
    fig, ax = new_figure(width)
    x = np.arange(len(table))
    bottom = np.zeros(len(table))
    for j, (name, vals) in enumerate(segs):
        ax.bar(x, vals * f, bottom=bottom, label=name, color=OKABE_ITO[j % len(OKABE_ITO)],
               hatch=HATCHES[j // len(OKABE_ITO) % len(HATCHES)], edgecolor="white", linewidth=0.3, width=0.7)
        bottom += vals * f
    ax.set_xticks(x, _row_labels(table), rotation=30 if len(table) > 3 else 0, ha="right" if len(table) > 3 else "center")
    ax.set_ylabel(f"{ylabel_name} ({u}{'/token' if per_token else ''})")
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6)
    if title:
        ax.set_title(title)
    return fig


def latency_by_op(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Stacked step latency per run, by op kind (--y PHASE: decode_step (default) or prefill)."""
    phase = y or "decode_step"
    return _stacked(table, f"{phase}/time_s_by_op/", f"{_phase_name(phase)} latency", "s", False, width, title)


def latency_by_device(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Stacked step latency per run, by device (--y PHASE: decode_step (default) or prefill)."""
    phase = y or "decode_step"
    return _stacked(table, f"{phase}/time_s_by_device/", f"{_phase_name(phase)} latency", "s", False, width, title)


def energy_breakdown(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Stacked energy per generated token of a step, by component (DRAM, PIM, GPU, links), static energy
    by device (``static: <device>``)."""
    phase = y or "decode_step"
    return _stacked(table, f"{phase}/energy_j_by_component/", f"{_phase_name(phase)} energy", "J", True, width, title,
                    split=("static", f"{phase}/static_energy_j_by_device/", "static"))


def _phase_name(phase: str) -> str:
    return {"decode_step": "Decode-step", "prefill": "Prefill"}.get(phase, phase)


# ---------------------------------------------------------------- lines

def line(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Y versus X, one line per HUE (default system); needs one row per (hue, x) (use --where).
    Where the table has ``<y>_ci_low`` / ``<y>_ci_high`` (serving replications), draws them as error bars."""
    if not x or not y:
        raise ConfigError("the line recipe needs --x and --y", file="plot")
    hue = hue or "system"
    table = _ok(table)
    _need(table, "line")
    xs, ys = table.col(x).astype(float), table.col(y).astype(float)
    hs = np.array([str(v) for v in table.col(hue)])
    pairs = list(zip(hs, xs))
    if len(set(pairs)) != len(pairs):
        others = [c for c in _varying(table, list(dict.fromkeys(["model", "scenario"] + table.parameters)))
                  if c not in (x, hue) and c.split(".")[-1] != x]
        raise ConfigError(f"several rows share a ({hue}, {x}) pair; fix the other swept columns with --where "
                          f"(varying: {', '.join(others) or 'none'})", file="plot")
    xl, xf = label_for(x, xs)
    yl, yf = label_for(y, ys)
    fig, ax = new_figure(width)
    markers = "osD^vP*X"
    lo_name, hi_name = f"{y}_ci_low", f"{y}_ci_high"  # replications' bootstrap intervals (serve/replicate.py)
    has_ci = lo_name in table.names() and hi_name in table.names()
    if has_ci:
        lo, hi = table.col(lo_name).astype(float), table.col(hi_name).astype(float)
    for j, h in enumerate(dict.fromkeys(hs)):
        m = hs == h
        o = np.argsort(xs[m])
        style = dict(marker=markers[j % len(markers)], label=h, color=OKABE_ITO[j % len(OKABE_ITO)])
        if has_ci and np.all(np.isfinite(lo[m])) and np.all(np.isfinite(hi[m])):
            yy = ys[m][o]
            err = np.vstack([yy - lo[m][o], hi[m][o] - yy]) * yf
            ax.errorbar(xs[m][o] * xf, yy * yf, yerr=np.clip(err, 0, None), capsize=2, **style)
        else:
            ax.plot(xs[m][o] * xf, ys[m][o] * yf, **style)
    if np.all(xs > 0) and xs.max() / xs.min() >= 16:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.legend(title=label_for(hue)[0] if hue not in ("system", "model") else None)
    if title:
        ax.set_title(title)
    return fig


def _line_preset(xcol, ycol, doc):
    def recipe(table, x=None, y=None, hue=None, z=None, width="single", title=None):
        return line(table, x=x or xcol, y=y or ycol, hue=hue, width=width, title=title)
    recipe.__doc__ = doc
    return recipe


throughput_vs_batch = _line_preset("batch_size", "decode_tokens_per_s", "Decode throughput vs batch size, one line per system.")
tpot_vs_batch = _line_preset("batch_size", "tpot_s", "TPOT vs batch size, one line per system.")
throughput_vs_context = _line_preset("prompt_len", "decode_tokens_per_s", "Decode throughput vs context length, one line per system.")
tpot_vs_context = _line_preset("prompt_len", "tpot_s", "TPOT vs context length, one line per system.")


# ---------------------------------------------------------------- heatmap

def heatmap(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """A metric (--z) over two swept parameters (--x, --y); one row per cell (use --where)."""
    z = z or hue
    if not (x and y and z):
        raise ConfigError("the heatmap recipe needs --x, --y and --z (the metric)", file="plot")
    table = _ok(table)
    _need(table, "heatmap")
    xs, ys, zs = table.col(x), table.col(y), table.col(z).astype(float)
    ux, uy = sorted(set(xs.tolist()), key=_num_key), sorted(set(ys.tolist()), key=_num_key)
    grid = np.full((len(uy), len(ux)), np.nan)
    for a, b, v in zip(xs.tolist(), ys.tolist(), zs):
        i, j = uy.index(b), ux.index(a)
        if not np.isnan(grid[i, j]):
            raise ConfigError(f"several rows per ({x}, {y}) cell; fix the other swept columns with --where", file="plot")
        grid[i, j] = v
    zl, zf = label_for(z, zs)
    fig, ax = new_figure(width, aspect=0.8)
    im = ax.imshow(grid * zf, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(ux)), [_fmt(v) for v in ux])
    ax.set_yticks(range(len(uy)), [_fmt(v) for v in uy])
    ax.set_xlabel(label_for(x)[0])
    ax.set_ylabel(label_for(y)[0])
    ax.grid(False)
    cb = fig.colorbar(im, ax=ax)
    cb.set_label(zl)
    if grid.size <= 64:
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        for i in range(len(uy)):
            for j in range(len(ux)):
                if np.isfinite(grid[i, j]):
                    dark = (grid[i, j] - lo) < 0.5 * (hi - lo)
                    v = grid[i, j] * zf
                    ax.text(j, i, f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}", ha="center", va="center", fontsize=6,
                            color="white" if dark else "black")
    if title:
        ax.set_title(title)
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


def pareto(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Pareto front of two metrics (--x, --y; e.g. tpot_s vs energy_per_token_j); --z colours by a third (accuracy)."""
    x, y = x or "tpot_s", y or "energy_per_token_j"
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
            ax.scatter(xs[m] * xf, ys[m] * yf, s=12, color=OKABE_ITO[j % len(OKABE_ITO)], label=h)
    ax.plot(xs[front] * xf, ys[front] * yf, color="black", linewidth=0.8, linestyle="--", label="Pareto front",
            zorder=3)
    ax.set_xlabel(xl + (" \u2191" if mx else " \u2193"))
    ax.set_ylabel(yl + (" \u2191" if my else " \u2193"))
    ax.legend()
    if title:
        ax.set_title(title)
    fig._pareto_front = front  # row indices on the front (for inspection)
    return fig


# ---------------------------------------------------------------- roofline

def placed_ops(resolved: dict, step: str = "decode") -> dict:
    """Re-place one step of a stored point: per device role, per op row (op class, FLOPs, bytes, time)."""
    from attnsim.config import ConfigTree
    from attnsim.experiment import validate_tree
    from attnsim.hwmodels.system import build_system
    from attnsim.mapper.base import get_policy
    from attnsim.workloads.trace import build_trace, kv_cache_bytes, weight_bytes
    files = {}
    tree = ConfigTree(**{k: resolved[k] for k in ("experiment", "models", "systems", "hardware", "scenarios")},
                      files=files)
    exp = validate_tree(tree)
    (sname, sspec), = exp.systems.items()
    (mname, model), = exp.models.items()
    (_, sc), = exp.scenarios.items()
    from attnsim.runner import _replica_scenario
    system = build_system(sspec, tree.hardware, tree.file_of)
    tp = sspec.parallelism.tp
    policy = get_policy(sspec.mapper.policy, file=None)
    sc = _replica_scenario(sc, sspec.parallelism.replicas)  # as attnsim.runner.simulate_generation places it
    final_ctx = sc.prompt_lens() + sc.output_len
    mb = {"weights": weight_bytes(model, sc.weight_dtype), "kv": kv_cache_bytes(model, sc, final_ctx),
          "kv_per_rank": kv_cache_bytes(model, sc, final_ctx, tp=tp)}
    plan = policy(build_trace(model, sc, step, tp=tp), system, mb, sspec.mapper.options)
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
        out[str(role)] = {"ops": np.asarray(trace["cls"])[rows], "flops": np.asarray(c.flops, dtype=float),
                          "bytes": np.asarray(c.bytes_by_level[level], dtype=float),
                          "time_s": np.asarray(c.time_s, dtype=float), "level": level,
                          "peak_flops": float(dev.peak_flops), "peak_bw": float(dev.peak_bandwidth_bytes_per_s),
                          "device": getattr(dev, "name", role)}
    return {"system": sname, "model": mname, "devices": out}


def roofline(table, x=None, y=None, hue=None, z=None, width="single", title=None):
    """Roofline per device of one run (select it with --where) with its placed decode ops (--y prefill for prefill)."""
    table = _ok(table)
    _need(table, "roofline")
    if len(table) != 1:
        raise ConfigError(f"the roofline recipe draws one run; {len(table)} rows selected (use --where)", file="plot")
    info = placed_ops(table.resolved(0), step="prefill" if y == "prefill" else "decode")
    devs = info["devices"]
    if not devs:
        raise ConfigError("no device of this run reports FLOPs and bytes", file="plot")
    fig, axes = new_figure(width, aspect=0.75 if len(devs) == 1 else 0.45, ncols=len(devs), squeeze=False)
    for ax, (role, d) in zip(axes[0], devs.items()):
        ok = (d["bytes"] > 0) & (d["flops"] > 0) & (d["time_s"] > 0)
        ai = d["flops"][ok] / d["bytes"][ok]
        perf = d["flops"][ok] / d["time_s"][ok]
        lo = min(ai.min() if len(ai) else 1.0, 0.1) / 2
        ridge = d["peak_flops"] / d["peak_bw"]
        hi = max(ai.max() if len(ai) else 1.0, ridge) * 4
        grid = np.geomspace(lo, hi, 200)
        ax.loglog(grid, np.minimum(d["peak_flops"], grid * d["peak_bw"]) / 1e12, color="black", linewidth=1.0,
                  label="roof")
        ops = d["ops"][ok]
        for j, op in enumerate(dict.fromkeys(ops.tolist())):  # one colour + marker per op class
            m = ops == op
            ax.scatter(ai[m], perf[m] / 1e12, s=14, color=OKABE_ITO[j % len(OKABE_ITO)], marker="osD^vP*X"[j % 8],
                       label=str(op), zorder=3)
        ax.set_xlabel(f"Arithmetic intensity (FLOP/B, {d['level']})")
        ax.set_ylabel("Performance (TFLOP/s)")
        ax.set_title(f"{role}: {d['device']}", fontsize=7)
        ax.legend(fontsize=5, loc="lower right")
    if title:
        fig.suptitle(title)
    fig._roofline = info
    return fig


# ---------------------------------------------------------------- reproductions (attnsim validate --figures)

def reproduction(rows, width="single", title=None):
    """attnsim / reference per row of a reproduction (:class:`attnsim.validate.Row` s): a dot per row on
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
    colours = {"calibration": OKABE_ITO[0], "validation": OKABE_ITO[4]}
    for role, colour in colours.items():
        m = np.array([r.role == role for r in rows])
        if m.any():
            ax.scatter(ratio[m], y[m], s=16, color=colour, marker="o", label=f"{role}", zorder=3)
    bad = np.array([not r.ok for r in rows])
    if bad.any():
        ax.scatter(ratio[bad], y[bad], s=40, facecolors="none", edgecolors=OKABE_ITO[5], marker="o",
                   label="outside tolerance", zorder=4)
    ax.set_yticks(y)
    ax.set_yticklabels([r.name if len(r.name) <= 48 else r.name[:23] + "\u2026" + r.name[-24:] for r in rows], fontsize=5)
    ax.set_xlabel("attnsim / reference (dimensionless)")
    lo, hi = min(ratio.min(), (1 - tol).min()), max(ratio.max(), (1 + tol).max())
    pad = 0.05 * (hi - lo)
    ax.set_xlim(lo - pad, hi + pad)
    ax.legend(fontsize=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, borderaxespad=0.2)
    if title:
        ax.set_title(title, fontsize=6, pad=12)
    return fig


# ---------------------------------------------------------------- sensitivity (attnsim sensitivity)

def tornado(doc: dict, output: str, width="single", title=None):
    """One output of an :mod:`attnsim.sensitivity` document per parameter: OAT bars from the base to
    the value at the parameter's low and high end (relative change, largest swing on top; a ratio's
    1.0 drawn as a dashed line); Morris mu* / |base| or Sobol S_T bars for the sampled methods."""
    rows = [r for r in doc["rows"] if r["output"] == output]
    if not rows:
        raise ConfigError(f"expected an output of the sensitivity result ({', '.join(doc['base'])}), got {output!r}",
                          file="--figure-output")
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
        key, what = ("mu_star", "Morris \u03bc* / |base|") if doc["method"] == "morris" else ("ST", "Sobol total index S_T")
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
