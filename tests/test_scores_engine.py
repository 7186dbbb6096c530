"""The engine's row cache gives exactly the decisions of scoring from scratch."""
from __future__ import annotations

import numpy as np

from scheduler_hook.config import load_config
from scheduler_hook.engine import Scorer
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.podspec import PodRequest, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState


def test_row_cache_matches_scoring_from_scratch_while_the_cluster_changes():
    rng = np.random.default_rng(3)
    st = ClusterState()
    health = {"foresight.io/gpu-health": '{"1": {"xid": 79}, "2": {"ecc_sbe": 2}}'}
    st.replace_all([make_node(f"n{i}", gpus=int(rng.choice([1, 2, 4, 8])),
                              annotations=health if i % 7 == 0 else None) for i in range(60)], [])
    cfg_cached, cfg_plain = load_config(), load_config()
    cfg_plain["row_cache"] = False
    cached, plain = Scorer(st, ProviderSet(), cfg_cached), Scorer(st, ProviderSet(), cfg_plain)
    names = [f"n{i}" for i in range(60)] + ["ghost"]
    shapes = [dict(fraction=0.25), dict(fraction=0.5), dict(gpus=1), dict(gpus=2),
              dict(gpus=4), dict(gpu_memory_mib=20480)]
    hits = 0
    for k in range(80):
        pod = parse_pod(make_pod(f"p{k}", **shapes[int(rng.integers(len(shapes)))]))
        subset = names if k % 3 else list(rng.permutation(names)[:30])
        a, b = cached.decide(pod, subset), plain.decide(pod, subset)
        assert a.names == b.names
        np.testing.assert_allclose(a.total, b.total, atol=1e-12)
        assert a.failed == b.failed and a.unresolvable == b.unresolvable
        hits += int(a.scores.max() > 0)
        best = a.names[int(np.argmax(a.total))]
        gpus = cached.choose_gpus(pod, best)
        if gpus:  # bind: one node changes, the cache must notice
            st.upsert_pod(PodRequest(**{**pod.__dict__, "node": best, "gpu_index": tuple(gpus),
                                        "phase": "Running"}))
    assert hits > 40
    assert sum(len(p.gpu_index) > 0 for p in st.pods.values()) > 30  # the cluster did change


def test_mix_derived_cache_follows_gpu_model_labels_and_the_mix():
    """The shape mix fragmentation scores against is kept across calls; a node relabelled
    in place (another GPU model), a new node and a refrozen mix must each rebuild it."""
    st = ClusterState()
    st.replace_all([make_node(f"n{i}", gpus=4, product="A" if i % 2 else "B")
                    for i in range(12)], [])
    cfg_plain = load_config()
    cfg_plain["row_cache"] = False
    cached, plain = Scorer(st, ProviderSet(), load_config()), Scorer(st, ProviderSet(), cfg_plain)

    def pod(k: int, **kw) -> PodRequest:
        obj = make_pod(f"p{k}", **kw)
        obj["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["A"]}]}]}}}
        return parse_pod(obj)

    def same(p: PodRequest) -> None:
        names = [f"n{i}" for i in range(13)]
        a, b = cached.decide(p, names), plain.decide(p, names)
        np.testing.assert_allclose(a.total, b.total, atol=1e-12)

    for k in range(6):  # a mix of model-constrained shapes, some bound
        p = pod(k, **(dict(fraction=0.5) if k % 2 else dict(gpus=2)))
        same(p)
        st.upsert_pod(PodRequest(**{**p.__dict__, "node": f"n{2 * k}", "phase": "Running"}))
    seen = pod(100, gpus=1)
    same(seen)  # the mix now holds every shape: asking again about `seen` refreezes nothing
    st.upsert_node(make_node("n1", gpus=4, product="C"))  # relabelled in place: A -> C
    same(seen)
    st.upsert_node(make_node("n12", gpus=8, product="D"))  # a new row, a new model
    same(seen)
    same(pod(101, fraction=0.25))  # a new shape: the mix refreezes
