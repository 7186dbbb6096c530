"""Per-(pod, GPU) wide multi-metric series from the long GPU sample table.

The sample table (features.schema.GPU_SAMPLE_COLUMNS) has one row per (ts, GPU, metric), with
one row per attached pod when a GPU is shared. Segmentation needs, per (pod, GPU), a matrix
time x metric. We build it with integer codes and one scatter (no pivot_table) because a day of
1,000 pods at 15 s is ~40 M sample rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: short name -> dcgm-exporter metric; any subset may be present.
SERIES_METRICS = {
    "sm": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram": "DCGM_FI_PROF_DRAM_ACTIVE",
    "rx": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "tx": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "fb": "DCGM_FI_DEV_FB_USED",
    "power": "DCGM_FI_DEV_POWER_USAGE",
}
KEY_COLUMNS = ["namespace", "pod", "node", "gpu"]


@dataclass
class WideSeries:
    """All (pod, GPU) series stacked: rows of series k are `offsets[k]:offsets[k+1]`."""

    keys: pd.DataFrame          # KEY_COLUMNS, one row per series
    offsets: np.ndarray         # len(keys) + 1
    ts: np.ndarray              # int64 ns since epoch, sorted within each series
    values: np.ndarray          # (rows, len(columns)) float64, NaN where a metric is missing
    columns: list[str]          # short metric names

    def __len__(self) -> int:
        return len(self.keys)

    def series(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[k], self.offsets[k + 1]
        return self.ts[a:b], self.values[a:b]

    def frame(self, k: int) -> pd.DataFrame:
        t, v = self.series(k)
        df = pd.DataFrame(v, columns=self.columns)
        df.insert(0, "ts", pd.to_datetime(t, utc=True))
        return df

    def subset(self, keep: np.ndarray) -> "WideSeries":
        """The series where `keep` (one bool per series) is true, in the same order."""
        ks = np.flatnonzero(keep)
        lens = np.diff(self.offsets)[ks]
        off = np.r_[0, np.cumsum(lens)].astype(np.int64)
        rows = np.arange(off[-1]) - np.repeat(off[:-1], lens) + np.repeat(self.offsets[ks], lens)
        return WideSeries(self.keys.iloc[ks].reset_index(drop=True), off, self.ts[rows],
                          self.values[rows], list(self.columns))

    def find(self, pod: str, namespace: str | None = None) -> list[int]:
        m = self.keys["pod"] == pod
        if namespace is not None:
            m &= self.keys["namespace"] == namespace
        return list(np.flatnonzero(m.to_numpy()))


def to_ns(col) -> np.ndarray:
    """Timestamps (any tz-aware/naive UTC form) -> int64 ns since epoch."""
    col = pd.Series(col)
    if not isinstance(col.dtype, pd.DatetimeTZDtype):
        col = pd.to_datetime(col, utc=True)
    return col.dt.as_unit("ns").astype("int64").to_numpy()


def _codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and levels; free for categoricals (Parquet dictionary columns)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(np.int64), \
            np.asarray(col.cat.categories.astype(str), dtype=object)
    codes, levels = pd.factorize(col, sort=True, use_na_sentinel=True)
    return codes.astype(np.int64), np.asarray(levels, dtype=object).astype(str)


def read_samples(path, metrics: dict[str, str] | None = None) -> pd.DataFrame:
    """The samples Parquet with string columns kept dictionary-encoded (pandas categoricals):
    wide_series then needs no string hashing, which dominates at tens of millions of rows.
    Only rows of `metrics` (default SERIES_METRICS) that carry a pod are read."""
    import pyarrow.parquet as pq

    names = list((metrics or SERIES_METRICS).values())
    cols = ["node", "gpu", "namespace", "pod", "metric"]
    table = pq.read_table(path, columns=["ts", *cols, "value"], read_dictionary=cols,
                          filters=[("metric", "in", names), ("pod", "!=", "")])
    return table.to_pandas()


def wide_series(samples: pd.DataFrame, metrics: dict[str, str] | None = None) -> WideSeries:
    """Every (namespace, pod, node, gpu) series with a pod as a time x metric matrix."""
    metrics = metrics or SERIES_METRICS
    mcodes, mlevels = _codes(samples["metric"])
    present = [k for k, v in metrics.items() if v in set(mlevels)]
    col_of_level = np.full(len(mlevels) + 1, -1, np.int64)  # code -1 (NA) -> last slot
    for i, k in enumerate(present):
        col_of_level[int(np.flatnonzero(mlevels == metrics[k])[0])] = i
    pcodes, plevels = _codes(samples["pod"])
    empty = np.flatnonzero(plevels == "")
    mcol = col_of_level[mcodes]
    keep = (mcol >= 0) & (pcodes >= 0)
    if len(empty):
        keep &= pcodes != empty[0]
    if not keep.any():
        return WideSeries(pd.DataFrame(columns=KEY_COLUMNS), np.zeros(1, np.int64),
                          np.zeros(0, np.int64), np.zeros((0, len(present))), present)
    idx = np.flatnonzero(keep)
    codes, cats = [], []
    for c in KEY_COLUMNS:
        cc, lv = (pcodes, plevels) if c == "pod" else _codes(samples[c])
        codes.append(cc[idx]), cats.append(lv)
    # one integer per series: mixed-radix combination of the four key codes
    key = np.zeros(len(idx), np.int64)
    for c, levels in zip(codes, cats):
        key = key * (len(levels) + 1) + (c + 1)
    ukey, series = np.unique(key, return_inverse=True)
    ts = to_ns(samples["ts"])[idx]
    t0 = ts.min()
    tms = (ts - t0) // 1_000_000  # ms resolution keeps series x time inside int64
    span = int(tms.max()) + 1
    row_key = series.astype(np.int64) * span + tms
    urow, row = np.unique(row_key, return_inverse=True)  # sorted: series, then time
    values = np.full((len(urow), len(present)), np.nan)
    values[row, mcol[idx]] = samples["value"].to_numpy(dtype=float)[idx]
    row_series = urow // span
    offsets = np.searchsorted(row_series, np.arange(len(ukey) + 1))
    first = np.zeros(len(ukey), np.int64)
    first[series] = np.arange(len(idx))  # any row of the series gives its key columns
    keys = pd.DataFrame({c: np.asarray(cats_[codes_[first]], dtype=str)
                         for c, codes_, cats_ in zip(KEY_COLUMNS, codes, cats)})
    return WideSeries(keys, offsets.astype(np.int64), (urow % span) * 1_000_000 + t0, values,
                      present)


def concat_series(parts: list[WideSeries]) -> WideSeries:
    """One WideSeries from the series of several (e.g. node groups'), ordered by key as
    wide_series orders the series of one table of strings. Empties `parts` as it copies, so
    the copy is the only one held at the end."""
    src, parts = parts, [p for p in parts if len(p)]
    src.clear()  # the caller's list too: each part is freed once copied
    cols = [k for k in SERIES_METRICS if any(k in p.columns for p in parts)]
    if not parts:
        return WideSeries(pd.DataFrame(columns=KEY_COLUMNS), np.zeros(1, np.int64),
                          np.zeros(0, np.int64), np.zeros((0, len(cols))), cols)
    keys = pd.concat([p.keys.astype(str) for p in parts], ignore_index=True)
    lens = np.concatenate([np.diff(p.offsets) for p in parts])
    order = keys.sort_values(KEY_COLUMNS, kind="mergesort").index.to_numpy()
    off = np.r_[0, np.cumsum(lens[order])].astype(np.int64)
    dest_start = np.empty(len(keys), np.int64)
    dest_start[order] = off[:-1]  # where each input series lands
    ts = np.empty(off[-1], np.int64)
    values = np.full((off[-1], len(cols)), np.nan)
    k0 = 0
    while parts:
        p = parts.pop(0)
        n = len(p)
        pl = np.diff(p.offsets)
        dest = np.arange(p.offsets[-1]) - np.repeat(p.offsets[:-1], pl) + \
            np.repeat(dest_start[k0:k0 + n], pl)
        ts[dest] = p.ts
        for j, c in enumerate(p.columns):
            values[dest, cols.index(c)] = p.values[:, j]
        k0 += n
    return WideSeries(keys.iloc[order].reset_index(drop=True), off, ts, values, cols)


def truth_labels(ws: WideSeries, phases: pd.DataFrame, k: int) -> np.ndarray:
    """Ground-truth phase per sample of series k (the phase in force at each sample time)."""
    key = ws.keys.iloc[k]
    p = phases[(phases["pod"] == key["pod"]) & (phases["namespace"] == key["namespace"]) &
               (phases["node"] == key["node"]) & (phases["gpu"].astype(str) == key["gpu"])]
    t, _ = ws.series(k)
    out = np.full(len(t), "", dtype=object)
    if p.empty:
        return out
    p = p.sort_values("start")
    st, en = to_ns(p["start"]), to_ns(p["end"])
    i = np.searchsorted(st, t, side="right") - 1
    ok = (i >= 0) & (t < en[np.clip(i, 0, None)])
    out[ok] = p["phase"].to_numpy()[i[ok]]
    return out


def shared_mask(ws: WideSeries) -> np.ndarray:
    """True for series whose GPU shows another pod at some point of their life: DCGM metrics
    are per GPU, so such a series mixes both pods' behaviour (and framebuffer)."""
    shared = np.zeros(len(ws), bool)
    for _, g in ws.keys.groupby(["node", "gpu"]):
        if len(g) < 2:
            continue
        spans = sorted((ws.ts[ws.offsets[i]], ws.ts[ws.offsets[i + 1] - 1], i) for i in g.index)
        end, who = spans[0][1], spans[0][2]
        for b0, b1, ib in spans[1:]:
            if b0 <= end:  # overlaps the latest-ending earlier series
                shared[[who, ib]] = True
            if b1 > end:
                end, who = b1, ib
    return shared
