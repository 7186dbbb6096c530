"""The extender over real HTTP (uvicorn on a loopback port), with kube-scheduler 1.34 bodies."""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from scheduler_hook.app import create_app
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet, load_registry
from scheduler_hook.state import ClusterState
from netutil import free_port

FIX = Path(__file__).parent / "fixtures" / "kube-scheduler-1.34"


class Served:
    def __init__(self, hook: ExtenderHook) -> None:
        self.hook = hook
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(hook), host="127.0.0.1",
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)
        return self.client

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(5)


def fixture_state() -> ClusterState:
    """The two nodes of the captured requests, plus one the scheduler never mentions."""
    full = json.loads((FIX / "extender_args_full_nodes.json").read_text())
    st = ClusterState()
    for n in full["Nodes"]["items"]:
        st.upsert_node(n)
    st.upsert_node(make_node("other"))
    for i in range(4):  # 1-GPU pods only: fragmentation is flat, packing decides
        st.upsert_pod(make_pod(f"r{i}", gpus=1, node="gpu-node-2", phase="Running"))
    st.ready = True
    return st


@pytest.fixture(scope="module")
def served():
    hook = ExtenderHook(fixture_state(), ProviderSet(), load_config())
    s = Served(hook)
    with s as client:
        yield client, hook


def test_filter_answers_in_the_mode_of_each_captured_request(served):
    client, _ = served
    for name, cache in (("extender_args_node_cache.json", True),
                        ("extender_args_full_nodes.json", False)):
        body = (FIX / name).read_bytes()
        r = client.post("/scheduler/filter", content=body)
        assert r.status_code == 200
        out = r.json()
        assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                            "Error"}
        assert out["Error"] == "" and out["FailedNodes"] == {}
        if cache:
            assert out["Nodes"] is None and out["NodeNames"] == ["gpu-node-1", "gpu-node-2"]
        else:
            assert out["NodeNames"] is None
            sent = json.loads(body)["Nodes"]["items"]
            assert out["Nodes"]["items"] == sent  # full objects handed back unchanged


def test_prioritize_scores_only_input_names_as_integers_and_packs(served):
    client, _ = served
    args = json.loads((FIX / "extender_args_node_cache.json").read_text())
    args["NodeNames"] = ["gpu-node-1", "unknown-node", "gpu-node-2"]
    r = client.post("/scheduler/prioritize", json=args)
    assert r.status_code == 200
    out = r.json()
    assert [h["Host"] for h in out] == ["gpu-node-1", "gpu-node-2"]  # unknown ignored
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in out)
    scores = {h["Host"]: h["Score"] for h in out}
    assert scores["gpu-node-2"] > scores["gpu-node-1"]  # fallback packing: the half-used node


@pytest.mark.parametrize("body,reason", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"Nodes": null, "NodeNames": ["a"]}', "Pod"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": null}', "NodeNames"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', "list of strings"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}', "metadata.name"),
    (b'{"Pod": {"metadata": {}, "spec": {}}, "NodeNames": ["a"]}', "metadata.name"),
    (b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": '
     b'{"limits": {"nvidia.com/gpu": "lots"}}}]}}, "NodeNames": ["a"]}', "quantity"),
    (b'{"Pod": {"metadata": {"name": "p", "annotations": {"gpu-fraction": "1.7"}}}, '
     b'"NodeNames": ["a"]}', "gpu-fraction"),
    (b'{"Pod": {"metadata": {"name": "p", "uid": {"a": 1}}}, "NodeNames": ["a"]}',
     "metadata.uid"),
    (b'{"Pod": {"metadata": {"name": "p", "resourceVersion": [1]}}, "NodeNames": ["a"]}',
     "metadata.resourceVersion"),
])
def test_malformed_bodies_get_400_with_a_reason(served, body, reason):
    client, _ = served
    for verb in ("filter", "prioritize"):
        r = client.post(f"/scheduler/{verb}", content=body)
        assert r.status_code == 400, r.text
        assert reason in r.json()["error"]
    r = client.post("/scheduler/bind", content=b'{"PodName": 3}')
    assert r.status_code == 400


def test_go_field_names_match_case_insensitively_as_go_decodes_them(served):
    client, _ = served
    pod = make_pod("lower", gpus=1)
    exact = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["gpu-node-1"]})
    lower = client.post("/scheduler/filter", json={"pod": pod, "nodenames": ["gpu-node-1"]})
    assert lower.status_code == exact.status_code == 200 and lower.json() == exact.json()
    bind = client.post("/scheduler/bind", json={"podname": "", "node": "gpu-node-1"})
    assert bind.status_code == 400 and "PodName" in bind.json()["error"]


def test_a_new_pod_class_on_unknown_nodes_is_answered_without_an_error(served, caplog):
    client, hook = served
    pod = make_pod("new-class", gpus=3, workload="never-seen")
    with caplog.at_level(logging.ERROR, logger="foresight.extender"):
        for names in ([], ["ghost"]):
            f = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": names}).json()
            assert f["NodeNames"] == names and not f["Error"]  # no evidence against a node
            assert client.post("/scheduler/prioritize",
                               json={"Pod": pod, "NodeNames": names}).json() == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_health_ready_metrics_and_explain(served):
    client, hook = served
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["scoring"].startswith("fallback")
    assert ready.json()["providers"]["interference"]["status"] == "missing"
    assert "foresight_extender_fallback 1.0" in client.get("/metrics").text
    client.post("/scheduler/prioritize",
                content=(FIX / "extender_args_node_cache.json").read_bytes())
    ex = client.get("/v1/explain/default/gpu-pod-1").json()
    nodes = ex["prioritize"]["nodes"]
    assert {n["node"] for n in nodes} == {"gpu-node-1", "gpu-node-2"}
    comp = nodes[0]["components"]
    assert {"memory_fit", "fragmentation", "health", "packing"} <= set(comp)
    assert all(0 <= c["value"] <= 1 and c["reason"] for c in comp.values())
    assert client.get("/v1/explain/default/nobody").status_code == 404
    assert len(client.get("/v1/explain/default/gpu-pod-1?limit=1").json()
               ["prioritize"]["nodes"]) == 1
    bad = client.get("/v1/explain/default/gpu-pod-1?limit=-1")  # was: the last node dropped
    assert bad.status_code == 422 and "limit" in bad.text


