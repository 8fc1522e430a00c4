"""Systolic compute of a CXL-PNM logic die (Sangam, arXiv 2511.12286: logic chiplets with systolic arrays and
SRAM buffers beside DRAM chiplets; cxl_reliability.md §1.1). ``systolic:`` section of a ``kind: pim``,
``isa: cxl_pnm`` device, replacing the flat ``pu.tflops`` roofline with the tile model of hwmodels/npu.py:

* time of a matmul / attention row = tile cycles / clock, weight-stationary, ``tiles = batch x ceil(K/rows) x
  ceil(N/cols)`` spread over ``arrays`` arrays. ``tile_overlap: false``: the NPU's tiles of ``M + rows + cols``
  cycles each (``NPUModel.matmul_cycles``); ``true`` (default): tiles pipelined through the SRAM buffer, the
  next tile's weights loaded (one PE row per cycle: ``rows`` cycles) while M inputs stream, so
  ``ceil(tiles / arrays) x max(M, rows) + rows + cols`` (one fill and drain). A decode GEMV (M = batch <
  rows) is then weight-load bound at utilisation M / rows, not at the peak;
* SRAM buffer rule (weight-stationary): the weights stream from DRAM once; the input activations (M x K) are
  read once if they fit in ``sram_mb``, else once per pass over the output columns (``ceil(N / (arrays x
  cols))`` passes), i.e. re-read from DRAM.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from attnsim.core.config import ARRAY_SIDE, HARDWARE_COUNT, Schema


class SystolicSpec(Schema):
    plausible = {"arrays": HARDWARE_COUNT, "rows": ARRAY_SIDE, "cols": ARRAY_SIDE}

    arrays: PositiveInt = Field(description="systolic arrays on the device's logic dies")
    rows: PositiveInt = Field(description="PE rows of one array (the K side of a weight tile)")
    cols: PositiveInt = Field(description="PE columns of one array (the N side of a weight tile)")
    clock_mhz: PositiveFloat
    sram_mb: float = Field(gt=0, description="SRAM buffer holding input activations (MB, 1e6 B)")
    tile_overlap: bool = Field(
        True, description="tiles pipelined (one fill/drain per row) rather than the NPU's fill + drain per tile"
    )

    @property
    def peak_flops(self) -> float:
        return 2.0 * self.arrays * self.rows * self.cols * self.clock_mhz * 1e6


def _npu_view(spec: SystolicSpec):
    return SimpleNamespace(
        spec=SimpleNamespace(
            num_arrays=spec.arrays, array_rows=spec.rows, array_cols=spec.cols, dataflow="weight_stationary"
        )
    )


def matmul_time_s(spec: SystolicSpec, m, n, k, batch=1) -> float:
    """Seconds of ``batch`` (m x k) @ (k x n) matmuls on the arrays (hwmodels/npu.py tile model)."""
    if not spec.tile_overlap:
        from attnsim.hwmodels.npu import NPUModel

        cycles = float(np.sum(NPUModel.matmul_cycles(_npu_view(spec), m, n, k, batch)))
    elif min(m, n, k) <= 0:
        cycles = 0.0
    else:
        tiles = max(int(batch), 1) * -(-int(k) // spec.rows) * -(-int(n) // spec.cols)
        cycles = float(-(-tiles // spec.arrays) * max(int(m), spec.rows) + spec.rows + spec.cols)
    return cycles / (spec.clock_mhz * 1e6)


def utilisation(spec: SystolicSpec, m, n, k, batch=1) -> float:
    """Useful MACs / MAC slots of that matmul."""
    t = matmul_time_s(spec, m, n, k, batch)
    return float(m) * n * k * batch / (spec.arrays * spec.rows * spec.cols * spec.clock_mhz * 1e6 * t) if t else 0.0


def row_shape(cls: str, m, n, k, batch):
    """(m, n, k, batch) of a trace row as the arrays run it (NPU convention: context = M x n @ n x k)."""
    return (m, k, n, batch) if cls == "attn_context" else (m, n, k, batch)


def input_rereads(spec: SystolicSpec, act_bytes: float, n: int) -> float:
    """Extra DRAM bytes of the SRAM rule: 0 if the row's inputs fit, else (passes - 1) x their bytes."""
    if act_bytes <= spec.sram_mb * 1e6 or n <= 0:
        return 0.0
    passes = -(-int(n) // (spec.arrays * spec.cols))
    return float(act_bytes) * (passes - 1)
