"""Ingestion into partitioned Parquet, one file per (UTC day, metric), resumable.

Why partitions: a 30-day pull of a 1,000-GPU cluster is hundreds of millions of samples; one
query window of one metric at a time is what memory ever holds, and each window is written as
soon as it is read. Why it resumes without loss or duplicates: evaluation times are one grid
anchored at the pull's start (`start + k * step`), each window takes the grid points in
[window start, window end), so every sample belongs to exactly one partition; a partition is
written to a temporary file and renamed (atomic), so after a kill it either exists whole or not
at all, and a restart skips the ones that exist. `ingest.json` records the pull's parameters:
a restart with other parameters is refused rather than mixed in.

Layout: DIR/ingest.json, DIR/samples/day=YYYY-MM-DD/<metric>.parquet, DIR/pods.parquet,
DIR/queues.parquet, DIR/nodes.parquet (the last three written when every partition is in;
nodes where kube-state-metrics exports kube_node_status_allocatable).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import pandas as pd

from features import schema
from features.catalog import DEFAULT_GPU_METRICS, LabelConfig, gpu_metric
from features.telemetry import (gpu_samples_from_frame, pods_from_source,
                                queue_samples_from_source)
from ground.errors import ForesightError, MetricMissing

MANIFEST = "ingest.json"
SAMPLES_DIR = "samples"
_DAY = timedelta(days=1)

#: Longest pull: the what-if replay reads at most 400 days (features.history.MAX_SPAN_DAYS);
#: more is only requests (one per day and metric; 100000d was 28k of them, from year 1752).
MAX_DAYS = 400
#: Grid points per series at most (400 days at a 3.5 s step): a finer step over a long range
#: is samples no forecaster reads, pulled for hours.
MAX_POINTS = 10_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: progress(done partitions, total partitions, rows so far, what) after every partition.
Progress = Callable[[int, int, int, str], None]


def partition_path(root: Path, day: str, metric: str) -> Path:
    return root / SAMPLES_DIR / f"day={day}" / f"{metric}.parquet"


def windows(start: datetime, end: datetime, step_s: float) -> list[tuple[str, datetime, datetime]]:
    """(day, first, last) evaluation times per UTC day on the grid start + k*step, k >= 0,
    up to `end` inclusive; days without a grid point are left out."""
    out = []
    day = datetime(start.year, start.month, start.day, tzinfo=timezone.utc)
    step = timedelta(seconds=step_s)
    while day <= end:
        lo, hi = max(day, start), min(day + _DAY - timedelta(microseconds=1), end)
        k0 = math.ceil((lo - start) / step)
        k1 = math.floor((hi - start) / step)
        if k1 >= k0:
            out.append((f"{day:%Y-%m-%d}", start + k0 * step, start + k1 * step))
        day += _DAY
    return out


def check_range(start: datetime, end: datetime, step_s: float) -> None:
    """One line, before any request, for a range or step no pull can use: a step of 0 (it
    divides the grid), one longer than the range, a start before unix time 0 (Prometheus
    keeps nothing there), more than MAX_DAYS days or MAX_POINTS points per series."""
    if not step_s > 0:  # also NaN
        raise ForesightError(f"--step must be > 0 seconds (got {step_s:g})")
    if start < _EPOCH:
        raise ForesightError(f"the range starts {start:%Y-%m-%d}, before 1970 (unix time 0): "
                             "check --since / --start")
    if end <= start:
        raise ForesightError(f"empty time range: start {start.isoformat()} is not before "
                             f"end {end.isoformat()}")
    span = (end - start).total_seconds()
    if step_s > span:
        # whatif pulls at a fixed step (no --step option): the message fits both callers
        raise ForesightError(f"the step of {step_s:g} s is longer than the range ({span:g} "
                             "s): check --since / --start (and ingest's --step)")
    if span > MAX_DAYS * 86400:
        raise ForesightError(f"the range is {span / 86400:,.0f} days: at most {MAX_DAYS} "
                             "(check --since / --start)")
    if span / step_s > MAX_POINTS:
        raise ForesightError(f"the range at --step {step_s:g} s is {span / step_s:,.0f} points "
                             f"per series: at most {MAX_POINTS:,} (raise --step)")


def atomic_parquet(df: pd.DataFrame, target: Path) -> None:
    """Temp file + rename: a failed or killed run never leaves a half-written file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def metric_names(metrics: tuple[str, ...] | None) -> tuple[tuple[str, ...], bool]:
    """The metrics a pull reads (the explicit ones, or the default set) and whether they were
    named explicitly; an unknown name is an error before anything is read."""
    explicit = metrics is not None
    names = tuple(metrics) if explicit else DEFAULT_GPU_METRICS
    for name in names:
        gpu_metric(name)
    return names, explicit


