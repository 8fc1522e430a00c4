"""Human-readable tables of run documents, and the one table formatter every CLI command prints with.

Number rule (``fmt_num``): 4 significant digits in plain notation for 0.001 <= |v| < 1e6, else
scientific (``1.235e+06``); integers as they are; units live in the column headers, never in cells
(ratios carry ``x``, shares ``%``). ``table`` left-aligns text columns and right-aligns columns whose
cells are all numbers (or empty), so the same kind of value looks the same in every command.
"""

from __future__ import annotations

import math
import re

_NUMERIC = re.compile(r"^[-+±]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(x|%| %)?$")


def fmt_num(v, unit: str = "", digits: int = 4) -> str:
    """One number as text: ``None`` -> ``-``, non-finite -> ``nan``/``inf``, else ``digits`` significant
    digits (plain notation between 1e-3 and 1e6, scientific outside), then ``unit`` (e.g. ``x``)."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v}{unit}"
    if not math.isfinite(v):
        return ("nan" if v != v else ("inf" if v > 0 else "-inf")) + unit
    a = abs(v)
    if a == 0:
        return "0" + unit
    if 1e-3 <= a < 1e6:
        decimals = max(0, digits - 1 - math.floor(math.log10(a)))
        s = f"{v:.{decimals}f}"
        if len(s.replace("-", "").replace(".", "").lstrip("0")) > digits and decimals > 0:  # 9.9996 -> 10.000
            s = f"{v:.{decimals - 1}f}"
        return s + unit
    return f"{v:.{digits - 1}e}" + unit


def fmt_pct(fraction, digits: int = 1) -> str:
    """A share as a percentage (``0.2207`` -> ``22.1%``); None -> ``-``."""
    return "-" if fraction is None else f"{100 * fraction:.{digits}f}%"


_fmt = fmt_num  # old name


def _is_numeric(cell) -> bool:
    s = str(cell).strip()
    return s in ("", "-", "nan", "inf", "-inf") or bool(_NUMERIC.match(s))


def table(rows: list[list], header: list[str], numeric: int | None = None) -> str:
    """Aligned text table: a header, a rule, one line per row. Columns whose cells are all numbers are
    right-aligned (``numeric=i``: also every column from index i on), the others left-aligned."""
    rows = [[str(x) for x in r] for r in rows]
    header = [str(h) for h in header]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    right = [
        (numeric is not None and i >= numeric) or (bool(rows) and all(_is_numeric(r[i]) for r in rows))
        for i in range(len(header))
    ]
    line = lambda r: "  ".join(x.rjust(w) if rj else x.ljust(w) for x, w, rj in zip(r, widths, right)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _times(v, k: float):
    """``v * k``, or None for an undefined metric (the TPOT of one-token outputs is null)."""
    return None if v is None else v * k


def summary_table(docs: list[dict]) -> str:
    header = [
        "system",
        "model",
        "scenario",
        "batch",
        "TTFT ms",
        "TPOT ms",
        "tok/s",
        "J/token",
        "mem used",
        "vs base thr",
        "vs base J",
    ]
    rows = []
    for d in docs:
        m = d.get("metrics") or {}
        vb = d.get("vs_baseline", {})
        mem = max((x["used_fraction"] for x in (m.get("memory") or {}).values()), default=None)
        if d["status"] != "ok":
            rows.append(
                [
                    d["system"],
                    d["model"],
                    d["scenario"]["name"],
                    d["scenario"].get("batch_size", ""),
                    d["status"],
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
            continue
        rows.append(
            [
                d["system"],
                d["model"],
                d["scenario"]["name"],
                d["scenario"].get("batch_size", ""),
                fmt_num(m["ttft_s"] * 1e3),
                fmt_num(_times(m["tpot_s"], 1e3)),
                fmt_num(m["tokens_per_s"]),
                fmt_num(m["energy_per_token_j"]),
                f"{mem:.0%}" if mem is not None else "-",
                fmt_num(vb.get("throughput_ratio"), "x") if "throughput_ratio" in vb else "-",
                fmt_num(vb.get("energy_efficiency_ratio"), "x") if "energy_efficiency_ratio" in vb else "-",
            ]
        )
    if any("accuracy_proxy" in d.get("metrics", {}) for d in docs):
        header += ["silent err/tok", "acc. proxy", "SLO"]
        for r, d in zip(rows, docs):
            m = d.get("metrics") or {}
            if "accuracy_proxy" in m:
                r += [
                    fmt_num(m["silent_errors_per_token"]),
                    fmt_num(m["accuracy_proxy"]),
                    "met" if m["slo_met"] else "BROKEN",
                ]
            else:
                r += ["-", "-", "-"]
    out = table(rows, header)
    notes = [f"  {d['system']} / {d['model']} / {d['scenario']['name']}: {d['error']}" for d in docs if d.get("error")]
    notes_ = list(
        dict.fromkeys(f"  {d['model']} / {d['scenario']['name']}: {n}" for d in docs for n in d.get("notes", ()))
    )
    return (
        out
        + ("\n\nnot run:\n" + "\n".join(notes) if notes else "")
        + ("\n\nnotes:\n" + "\n".join(notes_) if notes_ else "")
    )


def mapping_text(pm: dict) -> str:
    """One line of a breakdown's ``pim_mapping`` (hwmodels/pim_mapping.summarize): per op its partition x
    channels_per_item on the channels used, and the merge time of split items."""
    return "; ".join(
        f"{op} {m['partition']} x{m['channels_per_item']} on {m['channels_used']} ch"
        + (f" (merge {fmt_num(m['merge_s'] * 1e6)} us)" if m["merge_s"] else "")
        for op, m in pm.items()
    )


def mapping_lines(docs: list[dict]) -> list[str]:
    """The PIM mapping each run's decode step used (partition x channels_per_item: a device's pinned values
    or what its ``auto`` search chose), one line per run that has PIM/PNM-lowered rows."""
    out = []
    for d in docs:
        pm = (d.get("breakdown", {}).get("decode_step") or {}).get("pim_mapping") if d.get("status") == "ok" else None
        if pm:
            out.append(f"{d['system']} ({d['model']}, {d['scenario']['name']}): {mapping_text(pm)}")
    return out


def breakdown_table(doc: dict, phase: str = "decode_step", top: int = 12) -> str:
    bd = doc.get("breakdown", {}).get(phase)
    if not bd:
        return ""
    t = bd["time_s"] or 1.0
    e = bd["energy_j"] or 1.0
    ops = sorted(bd["time_s_by_op"], key=lambda k: -bd["time_s_by_op"][k])[:top]
    rows = [
        [
            op,
            fmt_num(bd["time_s_by_op"][op] * 1e6),
            fmt_pct(bd["time_s_by_op"][op] / t),
            fmt_num(bd["energy_j_by_op"].get(op, 0.0) * 1e3),
            fmt_pct(bd["energy_j_by_op"].get(op, 0.0) / e),
        ]
        for op in ops
    ]
    head = (
        f"{doc['system']} / {doc['model']} / {doc['scenario']['name']}: {phase} ({fmt_num(t * 1e3)} ms, {fmt_num(e)} J)"
    )
    comp = ", ".join(
        f"{k} {v / e:.0%}" for k, v in sorted(bd["energy_j_by_component"].items(), key=lambda kv: -kv[1]) if v > 0
    )
    pim = mapping_text(bd.get("pim_mapping") or {})  # hwmodels/pim_mapping.py
    return (
        head
        + "\n"
        + table(rows, ["op", "time us", "time %", "dyn. energy mJ", "energy %"])
        + "\nenergy by component: "
        + comp
        + ("\npim mapping: " + pim if pim else "")
    )


def reproduction_lines(ends: list[dict], defaults: bool = True) -> list[str]:
    """One line per reproduction row a run answers (attnsim.studies.reproduce.run_ends): the artefact's number beside
    this run's value, which is attnsim's defaults unless the run had ``--set`` overrides (``defaults=False``)."""
    what = "attnsim defaults" if defaults else "attnsim with --set"
    return [
        f"{e['row']}: artefact {fmt_num(e['reference'])}; {what} {fmt_num(e['value'])} "
        f"({e['explain']} explains the gap)"
        for e in ends
    ]


def paper_claim_lines(claims: list[dict]) -> list[str]:
    """One line per ``paper:`` headline of a reproduction folder (attnsim.studies.reproduce.run_paper_claims)."""
    return [f"{c['reproduction']} paper (not compared): {c['claim']}: {fmt_num(c['value'])}" for c in claims]


# ------------------------------------------------------------------------------------------------
# "what differs and why": a few lines per run derived from its breakdowns against the baseline's

ATTENTION_OPS = ("attn_score", "softmax", "attn_context")  # the decode GEMVs PIM/PNM systems move


def _op_groups(ops) -> dict[str, tuple[str, ...]]:
    """Op name -> group: the attention core is one group (its three ops move together), every other op
    is its own group."""
    att = tuple(o for o in ATTENTION_OPS if o in ops)
    groups = {"attention": att} if att else {}
    groups.update({o: (o,) for o in ops if o not in ATTENTION_OPS})
    return groups


def _where(bd: dict, ops: tuple[str, ...]) -> str:
    """' (in memory)' when every op of the group has PIM/PNM-mapped rows (hwmodels/pim_mapping.py)."""
    pm = bd.get("pim_mapping") or {}
    return " (in memory)" if ops and all(o in pm for o in ops) else ""


def _ms_list(d: dict) -> str:
    """'gpu 9.418 ms, link 5.047 ms' for a {name: seconds} dict, largest first (zeros left out)."""
    return ", ".join(f"{k} {fmt_num(v * 1e3)} ms" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v > 0)


_BUFFER_LEVELS = ("pim_buffer", "sram", "link")  # bytes_by_device levels that are not main memory


def _faster(speed: float) -> str:
    """'1.224x faster' / '2.871x slower' from a time ratio baseline / run."""
    if speed >= 1:
        return f"{fmt_num(speed)}x faster"
    return f"{fmt_num(1 / speed)}x slower" if speed > 0 else "no time"


def _bandwidth(doc: dict) -> str:
    """'gpu hbm 1321 of 3350 GB/s (39.4%)' for the device holding the most decode time (per device)."""
    by_dev = doc["breakdown"]["decode_step"]["time_s_by_device"]
    roles = [r for r in sorted(by_dev, key=lambda r: -by_dev[r]) if not r.startswith("link")]
    bw = (doc.get("metrics") or {}).get("bandwidth") or {}
    for role in roles[:1]:
        for key, b in bw.items():
            r, level = key.split(":", 1)
            if r == role and level not in _BUFFER_LEVELS:
                return (
                    f"{role} {level} {fmt_num(b['achieved_gbps'])} of {fmt_num(b['peak_gbps'])} GB/s "
                    f"({fmt_pct(b['utilization'])})"
                )
    return ""


def _step_lines(doc: dict) -> list[str]:
    """Where one decode step's time goes: by device, by bound type, and the busiest device's memory bandwidth."""
    bd = doc["breakdown"]["decode_step"]
    out = [f"by device: {_ms_list(bd['time_s_by_device'])}"]
    if bd.get("time_s_by_bound"):
        out[0] += f"; by bound: {_ms_list(bd['time_s_by_bound'])}"
    bw = _bandwidth(doc)
    if bw:
        out.append(f"memory bandwidth: {bw}")
    return out


def differ_lines(docs: list[dict], top: int = 3) -> list[str]:
    """What differs between each run and its baseline (same model and scenario), and why: the decode
    step and TTFT, the op groups whose decode time changed most (``attention`` = attn_score + softmax +
    attn_context; ``(in memory)``: the group has PIM/PNM rows),
    where the step's time goes (by device, by the device models' bound type) and the busiest device's
    achieved main-memory bandwidth. Empty without a baseline. Every number printed is a value of the
    run documents (times in ms) or a ratio of two of them."""
    by_key = {(d["system"], d["model"], d["scenario"]["name"]): d for d in docs if d["status"] == "ok"}
    lines, shown = [], set()
    for d in docs:
        vb = d.get("vs_baseline") or {}
        base = by_key.get((vb.get("baseline"), d["model"], d["scenario"]["name"]))
        if d["status"] != "ok" or base is None or base is d:
            continue
        if id(base) not in shown:
            shown.add(id(base))
            lines.append(
                f"{base['system']} (baseline; {base['model']}, {base['scenario']['name']}): decode step "
                f"{fmt_num(base['breakdown']['decode_step']['time_s'] * 1e3)} ms, TTFT "
                f"{fmt_num(base['metrics']['ttft_s'] * 1e3)} ms"
            )
            lines += ["  " + x for x in _step_lines(base)]
        bd, bb = d["breakdown"]["decode_step"], base["breakdown"]["decode_step"]
        t, tb = bd["time_s"], bb["time_s"]
        lines.append(
            f"{d['system']} vs {base['system']}: decode step {fmt_num(t * 1e3)} vs {fmt_num(tb * 1e3)} ms "
            f"({_faster(tb / t if t > 0 else 0.0)}), TTFT {fmt_num(d['metrics']['ttft_s'] * 1e3)} vs "
            f"{fmt_num(base['metrics']['ttft_s'] * 1e3)} ms, {fmt_num(d['metrics']['energy_per_token_j'])} vs "
            f"{fmt_num(base['metrics']['energy_per_token_j'])} J/token"
        )
        ops = list(dict.fromkeys(list(bd["time_s_by_op"]) + list(bb["time_s_by_op"])))
        diffs = []
        for name, group in _op_groups(ops).items():
            a = sum(bd["time_s_by_op"].get(o, 0.0) for o in group)
            b = sum(bb["time_s_by_op"].get(o, 0.0) for o in group)
            diffs.append((abs(a - b), name, group, a, b))
        diffs.sort(key=lambda x: -x[0])
        changes = [
            f"{name}{_where(bd, group)} {fmt_num(a * 1e3)} vs {fmt_num(b * 1e3)} ms"
            for dd, name, group, a, b in diffs[:top]
            if dd > 0
        ]
        if changes:
            lines.append("  largest changes: " + "; ".join(changes))
        lines += ["  " + x for x in _step_lines(d)]
        if d.get("verdict_flips"):
            lines.append("  " + verdict_line(d))
    return lines


def _span(r: dict) -> str:
    """'hardware.x.key in [low, high] (ratio at low x-ratio at high x)' of a verdict_flips row; a categorical
    choice: 'hardware.x.key = alternative (ratio x), ...'."""
    if r.get("choice"):
        alts = ", ".join(
            f"{_choice_text(a)} ({fmt_num(q, 'x')})" for a, q in zip(r["alternatives"], r["ratio_alternatives"])
        )
        return f"{r['parameter']} = {alts}"
    return (
        f"{r['parameter']} in [{r['low']:g}, {r['high']:g}] "
        f"({fmt_num(r['ratio_low'], 'x')}-{fmt_num(r['ratio_high'], 'x')})"
    )


def _choice_text(v) -> str:
    """A choice's alternative as ``--set`` takes it (YAML flow: ``null``, ``{policy: gpu_only}``)."""
    import yaml

    return (
        v
        if isinstance(v, str)
        else yaml.safe_dump(v, default_flow_style=True, sort_keys=False, width=1 << 16).removesuffix("...\n").strip()
    )


