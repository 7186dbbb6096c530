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


def _run(warm: bool, seed: int, lag: int = 0) -> tuple[list[tuple[bytes, bytes]], int]:
    """Filter and prioritize every pending pod in queue order; each pod's binding reaches
    the state `lag` pods later (kube-scheduler binds asynchronously: under a real one the
    binding lands one or two cycles after the answer). Returns the answers and how many
    pods were warmed just before their own filter."""
    nodes, bound, pending = _cluster(seed)
    st = ClusterState()
    st.replace_all(nodes, bound + pending)
    st.ready = True
    cfg = {**load_config(), "warm_ahead": warm}
    hook = ExtenderHook(st, ProviderSet(), cfg)
    warmed: list[str] = []
    real_warm = hook.scorer.warm
    hook.scorer.warm = lambda pod: (warmed.append(pod.key), real_warm(pod))  # type: ignore
    parser = ArgsParser()
    names = [n["metadata"]["name"] for n in nodes]
    order = sorted(pending, key=lambda p: (-p["spec"].get("priority", 0),
                                           p["metadata"]["name"]))
    rng = np.random.default_rng(seed + 1)
    out, due, ahead = [], [], 0
    for i, pod in enumerate(order):
        ahead += bool(warmed) and warmed[-1] == f"default/{pod['metadata']['name']}"
        window = [names[j] for j in sorted(rng.choice(60, size=30, replace=False))]
        args = parser(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": window}))
        filt = orjson.dumps(hook.filter(args))
        hook.warm_next()  # what each verb's handler runs once its answer is sent
        prio = hook.prioritize_json(args)
        hook.warm_next()
        out.append((filt, prio))
        passed = orjson.loads(filt)["NodeNames"]
        scores = {x["Host"]: x["Score"] for x in orjson.loads(prio)}
        best = max(passed, key=lambda n: (scores.get(n, 0), n)) if passed else ""
        due.append((i, pod, best))
        while due and due[0][0] <= i - lag:  # bindings the watch has seen by now
            j, p, node = due.pop(0)
            if node and j % 3:  # bind most pods, delete the others
                st.upsert_pod(parse_pod({**p, "spec": {**p["spec"], "nodeName": node}}))
            else:
                st.delete_pod("default", p["metadata"]["name"])
            hook.after_events()  # what the watcher runs once it applied a batch
    return out, ahead


def test_warm_next_leaves_every_answer_unchanged():
    for seed in (0, 1):
        for lag in (0, 1, 2):
            cold, none = _run(False, seed, lag)
            hot, ahead = _run(True, seed, lag)
            assert hot == cold
            assert none == 0
            # the pod warmed last before a filter is the one that filter asks about
            assert ahead >= 0.8 * len(hot), (seed, lag, ahead)


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
