"""What the extender's placements lose when kube-scheduler shows it only part of the cluster.

deploy/kube-scheduler-config.yaml sets `percentageOfNodesToScore: 100`. Left unset,
kube-scheduler stops filtering once it has found (50 - nodes/125)% of the nodes feasible (at
least 5% and 100 nodes) from a rotating start, and only those reach the extender. This bench
places the same pod sequence on the same cluster (bench/scheduler_overhead.py's: the openb-like
mix, every other node partly used) twice, in process: once choosing among every feasible node,
once among kube-scheduler's adaptive window. Feasible = kube-scheduler's GPU count check
(nvidia.com/gpu requested, a KAI share counting one) and then the extender's filter; the choice
is the highest extender score (0-10), ties broken at random as kube-scheduler does (its own
scores are flat on these nodes: bench/scheduler_overhead.py gives them huge CPU and memory). No
pod leaves. Reported: pods no node could take (by size), nodes left whole-free, and in the
window run how often the chosen node scored below the best feasible node of the whole cluster.

Usage: python bench/window_quality.py [--nodes 1000 5000] [--seeds 0 1] [--share 0.8]
       [--out bench/results/window_quality.md]
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from scheduler_overhead import cluster, pods  # noqa: E402

from scheduler_hook.config import load_config  # noqa: E402
from scheduler_hook.hook import ExtenderHook  # noqa: E402
from scheduler_hook.podspec import PodRequest, parse_pod  # noqa: E402
from scheduler_hook.providers import ProviderSet  # noqa: E402
from scheduler_hook.state import ClusterState  # noqa: E402
from scheduler_hook.wire import parse_args  # noqa: E402


def k8s_request(pod: dict) -> int:
    """nvidia.com/gpu as kube-scheduler counts it (a KAI share asks one whole GPU)."""
    lim = pod["spec"]["containers"][0]["resources"].get("limits") or {}
    return int(lim.get("nvidia.com/gpu", 0))


def to_find(n: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with percentageOfNodesToScore unset."""
    if n < 100:
        return n
    pct = max(50 - n // 125, 5)
    return max(n * pct // 100, 100)


def run(n_nodes: int, seed: int, share: float, window: bool) -> dict:
    node_objs, bound = cluster(n_nodes, 0.6, seed)
    st = ClusterState()
    st.replace_all(node_objs, bound)
    st.ready = True
    hook = ExtenderHook(st, ProviderSet(), load_config())
    names = [n["metadata"]["name"] for n in node_objs]
    cap = np.array([int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in node_objs])
    index = {n: i for i, n in enumerate(names)}
    used = np.zeros(len(names), int)
    for p in bound:
        used[index[p["spec"]["nodeName"]]] += k8s_request(p)
    rng = np.random.default_rng(seed + 100)  # the pod sequence: the same in both runs
    todo = pods(rng, f"s{seed}", "foresight-scheduler",
                int(share * (cap.sum() - used.sum()) / 1.75))  # 1.75 GPUs a pod on average
    ties = np.random.default_rng(seed + 200)
    start, lost, below, placed = 0, {}, 0, 0
    t0 = time.perf_counter()
    for pod in todo:
        req = k8s_request(pod)
        fits = used + req <= cap
        if window:
            order = (start + np.arange(len(names))) % len(names)
            ok = order[fits[order]]
            want = to_find(len(names))
            cand = ok[:want]
            processed = int(np.flatnonzero(fits[order])[want - 1]) + 1 if len(ok) >= want \
                else len(names)
            start = (start + processed) % len(names)
        else:
            cand = np.flatnonzero(fits)
        best = _choose(hook, pod, [names[i] for i in cand], ties)
        if best is None:
            lost[req] = lost.get(req, 0) + 1
            continue
        if window:  # the best the whole cluster offered this pod
            whole = _scores(hook, pod, [names[i] for i in np.flatnonzero(fits)])
            below += best[1] < max(whole.values())
        node = best[0]
        req_obj = hook.pod(pod)
        gpus = hook.scorer.choose_gpus(req_obj, node)
        st.upsert_pod(PodRequest(**{**req_obj.__dict__, "node": node,
                                    "gpu_index": tuple(gpus), "phase": "Running"}))
        used[index[node]] += req
        placed += 1
    free = int(sum(1 for n in names if st.nodes[n].gpu_count and
                   (st.free_milli[st.index[n], :st.nodes[n].gpu_count] >= 1000).all()))
    whole8 = int(sum(1 for n in names if st.nodes[n].gpu_count == 8 and
                     (st.free_milli[st.index[n], :8] >= 1000).all()))
    return {"pods": len(todo), "placed": placed, "lost": lost, "below": below,
            "free_nodes": free, "free_8gpu_nodes": whole8, "s": time.perf_counter() - t0}


def _scores(hook: ExtenderHook, pod: dict, cand: list[str]) -> dict[str, int]:
    """Extender filter, then prioritize on what passed: {node: score}."""
    if not cand:
        return {}
    args = parse_args(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": cand}))
    passed = hook.filter(args)["NodeNames"]
    if not passed:
        return {}
    args = parse_args(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed}))
    return {h["Host"]: h["Score"] for h in hook.prioritize(args)}


def _choose(hook: ExtenderHook, pod: dict, cand: list[str], rng: np.random.Generator
            ) -> tuple[str, int] | None:
    scores = _scores(hook, pod, cand)
    if not scores:
        return None
    top = max(scores.values())
    best = [n for n, s in scores.items() if s == top]
    return best[int(rng.integers(0, len(best)))], top


def report(rows: list[dict], args: argparse.Namespace, machine_text: str) -> str:
    cmd = ".venv/bin/python bench/window_quality.py " + " ".join(sys.argv[1:])
    lines = ["# Extender placements: every feasible node vs kube-scheduler's adaptive window", "",
             f"- Command: `{cmd}`", f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- Machine: {machine_text}",
             "- In process, fallback scoring (no models), the cluster of "
             "bench/scheduler_overhead.py (fill 0.6 on every other node), the same pod sequence "
             f"in both runs (openb-like shapes, about {args.share:.0%} of the free GPUs asked), "
             "nothing leaves. `window`: kube-scheduler's adaptive percentageOfNodesToScore "
             "(rotating start); `all`: percentageOfNodesToScore 100 (the shipped config). Lost = "
             "pods no feasible node passed the extender for, by GPUs asked (a share asks 1); "
             "below best = window placements whose node scored below the best node of the "
             "whole cluster.", "",
             "| nodes | seed | nodes shown | pods | placed | lost (by GPUs asked) | whole-free "
             "nodes left | whole-free 8-GPU nodes left | below best | seconds |",
             "|---:|---:|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lost = ", ".join(f"{k}: {v}" for k, v in sorted(r["lost"].items())) or "0"
        below = f"{r['below']} ({r['below'] / max(r['placed'], 1):.0%})" if r["window"] else ""
        lines.append(f"| {r['nodes']:,} | {r['seed']} | {'window' if r['window'] else 'all'} | "
                     f"{r['pods']:,} | {r['placed']:,} | {lost} | {r['free_nodes']:,} | "
                     f"{r['free_8gpu_nodes']:,} | {below} | {r['s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--share", type=float, default=0.8)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/window_quality.md")
    args = ap.parse_args()
    machine_text = machine()
    rows = []
    for n in args.nodes:
        for seed in args.seeds:
            for window in (False, True):
                r = {"nodes": n, "seed": seed, "window": window,
                     **run(n, seed, args.share, window)}
                print(r, flush=True)
                rows.append(r)
    text = report(rows, args, machine_text)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
