"""Column contracts of the tidy tables every layer exchanges.

Timestamps are timezone-aware UTC pandas datetimes. Tables are long ("tidy"): one row per
sample, never one column per metric, so any subset of metrics fits the same shape.
"""
from __future__ import annotations

import pandas as pd

from ground.errors import ForesightError

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

#: Most GPUs one node may have. The largest nodes built hold 8 (DGX/HGX H100-B200, and every
#: openb node); a GB200 NVL72 tray holds 4. 64 leaves room for odd hardware, while a typo such
#: as 1000000 would size the replays' per-GPU arrays (nodes x GPUs) past any memory.
MAX_GPUS_PER_NODE = 64

#: pandas' string dtype (Python storage: comparisons give plain boolean masks everywhere).
STRING = pd.StringDtype("python")

_STRING_COLUMNS = {"node", "gpu", "uuid", "namespace", "pod", "metric", "queue", "workload", "unique_id"}
_TIME_COLUMNS = {"ts", "created", "started", "finished", "ds"}


def conform(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Return `df` with exactly `columns`, in order, with the contract's dtypes.

    Missing columns are added empty; extra columns are dropped. Raises ValueError naming
    the first column whose values cannot be converted.
    """
    out: dict[str, pd.Series] = {}
    for col in columns:
        values = df[col] if col in df.columns else pd.Series(pd.NA, index=df.index)
        try:
            if col in _TIME_COLUMNS:
                out[col] = values if isinstance(values.dtype, pd.DatetimeTZDtype) and \
                    str(values.dtype.tz) == "UTC" else pd.to_datetime(values, utc=True)
            elif col in _STRING_COLUMNS:
                out[col] = _strings(values)
            elif col == "priority":
                out[col] = pd.to_numeric(values).fillna(0).astype("int64")
            else:
                out[col] = pd.to_numeric(values).astype("float64")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"column {col!r}: {_first_bad(values, col in _TIME_COLUMNS, exc)}"
                             ) from None
    # one construction, no per-column re-alignment; copy=False keeps 10M-row tables cheap
    return pd.DataFrame(out, index=df.index, copy=False).reset_index(drop=True)


def _first_bad(values: pd.Series, time: bool, exc: Exception) -> str:
    """The first value that is not a time / number, with its row (1 = the first): pandas'
    own message gives a 0-based position, and for times runs to several lines."""
    try:
        got = pd.to_datetime(values, utc=True, errors="coerce", format="mixed") if time \
            else pd.to_numeric(values, errors="coerce")
        bad = (got.isna() & values.notna()).to_numpy(bool)
    except (TypeError, ValueError):
        bad = None
    if bad is None or not bad.any():
        return str(exc).splitlines()[0]
    i = int(bad.argmax())
    return f"row {i + 1} has {values.iloc[i]!r}, not a {'time' if time else 'number'}"


def _strings(values: pd.Series) -> pd.Series:
    """As pandas strings with "" for missing. Label-like columns repeat few distinct values,
    so the conversion runs on the distinct values and is spread back by code (fast at 10M rows)."""
    if values.dtype == STRING:
        return values.fillna("") if values.hasnans else values
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    table = pd.array(list(uniques.astype(str)) + [""], dtype=STRING)
    return pd.Series(table[codes], index=values.index)  # sentinel -1 picks the trailing ""


def empty(columns: list[str]) -> pd.DataFrame:
    """An empty table with the contract's columns and dtypes."""
    return conform(pd.DataFrame(columns=columns), columns)


def equals_mask(col: pd.Series, value: str) -> "np.ndarray":
    """`col.astype(str) == value` as a boolean array; on categoricals (Parquet dictionary
    columns) compared once per level and spread by code, not once per row."""
    import numpy as np

    if isinstance(col.dtype, pd.CategoricalDtype):
        hit = np.r_[np.asarray(col.cat.categories.astype(str)) == value, value == ""]
        return hit[col.cat.codes.to_numpy()]  # code -1 (missing) reads as ""
    return (col.astype(str) == value).to_numpy()


def has_pod(col: pd.Series) -> "np.ndarray":
    """Rows that carry a pod (a non-empty `pod` label)."""
    return ~equals_mask(col, "")


def check_gpus_per_node(values: pd.Series, where: str, column: str) -> None:
    """A one-line error naming ``where``, ``column`` and the data row of the first node with
    more than MAX_GPUS_PER_NODE GPUs (values that are not numbers are the reader's to judge)."""
    import numpy as np

    num = pd.to_numeric(values, errors="coerce").to_numpy(float)
    over = np.flatnonzero(num > MAX_GPUS_PER_NODE)
    if len(over):
        i = int(over[0])
        raise ForesightError(f"{where}: column {column} has {values.iloc[i]} GPUs on one node "
                             f"(data row {i + 1}): at most {MAX_GPUS_PER_NODE} per node")


def to_numbers(values: pd.Series, where: str, error: type[Exception] = ForesightError
               ) -> pd.Series:
    """`values` as floats (an empty cell: NaN). Text is no number: raised as `error`, one
    line naming ``where`` (file and column), the data row (1 = the first) and the count."""
    num = pd.to_numeric(values, errors="coerce")
    text = (num.isna() & values.notna()).to_numpy()
    if text.any():
        i = int(text.argmax())
        raise error(f"{where}, data row {i + 1}: {str(values.iloc[i])!r} is not a number "
                    f"({int(text.sum())} such value(s) in all)")
    return num.astype(float)

