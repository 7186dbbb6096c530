"""MIG geometry planner over time (issue 18 item 3, issue 28 item 4): static all-balanced, a
static geometry from the past week, one from hindsight, the planner's first plan kept, the
planner re-planning, and the planner fed the future (oracle), arrival profiles x seeds.

Usage: nice .venv/bin/python bench/mig_plan.py --phase final --seeds 100-104 \
           --profiles helios,dlrm [--set '{"lookahead": 3}' --tag base] [--table-only]
Every (phase, tag, profile, seed, policy) run is cached, one JSON line each, in
bench/results/mig_plan_runs.jsonl; the markdown is rebuilt from it: bench/results/mig_plan.md
(final phase) or mig_plan_dev.md (dev phase, one section per tag).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header  # noqa: E402

from simulator.replay.compare import parse_seeds  # noqa: E402
from simulator.timeline.mig_run import POLICIES  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CACHE = RESULTS / "mig_plan_runs.jsonl"
# settings chosen on dev seeds 0-2 (bench/results/mig_plan_dev.md); final seeds run once.
# Issue 28 (tags i28-E, i28-G): the planner starts from its own plan of the past week (custom
# geometries, 1g-3g first) and re-plans from the past week's mean concurrency with 1g-3g held;
# re-planning from the forecast (i28-E) cost 7g pods p95 on both profiles
DEFAULT = {"days": 7.0, "load": 0.5, "lookahead": 24, "quantile": "p90", "period_s": 21600.0,
           "downtime_s": 300.0, "drain_max_s": None, "max_draining": 3, "history_days": 8.0,
           "custom": True, "protect": "all", "start": "past-week", "hold_small": True,
           "floor_week": False, "demand": "week"}


def _load() -> list[dict]:
    return [json.loads(x) for x in CACHE.read_text().splitlines()] if CACHE.exists() else []


def run(a: argparse.Namespace, setting: dict) -> None:
    from simulator.timeline.mig_run import MigCaseConfig, run_mig_case

    done = {(r["phase"], r["tag"], r["profile"], r["seed"], r["policy"]) for r in _load()}
    pols = POLICIES if a.policies == "all" else tuple(a.policies.split(","))
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            todo = tuple(p for p in pols if (a.phase, a.tag, prof, seed, p) not in done)
            if not todo:
                continue
            cfg = MigCaseConfig(profile=prof, seed=seed, policies=todo, **setting)
            for r in run_mig_case(cfg):
                r.update(phase=a.phase, tag=a.tag, setting=setting)
                with CACHE.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{a.phase} {a.tag} {prof} {seed} {r['policy']}: p95 "
                      f"{r['all']['p95_min']} min, re-splits {r['resplits']} "
                      f"({r['cpu_seconds']} cpu s)", flush=True)


def _m(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def _pq(r: dict, g: str) -> str:
    return f"{r[g]['p50_min']:.0f} / {r[g]['p95_min']:.0f}"


def table(runs: list[dict], phase: str, tag: str) -> list[str]:
    runs = [r for r in runs if r["phase"] == phase and r["tag"] == tag]
    out: list[str] = []
    for prof in sorted({r["profile"] for r in runs}):
        rs = [r for r in runs if r["profile"] == prof]
        seeds = sorted({r["seed"] for r in rs})
        pols = [p for p in POLICIES if any(r["policy"] == p for r in rs)]
        out += [f"### {prof} arrivals, seeds {seeds} (tag `{tag}`)", "",
                "Queueing delay p50 / p95 in minutes (mean over seeds); `offered` = pods of the "
                "profiles all-balanced has (1g/2g/3g); alloc = compute slices in use %; "
                "stranded = compute slices in no instance; idle-while-waiting = free compute "
                "slices no waiting pod can use, while pods wait (time means); unmet = waiting "
                "compute slices x hours; re-splits per node per day mean / max in any day.", "",
                "| policy | all | small | large | offered | alloc % | stranded | "
                "idle-while-waiting | unmet slice-h | re-splits | per node-day mean / max | "
                "unstarted | cpu s | wall s |", "|---" * 14 + "|"]
        for p in pols:
            x = [r for r in rs if r["policy"] == p]
            cells = [f"{_m([r[g]['p50_min'] for r in x]):.0f} / "
                     f"{_m([r[g]['p95_min'] for r in x]):.0f}"
                     for g in ("all", "small", "large", "balanced")]
            out.append(f"| {p} | " + " | ".join(cells) +
                       f" | {_m([r['alloc_mean'] for r in x]):.1f}"
                       f" | {_m([r['stranded_mean'] for r in x]):.0f}"
                       f" | {_m([r['blocked_idle_mean'] for r in x]):.0f}"
                       f" | {_m([r['unmet_slice_hours'] for r in x]):.0f}"
                       f" | {_m([r['resplits'] for r in x]):.1f}"
                       f" | {_m([r['resplits_per_node_day_mean'] for r in x]):.3f} / "
                       f"{max(r['resplits_per_node_day_max'] for r in x)}"
                       f" | {_m([r['all']['unstarted'] for r in x]):.0f}"
                       f" | {_m([r['cpu_seconds'] for r in x]):.1f}"
                       f" | {_m([r['seconds'] for r in x]):.1f} |")
        out += ["", "Per seed: p95 of all MIG pods (min); planner vs static; planner vs oracle "
                "(distance: p95 difference, unmet slice-hours ratio):", "",
                "| seed | " + " | ".join(pols) + " | planner vs static | planner - oracle p95 "
                "| planner / oracle unmet |", "|---" * (len(pols) + 4) + "|"]
        cuts, dist, ratio = [], [], []
        for s in seeds:
            by = {r["policy"]: r for r in rs if r["seed"] == s}
            cells = [f"{by[p]['all']['p95_min']:.0f}" if p in by else "" for p in pols]
            extra = ["", "", ""]
            if "planner" in by and "static" in by:
                c = 100 * (by["planner"]["all"]["p95_min"] / by["static"]["all"]["p95_min"] - 1)
                cuts.append(c)
                extra[0] = f"{c:+.0f} %"
            if "planner" in by and "oracle" in by:
                d = by["planner"]["all"]["p95_min"] - by["oracle"]["all"]["p95_min"]
                u = by["planner"]["unmet_slice_hours"] / max(by["oracle"]["unmet_slice_hours"],
                                                              1e-9)
                dist.append(d)
                ratio.append(u)
                extra[1:] = [f"{d:+.0f}", f"{u:.2f}"]
            out.append(f"| {s} | " + " | ".join(cells + extra) + " |")
        out.append("| mean | " + " | ".join([""] * len(pols)) +
                   f" | {_m(cuts):+.0f} % | {_m(dist):+.0f} | {_m(ratio):.2f} |")
        out += ["", "p95 per profile (min, mean over seeds):", "",
                "| policy | " + " | ".join(rs[0]["per_profile"]) + " |",
                "|---" * (len(rs[0]["per_profile"]) + 1) + "|"]
        for p in pols:
            x = [r for r in rs if r["policy"] == p]
            out.append(f"| {p} | " + " | ".join(
                f"{_m([r['per_profile'][q]['p95_min'] for r in x]):.0f}"
                for q in rs[0]["per_profile"]) + " |")
        out += sizes(rs, pols) + lent(rs)
        out.append("")
    return out


def sizes(rs: list[dict], pols: list[str]) -> list[str]:
    """p95 per size class (compute slices; 40 GB and 80 GB names pooled) and the issue-28
    bounds: the planner no worse than the past-week static geometry in every class, and on
    1g-3g (`offered`) no worse than all-balanced (mean over seeds; seeds where it holds)."""
    if "per_size" not in rs[0]:
        return []
    cls = list(rs[0]["per_size"])
    out = ["", "p95 per size class (min, mean over seeds; a class pools its 40 GB and 80 GB "
           "profile names):", "", "| policy | " + " | ".join(cls) + " | 1g-3g |",
           "|---" * (len(cls) + 2) + "|"]
    for p in pols:
        x = [r for r in rs if r["policy"] == p]
        out.append(f"| {p} | " + " | ".join(
            f"{_m([r['per_size'][c]['p95_min'] for r in x]):.1f}" for c in cls) +
            f" | {_m([r['balanced']['p95_min'] for r in x]):.1f} |")
    checks = [(f"{c} vs static-past-week", "static-past-week",
               lambda r, c=c: r["per_size"][c]["p95_min"]) for c in cls]
    checks.append(("1g-3g vs static (all-balanced)", "static",
                   lambda r: r["balanced"]["p95_min"]))
    rows = []
    for name, base, f in checks:
        pairs = [(f(a), f(b)) for a in rs if a["policy"] == "planner"
                 for b in rs if b["policy"] == base and b["seed"] == a["seed"]]
        if not pairs:  # the baselines are in another tag
            continue
        mp, mb = _m([a for a, _ in pairs]), _m([b for _, b in pairs])
        rows.append(f"| {name} | {mp:.1f} | {mb:.1f} | {'yes' if mp <= mb else 'NO'} | "
                    f"{sum(a <= b for a, b in pairs)} of {len(pairs)} |")
    if rows:
        out += ["", "Issue 28 bounds (planner p95 <= baseline p95):", "",
                "| bound | planner | baseline | holds on the mean | seeds where it holds |",
                "|---|---|---|---|---|", *rows]
    return out


def lent(rs: list[dict]) -> list[str]:
    """Per seed, the planner's lent instances (`lend_keep` set; none in other tags)."""
    x = sorted((r for r in rs if r["policy"] == "planner" and r.get("lent")),
               key=lambda r: r["seed"])
    if not x:
        return []
    out = ["", "Lent instances, planner (idle instances re-created as 1g-3g instances for "
           "waiting pods):", "", "| seed | 1g-3g p95 min | lends | pods on lent instances | "
           "hours lent (sum, instances given back by the end) | closed for a pod of the lender's profile |",
           "|---|---|---|---|---|---|"]
    for r in x:
        g = r["lent"]
        out.append(f"| {r['seed']} | {r['balanced']['p95_min']:.2f} | {g.get('lends', 0):.0f} "
                   f"| {g.get('pods', 0):.0f} | {g.get('slot_hours', 0):.1f} | "
                   f"{g.get('closed_for_big', 0):.0f} |")
    return out


