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


def test_fragmentation_reused_by_free_gpus_only_where_memory_and_model_match():
    """A row a binding changed takes the fragmentation of an earlier row with the same free
    GPUs, but only with the same GPU model and, for gpu-memory-sized pods, GPU memory."""
    st = ClusterState()
    filler = [make_node(f"f{i}", gpus=8) for i in range(40)]  # a mix of 200 pods seen: one
    pods = [make_pod(f"f{i}-{k}", fraction=0.5 if k % 2 else None, gpus=0 if k % 2 else 1,
                     node=f"f{i}", phase="Running")  # more pod does not refreeze it
            for i in range(40) for k in range(5)]
    st.replace_all([make_node("big", gpus=8, gpu_mem_mib=81920, product="A"),
                    make_node("small", gpus=8, gpu_mem_mib=16384, product="A"),
                    make_node("other", gpus=8, gpu_mem_mib=81920, product="B"), *filler], pods)
    st.upsert_pod(make_pod("used", gpus=1, node="big", phase="Running"))
    cfg_plain = load_config()
    cfg_plain["row_cache"] = False
    cached, plain = Scorer(st, ProviderSet(), load_config()), Scorer(st, ProviderSet(), cfg_plain)
    by_memory = parse_pod(make_pod("m", gpu_memory_mib=12288))
    on_a = make_pod("a", gpus=2)
    on_a["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "A"}
    by_model = parse_pod(on_a)
    names = ["big", "small", "other"]

    def same() -> None:
        for pod in (by_memory, by_model):
            a, b = cached.decide(pod, names), plain.decide(pod, names)
            np.testing.assert_allclose(a.total, b.total, atol=1e-12)
            np.testing.assert_allclose(a.values["fragmentation"], b.values["fragmentation"])

    same()
    same()  # both shapes are in the mix now
    mix = cached._mix_version
    for node in ("small", "other"):  # now free GPUs like "big": same key but for what differs
        st.upsert_pod(make_pod(f"on-{node}", gpus=1, node=node, phase="Running"))
        same()
    assert cached._mix_version == mix  # the rows were rescored under the same mix
