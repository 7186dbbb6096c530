"""`foresight demand series`: a cluster's tables or a public trace's own format -> the long
series (unique_id, ds, y) that `demand backtest|forecast` read."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight.cli", "demand", "series", *args],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200"))


def test_dlrm_trace_by_app_sums_the_gpus_each_app_asked(tmp_path):
    trace = tmp_path / "dlrm.csv"
    pd.DataFrame({"app_name": ["a", "a", "b", "b", "a"], "gpu_request": [1, 2, 4, 0, 1],
                  "creation_time": [60, 120, 700, 800, np.nan]}).to_csv(trace, index=False)
    out = tmp_path / "S.csv"
    proc = cli("--dlrm", str(trace), "--by", "app", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    s = pd.read_csv(out)
    assert list(s.columns) == ["unique_id", "ds", "y"]
    # a: 1 + 2 GPUs in the first 10-min bin; the instance without a creation time existed
    # before the window (not an arrival); b: 4 GPUs in the second bin, its 0-GPU one dropped
    assert s.groupby("unique_id")["y"].sum().to_dict() == {"a": 3.0, "b": 4.0}
    assert s[s.unique_id == "b"]["y"].tolist() == [0.0, 4.0]


def test_helios_vcs_and_the_series_feeds_backtest(tmp_path):
    vcs = tmp_path / "vcs"
    vcs.mkdir()
    t = pd.date_range("2020-05-01", periods=6 * 24 * 60, freq="min")
    for k, vc in enumerate(("vcA", "vcB")):
        pd.DataFrame({"time": t, "running_gpu_num": 10 * (k + 1),
                      "pending_gpu_num": np.arange(len(t)) % 3}).to_csv(vcs / f"{vc}.csv",
                                                                          index=False)
    out = tmp_path / "S.csv"
    proc = cli("--helios", str(vcs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    s = pd.read_csv(out)
    assert sorted(s.unique_id.unique()) == ["vcA", "vcB"]
    assert s.groupby("unique_id")["y"].mean().round(1).to_dict() == {"vcA": 11.0, "vcB": 21.0}


def test_philly_active_nodes_are_one_series_averaged_per_bin(tmp_path):
    seq = tmp_path / "philly_node_sequence.csv"
    t = pd.date_range("2017-10-03", periods=30, freq="min")
    pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "active": np.arange(30) + 300,
                  "total": 420}).to_csv(seq, index=False)
    out = tmp_path / "S.csv"
    proc = cli("--philly", str(seq), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    s = pd.read_csv(out)
    assert s["unique_id"].unique().tolist() == ["philly"]
    assert s["y"].tolist() == [304.5, 314.5, 324.5]  # active, not the cluster's total
    proc = cli("--philly", str(out), "--out", str(tmp_path / "T.csv"))  # another format
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "time, active" in lines[0], proc.stderr


@pytest.mark.parametrize("args, needle", [
    (("--dlrm", "{qps}"), "--dlrm"),                         # a file of another format
    (("--qps", "{qps}", "--helios", "{dir}"), "exactly one"),
    (("--data", "{dir}"), "pods.parquet"),
    (("--helios", "{dir}/absent"), "not found"),
    (("--qps", "{qps}", "--freq", "soon"), "freq"),
    (("--qps", "{qps}", "--by", "app"), "only with --dlrm"),   # not silently ignored
])
def test_bad_sources_are_one_line(tmp_path, args, needle):
    qps = tmp_path / "qps.csv"
    qps.write_text("timestamp_anon,value,container_ip,request_type\n0,1.0,,API Requests\n")
    out = tmp_path / "S.csv"
    proc = cli(*(a.format(qps=qps, dir=tmp_path) for a in args), "--out", str(out))
    assert proc.returncode == 2, proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not out.exists()


def test_out_over_the_trace_is_refused(tmp_path):
    qps = tmp_path / "qps.csv"
    qps.write_text("timestamp_anon,value,container_ip,request_type\n0,1.0,,API Requests\n")
    before = qps.read_bytes()
    proc = cli("--qps", str(qps), "--out", str(qps))
    assert proc.returncode == 2 and "would overwrite the input" in proc.stderr
    assert qps.read_bytes() == before


def test_cluster_tables_give_gpus_requested_per_queue(tmp_path):
    t0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
    pods = pd.DataFrame({
        "namespace": "ml", "pod": ["p0", "p1", "p2", "p3"], "node": "n0",
        "queue": ["train", "train", "serve", "train"], "priority": 0, "workload": "w",
        "gpu_request": [8.0, 1.0, 0.5, 2.0],
        "created": [t0, t0 + pd.Timedelta("3min"), t0 + pd.Timedelta("4min"),
                    t0 + pd.Timedelta("25min")],
        "started": pd.NaT, "finished": pd.NaT})
    pods.to_parquet(tmp_path / "pods.parquet")  # no samples table: it is not needed here
    out = tmp_path / "S.csv"
    proc = cli("--data", str(tmp_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    s = pd.read_csv(out)
    train = s[s.unique_id == "train"]["y"].tolist()
    assert train == [9.0, 0.0, 2.0]  # 8 + 1 GPUs in the first bin, none, then 2
    assert s[s.unique_id == "serve"]["y"].tolist() == [0.5]


def test_usage_series_from_a_genai_format_file(tmp_path):
    f = tmp_path / "pod_gpu_duty_cycle_test.csv"
    pd.DataFrame({"timestamp_anon": [0, 30, 70, 200, 10, 65],
                  "value": [10.0, 30.0, 50.0, 70.0, 5.0, 7.0],
                  "container_ip": ["p1", "p1", "p1", "p1", "p2", "p2"]}).to_csv(f, index=False)
    out = tmp_path / "U.csv"
    proc = subprocess.run([sys.executable, "-m", "foresight.cli", "usage", "series", "--genai",
                           str(f), "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = pd.read_csv(out)
    # 1-min bins: the mean of the samples in each, the level carried over the empty bin
    assert s[s.unique_id == "p1"]["y"].tolist() == [20.0, 50.0, 50.0, 70.0]
    assert s[s.unique_id == "p2"]["y"].tolist() == [5.0, 7.0]
    bad = subprocess.run([sys.executable, "-m", "foresight.cli", "usage", "series", "--genai",
                          str(out), "--out", str(tmp_path / "V.csv")], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "need columns container_ip, timestamp_anon, value" in bad.stderr
