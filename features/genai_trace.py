"""Alibaba GenAI 2026 serving trace (GenTD26) per-pod GPU series -> long (unique_id, ds, y).

The published files (`pod_gpu_duty_cycle_dev.csv`, `pod_gpu_memory_used_bytes_dev.csv`; other
parts of the trace carry another suffix, e.g. `_test`, or none: `PATTERNS`) hold
`timestamp_anon` (seconds, shifted), `value` and `container_ip` (an MD5 hash naming the pod),
about one sample per 57 s per pod. `unique_id` is the container_ip; `ds` the 1-min (or `freq`)
bin start as a UTC datetime of the shifted timestamp; `y` the mean of the samples in the bin,
with the level carried over bins that got no sample (57 s scrapes leave ~1 bin in 19 empty).

`final_pod` is the committed held-out rule: the pods that are scored once, at the end, and never
used to choose anything (see bench/usage_genai.py).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from features.demand_series import regularize, seconds_to_utc
from features.schema import LONG_COLUMNS
from ground.errors import ForesightError
from ground.paths import input_file

FILES = {"duty_cycle": "pod_gpu_duty_cycle_dev.csv",
         "memory_used": "pod_gpu_memory_used_bytes_dev.csv"}
# What a directory's file for each metric may be called: the dev names above, and the held-out
# or full trace's (`pod_gpu_duty_cycle.csv`, `pod_gpu_duty_cycle_test.csv`, ...).
PATTERNS = {"duty_cycle": "pod_gpu_duty_cycle*.csv",
            "memory_used": "pod_gpu_memory_used_bytes*.csv"}
# Physical upper bound of each metric (None: the largest value seen in training).
UPPER = {"duty_cycle": 100.0, "memory_used": None}
_NEED = {"timestamp_anon", "value", "container_ip"}


def final_pod(container_ip: str) -> bool:
    """Held-out rule: md5(container_ip) starts with a hex digit 0-4 (5/16 ~ 31 % of pods).
    The hash of the (already hashed) id, so the rule does not follow the trace's own 0-7 cut."""
    return hashlib.md5(str(container_ip).encode()).hexdigest()[0] in "01234"


def read_genai(path: str | Path, freq: str = "1min") -> pd.DataFrame:
    """One GenTD26 per-pod file (CSV) -> regular long table, one series per container_ip."""
    p = input_file(path, "genai trace file", "one per-pod CSV file")
    raw = pd.read_csv(p, dtype={"container_ip": str})
    if not _NEED <= set(raw.columns):
        raise ForesightError(f"{p.name}: need columns {', '.join(sorted(_NEED))}")
    raw = raw.dropna(subset=["container_ip", "value", "timestamp_anon"])
    raw = raw[raw["container_ip"].str.len() > 0]
    if raw.empty:
        raise ForesightError(f"{p.name}: no per-pod samples")
    d = pd.DataFrame({"unique_id": raw["container_ip"].to_numpy(),
                      "ds": seconds_to_utc(raw["timestamp_anon"],
                                           f"{p.name}: column timestamp_anon").array,
                      "y": raw["value"].astype(float).to_numpy()})
    return regularize(d, freq, agg="mean")[LONG_COLUMNS]


def metric_file(trace_dir: str | Path, metric: str) -> Path:
    """The one file of `trace_dir` matching `PATTERNS[metric]`; zero or several is an error
    (a guess between `_dev` and `_test` files would mix two parts of the trace)."""
    if metric not in PATTERNS:
        raise ForesightError(f"unknown genai metric {metric!r}: use {', '.join(PATTERNS)}")
    d = Path(trace_dir)
    if not d.is_dir():
        raise ForesightError(f"genai trace directory not found: {d}")
    found = sorted(d.glob(PATTERNS[metric]))
    if len(found) != 1:
        names = ": " + ", ".join(f.name for f in found) if found else ""
        raise ForesightError(f"{d}: need exactly one {PATTERNS[metric]} file, found "
                             f"{len(found)}{names}")
    return found[0]


def read_genai_metric(trace_dir: str | Path, metric: str, freq: str = "1min") -> pd.DataFrame:
    """`metric` (duty_cycle | memory_used) from a GenTD26 directory (`metric_file`)."""
    return read_genai(metric_file(trace_dir, metric), freq)
