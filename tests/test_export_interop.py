"""Interop: Parquet exports and the HDF5 store read by pandas / pyarrow / xarray alone (a subprocess that
never imports attnsim), units in every column name, per-request serving rows, refusals."""

import json
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
from sweep_helpers import write_sweep

from attnsim.cli import main
from attnsim.studies.sweep.executors import run_sweep
from attnsim.studies.sweep.spec import load_sweep
from attnsim.studies.sweep.store import open_store
from attnsim.studies.sweep.table import IDENTIFIERS, export_columns, has_unit, load_table, unit_name

SERVE = """
name: sv
systems: [h100_x1]
models: [llama3-8b]
scenarios:
  chat: {prompt_len: 128, output_len: 6}
serving:
  trace: {num_requests: 12, rate_per_s: 20, seed: 3, arrival: poisson, output: {dist: uniform, low: 1, high: 3}}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("ex")
    sw = load_sweep(
        write_sweep(
            d, [{"grid": {"system": ["h100_x1", "dgx_h100"], "scenario.batch_size": [1, 4]}}], baseline="h100_x1"
        )
    )
    run_sweep(sw, d / "s.h5", workers=1, progress=False, log=lambda s: None)
    return d / "s.h5"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("sv")
    (d / "e.yaml").write_text(SERVE)
    assert main(["serve", str(d / "e.yaml"), "--out", str(d / "out"), "--json"]) == 0
    return d / "out" / "results.h5"


def test_pandas_alone_reads_the_parquet_export(store, tmp_path, capsys):
    out = tmp_path / "s.parquet"
    assert main(["export", str(store), "--parquet", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    cols = open_store(store).columns()
    want = {
        "system": cols["system"].tolist(),
        "scenario.batch_size": cols["scenario.batch_size"].tolist(),
        "tokens_per_s": cols["tokens_per_s"].tolist(),
        "batch_size_count": cols["batch_size"].tolist(),
        "vs_baseline.throughput_ratio": [None if np.isnan(v) else v for v in cols["vs_baseline.throughput_ratio"]],
    }
    (tmp_path / "want.json").write_text(json.dumps(want))
    script = textwrap.dedent(f"""
        import json, math, sys
        import pandas as pd
        df = pd.read_parquet({str(out)!r})
        assert "attnsim" not in sys.modules, "pandas alone"
        want = json.load(open({str(tmp_path / "want.json")!r}))
        for k, v in want.items():
            got = [None if isinstance(x, float) and math.isnan(x) else x for x in df[k].tolist()]
            assert got == v, (k, got, v)
        import warnings
        import xarray as xr
        assert xr.Dataset.from_dataframe(df).sizes["index"] == 4
        with warnings.catch_warnings():  # h5netcdf notes that the root's /docs, /resolved have no dimension
            warnings.simplefilter("ignore")
            ds = xr.open_dataset({str(store)!r}, group="points", engine="h5netcdf")  # the store itself
        assert dict(ds.sizes) == {{"index": 4}}
        by_index = ds.sortby("index")
        assert by_index["tokens_per_s"].values.tolist() == want["tokens_per_s"]
        assert by_index["system"].values.tolist() == want["system"]
        assert "attnsim" not in sys.modules
        print(len(df), len(df.columns))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "4"


def test_parquet_holds_finite_numbers_and_nulls_for_missing(store, tmp_path):
    out = tmp_path / "s.parquet"
    assert main(["export", str(store), "--parquet", "-o", str(out)]) == 0
    t = pq.read_table(out)
    for name in t.column_names:
        col = t.column(name).to_numpy(zero_copy_only=False)
        if col.dtype.kind == "f":
            assert np.isfinite(col[~np.isnan(col)]).all()
    st = open_store(store).columns()
    assert (
        t.column("vs_baseline.throughput_ratio").null_count
        == int(np.isnan(st["vs_baseline.throughput_ratio"]).sum())
        == 2
    )
    meta = t.schema.metadata
    assert meta[b"attnsim.kind"] == b"sweep" and json.loads(meta[b"attnsim.parameters"])[-1] == "scenario.batch_size"


def _unitless(table, cols):
    return [c for c in cols if c not in IDENTIFIERS and c not in table.parameters and not has_unit(c)]


def test_every_exported_quantity_has_a_unit_in_its_name(store, served):
    for path in (store, served):
        t = load_table(path)
        cols = export_columns(t)
        assert _unitless(t, cols) == [], path
        assert len(cols) == len(t.columns) + len(t.breakdown)  # renamed, none lost
    s = export_columns(load_table(served))
    assert {
        "ttft_p50_s",
        "ttft_p99_s",
        "tpot_p50_s",
        "latency_p99_s",
        "slo_attainment_ratio",
        "requests_count",
        "throughput_rps",
        "batch_size_count",
    } <= set(s)
    assert unit_name("ttft_p99_ci_low") == "ttft_p99_s_ci_low" and unit_name("tokens_per_s") == "tokens_per_s"
    assert not has_unit("batch_size") and has_unit("decode_step/time_s_by_op/attn_score")


def test_serve_export_per_request_rows_and_metrics(served, tmp_path, capsys):
    out = tmp_path / "r.parquet"
    assert main(["export", str(served), "--parquet", "-o", str(out)]) == 0
    assert "12 requests" in capsys.readouterr().out
    req = pq.read_table(tmp_path / "r.requests.parquet").to_pandas()
    with h5py.File(served) as f:
        raw = f["requests"][()]
        doc = json.loads(f["run_docs"][0])
    assert len(req) == 12 and req["ttft_s"].tolist() == raw["ttft_s"].tolist()
    assert req["preemptions_count"].tolist() == raw["preemptions"].tolist()
    one = raw["output_tokens"] == 1  # TPOT undefined for a one-token output: null, not NaN
    assert one.any() and req["tpot_s"].isna().tolist() == one.tolist()
    runs = pq.read_table(out).to_pandas()
    assert runs["ttft_p50_s"].tolist() == [doc["metrics"]["ttft_p50"]]
    assert runs["slo_attainment_ratio"].tolist() == [doc["metrics"]["slo_attainment"]]
    # CSV: the same two tables
    assert main(["export", str(served), "--csv", "-o", str(tmp_path / "r.csv")]) == 0
    head = (tmp_path / "r.requests.csv").read_text().splitlines()[0].split(",")
    assert head[:6] == ["run", "system", "model", "scenario", "request", "arrival_s"]


def test_show_prints_the_swept_parameters_as_columns(store, capsys):
    assert main(["show", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(line for line in out if line.startswith("system"))
    assert head.split()[:3] == ["system", "scenario.batch_size", "status"] and "vs_baseline.throughput_ratio" in head
    assert any(line.startswith("fixed: model=llama2-7b, scenario=chat") for line in out)


def test_parquet_without_pyarrow_is_refused(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    assert main(["export", str(store), "--parquet", "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "pip install attnsim[parquet]" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.parquet").exists()
