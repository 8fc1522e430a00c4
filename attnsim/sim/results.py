"""Results files (HDF5): written atomically, read back by ``attnsim show``.

Layout of ``results.h5`` (one experiment run):

- file attrs: ``attnsim_version``, ``git_revision``, ``created_utc``, ``experiment``,
  ``resolved_config`` (YAML text of the whole resolved config tree), ``argv``.
- ``/runs``: a table (compound dataset), one row per run: ``system``, ``model``,
  ``scenario``, ``batch_size``, ``status`` and every scalar metric (NaN where absent).
- ``/run_docs``: one UTF-8 JSON document per run (the same as ``--json`` prints),
  so nested breakdowns survive exactly.
- ``/breakdown/<i>/<phase>/<table>``: per-run breakdown tables as two datasets,
  ``names`` (strings) and ``values`` (float64), for tools that do not parse JSON.

Both kinds of file are read back by :func:`attnsim.studies.sweep.store.read_results` (``attnsim show``; it lives
with the sweep store, so this module, which the runner imports, never imports the studies layer).

The file is written to a temporary name and renamed, so a failed or killed run
never leaves a partial results file.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import numbers
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import yaml

from attnsim import __version__

SCALAR_METRICS = (
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "decode_tokens_per_s",
    "energy_per_token_j",
    "dynamic_energy_per_token_j",
    "static_energy_per_token_j",
    "total_time_s",
)


#: vs_baseline ratios of a run to its baseline run: (name, metric, True if the run's value is the
#: numerator (higher is better: throughput), False if the baseline's is (lower is better: energy, time))
BASELINE_RATIOS = (
    ("throughput_ratio", "tokens_per_s", True),
    ("decode_throughput_ratio", "decode_tokens_per_s", True),
    ("energy_efficiency_ratio", "energy_per_token_j", False),
    ("dynamic_energy_efficiency_ratio", "dynamic_energy_per_token_j", False),
    ("decode_energy_efficiency_ratio", "decode_energy_per_token_j", False),
    ("decode_dynamic_energy_efficiency_ratio", "decode_dynamic_energy_per_token_j", False),
    ("tpot_speedup", "tpot_s", False),
)


def baseline_ratio(value, base, higher_is_better: bool):
    """One BASELINE_RATIOS ratio of ``value`` to the baseline's ``base``; None when undefined (a
    missing value or a zero denominator)."""
    num, den = (value, base) if higher_is_better else (base, value)
    return num / den if num is not None and den else None


@functools.lru_cache(maxsize=1)
def git_revision() -> str:
    """The commit of the running code: the live checkout's (``+dirty`` with uncommitted changes) when
    attnsim runs from its own git checkout, else the commit it was built from, else ``unknown``."""
    import attnsim
    from attnsim import BUILD_COMMIT

    root = Path(attnsim.__file__).resolve().parent.parent  # the checkout holding the package folder
    try:

        def git(*a):
            return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()

        top = git("rev-parse", "--show-toplevel")
        if top and Path(top).resolve() == root and (root / "pyproject.toml").is_file():
            rev = git("rev-parse", "--short", "HEAD")
            if rev:
                return rev + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except Exception:  # noqa: BLE001 - no git, or a hung one
        pass
    return BUILD_COMMIT or "unknown"


def json_default(o):
    """``json.dumps`` default for numpy scalars and arrays."""
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj, **kw) -> str:
    """Strict JSON (``allow_nan=False``: a non-finite number raises ValueError instead of printing
    ``Infinity``/``NaN``, which strict parsers reject); numpy values via :func:`json_default`."""
    return json.dumps(obj, default=json_default, allow_nan=False, **kw)


def _non_finite(v) -> bool:
    return isinstance(v, (float, np.floating)) and not math.isfinite(float(v))


def _non_finite_paths(doc: dict) -> list[tuple]:
    """Key paths (tuples: keys may hold dots, e.g. ``static_energy_j_by_part``) of every non-finite
    number in a run document; keys starting with ``_`` at the top level are skipped."""
    bad, stack = [], [((), doc)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items() if not (not path and str(k).startswith("_")))
        elif isinstance(v, (list, tuple)):
            stack.extend((path + (i,), x) for i, x in enumerate(v))
        elif isinstance(v, np.ndarray) and v.dtype.kind == "f":
            if not np.isfinite(v).all():
                bad.append(path)
        elif _non_finite(v):
            bad.append(path)
    return sorted(bad, key=lambda p: tuple(map(str, p)))


def check_finite_doc(doc: dict) -> list[str]:
    """Dotted key paths of every non-finite number (inf, -inf, NaN) in a run document.

    Keys starting with ``_`` (in-memory extras such as ``_requests``, never written as JSON) are
    skipped. An undefined metric (e.g. TPOT when every output is one token) must be ``None``.
    """
    return sorted(".".join(map(str, p)) for p in _non_finite_paths(doc))


#: A headline latency beyond this is no result: a token slower than a day (86,400 s) means an input outside any
#: real hardware (a 1e-300 GB/s link accepted with allow_out_of_range) or a model error.
IMPLAUSIBLE_LATENCY_S = 86400.0
#: Energy per token beyond this is no result: a 10 kW 8-GPU node spending 10 s per token is 1e5 J.
IMPLAUSIBLE_ENERGY_PER_TOKEN_J = 1e5
#: Utilisation and capacity fractions above 1 by more than rounding: a device over its capacity or its peak.
FRACTION_SLACK = 1e-6


def implausible_reasons(metrics: dict) -> list[str]:
    """Why a run's headline metrics leave plausible bounds ([] if they do not): a latency (``ttft*``, ``tpot*``)
    negative or above :data:`IMPLAUSIBLE_LATENCY_S`, an energy per token negative or above
    :data:`IMPLAUSIBLE_ENERGY_PER_TOKEN_J`, a memory ``used_fraction`` above 1 while ``fits`` was checked true, a
    bandwidth ``utilization`` above 1 (achieved above peak)."""
    out = []
    for k, v in metrics.items():
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            continue
        if k.startswith(("ttft", "tpot")) and not 0 <= v <= IMPLAUSIBLE_LATENCY_S:
            out.append(f"metrics.{k} = {v:.4g} s outside [0, {IMPLAUSIBLE_LATENCY_S:g}] (a token slower than a day)")
        if "energy_per_token" in k and not 0 <= v <= IMPLAUSIBLE_ENERGY_PER_TOKEN_J:
            out.append(f"metrics.{k} = {v:.4g} J outside [0, {IMPLAUSIBLE_ENERGY_PER_TOKEN_J:g}]")
    if metrics.get("fits") is True:
        for role, m in (metrics.get("memory") or {}).items():
            f = m.get("used_fraction") if isinstance(m, dict) else None
            if isinstance(f, numbers.Real) and f > 1 + FRACTION_SLACK:
                out.append(f"metrics.memory.{role}.used_fraction = {f:.4g} > 1 (over its capacity)")
    for name, b in (metrics.get("bandwidth") or {}).items():
        u = b.get("utilization") if isinstance(b, dict) else None
        if isinstance(u, numbers.Real) and not -FRACTION_SLACK <= u <= 1 + FRACTION_SLACK:
            out.append(f"metrics.bandwidth.{name}.utilization = {u:.4g} outside [0, 1] (achieved above peak)")
    return out


def flag_implausible(doc: dict) -> dict:
    """A ``status: ok`` run whose headline metrics leave plausible bounds (:func:`implausible_reasons`) becomes
    ``status: implausible`` with ``error`` naming them (its metrics stay, for inspection). Returns ``doc``."""
    if doc.get("status") != "ok" or not isinstance(doc.get("metrics"), dict):
        return doc
    reasons = implausible_reasons(doc["metrics"])
    if reasons:
        doc["status"] = "implausible"
        doc["error"] = (
            "implausible result: "
            + "; ".join(reasons[:3])
            + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
        )
    return doc


def finalize_doc(doc: dict) -> dict:
    """The finite-number rule for run documents (called by the runner and ``attnsim serve``).

    A run whose document holds a non-finite number is not a result: a ``status: ok`` run becomes
    ``status: error`` with ``error`` naming the metrics (``non-finite result: metrics.ttft_s = inf,
    ...``), and every such value becomes ``None`` so the document stays strict JSON. A finite run whose
    headline metrics leave plausible bounds becomes ``status: implausible`` (:func:`flag_implausible`).
    Returns ``doc``.
    """
    bad = _non_finite_paths(doc)
    if not bad:
        return flag_implausible(doc)
    shown = []
    for path in bad:
        node = doc
        for k in path[:-1]:
            node = node[k]
        if isinstance(node, tuple):
            continue
        key = path[-1]
        shown.append(
            f"{'.'.join(map(str, path))} = "
            f"{node[key] if not isinstance(node[key], np.ndarray) else 'array with non-finite values'}"
        )
        node[key] = None
    if doc.get("status") == "ok":
        doc["status"] = "error"
        more = f" (and {len(shown) - 3} more)" if len(shown) > 3 else ""
        doc["error"] = "non-finite result: " + ", ".join(shown[:3]) + more
    return doc


def _runs_table(docs: list[dict]) -> np.ndarray:
    metric_names = sorted(
        {
            k
            for d in docs
            for k, v in d.get("metrics", {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    )
    dt = [
        ("system", h5py.string_dtype()),
        ("model", h5py.string_dtype()),
        ("scenario", h5py.string_dtype()),
        ("batch_size", "i8"),
        ("status", h5py.string_dtype()),
    ] + [(m, "f8") for m in metric_names]
    arr = np.zeros(len(docs), dtype=dt)
    for i, d in enumerate(docs):
        arr[i]["system"] = d["system"]
        arr[i]["model"] = d["model"]
        arr[i]["scenario"] = d["scenario"]["name"]
        arr[i]["batch_size"] = d["scenario"].get("batch_size", 0)
        arr[i]["status"] = d["status"]
        for m in metric_names:
            v = d.get("metrics", {}).get(m)
            arr[i][m] = float(v) if isinstance(v, (int, float)) else np.nan
    return arr


def write_results(path: str | Path, docs: list[dict], tree_dict: dict, experiment: str, argv=None) -> Path:
    """Write runs to ``path`` atomically (temp file + rename)."""
    from attnsim.core.fileio import atomic_path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".h5") as tmp:  # mode from the umask (0644), not mkstemp's 0600
        with h5py.File(tmp, "w") as f:
            f.attrs["attnsim_version"] = __version__
            f.attrs["git_revision"] = git_revision()
            f.attrs["created_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            f.attrs["experiment"] = experiment
            f.attrs["resolved_config"] = yaml.safe_dump(tree_dict, sort_keys=False)
            f.attrs["argv"] = " ".join(argv if argv is not None else sys.argv)
            f.create_dataset("runs", data=_runs_table(docs))
            f.create_dataset(
                "run_docs", data=np.array([dumps(d) for d in docs], dtype=object), dtype=h5py.string_dtype()
            )
            g = f.create_group("breakdown")
            for i, d in enumerate(docs):
                for phase, bd in d.get("breakdown", {}).items():
                    for table, vals in bd.items():
                        if isinstance(vals, dict) and all(isinstance(v, (int, float)) for v in vals.values()):
                            h = g.require_group(f"{i}/{phase}/{table}")
                            h.create_dataset(
                                "names", data=np.array(list(vals), dtype=object), dtype=h5py.string_dtype()
                            )
                            h.create_dataset("values", data=np.array(list(vals.values()), dtype=np.float64))
    return path
