"""A synthetic history written straight into `foresight ingest`'s partitioned layout.

Why day by day: at 1,000 GPUs and a 30 s step a week is ~20M samples per metric; the whole
sample table would not fit beside anything else. The metric grids (GPUs x steps, float64) are
what generation holds; the sample rows of one (day, metric) partition exist only while that
file is written. The layout is ingest_store's (`samples/day=YYYY-MM-DD/<metric>.parquet`,
`ingest.json` marked complete, `pods.parquet`, `queues.parquet`) plus `pod_labels.parquet` and
`cluster.json` (the node -> GPU sharing map and GPU model: cluster configuration the simulator
knows and a Prometheus pull does not).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from features.ingest_store import MANIFEST, atomic_parquet, partition_path
from simulator.config import SimConfig
from simulator.generate import _names, _queues, metric_frames, pod_tables, simulate

CLUSTER_FILE = "cluster.json"


def write_partitioned(cfg: SimConfig, out: str | Path,
                      progress: Callable[[str], None] | None = None,
                      truth: bool = False) -> dict:
    """Generate `cfg`'s history into `out`; returns rows written and partitions (and, with
    `truth`, the ground-truth tables, also written to `out/truth/`: `foresight simulate`)."""
    root = Path(out)
    st = simulate(cfg)
    pods, n_steps = st["pods"], st["n_steps"]
    per_day = int(round(86400 / cfg.step_s))
    rows, parts = 0, 0
    for lo in range(0, n_steps, per_day):
        hi = min(lo + per_day, n_steps)
        day = f"{cfg.start + pd.Timedelta(seconds=lo * cfg.step_s):%Y-%m-%d}"
        for metric, df in metric_frames(cfg, pods, st["grids"], st["seg"], n_steps, lo, hi):
            atomic_parquet(df, partition_path(root, day, metric))
            rows += len(df)
            parts += 1
        if progress:
            progress(f"{day}: {rows:,} rows")
    pod_df, labels = pod_tables(cfg, pods)
    atomic_parquet(pod_df, root / "pods.parquet")
    atomic_parquet(labels, root / "pod_labels.parquet")
    atomic_parquet(_queues(cfg, pods, n_steps), root / "queues.parquet")
    nodes = _names(cfg, pods)[0]
    mode = st["sim"].node_mode
    (root / CLUSTER_FILE).write_text(json.dumps(
        {"gpu_sharing": {nodes[n]: mode[n] for n in range(cfg.nodes)},
         "gpu_model": cfg.gpu_model}, indent=1))
    # the last evaluation time, as `foresight ingest` records it (and a flat table's last ts)
    end = cfg.start + pd.Timedelta(seconds=(n_steps - 1) * cfg.step_s)
    (root / MANIFEST).write_text(json.dumps(
        {"start": cfg.start.isoformat(), "end": end.isoformat(), "step_s": cfg.step_s,
         "metrics": cfg.metric_names(), "explicit": True, "labels": {}, "complete": True,
         "source": f"synthetic seed={cfg.seed} {cfg.days:g}d {cfg.n_gpus} GPUs"}, indent=1))
    info = {"rows": rows, "partitions": parts, "pods": len(pod_df),
            "grid_mb": float(sum(np.asarray(g).nbytes for g in st["grids"].values()) / 2**20)}
    if truth:
        from features.ingest import write_tables
        from simulator.truth import build_truth

        _, _, ns, names = _names(cfg, pods)
        info["truth"] = build_truth(cfg, st["spec"], st["sim"], st["phase_rows"], st["health"],
                                    nodes, ns, names)
        write_tables(root / "truth", info["truth"])
    return info
