"""The generator's history, backfilled into a real Prometheus with promtool and read back."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from features.ingest import ingest, read_tables, write_tables
from features.openmetrics import backfill, write_openmetrics
from features.prometheus import PrometheusSource
from promserver import PrometheusServer
from simulator import SimConfig, generate_cluster

METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE")

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (make test installs Debian's package)")


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    # Recent data: Prometheus drops blocks older than its retention at start-up.
    start = pd.Timestamp.now(tz="UTC").floor("h") - pd.Timedelta(days=2, hours=1)
    cluster = generate_cluster(SimConfig(seed=3, start=start, days=2, step_s=15, nodes=1,
                                         gpus_per_node=2, metrics=METRICS))
    om = root / "history.om"
    write_openmetrics(om, samples=cluster.samples, pods=cluster.pods, queues=cluster.queues,
                      pod_step_s=600)  # coarse KSM series keep the file small
    assert om.read_bytes().endswith(b"# EOF\n")
    backfill(om, root / "tsdb")
    with PrometheusServer(root / "tsdb", retention="15d") as server:
        s = cluster.samples
        result = ingest(PrometheusSource(server.url), s["ts"].min().to_pydatetime(),
                        s["ts"].max().to_pydatetime(), step_s=15, metrics=METRICS)
    return cluster, result, root


def test_every_sample_round_trips_exactly(roundtrip):
    cluster, result, _ = roundtrip
    keys = ["metric", "node", "gpu", "uuid", "namespace", "pod", "ts"]
    want = cluster.samples.sort_values(keys).reset_index(drop=True)
    got = result.samples.sort_values(keys).reset_index(drop=True)
    assert got.groupby(["metric", "node", "gpu"]).size().max() > 11_000  # needed split queries
    assert len(got) == len(want)
    for col in keys[:-1]:
        assert (got[col].to_numpy() == want[col].to_numpy()).all(), col
    assert (got["ts"].to_numpy() == want["ts"].to_numpy()).all()
    assert np.array_equal(got["value"].to_numpy(), want["value"].to_numpy())


def test_pods_round_trip(roundtrip):
    cluster, result, _ = roundtrip
    keys = ["namespace", "pod"]
    want = cluster.pods.sort_values(keys).reset_index(drop=True)
    got = result.pods.sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want) > 0
    for col in ("namespace", "pod", "node", "queue", "workload", "priority", "gpu_request"):
        assert (got[col].to_numpy() == want[col].to_numpy()).all(), col
    for col in ("created", "started", "finished"):
        both = want[col].notna()
        assert (got[col].notna() == both).all(), col
        # a unix time in a float64 sample keeps sub-microsecond precision
        assert ((got[col][both] - want[col][both]).abs() < pd.Timedelta(microseconds=1)).all(), col


def test_queue_gauges_round_trip(roundtrip):
    cluster, result, _ = roundtrip
    if cluster.queues.empty:
        pytest.skip("generator produced no queue gauges")
    q = result.queues
    assert set(q["queue"]) == set(cluster.queues["queue"])
    assert set(q["metric"]) == set(cluster.queues["metric"])


def test_parquet_cache_round_trip(roundtrip, tmp_path):
    _, result, _ = roundtrip
    write_tables(tmp_path, {"samples": result.samples, "pods": result.pods, "queues": result.queues})
    back = read_tables(tmp_path)
    pd.testing.assert_frame_equal(back["samples"], result.samples, check_dtype=False)
    pd.testing.assert_frame_equal(back["pods"], result.pods, check_dtype=False)
