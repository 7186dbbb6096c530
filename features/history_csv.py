"""A job history from two CSV files (exported from Slurm, Kueue, a spreadsheet, or a trace).

Jobs CSV, one row per job (or per pod; rows with the same ``gang`` form one job):

| column | meaning | default |
|---|---|---|
| ``arrival`` | submit time: RFC 3339, or a number of seconds (any origin) | required |
| ``runtime`` | run time: seconds, or a number with a unit (``90m``, ``2h``, ``1.5d``); or a column ``runtime_s`` / ``runtime_min`` / ``runtime_h`` / ``runtime_d`` | from ``finish`` |
| ``finish`` / ``start`` | finish and start times (as ``arrival``); run time = finish - start | start = arrival |
| ``gpus`` | GPUs per pod; below 1 a share of one GPU | 1 |
| ``gpu_fraction`` / ``gpu_milli`` | share of one GPU (0-1 / 0-1000), for one-GPU pods | |
| ``gpu_memory`` | GPU memory asked (MiB, or ``16Gi``, ``40GB``): a share of the node's GPU | |
| ``mig_profile`` | e.g. ``1g.10gb`` or ``nvidia.com/mig-3g.40gb`` | |
| ``pods`` | pods per job | 1 |
| ``queue``, ``namespace``, ``priority``, ``workload``, ``gang``, ``job``, ``node`` | | |

Nodes CSV: ``node``, ``gpus`` (GPUs on the node), optional ``model``, ``gpu_memory`` (per GPU,
MiB or with a unit). The Alibaba openb CSVs are read as they are (``name``, ``num_gpu``,
``gpu_milli``, ``creation_time``, ``scheduled_time``, ``deletion_time``; ``sn``, ``gpu``).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from features.history import History, Notes, finish_history, node_table
from features.schema import check_gpus_per_node
from ground.errors import ForesightError

DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
                  "ms": 1e-3, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0,
                  "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0,
                  "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0,
                  "w": 604800.0, "week": 604800.0, "weeks": 604800.0}
MEMORY_UNITS = {"": 1.0, "mi": 1.0, "mib": 1.0, "mb": 1e6 / 2**20, "gi": 1024.0, "gib": 1024.0,
                "gb": 1e9 / 2**20, "ti": 2**20, "tib": 2**20, "tb": 1e12 / 2**20,
                "ki": 1 / 1024, "kib": 1 / 1024, "kb": 1e3 / 2**20}
ALIASES = {"creation_time": "arrival", "created": "arrival", "submit": "arrival",
           "submit_time": "arrival", "deletion_time": "finish", "finished": "finish",
           "end": "finish", "end_time": "finish", "scheduled_time": "start",
           "started": "start", "start_time": "start", "name": "job", "num_gpu": "gpus",
           "gpu_request": "gpus", "pod": "job", "sn": "node", "gpu": "gpus"}
_NUM_UNIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def with_unit(values: pd.Series, units: dict[str, float], what: str, notes: Notes
              ) -> np.ndarray:
    """Numbers, or numbers with a unit from ``units`` (case-insensitive); an unknown unit or
    an unreadable value is NaN and said, with its count."""
    s = values.astype("string").str.strip()
    part = s.str.extract(_NUM_UNIT)
    num = pd.to_numeric(part[0], errors="coerce")
    unit = part[1].fillna("").str.lower()
    factor = unit.map(units)
    present = s.notna() & s.ne("")
    unknown = present & num.notna() & factor.isna()
    if unknown.any():
        seen = ", ".join(sorted(set(part[1][unknown].astype(str)))[:4])
        notes.problem(int(unknown.sum()), f"values of {what} have an unknown unit ({seen}): "
                      "read as unknown")
    junk = present & num.isna()
    notes.problem(int(junk.sum()), f"values of {what} are not numbers: read as unknown")
    return (num * factor).to_numpy(float)


def times(values: pd.Series, what: str, notes: Notes) -> np.ndarray:
    """Seconds: numbers as they are, RFC 3339 / ISO times as seconds since the epoch."""
    num = pd.to_numeric(values, errors="coerce").to_numpy(float)
    text = values.notna() & np.isnan(num) & values.astype("string").str.strip().ne("")
    if text.any():
        ts = pd.to_datetime(values[text], utc=True, errors="coerce", format="mixed")
        num[text.to_numpy()] = seconds(ts)
        notes.problem(int(ts.isna().sum()), f"values of {what} are not times: read as unknown")
    return num


def seconds(ts: pd.Series) -> np.ndarray:
    """Seconds since the epoch of UTC datetimes (NaT -> NaN), exact to the nanosecond's float."""
    v = ts.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64("NaT")).astype(np.int64)
    out = v.astype(float) / 1e9
    out[np.isnat(ts.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64("NaT")))] = np.nan
    return out


