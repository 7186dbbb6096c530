"""What differs between the forecast's and the oracle's pre-drain (issue 28, timeline replay)?

The third try's `foresight-drain` closed 22 % of the `drain-flat` -> `drain-oracle` gap on
8-GPU+gang p95 on DLRM (85 % on Helios). Before changing the forecast, this compares the
three pre-drain levels those policies are fed (`simulator.timeline.run.schedule_maker`, the
replay's own schedules; no replay is run): `forecast` (the p90 of the next 30 min's big GPUs,
decaying after a shortfall), `flat-matched` (the running mean scaled to the forecast's mean
over the measured days) and `oracle` (the big GPUs that truly arrive in the next 30 min).

Per (profile, dev seed), over the 10-min origins of the measured days: mean level; how much
of the oracle's GPUs a level covers at the same origin (sum of min(level, oracle) / sum of
oracle), the same over the origins of the oracle's top decile (its bursts), and how much of
the level sits above the oracle (sum of max(level - oracle, 0) / sum of level); the
correlation with the oracle at lags -6..+6 origins (the lag of the best one: > 0 means the
level follows the oracle that many origins late), and that of their 10-min changes (the
timing of rises and falls, without the slow day/night swing); and the same for the forecast
before its decay and for the p50 forecast without decay (a lower level that keeps the
forecast's own timing).

Usage: nice .venv/bin/python bench/drain_trace_diagnose.py --seeds 0-2 --profiles dlrm,helios
Writes bench/results/drain_trace_diagnose.md.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402

from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402

LAGS = range(-6, 7)


def lagged(x: np.ndarray, o: np.ndarray) -> dict[int, float]:
    """Correlation of x at t + k with o at t, per lag k (> 0: x follows o k origins late)."""
    out = {}
    for k in LAGS:
        a, b = x[max(k, 0):len(x) + min(k, 0)], o[max(-k, 0):len(o) - max(k, 0)]
        out[k] = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else np.nan
    return out


def _best(c: dict[int, float]) -> int:
    return max(c, key=lambda k: -np.inf if np.isnan(c[k]) else c[k])


def stats(x: np.ndarray, o: np.ndarray) -> dict:
    corr, step = lagged(x, o), lagged(np.diff(x), np.diff(o))
    top = o >= np.quantile(o, 0.9)  # the origins with the oracle's top decile: the bursts
    return {"mean": float(x.mean()),
            "covered": float(np.minimum(x, o).sum() / max(o.sum(), 1e-9)),
            "burst": float(np.minimum(x, o)[top].sum() / max(o[top].sum(), 1e-9)),
            "idle": float(np.maximum(x - o, 0).sum() / max(x.sum(), 1e-9)),
            "corr0": corr[0], "best_lag": _best(corr), "corr_best": corr[_best(corr)],
            "step_lag": _best(step), "step_best": step[_best(step)], "step0": step[0]}


def case(nodes, profile: str, seed: int, days: float) -> dict[str, dict]:
    from simulator.timeline.forecast import FREQ_S, ReservedSchedule
    from simulator.timeline.run import WARMUP_S, CaseConfig, case_jobs, schedule_maker

    cfg = CaseConfig(profile=profile, seed=seed, days=days)
    jobs = case_jobs(nodes, cfg)
    t0, t1 = -WARMUP_S, days * 86400.0
    make = schedule_maker(jobs, cfg, t0, t1)
    fc, flat, orc = (make(m, True) for m in ("forecast", "flat-matched", "oracle"))
    ts = np.arange(0.0, t1, FREQ_S)
    level = {name: np.array([s.at(t) for t in ts]) for name, s in
             (("forecast", fc), ("flat-matched", flat), ("oracle", orc))}
    i = ((ts - fc.t0) // FREQ_S).astype(int)
    level["forecast before decay"] = np.maximum(np.nan_to_num(fc.fitted[i] * fc.scale), 0.0)
    p50 = ReservedSchedule(jobs, "forecast", t0, t1, horizon=cfg.horizon, quantile="p50",
                           reserve_for=cfg.reserve_for, seed=cfg.seed)
    level["forecast p50, no decay"] = np.array([p50.at(t) for t in ts])
    o = level["oracle"]
    return {name: stats(x, o) for name, x in level.items()}


def main() -> None:
    from simulator.replay.data import load_nodes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--profiles", default="dlrm,helios")
    ap.add_argument("--days", type=float, default=2.0)
    a = ap.parse_args()
    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    lines = header("Forecast vs oracle pre-drain levels (issue 28, timeline replay, dev seeds)",
                   "nice .venv/bin/python bench/drain_trace_diagnose.py " + " ".join(sys.argv[1:]))
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent, check=False).stdout.strip()
    lines.insert(-1, f"- git rev: {rev} (plus the changes committed with this file)")
    lines += [" ".join(__doc__.split("\n\n")[1:3]).replace("\n", " "), "",
              "| profile | seed | level | mean GPUs | covers of the oracle % | at its bursts % | "
              "above the oracle % | corr. lag 0 | best lag / corr. | changes: corr. lag 0 | "
              "changes: best lag / corr. |", "|---" * 11 + "|"]
    for prof in a.profiles.split(","):
        for seed in parse_seeds(a.seeds):
            for name, r in case(nodes, prof, seed, a.days).items():
                lines.append(f"| {prof} | {seed} | {name} | {r['mean']:.0f} | "
                             f"{100 * r['covered']:.0f} | {100 * r['burst']:.0f} | "
                             f"{100 * r['idle']:.0f} | {r['corr0']:.2f} | "
                             f"{r['best_lag']:+d} / {r['corr_best']:.2f} | {r['step0']:.2f} | "
                             f"{r['step_lag']:+d} / {r['step_best']:.2f} |")
            print(lines[-1], flush=True)
    write(Path(__file__).parent / "results" / "drain_trace_diagnose.md", lines)


if __name__ == "__main__":
    main()
