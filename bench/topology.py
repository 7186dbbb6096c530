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
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.benchenv import machine  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402
from simulator.timeline.topology import ELASTIC, POLICIES, run_topology, summarize  # noqa: E402

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "topology_runs.jsonl"
KEYS = ("gang_jct_p50_min", "gang_jct_p95_min", "gang_wait_p95_min", "gangs_spread_racks",
        "gangs_spread_blocks", "gangs_unstarted", "one_gpu_wait_p95_min", "one_gpu_jct_p95_min",
        "unstarted", "eight_gpu_wait_p95_min")


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
            reserved = None
            if a.keep != "none":
                from simulator.timeline.forecast import ReservedSchedule
                reserved = ReservedSchedule(jobs, a.keep, t0, t1, seed=seed)
            for pol in a.policies.split(","):
                res = run_topology(nodes, jobs, pol, t0, t1, runtime_p50=pred,
                                   spread_rack=a.spread_rack, spread_block=a.spread_block,
                                   seed=seed, hold=a.hold, hold_pick=a.hold_pick,
                                   reserved=reserved, regrow=a.regrow,
                                   reserve_nodes=a.reserve_nodes, pack=a.pack,
                                   elastic_wait=a.elastic_wait, drain=a.drain,
                                   pack_racks=a.pack_racks,
                                   drain_hold_s=a.drain_hold_min * 60,
                                   big_order=a.big_order)
                row = summarize(jobs, res, 0.0, t1)
                row.update(phase=a.phase, profile=prof, seed=seed, days=a.days, load=a.load,
                           spread_rack=a.spread_rack, spread_block=a.spread_block,
                           hold=a.hold if pol.startswith("topology") else 0,
                           hold_pick=a.hold_pick,
                           keep=a.keep if pol.startswith("topology") else "none",
                           regrow=a.regrow and pol == ELASTIC,
                           elastic_wait=a.elastic_wait and pol == ELASTIC,
                           reserve_nodes=a.reserve_nodes,
                           pack=a.pack and pol.startswith("topology"),
                           drain=a.drain if pol == "topology" else 0,
                           pack_racks=a.pack and a.pack_racks and pol.startswith("topology"),
                           drain_hold_min=a.drain_hold_min,
                           big_order=a.big_order if pol.startswith("topology") else 0.0)
                record(row, RUNS)
    report()


