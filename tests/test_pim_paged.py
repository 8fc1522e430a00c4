"""Paged KV on PIM: small blocks break row-buffer locality in the banks, simulated by the DRAM engine."""

import numpy as np
import pytest

from attnsim.core.config import find_config, load_yaml
from attnsim.hwmodels.registry import build
from attnsim.sim.experiment import GenerationSpec
from attnsim.sim.runner import simulate_generation
from attnsim.studies.serve.run import quick_pool
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model


def _attn_cost(block_tokens):
    m = load_model("gpt3-175b")
    tr = build_trace(m, Scenario(batch_size=16), "decode", tp=8, context_lens=np.full(16, 2112))
    rows = np.nonzero(np.isin(tr["cls"], ["attn_score", "attn_context"]))[0]
    hw = load_yaml(find_config("hardware", "attacc_hbm3_pim_5stack"))
    hw["kv_block_tokens"] = block_tokens
    return build(hw).cost(tr, rows)


def test_small_blocks_cost_extra_activations_large_blocks_equal_contiguous():
    cont, b16, b64, b256 = (_attn_cost(b) for b in (0, 16, 64, 256))
    # 16 tokens over pCH x rank x BG = 16 slots: 1 token x 2 columns per bank per block -> 1 of 32
    # columns of a row used per ACTAB (vs whole rows contiguous): many more row cycles
    assert b16.energy_j["dram_activate"].sum() > 10 * cont.energy_j["dram_activate"].sum()
    assert b16.time_s.sum() > 3 * cont.time_s.sum()
    assert cont.time_s.sum() < b64.time_s.sum() < b16.time_s.sum()
    # a 256-token block fills whole rows (16 tokens x 2 columns per bank = 32 columns): no penalty
    assert b256.time_s.sum() == pytest.approx(cont.time_s.sum(), rel=1e-12)
    # the useful work is the same
    assert b16.flops.sum() == cont.flops.sum()


@pytest.mark.parametrize(
    "layout, block, slower", [("contiguous", 16, False), ("paged", 256, False), ("paged", 16, True)]
)
def test_serving_layout_reaches_the_pim_cost(layout, block, slower):
    scen = {"prompt_len": 1024, "output_len": 4, "batch_size": 1}
    pool, _, _ = quick_pool(
        system="attacc", model="gpt3-175b", scenario=scen, serving={"kv": {"layout": layout, "block_tokens": block}}
    )
    ref_pool, _, _ = quick_pool(
        system="attacc", model="gpt3-175b", scenario=scen, serving={"kv": {"layout": "contiguous"}}
    )
    spec = GenerationSpec(mode="exact")
    t = simulate_generation(pool.system, pool.model, pool.sc, spec)["breakdown"]["decode_step"]["time_s_by_device"][
        "pim"
    ]
    t0 = simulate_generation(ref_pool.system, ref_pool.model, ref_pool.sc, spec)["breakdown"]["decode_step"][
        "time_s_by_device"
    ]["pim"]
    assert (t > 1.5 * t0) if slower else (t == pytest.approx(t0, rel=1e-12))
