"""Pull history from a metric source into the Parquet cache of tidy tables."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import pandas as pd

from features import schema
from features.catalog import LabelConfig
from features.ingest_store import (absent_metrics, atomic_parquet, metric_names, partition_files,
                                   read_partitioned_samples)
from features.prometheus import PrometheusSource
from features.telemetry import (gpu_samples_from_frame, pods_from_source,
                                queue_samples_from_source)
from ground.errors import ForesightError, MetricMissing

TABLE_FILES = {"samples": "samples.parquet", "pods": "pods.parquet", "queues": "queues.parquet"}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """'7d', '90m', '30s' -> timedelta; one-line error otherwise."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ForesightError(f"invalid duration {text!r}: use a number and a unit, e.g. 30s, 15m, 6h, 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def parse_time(text: str) -> datetime:
    """RFC 3339 / ISO date or unix seconds -> aware UTC datetime."""
    try:
        ts = pd.Timestamp(float(text), unit="s", tz="UTC") if re.match(r"^\d+(\.\d+)?$", text) \
            else pd.Timestamp(text)
    except (ValueError, TypeError):
        raise ForesightError(f"invalid time {text!r}: use RFC 3339 (2026-11-01T00:00:00Z) or unix seconds") from None
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")).to_pydatetime()


@dataclass
class IngestResult:
    samples: pd.DataFrame
    pods: pd.DataFrame
    queues: pd.DataFrame
    missing: list[str]


def ingest(source: PrometheusSource, start: datetime, end: datetime, *, step_s: float = 30.0,
           metrics: tuple[str, ...] | None = None, labels: LabelConfig | None = None,
           progress: Callable[[str], None] | None = None) -> IngestResult:
    """Read GPU samples, pods and queue gauges over [start, end].

    Metrics named explicitly must exist; from the default set, absent ones are listed in
    `missing` (profiling metrics are often disabled) and only "none at all" is an error.
    """
    labels = labels or LabelConfig()
    if end <= start:
        raise ForesightError(f"empty time range: start {start.isoformat()} is not before end {end.isoformat()}")
    names, explicit = metric_names(metrics)
    source.check()
    frames, seen = [], {}
    for name in names:
        if progress:
            progress(name)
        df = source.query_range(name, start, end, step_s)
        if df.empty:
            if explicit:
                source.require(name, start, end)  # raises with the precise message
                raise MetricMissing(f"metric {name} has no samples between {start.isoformat()} and "
                                    f"{end.isoformat()} at step {step_s:g}s")
            continue
        seen[name] = True
        frames.append(gpu_samples_from_frame(df, name, labels))
    missing = absent_metrics(names, seen, source, start, end)
    if progress:
        progress("pods")
    pods = pods_from_source(source, start, end, labels)
    if progress:
        progress("queues")
    queues = queue_samples_from_source(source, start, end, max(step_s, 60.0), labels)
    samples = pd.concat(frames, ignore_index=True)
    return IngestResult(samples, pods, queues, missing)


def write_tables(out_dir: str | Path, tables: dict[str, pd.DataFrame]) -> dict[str, Path]:
    """Write tables as Parquet, each atomically (temp file + rename): a failed run never
    leaves a half-written file where a good one was."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ForesightError(f"output {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, df in tables.items():
        target = out / TABLE_FILES.get(name, f"{name}.parquet")
        atomic_parquet(df, target)
        written[name] = target
    return written


def read_tables(data_dir: str | Path) -> dict[str, pd.DataFrame]:
    """Read the cached tables back, conformed to their contracts."""
    data = Path(data_dir)
    _check_dir(data)
    contracts = {"samples": schema.GPU_SAMPLE_COLUMNS, "pods": schema.POD_COLUMNS,
                 "queues": schema.QUEUE_SAMPLE_COLUMNS}
    tables = {}
    if partition_files(data):  # `foresight ingest` writes samples by day and metric
        tables["samples"] = schema.conform(read_partitioned_samples(data),
                                           schema.GPU_SAMPLE_COLUMNS)
    for name, cols in contracts.items():
        path = data / TABLE_FILES[name]
        if path.exists() and name not in tables:
            tables[name] = _read_table(path, name, cols)
    if "samples" not in tables:
        raise ForesightError(f"{data} has no {TABLE_FILES['samples']}: run `foresight ingest` or `foresight simulate` first")
    return tables


def read_pods(data_dir: str | Path) -> pd.DataFrame:
    """The pods table of a tables directory alone (the GPU samples are not read)."""
    _check_dir(Path(data_dir))
    path = Path(data_dir) / TABLE_FILES["pods"]
    if not path.is_file():
        raise ForesightError(f"{data_dir} has no {TABLE_FILES['pods']}: run `foresight ingest` "
                             "or `foresight simulate` first")
    return _read_table(path, "pods", schema.POD_COLUMNS)


def _check_dir(data: Path) -> None:
    """A tables directory is there and is one (a file given was said not to exist)."""
    if data.exists() and not data.is_dir():
        raise ForesightError(f"data directory {data} is a file, not a directory: give the "
                             "directory `foresight simulate --out` or `foresight ingest` wrote")
    if not data.is_dir():
        raise ForesightError(f"data directory {data} does not exist")


def _read_table(path: Path, name: str, cols) -> pd.DataFrame:
    try:
        return schema.conform(pd.read_parquet(path), cols)
    except (OSError, ValueError) as exc:
        raise ForesightError(f"{path}: not a readable {name} table ({exc})") from None


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
