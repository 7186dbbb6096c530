"""The extender inside a real kube-scheduler v1.34 (etcd + kube-apiserver on loopback, from
../shared/k8s): the shipped deploy/kube-scheduler-config.yaml, pointed at `foresight serve
--only extender`, binds whole-GPU, KAI fractional, MIG and gang pods where the extender says.

Nodes have flat CPU/memory (kube-scheduler's own scores tie), each scenario pins its pods to its
own nodes with a `nvidia.com/gpu.product` nodeSelector, and every pod is created only after the
extender has seen the previous binding, so each placement is the extender's decision.
"""
from __future__ import annotations

import time
from typing import Iterator

import httpx
import pytest

from k8s_support import control_plane
from scheduler_hook.kube_local import ControlPlane, gpu_node, gpu_pod, start_extender

SCHED = "foresight-scheduler"
pytestmark = [pytest.mark.slow,  # the apiserver's self-signed loopback certificate:
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


class Cluster:
    def __init__(self, cp: ControlPlane, extender: str) -> None:
        self.cp, self.extender = cp, extender
        self.bound_gpu_pods = 0

    def place(self, pod: dict, gpu: bool = True) -> str:
        """Create the pod, wait for its binding and for the extender to account for it."""
        name = pod["metadata"]["name"]
        self.cp.create_pod(pod)
        node = self.cp.wait_bound([name], timeout_s=30)[name]
        if gpu:
            self.bound_gpu_pods += 1
            deadline = time.time() + 15
            while httpx.get(self.extender + "/readyz").json()["pods"] < self.bound_gpu_pods:
                assert time.time() < deadline, f"extender never saw {name} bound"
                time.sleep(0.05)
        return node

    def decision(self, name: str) -> dict:
        r = httpx.get(f"{self.extender}/v1/explain/default/{name}")
        assert r.status_code == 200, f"{name} never reached the extender: {r.text}"
        return r.json()

    def assert_extender_choice(self, name: str, node: str) -> dict:
        """The node kube-scheduler bound `name` to passed the extender's filter and had its
        top score among the nodes that passed (the shipped filter-best verb keeps only those;
        with a prioritize call, its scores)."""
        got = self.decision(name)
        kept = [n for n in got["filter"]["nodes"] if not n["rejected"]]
        assert node in {n["node"] for n in kept}, (name, node, got["filter"]["nodes"])
        scores = {n["node"]: n["score"] for n in (got.get("prioritize") or got["filter"])["nodes"]
                  if not n["rejected"]}
        assert scores[node] == max(scores.values()), (name, node, scores)
        return got


def _scores(got: dict) -> dict[str, int]:
    """Node -> extender score of the nodes that passed its filter."""
    return {n["node"]: n["score"] for n in got["filter"]["nodes"] if not n["rejected"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    cp = control_plane(tmp_path_factory.mktemp("k8s"))
    ext = None
    try:
        cp.create_nodes([
            gpu_node("w-a", 8, "TEST-WHOLE"), gpu_node("w-b", 8, "TEST-WHOLE"),
            gpu_node("w-drained", 8, "TEST-WHOLE",
                     annotations={"foresight.io/gpu-drained": "all"}),
            gpu_node("f-a", 4, "TEST-FRAC"), gpu_node("f-b", 4, "TEST-FRAC"),
            gpu_node("g-a", 8, "TEST-GANG"), gpu_node("g-b", 8, "TEST-GANG"),
            # MIG, mixed strategy: one H100 as seven 1g.10gb, one as 3+2+1 slices
            gpu_node("m-a", 0, "NVIDIA-H100-80GB-HBM3", labels={"nvidia.com/mig.strategy": "mixed"},
                     extra={"nvidia.com/mig-1g.10gb": "7"}),
            gpu_node("m-b", 0, "NVIDIA-H100-80GB-HBM3", labels={"nvidia.com/mig.strategy": "mixed"},
                     extra={"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                            "nvidia.com/mig-1g.10gb": "1"}),
        ])
        ext, url = start_extender(cp.kubeconfig)
        cp.start_scheduler(extender_url=url, scheduler_name=SCHED)
        yield Cluster(cp, url)
    finally:
        if ext is not None:
            ext.terminate()
            ext.wait(10)
        cp.stop()


def _on(product: str) -> dict:
    return {"nodeSelector": {"nvidia.com/gpu.product": product}}


def _pod(name: str, product: str | None = None, **kw) -> dict:
    pod = gpu_pod(name, SCHED, **kw)
    if product:
        pod["spec"].update(_on(product))
    return pod


def test_whole_gpu_pods_avoid_the_drained_node_and_pack(cluster):
    first = cluster.place(_pod("whole-1", "TEST-WHOLE", gpus=4))
    got = cluster.assert_extender_choice("whole-1", first)
    rejected = {n["node"]: n["rejected"] for n in got["filter"]["nodes"] if n["rejected"]}
    assert set(rejected) == {"w-drained"} and "drained" in rejected["w-drained"]
    assert set(got) == {"filter"}  # the shipped filter-best verb: one extender call per pod
    assert first in ("w-a", "w-b")
    second = cluster.place(_pod("whole-2", "TEST-WHOLE", gpus=4))
    cluster.assert_extender_choice("whole-2", second)
    assert second == first  # packing: the half-used node beats an empty one


def test_fractional_pods_share_a_node(cluster):
    first = cluster.place(_pod("frac-1", "TEST-FRAC", fraction=0.5))
    cluster.assert_extender_choice("frac-1", first)
    second = cluster.place(_pod("frac-2", "TEST-FRAC", fraction=0.5))
    got = cluster.assert_extender_choice("frac-2", second)
    assert second == first
    scores = _scores(got)
    assert scores[first] > min(scores.values())  # a decision, not a tie broken by chance


def test_mig_pods_reach_the_extender_and_land_where_it_scores_best(cluster):
    for i in range(3):
        name = f"mig-{i}"
        node = cluster.place(_pod(name, mig="1g.10gb"))
        got = cluster.assert_extender_choice(name, node)
        assert got["filter"]["mig"]["profile"] == "1g.10gb"


def test_gang_binds_where_the_extender_says_and_shows_as_partially_placed(cluster):
    """Three 8-GPU members, two 8-GPU nodes, no co-scheduling plugin: two bind, one waits,
    and the extender reports the gang as partially placed."""
    group = {"scheduling.x-k8s.io/pod-group": "train-a"}
    names = [f"gang-{i}" for i in range(3)]
    for name in names:
        cluster.cp.create_pod(_pod(name, "TEST-GANG", gpus=8, labels=group))
    deadline = time.time() + 30
    while True:
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName")
                  for p in cluster.cp.pods("scheduling.x-k8s.io/pod-group=train-a")}
        bound = {n: node for n, node in placed.items() if node}
        if len(bound) == 2:
            break
        assert time.time() < deadline, placed
        time.sleep(0.1)
    assert sorted(bound.values()) == ["g-a", "g-b"]
    for name, node in bound.items():
        cluster.assert_extender_choice(name, node)
    metric = "foresight_gangs_partially_placed "
    deadline = time.time() + 15
    while True:
        text = httpx.get(cluster.extender + "/metrics").text
        value = [float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith(metric)]
        if value == [1.0]:
            break
        assert time.time() < deadline, value
        time.sleep(0.1)
    cluster.bound_gpu_pods += 2


def test_pods_without_gpus_are_not_sent_to_the_extender(cluster):
    pod = _pod("cpu-only", "TEST-WHOLE")
    node = cluster.place(pod, gpu=False)
    assert node in ("w-a", "w-b", "w-drained")  # kube-scheduler alone: drained is fine for CPU
    assert httpx.get(f"{cluster.extender}/v1/explain/default/cpu-only").status_code == 404