def _read(path: Path, what: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise ForesightError(f"{what} CSV not found: {path}") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ForesightError(f"{what} CSV {path} is not readable: {exc}") from None
    df.columns = [c.strip().lower() for c in df.columns]
    ren = {c: a for c, a in ALIASES.items() if c in df.columns and a not in df.columns}
    df = df.rename(columns=ren)
    df.attrs["source_column"] = {a: c for c, a in ren.items()}  # errors name the file's header
    return df


def _runtime(df: pd.DataFrame, notes: Notes) -> np.ndarray:
    out = np.full(len(df), np.nan)
    if "runtime" in df:
        out = with_unit(df["runtime"], DURATION_UNITS, "runtime", notes)
    for col in df.columns:
        m = re.fullmatch(r"runtime_(\w+)", col)
        if not m:
            continue
        if m.group(1) not in DURATION_UNITS:
            notes.problem(1, f"column {col!r}: unknown unit {m.group(1)!r}: column ignored")
            continue
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(float) * DURATION_UNITS[m.group(1)]
        out = np.where(np.isnan(out), v, out)
    return out


def _gpus(df: pd.DataFrame, node_mem: float | None, notes: Notes) -> tuple[np.ndarray, ...]:
    n = len(df)
    g = pd.to_numeric(df["gpus"], errors="coerce").to_numpy(float) if "gpus" in df \
        else np.full(n, np.nan)
    # a gpus cell that is there but not a number is a bad row (left out by `shapes`, said as
    # a problem), not an empty one that defaults to 1 GPU
    junk = np.isnan(g) & (df["gpus"].astype("string").str.strip().fillna("").ne("")
                          .to_numpy(bool) if "gpus" in df else False)
    share = np.full(n, np.nan)
    if "gpu_milli" in df:
        share = pd.to_numeric(df["gpu_milli"], errors="coerce").to_numpy(float) / 1000.0
    if "gpu_fraction" in df:
        f = pd.to_numeric(df["gpu_fraction"], errors="coerce").to_numpy(float)
        share = np.where(np.isnan(f), share, f)
    if "gpu_memory" in df:
        mem = with_unit(df["gpu_memory"], MEMORY_UNITS, "gpu_memory", notes)
        asked = np.isfinite(mem) & np.isnan(share)
        if node_mem:
            share = np.where(asked, np.minimum(mem / node_mem, 1.0), share)
        else:
            notes.inferred(int(asked.sum()), "rows ask GPU memory but the nodes CSV gives no "
                           "gpu_memory: each takes a whole GPU")
            share = np.where(asked, 1.0, share)
    off = np.isfinite(share) & ((share <= 0) | (share > 1))
    notes.problem(int(off.sum()), "values of gpu_fraction / gpu_milli are not a share of one "
                  "GPU in (0, 1]: the row's gpus are used")
    one = (np.isnan(g) & ~junk) | (g == 1)
    g = np.where(one & np.isfinite(share) & (share > 0) & (share < 1), share, g)
    mig = np.zeros(n)
    if "mig_profile" in df:
        mg = df["mig_profile"].astype("string").str.extract(r"(\d+)g\.", expand=False)
        mig = pd.to_numeric(mg, errors="coerce").fillna(0).to_numpy(float)
        mig = np.where(mig <= 7, mig, 0.0)  # a GPU has 7 compute slices: 9g is a typo
        odd = df["mig_profile"].notna() & (mig == 0)
        notes.problem(int(odd.sum()), "values of mig_profile are not a profile like 1g.10gb "
                      "(1g-7g): ignored")
        g = np.where(mig > 0, 1.0, g)
    if "gpus" not in df and not {"gpu_fraction", "gpu_milli", "gpu_memory", "mig_profile"} & \
            set(df.columns):
        notes.problem(n, "rows: the jobs CSV has no gpus column: every pod takes 1 GPU")
        g = np.ones(n)
    else:
        miss = np.isnan(g) & (mig == 0) & ~junk
        notes.inferred(int(miss.sum()), "rows without a GPU count: 1 GPU per pod")
        g = np.where(miss, 1.0, g)
    return g, mig


def read_csv_history(jobs_csv: Path | str, nodes_csv: Path | str, end: float | None = None
                     ) -> History:
    """The history in two CSVs (columns in this module's docstring)."""
    notes = Notes()
    nd = _read(Path(nodes_csv), "nodes")
    for col in ("node", "gpus"):
        if col not in nd:
            raise ForesightError(f"nodes CSV {nodes_csv} lacks column {col!r} (has "
                                 f"{', '.join(nd.columns)})")
    check_gpus_per_node(nd["gpus"], f"nodes CSV {nodes_csv}",  # the replays: nodes x GPUs
                        nd.attrs["source_column"].get("gpus", "gpus"))
    nodes = node_table(nd, notes)
    node_mem = None
    if "gpu_memory" in nd:
        m = with_unit(nd["gpu_memory"], MEMORY_UNITS, "nodes gpu_memory", notes)
        node_mem = float(np.nanmedian(m)) if np.isfinite(m).any() else None
    df = _read(Path(jobs_csv), "jobs")
    if "arrival" not in df:
        raise ForesightError(f"jobs CSV {jobs_csv} lacks column 'arrival' (has "
                             f"{', '.join(df.columns)})")
    n = len(df)

    def col(name: str, default="") -> pd.Series:
        return df[name].fillna(default) if name in df else pd.Series([default] * n)

    arrival = times(df["arrival"], "arrival", notes)
    start = times(df["start"], "start", notes) if "start" in df else np.full(n, np.nan)
    finish = times(df["finish"], "finish", notes) if "finish" in df else np.full(n, np.nan)
    runtime = _runtime(df, notes)
    if np.isnan(runtime).all() and np.isnan(finish).all():
        raise ForesightError(f"jobs CSV {jobs_csv}: no run time and no finish time in any row "
                             "(give a runtime or a finish column)")
    gpus, mig = _gpus(df, node_mem, notes)
    pods = pd.to_numeric(col("pods", "1"), errors="coerce")
    badp = pods.isna() | (pods < 1)
    notes.problem(int(badp.sum()), "values of pods are not a count >= 1: 1 pod")
    prio = pd.to_numeric(col("priority", "0"), errors="coerce")
    notes.problem(int(prio.isna().sum()), "values of priority are not numbers: priority 0")
    job = col("job", "").astype(str)
    job = job.where(job.ne(""), pd.Series([f"row{i + 2}" for i in range(n)]))
    pt = pd.DataFrame({"job": job, "gang": col("gang").astype(str), "arrival": arrival,
                       "start": start, "finish": finish, "runtime_s": runtime,
                       "pods": pods.where(~badp, 1).astype(np.int64), "gpus": gpus,
                       "mig_g": mig, "queue": col("queue").astype(str),
                       "namespace": col("namespace").astype(str),
                       "priority": prio.fillna(0).astype(np.int64),
                       "workload": col("workload").astype(str), "node": col("node").astype(str)})
    big = arrival[np.isfinite(arrival)]
    t0 = pd.Timestamp(0, tz="UTC")
    if len(big) and np.nanmedian(big) < 1e8:  # trace-relative seconds: no calendar
        notes.inferred(n, "rows have times in seconds from an unknown origin: day 0 is "
                       "read as 1970-01-01 (calendar features mean nothing)")
    return finish_history(pt, nodes, end, t0, notes, f"{jobs_csv} + {nodes_csv}")
