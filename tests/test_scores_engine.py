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
