"""Speed: backtest one queue-year of 10-minute bins (52,560 bins), horizon 1 h, `--agg sum`.

Series: one queue, Poisson arrivals with a daily and weekly cycle (seeded). Test = the last
90 days (12,960 origins, an origin every 10 min), train = the 275 days before, calibration =
the last 7 days of train. Timed: fit + feature design + predictions at every origin + all
baselines (persistence, seasonal naive day/week, statsforecast AutoETS) + metrics, i.e.
`forecaster.demand.backtest.backtest`, the CLI's code path. Median of `--runs` runs.
    nice .venv/bin/python bench/demand_speed.py [runs]
"""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from demand_helios import machine, md_table  # noqa: E402  (bench/ is on sys.path)
from forecaster.demand.backtest import backtest  # noqa: E402


def year_series(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ds = pd.date_range("2025-01-06", periods=365 * 144, freq="10min", tz="UTC")
    hour = (ds.hour * 60 + ds.minute).to_numpy() / 60
    rate = 3 * (1.2 + np.sin(2 * np.pi * hour / 24)) * np.where(ds.dayofweek >= 5, 0.5, 1.0)
    return pd.DataFrame({"unique_id": "q0", "ds": ds, "y": rng.poisson(rate).astype(float)})


def main(runs: int = 3) -> None:
    df = year_series()
    T = df["ds"].max() + pd.Timedelta("10min") - pd.Timedelta("90D")
    walls, cpus, met = [], [], None
    for _ in range(runs):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        pred, met, _ = backtest(df, "10min", 6, T, agg="sum")
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        walls.append(time.perf_counter() - t0)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        print(f"wall {walls[-1]:.1f} s, cpu {cpus[-1]:.1f} s, {len(pred)} origins", flush=True)
    lines = ["# Demand backtest speed: one queue-year of 10-min bins", "",
             "- command: `nice .venv/bin/python bench/demand_speed.py " + str(runs) + "`",
             f"- series: 1 queue x 52,560 bins (365 days); test = last 90 days, {len(pred)} origins "
             "with a complete 1 h horizon; everything in `backtest()` timed, AutoETS baseline included",
             f"- machine: {machine()}, shared with other engineers' jobs (wall time includes "
             "waiting for the CPU; CPU time is this process's user+system time)",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; git "
             f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             "", f"**median wall {np.median(walls):.1f} s, median CPU {np.median(cpus):.1f} s over "
             f"{runs} runs** (runs: " + ", ".join(f"{w:.1f}/{c:.1f}" for w, c in zip(walls, cpus))
             + " s wall/CPU); target < 60 s", "", "Accuracy of that run (sanity):", "", md_table(met), ""]
    (ROOT / "bench" / "results" / "demand_speed.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
