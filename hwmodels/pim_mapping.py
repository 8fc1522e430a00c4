"""PIM mapping search: the partition and the ``channels_per_item`` split each PIM op runs with.

A *mapping* of a device's attention work is (partition, channels_per_item):
- ``partition``: where a work item's tokens and head-dim elements go inside a channel and which PU
  level computes (isa/lower.py ``Partition``). AttAcc has three (bank / bank-group / buffer-die PUs,
  pim_dram.md b.6); AiM, FIMDRAM and CXL-PNM each have one fixed scheme (``ISA_PARTITIONS``).
- ``channels_per_item`` (cpi): a (request, KV head) item is cut by tokens into cpi slices on cpi
  channels. cpi = 1 is "heads over channels" (AttAcc's one head per channel); larger cpi spreads
  tokens over channels, down to every item on every channel.

Search (``PIMDevice.cost``): the KV layout is one choice per device, so one partition serves every
op of the step (FC on PIM included) and the score, softmax and context of one layer group share one
cpi: per layer group the cpi minimising score + softmax + context + merge, per device the
partition minimising the step's PIM time. The choice is made per step from that step's context
lengths: an *oracle layout* (the KV written as if the final lengths were known). For a static batch
the choice depends on the item count and the channel count, which do not change between steps.

A split item leaves cpi partial results (per query head: max m_i, sum l_i, unnormalised context o_i
of dhead elements) that are merged: M = max m_i, o = sum exp(m_i - M) o_i, l = sum exp(m_i - M) l_i
(the flash-decoding split-K merge). ``merge_cost`` costs it (see there for where it runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# partitions each ISA can physically run (first = the one a "pinned" default uses)
ISA_PARTITIONS = {
    "attacc": ("attacc_bank", "attacc_bg", "attacc_buffer"),  # AttAcc's three PU placements (b.6)
    "aim": ("aim_bank",),  # tokens (score) / outputs (context) over the 16 banks (b.4)
    "fimdram": ("fimdram_bank_pair",),  # one PCU per 2 banks, GEMV CRF kernel (b.3)
    "cxl_pnm": ("cxl_pnm_stream",),  # the accelerator streams every item over all channels
    "newton": ("newton_request",),  # NeuPIMs: a request's heads on one channel (isa/lower_newton.py)
}
PARTITION_NAMES = tuple(dict.fromkeys(n for v in ISA_PARTITIONS.values() for n in v))

# where the merge runs, per ISA (its element rate is the device's softmax/vector rate,
# PUParams.softmax_gbps_per_unit, the unit that already holds m_i and l_i):
# - attacc: the buffer-die softmax unit of the stack (AttAcc: PIM_SFM on the buffer die, b.1/b.6); a
#   split item stays inside one stack (cpi divides the channels per stack, so whole items' slices tile a
#   stack), so the merge never leaves it.
# - aim: the CXL controller's vector unit (CENT: the controller collects RD_MAC results); m_i and l_i
#   come from the in-channel AF unit, so they cross the channel bus to the controller.
# - fimdram: the host (no vector unit in the memory; softmax already runs at the host rate).
MERGE_SITE = {"attacc": "buffer_die", "aim": "controller", "fimdram": "host"}


def allowed_partitions(isa: str) -> tuple[str, ...]:
    return ISA_PARTITIONS.get(isa, ("attacc_bank",))


def cpi_candidates(n_items: int, channels: int, max_cpi: int, divides: int = 0) -> list[int]:
    """Splits to try: powers of two and the smallest split that fills every channel with the same
    number of slices (channels / gcd(channels, items)) times powers of two, up to ``max_cpi`` (and
    dividing ``divides`` when given: AttAcc's channels per stack); nothing beyond the first split that
    gives every channel the same number of slices (a finer split only adds per-slice overhead and
    merge work)."""
    max_cpi = max(1, int(max_cpi))
    if n_items <= 0 or channels <= 1:
        return [1]
    out = set()
    for start in (1, channels // math.gcd(channels, n_items)):
        s = start
        while s <= max_cpi:
            if not divides or divides % s == 0:
                out.add(s)
            s *= 2
    perfect = [s for s in out if n_items * s >= channels and (n_items * s) % channels == 0]
    if perfect:
        stop = min(perfect)
        out = {s for s in out if s <= stop}
    return sorted(out)


@dataclass(frozen=True)
class Merge:
    """Cost of merging the partial results of split items (all items of one op)."""

    partials: float  # (slice, query head) partial results of split items
    bytes: float  # bytes gathered at the merge site: (dhead + 2) x acc_bytes per partial
    bus_bytes: float  # of which cross a channel bus only for the merge (m_i, l_i from an in-channel unit)
    elements: float  # merge arithmetic: exp-rescale + add per element, (dhead + 2) per partial
    time_s: float

    def to_doc(self) -> dict:
        return {
            "partials": float(self.partials),
            "bytes": float(self.bytes),
            "elements": float(self.elements),
            "time_s": float(self.time_s),
        }


NO_MERGE = Merge(0.0, 0.0, 0.0, 0.0, 0.0)


def merge_cost(
    tokens, cpi: int, *, group: int, dhead: int, acc_bytes: int, isa: str, elems_per_s: float, bus_bytes_per_s: float
) -> Merge:
    """Merge of the cpi partials of every split item.

    ``tokens``: context length per item; an item of t tokens has min(t, cpi) non-empty slices.
    Per partial and query head: o_i (dhead elements), m_i, l_i. The o_i leave their channels in the
    context program already (AttAcc MVSB, AiM RD_MAC, FIMDRAM GRF_B readout: timed by the engine per
    slice), m_i and l_i are made where the softmax runs; only AiM's (in-channel AF) cross a channel bus
    for the merge (``bus_bytes``, at ``bus_bytes_per_s`` over the channels that hold slices). The
    arithmetic, (dhead + 2) elements per partial (exp(m_i - M), rescale-add of o_i and l_i), runs at
    ``elems_per_s`` on the merge site (``MERGE_SITE``), after the context (it needs every partial).
    """
    t = np.asarray(tokens, np.int64)
    parts = np.minimum(t, int(cpi))
    n = float(parts[parts > 1].sum()) * group
    if n <= 0:
        return NO_MERGE
    nbytes = n * (dhead + 2) * acc_bytes
    bus = n * 2 * acc_bytes if isa == "aim" else 0.0
    elems = n * (dhead + 2)
    time = elems / elems_per_s + (bus / bus_bytes_per_s if bus else 0.0)
    return Merge(n, nbytes, bus, elems, time)


# ---------------------------------------------------------------- run-document summary


def _union(a, b):
    """One value if equal, else the sorted list of distinct values (a mapping that differs by row/step)."""
    va = a if isinstance(a, list) else [a]
    vb = b if isinstance(b, list) else [b]
    out = sorted(set(va) | set(vb), key=str)
    return out[0] if len(out) == 1 else out


def summarize(ops, counts, row_mapping) -> dict:
    """``{op: {partition, channels_per_item, channels_used, merge_s}}`` of one step: rows of the same op
    (layer groups) combined; ``merge_s`` = merge seconds per step (x count); values that differ between
    rows become lists of the distinct values; ``channels_used`` is the largest."""
    out: dict = {}
    if row_mapping is None:
        return out
    for op, cnt, m in zip(ops, counts, row_mapping):
        if m is None:
            continue
        add = {
            "partition": m["partition"],
            "channels_per_item": m["channels_per_item"],
            "channels_used": m["channels_used"],
            "merge_s": float(m["merge_s"]) * float(cnt),
        }
        out[str(op)] = combine(out[str(op)], add) if str(op) in out else add
    return out


def combine(a: dict, b: dict, w: float = 1.0) -> dict:
    """Mapping entry a + w x b (merge seconds add; choices union; channels_used the largest)."""
    return {
        "partition": _union(a["partition"], b["partition"]),
        "channels_per_item": _union(a["channels_per_item"], b["channels_per_item"]),
        "channels_used": max(a["channels_used"], b["channels_used"]),
        "merge_s": float(a["merge_s"] + w * b["merge_s"]),
    }
