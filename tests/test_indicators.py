"""Failure-mode indicators on /metrics: fragmentation, queue waits and partial gangs, read over
real HTTP from `foresight serve --only extender --snapshot` on a hand-built cluster."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from netutil import start_serve, wait_ready
from scheduler_hook.fake_kube import make_node, make_pod

ROOT = Path(__file__).resolve().parents[1]


def _ago(seconds: float) -> str:
    t = datetime.fromtimestamp(time.time() - seconds, timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, ns: str = "default", age: float = 60, labels: dict | None = None,
         scheduler: str | None = None, **kw) -> dict:
    p = make_pod(name, namespace=ns, **kw)
    p["metadata"]["creationTimestamp"] = _ago(age)
    p["metadata"]["labels"].update(labels or {})
    if scheduler:
        p["spec"]["schedulerName"] = scheduler
    return p


def snapshot() -> dict:
    gang = {"scheduling.x-k8s.io/pod-group": "job7"}
    items = [
        make_node("n1"), make_node("n2"), make_node("n3"), make_node("n4", gpus=4),
        make_node("n5", gpus=2, annotations={
            "foresight.io/gpu-drained": "0",
            "foresight.io/gpu-health": json.dumps({"1": {"xid": 79}})}),
        # scattered free GPUs: 3 on n1, 2 on n2, 4 on n3, 3.5 on n4 (a half GPU taken)
        _pod("a1", gpus=5, node="n1", phase="Running"),
        _pod("a2", gpus=6, node="n2", phase="Running"),
        _pod("half", fraction=0.5, node="n4", phase="Running"),
        # a gang of four 2-GPU pods: two bound on n3, two pending for 300 s
        _pod("g-0", "ns-train", 300, gang, gpus=2, node="n3", phase="Running"),
        _pod("g-1", "ns-train", 300, gang, gpus=2, node="n3", phase="Running"),
        _pod("g-2", "ns-train", 300, gang, gpus=2),
        _pod("g-3", "ns-train", 300, gang, gpus=2),
        # pending GPU pods of two queues, one of them sent to another scheduler
        _pod("big-1", "team-a", 600, {"kueue.x-k8s.io/queue-name": "research"}, gpus=8),
        _pod("big-2", "team-a", 120, {"kueue.x-k8s.io/queue-name": "research"}, gpus=8,
             scheduler="default-scheduler"),
        _pod("small", "team-b", 30, gpus=1,
             annotations={"scheduling.volcano.sh/queue-name": "prod"}),
        _pod("cpu-only", "team-a", 900, {"kueue.x-k8s.io/queue-name": "research"}),
        # a gang whose PodGroup wants 3 members, only one created and bound (1,000 s ago)
        _pod("h-0", "ns-train", 1000, {"scheduling.x-k8s.io/pod-group": "job8"}, gpus=1,
             node="n4", phase="Running"),
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "job8", "namespace": "ns-train"}, "spec": {"minMember": 3}},
        # a complete gang: not partial
        _pod("k-0", "ns-x", 50, {"scheduling.x-k8s.io/pod-group": "done"}, gpus=1, node="n1",
             phase="Running"),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


@pytest.fixture(scope="module")
def metrics(tmp_path_factory) -> dict[tuple, float]:
    snap = tmp_path_factory.mktemp("ind") / "snap.json"
    snap.write_text(json.dumps(snapshot()))
    proc, url = start_serve(["--only", "extender", "--snapshot", str(snap), "--host",
                             "127.0.0.1", "--log-level", "warning"], ROOT)
    try:
        wait_ready(httpx.get, url + "/readyz", proc, transport_error=httpx.TransportError)
        text = httpx.get(url + "/metrics").text
    finally:
        proc.terminate()
        proc.wait(10)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith("foresight_cluster") or s.name.startswith("foresight_queue")
            or s.name.startswith("foresight_gang") or s.name.startswith("foresight_pending")}


def test_free_and_schedulable_gpus_per_shape(metrics):
    free = (3 - 1) + 2 + 4 + (3.5 - 1)  # n1 also holds k-0, n4 h-0 (1 GPU each)
    assert metrics[("foresight_cluster_gpus_free", ())] == pytest.approx(free)
    # n1 also holds k-0 (1 GPU): 2 whole GPUs free there, as on n2 and n4
    want = {"1": 2 + 2 + 4 + 2, "2": 2 + 2 + 4 + 2, "4": 4, "8": 0}
    for shape, n in want.items():
        assert metrics[("foresight_cluster_gpus_schedulable", (("shape", shape),))] == n, shape
        assert metrics[("foresight_cluster_fragmentation_ratio", (("shape", shape),))] == \
            pytest.approx(1 - n / free), shape


def test_unhealthy_gpus_by_reason(metrics):
    got = {r: metrics[("foresight_cluster_gpus_unhealthy", (("reason", r),))]
           for r in ("drained", "xid", "ecc_dbe")}
    assert got == {"drained": 1, "xid": 1, "ecc_dbe": 0}


def test_pending_pods_and_oldest_wait_per_queue(metrics):
    pend = {q: metrics[("foresight_queue_pending_pods", (("queue", q),))]
            for q in ("research", "prod", "ns-train")}
    assert pend == {"research": 2, "prod": 1, "ns-train": 2}  # the CPU-only pod is not counted
    oldest = {q: metrics[("foresight_queue_oldest_pending_seconds", (("queue", q),))]
              for q in pend}
    assert oldest["research"] == pytest.approx(600, abs=15)
    assert oldest["prod"] == pytest.approx(30, abs=15)
    assert oldest["ns-train"] == pytest.approx(300, abs=15)
    by_shape = {k: metrics[("foresight_pending_pods_by_shape", (("shape", k),))]
                for k in ("1", "2", "4", "8")}
    assert by_shape == {"1": 1, "2": 2, "4": 0, "8": 2}


def test_partially_placed_gangs(metrics):
    # job7 (2 of 4 bound, 2 pending) and job8 (1 bound of minMember 3); `done` is complete
    assert metrics[("foresight_gangs_partially_placed", ())] == 2
    assert metrics[("foresight_gang_partial_oldest_seconds", ())] == pytest.approx(1000, abs=15)


def test_gauges_follow_state_changes_without_requests():
    from scheduler_hook import indicators
    from scheduler_hook.podspec import parse_pod
    from scheduler_hook.state import ClusterState

    st = ClusterState()
    st.replace_all([make_node("m", gpus=8)], [])
    indicators.refresh(st)
    assert indicators.GPUS_SCHEDULABLE.labels("8")._value.get() == 8
    st.upsert_pod(parse_pod(make_pod("x", gpus=1, node="m", phase="Running")))
    indicators.refresh(st)
    assert indicators.GPUS_SCHEDULABLE.labels("8")._value.get() == 0
    assert indicators.FRAGMENTATION.labels("8")._value.get() == 1.0
    st.delete_pod("default", "x")
    indicators.refresh(st)
    assert indicators.GPUS_SCHEDULABLE.labels("8")._value.get() == 8