def record(row: dict, path: Path) -> None:
    """Stamp a run's row with the machine, the arguments and the time; print and keep it."""
    row.update(machine=machine(), command=" ".join(sys.argv[1:]),
               date=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(json.dumps(row), flush=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def label(r: dict) -> str:
    """The policy as the tables name it: topology variants carry their hold count."""
    out = r["policy"]
    if r.get("hold"):
        pick = {"free": " (most room)", "collect": " (collect)"}.get(r.get("hold_pick"), "")
        out += f" hold {r['hold']}{pick}"
    if r.get("keep", "none") != "none":
        out += f" keep {r['keep']}"
    if r.get("pack"):
        out += " pack" + (" racks" if r.get("pack_racks") else "")
    if r.get("drain"):
        out += f" drain {r['drain']} (hold {r['drain_hold_min']:g} min)"
    if r.get("big_order"):
        out += f" shortest first ({r['big_order']:g})"
    if r.get("reserve_nodes"):
        out += " + node reservation"
    out += " waits" if r.get("elastic_wait") else ""
    return out + (" regrow" if r.get("regrow") else "")


def report() -> None:
    rows = [json.loads(x) for x in RUNS.read_text().splitlines()] if RUNS.exists() else []
    by_cmd: dict[str, list[dict]] = {}
    for r in rows:
        by_cmd.setdefault(r.get("command", ""), []).append(r)
    runs = []
    for cmd, rs in by_cmd.items():
        dates = sorted(r.get("date", "2026-11-26 09:44 UTC") for r in rs)
        load = [float(r["machine"].split("load average ")[1].split(" ")[0]) for r in rs
                if "machine" in r]
        mach = rs[0].get("machine", "2 shared cores (machine line not recorded then)")
        mach = mach.split("; load average")[0] + (
            f"; 1-min load average {min(load)}-{max(load)}" if load else "")
        runs.append((dates[0] + (f" to {dates[-1][11:]}" if dates[-1] != dates[0] else ""),
                     mach, cmd or "the first final runs (arguments not recorded)"))
    runs.sort()
    out = ["# Topology-aware gangs: replay over time (issue 31)", "",
           "- command: `nice .venv/bin/python bench/topology.py --profiles helios,dlrm "
           "--seeds S --days 2 --load L --phase dev|final|elastic|elastic-dev [--policies P] "
           "[--hold K] [--hold-pick predicted|free|collect] [--keep none|flat|forecast] "
           "[--regrow] [--pack] [--elastic-wait] [--pack-racks] [--drain K] "
           "[--drain-hold-min M] [--big-order A]`",
           f"- report written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from "
           "bench/results/topology_runs.jsonl; the runs (date, machine, arguments):"]
    out += [f"  - {d}: {m}; `{c}`" for d, m, c in runs]
    out += ["- cluster: the 1,213 openb GPU nodes in file order, racks of 16 nodes, blocks of 8 "
            "racks (simulator/timeline/topology.py); jobs: simulator/timeline/workload.py "
            "(gangs are 2 or 4 pods of 8 GPUs); queue: priority then arrival, backfill "
            "(`shortest first (A)`: big jobs at arrival + A x predicted run time)",
            "- a gang spread over racks of one block runs `spread_rack` x longer, over blocks "
            "`spread_block` x: parameters; where the defaults come from is below (The slowdown "
            "of a spread gang)",
            "- `hold K`: the first K waiting gangs each hold the rack predicted to free first "
            "(`(most room)`: the rack with most room now; `(collect)`: the whole-free nodes of "
            "one block) until they start (EASY backfill per rack); hold 0 is the policy "
            "without it; `topology-rechosen`: the first hold variant (10:44-10:49 UTC), whose "
            "rack was re-chosen every pass; `keep flat|forecast`: single pods keep off the "
            "racks kept whole-free for that gang demand forecast; `regrow`: elastic gangs "
            "grow when their rack has room; `pack`: pods of < 8 GPUs go first where their "
            "predicted end does not prolong how long an 8-GPU node stays taken; `waits`: "
            "elastic gangs wait for a whole rack as static ones do and start smaller only "
            "where they would spread; `pack racks`: then on taken nodes of racks that no "
            "4-pod gang fits in before the pod ends (long runners together); `drain K (hold M "
            "min)`: the first K pending big jobs each drain the rack predicted to hold them "
            "first (issue 28's plan per rack), pods of < 8 GPUs pending over M min not held off",
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
                       f"{r['spread_rack']}/{r['spread_block']} | {label(r)} | {r['gangs']} | "
                       + " | ".join(str(r.get(k, "-")) for k in KEYS) + " |")
        out.append("")
        out += ratios(sel)
    for phase, title in (("elastic-dev", "Elastic gangs vs static size: dev runs"),
                         ("elastic", "Elastic gangs vs static size (final seeds, run once)")):
        out += elastic_table([r for r in rows if r["phase"] == phase], title)
    out += ["## Gavel: consolidated vs unconsolidated throughput (the slowdown's source)", "",
            "Computed by this script from ../shared/traces/gavel-colocation/gavel_solo_flat.csv "
            "(stanford-futuredata/gavel @ c4fa4009, physical-cluster throughputs, MIT): the "
            "same job's throughput with its workers on one server over its throughput with "
            "them spread over servers.", ""] + gavel_consolidation()
    notes = Path(__file__).with_name("topology_notes.md")
    text = notes.read_text() if notes.exists() else ""
    # the notes' lead (whatever comes before "## Readings": the latest try's summary) goes
    # first, under the title; the rest after the tables
    lead, sep, rest = text.partition("## Readings")
    if lead.strip() and sep:
        out[2:2] = [lead.strip(), ""]
        text = sep + rest
    if text:
        out.append(text)
    (RESULTS / "topology.md").write_text("\n".join(out) + "\n")


def elastic_table(sel: list[dict], title: str) -> list[str]:
    """Elastic gangs (`topology-elastic`) against static size (`topology`), per case."""
    if not sel:
        return []
    out = [f"## {title}", "",
           "Gangs may start at half their pods or more (`topology-elastic`; `regrow`: they grow "
           "when their rack has room) or only whole (`topology`); gang GPU-h done: the work "
           "(full size) of the gangs that finished in the window, per day; big-job work: what "
           "every job of 8 GPUs or more delivered inside the window, finished or not, in "
           "full-size full-speed GPU-hours per day (simulator/timeline/topology.py "
           "big_work_gpu_h).", "",
           "| profile | seed | policy | gang wait p95 | gang JCT p95 | gang GPU-h done / day "
           "| big-job work GPU-h / day | gangs started smaller | gangs unstarted | "
           "1-GPU JCT p95 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(sel, key=lambda r: (r["profile"], r["seed"], label(r))):
        out.append(f"| {r['profile']} | {r['seed']} | {label(r)} | "
                   f"{r['gang_wait_p95_min']} | {r['gang_jct_p95_min']} | "
                   f"{r.get('gang_gpu_h_done_per_day')} | "
                   f"{r.get('big_work_gpu_h_per_day', '-')} | "
                   f"{r.get('gangs_started_smaller')} | {r['gangs_unstarted']} | "
                   f"{r['one_gpu_jct_p95_min']} |")
    return out + [""]


def gavel_consolidation() -> list[str]:
    """The published figure the spread slowdowns are read from: Gavel's (OSDI'20) measured
    throughputs of distributed jobs with workers on one server ("consolidated") and spread over
    servers ("unconsolidated"), ../shared/traces/gavel-colocation (physical cluster rows)."""
    import pandas as pd

    path = shared_traces_dir() / "gavel-colocation" / "gavel_solo_flat.csv"
    if not path.exists():
        return [f"(no {path}: Gavel's table not shown)", ""]
    s = pd.read_csv(path)
    s = s[(s.source == "physical") & (s.solo_thr_a > 0)]
    out = ["| GPU | workers | jobs | consolidated / unconsolidated throughput: p25 | median | "
           "p75 |", "|---|---|---|---|---|---|"]
    for gpu in ("k80", "p100", "v100"):
        m = s[s.gpu == gpu].merge(s[s.gpu == f"{gpu}_unconsolidated"], on=["job_a", "scale_a"],
                                  suffixes=("", "_u"))
        m = m.assign(r=m.solo_thr_a / m.solo_thr_a_u)
        for scale in (1, 2, 4, 8):
            r = m[m.scale_a == scale].r
            if len(r):
                out.append(f"| {gpu.upper()} | {scale} | {len(r)} | {r.quantile(.25):.2f} | "
                           f"{r.median():.2f} | {r.quantile(.75):.2f} |")
    return out + [""]


def ratios(sel: list[dict]) -> list[str]:
    """Gang JCT p95 of each topology variant over fgd and over required, 1-GPU p95 vs fgd,
    per case (the baselines of the same case: same profile, seed, load and slowdowns)."""
    out = ["| profile | seed | load | policy | gang JCT p95 / fgd | / required | "
           "1-GPU JCT p95 - fgd (min) |", "|---|---|---|---|---|---|---|"]
    case = lambda r: (r["profile"], r["seed"], r["load"], r["spread_rack"])  # noqa: E731
    for key in sorted({case(r) for r in sel}):
        same = [r for r in sel if case(r) == key]
        base = {label(r): r for r in same if label(r) in ("fgd", "required")}
        if "fgd" not in base:
            continue
        f, q = base["fgd"], base.get("required")
        for r in same:
            if label(r) in base:
                continue
            t = r["gang_jct_p95_min"]
            d1 = r["one_gpu_jct_p95_min"] - f["one_gpu_jct_p95_min"]
            vs_q = f"{t / q['gang_jct_p95_min']:.2f}" if q else "-"
            out.append(f"| {key[0]} | {key[1]} | {key[2]} | {label(r)} | "
                       f"{t / f['gang_jct_p95_min']:.2f} | {vs_q} | {d1:+.1f} |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="helios,dlrm")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--spread-rack", type=float, default=1.3)
    ap.add_argument("--spread-block", type=float, default=1.6)
    ap.add_argument("--hold", type=int, default=0,
                    help="waiting gangs that hold a rack (topology policies)")
    ap.add_argument("--hold-pick", choices=("predicted", "free", "collect"), default="predicted",
                    help="which rack a waiting gang holds")
    ap.add_argument("--keep", choices=("none", "flat", "forecast"), default="none",
                    help="keep whole racks free for the gang demand of this forecast")
    ap.add_argument("--reserve-nodes", action="store_true",
                    help="with --keep: single pods also held off the empty nodes issue 28's "
                    "reservation keeps for the gang demand")
    ap.add_argument("--pack", action="store_true",
                    help="pods of < 8 GPUs first where they do not keep an 8-GPU node taken "
                    "longer (predicted run times)")
    ap.add_argument("--elastic-wait", action="store_true",
                    help="elastic gangs wait for a whole rack like static ones and start "
                    "smaller only instead of spreading")
    ap.add_argument("--pack-racks", action="store_true",
                    help="with --pack: then taken nodes of racks no 4-pod gang fits in before "
                    "the pod ends (long runners together)")
    ap.add_argument("--drain", type=int, default=0,
                    help="the first K pending big jobs each drain one rack (topology policy)")
    ap.add_argument("--drain-hold-min", type=float, default=30.0,
                    help="with --drain: pods of < 8 GPUs pending longer are not held off")
    ap.add_argument("--big-order", type=float, default=0.0,
                    help="topology policies: big jobs queue by arrival + this x their "
                         "predicted run time (0: arrival order)")
    ap.add_argument("--regrow", action="store_true",
                    help="elastic gangs started smaller grow when their rack has room")
    ap.add_argument("--phase", choices=("dev", "final", "elastic", "elastic-dev"),
                    default="dev")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"among {', '.join(POLICIES)}, {ELASTIC}")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    if a.drain < 0 or a.drain_hold_min < 0 or (a.drain and a.hold):
        sys.exit("error: --drain and --drain-hold-min must be >= 0, and --drain replaces --hold")
    if a.pack_racks and not a.pack:
        sys.exit("error: --pack-racks needs --pack")
    if a.reserve_nodes and a.keep == "none":
        sys.exit("error: --reserve-nodes needs the gang demand forecast: --keep flat|forecast")
    t = time.time()
    report() if a.report_only else run(a)
    print(f"done in {time.time() - t:.0f} s", file=sys.stderr)

if __name__ == "__main__":
    main()
