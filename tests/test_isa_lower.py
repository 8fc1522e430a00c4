"""GEMV lowering: placement, symmetry and hand-derived command counts for every ISA."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.core.config import ConfigError
from attnsim.isa.base import decode, encode, validate_program
from attnsim.isa.lower import ENGINE_CODES, PU, Org, assign_items, get_partition, lower_attention, lower_fc

HBM3 = Org(pseudo_channels=2, ranks=2, bank_groups=4, banks_per_group=4, rows=16384, columns=32, burst_bytes=32)
GDDR6 = Org(pseudo_channels=1, ranks=1, bank_groups=4, banks_per_group=4, rows=16384, columns=64, burst_bytes=32)
PU16 = PU(softmax_cycles_per_element=0.25)


def mac_commands(low, op="MACAB"):
    """MAC column commands over all channels (records x repeat x multiplicity)."""
    return sum(
        int(np.sum(c["repeat"][c["op"] == ENGINE_CODES[op]])) * int(m) for c, m in zip(low.commands, low.multiplicity)
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=60), st.integers(1, 40), st.integers(1, 4))
def test_assignment_places_every_token_once_and_balances(tokens, channels, split):
    work = assign_items(tokens, channels, split)
    placed = sum(sum(sl) * m for sl, m in work)
    assert placed == sum(tokens)
    assert sum(m for _, m in work) <= channels
    assert sum(len(sl) * m for sl, m in work) == sum(min(split, t) if t < split else split for t in tokens)
    # list-scheduling bound: makespan <= average load + largest slice
    biggest = max(-(-t // split) for t in tokens)
    assert max(sum(sl) for sl, _ in work) <= sum(tokens) / channels + biggest


def test_llama70b_decode_attention_on_640_channels_by_hand():
    # batch 64 x 8 KV heads = 512 items of 4096 tokens, 8 query heads per KV head, FP16
    low = lower_attention(
        "attacc", "score", [4096] * 512, dhead=128, group=8, elem_bytes=2, n_channels=640, org=HBM3, pu=PU16
    )
    assert list(low.multiplicity) == [512] and low.channels_used == 512
    prog = low.programs[0]
    c = prog.counts()
    # tokens per bank slot = 4096 / (2 pCH x 2 ranks x 4 BG) = 256; dhead slice 128 / 4 banks = 32 elems = 2 cols
    # -> 512 columns per bank = 16 rows of 32 columns; 8 query passes per column
    assert c["ACTAB"] == c["PREA"] == 16
    assert mac_commands(low) == 512 * 16 * 32 * 8
    # every MACAB does 16 MACs in each of the 64 banks: exactly the useful MACs of the step
    assert mac_commands(low) * 64 * 16 == 512 * 4096 * 128 * 8 == low.macs
    assert low.pim_bytes == 512 * 4096 * 128 * 2
    validate_program(prog)
    assert decode(prog.isa, encode(prog)) == prog
    ctx = lower_attention(
        "attacc", "context", [4096] * 512, dhead=128, group=8, elem_bytes=2, n_channels=640, org=HBM3, pu=PU16
    )
    assert mac_commands(ctx) == mac_commands(low)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 3000), min_size=1, max_size=12),
    st.sampled_from([64, 128, 256]),
    st.sampled_from([1, 2, 8]),
    st.integers(1, 16),
    st.sampled_from(["attacc", "aim", "fimdram"]),
)
def test_mac_commands_cover_the_work_with_bounded_padding(tokens, dhead, group, channels, isa):
    org = GDDR6 if isa == "aim" else HBM3
    for phase in ("score", "context"):
        low = lower_attention(
            isa, phase, tokens, dhead=dhead, group=group, elem_bytes=2, n_channels=channels, org=org, pu=PU16
        )
        pus = org.banks // 2 if isa == "fimdram" else org.banks
        per_cmd = 16 * pus
        cmds = mac_commands(low)
        if isa == "fimdram":  # CRF kernel: 16 data columns + 1 NOP slot per 17 column commands
            cmds = cmds * 16 // 17
        assert cmds * per_cmd >= low.macs  # never less compute than the GEMVs need
        # padding only from rounding each item up to whole column steps / bank slots
        slots = org.banks
        bound = sum((t + slots) * (dhead + 16 * org.banks_per_group * 4) * group for t in tokens) * 2
        assert cmds * per_cmd <= bound
        for p in low.programs:
            validate_program(p)


def test_token_split_over_channels_conserves_work_and_shortens_the_channel():
    one = lower_attention(
        "attacc",
        "score",
        [4096] * 4,
        dhead=128,
        group=1,
        elem_bytes=2,
        n_channels=16,
        org=HBM3,
        pu=PU16,
        partition=get_partition("attacc_bank", 1),
    )
    four = lower_attention(
        "attacc",
        "score",
        [4096] * 4,
        dhead=128,
        group=1,
        elem_bytes=2,
        n_channels=16,
        org=HBM3,
        pu=PU16,
        partition=get_partition("attacc_bank", 4),
    )
    assert mac_commands(one) == mac_commands(four)
    assert one.channels_used == 4 and four.channels_used == 16
    per_ch = lambda low: max(int(np.sum(c["repeat"][c["op"] == ENGINE_CODES["MACAB"]])) for c in low.commands)
    assert per_ch(four) * 4 == per_ch(one)


def test_bg_and_buffer_partitions():
    bg = lower_attention(
        "attacc",
        "score",
        [4096],
        dhead=128,
        group=1,
        elem_bytes=2,
        n_channels=1,
        org=HBM3,
        pu=PU16,
        partition=get_partition("attacc_bg"),
    )
    # tokens over pCH x rank = 4 slots -> 1024 tokens; dhead over 4 BGs -> 2 columns per token per BG PU
    assert mac_commands(bg, "MACBG") == 2048 * 4
    buf = lower_attention(
        "attacc",
        "score",
        [4096],
        dhead=128,
        group=1,
        elem_bytes=2,
        n_channels=1,
        org=HBM3,
        pu=PU16,
        partition=get_partition("attacc_buffer"),
    )
    rd = buf.commands[0]
    assert int(np.sum(rd["repeat"][rd["op"] == ENGINE_CODES["RD"]])) * 32 == 4096 * 128 * 2


def test_aim_and_cxl_programs_by_hand():
    aim = lower_attention("aim", "score", [4096], dhead=128, group=2, elem_bytes=2, n_channels=1, org=GDDR6, pu=PU16)
    p = aim.programs[0]
    # 4096 tokens / 16 banks = 256 dot products (one token per bank) of 8 columns = 2048 columns; x 2 query
    # passes; each bank's MAC register is re-biased and read out per dot product (WR_BIAS, MAC_ABK, RD_MAC)
    c = p.counts()
    assert c["MAC_ABK"] == 2 * 256 and int(p["opsize"][p.where("MAC_ABK")].sum()) == 2 * 2048
    assert c["RD_MAC"] == c["WR_BIAS"] == 2 * 256 and c["WR_GB"] == 2
    assert p.mnemonics()[-1] == "EOC"
    cxl = lower_attention(
        "cxl_pnm", "context", [4096, 100], dhead=128, group=8, elem_bytes=2, n_channels=1, org=GDDR6, pu=PU16
    )
    q = cxl.programs[0]
    assert q.counts()["GEMV"] == 2 and list(q["trans"][q.where("GEMV")]) == [1, 1]
    assert list(q["vectors"][q.where("GEMV")]) == [8, 8]


def test_fc_gemv_spreads_outputs_over_channels():
    low = lower_fc("attacc", 8192, 8192, 1, elem_bytes=2, n_channels=64, org=HBM3, pu=PU16)
    assert low.channels_used == 64
    assert mac_commands(low) * 64 * 16 == 8192 * 8192


def test_bad_lowering_inputs():
    with pytest.raises(ConfigError):
        lower_attention("attacc", "prefill", [1], dhead=128, group=1, elem_bytes=2, n_channels=1, org=HBM3, pu=PU16)
    with pytest.raises(ConfigError):
        get_partition("attacc_rank")
    with pytest.raises(ConfigError):
        lower_attention("tpu", "score", [1], dhead=128, group=1, elem_bytes=2, n_channels=1, org=HBM3, pu=PU16)
