"""Topology-aware gangs (issue 31): levels from node labels, gang placement per domain, the
reasons /v1/explain gives, and the per-level indicators."""
from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import REGISTRY

from scheduler_hook import indicators, topology as topo
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PodRequest, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.snapshot import load_snapshot
from scheduler_hook.state import ClusterState
from scheduler_hook.waiting import queue_and_gang
from test_extender_http import Served

RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
TG_BLOCK, CLIQUE = "network.topology.nvidia.com/block", "nvidia.com/gpu.clique"


def _nodes() -> list[dict]:
    """Two racks of two 8-GPU nodes in one block, Kueue/KAI cloud levels, topograph's block
    and GFD's NVLink clique (one clique per rack)."""
    out = []
    for r in ("a", "b"):
        for i in range(2):
            out.append(make_node(f"{r}{i}", labels={
                RACK: f"rack-{r}", BLOCK: "block-1", TG_BLOCK: "leaf-1",
                CLIQUE: f"cluster-uuid.{r}"}))
    return out


def _busy() -> list[dict]:
    """Rack a half used: best-fit packing alone would start a gang there."""
    return [make_pod(f"busy{i}", gpus=4, node=f"a{i}", phase="Running") for i in range(2)]


def _gang_pod(k: int, group: str = "job1", ann: dict | None = None,
              labels: dict | None = None) -> dict:
    p = make_pod(f"{group}-{k}", namespace="train", gpus=4, annotations=ann)
    p["metadata"]["labels"].update(labels or {})
    return p


KUEUE_REQ = {"kueue.x-k8s.io/podset-required-topology": RACK,
             "kueue.x-k8s.io/pod-group-total-count": "4"}
KUEUE_GROUP = {"kueue.x-k8s.io/pod-group-name": "job1"}


def _snapshot(tmp_path, pods: list[dict], extra: list[dict] = ()) -> ClusterState:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [*_nodes(), *_busy(), *pods, *extra]}))
    return load_snapshot(path)


def _schedule(client_or_hook, st: ClusterState, pods: list[dict], names: list[str]) -> dict:
    """What kube-scheduler does per pod: filter, prioritize the survivors, bind the best (the
    watch then reports the binding: the state gets the pod on its node)."""
    placed = {}
    for p in pods:
        if hasattr(client_or_hook, "post"):
            f = client_or_hook.post("/scheduler/filter", json={
                "Pod": p, "Nodes": None, "NodeNames": names}).json()
            ok = f["NodeNames"]
            scores = {h["Host"]: h["Score"] for h in client_or_hook.post(
                "/scheduler/prioritize", json={"Pod": p, "Nodes": None, "NodeNames": ok}).json()}
        else:
            d = client_or_hook.scorer.decide(client_or_hook.pod(p), names)
            ok = [n for n in names if n not in d.failed and n not in d.unresolvable]
            scores = dict(zip(d.names, d.scores.tolist()))
        assert ok, f"no node left for {p['metadata']['name']}"
        best = max(ok, key=lambda n: (scores[n], -ok.index(n)))
        st.upsert_pod(PodRequest(**{**parse_pod(p).__dict__, "node": best, "phase": "Running"}))
        placed[p["metadata"]["name"]] = best
    return placed


def test_levels_and_gang_requests_are_read_from_the_conventions():
    assert topo.pod_topology({}, KUEUE_REQ) == (4, RACK, "")
    assert topo.pod_topology({}, {"kai.scheduler/topology-preferred-placement": RACK,
                                  "foresight.io/gang-size": "8"}) == (8, "", RACK)
    assert topo.pod_topology({}, {"foresight.io/gang-size": "many"}) == (0, "", "")
    assert queue_and_gang("ns", KUEUE_GROUP, {})[1] == "ns/job1"
    assert queue_and_gang("ns", {}, {"pod-group-name": "pg"})[1] == "ns/pg"
    assert queue_and_gang("ns", {}, {"scheduling.k8s.io/group-name": "vc"})[1] == "ns/vc"
    dom = topo.encode([n["metadata"]["labels"] for n in _nodes()] + [None], topo.DEFAULT_LEVELS,
                      ["a0", "a1", "b0", "b1", ""])
    assert dom.levels == (CLIQUE, TG_BLOCK, RACK, BLOCK, topo.HOSTNAME)
    assert dom.codes[RACK].tolist() == [0, 0, 1, 1, -1]
    assert dom.nested(CLIQUE, RACK) and dom.nested(topo.HOSTNAME, RACK)
    assert dom.nested(RACK, BLOCK) and not dom.nested(BLOCK, RACK)


