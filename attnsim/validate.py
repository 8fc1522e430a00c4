"""``attnsim validate``: the bundled validation set, measured vs published, with each row's error.

Sets (data in configs/validation/, each number with its source):
- gpu: GPU linear-op kernel times (vidur profiles, A100 and H100) — per op within 15 %, the sum of
  the four linear ops of a row within 10 %;
- attacc: the AttAcc reproduction (ratios within 25 %, PIM attention times within 15 %);
- limits: physical limits on every run of the bundled comparison experiments (achieved bandwidth
  never above peak).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from attnsim.config import CONFIG_ROOT, ConfigError, get_dotted, load_yaml


@dataclass
class Row:
    set: str
    name: str
    measured: float
    published: float
    tolerance: float  # relative error allowed ("relative" rows)
    check: str = "relative"  # or "upper_bound": measured <= published

    @property
    def error(self) -> float:
        return self.measured / self.published - 1.0 if self.published else float("nan")

    @property
    def ok(self) -> bool:
        if self.check == "upper_bound":
            return bool(self.measured <= self.published * (1 + 1e-12))
        return bool(abs(self.error) <= self.tolerance + 1e-12)

    def as_dict(self) -> dict:
        return {**asdict(self), "error": self.error, "ok": self.ok}


def _load(name: str) -> dict:
    return load_yaml(CONFIG_ROOT / "validation" / f"{name}.yaml")


def gpu_rows() -> list[Row]:
    """Model vs vidur per-op times; exceptions listed in the data file keep their stated bound."""
    from attnsim.hwmodels.gpu import load_hardware
    from attnsim.workloads.optrace import OpTrace
    data = _load("gpu_calibration")["vidur"]
    presets = {"a100": "a100_80gb_sxm", "h100": "h100_sxm"}
    # rows the data file lists as known outliers (with the reason and their own bound)
    exceptions = {(g, m, int(t), op): float(b) for g, m, t, op, b in _load("gpu_calibration").get("known_outliers", [])}
    out = []
    for table in data["tables"]:
        ops = list(table["shapes"])
        for tokens, per_gpu in table["us"].items():
            for key, times in per_gpu.items():
                gpu = load_hardware(presets[key])
                rows = [{"op": op, "cls": "matmul", "layer_group": 0, "count": 1, "m": int(tokens), "n": n, "k": k,
                         "batch": 1, "flops": 2.0 * tokens * n * k, "weight_bytes": 2.0 * n * k,
                         "act_bytes": 2.0 * tokens * (n + k)} for op, (k, n) in table["shapes"].items()]
                tr = OpTrace.from_rows(rows, phase="decode", model=table["model"], tp=table["tp"],
                                       query_tokens=np.ones(1, np.int64), context_lens=np.ones(1, np.int64), groups=[])
                t = gpu.cost(tr, np.arange(len(rows))).time_s * 1e6
                for op, tm, pub in zip(ops, t, times):
                    tol = exceptions.get((key, table["model"], int(tokens), op), 0.15)
                    note = " (known outlier, see data file)" if tol > 0.15 else ""
                    out.append(Row("gpu", f"{key} {table['model']} TP{table['tp']} {op} @{tokens} tok [us]{note}",
                                   float(tm), float(pub), tol))
                tol = exceptions.get((key, table["model"], int(tokens), "sum"), 0.10)
                out.append(Row("gpu", f"{key} {table['model']} TP{table['tp']} sum of 4 @{tokens} tok [us]",
                               float(np.sum(t)), float(np.sum(times)), tol))
    return out


def attacc_rows() -> list[Row]:
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    spec = _load("attacc")
    docs = run_experiment(load_experiment(spec["experiment"]))
    out = []
    for r in spec["rows"]:
        match = [d for d in docs if d["system"] == r["system"] and d["scenario"]["batch_size"] == r["batch"]]
        if not match or match[0]["status"] != "ok":
            raise ConfigError(f"validation row {r['name']!r}: run did not complete "
                              f"({match[0].get('error') if match else 'no such run'})", file="validation/attacc.yaml")
        val = get_dotted(match[0], r["metric"].split("."))
        out.append(Row("attacc", r["name"], float(val), float(r["published"]), float(r["tolerance"])))
    return out


def limit_rows() -> list[Row]:
    """Achieved bandwidth / peak <= 1 for every run of the bundled comparison experiments."""
    from attnsim.experiment import load_experiment
    from attnsim.runner import run_experiment
    out = []
    for name in ("default", "systems_compare"):
        for d in run_experiment(load_experiment(name, ["experiment.generation.mode=sampled",
                                                       "experiment.generation.samples=2"])):
            if d["status"] != "ok":
                continue
            for dev, bw in d["metrics"]["bandwidth"].items():
                out.append(Row("limits", f"{name}: {d['system']} {dev} bandwidth / peak", bw["utilization"], 1.0,
                               0.0, check="upper_bound"))
    return out


SETS = {"gpu": gpu_rows, "attacc": attacc_rows, "limits": limit_rows}


def run(sets=None) -> list[Row]:
    rows = []
    for name in sets or SETS:
        if name not in SETS:
            raise ConfigError(f"expected one of {', '.join(SETS)}, got {name!r}", file="--set")
        rows += SETS[name]()
    return rows
