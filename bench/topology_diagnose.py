"""Why do gangs wait in the topology replay (issue 31)? Diagnosis on dev seeds.

Usage: nice .venv/bin/python bench/topology_diagnose.py --profiles dlrm,helios --seeds 0,9 \
           --policies fgd,topology
Writes bench/results/topology_diagnose.md (rows kept in topology_diagnose_runs.jsonl).

From each replay's starts, run times and nodes (simulator.timeline.topology.run_topology) the
8-GPU nodes' occupancy is rebuilt every 10 minutes of the measured window, and read at the
moments a gang is pending:
- tail: the gangs at or above the gang JCT p95: share unstarted, share of their JCT that is
  wait, their sizes;
- capacity: GPUs busy on the 8-GPU nodes (only those hold gangs), empty 8-GPU nodes, and the
  nodes held by small pods only (< 8 GPUs per pod) against the fewest nodes their GPUs would
  fill if packed (``repackable``: nodes that better packing of small pods could empty);
- the pending big work in nodes: waiting gangs' pods and 8-GPU singles;
- ``saturated``: the share of pending-gang moments at which the big jobs running plus the
  head gang need more 8-GPU nodes than the small pods' packed minimum leaves (no placement
  rule could start it then; only a different order or a smaller gang could).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.topology import record
from simulator.replay.compare import parse_seeds, shared_traces_dir

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "topology_diagnose_runs.jsonl"
STEP_S = 600.0


def occupancy(jobs, res: dict, n_nodes: int, times: np.ndarray) -> dict:
    """Per sample time and node: GPUs used by big pods (8 GPUs) and by small pods, and the
    time the node's last small pod leaves (its actual end)."""
    start, run = res["start"], res["run"]
    big = np.zeros((len(times), n_nodes))
    small = np.zeros((len(times), n_nodes))
    small_end = np.full((len(times), n_nodes), -np.inf)
    for j, nodes in res["nodes"].items():
        s, e = start[j], start[j] + run[j]
        ti = np.flatnonzero((times >= s) & (times < e))
        if not len(ti):
            continue
        g = float(jobs.gpus[j] * jobs.milli[j] / 1000.0)
        for nd in nodes:
            if jobs.gpus[j] >= 8:
                big[ti, nd] += g
            else:
                small[ti, nd] += g
                small_end[ti, nd] = np.maximum(small_end[ti, nd], e)
    return {"big": big, "small": small, "small_end": small_end}


def diagnose(jobs, res: dict, gpus: np.ndarray, t0: float, t1: float) -> dict:
    """The figures of the module doc for one replay (minutes, counts, shares)."""
    times = np.arange(t0, t1, STEP_S)
    occ = occupancy(jobs, res, len(gpus), times)
    eight = gpus >= 8
    big, small = occ["big"][:, eight], occ["small"][:, eight]
    used = big + small
    empty = (used <= 1e-9).sum(axis=1)
    small_only = (small > 0) & (big <= 1e-9)
    n_small = small_only.sum(axis=1)
    packed = np.ceil(small.sum(axis=1) / 8.0 - 1e-9)
    repack = n_small - packed
    left = np.where(small_only, occ["small_end"][:, eight] - times[:, None], np.nan)
    start = res["start"]
    arr, pods = jobs.arrival, jobs.pods
    gang = (pods > 1) & (arr >= t0 - 86400.0)
    single8 = (pods == 1) & (jobs.gpus >= 8) & (arr >= t0 - 86400.0)
    pend_g = np.zeros(len(times))
    pend_s = np.zeros(len(times))
    head = np.zeros(len(times))
    for i, t in enumerate(times):
        w = gang & (arr <= t) & ~(start <= t)
        pend_g[i] = pods[w].sum()
        head[i] = pods[w][np.argmin(arr[w])] if w.any() else 0
        pend_s[i] = (single8 & (arr <= t) & ~(start <= t)).sum()
    big_nodes = big.sum(axis=1) / 8.0
    room = eight.sum() - packed  # 8-GPU nodes the small pods leave if packed
    waiting = pend_g > 0
    sat = waiting & (big_nodes + head > room)
    # the measured window's gangs: the tail at the JCT p95
    m = (arr >= t0) & (arr < t1) & (pods > 1)
    ok = np.isfinite(start)
    wait = np.where(ok, start - arr, t1 - arr)
    jct = wait + np.where(ok, res["run"], jobs.duration)
    tail = m & (jct >= np.percentile(jct[m], 95))
    # the gangs that set the p95: JCT between p90 and p99
    band = m & (jct >= np.percentile(jct[m], 90)) & (jct <= np.percentile(jct[m], 99))
    # what the window's big jobs ask of the 8-GPU pool: their GPU-seconds over its capacity
    bw = (arr >= t0) & (arr < t1) & (jobs.gpus >= 8)
    offered = float((pods * jobs.gpus * jobs.duration)[bw].sum()) / (8 * eight.sum() *
                                                                      (t1 - t0))
    q = lambda a, p: round(float(np.nanpercentile(a, p)), 1) if np.isfinite(a).any() \
        else float("nan")
    w = waiting
    return {
        "gangs": int(m.sum()), "unstarted": int((m & ~ok).sum()),
        "gang_jct_p95_min": q(jct[m] / 60, 95),
        "tail": int(tail.sum()), "tail_unstarted": round(float((tail & ~ok).sum() /
                                                          max(tail.sum(), 1)), 2),
        "tail_wait_share": round(float((wait[tail] / jct[tail]).mean()), 2),
        "tail_4pod": round(float((pods[tail] == 4).mean()), 2),
        "all_4pod": round(float((pods[m] == 4).mean()), 2),
        "tail_dur_p50_min": q(jobs.duration[tail] / 60, 50),
        "band_unstarted": round(float((band & ~ok).sum() / max(band.sum(), 1)), 2),
        "band_wait_share": round(float((wait[band] / jct[band]).mean()), 2),
        # no policy goes below this: every gang starting at once in one rack
        "floor_p95_min": q(jobs.duration[m] / 60, 95),
        "big_offered": round(offered, 2),
        "gang_dur_p50_min": q(jobs.duration[m] / 60, 50),
        "pending_share": round(float(w.mean()), 2),
        "busy8_p50": q(used[w].sum(axis=1) / (8 * eight.sum()), 50),
        "empty_p50": q(empty[w], 50), "head_p50": q(head[w], 50),
        "pend_gang_pods_p50": q(pend_g[w], 50), "pend_8gpu_singles_p50": q(pend_s[w], 50),
        "small_only_nodes_p50": q(n_small[w], 50), "repackable_p50": q(repack[w], 50),
        "small_left_p50_min": q(left[w] / 60, 50),
        "big_nodes_p50": q(big_nodes[w], 50),
        # GPUs free on the nodes no gang pod fits (< 8 GPUs): where small pods could go
        "free_on_small_nodes_p50": q((gpus[~eight] - occ["small"][:, ~eight]).sum(axis=1)[w], 50),
        "small_gpus_on_8_p50": q(small.sum(axis=1)[w], 50), "room_p50": q(room[w], 50),
        "saturated_share": round(float(sat.sum() / max(w.sum(), 1)), 2),
        "fragmented_share": round(float((w & ~sat & (empty < head)).sum() / max(w.sum(), 1)),
                                  2),
    }


