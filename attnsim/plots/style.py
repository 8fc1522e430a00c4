"""Paper style: serif fonts, a colour-blind-safe palette, column widths, labelled units, PDF + PNG.

- Palette: Okabe & Ito, "Color Universal Design" (2008), the 8 colours distinguishable under the
  common colour-vision deficiencies (black first, as they list it, moved last here so series start in
  colour). Sequential maps use matplotlib's ``viridis`` (perceptually uniform, colour-blind safe).
- Widths: IEEE two-column templates (IEEEtran): column width 3.5 in, text width 7.16 in.
- Fonts: serif (Times-like when installed, else DejaVu Serif) at 8 pt, the body-text size of
  figure labels in IEEE/ACM two-column papers; TrueType fonts embedded in the PDF (fonttype 42).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# Okabe & Ito (2008), hex values as published
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"]
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]
WIDTH_IN = {"single": 3.5, "double": 7.16}  # IEEEtran column / text width
GOLDEN = 0.618

RC = {
    "font.family": "serif",
    "font.serif": ["Times New Roman", "Times", "Nimbus Roman", "DejaVu Serif"],
    "mathtext.fontset": "dejavuserif",
    "font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7,
    "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
    "axes.grid": True, "grid.linewidth": 0.4, "grid.alpha": 0.5, "axes.axisbelow": True,
    "axes.linewidth": 0.6, "lines.linewidth": 1.2, "lines.markersize": 4,
    "legend.frameon": False, "savefig.bbox": "tight", "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42, "ps.fonttype": 42, "image.cmap": "viridis",
}


@contextmanager
def paper_style():
    with plt.rc_context(RC):
        yield


def new_figure(width: str = "single", aspect: float = GOLDEN, nrows: int = 1, ncols: int = 1, **kw):
    """A figure one column (3.5 in) or the text (7.16 in) wide; double-width figures keep the height."""
    w = WIDTH_IN[width]
    aspect = aspect * WIDTH_IN["single"] / w
    fig, ax = plt.subplots(nrows, ncols, figsize=(w, w * aspect * (nrows if ncols == 1 else 1)), **kw)
    return fig, ax


def figure_paths(out: str | Path, flag: str = "-o", inputs=(), create: bool = False) -> list[Path]:
    """``out`` and its sibling in the other format (PDF <-> PNG; SVG gets a PNG), after checking both
    can be written (:func:`attnsim.outputs.check_output`); call it before rendering."""
    from attnsim.config import ConfigError
    from attnsim.outputs import check_output
    check_output(out, flag, inputs=inputs, create=create)  # as given: a trailing '/' means a folder
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".pdf", ".png", ".svg"):
        raise ConfigError(f"expected a .pdf, .png or .svg file, got {out.name!r}", file=str(out), key=flag)
    paths = [out, out.with_suffix(".pdf" if suffix == ".png" else ".png")]
    check_output(paths[1], flag, inputs=inputs, create=create)
    return paths


def save(fig, out: str | Path, dpi: int = 300) -> list[Path]:
    """Write ``out`` and its sibling in the other format (vector PDF + PNG), each atomically with the
    umask's mode (:mod:`attnsim.fileio`); returns both paths."""
    from attnsim.fileio import atomic_path
    paths = figure_paths(out, create=True)
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for p in paths:
        # no creation date / software stamp: the same results give byte-identical figures
        meta = {"CreationDate": None} if p.suffix == ".pdf" else ({"Date": None} if p.suffix == ".svg" else {"Software": None})
        with atomic_path(p, suffix=p.suffix, fsync=False) as tmp:
            fig.savefig(tmp, dpi=dpi, metadata=meta, format=p.suffix.lower()[1:])
    return paths


# ---------------------------------------------------------------- units

_PREFIXES = [(1.0, ""), (1e-3, "m"), (1e-6, "\u00b5"), (1e-9, "n")]
_BIG = [(1e9, "G"), (1e6, "M"), (1e3, "k")]


def scale_for(values, unit: str) -> tuple[float, str]:
    """(factor, unit label) so that values * factor read in [1, 1000) for s, J, W, B units."""
    v = np.asarray(values, dtype=float)
    v = np.abs(v[np.isfinite(v) & (v != 0)])
    if not len(v):
        return 1.0, unit
    m = float(np.max(v))
    for f, p in _BIG:
        if m >= f and unit in ("B", "FLOP/s", "B/s", "W"):
            return 1.0 / f, p + unit
    for f, p in _PREFIXES:
        if m >= f:
            return 1.0 / f, p + unit
    return 1e9, "n" + unit


# column name -> (label, unit) ; unit None = dimensionless
KNOWN = {
    "ttft_s": ("TTFT", "s"), "tpot_s": ("TPOT", "s"), "total_time_s": ("Total time", "s"),
    "prefill_time_s": ("Prefill time", "s"), "decode_time_s": ("Decode time", "s"),
    "tokens_per_s": ("Throughput", "tokens/s"), "decode_tokens_per_s": ("Decode throughput", "tokens/s"),
    "energy_per_token_j": ("Energy per token", "J"), "decode_energy_per_token_j": ("Decode energy per token", "J"),
    "dynamic_energy_per_token_j": ("Dynamic energy per token", "J"),
    "decode_dynamic_energy_per_token_j": ("Decode dynamic energy per token", "J"),
    "static_energy_per_token_j": ("Static energy per token", "J"),
    "batch_size": ("Batch size", None), "prompt_len": ("Context length", "tokens"),
    "output_len": ("Output length", "tokens"), "elapsed_s": ("Simulation time", "s"),
}
_SUFFIX_UNITS = {"_s": "s", "_ns": "ns", "_j": "J", "_pj": "pJ", "_w": "W", "_bytes": "B", "_gbps": "GB/s"}


def label_for(column: str, values=None) -> tuple[str, float]:
    """Axis label with units and the factor to multiply values by (e.g. 'TPOT (ms)', 1e3)."""
    short = column.split(".")[-1]
    if column in KNOWN or short in KNOWN:
        name, unit = KNOWN.get(column) or KNOWN[short]
    else:
        name, unit = short.replace("_", " "), None
        for suf, u in _SUFFIX_UNITS.items():
            if short.endswith(suf):
                name, unit = short[: -len(suf)].replace("_", " "), u
                break
        name = name[:1].upper() + name[1:]
    if column.startswith(("scenario.", "scenarios.")) and short in ("batch_size", "prompt_len", "output_len"):
        name, unit = KNOWN[short]
    if unit is None:
        return name, 1.0
    if unit in ("s", "J", "W", "B") and values is not None:
        f, u = scale_for(values, unit)
        per = "/token" if column.endswith("per_token_j") else ""
        return f"{name} ({u}{per})", f
    if unit == "J" and column.endswith("per_token_j"):
        return f"{name} (J/token)", 1.0
    return f"{name} ({unit})", 1.0
