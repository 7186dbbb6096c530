"""Where a filter-best answer's time goes, outside kube-scheduler (issue 30).

The request stream is what kube-scheduler v1.34 sends with its adaptive
percentageOfNodesToScore: per pod, from a rotating start, the nodes whose `nvidia.com/gpu`
count still fits, until (50 - nodes/125)% of the nodes (at least 100) are found. The cluster
is bench/scheduler_overhead.py's (half the nodes partly used), and between two batches of 10
Foresight pods 40 pods of other schedulers bind at random fitting nodes (its five
kube-schedulers); each Foresight pod binds at the first node its answer passes. The answers
go through the HTTP handler (`verb_handlers`: bytes in, bytes out), as served.

Two passes over the same stream: one timed (wall and thread CPU per answer, answer bytes, and
the failure entries a filter-best answer carried before it left them out while a node passes),
one under cProfile (each function's cumulative time as a share of the handler's; cProfile
inflates small calls, so the shares are indicative).

Usage: nice python bench/extender_answer_profile.py [--nodes 1000 5000] [--batches 20]
       [--out bench/results/extender_answer_profile.md]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from extender_cluster import served_hook  # noqa: E402
from scheduler_overhead import _git_head, cluster, pods  # noqa: E402

from scheduler_hook.app import verb_handlers  # noqa: E402
from scheduler_hook.podspec import PodRequest, parse_pod  # noqa: E402

WARM = 10  # the first batch fills the caches: not counted
SHOWN = ("handle", "filter_best", "decide", "_refresh", "_safe", "score", "_gather",
         "_frag_keys", "_frag_known", "rows", "pod", "parse_pod", "args_of", "_top_scored",
         "best_json", "record", "values_from_increase")


def _gpus(pod: dict) -> int:
    req = pod["spec"]["containers"][0]["resources"].get("requests", {})
    return int(req.get("nvidia.com/gpu", 0))


def stream(n: int, batches: int, answer: Callable[[bytes, dict], dict]) -> None:
    """Feed the filter-best requests of the module docstring to `answer(body, pod)`, which
    returns the decoded answer; binds every pod where the answers and the others say."""
    nodes, bound = cluster(n, 0.6)
    for i, p in enumerate(bound):
        p["metadata"]["uid"], p["status"] = f"pre-{i}", {"phase": "Running"}
    st, hook = served_hook(nodes, bound)
    names = [nd["metadata"]["name"] for nd in nodes]
    free = {nd["metadata"]["name"]: int(nd["status"]["allocatable"]["nvidia.com/gpu"])
            for nd in nodes}
    for p in bound:
        free[p["spec"]["nodeName"]] -= _gpus(p)
    want = max(100, int(n * max(5.0, 50 - n / 125) / 100))
    rng, start = np.random.default_rng(1), 0

    def bind(pod: dict, node: str) -> None:
        p = parse_pod(pod)
        gpus = hook.scorer.choose_gpus(p, node)
        st.upsert_pod(PodRequest(**{**p.__dict__, "node": node, "gpu_index": tuple(gpus),
                                    "phase": "Pending"}))
        free[node] -= _gpus(pod)

    uid = 0
    for b in range(batches):
        for pod in pods(rng, f"o{b}", "other", 40):
            pod["metadata"]["uid"] = f"u{uid}"
            uid += 1
            fit = [m for m in names if free[m] >= _gpus(pod)]
            if fit:
                bind(pod, fit[rng.integers(len(fit))])
        for pod in pods(rng, f"r{b}", "foresight-scheduler", 10):
            pod["metadata"].update(uid=f"u{uid}", resourceVersion=str(uid))
            uid += 1
            window, seen = [], 0
            while len(window) < want and seen < n:
                m = names[(start + seen) % n]
                seen += 1
                if free[m] >= _gpus(pod):
                    window.append(m)
            start = (start + seen) % n
            body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": window})
            got = answer(body, {"hook": hook})
            if got["NodeNames"]:
                bind(pod, got["NodeNames"][0])


def timed(n: int, batches: int) -> dict[str, float]:
    rows: list[tuple[float, float, int, int, int]] = []
    handler: list[Callable] = []

    def answer(body: bytes, ctx: dict) -> dict:
        if not handler:
            handler.append(verb_handlers(ctx["hook"])["/scheduler/filter-best"])
        c, w = time.thread_time(), time.perf_counter()
        _, out = handler[0](body)
        wall, cpu = time.perf_counter() - w, time.thread_time() - c
        got = orjson.loads(out)
        d = ctx["hook"].scorer._last[2]  # the decision just answered: its failure maps
        rows.append((wall, cpu, len(out), len(got["NodeNames"] or []),
                     len(d.failed) + len(d.unresolvable) if got["NodeNames"] else 0))
        return got

    stream(n, batches, answer)
    a = np.array(rows[WARM:], float)
    return {"n": len(a), "wall_mean": 1e3 * a[:, 0].mean(), "wall_median": 1e3 * np.median(a[:, 0]),
            "cpu_mean": 1e3 * a[:, 1].mean(), "cpu_median": 1e3 * np.median(a[:, 1]),
            "bytes_mean": a[:, 2].mean(), "bytes_max": a[:, 2].max(),
            "passed_median": float(np.median(a[:, 3])),
            "left_out_share": float((a[:, 4] > 0).mean()), "left_out_max": a[:, 4].max()}


def profiled(n: int, batches: int) -> list[tuple[str, float]]:
    prof, handler = cProfile.Profile(), []

    def answer(body: bytes, ctx: dict) -> dict:
        if not handler:
            handler.append(verb_handlers(ctx["hook"])["/scheduler/filter-best"])
        prof.enable()
        _, out = handler[0](body)
        prof.disable()
        return orjson.loads(out)

    stream(n, batches, answer)
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    total = max(ct for (f, _, name), (_, _, _, ct, _) in stats.items() if name == "handle")
    out: dict[str, float] = {}
    for (f, line, name), (_, _, _, ct, _) in stats.items():
        if name in SHOWN and ("scheduler_hook" in f or name == "handle"):
            label = f"{Path(f).parent.name}/{Path(f).name}:{name}"
            out[label] = out.get(label, 0.0) + ct / total
    return sorted(out.items(), key=lambda kv: -kv[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench/results/extender_answer_profile.md")
    args = ap.parse_args()
    head = [
        "# Where a filter-best answer's time goes (outside kube-scheduler)", "",
        f"- Command: `nice .venv/bin/python bench/extender_answer_profile.py "
        f"{' '.join(sys.argv[1:])}`".replace("  ", " "),
        f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine()}",
        f"- Commit: `{_git_head()}` (run from the working tree)",
        f"- {args.batches} batches x 10 Foresight pods (the first batch not counted), 40 other "
        "pods bound between batches; requests as kube-scheduler v1.34 sends them (adaptive "
        "window from a rotating start, fitting nodes only); fallback scoring (no models). "
        "Wall and thread-CPU time of the handler (`verb_handlers`, bytes in and out).", "",
        "| nodes | answers | CPU ms mean / median | wall ms mean / median "
        "| answer bytes mean / max | nodes passed (median) "
        "| answers whose decision rejected a node | most rejected |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    shares = []
    for n in args.nodes:
        t = timed(n, args.batches)
        head.append(f"| {n:,} | {t['n']} | {t['cpu_mean']:.2f} / {t['cpu_median']:.2f} | "
                    f"{t['wall_mean']:.2f} / {t['wall_median']:.2f} | {t['bytes_mean']:.0f} / "
                    f"{t['bytes_max']:.0f} | {t['passed_median']:.0f} | "
                    f"{100 * t['left_out_share']:.0f}% | {t['left_out_max']:.0f} |")
        shares.append((n, profiled(n, args.batches)))
    head += ["", "Share of the handler's time (cProfile, cumulative: nested rows overlap):", "",
             "| function | " + " | ".join(f"{n:,} nodes" for n, _ in shares) + " |",
             "|---|" + "---:|" * len(shares)]
    labels = [k for k, _ in shares[0][1]]
    for label in labels:
        vals = [dict(s).get(label, 0.0) for _, s in shares]
        head.append(f"| `{label}` | " + " | ".join(f"{100 * v:.0f}%" for v in vals) + " |")
    args.out.write_text("\n".join(head) + "\n")
    print("\n".join(head))


if __name__ == "__main__":
    main()
