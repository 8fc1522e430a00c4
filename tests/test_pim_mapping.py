"""PIM mapping search (hwmodels/pim_mapping.py): pinned = the plain lowering, auto = the best candidate,
the merge of split items by hand, all channels busy at batch 1, the mapping in the run document and
timeline, and pins a device cannot run refused."""

import json

import numpy as np
import pytest

from attnsim.core.config import ConfigError, find_config, load_yaml
from attnsim.hwmodels import registry
from attnsim.hwmodels.pim_mapping import ISA_PARTITIONS, cpi_candidates, merge_cost
from attnsim.isa.lower import get_partition, lower_attention
from attnsim.workloads.scenario import Scenario
from attnsim.workloads.trace import build_trace
from attnsim.workloads.zoo import load_model

ATTN = ["attn_score", "softmax", "attn_context"]


def device(name, **over):
    hw = load_yaml(find_config("hardware", name))
    hw.update(over)
    return registry.build(hw, file=name)


@pytest.fixture(scope="module")
def gqa_trace():
    """Llama-3-8B (8 KV heads, 4 query heads each), 2 requests of 301 tokens, TP 1: 16 items."""
    return build_trace(load_model("llama3-8b"), Scenario(batch_size=2, prompt_len=300), "decode")


def attn_rows(tr):
    return np.flatnonzero(np.isin(tr["cls"], ATTN))


def total(dev, tr, rows):
    c = dev.cost(tr, rows)
    return float(np.sum(c.time_s * tr["count"][rows])), c


def test_pinned_mapping_is_the_plain_lowering(gqa_trace):
    """A pinned (partition, channels_per_item) costs exactly the lowering with those values (engine time,
    no search), plus the merge for a split; the first-candidate default is AttAcc's scheme."""
    tr = gqa_trace
    rows = attn_rows(tr)
    for part, cpi in (("attacc_bank", 1), ("attacc_bg", 1), ("attacc_bank", 4)):
        dev = device("attacc_hbm3_pim_stack", partition=part, channels_per_item=cpi)
        c = dev.cost(tr, rows)
        for j, i in enumerate(rows):
            tokens, k, group, eb = dev._items(tr, int(i))
            phase = {"attn_score": "score", "softmax": "softmax", "attn_context": "context"}[str(tr["cls"][i])]
            low = lower_attention(
                "attacc",
                phase,
                tokens,
                dhead=k,
                group=group,
                elem_bytes=eb,
                n_channels=dev.channels,
                org=dev.org,
                pu=dev.pu,
                partition=get_partition(part, cpi),
            )
            t = dev.run(low)[0] + c.mapping[j]["merge_s"]
            assert c.time_s[j] == t
            assert c.mapping[j] == {
                "partition": part,
                "channels_per_item": cpi,
                "channels_used": low.channels_used,
                "merge_s": c.mapping[j]["merge_s"],
            }
            assert (c.mapping[j]["merge_s"] > 0) == (cpi > 1 and phase == "context")


def test_auto_is_the_best_pinned_candidate(gqa_trace):
    """Brute force: every (partition, channels_per_item) candidate pinned; auto's PIM time is their minimum,
    and score, softmax and context of a layer share one channels_per_item (one KV layout)."""
    tr = gqa_trace
    rows = attn_rows(tr)
    auto = device("attacc_hbm3_pim_5stack", partition="auto", channels_per_item="auto")
    t_auto, c = total(auto, tr, rows)
    n_items = len(auto._items(tr, int(rows[0]))[0])
    cands = auto._cpi_candidates(n_items)
    assert cands == [1, 2, 4, 8, 16]  # 16 items on 80 channels; 5 would fill them evenly but cross stacks
    brute = {
        (p, s): total(device("attacc_hbm3_pim_5stack", partition=p, channels_per_item=s), tr, rows)[0]
        for p in ISA_PARTITIONS["attacc"]
        for s in cands
    }
    assert t_auto == pytest.approx(min(brute.values()), rel=1e-12)
    assert all(t_auto <= t * (1 + 1e-12) for t in brute.values())
    assert t_auto < brute[("attacc_bank", 1)]  # 16 of 80 channels busy without a split
    assert len({(m["partition"], m["channels_per_item"]) for m in c.mapping}) == 1


