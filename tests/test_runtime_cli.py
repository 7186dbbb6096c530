"""`foresight runtime backtest`: run time before start on a pods table or a trace, split by
time, against the workload's last run and the queue's median."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight.cli", "runtime", "backtest", *args],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200"))


def dlrm_trace(path, keyed: bool, n: int = 600, seed: int = 0) -> None:
    """Apps whose run times differ by app (keyed) or do not (one distribution for all)."""
    rng = np.random.default_rng(seed)
    app = rng.integers(0, 6, n)
    created = np.sort(rng.uniform(0, 3e6, n))
    base = np.exp(6 + 1.5 * app) if keyed else np.exp(9)
    run = base * rng.lognormal(0, 0.2, n)
    pd.DataFrame({"instance_sn": [f"i{i}" for i in range(n)], "role": "HN",
                  "app_name": [f"app{a}" for a in app], "gpu_request": 1,
                  "creation_time": created, "scheduled_time": created + 5,
                  "deletion_time": created + 5 + run}).to_csv(path, index=False)


def test_keyed_run_times_beat_the_queue_median_and_are_written(tmp_path):
    trace, out = tmp_path / "dlrm.csv", tmp_path / "pred.csv"
    dlrm_trace(trace, keyed=True)
    proc = cli("--dlrm", str(trace), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "the model beats both baselines" in proc.stdout
    assert "[p10, p90] holds" in proc.stdout
    pred = pd.read_csv(out)
    assert {"y_true", "p10", "p50", "p90", "last", "queue_median"} <= set(pred.columns)
    # the last 30 % of creations, with a run time, are the test: 180 of 600
    assert len(pred) == 180
    err = lambda c: np.mean(np.abs(pred[c] - pred["y_true"]))  # noqa: E731
    assert err("p50") < 0.5 * err("queue_median")


def test_run_times_the_key_does_not_explain_serve_the_baseline_by_name(tmp_path):
    trace = tmp_path / "dlrm.csv"
    dlrm_trace(trace, keyed=False)
    proc = cli("--dlrm", str(trace), "--test-share", "0.4")
    assert proc.returncode == 0, proc.stderr
    assert "beats both baselines" not in proc.stdout
    assert "the retraining job would serve" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (("--openb", "{trace}"), "--openb"),          # a DLRM file read as an openb list
    (("--dlrm", "{trace}", "--data", "{dir}"), "exactly one"),
    (("--data", "{dir}"), "pods.parquet"),
    (("--dlrm", "{trace}", "--test-share", "0"), "--test-share"),
    (("--dlrm", "{trace}", "--out", "{trace}"), "would overwrite the input"),
])
def test_bad_input_is_one_line(tmp_path, args, needle):
    trace = tmp_path / "dlrm.csv"
    dlrm_trace(trace, keyed=True, n=50)
    before = trace.read_bytes()
    proc = cli(*(a.format(trace=trace, dir=tmp_path) for a in args))
    assert proc.returncode == 2, proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert trace.read_bytes() == before
