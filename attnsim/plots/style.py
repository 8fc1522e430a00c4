"""Paper style: one bundled font, a colour-blind-safe palette, column widths, labelled units, PDF + PNG.

- Palette: Okabe & Ito, "Color Universal Design" (2008), the 8 colours distinguishable under the
  common colour-vision deficiencies (black first, as they list it, moved last here so series start in
  colour), for filled areas (stacked bars). Lines and markers use :data:`LINE_COLOURS`, the Okabe-Ito
  colours with a WCAG 2.1 contrast ratio >= 3:1 against white (the non-text contrast rule, SC 1.4.11;
  orange 2.2:1, sky blue 2.3:1 and yellow 1.3:1 are left out), each series also with its own marker
  and dash pattern (:func:`series_style`), so series stay apart in greyscale print. Sequential maps use
  matplotlib's ``viridis`` (perceptually uniform, colour-blind safe).
- Widths: IEEE two-column templates (IEEEtran): column width 3.5 in, text width 7.16 in.
- Fonts: 8 pt, the body-text size of figure labels in IEEE/ACM two-column papers; TrueType fonts
  embedded in the PDF (fonttype 42). The default is DejaVu Sans loaded by path from matplotlib's own
  ``mpl-data/fonts`` (:func:`resolve_font`), so installed system fonts never change a figure;
  ``font: serif`` is the bundled DejaVu Serif, any other value an installed family or a .ttf/.otf file.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import matplotlib

from attnsim.core.outputs import figure_paths  # noqa: F401 - re-exported (it lives beside check_output)
from attnsim.plots.labels import KNOWN, OP_CLASSES  # noqa: F401 - re-exported (label data lives in labels)

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# Okabe & Ito (2008), hex values as published
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"]
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]
WIDTH_IN = {"single": 3.5, "double": 7.16}  # IEEEtran column / text width
GOLDEN = 0.618

# Okabe-Ito colours with contrast >= 3:1 on white (test_figure_quality checks the rule on every line)
LINE_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000"]
MARKERS = "osD^vP*X"
DASHES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1))]


# One style per op class (workloads/optrace.py OP_CLASSES, in its order), the same in every panel and figure
# (roofline): colour from LINE_COLOURS (>= 3:1 on white) and a marker, so the 8 classes stay apart with 5 colours.
OP_CLASS_STYLE = {
    c: {"color": LINE_COLOURS[i % len(LINE_COLOURS)], "marker": MARKERS[i]} for i, c in enumerate(OP_CLASSES)
}

# One fill per stacked-bar segment name (energy components, devices, ops), the same in every figure: the
# known names in this order cycle through the Okabe-Ito colours, then through the hatches.
SEGMENTS = (
    "dram_read_write",
    "dram_activate",
    "dram_io",
    "dram_background",
    "dram_refresh",
    "pim_compute",
    "compute",
    "sram",
    "link",
    "ecc",
    "static",
    "active",
    "gpu",
    "pim",
    "pnm",
    "npu",
    "host",
    "cpu",
    "link:gpu_pim",
    "link:nvlink",
    "link:cxl",
    "link:pcie",
    "qkv_proj",
    "attn_score",
    "attn_context",
    "softmax",
    "out_proj",
    "mlp_up",
    "mlp_down",
    "mlp_act",
    "lm_head",
    "embedding",
    "rope",
    "attn_norm",
    "ffn_norm",
    "final_norm",
    "attn_residual",
    "ffn_residual",
    "attn_allreduce",
    "mlp_allreduce",
    "pim_send_q_kv",
    "pim_recv_out",
    "pim_write_kv",
)


def op_class_style(cls: str) -> dict:
    """Colour and marker of an op class (:data:`OP_CLASS_STYLE`; another name: a stable pick by its text)."""
    if cls in OP_CLASS_STYLE:
        return dict(OP_CLASS_STYLE[cls])
    import zlib

    i = zlib.crc32(str(cls).encode())
    return {"color": LINE_COLOURS[i % len(LINE_COLOURS)], "marker": MARKERS[i % len(MARKERS)]}


def segment_style(name: str) -> dict:
    """Fill colour and hatch of a stacked-bar segment: fixed per name (:data:`SEGMENTS`; ``static: gpu`` as
    ``static``'s colour with its device's hatch; "other" grey; another name a stable pick by its text)."""
    import zlib

    name = str(name)
    if name == "other":
        return {"color": "#BBBBBB", "hatch": ""}
    if ": " in name:
        head, tail = name.split(": ", 1)
        j = SEGMENTS.index(tail) if tail in SEGMENTS else zlib.crc32(tail.encode())
        return {"color": segment_style(head)["color"], "hatch": HATCHES[1 + j % (len(HATCHES) - 1)]}
    i = SEGMENTS.index(name) if name in SEGMENTS else len(SEGMENTS) + zlib.crc32(name.encode()) % 64
    return {"color": OKABE_ITO[i % len(OKABE_ITO)], "hatch": HATCHES[i // len(OKABE_ITO) % len(HATCHES)]}


def series_style(j: int, marker: bool = True) -> dict:
    """Colour, dash pattern (and marker) of series ``j``: all three change together."""
    st = {"color": LINE_COLOURS[j % len(LINE_COLOURS)], "linestyle": DASHES[j % len(DASHES)]}
    if marker:
        st["marker"] = MARKERS[j % len(MARKERS)]
    return st


def relative_luminance(colour) -> float:
    """WCAG 2.1 relative luminance of an sRGB colour (any matplotlib colour spec)."""
    from matplotlib.colors import to_rgb

    c = np.array(to_rgb(colour))
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(lin @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(a, b="white") -> float:
    """WCAG 2.1 contrast ratio (L1 + 0.05) / (L2 + 0.05), lighter over darker (1 .. 21)."""
    la, lb = relative_luminance(a), relative_luminance(b)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


# ---------------------------------------------------------------- fonts

BUNDLED_FONTS = {"sans": "DejaVuSans.ttf", "serif": "DejaVuSerif.ttf"}  # in matplotlib's mpl-data/fonts/ttf
DEFAULT_FONT = "sans"


def resolve_font(font=None, file=None, key="font") -> tuple[str, Path]:
    """(family name, font file) of ``font``: None or ``sans`` -> bundled DejaVu Sans, ``serif`` -> bundled
    DejaVu Serif, a path ending in .ttf/.otf -> that file, else an installed family (refused when none
    matches: matplotlib would silently substitute another font)."""
    from matplotlib import font_manager as fm

    from attnsim.core.config import ConfigError

    font = DEFAULT_FONT if font in (None, "") else str(font)
    if font in BUNDLED_FONTS:
        path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / BUNDLED_FONTS[font]
    elif font.lower().endswith((".ttf", ".otf")):
        path = Path(font)
        if not path.is_file():
            raise ConfigError(f"expected a font file, got {font!r} (not found)", file=file, key=key)
        try:
            fm.fontManager.addfont(str(path))
        except Exception as exc:  # noqa: BLE001 - FreeType's error for a file that is not a font
            raise ConfigError(
                f"expected a TrueType/OpenType font file, got {font!r} ({exc})", file=file, key=key
            ) from None
    else:
        try:
            path = Path(fm.findfont(fm.FontProperties(family=font), fallback_to_default=False))
        except ValueError:
            raise ConfigError(
                f"expected 'sans', 'serif' (bundled), an installed font family or a .ttf/.otf file, "
                f"got {font!r} (no such font installed)",
                file=file,
                key=key,
            ) from None
    name = fm.FontProperties(fname=str(path)).get_name()
    found = Path(fm.findfont(fm.FontProperties(family=[name]), fallback_to_default=False))
    if found.resolve() != path.resolve():  # text is drawn by family name: another file of that name would win
        raise ConfigError(
            f"expected a font whose family name {name!r} no other installed font has, got {font!r} "
            f"({found} has it too)",
            file=file,
            key=key,
        )
    return name, path


RC = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "mathtext.fontset": "dejavusans",
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.prop_cycle": matplotlib.cycler(color=LINE_COLOURS) + matplotlib.cycler(linestyle=DASHES),
    "axes.grid": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "axes.axisbelow": True,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "image.cmap": "viridis",
}


@contextmanager
def paper_style(font=None):
    """The paper rc settings, text in ``font`` (:func:`resolve_font`; default bundled DejaVu Sans)."""
    name, path = resolve_font(font)
    serif = path.name.startswith("DejaVuSerif")
    rc = {**RC, "font.family": [name], "mathtext.fontset": "dejavuserif" if serif else "dejavusans"}
    with plt.rc_context(rc):
        yield


def new_figure(width: str = "single", aspect: float = GOLDEN, nrows: int = 1, ncols: int = 1, **kw):
    """A figure one column (3.5 in) or the text (7.16 in) wide; double-width figures keep the height."""
    w = WIDTH_IN[width]
    aspect = aspect * WIDTH_IN["single"] / w
    fig, ax = plt.subplots(nrows, ncols, figsize=(w, w * aspect * (nrows if ncols == 1 else 1)), **kw)
    return fig, ax


def save(fig, out: str | Path, dpi: int = 300) -> list[Path]:
    """Write ``out`` and its sibling in the other format (vector PDF + PNG), each atomically with the
    umask's mode (:mod:`attnsim.core.fileio`); returns both paths."""
    from attnsim.core.fileio import atomic_path

    paths = figure_paths(out, create=True)
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for p in paths:
        # no creation date / software stamp: the same results give byte-identical figures
        meta = (
            {"CreationDate": None}
            if p.suffix == ".pdf"
            else ({"Date": None} if p.suffix == ".svg" else {"Software": None})
        )
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


