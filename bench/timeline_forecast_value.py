"""Where does the forecast, not the reservation alone, buy queueing delay? (dev seeds only)

Run: nice .venv/bin/python bench/timeline_forecast_value.py [--seeds 0-2] [--days 1.5]
Writes bench/results/timeline_forecast_value.md.

`replay_timeline.md` found that the flat-forecast ablation keeps most of the reservation's gain
because, at its settings (load 0.9, 30-minute horizon, p90), both reserve more GPUs than the
empty 8-GPU pool holds, so the reservation binds nearly all the time and *when* it rises
matters little. This bench asks the question the note left open: with a reservation that binds
only at times (a shorter horizon and the median forecast, or a quieter cluster), does the
forecast beat the flat average? And, apart from how much it reserves, does its timing help?
`flat-matched` is the flat average scaled so that its mean over the run equals the forecast's
(the level taken in hindsight: an ablation that isolates timing from amount). Same engine, same
jobs per (profile, seed) across policies; dev seeds only (the final seeds 100-104 of
replay_timeline.md are not run here).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchenv import machine  # noqa: E402

POLICIES = ("fgd", "foresight-reserve", "foresight-flat")
MATCHED = "flat-matched"
SETTINGS = {  # name -> CaseConfig overrides
    "as final (load 0.9, 3 bins, p90)": dict(load=0.9, horizon=3, quantile="p90"),
    "short horizon (load 0.9, 1 bin, p50)": dict(load=0.9, horizon=1, quantile="p50"),
    "quieter (load 0.8, 3 bins, p90)": dict(load=0.8, horizon=3, quantile="p90"),
}


def seeds(spec: str) -> list[int]:
    a, _, b = spec.partition("-")
    return list(range(int(a), int(b or a) + 1))


def matched_flat(nodes, cfg) -> dict:
    """`foresight-flat` with the flat level scaled to the forecast's mean reservation."""
    from simulator.timeline.engine import run_timeline
    from simulator.timeline.forecast import ReservedSchedule
    from simulator.timeline.metrics import summarize
    from simulator.timeline.run import WARMUP_S, case_jobs

    jobs = case_jobs(nodes, cfg)
    t0, t1 = -WARMUP_S, cfg.days * 86400.0
    kw = dict(horizon=cfg.horizon, quantile=cfg.quantile, reserve_for=cfg.reserve_for,
              seed=cfg.seed)
    fc = ReservedSchedule(jobs, "forecast", t0, t1, **kw).values.mean()
    flat = ReservedSchedule(jobs, "flat", t0, t1, **kw).values.mean()
    sched = ReservedSchedule(jobs, "flat", t0, t1, scale=fc / max(flat, 1e-9), **kw)
    res = run_timeline(nodes, jobs, "foresight-flat", t0, t1, reserved=sched, gang=cfg.gang,
                       reserve_for=cfg.reserve_for, seed=cfg.seed)
    row = summarize(jobs, res, 0.0, t1)
    row["policy"] = MATCHED
    return row


def main() -> None:
    from simulator.replay.compare import shared_traces_dir
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import CaseConfig, run_case

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--profiles", default="helios,dlrm")
    ap.add_argument("--days", type=float, default=1.5)
    a = ap.parse_args()
    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    out = [f"# Timeline replay: does the forecast beat a flat reservation? (dev seeds {a.seeds})",
           "", "- command: `nice .venv/bin/python bench/timeline_forecast_value.py "
           + " ".join(sys.argv[1:]) + "`", f"- machine: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           f"- {a.days:g} measured days per run; p95 queueing delay in minutes, mean over seeds; "
           "`reserved` = mean GPUs reserved; `8+gang vs flat` = the forecast's p95 minus the "
           "flat average's, per seed; `flat-matched`: the flat level scaled to the forecast's "
           "mean reservation over the run (warm-up included)", ""]
    for name, over in SETTINGS.items():
        out += [f"## {name}", "",
                "| profile | policy | 8+gang p95 | small (1 GPU) p95 | alloc % | reserved |",
                "|---|---|---|---|---|---|"]
        for prof in a.profiles.split(","):
            per: dict[str, list[dict]] = {p: [] for p in (*POLICIES, MATCHED)}
            for s in seeds(a.seeds):
                cfg = CaseConfig(profile=prof, seed=s, days=a.days, policies=POLICIES, **over)
                rows, _ = run_case(nodes, cfg)
                rows.append(matched_flat(nodes, cfg))
                for r in rows:
                    per[r["policy"]].append(r)
                print(name, prof, s, {r["policy"]: r["8+gang"]["p95_min"] for r in rows},
                      flush=True)
            for p, rs in per.items():
                out.append(f"| {prof} | {p} | {statistics.mean(r['8+gang']['p95_min'] for r in rs):.1f}"
                           f" | {statistics.mean(r['1']['p95_min'] for r in rs):.1f}"
                           f" | {statistics.mean(r['alloc_mean'] for r in rs):.2f}"
                           f" | {statistics.mean(r.get('reserved_mean', 0.0) for r in rs):.0f} |")
            for other in ("foresight-flat", MATCHED):
                diff = [f"{f['8+gang']['p95_min'] - g['8+gang']['p95_min']:+.1f}"
                        for f, g in zip(per["foresight-reserve"], per[other])]
                out.append(f"| {prof} | 8+gang vs {other}, per seed | {', '.join(diff)} | | | |")
        out.append("")
    path = ROOT / "bench" / "results" / "timeline_forecast_value.md"
    path.write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