def test_candidates_stop_at_an_even_fill():
    assert cpi_candidates(16, 80, 16) == [1, 2, 4, 5]  # 16 x 5 = 80: one slice per channel
    assert cpi_candidates(2, 32, 32) == [1, 2, 4, 8, 16]  # CENT batch 1, 2 KV heads per device
    assert cpi_candidates(100, 16, 16) == [1, 2, 4]  # 100 x 4 = 400 = 25 per channel
    assert cpi_candidates(3, 1, 1) == [1]
    assert cpi_candidates(16, 80, 16, divides=16) == [1, 2, 4, 8, 16]  # AttAcc: slices inside one stack


def test_two_way_merge_by_hand():
    # item 0: 100 tokens -> 2 slices; item 1: 1 token -> 1 slice (no merge); 8 query heads, dhead 128, fp16
    m = merge_cost([100, 1], 2, group=8, dhead=128, acc_bytes=2, isa="attacc", elems_per_s=1e9, bus_bytes_per_s=1e9)
    assert m.partials == 2 * 8
    assert m.bytes == 16 * (128 + 2) * 2  # o (dhead), m, l per partial and query head
    assert m.elements == 16 * 130  # exp-rescale + add of o and l, and the max
    assert m.bus_bytes == 0.0  # AttAcc: m, l made on the buffer die, o moved by MVSB
    assert m.time_s == pytest.approx(2080 / 1e9)
    a = merge_cost([100, 1], 2, group=8, dhead=128, acc_bytes=2, isa="aim", elems_per_s=1e9, bus_bytes_per_s=1e8)
    assert a.bus_bytes == 16 * 2 * 2  # AiM: m, l leave the channel's AF unit for the controller
    assert a.time_s == pytest.approx(2080 / 1e9 + 64 / 1e8)
    assert (
        merge_cost(
            [100, 1], 1, group=8, dhead=128, acc_bytes=2, isa="attacc", elems_per_s=1e9, bus_bytes_per_s=1e9
        ).time_s
        == 0.0
    )


def test_device_merge_runs_on_the_buffer_die():
    """A 2-way split of llama3-8b's 16 items on one stack: merge = 16 x 2 x 4 x 130 elements at the
    buffer-die rate 670.4 GB/s / 2 B (one stack), on the context row only."""
    tr = build_trace(load_model("llama3-8b"), Scenario(batch_size=2, prompt_len=300), "decode")
    rows = attn_rows(tr)
    dev = device("attacc_hbm3_pim_stack", partition="attacc_bank", channels_per_item=2)
    c = dev.cost(tr, rows)
    ctx = list(tr["cls"][rows]).index("attn_context")
    assert c.mapping[ctx]["merge_s"] == pytest.approx(16 * 2 * 4 * 130 / (670.4e9 / 2))
    assert c.mapping[ctx]["channels_used"] == 16 and dev.channels == 16


def test_batch_one_on_a_32_channel_device_uses_every_channel():
    """CENT-like: Llama-2-7B at TP 16 has 2 KV heads per device; at batch 1 that is 2 items on 32 AiM
    channels. Pinned to one channel per item 2 channels work; auto spreads them over all 32."""
    tr = build_trace(load_model("llama2-7b"), Scenario(batch_size=1, prompt_len=1024), "decode", tp=16)
    rows = attn_rows(tr)
    one = device("cxl_aim_device", channels_per_item=1).cost(tr, rows)
    auto = device("cxl_aim_device").cost(tr, rows)
    assert [m["channels_used"] for m in one.mapping] == [2, 2, 2]
    assert [m["channels_used"] for m in auto.mapping] == [32, 32, 32]
    assert {m["partition"] for m in auto.mapping} == {"aim_bank"}
    assert np.sum(auto.time_s) < np.sum(one.time_s)


