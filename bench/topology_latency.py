"""Extender cost of the topology score (issue 31) on the 5,000-node synthetic cluster of
bench/extender_latency.py, Scorer.decide per pod (filter and prioritize share it):
1. plain 1-/2-GPU pods, interleaved with and without the topology component;
2. the same with `topology.keep_level` (racks kept whole-free for a forecast of 64 GPUs of gang
   demand), interleaved against the component off;
3. required-rack gang pods (4 x 8 GPUs, racks of 16 nodes);
4. preferred-rack gang pods of 16 x 8 GPUs with run-time predictions: no rack holds one now,
   so each first pod reads the predicted departures (the "soon" path);
5. plain pods with `topology.pack` (run-time predictions: where a pod's predicted end does
   not prolong how long an 8-GPU node stays taken), interleaved against the component off;
6. the same with `topology.pack_level` (then taken nodes of racks no 4-pod gang fits in before
   the pod ends: the per-rack time read from every row's predicted end), interleaved.
Writes bench/results/topology_latency.md. Usage: nice .venv/bin/python bench/topology_latency.py
"""
from __future__ import annotations

import sys
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from extender_cluster import synthetic_cluster  # noqa: E402

from bench.benchenv import machine  # noqa: E402
from scheduler_hook.config import load_config  # noqa: E402
from scheduler_hook.fake_kube import make_pod  # noqa: E402
from scheduler_hook.hook import ExtenderHook  # noqa: E402
from scheduler_hook.podspec import PodRequest  # noqa: E402
from scheduler_hook.providers import ProviderSet  # noqa: E402
from scheduler_hook.state import ClusterState  # noqa: E402

RACK = "cloud.provider.com/topology-rack"


class Demand:
    def shape_mix(self):
        return {(1, 1000): 1.0}

    def reserved_whole_gpus(self):
        return 64.0


class Runtime:
    """A run time per pod name, spread over 10 min to 2 days (a stand-in for the model)."""

    def runtime_s(self, pod):
        return 600.0 + zlib.crc32(pod.name.encode()) % 172800


def ms(v: list[float]) -> str:
    a = np.array(v) * 1000
    return f"{np.percentile(a, 50):.3f} | {np.percentile(a, 99):.3f}"


def interleaved(hook, st, names, on, off, tag: str, n: int = 400) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(n):  # interleaved: the machine's load falls on both alike
        mode = "on" if i % 2 else "off"
        hook.scorer.components = on if mode == "on" else off
        p = hook.pod(make_pod(f"{tag}{i}", gpus=1 if i % 3 else 2))
        t = time.perf_counter()
        d = hook.scorer.decide(p, names)
        res[mode].append(time.perf_counter() - t)
        best = d.names[int(np.argmax(d.total))]
        st.upsert_pod(PodRequest(**{**p.__dict__, "node": best, "phase": "Running"}))
    hook.scorer.components = on
    return res


def gangs(hook, st, names, ann: dict, size: int, count: int, tag: str) -> list[float]:
    ts = []
    for i in range(count):
        p = make_pod(f"{tag}{i}", gpus=8, annotations={
            **ann, "kueue.x-k8s.io/pod-group-total-count": str(size)})
        p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = f"{tag}job{i // size}"
        st.upsert_pod(p)
        q = hook.pod(p)
        t = time.perf_counter()
        d = hook.scorer.decide(q, names)
        ts.append(time.perf_counter() - t)
        ok = [j for j, n in enumerate(d.names) if n not in d.failed and n not in d.unresolvable]
        if ok:
            best = d.names[max(ok, key=lambda j: d.total[j])]
            st.upsert_pod(PodRequest(**{**q.__dict__, "node": best, "phase": "Running"}))
    return ts


def main() -> None:
    nodes, pods = synthetic_cluster(5000)
    st = ClusterState()
    st.replace_all(nodes, pods)
    st.ready = True
    for i, n in enumerate(nodes):
        st.upsert_node({**n, "metadata": {**n["metadata"], "labels": {
            **n["metadata"]["labels"], RACK: f"r{i // 16}"}}})
    cfg = load_config()
    hook = ExtenderHook(st, ProviderSet(), cfg)
    names = tuple(st.all_names())
    on = list(hook.scorer.components)
    off = [c for c in on if c.name != "topology"]
    plain = interleaved(hook, st, names, on, off, "x")
    cfg["topology"] = {**cfg["topology"], "keep_level": RACK}
    hook.providers.set("demand", Demand())
    keep = interleaved(hook, st, names, on, off, "k")
    cfg["topology"] = {**cfg["topology"], "keep_level": None}
    hook.providers.set("demand", None)  # the gang cases as before: no demand forecast
    req = gangs(hook, st, names, {"kueue.x-k8s.io/podset-required-topology": RACK}, 4, 80, "g")
    hook.providers.set("runtime", Runtime())
    pref = gangs(hook, st, names, {"kueue.x-k8s.io/podset-preferred-topology": RACK}, 16, 48,
                 "s")
    cfg["topology"] = {**cfg["topology"], "pack": True}
    pack = interleaved(hook, st, names, on, off, "p")
    cfg["topology"] = {**cfg["topology"], "pack_level": RACK}
    racks = interleaved(hook, st, names, on, off, "q")
    rows = [("plain 1-/2-GPU pods, topology off", plain["off"]),
            ("plain 1-/2-GPU pods, topology on", plain["on"]),
            ("plain pods, topology off (keep run)", keep["off"]),
            ("plain pods, topology on with keep_level (racks kept for 64 GPUs)", keep["on"]),
            ("required-rack gang pods, 4 x 8 GPUs", req),
            ("preferred-rack gang pods, 16 x 8 GPUs, run-time predictions (soon path)", pref),
            ("plain pods, topology off (pack run)", pack["off"]),
            ("plain pods, topology on with pack (run-time predictions)", pack["on"]),
            ("plain pods, topology off (pack_level run)", racks["off"]),
            ("plain pods, topology on with pack and pack_level rack", racks["on"])]
    out = ["# Topology score: extender cost (issue 31)", "",
           "- command: `nice .venv/bin/python bench/topology_latency.py`",
           f"- machine: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           "- Scorer.decide per pod on the 5,000-node synthetic cluster (bench/extender_cluster.py)"
           ", racks of 16 nodes; on/off pairs are interleaved pod by pod", "",
           "| case | pods | p50 ms | p99 ms |", "|---|---|---|---|"]
    out += [f"| {name} | {len(v)} | {ms(v)} |" for name, v in rows]
    text = "\n".join(out) + "\n"
    (Path(__file__).parent / "results" / "topology_latency.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
