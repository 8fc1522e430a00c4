"""CXL-NDP transparent compression (hwmodels/compression.py): the bit-plane coder against hand-derived sizes
and the entropy bound, and its effect on a CXL-PNM device's bytes, time, energy, capacity and link bytes."""

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import compression as C
from attnsim.hwmodels import registry
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def device(name="cxl_ndp_lpddr5x", **over):
    hw = load_yaml(find_config("hardware", name))
    hw.update(over)
    return registry.build(hw, file=name)


def test_bit_planes_round_trip_and_layout():
    u = np.arange(C.BLOCK_VALUES, dtype=np.uint16) * 37
    planes = C.bit_planes(u)
    assert planes.shape == (1, 16, C.BLOCK_VALUES // 8)
    assert (C.unbit_planes(planes) == u).all()
    # plane 0 of 0, 37, 74, 111, ... = parity = 0, 1, 0, 1, ... -> 0b01010101 per byte
    assert (planes[0, 0] == 0b01010101).all()
    # xor_planes is undone from the top plane down
    x = C.xor_planes(planes)
    back = x.copy()
    for b in range(14, -1, -1):
        back[0, b] = x[0, b] ^ back[0, b + 1]
    assert (back == planes).all()


def test_random_bits_are_stored_raw_plus_headers():
    u = np.random.default_rng(1).integers(0, 1 << 16, 4 * C.BLOCK_VALUES, dtype=np.uint16)
    # no plane of random bits deflates smaller: raw + one header byte per plane per block
    assert C.compressed_bytes(u) == u.nbytes + 4 * 16 * C.PLANE_HEADER_BYTES


def test_constant_exponent_carry_is_removed_by_the_xor_step():
    # bf16 0.99 (0x3F7D) and 1.0 (0x3F80) alternate: the exponent's low 7 planes flip together with the
    # top mantissa planes; XORed with the plane above, all but two planes become constant
    u = np.tile(np.array([0x3F7D, 0x3F80], np.uint16), C.BLOCK_VALUES // 2)
    plain = sum(min(len(C._deflate(p.tobytes())), p.nbytes) + 1 for p in C.bit_planes(u)[0])
    assert C.compressed_bytes(u) <= plain
    assert C.compressed_bytes(u) < 0.05 * u.nbytes


def _entropy_bits(u16):
    _, n = np.unique(u16, return_counts=True)
    p = n / n.sum()
    return float(-(p * np.log2(p)).sum())


def _plane_entropy_bits(planes):
    """Sum over the 16 planes of the binary entropy of their bits: what an ideal coder of each plane on
    its own (i.i.d. bits) reaches."""
    p = np.clip(np.unpackbits(planes, axis=-1).mean(axis=(0, 2)), 1e-12, 1 - 1e-12)
    return float(-(p * np.log2(p) + (1 - p) * np.log2(1 - p)).sum())


@pytest.mark.parametrize("kind", ["weights", "kv"])
def test_measured_ratio_against_entropy_bounds(kind):
    # slow reference: the zero-order entropy of the 16-bit values (no coder of i.i.d. values beats it) and the
    # per-plane entropy (an ideal coder of each plane, plain or XORed); deflate on 256-byte planes + headers
    # lands within 5 points of the latter
    u = C.sample(kind, "bf16")
    planes = C.bit_planes(u)
    per_plane = min(_plane_entropy_bits(planes), _plane_entropy_bits(C.xor_planes(planes))) / 16.0
    r = C.measured_ratio(kind, "bf16")
    assert _entropy_bits(u) / 16.0 <= r
    assert per_plane <= r <= per_plane + 0.05
    # sign + 7 mantissa bits are incompressible: at least half the bytes remain
    assert 0.5 < r < 1.0
    if kind == "weights":  # fp16 spends 10 of 16 bits on mantissa: less compressible than bf16
        assert C.measured_ratio(kind, "fp16") > r


def test_ratio_section_rules():
    spec = C.CompressionSpec(kv=True, weights=False, ratio=0.5)
    assert spec.ratio_for("kv") == 0.5 and spec.ratio_for("weights") == 1.0
    with pytest.raises(ConfigError, match="ratio"):
        device(compression={"ratio": 1.5})
    with pytest.raises(ConfigError, match="compression.ratio: expected a number for kv in fp8"):
        C.CompressionSpec().ratio_for("kv", "fp8")
    with pytest.raises(ConfigError, match="compression"):  # compression applies to CXL-PNM only
        device("attacc_hbm3_pim_stack", compression={"ratio": 0.5})


def _prefill_row(dev):
    model = load_model("llama2-7b")
    tr = build_trace(
        model, Scenario(batch_size=1, prompt_len=16, kv_dtype="bf16", weight_dtype="bf16", act_dtype="bf16"), "prefill"
    )
    i = int(np.nonzero(tr["op"] == "mlp_down")[0][0])
    return tr, i


@pytest.mark.parametrize("ratio, overlap", [(0.8, True), (0.5, True), (0.8, False)])
def test_streamed_bytes_time_and_engine_energy_by_hand(ratio, overlap):
    plain = device("cxl_pnm_lpddr5x")
    dev = device(compression={"ratio": ratio, "overlap": overlap})
    tr, i = _prefill_row(dev)
    c = tr.cols
    wb, act = float(c["weight_bytes"][i]), float(c["act_bytes"][i])
    base, cost = plain.cost(tr, [i]), dev.cost(tr, [i])
    assert cost.bytes_by_level["dram_bank"][0] == pytest.approx(wb * ratio + act)
    assert base.bytes_by_level["dram_bank"][0] == pytest.approx(wb + act)
    bw = plain.peak_bandwidth_bytes_per_s
    t_stream, t_engine = (wb * ratio + act) / bw, wb / 2.0e12  # the 2 TB/s engine sees the raw weight bytes
    t_compute = float(c["flops"][i]) / dev.peak_flops
    want = max(t_stream, t_engine, t_compute) if overlap else max(t_stream, t_compute) + t_engine
    assert cost.time_s[0] == pytest.approx(want)
    # at ratio 0.5 the 2 TB/s engine, not the 1.09 TB/s DRAM, bounds the stream: 0.5 / 1.09 < 1 / 2
    if ratio == 0.5 and overlap:
        assert cost.time_s[0] == pytest.approx(max(t_engine, t_compute))
    assert cost.energy_j["compute"][0] == pytest.approx(wb * 1.4e-12)
    assert cost.energy_j["dram_read_write"][0] == pytest.approx(
        base.energy_j["dram_read_write"][0] * (wb * ratio + act) / (wb + act)
    )


def test_decode_gemv_streams_the_stored_bytes():
    plain, dev = device("cxl_pnm_lpddr5x"), device(compression={"ratio": 0.5})
    model = load_model("llama2-7b")
    tr = build_trace(model, Scenario(batch_size=1, prompt_len=256), "decode")
    i = int(np.nonzero(tr["op"] == "mlp_up")[0][0])
    a, b = plain.cost(tr, [i]), dev.cost(tr, [i])
    assert b.bytes_by_level["dram_bank"][0] == pytest.approx(0.5 * a.bytes_by_level["dram_bank"][0])
    # batch-1 GEMV is stream-bound: half the bytes, at most half the time (+ engine bound raw / 2 TB/s)
    assert b.time_s[0] == pytest.approx(max(0.5 * a.time_s[0], a.bytes_by_level["dram_bank"][0] / 2e12), rel=0.02)


def test_capacity_and_link_bytes_in_the_plan():
    from attnsim.hwmodels.system import build_system
    from attnsim.mapper.base import get_policy
    from attnsim.sim.experiment import load_experiment
    from attnsim.workloads.trace import kv_cache_bytes, weight_bytes

    exp = load_experiment(
        "cxl_ndp",
        sets=[
            "hardware.cxl_ndp_lpddr5x.compression.ratio=0.5",
            "hardware.cxl_ndp_lpddr5x.compression.link=true",
            "hardware.cxl_ndp_lpddr5x.compression.weights=false",
            "models.llama2-70b.num_layers=2",
        ],
    )
    system = build_system(exp.systems["cxl_ndp"], exp.tree.hardware, exp.tree.file_of)
    model, sc = exp.models["llama2-70b"], exp.scenarios["b8_bf16"]
    ctx = sc.prompt_lens() + sc.output_len
    mb = {
        "weights": weight_bytes(model, sc.weight_dtype),
        "kv": kv_cache_bytes(model, sc, ctx),
        "kv_per_rank": kv_cache_bytes(model, sc, ctx, tp=8),
    }
    tr = build_trace(model, sc, "prefill", tp=8)
    plan = get_policy("cxl_pnm")(tr, system, mb, system.spec.mapper.options)
    pnm = next(m for m in plan.memory if m.role == "pnm")
    assert pnm.kv_bytes == pytest.approx(0.5 * mb["kv_per_rank"])
    plain = get_policy("cxl_pnm")(
        tr, build_system(exp.systems["cxl_pnm"], exp.tree.hardware, exp.tree.file_of), mb, {"prefill_on_gpu": True}
    )
    assert pnm.weights_bytes == pytest.approx(next(m for m in plain.memory if m.role == "pnm").weights_bytes)
    link = np.asarray(plan.trace["cls"]) == "transfer"
    kv_written = float(np.sum(np.asarray(tr["kv_write_bytes"]) * np.asarray(tr["count"])))
    moved = float(np.sum(np.asarray(plan.trace["comm_bytes"])[link] * np.asarray(plan.trace["count"])[link]))
    assert moved == pytest.approx(0.5 * kv_written)
