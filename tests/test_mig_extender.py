"""MIG in the hook: nodes and pods read from upstream-shaped JSON, and the extender over real
HTTP keeping exactly the nodes where a MIG pod's profile and count are free."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from migutil import mig_pod, mixed_node, single_node
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PodSpecError, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState, parse_node
from test_extender_http import Served

BALANCED = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
SINGLE_1G = "A100-SXM4-40GB-MIG-1g.5gb"


def test_mixed_strategy_node_from_upstream_json():
    info = parse_node(mixed_node("m", BALANCED, gpus=8))
    assert info.mig is not None and info.mig.strategy == "mixed"
    assert info.mig.caps == {"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8}
    assert info.mig.slice_mib("3g.20gb") == 19968  # the GFD label, not the name's 20 GiB
    assert info.mig.config == "all-balanced" and info.mig.config_state == "success"
    assert info.gpu_count == 0  # mixed: nvidia.com/gpu counts only unsplit GPUs (none here)
    assert info.mig.physical_gpus(info.mig.model(info.gpu_mem_mib)) == 8


def test_single_strategy_node_is_not_whole_gpus():
    info = parse_node(single_node("s", "1g.5gb", 7, gpus=8))
    assert info.mig.strategy == "single" and info.mig.caps == {"1g.5gb": 56}
    assert info.mig.product == "A100-SXM4-40GB"
    assert info.gpu_count == 0  # its 56 nvidia.com/gpu are slices
    assert info.mig.physical_gpus(info.mig.model()) == 8


def test_plain_gpu_node_has_no_mig():
    assert parse_node(make_node("g", gpus=8)).mig is None


def test_mig_pods_are_a_shape_of_their_own():
    p = parse_pod(mig_pod("a", "3g.20gb", 2))
    assert (p.mig_profile, p.mig_count, p.mig_single, p.gpus) == ("3g.20gb", 2, False, 0)
    s = parse_pod(mig_pod("b", "1g.5gb", 3, single_product=SINGLE_1G))
    assert (s.mig_profile, s.mig_count, s.mig_single, s.gpus) == ("1g.5gb", 3, True, 0)
    # a declared gpu-memory does not turn a MIG pod into a fractional one
    m = parse_pod(mig_pod("c", "1g.5gb", annotations={"gpu-memory": "3000"}))
    assert (m.gpus, m.milli, m.mig_count, m.gpu_memory_mib) == (0, 0, 1, 3000.0)
    assert parse_pod(make_pod("w", gpus=2)).mig_count == 0


def test_two_profiles_in_one_pod_are_refused():
    pod = mig_pod("x", "1g.5gb")
    pod["spec"]["containers"].append(
        {"name": "b", "resources": {"limits": {"nvidia.com/mig-3g.20gb": "1"}}})
    with pytest.raises(PodSpecError, match="several MIG profiles"):
        parse_pod(pod)


def test_bound_mig_pods_take_devices_and_give_them_back():
    st = ClusterState()
    st.upsert_node(mixed_node("m", BALANCED, gpus=1))
    st.upsert_pod(mig_pod("r", "1g.5gb", 2, node="m", phase="Running"))
    assert st.mig_free["m"] == {"1g.5gb": 0, "2g.10gb": 1, "3g.20gb": 1}
    st.upsert_pod(mig_pod("r", "1g.5gb", 2, node="m", phase="Succeeded"))
    assert st.mig_free["m"]["1g.5gb"] == 2


def cluster() -> ClusterState:
    st = ClusterState()
    st.upsert_node(mixed_node("bal-full", BALANCED, gpus=1))     # its 3g is taken below
    st.upsert_node(mixed_node("bal-2", BALANCED, gpus=2))
    st.upsert_node(mixed_node("three-g", {"3g.20gb": 2}, gpus=1, config="all-3g.20gb"))
    st.upsert_node(mixed_node("one-g", {"1g.5gb": 7}, gpus=1, config="all-1g.5gb"))
    st.upsert_node(single_node("single", "1g.5gb", 7, gpus=1))
    st.upsert_node(make_node("whole", gpus=8, product="NVIDIA-A100-SXM4-40GB",
                             gpu_mem_mib=40960))
    st.upsert_pod(mig_pod("r1", "3g.20gb", node="bal-full", phase="Running"))
    st.upsert_pod(mig_pod("r2", "1g.5gb", 5, node="one-g", phase="Running"))
    st.upsert_pod(mig_pod("r3", "1g.5gb", 1, node="bal-2", phase="Running"))
    st.ready = True
    return st


NAMES = ["bal-full", "bal-2", "three-g", "one-g", "single", "whole"]
# (pod, nodes that must be kept), worked out by hand from the geometries and residents above
CASES = [
    (mig_pod("p3", "3g.20gb"), {"bal-2", "three-g"}),
    (mig_pod("p3x2", "3g.20gb", 2), {"bal-2", "three-g"}),
    (mig_pod("p3x3", "3g.20gb", 3), set()),
    (mig_pod("p1x2", "1g.5gb", 2), {"bal-full", "bal-2", "one-g"}),
    (mig_pod("p1x3", "1g.5gb", 3), {"bal-2"}),
    (mig_pod("p2", "2g.10gb"), {"bal-full", "bal-2"}),
    (mig_pod("p7", "7g.40gb"), set()),
    (mig_pod("ps", "1g.5gb", 7, single_product=SINGLE_1G), {"single"}),
    (mig_pod("ps8", "1g.5gb", 8, single_product=SINGLE_1G), set()),
    (make_pod("w", gpus=1), set(NAMES) - {"single"}),  # whole GPUs: never a single-MIG node
]


@pytest.fixture(scope="module")
def served():
    hook = ExtenderHook(cluster(), ProviderSet(), load_config())
    with Served(hook) as client:
        yield client, hook


@pytest.mark.parametrize("pod,kept", CASES, ids=[c[0]["metadata"]["name"] for c in CASES])
def test_filter_keeps_exactly_the_nodes_where_the_profile_is_free(served, pod, kept):
    client, _ = served
    body = {"Pod": pod, "NodeNames": NAMES, "Nodes": None}
    out = client.post("/scheduler/filter", content=orjson.dumps(body)).json()
    assert set(out["NodeNames"] or []) == kept
    assert set(out["FailedNodes"]) == set(NAMES) - kept
    assert all(out["FailedNodes"].values())  # every drop has a reason
    pr = client.post("/scheduler/prioritize", content=orjson.dumps(body)).json()
    assert [h["Host"] for h in pr] == NAMES
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in pr)
    if pod["metadata"]["name"].startswith("p") and kept:
        scores = {h["Host"]: h["Score"] for h in pr}
        # a MIG pod scores 0 where it cannot run, and the best kept node gets a real score
        assert all(scores[n] == 0 for n in set(NAMES) - kept)
        assert max(scores[n] for n in kept) >= 5


def test_prioritize_prefers_the_node_a_fragment_fits(served):
    client, _ = served
    # both nodes end with one 3g.20gb free, so the fragmentation change is the same; the
    # packing term then fills three-g (3 free slices left) and keeps bal-2 (10 left) emptier,
    # which is what lets the geometry planner re-split a GPU later
    body = {"Pod": mig_pod("pick", "3g.20gb"), "NodeNames": NAMES, "Nodes": None}
    scores = {h["Host"]: h["Score"] for h in
              client.post("/scheduler/prioritize", content=orjson.dumps(body)).json()}
    assert scores["three-g"] > scores["bal-2"]


def test_explain_names_the_profile_and_why_nodes_were_dropped(served):
    client, _ = served
    body = {"Pod": mig_pod("why", "3g.20gb"), "NodeNames": NAMES, "Nodes": None}
    client.post("/scheduler/filter", content=orjson.dumps(body))
    ex = client.get("/v1/explain/default/why").json()["filter"]
    assert ex["mig"] == {"profile": "3g.20gb", "count": 1, "strategy": "mixed",
                         "request": "nvidia.com/mig-3g.20gb: 1"}
    by = {n["node"]: n for n in ex["nodes"]}
    assert by["bal-full"]["rejected"] == "3g.20gb: 0 of 1 free, pod needs 1"
    assert "no 3g.20gb devices" in by["one-g"]["rejected"]
    assert "single strategy" in by["single"]["rejected"]
    assert "no MIG devices" in by["whole"]["rejected"]
    assert by["three-g"]["rejected"] is None
    assert "3g.20gb x1: 2 free, 1 after" in by["three-g"]["components"]["mig"]["reason"]
    assert "slice" in by["three-g"]["components"]["memory_fit"]["reason"]


def test_declared_memory_over_the_slice_scores_memory_fit_zero(served):
    client, hook = served
    pod = mig_pod("big", "1g.5gb", annotations={"gpu-memory": "8000"})
    body = {"Pod": pod, "NodeNames": NAMES, "Nodes": None}
    client.post("/scheduler/prioritize", content=orjson.dumps(body))
    ex = client.get("/v1/explain/default/big").json()["prioritize"]
    kept = [n for n in ex["nodes"] if not n["rejected"]]
    assert kept and all(n["components"]["memory_fit"]["value"] == 0 for n in kept)
    assert "4864 MiB of a 1g.5gb slice" in kept[0]["components"]["memory_fit"]["reason"]


def test_a_pod_with_two_profiles_is_a_400(served):
    client, _ = served
    pod = mig_pod("two", "1g.5gb")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-2g.10gb"] = "1"
    r = client.post("/scheduler/filter", content=orjson.dumps(
        {"Pod": pod, "NodeNames": NAMES, "Nodes": None}))
    assert r.status_code == 400 and "several MIG profiles" in r.json()["error"]


def test_metrics_count_free_mig_devices_and_stranded_slices(served):
    client, hook = served
    text = client.get("/metrics").text
    gauges = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("foresight_mig_")}
    # free 3g.20gb: bal-full 0 + bal-2 2 + three-g 2; 1g.5gb: bal-full 2 + bal-2 3 + one-g 2,
    # plus the single-strategy node's 7
    assert gauges['foresight_mig_devices_free{profile="3g.20gb"}'] == 4
    assert gauges['foresight_mig_devices_free{profile="1g.5gb"}'] == 14
    # three-g strands one compute slice in its geometry (3g + 3g); the 2g.10gb devices are
    # stranded only while no pod has asked for 2g.10gb (the module's tests ask for it)
    seen_2g = any(p == "2g.10gb" for p, _ in hook.state.mig_counts)
    assert gauges["foresight_mig_slices_stranded"] == 1 + (0 if seen_2g else 2 * 3)


class KindSpeeds:
    """Interference stub: 0.9 beside anyone on MIG pairs, 0.55 at node level, and records
    which sharing kinds it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def speeds(self, workload, others, sharing):
        self.asked.append(sharing)
        v = {"mig": 0.9, "node": 0.55}.get(sharing, 0.3)
        return np.full(len(others), v), np.full(len(others), v)


