"""Why the 1g-3g pods wait under the planner's geometry (issue 28 item 4): when they do, how
many slices they wait for and how many idle slices exist that lending (dynamic MIG,
`simulator.timeline.mig_lend`) could give them.

For each (profile, dev seed): the geometry the `DEFAULT` planner keeps all week (its plan of
the past week: 1g-3g first, custom geometries; it never re-splits on this workload) replayed
without lending; every 5 min of the 7 measured days, per memory size (40 / 80 GB profile
names, which only their GPUs serve): 1g-3g compute slices waiting, idle 1g-3g slices and idle
4g/7g slices. Reported over the samples at which some 1g-3g pod of that size waits.

Usage: nice .venv/bin/python bench/mig_lend_diagnose.py --seeds 0-2 --profiles helios,dlrm
Writes bench/results/mig_lend_diagnose.md.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mig_plan import DEFAULT  # noqa: E402
from replay_common import header, write  # noqa: E402

from scheduler_hook import mig  # noqa: E402
from simulator.replay.compare import parse_seeds  # noqa: E402
from simulator.timeline.mig import mig_cluster, run_mig  # noqa: E402
from simulator.timeline.mig_run import (  # noqa: E402
    SMALL_MAX,
    WARMUP_S,
    geometry_supply,
    memory_size,
    past_week_geometry,
)
from simulator.timeline.mig_workload import generate_mig_pods  # noqa: E402

STEP = 300.0


def case(profile: str, seed: int) -> list[dict]:
    specs = mig_cluster(10)
    slices = sum(s.gpus for s in specs) * mig.COMPUTE_SLICES
    share40 = sum(s.gpus for s in specs if s.model == "A100-40GB") / (slices / 7)
    days = DEFAULT["days"]
    pods = generate_mig_pods(profile, seed, days=days, load=DEFAULT["load"], slices=slices,
                             share40=share40, history_days=DEFAULT["history_days"])
    t0, t1 = -WARMUP_S, days * 86400.0
    geo = past_week_geometry(specs, pods, t0, custom=True, protect=True)
    supply = geometry_supply(specs, geo)
    res = run_mig(specs, pods, "planner-first-plan", t0, t1, initial=geo)
    ts = np.arange(0.0, t1, STEP)
    inwin = pods.arrival >= t0
    start = np.where(np.isfinite(res.start), res.start, np.inf)
    waiting, idle = {}, {}
    for i, p in enumerate(pods.profiles):
        m = inwin & (pods.profile == i)
        a, s = np.sort(pods.arrival[m]), np.sort(start[m])
        e = np.sort(start[m] + pods.duration[m])
        c = mig.profile_compute(p)
        waiting[p] = c * (np.searchsorted(a, ts, "right") - np.searchsorted(s, ts, "right"))
        idle[p] = c * (supply[p] - (np.searchsorted(s, ts, "right") -
                                    np.searchsorted(e, ts, "right")))
    measured = (pods.arrival >= 0) & (pods.arrival < t1)
    d = (np.where(np.isfinite(res.start), res.start, t1) - pods.arrival) / 60.0
    rows = []
    for size in ("40", "80"):
        small = [p for p in pods.profiles if memory_size(p) == size
                 and mig.profile_compute(p) <= SMALL_MAX]
        big = [p for p in pods.profiles if memory_size(p) == size
               and mig.profile_compute(p) > SMALL_MAX]
        w = sum(waiting[p] for p in small)
        when = w > 0
        idx = [i for i, p in enumerate(pods.profiles) if p in small]
        sel = measured & np.isin(pods.profile, idx)
        rows.append(dict(
            profile=profile, seed=seed, size=size,
            small_slices=int(sum(mig.profile_compute(p) * supply[p] for p in small)),
            big_slices=int(sum(mig.profile_compute(p) * supply[p] for p in big)),
            pods_waiting_pct=100.0 * float((d[sel] > 0).mean()),
            p95=float(np.percentile(d[sel], 95)),
            hours=float(when.sum() * STEP / 3600.0),
            wait_mean=float(w[when].mean()) if when.any() else 0.0,
            wait_max=int(w.max()),
            idle_small=float(sum(idle[p] for p in small)[when].mean()) if when.any() else 0.0,
            idle_big=float(sum(idle[p] for p in big)[when].mean()) if when.any() else 0.0,
            episodes=episodes(ts[when])))
    return rows


def episodes(t: np.ndarray, gap: float = 3600.0) -> str:
    """Sample times grouped into episodes (a gap over ``gap`` starts a new one), written
    `day hh:mm-hh:mm` (day 0 = the first measured day), the longest three."""
    if not len(t):
        return "-"
    cuts = np.flatnonzero(np.diff(t) > gap) + 1
    eps = [(g[0], g[-1] + STEP) for g in np.split(t, cuts)]
    eps = sorted(eps, key=lambda e: e[0] - e[1])[:3]

    def hm(x: float) -> str:
        return f"{int(x % 86400 // 3600):02d}:{int(x % 3600 // 60):02d}"
    return ", ".join(f"d{int(a // 86400)} {hm(a)}-{hm(b)}" for a, b in sorted(eps)) + \
        (f" (+{len(cuts) + 1 - 3} shorter)" if len(cuts) + 1 > 3 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--profiles", default="helios,dlrm")
    a = ap.parse_args()
    rows = [r for prof in a.profiles.split(",") for s in parse_seeds(a.seeds)
            for r in case(prof, s)]
    lines = header("Why 1g-3g pods wait under the planner's geometry (issue 28 item 4)",
                   "nice .venv/bin/python bench/mig_lend_diagnose.py " + " ".join(sys.argv[1:]))
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent, check=False).stdout.strip()
    lines.insert(-1, f"- git rev: {rev} (plus the changes committed with this file)")
    lines += [__doc__.split("\n\n")[1].replace("\n", " "), "",
              "Slices are compute slices; `waiting` / `idle` columns are means over the "
              "samples at which 1g-3g pods of that memory size wait (`hours` of them).", "",
              "| profile | seed | memory size | 1g-3g slices / 4g-7g slices in the geometry | "
              "1g-3g pods that wait % | 1g-3g p95 min | hours with 1g-3g waiting | "
              "1g-3g slices waiting mean / max | idle 1g-3g slices | idle 4g/7g slices | "
              "longest episodes |", "|---" * 11 + "|"]
    for r in rows:
        lines.append(f"| {r['profile']} | {r['seed']} | {r['size']} GB | {r['small_slices']} / "
                     f"{r['big_slices']} | {r['pods_waiting_pct']:.1f} | {r['p95']:.1f} | "
                     f"{r['hours']:.1f} | {r['wait_mean']:.0f} / {r['wait_max']} | "
                     f"{r['idle_small']:.0f} | {r['idle_big']:.0f} | {r['episodes']} |")
    write(Path(__file__).parent / "results" / "mig_lend_diagnose.md", lines)


if __name__ == "__main__":
    main()