# longest first: "_per_s" (a rate) before "_s"
_SUFFIX_UNITS = {
    "_per_s": "1/s",
    "_rps": "requests/s",
    "_s": "s",
    "_ns": "ns",
    "_j": "J",
    "_pj": "pJ",
    "_w": "W",
    "_bytes": "B",
    "_gbps": "GB/s",
    "_ratio": None,
    "_count": None,
    "_tokens": "tokens",
}
_STAT = {"ttft": "TTFT", "tpot": "TPOT", "latency": "Latency", "queue": "Queueing delay"}
# the units an axis can show a column in (``unit.<column>`` label key): factor from the stored SI value
UNIT_SCALES = {
    "s": {"s": 1.0, "ms": 1e3, "us": 1e6, "\u00b5s": 1e6, "ns": 1e9, "min": 1 / 60, "h": 1 / 3600},
    "J": {"J": 1.0, "mJ": 1e3, "uJ": 1e6, "\u00b5J": 1e6, "nJ": 1e9, "kJ": 1e-3},
    "W": {"W": 1.0, "mW": 1e3, "kW": 1e-3, "MW": 1e-6},
    "B": {"B": 1.0, "kB": 1e-3, "MB": 1e-6, "GB": 1e-9, "TB": 1e-12},
}


def _name_unit(column: str) -> tuple[str, str | None]:
    """(axis name, stored unit) of a column, before any user label."""
    import re

    short = column.split(".")[-1]
    if column.startswith("vs_baseline."):  # a ratio to the baseline system's same point (attnsim.sim.results)
        name = short.removesuffix("_ratio").replace("_", " ")
        return f"{name[:1].upper()}{name[1:]} vs baseline", "\u00d7"
    if column.startswith(("scenario.", "scenarios.")) and short in ("batch_size", "prompt_len", "output_len"):
        return KNOWN[short]
    if column in KNOWN or short in KNOWN:
        return KNOWN.get(column) or KNOWN[short]
    from attnsim.studies.sweep.table import UNIT_NAMES

    stored = next((k for k, v in UNIT_NAMES.items() if v == short), None)  # batch_size_count -> batch_size
    if stored in KNOWN:
        return KNOWN[stored]
    m = re.fullmatch(r"(ttft|tpot|latency|queue)_(mean|p\d+)(_s)?(_ci_low|_ci_high)?", short)
    if m:  # serve aggregates (attnsim.studies.serve.metrics), stored in seconds: "TTFT p99"
        ci = {"_ci_low": " (CI low)", "_ci_high": " (CI high)"}.get(m.group(4) or "", "")
        return f"{_STAT[m.group(1)]} {m.group(2)}{ci}", "s"
    name, unit = short.replace("_", " "), None
    for suf, u in _SUFFIX_UNITS.items():
        if short.endswith(suf) and len(short) > len(suf):
            name, unit = short[: -len(suf)].replace("_", " "), u
            break
    return name[:1].upper() + name[1:], unit


