"""How much room the issue-31 bar leaves: gangs that may wait past it (no policy run).

Usage: nice .venv/bin/python bench/topology_bar.py --profiles dlrm,helios --seeds 9,8,0,3,1,2
Writes bench/results/topology_bar.md.

The bar is gang JCT p95 <= 0.7 x fgd's (fgd's p95 read from the recorded fgd run of the same
case in bench/results/topology_runs.jsonl). A gang's JCT is at least its run time, so every
gang whose run time alone exceeds the bar lies above it under any policy (spreading only makes
it longer). The p95 (numpy's linear interpolation over n gangs) stays at or below the bar only
if at most ``n - 1 - floor(0.95 (n - 1))`` gangs lie above it (the sorted value at the floor
position must be at or below; the one after it may be above if the interpolation stays
under); ``slack`` is that number minus the gangs above by their run time: at most how many
more gangs, of all those that do not start at once, may wait (or run spread) past the bar.
Reads only the workload (case_jobs) and the fgd rows already recorded: nothing is chosen
from it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.benchenv import machine  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SHARE = 0.7  # the bar: at least 30 % below fgd


def allowed_above(n: int) -> int:
    """Most values that may exceed x while np.percentile(v, 95) <= x (linear interpolation
    between the sorted values at floor and ceil of 0.95 (n - 1): the first must be <= x)."""
    return n - 1 - math.floor(0.95 * (n - 1))


def fgd_row(rows: list[dict], profile: str, seed: int, days: float, load: float
            ) -> dict | None:
    """The recorded plain fgd run of a case (no node reservation, default slowdowns)."""
    got = [r for r in rows if r["policy"] == "fgd" and r["profile"] == profile and
           r["seed"] == seed and r["days"] == days and r["load"] == load and
           not r.get("reserve_nodes") and r.get("spread_rack", 1.3) == 1.3]
    return got[0] if got else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="dlrm,helios")
    ap.add_argument("--seeds", default="9,8,0,3,1,2")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=0.8)
    a = ap.parse_args()
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import CaseConfig, case_jobs

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    out = ["# Room under the topology bar (issue 31): gangs that may wait past it", "",
           f"- command: `nice .venv/bin/python bench/topology_bar.py {' '.join(sys.argv[1:])}`",
           f"- run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}",
           "- bar: 0.7 x fgd's gang JCT p95 (fgd's row of the same case in "
           "topology_runs.jsonl); `above by run`: gangs whose run time alone (unspread) "
           "exceeds the bar; `p95 allows`: at most how many may lie above it with the p95 "
           "still at or below; `slack`: the difference, at most how many gangs may wait or run "
           "spread past the bar under any policy (module doc of bench/topology_bar.py); `floor "
           "p95`: the gangs' run-time p95 (every gang started at arrival in one rack); `fgd "
           "unstarted`: gangs fgd never started in the window; `offered`: GPU-time of every "
           "job arriving in the window (full run) over the cluster's GPU-time in the window "
           "(all 1,213 nodes), and of the 8-GPU jobs over the 617 8-GPU nodes'", "",
           "| profile | seed | gangs | fgd p95 (min) | bar (min) | above by run | p95 allows "
           "| slack | floor p95 (min) | fgd unstarted | offered: all | 8-GPU jobs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    gpus = np.asarray(nodes.gpus, float)
    span = a.days * 86400
    path = RESULTS / "topology_runs.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            row = fgd_row(rows, prof, seed, a.days, a.load)
            if row is None:
                continue
            f, un = row["gang_jct_p95_min"], row["gangs_unstarted"]
            jobs = case_jobs(nodes, CaseConfig(profile=prof, seed=seed, days=a.days,
                                               load=a.load))
            m = (jobs.arrival >= 0) & (jobs.arrival < a.days * 86400) & (jobs.pods > 1)
            d = jobs.duration[m] / 60
            bar = SHARE * f
            above, allow = int((d > bar).sum()), allowed_above(int(m.sum()))
            inside = (jobs.arrival >= 0) & (jobs.arrival < span)
            work = jobs.pods * jobs.gpus * jobs.duration * np.minimum(jobs.milli, 1000) / 1000
            offered = work[inside].sum() / (gpus.sum() * span)
            big = work[inside & (jobs.gpus >= 8)].sum() / (gpus[gpus >= 8].sum() * span)
            out.append(f"| {prof} | {seed} | {int(m.sum())} | {f} | {bar:.1f} | {above} | "
                       f"{allow} | {allow - above} | {np.percentile(d, 95):.1f} | {un} | "
                       f"{offered:.2f} | {big:.2f} |")
    (RESULTS / "topology_bar.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