def verdict_line(doc: dict) -> str:
    """The run's verdict against its baseline and what would flip it (the ``verdict_flips`` section,
    attnsim.studies.verdict): the headline ratio, how many assumed parameters leave it on its side of 1.0 and within
    10 %, which flip it across 1.0 and which move it by more than 10 % within their ranges."""
    s = doc["verdict_flips"]
    rows, n = s["parameters"], s["parameters_checked"]
    head = (
        f"verdict: {doc['system']} {_faster(s['ratio_base'])} than {s['baseline']} "
        f"(throughput ratio {fmt_num(s['ratio_base'], 'x')})"
    )
    if not n:
        return head + "; no assumed parameter (ranges: or choices: entry) in its or the baseline's hardware or system"
    flips = [r for r in rows if r["flips"]]
    moves = [r for r in rows if r["moves_over_10pct"] and not r["flips"]]
    robust = n - len(flips) - len(moves)
    parts = [
        head,
        f"robust to {robust} assumed parameters" if robust == n else f"robust to {robust} of {n} assumed parameters",
    ]
    if flips:
        parts.append("flips with " + ", ".join(_span(r) for r in flips))
    if moves:
        parts.append("moves >10 % with " + ", ".join(_span(r) for r in moves))
    failed = [
        f"{r['parameter']} at {end}"
        for r in rows
        if not r.get("choice")
        for end in ("low", "high")
        if r[f"ratio_{end}"] is None
    ]
    failed += [
        f"{r['parameter']} = {a}"
        for r in rows
        if r.get("choice")
        for a, q in zip(r["alternatives"], r["ratio_alternatives"])
        if q is None
    ]
    if failed:
        parts.append("does not complete with " + ", ".join(failed))
    return "; ".join(parts)