def absent_metrics(names: tuple[str, ...], seen: dict[str, bool], source, start: datetime,
                   end: datetime) -> list[str]:
    """Metrics of the pull without a single sample (from the default set they are listed:
    profiling metrics are often disabled); none at all is an error."""
    missing = [n for n in names if not seen.get(n)]
    if len(missing) == len(names):
        raise MetricMissing(f"none of the GPU metrics {', '.join(names)} has samples between "
                            f"{start.isoformat()} and {end.isoformat()} at {source.url}: "
                            "is dcgm-exporter scraped?")
    return missing


def _manifest(start: datetime, end: datetime, step_s: float, metrics: tuple[str, ...],
              explicit: bool, labels: LabelConfig) -> dict:
    return {"start": start.isoformat(), "end": end.isoformat(), "step_s": step_s,
            "metrics": list(metrics), "explicit": explicit,
            "labels": json.loads(json.dumps(asdict(labels), default=list)), "complete": False}


def resume_or_start(root: Path, wanted: dict) -> tuple[dict, bool]:
    """The manifest to pull under, and whether it resumes an interrupted pull. An interrupted
    pull of the same step, metrics and labels resumes over its own time range (a `--since`
    restarted later would otherwise ask for another range)."""
    path = root / MANIFEST
    if root.exists() and not root.is_dir():
        raise ForesightError(f"output {root} exists and is not a directory")
    if not path.is_file():
        return wanted, False
    try:
        have = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ForesightError(f"{path} is not readable: use a new --out") from None
    same = all(have.get(k) == wanted[k] for k in ("step_s", "metrics", "explicit", "labels"))
    if have.get("complete"):
        raise ForesightError(f"{root} already holds a complete ingest ({have['start']} -> "
                             f"{have['end']}): use a new --out")
    if not same:
        raise ForesightError(f"{root} holds an interrupted ingest with other parameters "
                             f"(step {have.get('step_s')} s, metrics {have.get('metrics')}): "
                             "rerun it with those, or use a new --out")
    return have, True


def ingest_to_dir(source, start: datetime, end: datetime, out: str | Path, *,
                  step_s: float = 30.0, metrics: tuple[str, ...] | None = None,
                  labels: LabelConfig | None = None, progress: Progress | None = None,
                  required: bool | None = None) -> dict:
    """Pull GPU samples partition by partition into `out`, then pods and queues.

    Returns a summary: rows per table, partitions read and skipped, missing metrics, whether
    it resumed. Explicitly named metrics must exist (`required=False`: named but optional, as
    the default set is); from the default set, absent ones are listed (profiling metrics are
    often disabled) and only "none at all" is an error."""
    labels = labels or LabelConfig()
    check_range(start, end, step_s)
    names, explicit = metric_names(metrics)
    explicit = explicit if required is None else required
    root = Path(out)
    # whole seconds: the grid the API client sends (it rounds times to seconds) is this one
    start, end = start.replace(microsecond=0), end.replace(microsecond=0)
    man, resumed = resume_or_start(root, _manifest(start, end, step_s, names, explicit, labels))
    start, end = datetime.fromisoformat(man["start"]), datetime.fromisoformat(man["end"])
    source.check()
    if explicit and not resumed:
        for name in names:  # before writing anything: a typo is an error, not empty days
            source.require(name, start, end)
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_text(json.dumps(man, indent=1))
    parts = [(d, lo, hi, n) for d, lo, hi in windows(start, end, step_s) for n in names]
    rows, read, skipped, seen = 0, 0, 0, {n: False for n in names}
    for i, (day, lo, hi, name) in enumerate(parts):
        target = partition_path(root, day, name)
        if target.is_file():
            skipped += 1
            got = pd.read_parquet(target, columns=["value"])
        else:
            # end just past the window's last grid point: Prometheus evaluates lo + k*step <= end
            df = source.query_range(name, lo, hi + timedelta(microseconds=1), step_s)
            got = gpu_samples_from_frame(df, name, labels) if not df.empty else \
                schema.conform(pd.DataFrame(), schema.GPU_SAMPLE_COLUMNS)
            atomic_parquet(got, target)
            read += 1
        rows += len(got)
        seen[name] |= len(got) > 0
        if progress:
            progress(i + 1, len(parts), rows, f"{day} {name}")
    missing = absent_metrics(names, seen, source, start, end)
    pods = pods_from_source(source, start, end, labels)
    queues = queue_samples_from_source(source, start, end, max(step_s, 60.0), labels)
    atomic_parquet(pods, root / "pods.parquet")
    atomic_parquet(queues, root / "queues.parquet")
    extra = nodes_and_gangs(source, root, end, start)
    man["complete"] = True
    (root / MANIFEST).write_text(json.dumps(man, indent=1))
    return {"samples": rows, "pods": len(pods), "queues": len(queues), "partitions": len(parts),
            "read": read, "skipped": skipped, "missing": missing, "resumed": resumed,
            "start": start, "end": end, **extra}


