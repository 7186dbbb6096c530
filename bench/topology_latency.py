"""Extender cost of the topology score (issue 31): interleaved A/B of Scorer.decide with and
without the topology component for plain 1- and 2-GPU pods (5,000-node synthetic cluster of
bench/extender_latency.py), then required-rack gang pods (4 x 8 GPUs) on the same cluster with
racks of 16 nodes. Usage: nice .venv/bin/python bench/topology_latency.py"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from extender_cluster import synthetic_cluster  # noqa: E402

from scheduler_hook.config import load_config  # noqa: E402
from scheduler_hook.fake_kube import make_pod  # noqa: E402
from scheduler_hook.hook import ExtenderHook  # noqa: E402
from scheduler_hook.podspec import PodRequest  # noqa: E402
from scheduler_hook.providers import ProviderSet  # noqa: E402
from scheduler_hook.state import ClusterState  # noqa: E402

nodes, pods = synthetic_cluster(5000)
st = ClusterState()
st.replace_all(nodes, pods)
st.ready = True
hook = ExtenderHook(st, ProviderSet(), load_config())
names = tuple(st.all_names())
comps_on = list(hook.scorer.components)
comps_off = [c for c in comps_on if c.name != "topology"]
res: dict[str, list[float]] = {"on": [], "off": []}
for i in range(400):  # interleaved: the machine's load falls on both alike
    mode = "on" if i % 2 else "off"
    hook.scorer.components = comps_on if mode == "on" else comps_off
    p = hook.pod(make_pod(f"x{i}", gpus=1 if i % 3 else 2))
    t = time.perf_counter()
    d = hook.scorer.decide(p, names)
    res[mode].append(time.perf_counter() - t)
    best = d.names[int(np.argmax(d.total))]
    st.upsert_pod(PodRequest(**{**p.__dict__, "node": best, "phase": "Running"}))
for k, v in res.items():
    v = np.array(v) * 1000
    print(f"plain pods, topology {k}: p50 {np.percentile(v, 50):.3f} ms, "
          f"p99 {np.percentile(v, 99):.3f} ms")
hook.scorer.components = comps_on
for i, n in enumerate(nodes):
    labels = {"cloud.provider.com/topology-rack": f"r{i // 16}"}
    st.upsert_node({**n, "metadata": {**n["metadata"], "labels": {**n["metadata"]["labels"],
                                                                  **labels}}})
ts = []
for i in range(80):
    p = make_pod(f"g{i}", gpus=8, annotations={
        "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack",
        "kueue.x-k8s.io/pod-group-total-count": "4"})
    p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = f"job{i // 4}"
    st.upsert_pod(p)
    q = hook.pod(p)
    t = time.perf_counter()
    d = hook.scorer.decide(q, names)
    ts.append(time.perf_counter() - t)
    ok = [j for j, n in enumerate(d.names) if n not in d.failed and n not in d.unresolvable]
    if ok:
        best = d.names[max(ok, key=lambda j: d.total[j])]
        st.upsert_pod(PodRequest(**{**q.__dict__, "node": best, "phase": "Running"}))
v = np.array(ts) * 1000
print(f"required-rack gang pods: p50 {np.percentile(v, 50):.3f} ms, p99 {np.percentile(v, 99):.3f} ms")