def write(phase: str, command: str, notes: Path | None) -> None:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=Path(__file__).parent).stdout.strip()
    name = "mig_plan.md" if phase == "final" else f"mig_plan_{phase}.md"
    lines = header(f"MIG geometry planner over time ({phase} seeds)", command)
    lines.insert(-1, f"- git rev: {rev} (runs cached in `{CACHE.name}`)")
    if notes is not None and notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    runs = _load()
    for tag in sorted({r["tag"] for r in runs if r["phase"] == phase}):
        setting = next(r["setting"] for r in runs if r["phase"] == phase and r["tag"] == tag)
        lines += [f"## Setting `{tag}`: `{json.dumps(setting)}`", ""]
        lines += table(runs, phase, tag)
    (RESULTS / name).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("dev", "final"), default="dev")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--profiles", default="helios,dlrm")
    ap.add_argument("--policies", default="all")
    ap.add_argument("--set", default="{}", help="JSON overrides of the default setting")
    ap.add_argument("--tag", default="base")
    ap.add_argument("--notes", type=Path, help="markdown put above the tables")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    setting = {**DEFAULT, **json.loads(a.set)}
    if not a.table_only:
        run(a, setting)
    write(a.phase, "nice .venv/bin/python bench/mig_plan.py " + " ".join(sys.argv[1:]), a.notes)


if __name__ == "__main__":
    main()
