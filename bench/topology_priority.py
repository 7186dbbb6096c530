"""Which gangs keep the issue-31 bar out of reach on DLRM: never-started gangs by priority.

Usage: nice .venv/bin/python bench/topology_priority.py --seeds 16,23 [--final-seeds 1,2]
Writes bench/results/topology_priority.md.

Runs fgd and the topology policy the sixth try chose (pack racks, keep forecast, node
reservation, shortest predicted first at 10: bench/topology_notes.md) on each DLRM seed and
splits what the gang JCT p95 is made of by the workload's priority (simulator/timeline/
workload.py: openb's LS share is priority 1, the rest 0; both policies queue priority first):
gangs never started in the window, gangs above the bar (0.7 x fgd's p95) by their run time alone
and by waiting, and small pods (< 8 GPUs) never started. A placement or queue-order rule can
start a waiting gang only with capacity that a job of its own priority or lower would otherwise
take. ``--final-seeds`` reads the final seeds the same way (their rows in topology_runs.jsonl
were each run once before; this reruns them deterministically and chooses nothing).
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.benchenv import machine  # noqa: E402
from bench.topology_bar import SHARE, allowed_above  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CHOSEN = dict(reserve_nodes=True, pack=True, pack_racks=True, big_order=10.0)


def split(jobs, res: dict, t1: float, bar_min: float) -> dict:
    """Per priority: gangs, never started, above the bar by run / by wait; small unstarted."""
    m = (jobs.arrival >= 0) & (jobs.arrival < t1)
    started = np.isfinite(res["start"])
    wait = np.where(started, res["start"] - jobs.arrival, t1 - jobs.arrival)
    jct = (wait + np.where(started, res["run"], jobs.duration)) / 60
    gang, small = m & (jobs.pods > 1), m & (jobs.gpus < 8)
    over = gang & (jct > bar_min)
    by_run = over & (jobs.duration / 60 > bar_min)
    out = {"p95": round(float(np.percentile(jct[gang], 95)), 1),
           "allowed": allowed_above(int(gang.sum()))}
    for p in (1, 0):
        q = jobs.priority == p
        out[p] = {"gangs": int((gang & q).sum()), "unstarted": int((gang & q & ~started).sum()),
                  "over_run": int((by_run & q).sum()), "over_wait": int((over & ~by_run & q).sum()),
                  "small_unstarted": int((small & q & ~started).sum())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="16,23")
    ap.add_argument("--final-seeds", default="")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=0.8)
    a = ap.parse_args()
    from simulator.replay.data import load_nodes
    from simulator.timeline.forecast import ReservedSchedule
    from simulator.timeline.run import CaseConfig, case_jobs
    from simulator.timeline.runtime import predicted_runtimes
    from simulator.timeline.topology import run_topology

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    t0, t1 = -86400.0, a.days * 86400.0
    lines = []
    cases = [("dev", s) for s in parse_seeds(a.seeds)]
    cases += [("final", s) for s in parse_seeds(a.final_seeds)] if a.final_seeds else []
    for phase, seed in cases:
        jobs = case_jobs(nodes, CaseConfig(profile="dlrm", seed=seed, days=a.days, load=a.load))
        pred = predicted_runtimes(jobs, t0, t1)["p50"].to_numpy()
        fgd = run_topology(nodes, jobs, "fgd", t0, t1, runtime_p50=pred, seed=seed)
        bar = SHARE * split(jobs, fgd, t1, np.inf)["p95"]
        topo = run_topology(nodes, jobs, "topology", t0, t1, runtime_p50=pred, seed=seed,
                            reserved=ReservedSchedule(jobs, "forecast", t0, t1, seed=seed),
                            **CHOSEN)
        for name, res in (("fgd", fgd), ("topology (sixth try)", topo)):
            s = split(jobs, res, t1, bar)
            for p in (1, 0):
                r = s[p]
                lines.append(f"| {phase} {seed} | {name} | {s['p95']} | {bar:.1f} | "
                             f"{s['allowed']} | {p} | {r['gangs']} | {r['unstarted']} | "
                             f"{r['over_run']} | {r['over_wait']} | {r['small_unstarted']} |")
            print(lines[-2], lines[-1], sep="\n", flush=True)
    out = ["# Never-started gangs by priority, DLRM (issue 31)", "",
           f"- command: `nice .venv/bin/python bench/topology_priority.py --seeds {a.seeds}"
           + (f" --final-seeds {a.final_seeds}" if a.final_seeds else "") + "`",
           f"- run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}",
           f"- {a.days:g} measured days after 1 of warm-up, load {a.load}; bar = 0.7 x fgd's "
           "gang JCT p95; `may lie above`: gangs the p95 lets lie above the bar (both "
           "priorities together); `above by run`: gangs whose run time alone exceeds it; "
           "`above by wait`: the others above it (waited, or ran spread)", "",
           "| seed | policy | gang JCT p95 (min) | bar | may lie above | priority | gangs | "
           "never started | above by run | above by wait | pods < 8 GPUs never started |",
           "|---|---|---|---|---|---|---|---|---|---|---|", *lines, ""]
    (RESULTS / "topology_priority.md").write_text("\n".join(out))


if __name__ == "__main__":
    main()
