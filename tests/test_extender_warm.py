"""Scoring the next pending pod ahead (ExtenderHook.warm_next) never changes an answer."""
from __future__ import annotations

import numpy as np
import orjson

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import ArgsParser

PRODUCTS = ("NVIDIA-H100", "NVIDIA-A100-SXM4-40GB", "Tesla-V100")


def _cluster(seed: int) -> tuple[list[dict], list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    nodes = [make_node(f"n{i}", gpus=int(rng.choice([2, 4, 8])),
                       product=PRODUCTS[i % len(PRODUCTS)]) for i in range(60)]
    bound = [make_pod(f"b{i}", gpus=1, node=f"n{int(rng.integers(0, 60))}", phase="Running",
                      workload=f"w{i % 5}") for i in range(40)]
    bound += [make_pod(f"f{i}", fraction=0.5, node=f"n{int(rng.integers(0, 60))}",
                       phase="Running") for i in range(20)]
    pending = []
    for i in range(50):
        kind = rng.integers(0, 4)
        pending.append(make_pod(f"p{i:02d}", gpus=int(rng.choice([1, 2, 4])) if kind < 2 else 0,
                                fraction=0.25 if kind == 2 else None,
                                gpu_memory_mib=20480 if kind == 3 else None,
                                workload=f"w{i % 7}", priority=int(rng.choice([0, 0, 100]))))
    return nodes, bound, pending


def _run(warm: bool, seed: int) -> list[tuple[bytes, bytes]]:
    nodes, bound, pending = _cluster(seed)
    st = ClusterState()
    st.replace_all(nodes, bound + pending)
    st.ready = True
    cfg = {**load_config(), "warm_ahead": warm}
    hook = ExtenderHook(st, ProviderSet(), cfg)
    parser = ArgsParser()
    names = [n["metadata"]["name"] for n in nodes]
    order = sorted(pending, key=lambda p: (-p["spec"].get("priority", 0),
                                           p["metadata"]["name"]))
    rng = np.random.default_rng(seed + 1)
    out, warmed = [], 0
    for i, pod in enumerate(order):
        window = [names[j] for j in sorted(rng.choice(60, size=30, replace=False))]
        args = parser(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": window}))
        filt = orjson.dumps(hook.filter(args))
        prio = hook.prioritize_json(args)
        out.append((filt, prio))
        hook.warm_next()  # what the prioritize handler runs once its answer is sent
        passed = orjson.loads(filt)["NodeNames"]
        scores = {x["Host"]: x["Score"] for x in orjson.loads(prio)}
        if passed and i % 3:  # bind most pods, delete the others
            best = max(passed, key=lambda n: (scores.get(n, 0), n))
            bound_pod = parse_pod({**pod, "spec": {**pod["spec"], "nodeName": best}})
            st.upsert_pod(bound_pod)
        else:
            st.delete_pod("default", pod["metadata"]["name"])
        before = {k: c.gen for k, c in hook.scorer._caches.items()}
        hook.after_events()  # what the watcher runs once it applied the binding
        warmed += any(c.gen != before.get(k) for k, c in hook.scorer._caches.items())
    assert not warm or warmed > 5  # the warm path did run
    return out


def test_warm_next_leaves_every_answer_unchanged():
    for seed in (0, 1):
        assert _run(True, seed) == _run(False, seed)


def test_pending_pods_tracked_until_bound_or_deleted():
    st = ClusterState()
    st.upsert_node(make_node("a", gpus=2))
    st.upsert_pod(make_pod("p", gpus=1))
    st.upsert_pod(make_pod("cpu-only"))
    assert list(st.pending) == ["default/p"]
    st.upsert_pod(make_pod("p", gpus=1, node="a", phase="Running"))
    assert not st.pending
    st.upsert_pod(make_pod("q", gpus=1))
    st.delete_pod("default", "q")
    assert not st.pending
    st.upsert_pod(make_pod("r", gpus=1))
    st.replace_pods([])
    assert not st.pending
