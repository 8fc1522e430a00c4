"""Tick labels that never overlap: measured with the renderer, then wrapped, rotated or thinned.

:func:`fit_ticks` draws the figure once (Agg, no file) and, per axis whose tick labels' text bounding
boxes (``get_window_extent``) overlap: categorical (not numeric) labels at fixed ticks are
tried wrapped at ", " / spaces, then rotated 30, 45 and 90 degrees, then set smaller (down to
:data:`MIN_PT`), and finally thinned (every k-th label kept); numeric ticks are thinned by fixing the locator to every
k-th tick. Minor tick labels (log axes) that collide are dropped first. The result is checked again after each change.
Log axes
spanning under 3 decades are labelled with plain numbers (:func:`plain_log_ticks`).
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter, NullFormatter

GAP_PX = 1.0  # boxes closer than this count as touching
MIN_PT = 5.0  # smallest tick label size tried before labels are thinned (IEEE figures: >= 5 pt legible in print)


def _labels(axis, renderer, which="both"):
    out = []
    ticks = (axis.get_major_ticks() if which in ("both", "major") else []) + (
        axis.get_minor_ticks() if which in ("both", "minor") else []
    )
    lo, hi = sorted(axis.get_view_interval())
    for t in ticks:
        lab = t.label1
        if not (lab.get_visible() and lab.get_text() and t.get_visible()):
            continue
        if not (lo - 1e-9 * abs(hi - lo) <= t.get_loc() <= hi + 1e-9 * abs(hi - lo)):
            continue  # ticks outside the view are not drawn
        out.append(lab.get_window_extent(renderer))
    return out


def overlapping(boxes, gap=GAP_PX) -> bool:
    """Whether any two of the boxes (matplotlib Bbox) overlap or come within ``gap`` pixels."""
    for i in range(len(boxes)):
        a = boxes[i]
        for b in boxes[i + 1 :]:
            if a.x0 < b.x1 + gap and b.x0 < a.x1 + gap and a.y0 < b.y1 + gap and b.y0 < a.y1 + gap:
                return True
    return False


def axis_overlaps(axis, renderer) -> bool:
    return overlapping(_labels(axis, renderer))


def _is_number(text: str) -> bool:
    try:
        float(text.replace("\u2212", "-"))
        return True
    except ValueError:
        return False


def _wrap(text: str, width: int) -> str:
    parts = text.split(", ")
    if len(parts) > 1:
        return "\n".join(parts)
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False)) or text


def _fit_axis(fig, axis, renderer):
    if not axis_overlaps(axis, renderer):
        return
    if _labels(axis, renderer, "minor"):
        axis.set_minor_formatter(NullFormatter())
        fig.draw_without_rendering()
        if not axis_overlaps(axis, renderer):
            return
    xaxis = axis.axis_name == "x"
    texts = [t.get_text() for t in axis.get_ticklabels()]
    fixed = isinstance(axis.get_major_locator(), FixedLocator)  # set_xticks(pos, labels): categories
    if fixed and not all(_is_number(t) for t in texts):
        locs = list(axis.get_majorticklocs())
        longest = max((len(t) for t in texts), default=1)
        attempts = []
        if any(len(t) > 8 for t in texts):
            attempts.append(("wrap", 0))
        if xaxis:
            attempts += [("rot", 30), ("rot", 45), ("rot", 90)]
        for kind, angle in attempts:
            labels = [_wrap(t, max(8, longest // 2)) for t in texts] if kind == "wrap" else texts
            axis.set_ticks(locs, labels)
            for lab in axis.get_ticklabels():
                lab.set_rotation(angle)
                lab.set_rotation_mode("anchor" if angle else "default")
                lab.set_horizontalalignment("right" if angle and angle < 90 else "center")
                if angle == 90 and xaxis:
                    lab.set_verticalalignment("center")
                    lab.set_horizontalalignment("right")
            fig.draw_without_rendering()
            if not axis_overlaps(axis, renderer):
                return
        size = axis.get_ticklabels()[0].get_fontsize() if texts else MIN_PT
        while size > MIN_PT:  # categories are not dropped before their labels reach MIN_PT
            size = max(MIN_PT, size - 0.5)
            for lab in axis.get_ticklabels():
                lab.set_fontsize(size)
            fig.draw_without_rendering()
            if not axis_overlaps(axis, renderer):
                return
    # thin: every k-th tick (numeric ticks keep their formatter, categorical their last attempt)
    locs = list(axis.get_majorticklocs())
    texts = [t.get_text() for t in axis.get_ticklabels()]
    for k in range(2, max(3, len(locs) + 1)):
        if fixed:
            keep = [t if i % k == 0 else "" for i, t in enumerate(texts)]
            axis.set_major_formatter(FixedFormatter(keep))
        else:
            axis.set_major_locator(FixedLocator(locs[::k]))
        fig.draw_without_rendering()
        if not axis_overlaps(axis, renderer):
            return


def plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (0.01, 0.02, 0.05, 0.1, ...) rather than 10^k when the
    axis spans under 3 decades; labels of 2x/5x minor ticks that collide are dropped by :func:`fit_ticks`."""
    lo, hi = sorted(axis.get_view_interval())
    if (
        axis.get_scale() != "log"
        or not (lo > 0 and hi / lo < 1e3)
        or isinstance(axis.get_major_locator(), FixedLocator)
    ):
        return

    def minor(v, _):
        m = v / 10 ** np.floor(np.log10(v) + 1e-9)
        return f"{v:g}" if round(m) in (2, 5) and abs(m - round(m)) < 1e-6 else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def fit_ticks(fig) -> None:
    """Make every axis's tick labels non-overlapping (see the module docstring)."""
    fig.draw_without_rendering()  # limits are final after a draw
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            plain_log_ticks(axis)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            _fit_axis(fig, axis, renderer)
