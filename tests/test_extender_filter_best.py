"""filter-best: filter and prioritize in one call. It passes exactly the nodes that the
two-call answers would have kept with the highest prioritize score."""
from __future__ import annotations

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from scheduler_hook.app import create_app
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import parse_args


def _cluster(seed: int) -> tuple[ClusterState, list[str]]:
    """Nodes of 4 or 8 GPUs, some partly used, one drained: scores spread and tie."""
    rng = np.random.default_rng(seed)
    nodes, pods = [], []
    for i in range(24):
        gpus = int(rng.choice([4, 8]))
        ann = {"foresight.io/gpu-drained": "all"} if i == 5 else {}
        nodes.append(make_node(f"n{i}", gpus=gpus, annotations=ann))
        for j in range(int(rng.integers(0, gpus)) if i != 5 else 0):  # drained: empty
            frac = float(rng.choice([0.25, 0.5, 1.0]))
            pods.append(make_pod(f"b{i}-{j}", node=f"n{i}", phase="Running",
                                 **({"gpus": 1} if frac == 1.0 else {"fraction": frac})))
    st = ClusterState()
    st.replace_all(nodes, pods)
    st.ready = True
    return st, [f"n{i}" for i in range(24)]


def _expected(hook: ExtenderHook, body: bytes) -> list[str]:
    """What the two calls say: the filter's passing nodes with the top prioritize score
    (a node prioritize leaves out counts 0, as kube-scheduler adds nothing for it)."""
    kept = hook.filter(parse_args(body))["NodeNames"]
    scores = {p["Host"]: p["Score"] for p in orjson.loads(hook.prioritize_json(parse_args(body)))}
    top = max(scores.get(n, 0) for n in kept)
    return [n for n in kept if scores.get(n, 0) == top]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [{"gpus": 1}, {"gpus": 4}, {"fraction": 0.5},
                                   {"gpu_memory_mib": 60000.0}])
def test_best_is_the_top_scored_passing_nodes(seed, shape):
    st, names = _cluster(seed)
    hook = ExtenderHook(st, ProviderSet(), load_config())
    rng = np.random.default_rng(seed)
    window = [names[i] for i in rng.permutation(len(names))[:16]] + ["n5"]  # drained one in
    body = orjson.dumps({"Pod": make_pod("p", **shape), "Nodes": None, "NodeNames": window})
    got = hook.filter_best(parse_args(body))
    want = _expected(ExtenderHook(st, ProviderSet(), load_config()), body)
    assert got["NodeNames"] == want and want and "n5" not in want
    assert len(want) < len(hook.filter(parse_args(body))["NodeNames"])  # a choice was made
    assert set(got["FailedNodes"]) | set(got["FailedAndUnresolvableNodes"]) >= {"n5"}


def test_unknown_nodes_pass_only_while_no_known_node_scores_above_zero():
    st, names = _cluster(0)
    hook = ExtenderHook(st, ProviderSet(), load_config())
    pod = make_pod("p", gpus=1)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["ghost", *names[:8]]})
    got = hook.filter_best(parse_args(body))["NodeNames"]
    assert "ghost" not in got and got == _expected(hook, body)
    only_rejected = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["ghost", "n5"]})
    assert hook.filter_best(parse_args(only_rejected))["NodeNames"] == ["ghost"]


def test_filter_best_route_answers_what_the_hook_decides():
    st, names = _cluster(1)
    hook = ExtenderHook(st, ProviderSet(), load_config())
    body = orjson.dumps({"Pod": make_pod("p", fraction=0.25), "Nodes": None,
                         "NodeNames": names})
    with TestClient(create_app(hook)) as client:
        r = client.post("/scheduler/filter-best", content=body)
        assert r.status_code == 200
        assert r.json()["NodeNames"] == _expected(hook, body)
        bad = client.post("/scheduler/filter-best", content=b"{")
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]


def _filter_nodes_total(outcome: str) -> float:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("foresight_extender_filter_nodes_total",
                                     {"outcome": outcome}) or 0.0


def test_answer_leaves_out_failure_reasons_while_a_node_passes():
    """kube-scheduler reads the reasons only when no node is left: the answer carries them
    then, and not while some node passes (the decision, its explanation and the filter
    metrics still have them)."""
    st, names = _cluster(2)
    hook = ExtenderHook(st, ProviderSet(), load_config())
    pod = make_pod("p", gpus=1)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    decided = hook.filter_best(parse_args(body))
    assert decided["NodeNames"] and "n5" in decided["FailedAndUnresolvableNodes"]
    with TestClient(create_app(hook)) as client:
        before = _filter_nodes_total("unresolvable")
        got = client.post("/scheduler/filter-best", content=body).json()
        assert got["NodeNames"] == decided["NodeNames"]
        assert got["FailedNodes"] == {} and got["FailedAndUnresolvableNodes"] == {}
        assert _filter_nodes_total("unresolvable") - before == \
            len(decided["FailedAndUnresolvableNodes"])  # counted from the decision
        explained = client.get("/v1/explain/default/p").json()["filter"]["nodes"]
        assert [n["rejected"] for n in explained if n["node"] == "n5"][0]  # for whoever asks
        # the same in the mode where kube-scheduler sends whole Node objects
        full = orjson.dumps({"Pod": pod, "NodeNames": None, "Nodes": {"items": [
            {"metadata": {"name": n}} for n in names]}})
        got = client.post("/scheduler/filter-best", content=full).json()
        assert [o["metadata"]["name"] for o in got["Nodes"]["items"]] == decided["NodeNames"]
        assert got["FailedNodes"] == {} and got["FailedAndUnresolvableNodes"] == {}
        # nothing passes: every reason goes back, as the two-call filter sends them
        only = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["n5"]})
        got = client.post("/scheduler/filter-best", content=only).json()
        assert got["NodeNames"] == [] and "drained" in got["FailedAndUnresolvableNodes"]["n5"]
        assert got == client.post("/scheduler/filter", content=only).json()