def test_mapping_in_run_document_and_timeline():
    from attnsim.sim.experiment import load_experiment
    from attnsim.sim.runner import run_experiment

    exp = load_experiment(
        None,
        [
            "experiment.systems=[cxl_aim]",
            "experiment.models=[llama2-7b]",
            "experiment.baseline=null",
            "experiment.scenarios={s: {batch_size: 1, prompt_len: 1024, output_len: 3}}",
            "models.llama2-7b.num_layers=2",
        ],
    )
    events: list = []
    doc = run_experiment(exp, timeline=events)[0]
    assert doc["status"] == "ok", doc.get("error")
    pm = doc["breakdown"]["decode_step"]["pim_mapping"]
    assert {"attn_score", "attn_context"} <= set(pm)  # (softmax: on the AiM channels or the controller)
    assert pm["attn_context"]["channels_used"] == 32 and pm["attn_context"]["partition"] == "aim_bank"
    assert pm["attn_context"]["merge_s"] > 0 and pm["attn_score"]["merge_s"] == 0
    assert all(type(v) in (str, int, float) for m in pm.values() for v in m.values())  # plain JSON values
    json.dumps(doc, allow_nan=False)
    ctx = [e for e in events if e.get("name") == "attn_context" and e["ph"] == "X" and "pim_mapping" in e["args"]]
    assert len(ctx) == 2 * 2  # 2 decode steps x 2 layers (prefill runs as a roofline: no lowering, no mapping)
    assert all(e["args"]["pim_mapping"]["channels_used"] == 32 for e in ctx)


def test_refused_pins():
    with pytest.raises(ConfigError, match="partition isa attacc can run") as e:
        device("attacc_hbm3_pim_stack", partition="aim_bank")
    assert e.value.key == "partition"
    with pytest.raises(ConfigError, match="partition isa aim can run") as e:
        device("cxl_aim_device", partition="attacc_bg")
    assert e.value.key == "partition"
    with pytest.raises(ConfigError, match="at most 16 .channels per stack") as e:
        device("attacc_hbm3_pim_stack", channels_per_item=32)
    assert e.value.key == "channels_per_item"
    with pytest.raises(ConfigError, match="a divisor of 16") as e:
        device("attacc_hbm3_pim_5stack", channels_per_item=5)
    assert e.value.key == "channels_per_item"
    with pytest.raises(ConfigError, match="at most 1 ") as e:
        device("cxl_pnm_lpddr5x", channels_per_item=2)
    assert e.value.key == "channels_per_item"
    with pytest.raises(ConfigError, match="NeuPIMs places whole requests") as e:
        device("neupims_hbm2_pim", channels_per_item=2)
    assert e.value.key == "channels_per_item"
    with pytest.raises(ConfigError, match="channels_per_item"):
        device("attacc_hbm3_pim_stack", channels_per_item="some")


