"""Timeline replay (issue 16): policies x arrival profiles x seeds, over time with departures.

Usage: nice .venv/bin/python bench/replay_timeline.py --phase final --seeds 100-104 \
           --profiles helios,dlrm --days 14 [--no-gang] [--table-only]
Every finished (phase, profile, seed, policy, gang) run is cached, one JSON line each, in
bench/results/replay_timeline_runs.jsonl, so the grid can run in pieces (several processes);
the markdown is rebuilt from the cache: bench/results/replay_timeline.md (final phase) and
replay_timeline_dev.md (dev phase), plus replay_timeline_<profile>.png for one seed.
Timings: nice .venv/bin/python bench/replay_timeline.py --phase speed --seeds 100 \
           --profiles helios --days 14 --repeat 3   (-> replay_timeline_speed.md: medians, and
every run with its load average and the digest of its decisions)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import machine  # noqa: E402

from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402
from simulator.timeline.policies import POLICIES  # noqa: E402
from simulator.timeline.workload import CLASSES  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CACHE = RESULTS / "replay_timeline_runs.jsonl"
GROUPS = (*CLASSES, "8+gang")


def _load() -> list[dict]:
    return [json.loads(x) for x in CACHE.read_text().splitlines()] if CACHE.exists() else []


def run(a: argparse.Namespace) -> None:
    from simulator.replay.data import load_nodes

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    pols = list(POLICIES) if a.policies == "all" else a.policies.split(",")
    if a.repeat:  # drop the cached runs of this grid, then run it ``repeat`` times
        grid = {(a.phase, prof, seed, p, not a.no_gang, a.days) for prof in a.profiles.split(",")
                for seed in parse_seeds(a.seeds) for p in pols}
        keep = [r for r in _load() if (r["phase"], r["profile"], r["seed"], r["policy"],
                                       r["gang_semantics"], r["days"]) not in grid]
        CACHE.write_text("".join(json.dumps(r) + "\n" for r in keep))
    for _ in range(max(1, a.repeat)):
        run_grid(a, nodes, pols)


def run_grid(a: argparse.Namespace, nodes, pols: list[str]) -> None:
    from simulator.timeline.plot import plot_timeline
    from simulator.timeline.run import CaseConfig, run_case

    done = set() if a.repeat else {(r["phase"], r["profile"], r["seed"], r["policy"],
                                    r["gang_semantics"], r["days"]) for r in _load()
                                   if r.get("runtime_quantile", "p90") == a.runtime_quantile
                                   and r.get("quantile", "p90") == a.quantile
                                   and r.get("max_hold_s") == a.max_hold
                                   and r.get("drain_jobs", "all") == _drain_label(a)
                                   and r.get("hold_multi", 1.0) == a.hold_multi
                                   and r.get("protect_jobs", 0) == a.protect_jobs
                                   and r.get("resident_quantile") == a.resident_quantile
                                   and r.get("resident_floor", False) == a.resident_floor
                                   and r.get("big_order", 0.0) == a.big_order
                                   and r.get("big_order_area", False) == a.big_order_area
                                   and r.get("pack", False) == a.pack}
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            todo = tuple(p for p in pols if (a.phase, prof, seed, p, not a.no_gang, a.days)
                         not in done)
            if not todo:
                continue
            # timings: one policy per case, so that each row's load average is its own
            raw = {}
            for group in [(p,) for p in todo] if a.phase == "speed" else [todo]:
                cfg = CaseConfig(profile=prof, seed=seed, days=a.days, gang=not a.no_gang,
                                 load=a.load, policies=group, horizon=a.horizon,
                                 quantile=a.quantile, runtime_quantile=a.runtime_quantile,
                                 max_hold_s=a.max_hold, drain_jobs=a.drain_jobs,
                                 hold_multi=a.hold_multi, protect_jobs=a.protect_jobs,
                                 resident_quantile=a.resident_quantile,
                                 resident_floor=a.resident_floor, big_order=a.big_order,
                                 big_order_area=a.big_order_area, pack=a.pack)
                rows, got = run_case(nodes, cfg, keep=a.plot)
                raw.update(got)
                for r in rows:
                    r.update(phase=a.phase, days=a.days, horizon=a.horizon,
                             quantile=a.quantile, runtime_quantile=a.runtime_quantile,
                             max_hold_s=a.max_hold, drain_jobs=_drain_label(a),
                             hold_multi=a.hold_multi, protect_jobs=a.protect_jobs,
                             resident_quantile=a.resident_quantile,
                             resident_floor=a.resident_floor, big_order=a.big_order,
                             big_order_area=a.big_order_area, pack=a.pack, load=" / ".join(f"{x:.1f}" for x in os.getloadavg()),
                             finished=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
                    with CACHE.open("a") as f:
                        f.write(json.dumps(r) + "\n")
                    print(f"{a.phase} {prof} {seed} {r['policy']}: 8+gang p95 "
                          f"{r['8+gang']['p95_min']} min, alloc {r['alloc_mean']} "
                          f"({r['cpu_seconds']} cpu s)", flush=True)
            if raw:
                plot_timeline({k: v.samples for k, v in raw.items()},
                              RESULTS / f"replay_timeline_{prof}.png",
                              f"{prof} arrivals, seed {seed}, {a.days:g} days ("
                              + ("no gang semantics" if a.no_gang else "gangs all-or-nothing")
                              + ")")


def _quantile(x: str) -> float:
    q = float(x)
    if not 0.0 <= q <= 1.0:
        raise argparse.ArgumentTypeError(f"{x}: a quantile is between 0 and 1")
    return q


def _drain_label(a: argparse.Namespace) -> int | str:
    return "all" if a.drain_jobs is None else a.drain_jobs


def _mean(xs: list) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def table(runs: list[dict], phase: str) -> list[str]:
    runs = [r for r in runs if r["phase"] == phase]
    mid = (lambda xs: float(np.median(xs))) if phase == "speed" else _mean  # repeated timings
    out: list[str] = []
    for prof in sorted({r["profile"] for r in runs}):
        gang = [r for r in runs if r["profile"] == prof and r["gang_semantics"]]
        if not gang:
            continue
        seeds = sorted({r["seed"] for r in gang})
        days = sorted({r["days"] for r in gang})
        out += [f"### {prof} arrivals, gangs all-or-nothing: seeds {seeds}, {days} days", "",
                "Queueing delay p50 / p95 in minutes, mean over seeds; alloc = mean GPU "
                "allocation %; frag-blk = jobs blocked while enough GPUs were free in "
                "fragments (per run); held = small/8-GPU jobs that waited on the reservation.",
                "", "| policy | " + " | ".join(GROUPS) + " | alloc % | queue | frag-blk jobs |"
                " frag events | held jobs | reserved GPUs | empty 8-GPU nodes | cpu s | wall s |",
                "|---" * (len(GROUPS) + 10) + "|"]
        for p in POLICIES:
            rs = [r for r in gang if r["policy"] == p]
            if not rs:
                continue
            cells = [f"{_mean([r[g]['p50_min'] for r in rs]):.1f} / "
                     f"{_mean([r[g]['p95_min'] for r in rs]):.1f}" for g in GROUPS]
            held = _mean([sum(r[g]["held"] * r[g]["n"] for g in CLASSES) for r in rs])
            out.append(f"| {p} | " + " | ".join(cells) +
                       f" | {_mean([r['alloc_mean'] for r in rs]):.2f}"
                       f" | {_mean([r['queue_mean'] for r in rs]):.1f}"
                       f" | {_mean([r['frag_blocked_jobs'] for r in rs]):.0f}"
                       f" | {_mean([r['frag_events'] for r in rs]):.0f}"
                       f" | {held:.0f} | {_mean([r['reserved_mean'] for r in rs]):.0f}"
                       f" | {_mean([r['empty8_mean'] for r in rs]):.1f}"
                       f" | {mid([r['cpu_seconds'] for r in rs]):.1f}"
                       f" | {mid([r['seconds'] for r in rs]):.1f} |")
        out += ["", "p95 change against `fgd` per seed (8-GPU / gang / 8+gang), and mean "
                "allocation difference in points:", "",
                "| policy | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |",
                "|---" * (len(seeds) + 2) + "|"]
        for p in POLICIES:
            if p == "fgd":
                continue
            cells, acc = [], {g: [] for g in ("8", "gang", "8+gang", "alloc")}
            for s in seeds:
                b = [r for r in gang if r["seed"] == s and r["policy"] == "fgd"]
                x = [r for r in gang if r["seed"] == s and r["policy"] == p]
                if not b or not x:
                    cells.append("")
                    continue
                b, x = b[0], x[0]
                ch = {g: 100 * (x[g]["p95_min"] / b[g]["p95_min"] - 1) if b[g]["p95_min"]
                      else float("nan") for g in ("8", "gang", "8+gang")}
                da = x["alloc_mean"] - b["alloc_mean"]
                for g in ch:
                    acc[g].append(ch[g])
                acc["alloc"].append(da)
                cells.append(f"{ch['8']:+.0f} / {ch['gang']:+.0f} / {ch['8+gang']:+.0f} %, "
                             f"{da:+.2f}")
            cells.append(f"{_mean(acc['8']):+.0f} / {_mean(acc['gang']):+.0f} / "
                         f"{_mean(acc['8+gang']):+.0f} %, {_mean(acc['alloc']):+.2f}")
            out.append(f"| {p} | " + " | ".join(cells) + " |")
        out.append("")
    loose = [r for r in runs if not r["gang_semantics"]]
    if loose:
        out += ["### Without gang semantics (gang pods placed one by one)", "",
                "| profile | seed | days | policy | gang p50 / p95 min | gang deadlock episodes |"
                " partial gangs timed out | frag-blk jobs | alloc % |", "|---" * 9 + "|"]
        for r in sorted(loose, key=lambda r: (r["profile"], r["seed"],
                                              list(POLICIES).index(r["policy"]))):
            out.append(f"| {r['profile']} | {r['seed']} | {r['days']:g} | {r['policy']} | "
                       f"{r['gang']['p50_min']} / {r['gang']['p95_min']} | "
                       f"{r['gang_deadlocks']} | {r['gang_restarts']} | "
                       f"{r['frag_blocked_jobs']} | {r['alloc_mean']:.2f} |")
        out.append("")
    return out


def runs_table(runs: list[dict], phase: str) -> list[str]:
    """One line per cached run: CPU and wall time, the load average when it finished, and the
    digest of its decisions (equal digests = the same replay)."""
    out = ["### Runs", "", "| profile | seed | days | policy | cpu s | wall s | forecast s |"
           " load average (1/5/15 min) at the end | finished | digest |", "|---" * 10 + "|"]
    for r in runs:
        if r["phase"] == phase:
            out.append(f"| {r['profile']} | {r['seed']} | {r['days']:g} | {r['policy']} | "
                       f"{r['cpu_seconds']} | {r['seconds']} | {r['forecast_seconds']} | "
                       f"{r.get('load', '')} | {r.get('finished', '')} | "
                       f"{r.get('digest', '')} |")
    return out + [""]


def write(phase: str, command: str, notes: Path | None) -> None:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=Path(__file__).parent).stdout.strip()
    name = "replay_timeline.md" if phase == "final" else f"replay_timeline_{phase}.md"
    lines = [f"# Timeline replay: what prospective placement buys ({phase} seeds)", "",
             f"- command: `{command}`", f"- machine: {machine()}",
             f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
             f"- git rev: {rev} (runs cached in `{CACHE.name}`)", ""]
    if notes is not None and notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    lines += table(_load(), phase)
    if phase == "speed":
        lines += runs_table(_load(), phase)
    (RESULTS / name).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("dev", "final", "speed", "dev28", "final28", "dev28b",
                                        "final28b", "dev28c", "final28c", "dev28d", "final28d",
                                        "dev28e", "dev28f", "final28f", "dev28g", "final28g",
                                        "dev28h", "final28h"),
                    default="dev",
                    help="dev28 / final28: issue 28 (backfill) runs, 2 measured days; "
                         "dev28b / final28b: the second try (open lent nodes, hold bound); "
                         "dev28c / final28c: the third (targeted draining); dev28d / "
                         "final28d: the fourth (2-4 GPU jobs' hold bound, --hold-multi); "
                         "dev28e: drain-oracle-pred (the oracle's lead split); dev28f / "
                         "final28f: the sixth (residents' ends given their age); dev28g / "
                         "final28g: the seventh (big jobs shortest predicted first, "
                         "--big-order); dev28h / final28h: the eighth (--pack)")
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--profiles", default="helios,dlrm")
    ap.add_argument("--policies", default="all")
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--horizon", type=int, default=3)
    ap.add_argument("--quantile", default="p90")
    ap.add_argument("--runtime-quantile", default="p90",
                    help="backfill: the predicted run-time quantile a pod is believed to take")
    ap.add_argument("--max-hold", type=float, default=None,
                    help="backfill: seconds a pod is held off reserved nodes at most "
                         "(default: the component's reservation_max_hold_s; 0: no bound)")
    ap.add_argument("--drain-jobs", type=int, default=None,
                    help="draining policies: plan for the first N pending big jobs (default: "
                         "all: conservative backfilling)")
    ap.add_argument("--hold-multi", type=float, default=1.0,
                    help="backfill: 2-4 GPU jobs' hold bound is --max-hold times this "
                         "(inf: none)")
    ap.add_argument("--protect-jobs", type=int, default=0,
                    help="draining: a pod past its hold bound still keeps off the nodes "
                         "drained for the first N pending big jobs (default 0: none)")
    ap.add_argument("--resident-quantile", type=_quantile, default=None,
                    help="draining with predicted run times: residents' predicted ends from "
                         "this quantile (0-1) of the remaining run time given their age "
                         "(default: start + the --runtime-quantile prediction)")
    ap.add_argument("--resident-floor", action="store_true",
                    help="with --resident-quantile: a resident's predicted end is never "
                         "before start + its --runtime-quantile prediction (age is read only "
                         "past it)")
    ap.add_argument("--big-order", type=float, default=0.0,
                    help="backfilling policies: big jobs queue by arrival + this x their "
                         "predicted run time (default 0: FIFO)")
    ap.add_argument("--big-order-area", action="store_true",
                    help="with --big-order: the predicted run time x the job's pods")
    ap.add_argument("--pack", action="store_true",
                    help="backfilling policies: pods of < 8 GPUs first where their predicted "
                         "end does not prolong how long an 8-GPU node stays taken")
    ap.add_argument("--no-gang", action="store_true")
    ap.add_argument("--plot", action="store_true", help="PNG per profile (last seed run)")
    ap.add_argument("--notes", type=Path, help="markdown put above the tables")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--repeat", type=int, default=0,
                    help="drop the grid's cached runs and run it this many times (timings; "
                         "the speed table then shows the median)")
    a = ap.parse_args()
    if not a.table_only:
        run(a)
    if not a.phase.endswith(("28b", "28c", "28g")):  # replay_timeline_backfill.py tables those
        write(a.phase, "nice .venv/bin/python bench/replay_timeline.py " +
              " ".join(sys.argv[1:]), a.notes)


if __name__ == "__main__":
    main()
