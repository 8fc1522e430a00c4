"""NPU systolic-array model: hand-computed cycles, utilisation <= 1, never above peak."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.hwmodels import registry
from attnsim.hwmodels.base import DeviceModel
from attnsim.hwmodels.gpu import load_hardware
from attnsim.hwmodels.npu import NPUModel
from attnsim.workloads.optrace import OpTrace

NPU = load_hardware("neupims_npu")


def one_array(dataflow="weight_stationary"):
    return NPUModel(NPU.spec.model_copy(update={"num_arrays": 1, "dataflow": dataflow}))


def trace(rows):
    return OpTrace.from_rows(
        rows, phase="decode", model="x", tp=1, query_tokens=np.ones(1), context_lens=np.ones(1), groups=[]
    )


def test_preset_numbers():
    # pim_dram.md b.2: 8 arrays 128x128 at 1 GHz -> 2 * 8 * 16384 * 1e9 = 262 TFLOPS; 8 x 128 vector lanes
    assert isinstance(NPU, DeviceModel) and NPU.kind == "npu"
    assert NPU.peak_flops == pytest.approx(2 * 8 * 128 * 128 * 1e9)
    assert NPU.peak_vector_ops == pytest.approx(8 * 128 * 1e9)
    assert NPU.peak_bandwidth_bytes_per_s == pytest.approx(1024e9)
    assert NPU.capacity_bytes == pytest.approx(32 * 2**30, rel=1e-3)  # 32 GiB


def test_hand_computed_cycles_weight_stationary():
    npu = one_array()
    # decode GEMV-like: M=4 rows through one 128x128 weight tile: 4 + 128 fill + 128 drain = 260 cycles
    assert npu.matmul_cycles(4, 128, 128)[0] == 260
    assert npu.utilisation(4, 128, 128)[0] == pytest.approx(4 / 260)
    # M=256, K=256, N=384: 2 x 3 = 6 weight tiles, each 256 + 256 cycles, one array -> 6 * 512 = 3072
    assert npu.matmul_cycles(256, 384, 256)[0] == 3072
    # on the 8-array preset the 6 tiles run in one round: 512 cycles
    assert NPU.matmul_cycles(256, 384, 256)[0] == 512


def test_hand_computed_cycles_output_stationary():
    npu = one_array("output_stationary")
    # M=128, N=128, K=1000: one output tile, K streams: 1000 + 128 + 128 = 1256 cycles
    assert npu.matmul_cycles(128, 128, 1000)[0] == 1256
    # M=200, N=300: ceil(200/128) * ceil(300/128) = 2 * 3 = 6 tiles of (64 + 256) cycles
    assert npu.matmul_cycles(200, 300, 64)[0] == 6 * 320


def test_cost_compute_vs_memory_bound_and_energy():
    # prefill GEMM: M=8192, K=N=4096, bytes 2*(4096^2 + 8192*8192) = 167.8 MB -> 193 us at 0.85 x 1024 GB/s;
    # compute: 32*32 = 1024 tiles / 8 arrays = 128 rounds x (8192 + 256) cycles = 1.081 ms -> compute-bound
    m, k, n = 8192, 4096, 4096
    row = dict(
        op="mm",
        cls="matmul",
        count=1,
        m=m,
        n=n,
        k=k,
        batch=1,
        flops=2.0 * m * n * k,
        weight_bytes=2.0 * k * n,
        act_bytes=2.0 * m * (k + n),
    )
    # decode GEMV: M=1 -> 1024 tiles/8 = 128 rounds x 257 cycles = 32.9 us; weights 33.6 MB -> 38.5 us: memory
    gemv = dict(row, m=1, flops=2.0 * n * k, act_bytes=2.0 * (k + n))
    c = NPU.cost(trace([row, gemv, dict(op="ar", cls="allreduce", count=1, comm_bytes=1e6)]), np.arange(3))
    assert c.time_s[0] == pytest.approx(128 * (8192 + 256) * 1e-9)
    assert c.bound[0] == "compute"
    assert c.time_s[1] == pytest.approx((2.0 * k * n + 2.0 * (k + n)) / (1024e9 * 0.85))
    assert c.bound[1] == "memory"
    assert c.time_s[2] == 0 and c.bound[2] == "link"
    assert c.energy_j["compute"][0] == pytest.approx(m * n * k * 0.32e-12)
    dram = c.energy_j["dram_activate"] + c.energy_j["dram_read_write"] + c.energy_j["dram_io"]
    assert dram[1] == pytest.approx((2.0 * k * n + 2.0 * (k + n)) * 28.72e-12)


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 20000),
    n=st.integers(1, 20000),
    k=st.integers(1, 20000),
    batch=st.integers(1, 64),
    arrays=st.integers(1, 16),
    os_=st.booleans(),
    cls=st.sampled_from(["matmul", "attn_score", "attn_context"]),
)
def test_utilisation_and_peaks(m, n, k, batch, arrays, os_, cls):
    npu = NPUModel(
        NPU.spec.model_copy(
            update={"num_arrays": arrays, "dataflow": "output_stationary" if os_ else "weight_stationary"}
        )
    )
    u = npu.utilisation(m, n, k, batch)[0]
    assert 0 < u <= 1
    flops = 2.0 * m * n * k * batch
    nbytes = 2.0 * (k * n + m * (k + n)) * batch
    c = npu.cost(
        trace([dict(op="x", cls=cls, count=1, m=m, n=n, k=k, batch=batch, flops=flops, act_bytes=nbytes)]), np.arange(1)
    )
    t = c.time_s[0]
    assert flops / t <= npu.peak_flops * (1 + 1e-9)
    assert nbytes / t <= npu.peak_bandwidth_bytes_per_s * (1 + 1e-9)


def test_bad_npu_config():
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "hardware" / "neupims_npu.yaml").read_text())
    with pytest.raises(ConfigError, match="n.yaml: dataflow: expected one of"):
        registry.build(dict(data, dataflow="row_stationary"), file="n.yaml")
    with pytest.raises(ConfigError, match="n.yaml: num_arrays: expected a positive integer"):
        registry.build(dict(data, num_arrays=0), file="n.yaml")
