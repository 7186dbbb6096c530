"""`foresight ingest` into day x metric partitions against a real Prometheus: a run killed
mid-way (SIGKILL) and restarted loses and duplicates no sample."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.ingest import read_tables
from features.ingest_store import MANIFEST, partition_files, windows
from features.openmetrics import backfill, write_openmetrics
from promserver import PrometheusServer
from simulator import SimConfig, generate_cluster

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE")
KEYS = ["metric", "node", "gpu", "uuid", "namespace", "pod", "ts"]

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (make test installs Debian's package)")

# Killed by its own progress callback after 4 of the partitions are written: SIGKILL, so no
# cleanup runs (what an OOM kill or a node drain does to the CronJob's pod).
KILLER = """
import os, signal, sys
from datetime import datetime
sys.path.insert(0, {root!r})
from features.ingest_store import ingest_to_dir
from features.prometheus import PrometheusSource

def die(done, total, rows, what):
    if done == 4:
        os.kill(os.getpid(), signal.SIGKILL)

ingest_to_dir(PrometheusSource({url!r}), datetime.fromisoformat({start!r}),
              datetime.fromisoformat({end!r}), {out!r}, step_s=60, metrics={metrics!r},
              progress=die)
"""


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    # noon three days ago: the 2 days span 3 UTC days (9 day x metric partitions) at any
    # hour the test runs (floor("h") - 2 d 13 h gave only 2 days, 6 partitions, at 13:xx UTC)
    start = pd.Timestamp.now(tz="UTC").floor("D") - pd.Timedelta(days=3) + pd.Timedelta(hours=12)
    cluster = generate_cluster(SimConfig(seed=4, start=start, days=2, step_s=60, nodes=1,
                                         gpus_per_node=2, metrics=METRICS))
    om = root / "history.om"
    write_openmetrics(om, samples=cluster.samples, pods=cluster.pods, queues=cluster.queues,
                      pod_step_s=600)
    backfill(om, root / "tsdb")
    with PrometheusServer(root / "tsdb", retention="15d") as server:
        yield server, cluster, root


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight.cli", "ingest", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _span(cluster) -> tuple[str, str]:
    s = cluster.samples["ts"]
    return s.min().isoformat(), s.max().isoformat()


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(KEYS).reset_index(drop=True)


def test_killed_pull_resumes_with_no_sample_lost_or_duplicated(prom, tmp_path):
    server, cluster, _ = prom
    start, end = _span(cluster)
    args = ["--prometheus-url", server.url, "--start", start, "--end", end, "--step", "60s",
            *sum([["--metric", m] for m in METRICS], [])]
    out = tmp_path / "pull"
    killed = subprocess.run([sys.executable, "-c", KILLER.format(
        root=str(ROOT), url=server.url, start=start, end=end, out=str(out),
        metrics=METRICS)], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    n_parts = len(windows(pd.Timestamp(start).to_pydatetime(), pd.Timestamp(end).to_pydatetime(),
                          60)) * len(METRICS)
    assert n_parts >= 9 and len(partition_files(out)) == 4  # mid-way: 4 of n_parts
    assert not json.loads((out / MANIFEST).read_text())["complete"]
    assert not (out / "pods.parquet").exists()

    again = _cli(*args, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "4 already there; resumed the interrupted pull" in again.stdout
    assert len(partition_files(out)) == n_parts
    got = _sorted(read_tables(out)["samples"])
    assert not got.duplicated(KEYS).any()

    want = _sorted(cluster.samples)
    assert len(got) == len(want)
    for col in KEYS[:-1]:
        assert (got[col].astype(str).to_numpy() == want[col].astype(str).to_numpy()).all(), col
    assert (got["ts"].to_numpy() == want["ts"].to_numpy()).all()
    assert np.array_equal(got["value"].to_numpy(), want["value"].to_numpy())

    # an uninterrupted pull into another directory gives the same table
    ref = tmp_path / "ref"
    whole = _cli(*args, "--out", str(ref))
    assert whole.returncode == 0, whole.stderr
    assert _sorted(read_tables(ref)["samples"]).equals(got)
    assert len(read_tables(out)["pods"]) == len(read_tables(ref)["pods"]) > 0


def test_restart_with_other_parameters_or_into_a_complete_pull_is_refused(prom, tmp_path):
    server, cluster, _ = prom
    start, end = _span(cluster)
    out = tmp_path / "pull"
    base = ["--prometheus-url", server.url, "--start", start, "--end", end,
            "--metric", METRICS[0], "--out", str(out)]
    assert _cli(*base, "--step", "60s").returncode == 0
    before = {p: p.read_bytes() for p in partition_files(out)}
    done = _cli(*base, "--step", "60s")
    assert done.returncode == 2 and "already holds a complete ingest" in done.stderr
    assert "Traceback" not in done.stderr
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["complete"] = False  # as if it had been killed
    (out / MANIFEST).write_text(json.dumps(manifest))
    other = _cli(*base, "--step", "120s")
    assert other.returncode == 2 and "other parameters" in other.stderr
    assert {p: p.read_bytes() for p in partition_files(out)} == before  # nothing overwritten


def test_windows_cover_the_grid_once():
    start = pd.Timestamp("2026-01-01T22:00:30Z").to_pydatetime()
    end = pd.Timestamp("2026-01-03T00:10:00Z").to_pydatetime()
    got = windows(start, end, 90)
    assert [d for d, _, _ in got] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    points = np.concatenate([pd.date_range(lo, hi, freq="90s").asi8 for _, lo, hi in got])
    grid = pd.date_range(start, end, freq="90s").asi8
    assert np.array_equal(points, grid)  # every grid point once, in order
