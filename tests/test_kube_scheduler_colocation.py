"""The co-location gate per GPU inside a real kube-scheduler v1.34 (../shared/k8s), with the
models the retraining job publishes: a pod with `foresight.io/min-speed` is bound to the GPU
of a node where its floor holds beside every pod already there, and refused where none does.

Residents are created already bound (spec.nodeName and `foresight.io/gpu-index`), as pods the
device plugin placed; only the pending pod goes through kube-scheduler and the extender, whose
bind verb is on (deploy/kube-scheduler-config.yaml ships it commented out).
"""
from __future__ import annotations

import time
from typing import Iterator

import httpx
import pytest
import yaml

from k8s_support import control_plane
from scheduler_hook.kube_local import SCHEDULER_CONFIG, ControlPlane, gpu_node, gpu_pod, \
    start_extender
from scheduler_hook.state import SHARING_LABEL

SCHED = "foresight-scheduler"
FLOOR = "0.7"
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _resident(name: str, node: str, gpu: int) -> dict:
    pod = gpu_pod(name, SCHED, fraction=0.25, labels={"foresight.io/workload": "notebook"},
                  annotations={"foresight.io/gpu-index": str(gpu)})
    pod["spec"]["nodeName"] = node
    return pod


def _pending(name: str, product: str) -> dict:
    pod = gpu_pod(name, SCHED, fraction=0.25, labels={"foresight.io/workload": "notebook"},
                  annotations={"foresight.io/min-speed": FLOOR})
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return pod


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, registry) -> Iterator[tuple[ControlPlane, str]]:
    cp = control_plane(tmp_path_factory.mktemp("k8s-coloc"))
    ext = None
    # the device plugin's time-slicing with 4 replicas: each GPU advertised 4 times
    ts = {SHARING_LABEL: "time-slicing", "nvidia.com/gpu.replicas": "4"}
    try:
        # c-a: GPU 0 holds two notebooks, GPU 1 one; c-b: its only GPU holds two
        cp.create_nodes([gpu_node("c-a", 8, "TEST-COLOC", labels=ts),
                         gpu_node("c-b", 4, "TEST-CROWDED", labels=ts)])
        for pod in (_resident("r0", "c-a", 0), _resident("r1", "c-a", 0),
                    _resident("r2", "c-a", 1), _resident("r3", "c-b", 0),
                    _resident("r4", "c-b", 0)):
            cp.create_pod(pod)
        ext, url = start_extender(cp.kubeconfig, registry=registry)
        deadline = time.time() + 30
        while httpx.get(url + "/readyz").json()["pods"] < 5:
            assert time.time() < deadline, "the extender never saw the residents"
            time.sleep(0.05)
        # the shipped config with its bindVerb on: the extender pins shares to GPUs
        cfg = yaml.safe_load(SCHEDULER_CONFIG.read_text())
        cfg["extenders"][0]["bindVerb"] = "bind"
        path = tmp_path_factory.mktemp("cfg") / "kube-scheduler-config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cp.start_scheduler(extender_url=url, scheduler_name=SCHED, config=path)
        yield cp, url
    finally:
        if ext is not None:
            ext.terminate()
            ext.wait(10)
        cp.stop()


def test_the_pod_is_bound_to_the_gpu_where_its_floor_holds(cluster, registry):
    from artifacts.adapters import InterferenceAdapter
    from serving.store import ModelStore

    cp, url = cluster
    # the published model's admission bounds, asked by name as the extender asks them:
    # one notebook neighbour keeps the floor, two together break it
    st = ModelStore(str(registry))
    st.refresh()
    a = InterferenceAdapter(st.get("interference").model)
    s, _ = a.speeds("notebook", ["notebook"], "timeslice")
    lo, _ = a.bounds("notebook", ["notebook"], "timeslice")
    u, _ = a.units("notebook", ["notebook"], "timeslice")
    one = float(a.admit_bound("timeslice", s, u, lo, float(FLOOR))[0])
    two = 1 / (1 + 2 * (1 / one - 1))
    assert two < float(FLOOR) <= one, (one, two)

    cp.create_pod(_pending("nb", "TEST-COLOC"))
    assert cp.wait_bound(["nb"], timeout_s=30)["nb"] == "c-a"
    pod = next(p for p in cp.pods("foresight.io/workload=notebook")
               if p["metadata"]["name"] == "nb")
    assert pod["metadata"]["annotations"]["foresight.io/gpu-index"] == "1"
    got = httpx.get(f"{url}/v1/explain/default/nb").json()
    kept = {n["node"]: n for n in got["filter"]["nodes"]}
    assert not kept["c-a"]["rejected"]


def test_a_node_whose_only_gpu_is_crowded_is_refused_saying_why(cluster):
    cp, url = cluster
    cp.create_pod(_pending("nb-crowded", "TEST-CROWDED"))
    deadline = time.time() + 30
    while True:
        r = httpx.get(f"{url}/v1/explain/default/nb-crowded")
        if r.status_code == 200 and r.json().get("filter"):
            break
        assert time.time() < deadline, r.text
        time.sleep(0.1)
    nodes = {n["node"]: n for n in r.json()["filter"]["nodes"]}
    assert "minimum speed broken on every GPU" in nodes["c-b"]["rejected"]
    pod = next(p for p in cp.pods("foresight.io/workload=notebook")
               if p["metadata"]["name"] == "nb-crowded")
    assert not pod["spec"].get("nodeName")  # kube-scheduler could not bind it