def nodes_and_gangs(source, root: Path, end: datetime, start: datetime) -> dict:
    """nodes.parquet and the pods' gang column (`features.history_ingest`), which the what-if
    replay reads; a source that cannot answer those queries leaves them out (the replay then
    counts GPUs from the samples and says so)."""
    from features.history_ingest import write_nodes_and_gangs

    try:
        return write_nodes_and_gangs(source, root, end, max(int((end - start).total_seconds()),
                                                                 1))
    except (ForesightError, NotImplementedError, KeyError, ValueError):
        return {"nodes": 0, "gang_pods": 0}


def read_parquet(path: str | Path, **kw) -> pd.DataFrame:
    """pd.read_parquet, a file that is not Parquet named in one line (pyarrow says
    '<Buffer>': the user could not tell which of a directory's files is broken)."""
    import pyarrow as pa

    try:
        return pd.read_parquet(path, **kw)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc) from None


def check_parquet(files: list[Path]) -> None:
    """Every file's footer readable (a few KB each), else a one-line error naming the first
    that is not: before a long run, and instead of a partition silently counted missing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        try:
            pq.ParquetFile(f).metadata
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(f, exc) from None


def _unreadable(path: str | Path, exc: Exception) -> ForesightError:
    why = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
    return ForesightError(f"{path}: not a readable Parquet file ({why})")


def partition_files(root: str | Path) -> list[Path]:
    return sorted((Path(root) / SAMPLES_DIR).glob("day=*/*.parquet"))


def read_partitioned_samples(root: str | Path, metrics: set[str] | None = None) -> pd.DataFrame:
    """Every partition's samples (or those of `metrics`), in day then metric order."""
    files = [f for f in partition_files(root) if metrics is None or f.stem in metrics]
    frames = [pd.read_parquet(f) for f in files]
    frames = [f for f in frames if len(f)]
    if not frames:
        return schema.conform(pd.DataFrame(), schema.GPU_SAMPLE_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def split_flat(table: str | Path, out: str | Path, batch_rows: int = 1 << 20) -> dict:
    """A flat sample table (one Parquet file) split on read into this module's layout under
    `out`: `batch_rows` rows are read at a time and appended to their (day, metric) partition,
    so the table is never held whole. Writes a complete `ingest.json` with the table's first
    and last timestamps; returns rows and partitions written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(out)
    schema_ = pa.schema([("ts", pa.timestamp("ns", tz="UTC"))] + [
        (c, pa.string()) for c in ("node", "gpu", "uuid", "namespace", "pod", "metric")] +
        [("value", pa.float64())])
    writers: dict[tuple[str, str], pq.ParquetWriter] = {}
    rows, lo, hi = 0, None, None
    try:
        src = pq.ParquetFile(table)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ForesightError(f"{table}: not a readable samples table ({exc})") from None
    try:
        for batch in src.iter_batches(batch_size=batch_rows):
            try:
                df = schema.conform(batch.to_pandas(), schema.GPU_SAMPLE_COLUMNS)
            except ValueError as exc:
                raise ForesightError(f"{table}: not a samples table ({exc})") from None
            if df.empty:
                continue
            rows += len(df)
            lo = df["ts"].min() if lo is None else min(lo, df["ts"].min())
            hi = df["ts"].max() if hi is None else max(hi, df["ts"].max())
            day = df["ts"].dt.floor("D")
            for (d, m), part in df.groupby([day, df["metric"]], sort=True, observed=True):
                key = (f"{d:%Y-%m-%d}", str(m))
                if key not in writers:
                    target = partition_path(root, *key)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    writers[key] = pq.ParquetWriter(target, schema_)
                writers[key].write_table(pa.Table.from_pandas(part, schema=schema_,
                                                              preserve_index=False))
            del df, day
    finally:
        for w in writers.values():
            w.close()
    if not rows:
        raise ForesightError(f"{table}: samples table is empty")
    (root / MANIFEST).write_text(json.dumps(
        {"start": lo.isoformat(), "end": hi.isoformat(), "step_s": None, "complete": True,
         "source": f"table {table}"}, indent=1))
    return {"rows": rows, "partitions": len(writers)}
