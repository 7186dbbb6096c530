"""Column contracts of the tidy tables every layer exchanges.

Timestamps are timezone-aware UTC pandas datetimes. Tables are long ("tidy"): one row per
sample, never one column per metric, so any subset of metrics fits the same shape.
"""
from __future__ import annotations

import pandas as pd

#: One row per (timestamp, GPU, metric). `pod`/`namespace` are empty when the GPU is idle.
GPU_SAMPLE_COLUMNS = ["ts", "node", "gpu", "uuid", "namespace", "pod", "metric", "value"]

#: One row per pod that asked for GPUs. Times are NaT when not (yet) known.
POD_COLUMNS = [
    "namespace", "pod", "node", "queue", "priority", "workload", "gpu_request",
    "created", "started", "finished",
]

#: One row per (timestamp, queue, metric): Kueue/Volcano queue gauges.
QUEUE_SAMPLE_COLUMNS = ["ts", "queue", "metric", "value"]

#: Nixtla long format, used for every time series the forecasters see.
LONG_COLUMNS = ["unique_id", "ds", "y"]

_STRING_COLUMNS = {"node", "gpu", "uuid", "namespace", "pod", "metric", "queue", "workload"}
_TIME_COLUMNS = {"ts", "created", "started", "finished", "ds"}


def conform(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Return `df` with exactly `columns`, in order, with the contract's dtypes.

    Missing columns are added empty; extra columns are dropped. Raises ValueError naming
    the first column whose values cannot be converted.
    """
    out = pd.DataFrame(index=df.index)
    for col in columns:
        values = df[col] if col in df.columns else pd.Series(pd.NA, index=df.index)
        try:
            if col in _TIME_COLUMNS:
                out[col] = pd.to_datetime(values, utc=True)
            elif col in _STRING_COLUMNS:
                out[col] = values.astype("string").fillna("")
            elif col == "priority":
                out[col] = pd.to_numeric(values).fillna(0).astype("int64")
            else:
                out[col] = pd.to_numeric(values).astype("float64")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"column {col!r}: {exc}") from None
    return out.reset_index(drop=True)


def empty(columns: list[str]) -> pd.DataFrame:
    """An empty table with the contract's columns and dtypes."""
    return conform(pd.DataFrame(columns=columns), columns)