def test_fractional_pod_filtered_from_nodes_without_a_share_left():
    st = ClusterState()
    st.replace_all([make_node("full", gpus=1), make_node("room", gpus=1)],
                   [make_pod("r", fraction=0.75, node="full", phase="Running")])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    with Served(hook) as client:
        pod = make_pod("p", fraction=0.5)
        out = client.post("/scheduler/filter", json={"Pod": pod, "Nodes": None,
                                                     "NodeNames": ["full", "room", "ghost"]}).json()
    assert out["NodeNames"] == ["room", "ghost"]  # unknown nodes pass: no evidence against
    assert "500 milli-GPU" in out["FailedNodes"]["full"]


class Exploding:
    def speeds(self, *a):
        raise RuntimeError("model file truncated")

    def peak_fb_mib(self, w):
        raise RuntimeError("model file truncated")

    def power_w(self, w):
        raise RuntimeError("model file truncated")


def test_crashing_loader_and_crashing_model_never_make_filter_reject(tmp_path):
    import sys
    import types

    mod = types.ModuleType("broken_loader_for_test")

    def load_provider(registry):
        raise OSError("cannot read manifest")

    mod.load_provider = load_provider
    sys.modules[mod.__name__] = mod
    prov = load_registry(str(tmp_path), {"interference": "broken_loader_for_test:load_provider",
                                         "fingerprint": "no.such.module:load"}, 3600)
    assert prov.status()["interference"]["status"] == "missing"
    assert "cannot read manifest" in prov.status()["interference"]["error"]
    st = ClusterState()
    st.replace_all([make_node(f"n{i}", gpus=1) for i in range(3)],
                   [make_pod("r", fraction=0.5, node="n0", phase="Running", workload="x")])
    pod = make_pod("p", fraction=0.25, workload="y",
                   annotations={"foresight.io/slo-min-speed": "0.99"})
    names = ["n0", "n1", "n2"]
    for providers in (prov, ProviderSet()):
        if providers is not prov:
            providers.set("interference", Exploding())
            providers.set("fingerprint", Exploding())
        hook = ExtenderHook(st, providers, load_config())
        with Served(hook) as client:
            out = client.post("/scheduler/filter",
                              json={"Pod": pod, "Nodes": None, "NodeNames": names})
            pri = client.post("/scheduler/prioritize",
                              json={"Pod": pod, "Nodes": None, "NodeNames": names})
        assert out.status_code == 200 and out.json()["NodeNames"] == names
        assert pri.status_code == 200 and len(pri.json()) == 3


def test_stale_interference_model_does_not_reject_but_fresh_one_does():
    from test_scores import Interference

    st = ClusterState()
    st.replace_all([make_node("a", gpus=1), make_node("b", gpus=1)],
                   [make_pod("ra", fraction=0.5, node="a", workload="noisy", phase="Running")])
    pod = make_pod("p", fraction=0.25, workload="me",
                   annotations={"foresight.io/slo-min-speed": "0.8"})
    model = Interference({("me", "noisy"): 0.5, ("noisy", "me"): 0.9})
    results = {}
    for label, age in (("fresh", 0), ("stale", 10 ** 6)):
        prov = ProviderSet()
        prov.set("interference", model, max_age_s=3600, loaded_at=time.time() - age)
        hook = ExtenderHook(st, prov, load_config())
        from scheduler_hook.wire import parse_args
        args = parse_args(json.dumps({"Pod": pod, "NodeNames": ["a", "b"]}).encode())
        results[label] = hook.filter(args)
    assert results["fresh"]["NodeNames"] == ["b"] and "minimum speed" in results["fresh"]["FailedNodes"]["a"]
    assert results["stale"]["NodeNames"] == ["a", "b"]


def test_each_decision_logs_one_structured_line(caplog):
    import logging

    from scheduler_hook.wire import parse_args

    hook = ExtenderHook(fixture_state(), ProviderSet(), load_config())
    body = (FIX / "extender_args_node_cache.json").read_bytes()
    with caplog.at_level(logging.INFO, logger="foresight.extender.decision"):
        hook.prioritize_json(parse_args(body))
    lines = [r.getMessage() for r in caplog.records if r.name == "foresight.extender.decision"]
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["verb"] == "prioritize" and rec["pod"] == "default/gpu-pod-1"
    assert rec["nodes"] == 2 and rec["best"] == "gpu-node-2" and rec["fallback"] is True


def test_healthz_answers_before_state_is_ready_and_readyz_says_why():
    from test_scores import Fingerprints, Interference

    st = ClusterState()  # nothing listed yet
    prov = ProviderSet()
    hook = ExtenderHook(st, prov, load_config())
    with Served(hook) as client:
        assert client.get("/healthz").status_code == 200
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["ready"] is False
        st.ready = True
        prov.set("interference", Interference({}))
        prov.set("fingerprint", Fingerprints({}))
        r = client.get("/readyz")
        assert r.status_code == 200 and r.json()["scoring"] == "model-based"
        assert "foresight_extender_fallback 0.0" in client.get("/metrics").text
