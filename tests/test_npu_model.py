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


def small_npu(arrays=2, issue="parallel"):
    """2 weight-stationary 4 x 4 arrays (a case small enough to count by hand)."""
    spec = NPU.spec.model_copy(
        update={"num_arrays": arrays, "array_rows": 4, "array_cols": 4, "attention_issue": issue}
    )
    return NPUModel(spec)


def attn_trace(lens, heads=2, kv_heads=None, dim=4):
    """Decode attention rows of ``len(lens)`` requests (one query token each) reading ``lens`` KV tokens."""
    n = int(sum(lens))
    rows = [
        dict(op=op, cls=op, count=1, m=1, n=n, k=dim, batch=heads, flops=2.0 * heads * n * dim)
        for op in ("attn_score", "attn_context")
    ]
    return OpTrace.from_rows(
        rows,
        phase="decode",
        model="x",
        tp=1,
        query_tokens=np.ones(len(lens)),
        context_lens=np.asarray(lens),
        groups=[],
        meta={"kv_heads_per_rank": kv_heads or heads},
    )


def test_attention_runs_per_request_tiles_hand_derived():
    # Two requests of 5 and 9 KV tokens, 2 heads, head dim 4, on 2 arrays of 4 x 4 (weight-stationary).
    # Score, per request and head: K^T (4 x L) stationary -> ceil(4/4) x ceil(L/4) tiles: 2 (L=5) + 3 (L=9) = 5;
    # x 2 heads = 10 tiles of 1 + 4 + 4 = 9 cycles; over 2 arrays: ceil(10/2) = 5 rounds -> 45 cycles.
    # Context, per request and head: V (L x 4) stationary -> ceil(L/4) x ceil(4/4): the same 10 tiles -> 45.
    # (The batch as one matrix of 14 tokens would pack both requests' keys: 2 x ceil(14/4) = 8 tiles -> 36.)
    npu = small_npu()
    tr = attn_trace([5, 9])
    assert npu.attention_cycles(tr, 0) == 45
    assert npu.attention_cycles(tr, 1) == 45
    c = npu.cost(tr, np.arange(2))
    assert c.time_s[0] == pytest.approx(45e-9)  # 1 GHz; no KV bytes on these rows: compute-bound
    # serial issue (the NeuPIMs artefact's single pipeline): the 10 tiles one after another: 10 x 9 = 90
    assert small_npu(issue="serial").attention_cycles(tr, 0) == 90
    # GQA: 4 query heads on 2 KV heads -> the 2 heads of a group stream through one K tile (m = 2):
    # 2 KV heads x 5 tiles = 10 tiles of 2 + 8 = 10 cycles, 5 rounds -> 50 cycles
    assert npu.attention_cycles(attn_trace([5, 9], heads=4, kv_heads=2), 0) == 50
    # one request: the batched-matmul formula (matmul_cycles, batch = heads): 2 x ceil(14/4) = 8 tiles -> 36
    one = attn_trace([14])
    assert npu.attention_cycles(one, 0) == npu.matmul_cycles(1, 14, 4, 2)[0] == 36


def test_attention_issue_refused_when_unknown():
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "hardware" / "neupims_npu.yaml").read_text())
    with pytest.raises(ConfigError, match="n.yaml: attention_issue: expected one of"):
        registry.build(dict(data, attention_issue="ganged"), file="n.yaml")
