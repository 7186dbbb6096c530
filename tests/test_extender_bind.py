"""The bind verb for fractional GPU pods against the loopback fake apiserver, over HTTP."""
from __future__ import annotations

import pytest
from kubernetes import client

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import FakeKubeAPI, make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from test_extender_http import Served


@pytest.fixture
def setup():
    api = FakeKubeAPI().start()
    node = make_node("a", gpus=2)
    pods = [make_pod("r", fraction=0.5, node="a", phase="Running",
                     annotations={"foresight.io/gpu-index": "1"}),
            make_pod("p", fraction=0.5)] + [make_pod(f"w{i}", gpus=1) for i in range(5)]
    api.put("nodes", node)
    for p in pods:
        api.put("pods", p)
    st = ClusterState()
    st.replace_all([node], pods)
    st.ready = True
    cfg = client.Configuration()
    cfg.host = api.url
    hook = ExtenderHook(st, ProviderSet(), load_config(),
                        core_api=client.CoreV1Api(client.ApiClient(cfg)))
    yield api, hook, st
    api.stop()


def test_bind_chooses_the_gpu_that_fragments_least_annotates_and_binds(setup):
    api, hook, st = setup
    with Served(hook) as http:
        r = http.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                               "PodUID": "uid-default-p", "Node": "a"})
    assert r.status_code == 200 and r.json() == {"Error": ""}
    patches = [b for m, p, b in api.requests if m == "PATCH"]
    # whole-GPU pods dominate the mix: the half-used GPU 1 is the one to fill
    assert patches == [{"metadata": {"annotations": {"foresight.io/gpu-index": "1"}}}]
    binds = [(p, b) for m, p, b in api.requests if m == "POST"]
    assert len(binds) == 1 and binds[0][0].endswith("/namespaces/default/pods/p/binding")
    assert binds[0][1]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "a"}
    assert api.objects["pods"]["default/p"]["spec"]["nodeName"] == "a"
    r = st.index["a"]
    assert st.free_milli[r, :2].tolist() == [1000.0, 0.0]  # accounted before any watch event


def test_bind_reports_errors_in_the_result(setup):
    api, hook, st = setup
    with Served(hook) as http:
        wrong = http.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                                   "PodUID": "other-uid", "Node": "a"}).json()
        ghost = http.post("/scheduler/bind", json={"PodName": "ghost", "PodNamespace": "default",
                                                   "PodUID": "", "Node": "a"}).json()
    assert "UID" in wrong["Error"] and "bind failed" in ghost["Error"]
    assert not [1 for m, *_ in api.requests if m in ("PATCH", "POST")]
    hook.core_api = None
    assert "Kubernetes API" in hook.bind(type("B", (), {"name": "p", "namespace": "default",
                                                        "uid": "", "node": "a"})())["Error"]
