"""Ingestion throughput: 7 days x 64 GPUs x 8 metrics at 30 s from a local Prometheus.

Backfills the history with promtool, starts the real `prometheus`, then times
`features.ingest.ingest` (split range queries, JSON -> tidy table) against a baseline in the
same process: the same range queries through prometheus-api-client with no conversion.
Writes bench/results/ingest.md.

    .venv/bin/python bench/ingest_bench.py [--days 7 --gpus 64 --runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from features.catalog import DEFAULT_GPU_METRICS  # noqa: E402
from features.ingest import ingest  # noqa: E402
from features.openmetrics import backfill, write_openmetrics  # noqa: E402
from features.prometheus import PrometheusSource, split_range  # noqa: E402
from benchenv import machine  # noqa: E402
from promserver import PrometheusServer  # noqa: E402


def history(days: float, gpus: int, step_s: int, end: pd.Timestamp) -> pd.DataFrame:
    """Random-walk GPU telemetry: the content does not matter here, only its size and shape."""
    ts = pd.date_range(end=end, periods=int(days * 86400 / step_s), freq=f"{step_s}s")
    rng = np.random.default_rng(0)
    frames = []
    for metric in DEFAULT_GPU_METRICS:
        for g in range(gpus):
            walk = np.clip(50 + np.cumsum(rng.normal(0, 2, len(ts))), 0, 100)
            frames.append(pd.DataFrame({"ts": ts, "node": f"node-{g // 8:02d}", "gpu": str(g % 8),
                                        "uuid": f"GPU-{g:04d}", "namespace": "ml", "pod": f"job-{g // 2}",
                                        "metric": metric, "value": walk}))
    return pd.concat(frames, ignore_index=True)


def baseline(url: str, start: datetime, end: datetime, step_s: int) -> int:
    """Raw prometheus-api-client range queries, same chunks, no tidy conversion."""
    from prometheus_api_client import PrometheusConnect

    client, n = PrometheusConnect(url), 0
    for metric in DEFAULT_GPU_METRICS:
        for lo, hi in split_range(start.timestamp(), end.timestamp(), step_s):
            for r in client.custom_query_range(metric, datetime.fromtimestamp(lo, timezone.utc),
                                               datetime.fromtimestamp(hi, timezone.utc), f"{step_s}s"):
                n += len(r["values"])
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--step", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    end = pd.Timestamp.now(tz="UTC").floor("h") - pd.Timedelta(hours=1)
    with tempfile.TemporaryDirectory(prefix="foresight-bench-") as tmp:
        t0 = time.perf_counter()
        samples = history(args.days, args.gpus, args.step, end)
        n_written = write_openmetrics(Path(tmp) / "h.om", samples=samples)
        t_write = time.perf_counter() - t0
        t0 = time.perf_counter()
        backfill(Path(tmp) / "h.om", Path(tmp) / "tsdb")
        t_backfill = time.perf_counter() - t0
        os.unlink(Path(tmp) / "h.om")
        start_t, end_t = samples["ts"].min().to_pydatetime(), samples["ts"].max().to_pydatetime()
        del samples
        with PrometheusServer(Path(tmp) / "tsdb", retention=f"{int(args.days) + 30}d") as server:
            ours, base, rows = [], [], 0
            for _ in range(args.runs):
                t0 = time.perf_counter()
                n_base = baseline(server.url, start_t, end_t, args.step)
                base.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                result = ingest(PrometheusSource(server.url), start_t, end_t, step_s=args.step,
                                metrics=DEFAULT_GPU_METRICS)
                ours.append(time.perf_counter() - t0)
                rows = len(result.samples)
                del result
    assert rows == n_written, (rows, n_written)
    med, med_base = statistics.median(ours), statistics.median(base)
    lines = [
        "# Ingestion benchmark",
        "",
        f"- command: `.venv/bin/python bench/ingest_bench.py --days {args.days:g} --gpus {args.gpus} "
        f"--step {args.step} --runs {args.runs}`",
        f"- machine: {machine()}; Prometheus from Debian's package",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- history: {args.days:g} days x {args.gpus} GPUs x {len(DEFAULT_GPU_METRICS)} metrics at "
        f"{args.step} s = {rows:,} samples ({rows // (args.gpus * len(DEFAULT_GPU_METRICS)):,} points "
        f"per series{', so every series needs split range queries' if rows // (args.gpus * len(DEFAULT_GPU_METRICS)) > 11_000 else ''})",
        f"- set-up (not timed below): OpenMetrics written in {t_write:.1f} s, promtool backfill {t_backfill:.1f} s",
        "",
        "| reader | median s | runs (s) | samples/s (median) |",
        "|---|---|---|---|",
        f"| `foresight ingest` path (split queries, de-dup, tidy table) | {med:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in ours)} | {rows / med:,.0f} |",
        f"| baseline: raw prometheus-api-client, same chunks, no conversion | {med_base:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in base)} | {n_base / med_base:,.0f} |",
        "",
        f"Ratio ours / baseline (same process, medians): {med / med_base:.2f}x. The shared 2-core "
        "machine is noisy; read the ratio rather than the absolute numbers.",
    ]
    out = ROOT / "bench" / "results" / "ingest.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
