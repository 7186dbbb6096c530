"""What the co-location gate costs per request on a large cluster, per GPU (colocation_gpu.py).

5,000 nodes of 4 GPUs, GPU shares of 0.25 on them (0-`max_per_gpu` per GPU, 20 % with a
minimum speed), an interference provider answering from a table (the API's adapter caches pairs
the same way), one pending 0.25 share with `foresight.io/min-speed` 0.7. Times
`ColocationSafety().score` in process, median over `--runs` requests, for one resident per GPU
at most (no pair of residents to look up) and for crowded GPUs.

Usage: nice .venv/bin/python bench/colocation_speed.py [--runs 21]
Writes bench/results/colocation_speed.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from scheduler_hook.config import load_config  # noqa: E402
from scheduler_hook.fake_kube import make_node, make_pod  # noqa: E402
from scheduler_hook.podspec import parse_pod  # noqa: E402
from scheduler_hook.providers import ProviderSet  # noqa: E402
from scheduler_hook.scores import ColocationSafety  # noqa: E402
from scheduler_hook.scores.base import Context  # noqa: E402
from scheduler_hook.state import ClusterState  # noqa: E402

NODES, GPUS = 5000, 4


class Table:
    """Pair speeds from a dict, as InterferenceAdapter answers from its cache."""

    def __init__(self, workloads: list[str], rng: np.random.Generator) -> None:
        self.t = {(a, b): float(rng.uniform(0.5, 1.0)) for a in workloads for b in workloads}

    def speeds(self, workload, others, sharing):
        return (np.array([self.t[(workload, o)] for o in others]),
                np.array([self.t[(o, workload)] for o in others]))


def case(max_per_gpu: int, runs: int) -> dict:
    rng = np.random.default_rng(0)
    names = [f"w{i}" for i in range(20)]
    nodes, pods = [], []
    for i in range(NODES):
        nodes.append(make_node(f"n{i}", gpus=GPUS, gpu_mem_mib=81920))
        for g in range(GPUS):
            for k in range(int(rng.integers(0, max_per_gpu + 1))):
                ann = {"foresight.io/gpu-index": str(g)}
                if rng.random() < 0.2:
                    ann["foresight.io/min-speed"] = "0.6"
                pods.append(make_pod(f"p{i}-{g}-{k}", fraction=0.25, node=f"n{i}",
                                     workload=str(rng.choice(names)), phase="Running",
                                     annotations=ann))
    st = ClusterState()
    st.replace_all(nodes, pods)
    st.ready = True
    prov = ProviderSet()
    prov.set("interference", Table(names + ["me"], rng))
    pod = parse_pod(make_pod("p", fraction=0.25, workload="me",
                             annotations={"foresight.io/min-speed": "0.7"}))
    rows, _ = st.rows([f"n{i}" for i in range(NODES)])
    times, res = [], None
    for _ in range(runs):
        ctx = Context(st, rows, pod, prov, load_config())
        t = time.perf_counter()
        res = ColocationSafety().score(ctx)
        times.append(time.perf_counter() - t)
    return {"residents": len(pods), "ms": 1e3 * float(np.median(times)),
            "p90": 1e3 * float(np.quantile(times, 0.9)), "refused": int(res.violation.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/colocation_speed.md")
    a = ap.parse_args()
    lines = ["# Co-location gate per GPU: time per request", "",
             f"- command: `nice .venv/bin/python bench/colocation_speed.py --runs {a.runs}`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- {NODES} nodes x {GPUS} GPUs, 0.25 shares; `ColocationSafety().score` for a "
             f"0.25 share with min-speed 0.7, in process, {a.runs} requests", "",
             "| residents per GPU | sharing residents | median ms | p90 ms | nodes refused |",
             "|---|---|---|---|---|"]
    for m in (1, 2, 3):
        r = case(m, a.runs)
        lines.append(f"| 0-{m} | {r['residents']} | {r['ms']:.1f} | {r['p90']:.1f} | "
                     f"{r['refused']} |")
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