def column_unit(column: str) -> str | None:
    """The unit a column is stored in (s, J, tokens/s, ...; None: dimensionless)."""
    return _name_unit(column)[1]


def check_units(labels: dict, file=None, key: str = "labels") -> None:
    """Each ``unit.<column>`` label names a unit of that column's kind (:data:`UNIT_SCALES`)."""
    from attnsim.core.config import ConfigError
    from attnsim.plots.labels import UNIT_PREFIX

    for k, v in labels.items():
        if k.startswith(UNIT_PREFIX):
            base = column_unit(k[len(UNIT_PREFIX) :])
            ok = UNIT_SCALES.get(base, {})
            if v not in ok:
                raise ConfigError(
                    f"expected one of {', '.join(ok) or 'no unit (the column has no scalable unit)'}, got {v!r}",
                    file=file,
                    key=f"{key}.{k}",
                )


def _user(column: str, labels: dict, prefix: str = ""):
    """The user's label for ``column`` under its stored, unit-suffixed or short name, else None."""
    from attnsim.studies.sweep.table import unit_name

    for n in (column, unit_name(column), column.split(".")[-1]):
        if prefix + n in labels:
            return labels[prefix + n]
    return None


def label_for(column: str, values=None) -> tuple[str, float]:
    """Axis label with units and the factor to multiply values by (e.g. 'TPOT (ms)', 1e3). The active
    labels (:mod:`attnsim.plots.labels`) may rename the axis (``<column>: text``; ``{unit}`` in the text
    places the unit) and pin its unit (``unit.<column>: ms``)."""
    from attnsim.plots.labels import UNIT_PREFIX, user_labels

    labels = user_labels()
    name, unit = _name_unit(column)
    name = _user(column, labels) or name
    pinned = _user(column, labels, UNIT_PREFIX)
    per = "/token" if column.endswith("per_token_j") else ""
    f, u = 1.0, unit
    if unit is not None and pinned is not None and pinned in UNIT_SCALES.get(unit, {}):
        f, u = UNIT_SCALES[unit][pinned], pinned
    elif unit in ("s", "J", "W", "B") and values is not None:
        f, u = scale_for(values, unit)
    if u is None:
        return name.replace("{unit}", "").strip(), f
    u = u + per
    if "{unit}" in name:
        return name.replace("{unit}", u), f
    return f"{name} ({u})", f