def run(a: argparse.Namespace) -> None:
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import CaseConfig, case_jobs
    from simulator.timeline.runtime import predicted_runtimes
    from simulator.timeline.topology import run_topology

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            jobs = case_jobs(nodes, CaseConfig(profile=prof, seed=seed, days=a.days, load=a.load))
            t0, t1 = -86400.0, a.days * 86400.0
            pred = predicted_runtimes(jobs, t0, t1)["p50"].to_numpy()
            for pol in a.policies.split(","):
                pack = a.pack and pol.startswith("topology")
                res = run_topology(nodes, jobs, pol, t0, t1, runtime_p50=pred, seed=seed,
                                   pack=pack)
                row = diagnose(jobs, res, nodes.gpus, 0.0, t1)
                row.update(profile=prof, seed=seed, policy=pol + (" pack" if pack else ""),
                           days=a.days, load=a.load)
                record(row, RUNS)
    report()


COLS = ("gangs", "unstarted", "gang_jct_p95_min", "tail", "tail_unstarted", "tail_wait_share", "tail_4pod",
        "all_4pod", "tail_dur_p50_min", "band_unstarted", "band_wait_share", "floor_p95_min",
        "big_offered", "gang_dur_p50_min", "pending_share", "busy8_p50",
        "empty_p50", "head_p50", "pend_gang_pods_p50", "pend_8gpu_singles_p50",
        "small_only_nodes_p50", "repackable_p50", "small_left_p50_min", "big_nodes_p50", "free_on_small_nodes_p50", "small_gpus_on_8_p50",
        "room_p50", "saturated_share", "fragmented_share")


def runs(rows: list[dict]) -> list[str]:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["command"], []).append(r)
    out = []
    for cmd, rs in by.items():
        load = [float(r["machine"].split("load average ")[1].split(" ")[0]) for r in rs]
        out.append(f"{min(r['date'] for r in rs)}, {min(load)}-{max(load)}, `{cmd}`")
    return sorted(out)


def report() -> None:
    rows = [json.loads(x) for x in RUNS.read_text().splitlines()] if RUNS.exists() else []
    out = ["# Why gangs wait: topology replay diagnosis (issue 31, dev seeds)", "",
           "- command: `nice .venv/bin/python bench/topology_diagnose.py --profiles P --seeds S "
           "--policies fgd,topology [--pack]` (2 days after 1 day of warm-up, load 0.8)",
           "- runs (first date, 1-min load average range, arguments), on "
           + (rows[0]["machine"].split("; load")[0] if rows else "-") + ": "
           + "; ".join(runs(rows)),
           "- columns: see the module doc of bench/topology_diagnose.py; `_p50` columns are "
           "medians over the 10-minute samples at which at least one gang is pending; 8-GPU "
           "nodes: 617 of the 1,213 openb nodes", "",
           "| profile | seed | policy | " + " | ".join(COLS) + " |",
           "|" + "---|" * (3 + len(COLS))]
    for r in sorted(rows, key=lambda r: (r["profile"], r["seed"], r["policy"])):
        out.append(f"| {r['profile']} | {r['seed']} | {r['policy']} | " +
                   " | ".join(str(r.get(c, "-")) for c in COLS) + " |")
    (RESULTS / "topology_diagnose.md").write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="dlrm")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--policies", default="fgd,topology")
    ap.add_argument("--pack", action="store_true", help="topology policies with pack")
    a = ap.parse_args()
    t = time.time()
    run(a)
    print(f"done in {time.time() - t:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
