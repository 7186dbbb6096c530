"""GPU-model requirements (nodeSelector / required affinity on nvidia.com/gpu.product) through
the extender over real HTTP, with the kube-scheduler 1.34 request bodies (committed copies)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PRODUCT_LABEL, PodSpecError, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from test_extender_http import Served

FIX = Path(__file__).parent / "fixtures" / "kube-scheduler-1.34"
T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"


def _affinity(*terms: list[dict]) -> dict:
    """spec.affinity as kubectl / the API server write it."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}}}


def _expr(op: str, *values: str, key: str = PRODUCT_LABEL) -> dict:
    return {"key": key, "operator": op, "values": list(values)}


def test_requirement_read_from_node_selector_and_required_affinity():
    pod = make_pod("p", gpus=1)
    assert parse_pod(pod).gpu_models == ()  # no requirement: any model
    pod["spec"]["nodeSelector"] = {PRODUCT_LABEL: T4, "kubernetes.io/os": "linux"}
    req = parse_pod(pod)
    assert req.allows_model(T4) and not req.allows_model(A100)
    pod = make_pod("p", gpus=1)
    pod["spec"]["affinity"] = _affinity([_expr("In", T4, "Tesla-P100")],
                                        [_expr("NotIn", T4, A100), _expr("In", "x", key="zone")])
    req = parse_pod(pod)  # terms ORed: P100 and T4 by the first, anything but T4/A100 by the second
    assert [req.allows_model(m) for m in (T4, "Tesla-P100", A100, "H100")] == \
        [True, True, False, True]
    pod["spec"]["affinity"] = _affinity([_expr("In", T4)], [_expr("In", "a", key="zone")])
    assert parse_pod(pod).gpu_models == ()  # a term without the label admits every model
    pod["spec"]["nodeSelector"] = {PRODUCT_LABEL: A100}  # ANDed with the affinity terms
    pod["spec"]["affinity"] = _affinity([_expr("In", T4, A100)])
    req = parse_pod(pod)
    assert req.allows_model(A100) and not req.allows_model(T4)
    pod["spec"]["affinity"] = {"nodeAffinity": "yes"}
    with pytest.raises(PodSpecError, match="nodeAffinity"):
        parse_pod(pod)


def _cluster() -> ClusterState:
    """The captured requests' two nodes, labelled as GPU feature discovery would: T4 and A100."""
    full = json.loads((FIX / "extender_args_full_nodes.json").read_text())
    st = ClusterState()
    for n, product in zip(full["Nodes"]["items"], (T4, A100)):
        n = copy.deepcopy(n)
        n["metadata"]["labels"][PRODUCT_LABEL] = product
        st.upsert_node(n)
    st.ready = True
    return st


def _requests(pod_spec_patch: dict) -> list[dict]:
    """Both captured bodies (node-cache and full nodes) with the pod's spec patched."""
    out = []
    for name in ("extender_args_node_cache.json", "extender_args_full_nodes.json"):
        args = json.loads((FIX / name).read_text())
        args["Pod"]["spec"].update(copy.deepcopy(pod_spec_patch))
        out.append(args)
    return out


@pytest.mark.parametrize("patch", [
    {"nodeSelector": {PRODUCT_LABEL: T4}},
    {"affinity": _affinity([_expr("In", T4)])},
    {"affinity": _affinity([_expr("NotIn", A100)])},
])
def test_pod_is_scored_only_against_gpus_of_its_model(patch):
    hook = ExtenderHook(_cluster(), ProviderSet(), load_config())
    with Served(hook) as client:
        for args in _requests(patch):
            f = client.post("/scheduler/filter", json=args).json()
            assert set(f["FailedNodes"]) == {"gpu-node-2"}
            assert "not allowed" in f["FailedNodes"]["gpu-node-2"]
            kept = f["NodeNames"] if args["NodeNames"] is not None else \
                [n["metadata"]["name"] for n in f["Nodes"]["items"]]
            assert kept == ["gpu-node-1"]
            p = {h["Host"]: h["Score"] for h in
                 client.post("/scheduler/prioritize", json=args).json()}
            assert p["gpu-node-2"] == 0 and p["gpu-node-1"] > 0
        # the same pod without the requirement may use both
        free = json.loads((FIX / "extender_args_node_cache.json").read_text())
        f = client.post("/scheduler/filter", json=free).json()
        assert f["FailedNodes"] == {} and f["NodeNames"] == ["gpu-node-1", "gpu-node-2"]


def test_constrained_demand_counts_only_on_its_model_in_the_mix():
    """Pods seen that must run on A100 make an unconstrained GPU share keep off the A100 node:
    their whole-GPU shape can use only A100 GPUs, so breaking one there fragments the cluster
    for them, and breaking a T4 does not. Without the requirement the two nodes tie."""
    def scores(constrained: bool) -> dict[str, float]:
        st = ClusterState()
        st.replace_all([make_node("t4", gpus=2, product=T4),
                        make_node("a100", gpus=2, product=A100)], [])
        for i in range(20):
            seen = make_pod(f"s{i}", gpus=1)
            if constrained:
                seen["spec"]["nodeSelector"] = {PRODUCT_LABEL: A100}
            st.upsert_pod(seen)
        st.ready = True
        hook = ExtenderHook(st, ProviderSet(), load_config())
        pod = make_pod("p", fraction=0.5)
        with Served(hook) as client:
            client.post("/scheduler/prioritize",
                        json={"Pod": pod, "Nodes": None, "NodeNames": ["t4", "a100"]})
            ex = client.get("/v1/explain/default/p").json()
        return {n["node"]: n["components"]["fragmentation"]["value"]
                for n in ex["prioritize"]["nodes"]}

    free, bound = scores(False), scores(True)
    assert free["t4"] == free["a100"]
    assert bound["t4"] > bound["a100"]