def test_refused_pin_on_the_command_line(capsys):
    from attnsim.cli import main

    rc = main(
        [
            "run",
            "default",
            "--no-write",
            "--set",
            "experiment.systems=[cxl_aim]",
            "--set",
            "experiment.baseline=null",
            "--set",
            "hardware.cxl_aim_device.partition=attacc_bank",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "partition: expected auto or a partition isa aim can run (aim_bank), got 'attacc_bank'" in err[0]
    )


def test_partition_lower_bound_is_a_bound(gqa_trace):
    """The pruning bound (bytes or MACs / PU peak) never exceeds the simulated time of that partition,
    for attention and for the two smallest FC GEMVs (batch 2: two vectors per weight column)."""
    tr = gqa_trace
    fc = np.flatnonzero(tr["cls"] == "matmul")
    fc = fc[np.argsort(tr["weight_bytes"][fc])[:2]]
    rows = np.concatenate([attn_rows(tr), fc])
    for p in ISA_PARTITIONS["attacc"]:
        dev = device("attacc_hbm3_pim_5stack", partition=p, channels_per_item=1)
        t, _ = total(dev, tr, rows)
        lb = dev._time_lower_bound(tr, rows, list(range(len(rows))), p)
        assert 0 < lb <= t


SEARCH_CASES = [  # (hardware, model, batch, prompt, tp): GQA and MHA, even and uneven fills, two ISAs
    ("attacc_hbm3_pim_5stack", "llama2-70b", 16, 2048, 8),
    ("attacc_hbm3_pim_5stack", "llama3-70b", 4, 8192, 8),
    ("attacc_hbm3_pim_stack", "llama3-8b", 2, 300, 1),
    ("attacc_hbm3_pim_5stack", "llama2-7b", 3, 777, 8),
    ("cxl_aim_device", "llama2-7b", 1, 1024, 16),
]


def _search_case(hw, model, batch, prompt, tp):
    tr = build_trace(load_model(model), Scenario(batch_size=batch, prompt_len=prompt), "decode", tp=tp)
    over = {"channels_per_item": "auto"} | ({"partition": "auto"} if hw.startswith("attacc") else {})
    return tr, attn_rows(tr), over


@pytest.mark.parametrize("case", SEARCH_CASES)
def test_pruned_search_equals_exhaustive(case, monkeypatch):
    """The bound-ordered search (candidates that cannot beat the best simulated time are not lowered) picks
    the mapping and costs of simulating every candidate, with no more lowerings."""
    from attnsim.hwmodels.pim import PIMDevice

    monkeypatch.setenv("ATTNSIM_CACHE_DIR", "off")  # every cost() searches (no step answered by the memo)
    tr, rows, over = _search_case(*case)
    lowered = []
    orig = PIMDevice._lowered_cost
    monkeypatch.setattr(
        PIMDevice, "_lowered_cost", lambda self, *a: lowered.append(self.exhaustive_search) or orig(self, *a)
    )
    fast = device(case[0], **over)
    full = device(case[0], **over)
    full.exhaustive_search = True
    a, b = fast.cost(tr, rows), full.cost(tr, rows)
    assert list(a.time_s) == list(b.time_s) and list(a.mapping) == list(b.mapping)
    assert 0 < lowered.count(False) <= lowered.count(True)


@pytest.mark.parametrize("case", SEARCH_CASES)
def test_channels_per_item_bound_is_a_bound(case):
    """Each candidate's closed-form bound (busiest channel at the PU peak / all-bank row period, the AttAcc
    softmax unit, the merge) never exceeds the simulated time of the layer group pinned to that split."""
    tr, rows, over = _search_case(*case)
    dev = device(case[0], **over)
    js = list(range(len(rows)))
    for pname in dev.partition_candidates:
        for cpi in dev._cpi_candidates(len(dev._items(tr, int(rows[0]))[0])):
            pinned = device(case[0], partition=pname, channels_per_item=cpi)
            t, _ = total(pinned, tr, rows)
            lb = dev._cpi_lower_bound(tr, rows, js, pname, cpi)
            assert 0 < lb <= t, (pname, cpi, lb, t)


def test_printed_mapping_is_the_one_used(capsys):
    """`attnsim run` prints the decode step's PIM mapping (the JSON's breakdown.decode_step.pim_mapping); pinning
    the printed channels_per_item reproduces the run exactly, and it is not AttAcc's 1 here (8 items, 80
    channels: llama2-7b at TP 8 has 4 KV heads per rank, batch 2)."""
    import json as _json

    from attnsim.cli import main
    from attnsim.core.report import mapping_text

    args = [
        "run",
        "default",
        "--no-write",
        "--set",
        "experiment.systems=[attacc_h100]",
        "--set",
        "experiment.baseline=null",
        "--set",
        "experiment.models=[llama2-7b]",
        "--set",
        "scenarios.chat.batch_size=2",
        "--set",
        "scenarios.chat.prompt_len=512",
        "--set",
        "scenarios.chat.output_len=4",
        "--set",
        "hardware.attacc_hbm3_pim_5stack.channels_per_item=auto",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    doc = _json.loads(capsys.readouterr().out)["runs"][0]
    pm = doc["breakdown"]["decode_step"]["pim_mapping"]
    assert f"attacc_h100 (llama2-7b, chat): {mapping_text(pm)}" in text.splitlines()
    cpi = pm["attn_context"]["channels_per_item"]
    assert pm["attn_score"]["channels_per_item"] == cpi != 1
    assert main(args[:-1] + [f"hardware.attacc_hbm3_pim_5stack.channels_per_item={cpi}", "--json"]) == 0
    pinned = _json.loads(capsys.readouterr().out)["runs"][0]
    assert pinned["metrics"]["tpot_s"] == doc["metrics"]["tpot_s"]
    assert pinned["breakdown"]["decode_step"]["pim_mapping"] == pm
