"""The trace benches read another file than the dev trace (`--trace`, `--out`): the fastest
ones run end to end on tiny synthetic traces written here, and the table they write names the
file they read. A missing trace is one line on stderr, not a traceback."""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def run_bench(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def out_name():
    """A results name no committed file has; whatever the bench wrote under it is removed."""
    stem = f"test_trace_option_{uuid.uuid4().hex[:8]}"
    yield f"{stem}.md"
    for f in RESULTS.glob(f"{stem}*"):
        f.unlink()


def written(out_name: str, proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = RESULTS / out_name
    assert path.is_file(), proc.stdout[-2000:]
    return path.read_text()


def header_line(text: str, key: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(f"- {key}"))


def test_runtime_bench_on_tiny_openb_and_dlrm(tmp_path, out_name):
    rng = np.random.default_rng(0)
    n = 400
    created = np.sort(rng.uniform(0, 2e6, n))
    run = rng.lognormal(8, 1, n)
    openb = pd.DataFrame({
        "name": [f"p{i}" for i in range(n)], "cpu_milli": rng.choice([4000, 8000], n),
        "memory_mib": 16384, "num_gpu": 1, "gpu_milli": rng.choice([500, 1000], n),
        "gpu_spec": "", "qos": rng.choice(["LS", "BE"], n), "pod_phase": "Succeeded",
        "creation_time": created, "scheduled_time": created + 5,
        "deletion_time": created + 5 + run})
    dlrm = pd.DataFrame({
        "instance_sn": [f"i{i}" for i in range(n)], "role": rng.choice(["CN", "HN"], n),
        "app_name": rng.choice([f"app_{k}" for k in range(6)], n),
        "gpu_request": rng.choice([0, 1, 2], n), "creation_time": created,
        "scheduled_time": created + 3, "deletion_time": created + 3 + 3 * run})
    a, b = tmp_path / "pods_tiny.csv", tmp_path / "dlrm_tiny.csv"
    openb.to_csv(a, index=False)
    dlrm.to_csv(b, index=False)
    text = written(out_name, run_bench("runtime.py", "--trace", str(a), "--trace", str(b),
                                       "--out", out_name))
    assert str(a) in header_line(text, "data") and str(b) in header_line(text, "data")
    assert out_name in header_line(text, "command")
    # one final-split row per trace, named after its file and kind (read from the header)
    assert "| openb pods_tiny |" in text and "| DLRM dlrm_tiny |" in text


def test_fingerprint_pai_bench_on_tiny_jobs(tmp_path, out_name):
    rng = np.random.default_rng(1)
    steps, workers = 80, 6
    t = np.repeat(np.arange(1, steps + 1), workers)
    w = np.tile(np.arange(workers), steps)
    bt = rng.normal(500, 5, steps * workers) * np.where(w == 4, 1.15, 1.0)  # worker 4 slow
    pd.DataFrame({"worker": w, "gpu": 8, "time": t, "batch_time_norm": bt.round()}).to_csv(
        tmp_path / "job_9_norm.csv")
    text = written(out_name, run_bench("fingerprint_pai.py", "--trace", str(tmp_path),
                                       "--out", out_name))
    assert str(tmp_path) in header_line(text, "data")
    row = next(ln for ln in text.splitlines() if ln.startswith("| job_9_norm | 6 | 80 |"))
    assert "w4 (" in row  # the slow worker is the one flagged
    assert "coefficient_variation.csv: not beside the job files" in text
    assert "jobs 1 and 3 each" not in text  # the dev trace's findings are not claimed here


def test_demand_qps_bench_on_tiny_gateway_trace(tmp_path, out_name):
    rng = np.random.default_rng(2)
    ts = 1.7e9 + np.arange(0, 22.5 * 3600, 57.0)
    level = 1 + 0.5 * np.sin(np.arange(len(ts)) / 120)
    keep = rng.random(len(ts)) > 0.1  # rows only when requests arrived: some gaps
    qps = pd.DataFrame({"timestamp_anon": ts[keep], "value": (level[keep] * 0.09 * 10).round(2),
                        "container_ip": "", "request_type": "API Requests"})
    path = tmp_path / "qps_tiny.csv"
    qps.to_csv(path, index=False)
    text = written(out_name, run_bench("demand_qps.py", "final", "--trace", str(path),
                                       "--out", out_name))
    assert str(path) in header_line(text, "data")
    assert header_line(text, "command").endswith(f"demand_qps.py final --trace {path} "
                                                 f"--out {out_name}`")
    assert "## final test:" in text and "## dev test:" not in text
    assert "no single queue_size*.csv beside qps_tiny.csv" in text


def test_missing_trace_is_one_line(tmp_path, out_name):
    proc = run_bench("runtime.py", "--trace", str(tmp_path / "nope.csv"), "--out", out_name)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope.csv" in lines[0], proc.stderr
    assert not (RESULTS / out_name).exists()


def test_genai_directory_takes_any_suffix_but_one_file(tmp_path):
    from features.genai_trace import metric_file, read_genai_metric
    from ground.errors import ForesightError

    rows = pd.DataFrame({"timestamp_anon": [1.7e9, 1.7e9 + 57], "value": [1.0, 2.0],
                         "container_ip": "abc"})
    rows.to_csv(tmp_path / "pod_gpu_duty_cycle.csv", index=False)
    assert set(read_genai_metric(tmp_path, "duty_cycle")["unique_id"]) == {"abc"}
    rows.to_csv(tmp_path / "pod_gpu_duty_cycle_test.csv", index=False)
    with pytest.raises(ForesightError, match="found 2"):
        metric_file(tmp_path, "duty_cycle")
    with pytest.raises(ForesightError, match="found 0"):
        metric_file(tmp_path, "memory_used")


def test_demand_helios_bench_scores_a_philly_sequence(tmp_path, out_name):
    t = pd.date_range("2017-10-03", periods=16 * 1440, freq="min")
    rng = np.random.default_rng(4)
    active = 300 + 40 * np.sin(np.arange(len(t)) / 1440 * 2 * np.pi) + rng.normal(0, 3, len(t))
    seq = tmp_path / "philly_tiny.csv"
    pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "active": active.round(),
                  "total": 420}).to_csv(seq, index=False)
    text = written(out_name, run_bench("demand_helios.py", "--philly", str(seq), "--out",
                                       out_name, timeout=300))
    assert text.startswith("# Demand forecaster on Philly (active nodes")
    assert str(seq) in header_line(text, "data")
    assert "## horizon 1h" in text and "## horizon 6h" in text
