"""The features pass out of core: hygiene and every kind's share, node group by node group.

A history read from partitions (training.sources.from_partitions) never holds its sample
table: the partitions are split by node group once (features.sample_store), then each group
(every day and metric of its nodes) is cleaned and handed to each kind's `partial`; what the
kinds keep from a group (wide series, usage bins, pair parts) is much smaller than its samples.
A kind's `combine` then builds the same table its `prepare` builds from one in-memory sample
table (tests/test_train_streaming.py). Peak memory is one group's samples plus what the kinds
keep, so it is set by `group_gpus`, not by the history's length.
"""
from __future__ import annotations

import ctypes
import statistics
import tempfile
import time
from typing import Callable

from training.hygiene import HygieneReport, clean_samples
from training.kinds import load_kind
from training.sources import TRAINING_METRICS, History

_SUMMED = ("rows_in", "rows_out", "nan_values", "duplicate_rows", "counter_resets",
           "missing_series", "gaps", "gap_seconds")


def _trim() -> None:
    """Give freed heap back to the OS between groups: without it glibc keeps the fragments
    of every group's temporaries and the resident size grows with the group count."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def merge_reports(reports: list[HygieneReport], missing: list[str]) -> HygieneReport:
    """One report for the whole history from the node groups' reports."""
    out = HygieneReport(missing_metrics=list(missing))
    for k in _SUMMED:
        setattr(out, k, sum(getattr(r, k) for r in reports))
    steps = [r.step_s for r in reports if r.step_s]
    out.step_s = float(statistics.median(steps)) if steps else 0.0
    return out


def streamed_features(history: History, cfg, kinds: tuple[str, ...],
                      on_step: Callable[[str], None] = lambda s: None
                      ) -> tuple[dict[str, Callable[[], object]], HygieneReport, dict]:
    """Run the pass; returns, per kind that reads samples, a callable building its data (its
    `combine`, left to the kind's own features stage), the merged hygiene report, and
    seconds per stage (shard, hygiene, <kind>.partial)."""
    store = history.store
    mods = {k: load_kind(k) for k in kinds}
    mods = {k: m for k, m in mods.items() if hasattr(m, "partial")}
    present = set(store.metrics)
    stages: dict[str, float] = {}
    parts: dict[str, list] = {k: [] for k in mods}
    reports = []
    with tempfile.TemporaryDirectory(prefix="foresight-groups-",
                                     dir=getattr(cfg, "scratch", None)) as tmp:
        n = store.group_count(getattr(cfg, "group_gpus", 16))
        t = time.perf_counter()
        shards = store.shard(tmp, n, lambda i, k: on_step(f"split by node group: {i}/{k} "
                                                          "partitions"))
        stages["shard"] = round(time.perf_counter() - t, 3)
        stages["hygiene"] = stages["read"] = 0.0
        for k in mods:
            stages[f"{k}.partial"] = 0.0
        for g in range(n):
            t = time.perf_counter()
            df = shards.read(g)
            stages["read"] += time.perf_counter() - t
            if df is None or df.empty:
                continue
            on_step(f"features: node group {g + 1}/{n} ({len(df):,} samples)")
            t = time.perf_counter()
            df, rep = clean_samples(df, TRAINING_METRICS, present)
            reports.append(rep)
            stages["hygiene"] += time.perf_counter() - t
            for k, m in mods.items():
                t = time.perf_counter()
                parts[k].append(m.partial(df, history, cfg))
                stages[f"{k}.partial"] += time.perf_counter() - t
            del df
            _trim()
    stages = {k: round(v, 3) for k, v in stages.items()}
    hyg = merge_reports(reports, sorted(m for m in TRAINING_METRICS if m not in present))
    build = {k: (lambda m=m, p=parts[k]: m.combine(p, history, cfg)) for k, m in mods.items()}
    return build, hyg, stages