def test_mig_pods_use_the_mig_pairs_beside_mig_residents_and_never_gpu_sharing():
    from scheduler_hook.scores import ColocationSafety
    from scheduler_hook.scores.base import Context

    st = ClusterState()
    st.upsert_node(mixed_node("mig-node", BALANCED, gpus=1))
    mixed = mixed_node("mixed-node", BALANCED, gpus=1)
    mixed["status"]["allocatable"]["nvidia.com/gpu"] = "1"  # one GPU left unsplit
    st.upsert_node(mixed)
    st.upsert_pod(mig_pod("r-mig", "1g.5gb", node="mig-node", phase="Running"))
    st.upsert_pod(make_pod("r-whole", gpus=1, node="mixed-node", workload="train",
                           phase="Running"))
    model = KindSpeeds()
    providers = ProviderSet()
    providers.set("interference", model)
    rows, names = st.rows(["mig-node", "mixed-node"])
    res = ColocationSafety().score(Context(st, rows, parse_pod(mig_pod("p", "1g.5gb")),
                                           providers, load_config()))
    by = dict(zip(names, res.value.tolist()))
    # beside a MIG slice: the learned mig pairs (0.9); beside a whole-GPU pod: node level (0.55)
    assert by["mig-node"] == pytest.approx((0.9 - 0.5) / 0.5)
    assert by["mixed-node"] == pytest.approx((0.55 - 0.5) / 0.5)
    assert "timeslice" not in model.asked and "mps" not in model.asked
