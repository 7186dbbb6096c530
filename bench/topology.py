"""Topology replay bench (issue 31): gang completion time under fgd, required placement and the
topology policy, on the openb nodes with racks of 16 nodes and blocks of 8 racks.

Usage: nice .venv/bin/python bench/topology.py --profiles helios,dlrm --seeds 1-3 --days 2 \
           --load 0.8 --phase final
Each run appends a row to bench/results/topology_runs.jsonl; the report
bench/results/topology.md is rewritten from every row kept there.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402
from simulator.timeline.topology import ELASTIC, POLICIES, run_topology, summarize  # noqa: E402

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "topology_runs.jsonl"
KEYS = ("gang_jct_p50_min", "gang_jct_p95_min", "gang_wait_p95_min", "gangs_spread_racks",
        "gangs_spread_blocks", "gangs_unstarted", "one_gpu_wait_p95_min", "one_gpu_jct_p95_min",
        "unstarted")

def run(a: argparse.Namespace) -> None:
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import CaseConfig, case_jobs
    from simulator.timeline.runtime import predicted_runtimes

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            cfg = CaseConfig(profile=prof, seed=seed, days=a.days, load=a.load)
            jobs = case_jobs(nodes, cfg)
            t0, t1 = -86400.0, a.days * 86400.0
            pred = predicted_runtimes(jobs, t0, t1)["p50"].to_numpy()
            for pol in a.policies.split(","):
                res = run_topology(nodes, jobs, pol, t0, t1, runtime_p50=pred,
                                   spread_rack=a.spread_rack, spread_block=a.spread_block,
                                   seed=seed)
                row = summarize(jobs, res, 0.0, t1)
                row.update(phase=a.phase, profile=prof, seed=seed, days=a.days, load=a.load,
                           spread_rack=a.spread_rack, spread_block=a.spread_block)
                print(json.dumps(row), flush=True)
                with RUNS.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    report()

def report() -> None:
    rows = [json.loads(x) for x in RUNS.read_text().splitlines()] if RUNS.exists() else []
    out = ["# Topology-aware gangs: replay over time (issue 31)", "",
           "- command: `nice .venv/bin/python bench/topology.py --profiles helios,dlrm "
           "--seeds S --days 2 --load L --phase dev|final|elastic [--policies P]`",
           f"- machine: 2 shared cores, Python {platform.python_version()}; "
           f"written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           "- cluster: the 1,213 openb GPU nodes in file order, racks of 16 nodes, blocks of 8 "
           "racks (simulator/timeline/topology.py); jobs: simulator/timeline/workload.py "
           "(gangs are 2 or 4 pods of 8 GPUs); queue: priority then arrival, backfill",
           "- a gang spread over racks of one block runs `spread_rack` x longer, over blocks "
           "`spread_block` x: ASSUMED values, not taken from a published figure (see below)",
           "- times in minutes over the jobs arriving in the measured window; a job that never "
           "started counts with its wait until the window's end (a floor)", ""]
    for phase in ("dev", "final"):
        sel = [r for r in rows if r["phase"] == phase]
        if not sel:
            continue
        out += [f"## {phase} runs", "",
                "| profile | seed | load | slowdowns | policy | gangs | " +
                " | ".join(KEYS) + " |", "|" + "---|" * (6 + len(KEYS))]
        for r in sel:
            out.append(f"| {r['profile']} | {r['seed']} | {r['load']} | "
                       f"{r['spread_rack']}/{r['spread_block']} | {r['policy']} | {r['gangs']} | "
                       + " | ".join(str(r[k]) for k in KEYS) + " |")
        out.append("")
        out += ratios(sel)
    sel = [r for r in rows if r["phase"] == "elastic"]
    if sel:
        out += ["## Elastic gangs vs static size (same seeds, run once)", "",
                "Gangs may start at half their pods or more (`topology-elastic`) or only whole "
                "(`topology`); GPU-hours are the finished gangs' work at full size, per day.", "",
                "| profile | seed | policy | gang wait p95 | gang JCT p95 | gang GPU-h done / day "
                "| gangs started smaller | gangs unstarted | 1-GPU JCT p95 |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in sel:
            out.append(f"| {r['profile']} | {r['seed']} | {r['policy']} | "
                       f"{r['gang_wait_p95_min']} | {r['gang_jct_p95_min']} | "
                       f"{r.get('gang_gpu_h_done_per_day')} | {r.get('gangs_started_smaller')} | "
                       f"{r['gangs_unstarted']} | {r['one_gpu_jct_p95_min']} |")
        out.append("")
    notes = Path(__file__).with_name("topology_notes.md")
    if notes.exists():
        out.append(notes.read_text())
    (RESULTS / "topology.md").write_text("\n".join(out) + "\n")

def ratios(sel: list[dict]) -> list[str]:
    """Gang JCT p95 of topology over fgd and over required, 1-GPU p95 vs fgd, per case."""
    out = ["| profile | seed | load | gang JCT p95 topology / fgd | topology / required | "
           "1-GPU JCT p95 topology - fgd (min) |", "|---|---|---|---|---|---|"]
    cases = sorted({(r["profile"], r["seed"], r["load"], r["spread_rack"]) for r in sel})
    for prof, seed, load, sr in cases:
        by = {r["policy"]: r for r in sel if (r["profile"], r["seed"], r["load"],
                                               r["spread_rack"]) == (prof, seed, load, sr)}
        if not all(p in by for p in POLICIES):
            continue
        t, f, q = (by[p]["gang_jct_p95_min"] for p in ("topology", "fgd", "required"))
        d1 = by["topology"]["one_gpu_jct_p95_min"] - by["fgd"]["one_gpu_jct_p95_min"]
        out.append(f"| {prof} | {seed} | {load} | {t / f:.2f} | {t / q:.2f} | {d1:+.1f} |")
    return out + [""]

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="helios,dlrm")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--spread-rack", type=float, default=1.3)
    ap.add_argument("--spread-block", type=float, default=1.6)
    ap.add_argument("--phase", choices=("dev", "final", "elastic"), default="dev")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"among {', '.join(POLICIES)}, {ELASTIC}")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    t = time.time()
    report() if a.report_only else run(a)
    print(f"done in {time.time() - t:.0f} s", file=sys.stderr)

if __name__ == "__main__":
    main()
