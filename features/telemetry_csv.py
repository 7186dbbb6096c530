"""One GPU's telemetry as a wide CSV (a timestamp column and one column per metric), e.g.
high-resolution samples from NVML/GPM or a dcgm-exporter scrape pivoted per field, into the
long sample table and the WideSeries that phase segmentation reads.

Columns may carry the dcgm-exporter field names or the short names NVML tools write (the
`../shared/gpu-h200` files: `util_gpu`, `gpm_sm_active`, ...). An optional `phase` column is
the ground truth, returned as a phases table in the simulator's format (for benches).
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from features.schema import to_numbers
from features.segments import SERIES_METRICS, WideSeries, wide_series
from ground.paths import input_file

#: CSV column -> dcgm-exporter field. The DCGM names themselves are accepted too.
COLUMN_ALIASES = {
    "util_gpu": "DCGM_FI_DEV_GPU_UTIL",
    "util_mem": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",
    "fb_used_mib": "DCGM_FI_DEV_FB_USED",
    "gpm_sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "gpm_sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
    "gpm_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "gpm_dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "gpm_fp32_active": "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "gpm_fp16_active": "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",
}
#: the segmentation series plus GPU and memory-copy utilization: at <= 1 s resolution they
#: answer within a sample, and they carry the faint copy activity of a checkpoint when no
#: PCIe counters are exported (see forecaster/fingerprint/hires.py).
HIRES_METRICS = {**SERIES_METRICS, "util": "DCGM_FI_DEV_GPU_UTIL",
                 "mem": "DCGM_FI_DEV_MEM_COPY_UTIL"}
PROF_PREFIX = "DCGM_FI_PROF_"
#: GPU util at or above this (%) with every profiling field at exactly 0 cannot be: a kernel
#: ran, so SM activity is > 0. That is the profiling counters not reporting yet (NVML GPM and
#: DCGM profiling need a warm-up interval): such samples are missing, not idle.
PROF_DEAD_UTIL = 50.0
#: distinct sample times a fingerprint needs (a time span)
MIN_TIMES = 2
# ts at or above this is epoch seconds; below it, seconds since the start of the recording
_EPOCH_S = 1e8


class TelemetryCsvError(ValueError):
    """The CSV cannot be read as one GPU's telemetry (message is one line)."""


def _timestamps(col: pd.Series, path: Path) -> np.ndarray:
    """int64 ns since epoch from epoch seconds, relative seconds or ISO-8601 strings."""
    num = pd.to_numeric(col, errors="coerce")
    seconds = num.notna().sum() * 2 >= len(col)  # mostly numbers: the rest are the bad ones
    if seconds:
        x = num.to_numpy(float)
        bad = ~np.isfinite(x)
    else:
        with warnings.catch_warnings():  # pandas warns when it parses element by element
            warnings.simplefilter("ignore", UserWarning)
            ts = pd.to_datetime(col, utc=True, errors="coerce")
        bad = ts.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TelemetryCsvError(f"{path}: ts column: {int(bad.sum())} value(s) are neither "
                                f"seconds nor ISO-8601 timestamps (first: line {i + 2}, "
                                f"{col.iloc[i]!r})")
    if not seconds:
        return ts.dt.as_unit("ns").astype("int64").to_numpy()
    base = 0.0 if x.min() >= _EPOCH_S else 1.7e9  # relative: anchor at a fixed date
    # past pandas' clock (years 1677..2262) the ns cast overflows: the phases came out NaN
    far = ~(np.abs(x + base) < 9.2e9)
    if far.any():
        i = int(np.flatnonzero(far)[0])
        raise TelemetryCsvError(f"{path}: ts column, data row {i + 1}: {str(col.iloc[i])!r} "
                                "seconds falls outside years 1677..2262 (milliseconds? give "
                                "seconds)")
    return ((x + base) * 1e9).round().astype(np.int64)


def _negatives(df: pd.DataFrame, mapping: dict[str, str], path: Path) -> None:
    """DCGM's utilizations, clocks, power, framebuffer, activities and byte counts are never
    negative: a negative value is a broken export, not a reading (a peak FB of -4.9 GiB).
    Text is no reading either (an empty cell is a missing one): read as missing, a word in
    the SM activity made a spurious idle phase."""
    for c in mapping:
        num = to_numbers(df[c], f"{path}: column {c}", TelemetryCsvError)
        neg = (num < 0).to_numpy()
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise TelemetryCsvError(f"{path}: column {c} is negative on line {i + 2} "
                                    f"({df[c].iloc[i]}; {int(neg.sum())} line(s) in all): "
                                    f"{mapping[c]} is never negative")


