"""Random legal command streams for the DRAM differential tests (shared by tests/test_dram_*.py)."""

from attnsim.hwmodels.dram.engine import Op, make_cmds

OPS_PLAIN = [Op.ACT, Op.PRE, Op.RD, Op.WR, Op.RD, Op.WR, Op.PREA, Op.REF, Op.REFPB, Op.BARRIER]
OPS_PIM = [Op.ACTAB, Op.MACAB, Op.MACAB, Op.MACSB, Op.ACTBG, Op.MACBG, Op.BUF, Op.FIX, Op.MODE, Op.PREA, Op.RD]


def random_stream(rng, spec, n, pim=False, channels=1, rows=3, max_rep=5, max_gap=300):
    o = spec.org
    c = make_cmds(n)
    ops = OPS_PLAIN + (OPS_PIM if pim else [])
    arrival = 0
    for i in range(n):
        op = ops[rng.integers(len(ops))]
        c["op"][i] = op
        c["ch"][i] = rng.integers(channels)
        single = op in (Op.ACT, Op.PRE, Op.RD, Op.WR, Op.MACSB, Op.REFPB)
        c["pch"][i] = rng.integers(o.pseudo_channels) if single or op == Op.BUF or rng.random() < 0.5 else -1
        c["rank"][i] = rng.integers(o.ranks) if single or rng.random() < 0.5 else -1
        if op in (Op.ACTBG, Op.MACBG):
            c["bg"][i] = rng.integers(o.bank_groups)
        elif single or rng.random() < 0.3:
            c["bg"][i] = rng.integers(o.bank_groups)
        if single:
            c["bank"][i] = rng.integers(o.banks_per_group)
        if op in (Op.ACTAB, Op.MACAB, Op.PREA) and c["bg"][i] >= 0 and rng.random() < 0.5:
            c["bank"][i] = rng.integers(o.banks_per_group)
        c["row"][i] = rng.integers(rows)
        c["repeat"][i] = rng.integers(1, max_rep + 1)
        c["flags"][i] = int(rng.random() < 0.3)
        c["cycles"][i] = rng.integers(0, 50)
        if rng.random() < 0.2:
            arrival += int(rng.integers(0, max_gap))
            c["arrival"][i] = arrival
    return c