def test_first_pod_goes_to_the_smallest_domain_that_holds_the_gang():
    # rack x: 4 nodes, 2 of them an NVLink clique; rack y: 4 nodes, no clique label
    labels = [{RACK: "x", CLIQUE: "c1"}, {RACK: "x", CLIQUE: "c1"}, {RACK: "x"}, {RACK: "x"},
              {RACK: "y"}, {RACK: "y"}, {RACK: "y"}, {RACK: "y"}]
    dom = topo.encode(labels, topo.DEFAULT_LEVELS, [f"n{i}" for i in range(8)])
    slots = np.full(8, 2)  # two 4-GPU pods per node
    plan = topo.plan_gang(dom, RACK, slots, np.full(8, 8), 4, np.array([], np.int64))
    assert plan.target == (CLIQUE, 0) and plan.value[:2].tolist() == [1.0, 1.0]
    assert (plan.value[2:] < 1).all() and plan.allowed.all()
    # a gang-mate already in rack y: only rack y
    plan = topo.plan_gang(dom, RACK, slots, np.full(8, 8), 3, np.array([5]))
    assert plan.allowed.tolist() == [False] * 4 + [True] * 4 and plan.anchor_pods == 1
    # nothing fits a gang of 9: required placement allows no node
    assert not topo.plan_gang(dom, RACK, slots, np.full(8, 8), 9, np.array([], np.int64)
                              ).allowed.any()


def test_without_a_topology_request_the_gang_spreads_over_racks(tmp_path):
    st = _snapshot(tmp_path, [])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    pods = [_gang_pod(k, labels=KUEUE_GROUP) for k in range(4)]
    placed = _schedule(hook, st, pods, ["a0", "a1", "b0", "b1"])
    assert {n[0] for n in placed.values()} == {"a", "b"}  # what the topology score prevents


def test_kueue_gang_kept_in_one_rack_over_http_and_explain_says_why(tmp_path):
    pods = [_gang_pod(k, ann=KUEUE_REQ, labels=KUEUE_GROUP) for k in range(4)]
    st = _snapshot(tmp_path, pods)  # the gang's pods are pending in the snapshot
    hook = ExtenderHook(st, ProviderSet(), load_config())
    names = ["a0", "a1", "b0", "b1"]
    with Served(hook) as client:
        placed = _schedule(client, st, pods, names)
        assert sorted(placed.values()) == ["b0", "b0", "b1", "b1"], placed
        first = client.get("/v1/explain/train/job1-0").json()
        dropped = {n["node"]: n for n in first["filter"]["nodes"]}["a0"]
        assert "rack-a can take 2 of its 4 remaining pod(s)" in dropped["rejected"]
        last = client.get("/v1/explain/train/job1-3").json()
        dropped = {n["node"]: n for n in last["filter"]["nodes"]}["a1"]
        assert "3 placed pod(s) are in topology-rack rack-b" in dropped["rejected"]
        assert "this node is in topology-rack rack-a" in dropped["rejected"]
        assert dropped["components"]["topology"]["value"] == 0.0
        kept = {n["node"]: n for n in last["prioritize"]["nodes"]}["b1"]
        assert "rack-b, where 3 pod(s) of gang train/job1 are" in \
            kept["components"]["topology"]["reason"]
        metrics = client.get("/metrics").text
        assert f'foresight_cluster_domains_free{{level="{RACK}"}} 0.0' in metrics  # all used
        assert f'foresight_cluster_domains{{level="{CLIQUE}"}} 2.0' in metrics


def test_volcano_gang_with_kai_required_placement_and_a_steer_before_the_binding(tmp_path):
    ann = {"scheduling.k8s.io/group-name": "vc", "kai.scheduler/topology-required-placement":
           RACK}
    pods = [_gang_pod(k, group="vc", ann=ann) for k in range(2)]
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "vc", "namespace": "train"}, "spec": {"minMember": 4}}
    st = _snapshot(tmp_path, [], [group])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    names = ["a0", "a1", "b0", "b1"]
    first = hook.scorer.decide(hook.pod(pods[0]), names)
    assert set(first.failed) == {"a0", "a1"} and "can take 2 of its 4" in first.failed["a0"]
    # the second pod is scored before the first one's binding shows: the same domain
    second = hook.scorer.decide(hook.pod(pods[1]), names)
    assert set(second.failed) == {"a0", "a1"}
    comp = next(c for c in hook.scorer.components if c.name == "topology")
    assert comp._steered["train/vc"][0] in (RACK, CLIQUE)


