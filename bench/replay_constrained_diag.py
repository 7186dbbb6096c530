"""Where a policy leaves GPUs idle on a constrained openb list (issue 13, dev seeds only).

Usage: PYTHONPATH=. nice .venv/bin/python bench/replay_constrained_diag.py TRACE SEED POLICY[,..]
       [--until 100|130]
POLICY is a replay policy name or a variant of bench/replay_issue13_dev.py. Prints one JSON
line per policy: alloc at 100 %, and at the end of the replay (``--until``; 130 = the wall,
where nothing more fits), per GPU model the free GPUs, the whole free GPUs and the free CPU
share; the pods that failed by (class, gpu_spec) with their GPUs; and the median free cores
on the nodes of each model that still have a free GPU (CPU-starved GPUs show as ~0).
"""
from __future__ import annotations

import argparse
import collections
import json

import numpy as np

from replay_issue13_dev import CSV, VARIANTS
from simulator.replay.data import load_nodes, load_trace
from simulator.replay.engine import make_policy, replay


def _kind(pod) -> str:
    if pod.num_gpu == 0:
        return "cpu"
    if pod.num_gpu > 1:
        return f"{pod.num_gpu}gpu"
    return "frac" if pod.milli < 1000 else "1gpu"


def recording(name: str):
    """The policy, wrapped to remember every arrived pod and which ones were placed."""
    base = VARIANTS[name]() if name in VARIANTS else make_policy(name)

    class Recording(type(base)):
        def reset(self, cluster, trace):
            super().reset(cluster, trace)
            self.seen, self.bound = [], set()

        def observe(self, pod):
            self.seen.append(pod)
            super().observe(pod)

        def placed(self, node, slots, pod):
            self.bound.add(len(self.seen) - 1)
            super().placed(node, slots, pod)

    pol = Recording()
    pol.__dict__.update(base.__dict__)
    return pol


def summary(pol) -> dict:
    c = pol.cluster
    nd = c.nodes
    per = {}
    for m in sorted(set(nd.model.tolist())):
        mk = nd.model == m
        with_free = mk & (c.gpu_free.sum(axis=1) > 0)
        per[m] = {"gpus": int(nd.gpus[mk].sum()),
                  "free_gpus": round(c.gpu_free[mk].sum() / 1000, 1),
                  "whole_free": int((c.gpu_free[mk] >= 1000).sum()),
                  "cpu_free_share": round(float(c.cpu_free[mk].sum() / nd.cpu[mk].sum()), 3),
                  "median_free_cores_where_gpu_free":
                      round(float(np.median(c.cpu_free[with_free])) / 1000, 1)
                      if with_free.any() else None}
    failed, gpus = collections.Counter(), collections.Counter()
    for i, p in enumerate(pol.seen):
        if p.num_gpu and i not in pol.bound:
            key = f"{_kind(p)}|{p.spec or '-'}"
            failed[key] += 1
            gpus[key] += p.num_gpu * p.milli / 1000
    return {"per_model": per,
            "failed": {k: [failed[k], round(gpus[k], 1)] for k in sorted(failed)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("seed", type=int)
    ap.add_argument("policies")
    ap.add_argument("--until", type=int, default=100)
    a = ap.parse_args()
    if a.seed >= 42:
        raise SystemExit("dev seeds only (42-51 are the final seeds)")
    nodes = load_nodes(CSV / "openb_node_list_gpu_node.csv")
    pods = load_trace(CSV, a.trace)
    for name in a.policies.split(","):
        pol = recording(name)
        r = replay(nodes, pods, pol, a.seed, until=a.until)
        print(json.dumps({"trace": a.trace, "seed": a.seed, "policy": name, "until": a.until,
                          "alloc_at_100": r.alloc_at_100, **summary(pol)}), flush=True)


if __name__ == "__main__":
    main()
