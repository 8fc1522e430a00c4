"""PIM / normal access exclusion on a unified memory, and PIM access scheduling (IANUS, Seo et al.,
ASPLOS'24; shared/reference/pim_dram.md item 7: "normal accesses are blocked while PIM runs").

The memory channels are shared by the compute device's normal accesses (loads / stores of its ops) and
the PIM's all-bank MAC phases; the two never overlap on a channel. Per layer group (rows of one decoder
layer, and the once-per-step rows as one more group), with times per step (x count):

* ``channel_s`` = sum over compute rows of their normal-access time (bytes / (peak bandwidth x eta))
  + sum over PIM rows of their time (with exclusion), or max(normal, PIM) without it (a PIM with its own
  row buffer, NeuPIMs' relaxation, hwmodels/rowbuffer.py);
* ``compute_s`` = sum over compute rows of their time (compute overlaps its own loads; a memory-bound
  row keeps the device waiting);
* naive (no scheduling) = the rows one after another (the engine's default sequential rule);
* scheduled = max(channel_s, compute_s): the compute device's work that needs no channel (operands on
  chip) runs during PIM phases, and its normal accesses fill the gaps between them; the work is pipelined
  over ``partitions`` items (heads), so ``1 / partitions`` of the hidden time stays exposed (fill and
  drain, the engine's ``stage_exposed`` convention).

The scheduled time never exceeds the naive one (every row's normal-access time <= its time).
"""

from __future__ import annotations

import numpy as np


def normal_access_s(model, trace, rows: np.ndarray) -> np.ndarray:
    """Channel time of the normal accesses of ``rows`` on ``model`` (per repeat): bytes / (peak
    bandwidth x ``mem_eta`` where the spec has one)."""
    c = trace.cols
    nbytes = sum(
        c[k][rows].astype(np.float64) for k in ("weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes")
    )
    eta = float(getattr(getattr(model, "spec", None), "mem_eta", 1.0))
    return nbytes / (model.peak_bandwidth_bytes_per_s * eta)


def group_time_s(compute_row_s, compute_channel_s, pim_row_s, exclusion: bool = True, partitions: int = 1) -> float:
    """Scheduled time of one layer group (see the module doc): the compute rows' times and their
    normal-access times, the PIM rows' times."""
    serial = float(np.sum(compute_row_s) + np.sum(pim_row_s))
    normal, pim = float(np.sum(compute_channel_s)), float(np.sum(pim_row_s))
    channel = normal + pim if exclusion else max(normal, pim)
    bound = max(channel, float(np.sum(compute_row_s)))
    return bound + (serial - bound) / max(1, int(partitions))


def schedule_times(plan, system, row_time: np.ndarray) -> np.ndarray:
    """Row times (x count) with ``plan.pim_schedule`` = {"compute": role, "pim": role, "exclusion": bool,
    "partitions": int} applied: each layer group's rows scaled so that they sum to ``group_time_s``.
    Rows on other devices (links) stay sequential and outside the groups' overlap."""
    sch = plan.pim_schedule
    trace = plan.trace
    comp, pim = sch["compute"], sch["pim"]
    model = system.pools[comp].model
    on_c, on_p = plan.device == comp, plan.device == pim
    count = trace["count"].astype(np.float64)
    chan = np.zeros(len(trace))
    idx = np.flatnonzero(on_c)
    chan[idx] = np.minimum(normal_access_s(model, trace, idx) * count[idx], row_time[idx])
    out = row_time.copy()
    groups = np.asarray(trace["layer_group"])
    for g in np.unique(groups):
        rows = (groups == g) & (on_c | on_p)
        serial = float(row_time[rows].sum())
        if serial <= 0 or not np.any(rows & on_p):
            continue
        t = group_time_s(
            row_time[rows & on_c],
            chan[rows & on_c],
            row_time[rows & on_p],
            sch.get("exclusion", True),
            sch.get("partitions", 1),
        )
        out[rows] *= t / serial
    return out
