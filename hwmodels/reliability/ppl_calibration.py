"""Per-model KV error -> perplexity calibration (configs/calibration/kv_ppl_models.yaml).

The file holds entries, one per measured model (published KV-quantization perplexities on real LLMs,
KVQuant Table 18; the toy char-level model of :mod:`perplexity`, labelled as a toy). :func:`resolve`
picks the entry for a plan's model -- exact model, then family, and only when the plan's context is
within the entry's measured sequence length -- or refuses (ConfigError) unless extrapolation is allowed;
:func:`entry_fit` turns an entry into the slopes of ``ln(1 + dPPL) = s_quant e_quant + s_bit e_bit``
(perplexity.ppl_increase / error_weights) in the planner's proxy space. The file's header comment states
the rules; docs/guide/reliability.md "Reliability-aware tiering end to end" the table with sources.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from attnsim.core.config import ConfigError, display_path, load_yaml

_ENTRY_KEYS = {
    "id",
    "toy",
    "model",
    "measurement",
    "source",
    "models",
    "families",
    "context_tokens",
    "quantization",
    "bit_errors",
    "other_published",
}


def default_path() -> Path:
    from attnsim.hwmodels.reliability.perplexity import calibration_path

    return calibration_path().parent / "kv_ppl_models.yaml"


def family_of(model: str) -> str:
    """A model name without its trailing size: ``llama3-70b`` -> ``llama3``, ``mixtral-8x7b`` -> ``mixtral``,
    ``llama3.1-405b`` -> ``llama3.1``; a name without a size is its own family."""
    return re.sub(r"-(\d+x)?\d+(\.\d+)?[bm]$", "", model.lower())


def _bad(file, key, expected, got):
    raise ConfigError(f"expected {expected}, got {got!r}", file=file, key=key)


def load_table(path=None) -> dict:
    """The calibration table, validated (one ConfigError naming the file and key). A single-curve file
    (bench/calibrate_perplexity.py output: keys ``model`` and ``fit``) is read as a table of one entry that
    covers no model (``--allow-uncalibrated`` extrapolates from it)."""
    from attnsim.hwmodels.reliability.formats import FORMATS

    p = Path(default_path() if path is None else path)
    name = display_path(p)
    doc = load_yaml(p)
    if "entries" not in doc and "fit" in doc and "model" in doc:
        entry = {
            "id": p.stem,
            "toy": False,
            "model": str(doc["model"]),
            "measurement": "single measured curve",
            "source": name,
            "models": [],
            "families": [],
            "context_tokens": 0,
            "quantization": {"from_file": p.name},
            "bit_errors": {"from_file": p.name},
        }
        return {"file": name, "dir": p.parent, "fallback": entry["id"], "entries": [entry]}
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        _bad(
            name,
            "entries",
            "a list of calibration entries (or a single curve with keys model, fit)",
            sorted(map(str, doc)),
        )
    ids, fams = set(), {}
    for i, e in enumerate(entries):
        k = f"entries[{i}]"
        if not isinstance(e, dict):
            _bad(name, k, "a mapping", e)
        unknown = set(e) - _ENTRY_KEYS
        if unknown:
            _bad(
                name,
                f"{k}.{sorted(unknown)[0]}",
                f"one of the keys {', '.join(sorted(_ENTRY_KEYS))}",
                sorted(unknown)[0],
            )
        for key in ("id", "model", "measurement", "source"):
            if not isinstance(e.get(key), str) or not e[key]:
                _bad(name, f"{k}.{key}", "a non-empty string", e.get(key))
        if e["id"] in ids:
            _bad(name, f"{k}.id", "an id used once", e["id"])
        ids.add(e["id"])
        for key in ("models", "families"):
            if not isinstance(e.get(key), list) or not all(isinstance(m, str) for m in e[key]):
                _bad(name, f"{k}.{key}", "a list of names", e.get(key))
        for f in e["families"]:
            if f in fams:
                _bad(name, f"{k}.families", f"a family claimed by one entry ({f} is in {fams[f]})", f)
            fams[f] = e["id"]
        if (
            not isinstance(e.get("context_tokens"), int)
            or isinstance(e["context_tokens"], bool)
            or e["context_tokens"] <= 0
        ):
            _bad(
                name,
                f"{k}.context_tokens",
                "a positive integer (the measured sequence length)",
                e.get("context_tokens"),
            )
        q = e.get("quantization")
        if not isinstance(q, dict) or not (("from_file" in q) ^ ("points" in q)):
            _bad(name, f"{k}.quantization", "a mapping with from_file or points", q)
        for j, pt in enumerate(q.get("points", [])):
            for key in ("ppl_base", "ppl"):
                v = pt.get(key) if isinstance(pt, dict) else None
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
                    _bad(name, f"{k}.quantization.points[{j}].{key}", "a perplexity > 0", v)
            if pt.get("format") not in FORMATS:
                _bad(name, f"{k}.quantization.points[{j}].format", f"one of {', '.join(FORMATS)}", pt.get("format"))
        b = e.get("bit_errors")
        if not isinstance(b, dict) or len(b) != 1 or not set(b) <= {"from", "from_file"}:
            _bad(name, f"{k}.bit_errors", "a mapping with one of from (an entry id), from_file", b)
    for i, e in enumerate(entries):
        src = e["bit_errors"].get("from")
        if src is not None and (src not in ids or src == e["id"]):
            _bad(name, f"entries[{i}].bit_errors.from", f"another entry's id ({', '.join(sorted(ids))})", src)
    fb = doc.get("fallback")
    if fb not in ids:
        _bad(name, "fallback", f"an entry id ({', '.join(sorted(ids))})", fb)
    return {"file": name, "dir": p.parent, "fallback": fb, "entries": entries}


def _entry(table: dict, entry_id: str) -> dict:
    return next(e for e in table["entries"] if e["id"] == entry_id)


def _curve(table: dict, entry: dict, part: str) -> dict:
    from attnsim.hwmodels.reliability.perplexity import load_calibration

    return load_calibration(table["dir"] / entry[part]["from_file"])["fit"]


def entry_fit(table: dict, entry: dict, group: int = 32) -> dict:
    """Slopes of an entry (see the module docstring and the file's header). Points: y = ln(ppl / ppl_base),
    e = accuracy.quant_error(format, group); s_quant = sum(e y) / sum(e^2), s_quant_upper = max(y / e)."""
    from attnsim.hwmodels.reliability.accuracy import quant_error

    q = entry["quantization"]
    fit = {}
    if "from_file" in q:
        c = _curve(table, entry, "quantization")
        fit.update(s_quant=float(c["s_quant"]), s_quant_upper=float(c["s_quant_upper"]))
    else:
        pts = [(quant_error(p["format"], group), math.log(p["ppl"] / p["ppl_base"])) for p in q["points"]]
        fit.update(
            s_quant=sum(e * y for e, y in pts) / sum(e * e for e, _ in pts),
            s_quant_upper=max(y / e for e, y in pts),
            quant_points=[
                {"format": p["format"], "e_quant": e, "ln_ppl_ratio": y} for p, (e, y) in zip(q["points"], pts)
            ],
        )
        fit["s_quant_upper"] = max(fit["s_quant_upper"], fit["s_quant"])
    b = entry["bit_errors"]
    if "from_file" in b:
        c = _curve(table, entry, "bit_errors")
        fit.update(s_bit=float(c["s_bit"]), s_bit_upper=float(c["s_bit_upper"]))
    else:
        src = entry_fit(table, _entry(table, b["from"]), group)
        fit.update(s_bit=src["s_bit"], s_bit_upper=src["s_bit_upper"])
    return fit


def _label(e: dict) -> str:
    return f"{e['model']} ({e['source']})"


def covered_models(table: dict) -> str:
    """The models and families the table covers, with their context limits (for the refusal)."""
    by_ctx: dict = {}
    for e in table["entries"]:
        by_ctx.setdefault(e["context_tokens"], []).extend(e["models"] + [f + "-*" for f in e["families"]])
    parts = [f"{', '.join(names)} (<= {ctx} tokens)" for ctx, names in sorted(by_ctx.items()) if names]
    return "; ".join(parts) or "none"


def resolve(
    table: dict,
    model: str,
    context_tokens: int,
    *,
    allow_uncalibrated: bool = False,
    group: int = 32,
    flag: str = "--max-ppl-increase",
) -> dict:
    """The calibration a plan of ``model`` at ``context_tokens`` uses: its entry, fit and provenance.
    Not covered (see the file's header): ConfigError naming the model and the covered models, unless
    ``allow_uncalibrated`` (then extrapolated, from the model's / family's entry, else the fallback)."""
    fam = family_of(model)
    match = next((e for e in table["entries"] if model in e["models"]), None)
    how = "model"
    if match is None:
        match = next((e for e in table["entries"] if fam in e["families"]), None)
        how = "family"
    covered = match is not None and context_tokens <= match["context_tokens"]
    if not covered and not allow_uncalibrated:
        why = (
            f"{model} at {context_tokens} tokens is beyond its entry {match['id']} (measured at "
            f"{match['context_tokens']} tokens)"
            if match is not None
            else f"no entry covers {model} (family {fam})"
        )
        raise ConfigError(
            f"expected a model the perplexity calibration covers, got {model}: {why}; covered: "
            f"{covered_models(table)}; --allow-uncalibrated extrapolates",
            file=flag,
        )
    entry = match if match is not None else _entry(table, table["fallback"])
    fit = entry_fit(table, entry, group)
    bit = entry["bit_errors"]
    bit_src = (
        f"extrapolated from {_label(_entry(table, bit['from']))}"
        if "from" in bit
        else f"{entry['model']} ({bit['from_file']})"
    )
    if covered:
        label = f"calibrated on {entry['model']}"
        coverage = (
            f"covers {model} at {context_tokens} tokens (matched by {how}; measured at "
            f"{entry['context_tokens']} tokens)"
        )
    elif match is not None:
        label = (
            f"extrapolated from {entry['model']} (measured at {entry['context_tokens']} tokens, plan at "
            f"{context_tokens})"
        )
        coverage = f"does NOT cover {model} at {context_tokens} tokens (--allow-uncalibrated)"
    else:
        label = f"extrapolated from {entry['model']}"
        coverage = f"does NOT cover {model} (family {fam}; --allow-uncalibrated, fallback entry)"
    if "from" in bit:
        src = _entry(table, bit["from"])
        label += f"; bit-error part extrapolated from {'the toy model' if src.get('toy') else src['model']}"
    return {
        "file": table["file"],
        "entry": entry["id"],
        "toy": bool(entry.get("toy", False)),
        "model": entry["model"],
        "measurement": entry["measurement"],
        "source": entry["source"],
        "context_tokens": entry["context_tokens"],
        "plan_model": model,
        "plan_context_tokens": context_tokens,
        "covered": covered,
        "matched_by": how if match is not None else None,
        "label": label,
        "coverage": coverage,
        "bit_error_source": bit_src,
        "bit_errors_borrowed": "from" in bit,  # the bit-error slope is another entry's (no measurement of this model)
        "allow_uncalibrated": allow_uncalibrated,
        "fit": fit,
    }
