"""Human-readable tables of run documents."""
from __future__ import annotations


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "nan"
        a = abs(v)
        s = f"{v:.3g}" if (a >= 1e4 or a < 1e-2) and a != 0 else f"{v:.3f}".rstrip("0").rstrip(".")
        return s + unit
    return str(v)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def summary_table(docs: list[dict]) -> str:
    header = ["system", "model", "scenario", "batch", "TTFT ms", "TPOT ms", "tok/s", "J/token", "mem used", "vs base thr", "vs base J"]
    rows = []
    for d in docs:
        m = d.get("metrics") or {}
        vb = d.get("vs_baseline", {})
        mem = max((x["used_fraction"] for x in (m.get("memory") or {}).values()), default=None)
        if d["status"] != "ok":
            rows.append([d["system"], d["model"], d["scenario"]["name"], d["scenario"].get("batch_size", ""),
                         d["status"], "", "", "", "", "", ""])
            continue
        rows.append([d["system"], d["model"], d["scenario"]["name"], d["scenario"].get("batch_size", ""),
                     _fmt(m["ttft_s"] * 1e3), _fmt(m["tpot_s"] * 1e3), _fmt(m["tokens_per_s"]),
                     _fmt(m["energy_per_token_j"]), f"{mem:.0%}" if mem is not None else "-",
                     _fmt(vb.get("throughput_ratio"), "x") if "throughput_ratio" in vb else "-",
                     _fmt(vb.get("energy_efficiency_ratio"), "x") if "energy_efficiency_ratio" in vb else "-"])
    if any("accuracy_proxy" in d.get("metrics", {}) for d in docs):
        header += ["silent err/tok", "acc. proxy", "SLO"]
        for r, d in zip(rows, docs):
            m = d.get("metrics") or {}
            if "accuracy_proxy" in m:
                r += [_fmt(m["silent_errors_per_token"]), _fmt(m["accuracy_proxy"]), "met" if m["slo_met"] else "BROKEN"]
            else:
                r += ["-", "-", "-"]
    out = table(rows, header)
    notes = [f"  {d['system']} / {d['model']} / {d['scenario']['name']}: {d['error']}" for d in docs if d.get("error")]
    notes_ = list(dict.fromkeys(f"  {d['model']} / {d['scenario']['name']}: {n}" for d in docs for n in d.get("notes", ())))
    return out + ("\n\nnot run:\n" + "\n".join(notes) if notes else "") + \
        ("\n\nnotes:\n" + "\n".join(notes_) if notes_ else "")


def breakdown_table(doc: dict, phase: str = "decode_step", top: int = 12) -> str:
    bd = doc.get("breakdown", {}).get(phase)
    if not bd:
        return ""
    t = bd["time_s"] or 1.0
    e = bd["energy_j"] or 1.0
    ops = sorted(bd["time_s_by_op"], key=lambda k: -bd["time_s_by_op"][k])[:top]
    rows = [[op, _fmt(bd["time_s_by_op"][op] * 1e6), f"{bd['time_s_by_op'][op] / t:.1%}",
             _fmt(bd["energy_j_by_op"].get(op, 0.0) * 1e3), f"{bd['energy_j_by_op'].get(op, 0.0) / e:.1%}"] for op in ops]
    head = f"{doc['system']} / {doc['model']} / {doc['scenario']['name']}: {phase} ({_fmt(t * 1e3)} ms, {_fmt(e)} J)"
    comp = ", ".join(f"{k} {v / e:.0%}" for k, v in sorted(bd["energy_j_by_component"].items(), key=lambda kv: -kv[1]) if v > 0)
    pm = bd.get("pim_mapping") or {}  # hwmodels/pim_mapping.py: partition x channels_per_item, channels used
    pim = "; ".join(f"{op} {m['partition']} x{m['channels_per_item']} on {m['channels_used']} ch"
                    + (f" (merge {_fmt(m['merge_s'] * 1e6)} us)" if m["merge_s"] else "") for op, m in pm.items())
    return head + "\n" + table(rows, ["op", "time us", "time %", "dyn. energy mJ", "energy %"]) + \
        "\nenergy by component: " + comp + ("\npim mapping: " + pim if pim else "")