def read_telemetry_csv(path: str | Path, pod: str = "job", namespace: str = "default",
                       node: str = "node", gpu: str = "0", ts_column: str = "ts",
                       ) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(long samples, truth phases or None, notes) from a wide per-GPU telemetry CSV.

    samples: features.schema GPU sample columns (ts, node, gpu, uuid, namespace, pod, metric,
    value), one row per finite value. notes: which columns were used/ignored and how many
    profiling samples were dropped as not reporting.
    """
    path = input_file(path, "telemetry CSV", "a CSV file", TelemetryCsvError)
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TelemetryCsvError(f"{path}: not a CSV ({str(exc).splitlines()[0]})") from None
    if ts_column not in df.columns:
        raise TelemetryCsvError(f"{path}: no {ts_column!r} column")
    known = set(COLUMN_ALIASES.values())
    mapping = {c: COLUMN_ALIASES.get(c, c) for c in df.columns
               if c in COLUMN_ALIASES or c in known}
    if not any(m in (HIRES_METRICS["sm"], HIRES_METRICS["util"]) for m in mapping.values()):
        raise TelemetryCsvError(f"{path}: needs SM activity or GPU util (DCGM_FI_PROF_SM_ACTIVE"
                                " / DCGM_FI_DEV_GPU_UTIL or gpm_sm_active / util_gpu)")
    if len(df) == 0:
        raise TelemetryCsvError(f"{path}: no samples (a header only)")
    ts = _timestamps(df[ts_column], path)
    _negatives(df, mapping, path)
    order = np.argsort(ts, kind="stable")
    df, ts = df.iloc[order].reset_index(drop=True), ts[order]
    vals = {m: pd.to_numeric(df[c], errors="coerce").to_numpy(float) for c, m in mapping.items()}
    dead = np.zeros(len(df), bool)
    util = vals.get(HIRES_METRICS["util"])
    prof = [m for m in vals if m.startswith(PROF_PREFIX)]
    if util is not None and prof:
        allzero = np.all([np.nan_to_num(vals[m], nan=0.0) == 0 for m in prof], axis=0)
        dead = allzero & (util >= PROF_DEAD_UTIL)
        for m in prof:
            vals[m][dead] = np.nan
    parts = []
    for m, v in vals.items():
        ok = np.isfinite(v)
        parts.append(pd.DataFrame({"ts": ts[ok], "metric": m, "value": v[ok]}))
    samples = pd.concat(parts, ignore_index=True)
    # phases, time shares and steps are fractions of a time span: one instant has none
    if samples["ts"].nunique() < MIN_TIMES:
        raise TelemetryCsvError(f"{path}: {len(df)} sample(s) at {samples['ts'].nunique()} "
                                f"distinct time(s) with values: a fingerprint needs at least "
                                f"{MIN_TIMES} samples at distinct times")
    samples["ts"] = pd.to_datetime(samples["ts"], utc=True)
    for c, v in (("node", node), ("gpu", gpu), ("uuid", f"GPU-{node}-{gpu}"),
                 ("namespace", namespace), ("pod", pod)):
        samples[c] = v
    samples = samples[["ts", "node", "gpu", "uuid", "namespace", "pod", "metric", "value"]]
    truth = _truth(df, ts, pod, namespace, node, gpu) if "phase" in df.columns else None
    notes = {"rows": int(len(df)), "columns": mapping,
             "ignored": [c for c in df.columns if c not in mapping and c not in
                         (ts_column, "phase")],
             "prof_not_reporting": int(dead.sum()),
             "step_s": float(np.median(np.diff(ts)) / 1e9) if len(ts) > 1 else float("nan")}
    return samples, truth, notes


def _truth(df: pd.DataFrame, ts: np.ndarray, pod: str, namespace: str, node: str,
           gpu: str) -> pd.DataFrame:
    """Runs of the `phase` column as (start, end) rows; 'before'/'after' (outside the job)
    and blanks are left out, so their samples carry no truth."""
    ph = df["phase"].fillna("").astype(str).to_numpy()
    st = np.flatnonzero(np.r_[True, ph[1:] != ph[:-1]])
    step = int(np.median(np.diff(ts))) if len(ts) > 1 else 1
    ends = np.r_[ts[st[1:]], ts[-1] + step]
    rows = pd.DataFrame({"namespace": namespace, "pod": pod, "node": node, "gpu": gpu,
                         "start": pd.to_datetime(ts[st], utc=True),
                         "end": pd.to_datetime(ends, utc=True), "phase": ph[st]})
    return rows[~rows["phase"].isin(["", "before", "after"])].reset_index(drop=True)


def telemetry_series(samples: pd.DataFrame) -> WideSeries:
    """The WideSeries of a telemetry CSV's samples, with GPU and memory-copy util."""
    return wide_series(samples, HIRES_METRICS)