def test_kai_preferred_with_a_podgroup_size_scores_the_rack_and_filters_nothing(tmp_path):
    ann = {"kai.scheduler/topology-preferred-placement": RACK}
    pods = [_gang_pod(k, group="pg", ann=ann, labels={"scheduling.x-k8s.io/pod-group": "pg"})
            for k in range(4)]
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "pg", "namespace": "train"}, "spec": {"minMember": 4}}
    st = _snapshot(tmp_path, [], [group])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    d = hook.scorer.decide(hook.pod(pods[0]), ["a0", "a1", "b0", "b1"])
    assert not d.failed and not d.unresolvable
    placed = _schedule(hook, st, pods, ["a0", "a1", "b0", "b1"])
    assert {n[0] for n in placed.values()} == {"b"}


def test_clique_inside_the_rack_is_preferred_and_state_follows_relabels():
    nodes = [make_node(f"n{i}", labels={RACK: "r1", **({CLIQUE: "c"} if i >= 2 else {})})
             for i in range(4)]
    st = ClusterState()
    st.replace_all(nodes, [])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    pods = [_gang_pod(k, ann={"kueue.x-k8s.io/podset-preferred-topology": RACK,
                              "foresight.io/gang-size": "2"}, labels=KUEUE_GROUP)
            for k in range(2)]
    pods = [{**p, "spec": {**p["spec"], "containers": [{**p["spec"]["containers"][0],
            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}} for p in pods]
    placed = _schedule(hook, st, pods, ["n0", "n1", "n2", "n3"])
    assert sorted(placed.values()) == ["n2", "n3"]  # the NVLink clique, not the bare nodes
    with st.lock:
        v = topo.state_domains(st)
        st.upsert_node(make_node("n0", labels={RACK: "r2"}))
        assert topo.state_domains(st) is not v
        assert set(topo.state_domains(st).values[RACK]) == {"r1", "r2"}


def test_domains_free_and_fragmentation_per_level(tmp_path):
    st = _snapshot(tmp_path, [])
    got = indicators.domains(st)
    assert got[RACK] == (2, 1, pytest.approx(1 / 3))  # rack b all free; 8 of the 24 free in a
    assert got[BLOCK] == (1, 0, pytest.approx(1.0))
    assert got[topo.HOSTNAME][:2] == (4, 2)
    indicators.Indicators(st).refresh()
    get = REGISTRY.get_sample_value
    assert get("foresight_cluster_domains_free", {"level": RACK}) == 1
    assert get("foresight_cluster_domain_fragmentation_ratio", {"level": RACK}) == \
        pytest.approx(1 / 3)
    assert get("foresight_cluster_domains", {"level": CLIQUE}) == 2


def test_elastic_gang_starts_at_the_largest_size_one_rack_holds(tmp_path):
    st = _snapshot(tmp_path, [])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    names = ["a0", "a1", "b0", "b1"]
    six = {"kueue.x-k8s.io/podset-required-topology": RACK, "foresight.io/gang-size": "6"}
    rigid = hook.scorer.decide(hook.pod(_gang_pod(0, group="el", ann=six, labels={
        "kueue.x-k8s.io/pod-group-name": "el"})), names)
    assert set(rigid.failed) == set(names)  # no rack holds six 4-GPU pods: it waits
    pod = _gang_pod(0, group="el2", ann={**six, "foresight.io/gang-min": "2"},
                    labels={"kueue.x-k8s.io/pod-group-name": "el2"})
    assert parse_pod(pod).gang_min == 2
    d = hook.scorer.decide(hook.pod(pod), names)
    assert set(d.failed) == {"a0", "a1"}  # rack b holds 4 of the 6 now, rack a only 2
    comp = next(c for c in hook.scorer.components if c.name == "topology")
    from scheduler_hook.scores.base import Context
    ctx = Context(st, st.rows(["b0"])[0], hook.pod(pod), hook.providers, hook.cfg)
    assert "elastic: starts at 4 of 6" in comp.score(ctx).reason(0)
