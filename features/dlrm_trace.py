"""Alibaba's 2025 disaggregated-DLRM serving trace as demand series (Nixtla long format).

One row of `disaggregated_DLRM_trace.csv` is one serving instance: `role` (CN CPU node, HN GPU
node), `app_name`, `gpu_request`, and `creation_time` in seconds from the start of the 31-day
window. Rows with an empty `creation_time` existed before the window: they are not arrivals and
are dropped. Times are anchored at `EPOCH` (the trace is anonymised: only offsets are real).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from features.demand_series import check_grid, data_row, parse_freq, seconds_to_utc
from ground.errors import ForesightError
from ground.paths import input_file

#: Anchor of the trace's relative seconds (arbitrary; weekdays are relative to it).
EPOCH = pd.Timestamp("2025-01-01T00:00:00Z")
#: unique_id of the cluster-wide series.
TOTAL = "cluster"


def read_dlrm(path: str | Path) -> pd.DataFrame:
    """Instances created inside the window: app, gpu_request, created (UTC timestamps)."""
    p = input_file(path, "DLRM trace", "the trace's CSV file")
    raw = pd.read_csv(p, usecols=["app_name", "gpu_request", "creation_time"])
    raw = raw.dropna(subset=["creation_time"])  # existed before the window: not an arrival
    if raw.empty:
        raise ForesightError(f"{p.name}: no instance with a creation_time (rows without one "
                             "existed before the window: not arrivals)")
    created = seconds_to_utc(raw["creation_time"], f"{p.name}: column creation_time", EPOCH)
    gpus = pd.to_numeric(raw["gpu_request"], errors="coerce")
    # a count of GPUs (empty: none): a negative one would cancel other instances' requests
    bad = (gpus.isna() & raw["gpu_request"].notna()) | (gpus < 0)
    if bad.any():
        raise ForesightError(f"{p.name}: column gpu_request, data row {data_row(bad)}: "
                             f"{str(raw['gpu_request'][bad].iloc[0])!r} is not a count of GPUs")
    return pd.DataFrame({"app": raw["app_name"].astype(str), "gpu_request": gpus.astype(float),
                         "created": created})


def dlrm_arrivals(path: str | Path, freq: str = "10min", by: str = "total",
                  top_apps: int = 0) -> pd.DataFrame:
    """GPUs requested per bin: `by="total"` one series `cluster`; `by="app"` one series per app
    (the `top_apps` largest by GPUs requested when > 0), all on one grid from the first
    arrival's bin to the last's (no arrivals = 0)."""
    step = parse_freq(freq)
    inst = read_dlrm(path)
    # from the first arrival seen, not EPOCH: a trace of a later window (or one shifted in
    # time) would otherwise start with bins of zeros nobody observed
    first, last = inst["created"].min().floor(step), inst["created"].max().floor(step)
    check_grid(pd.Series([first], index=[TOTAL]), pd.Series([last], index=[TOTAL]), step, freq)
    grid = pd.date_range(first, last, freq=step)
    inst = inst.assign(ds=inst["created"].dt.floor(step))
    if by == "total":
        s = inst.groupby("ds")["gpu_request"].sum().reindex(grid, fill_value=0.0)
        return pd.DataFrame({"unique_id": TOTAL, "ds": grid, "y": s.to_numpy()})
    if by != "app":
        raise ForesightError(f"bad by {by!r}: use total or app")
    gpu = inst[inst["gpu_request"] > 0]
    apps = gpu.groupby("app")["gpu_request"].sum().sort_values(ascending=False).index
    apps = list(apps[:top_apps] if top_apps > 0 else apps)
    parts = []
    for app in apps:
        s = gpu[gpu["app"] == app].groupby("ds")["gpu_request"].sum().reindex(grid, fill_value=0.0)
        parts.append(pd.DataFrame({"unique_id": app, "ds": grid, "y": s.to_numpy()}))
    return pd.concat(parts, ignore_index=True)
