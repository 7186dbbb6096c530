"""Generation speed of the synthetic cluster: the demo default and the ingestion benchmark's
7 days x 64 GPUs x 8 metrics at 30 s (~12.8 M samples). Median of several runs; the two
configs are generated twice to check byte-identical output. Writes bench/results/simulator.md.

    nice .venv/bin/python bench/simulator_speed.py [--runs 3]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from features.schema import GPU_SAMPLE_COLUMNS, conform  # noqa: E402
from simulator import BENCH_METRICS, SimConfig, generate_cluster  # noqa: E402

CONFIGS = {
    "demo default (2 d x 16 GPUs, all 18 metrics)": SimConfig(),
    "ingestion bench (7 d x 64 GPUs x 8 metrics)": SimConfig(
        days=7, nodes=8, gpus_per_node=8, metrics=BENCH_METRICS),
}


def _digest(cluster) -> int:
    return int(pd.util.hash_pandas_object(cluster.samples).sum() % (1 << 61))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name, cfg in CONFIGS.items():
        times, conform_s, digests = [], [], set()
        for _ in range(args.runs):
            t0 = time.perf_counter()
            c = generate_cluster(cfg)
            times.append(time.perf_counter() - t0)
            digests.add(_digest(c))
            # share of the run spent in features.schema.conform on the samples table
            t0 = time.perf_counter()
            conform(c.samples, GPU_SAMPLE_COLUMNS)
            conform_s.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows.append((name, len(c.samples), med, min(times), max(times), len(c.samples) / med,
                     statistics.median(conform_s), "yes" if len(digests) == 1 else "NO"))
        print(f"{name}: {len(c.samples):,} samples, median {med:.1f} s", flush=True)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    lines = [
        "# Synthetic cluster generation speed",
        "",
        f"- command: `nice .venv/bin/python bench/simulator_speed.py --runs {args.runs}`",
        f"- machine: {os.cpu_count()} cores, {mem:.0f} GiB memory, {platform.platform()}, "
        f"Python {platform.python_version()}; 1-min load average at the end {load:.1f} "
        "(shared machine: other processes compete for the cores)",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        "| config | samples | median s | min s | max s | samples/s (median) | of which "
        "conform(samples) s | identical across runs |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, n, med, lo, hi, rate, conf, same in rows:
        lines.append(f"| {name} | {n:,} | {med:.1f} | {lo:.1f} | {hi:.1f} | {rate:,.0f} | "
                     f"{conf:.1f} | {same} |")
    lines += ["", "`conform(samples)` is timed separately on the generated table (the generator "
              "calls it once per run); it is part of the median."]
    out = ROOT / "bench" / "results" / "simulator.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
