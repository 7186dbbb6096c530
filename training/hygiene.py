"""Data hygiene of the fetched history: NaN, duplicates, counter resets, missing series, gaps.

Every fix is counted, so the run's metrics.json and summary say what the models were fed.
Why correct counter resets instead of dropping them: a restarted exporter or pod resets a
counter to 0; Prometheus' `increase()` treats the drop as a reset and keeps counting from the
new value, and so do we (the corrected series is monotone, so rates stay non-negative).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: Metrics that are monotone counters (everything else is a gauge).
COUNTER_SUFFIXES = ("_total", "_TOTAL")


def is_counter(metric: str) -> bool:
    return metric.endswith(COUNTER_SUFFIXES)


@dataclass
class HygieneReport:
    rows_in: int = 0
    rows_out: int = 0
    nan_values: int = 0
    duplicate_rows: int = 0
    counter_resets: int = 0
    missing_metrics: list[str] = field(default_factory=list)
    missing_series: int = 0  # (GPU, metric) series absent while the GPU reports other metrics
    gaps: int = 0  # holes longer than 1.5 steps inside a series
    gap_seconds: float = 0.0
    step_s: float = 0.0

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}


def clean_samples(samples: pd.DataFrame, expected_metrics: list[str] | tuple[str, ...] = (),
                  present: set[str] | None = None) -> tuple[pd.DataFrame, HygieneReport]:
    """Drop non-finite values and duplicates, correct counter resets, count missing series.
    `present`: the metrics of the whole history when `samples` is one node group of it (a
    gauge absent from the group is then missing there too)."""
    rep = HygieneReport(rows_in=len(samples))
    v = pd.to_numeric(samples["value"], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(v)
    rep.nan_values = int((~finite).sum())
    s = samples[finite].reset_index(drop=True) if rep.nan_values else samples.reset_index(drop=True)
    # A shared GPU reports one series per pod on it: the pod is part of the series key.
    # Integer series ids + lexsort: sorting millions of rows by string columns is slow.
    series = [c for c in ("uuid", "namespace", "pod", "metric") if c in s.columns]
    sid = s.groupby(series, sort=False, observed=True).ngroup().to_numpy()
    ts = s["ts"].astype("int64").to_numpy()  # ns since epoch (tz-aware safe)
    order = np.lexsort((ts, sid))
    s, sid, ts = s.iloc[order].reset_index(drop=True), sid[order], ts[order]
    dup = np.r_[(sid[1:] == sid[:-1]) & (ts[1:] == ts[:-1]), False]  # keep the last
    rep.duplicate_rows = int(dup.sum())
    if rep.duplicate_rows:
        s, sid, ts = s[~dup].reset_index(drop=True), sid[~dup], ts[~dup]
    metrics = s["metric"]
    present = set(map(str, metrics.unique())) if present is None else set(present)
    rep.missing_metrics = sorted(m for m in expected_metrics if m not in present)

    # Counter resets: a drop within one series; add the pre-drop value back from there on.
    counters = metrics.isin([m for m in present if is_counter(m)]).to_numpy()
    if counters.any():
        val = s["value"].to_numpy(dtype=float).copy()
        idx = np.flatnonzero(counters)
        cs, cv = sid[idx], val[idx]
        same = np.r_[False, cs[1:] == cs[:-1]]
        prev = np.r_[np.nan, cv[:-1]]
        drop = same & (cv < prev)
        rep.counter_resets = int(drop.sum())
        if rep.counter_resets:
            add = pd.Series(np.where(drop, prev, 0.0)).groupby(cs).cumsum().to_numpy()
            val[idx] = cv + add
            s["value"] = val

    # Missing series: a GPU that reports some gauges but not others.
    gauges = sorted(m for m in present if not is_counter(m))
    per_gpu = s.loc[~counters, ["uuid", "metric"]].drop_duplicates().groupby(
        "uuid", observed=True).size()
    per_gpu = per_gpu[per_gpu > 0]  # categorical levels of GPUs with no row here
    rep.missing_series = int((len(gauges) - per_gpu).clip(lower=0).sum())

    # Gaps: steps missing in a GPU's metric (scrape failures, exporter down); per GPU, not per
    # pod, since a pod's series legitimately starts and stops.
    gid = s.groupby(["uuid", "metric"], sort=False, observed=True).ngroup().to_numpy()
    o = np.lexsort((ts, gid))
    gid, gts = gid[o], ts[o]
    keep = np.r_[True, (gid[1:] != gid[:-1]) | (gts[1:] != gts[:-1])]  # one row per (GPU, ts)
    gid, gts = gid[keep], gts[keep]
    dt = (np.diff(gts) / 1e9)[gid[1:] == gid[:-1]]
    if len(dt):
        step = float(np.median(dt))
        rep.step_s = step
        holes = dt > 1.5 * step
        rep.gaps = int(holes.sum())
        rep.gap_seconds = float((dt[holes] - step).sum())
    rep.rows_out = len(s)
    return s, rep


def coverage(samples: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp, step_s: float,
             metrics: list[str] | tuple[str, ...]) -> dict[str, float]:
    """Share of the [start, end] step grid at which each metric has a sample (any GPU).

    A hole in the middle of the window (Prometheus lost a block, a shard timed out) lowers it
    as much as a missing head or tail."""
    expected = max(1.0, (end - start).total_seconds() / step_s)
    out = {}
    for m in metrics:
        ts = samples.loc[samples["metric"].astype(str) == m, "ts"]
        out[m] = float(min(1.0, ts.dt.floor(f"{step_s:g}s").nunique() / expected))
    return out
