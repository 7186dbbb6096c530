"""Issue 28's big-job bar: the big jobs alone on the cluster, and where all jobs do not fit.

Usage: nice .venv/bin/python bench/replay_timeline_bigonly.py [--profiles dlrm,helios]
           [--seeds 100-104]
Writes bench/results/replay_timeline_bigonly.md.

The bar asks, over the final seeds (means over seeds), for 8-GPU+gang p95 queueing delay <= 0.3 x
`fgd`'s. This replays each final case's jobs (the same CaseConfig as the final28g runs: 2 measured
days after 1 of warm-up, load 0.9) with **only the big jobs** (8-GPU pods and gangs) on the whole
cluster: no small pod ever takes a GPU a big job could use, which is more than any reservation or
drain can give them. The engine is simulator.timeline.engine with `fgd` placement and gang
semantics, as in every run of the bench; the queue orders tried:
- `FIFO`: priority, then arrival (what `fgd` does);
- `shortest first (10, true)`: priority, then arrival + 10 x the job's *true* run time (the
  seventh look's order, with the truth instead of the prediction);
- `shortest first (true)`: priority, then the true run time alone (no aging);
- the same three with every job at one priority (`one priority`): what a scheduler that may
  break the priority order could do.

The second table says why, per case: the GPUs every job would hold if it started at its arrival
(small jobs packed perfectly: first on the nodes of < 8 GPUs, 1,276 GPUs of the openb list,
then on as few 8-GPU nodes as their GPUs fill), against the cluster: the share of the measured
window's minutes in which that need exceeds the 617 8-GPU nodes (big jobs' whole nodes plus the
small jobs' overflow) and the 6,212 GPUs, and the mean excess then. In those minutes some job
must wait under any placement; the issue's other bounds say how much of it small jobs may take.
Nothing is chosen from either table.
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.benchenv import machine  # noqa: E402
from bench.replay_timeline_backfill import CACHE, RESULTS  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402

SHARE = 0.3
ORDERS = ("FIFO", "shortest first (10, true)", "shortest first (true)")


def only(jobs, keep: np.ndarray):
    """The jobs of ``keep`` (a mask), every per-job array cut alike."""
    arrays = {k: v[keep] for k, v in vars(jobs).items()
              if isinstance(v, np.ndarray) and v.shape[:1] == keep.shape}
    return replace(jobs, **{k: v for k, v in arrays.items() if k != "gpu_request"})


def order(jobs, name: str) -> np.ndarray | None:
    if name == "FIFO":
        return None
    if name == "shortest first (true)":
        return jobs.duration.astype(float)
    return jobs.arrival + 10.0 * jobs.duration


def need(jobs, t0: float, t1: float, small_gpus: float, step_s: float = 60.0) -> dict:
    """Per minute of [t0, t1): 8-GPU nodes and GPUs that every job started at its arrival would
    hold (small jobs packed perfectly beyond ``small_gpus``); see the module doc."""
    grid = np.arange(t0, t1, step_s)
    live = (jobs.arrival < t1) & (jobs.arrival + jobs.duration > t0)

    def running(mask: np.ndarray, weight: np.ndarray) -> np.ndarray:
        d = np.zeros(len(grid) + 1)
        np.add.at(d, np.searchsorted(grid, np.maximum(jobs.arrival[mask], t0)), weight[mask])
        np.add.at(d, np.searchsorted(grid, jobs.arrival[mask] + jobs.duration[mask]),
                  -weight[mask])
        return np.cumsum(d)[:-1]

    small = running(live & ~jobs.big, jobs.gpu_request)
    big_nodes = running(live & jobs.big, jobs.pods.astype(float))
    return {"nodes8": big_nodes + np.ceil(np.maximum(small - small_gpus, 0.0) / 8.0),
            "gpus": small + 8.0 * big_nodes}


def fgd_p95(profile: str, seed: int) -> float | None:
    """`fgd`'s cached 8+gang p95 on the final case (with the small jobs)."""
    rows = [json.loads(x) for x in CACHE.read_text().splitlines()] if CACHE.exists() else []
    got = [r["8+gang"]["p95_min"] for r in rows if r["policy"] == "fgd" and
           r["profile"] == profile and r["seed"] == seed and r.get("days") == 2.0 and
           str(r.get("phase", "")).startswith("final28")]
    return float(got[-1]) if got else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="dlrm,helios")
    ap.add_argument("--seeds", default="100-104")
    a = ap.parse_args()
    from simulator.replay.data import load_nodes
    from simulator.timeline.engine import run_timeline
    from simulator.timeline.metrics import summarize
    from simulator.timeline.run import WARMUP_S, CaseConfig, case_jobs

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    t0, t1 = -WARMUP_S, 2 * 86400.0
    lines, means, flines = [], [], []
    nodes8 = int((nodes.gpus >= 8).sum())
    small_gpus = float(nodes.gpus[nodes.gpus < 8].sum())
    for prof in a.profiles.split(","):
        per: dict[tuple[str, bool], list[float]] = {}
        ref = []
        for seed in parse_seeds(a.seeds):
            cfg = CaseConfig(profile=prof, seed=seed, days=2.0, load=0.9)
            jobs = case_jobs(nodes, cfg)
            big = only(jobs, jobs.big)
            ref.append(fgd_p95(prof, seed))
            cells = []
            for flat in (False, True):
                b = replace(big, priority=np.zeros_like(big.priority)) if flat else big
                for name in ORDERS:
                    res = run_timeline(nodes, b, "fgd", t0, t1, gang=cfg.gang, seed=seed,
                                       order_s=order(b, name))
                    s = summarize(b, res, 0.0, t1)["8+gang"]
                    per.setdefault((name, flat), []).append(s["p95_min"])
                    cells.append(f"{s['p95_min']:.1f} ({s['unstarted']})")
            n = int(((big.arrival >= 0) & (big.arrival < t1)).sum())
            lines.append(f"| {prof} | {seed} | {ref[-1]} | {n} | "
                         + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
            got = need(jobs, 0.0, t1, small_gpus)
            cells = []
            for k, cap in (("nodes8", nodes8), ("gpus", float(nodes.gpus.sum()))):
                over = got[k] > cap
                excess = float((got[k][over] - cap).mean()) if over.any() else 0.0
                cells.append(f"{100 * over.mean():.0f} % | {excess:.0f}")
            flines.append(f"| {prof} | {seed} | {ref[-1]} | " + " | ".join(cells) + " |")
            print(flines[-1], flush=True)
        if all(r is not None for r in ref):
            m = float(np.mean(ref))
            cells = [f"{np.mean(v):.1f} ({np.mean(v) / m:.2f}x)" for v in per.values()]
            means.append(f"| {prof} | {m:.1f} | {SHARE * m:.1f} | " + " | ".join(cells) + " |")
    heads = [f"{n}{', one priority' if f else ''}" for f in (False, True) for n in ORDERS]
    out = ["# Issue 28's big-job bar: big jobs alone, and where the cluster is oversubscribed",
           "",
           "- command: `" + " ".join(["nice .venv/bin/python bench/replay_timeline_bigonly.py",
                                      *sys.argv[1:]]) + "`",
           f"- run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}",
           "- the final cases of the seventh look (2 measured days after 1 of warm-up, load "
           "0.9); first and last tables: every job of < 8 GPUs removed, `fgd` placement, gang "
           "semantics; cells: "
           "8-GPU+gang p95 queueing delay in min (big jobs never started in the window); a job "
           "never started counts with its wait until the window's end, as in every table of "
           "the bench; `fgd (all jobs)`: the cached `fgd` run with the small jobs "
           "(replay_timeline_runs.jsonl); see the module doc", "",
           "## Means over seeds against the bar", "",
           "| profile | fgd (all jobs) | bar 0.3x | " + " | ".join(heads) + " |",
           "|---|---|---|" + "---|" * len(heads), *means, "",
           "## Where every job started at arrival would not fit (module doc)", "",
           "Minutes of the measured window; `8-GPU nodes over`: share of minutes in which the "
           f"big jobs' nodes plus the small jobs' overflow exceed the {nodes8} 8-GPU nodes, "
           "and the mean excess (nodes) then; `GPUs over`: the same against every GPU.", "",
           "| profile | seed | fgd 8+gang p95 (all jobs) | 8-GPU nodes over | mean excess "
           "(nodes) | GPUs over | mean excess (GPUs) |", "|---|---|---|---|---|---|---|",
           *flines, "",
           "## Big jobs alone, per seed", "",
           "| profile | seed | fgd (all jobs) | big jobs in the window | " + " | ".join(heads) + " |",
           "|---|---|---|---|" + "---|" * len(heads), *lines, ""]
    (RESULTS / "replay_timeline_bigonly.md").write_text("\n".join(out))


if __name__ == "__main__":
    main()
