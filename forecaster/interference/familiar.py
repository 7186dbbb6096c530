"""Whether a side of a pair is like the workloads an interference model was fitted on.

The admission bound (admission.py) is calibrated on workloads held out inside the training
folds, and its risk holds for a new workload that is like them. A workload whose solo
fingerprint lies farther from every trained workload than any trained workload lies from its
nearest other one is outside what the folds saw: nothing calibrated the bound there, and the
one such workload measured so far ran at 0.0 beside seven partners the model placed at 0.92 or
more (data/h200j `ssd_detect`, a detection server that completed no step under time-slicing).
Such a side is *unfamiliar*; the co-location gate does not hold a minimum speed on it until
its pairs are measured (the p10 and the point are still answered). So is a side with no solo
field at all, a workload key the model has never seen run: nothing was calibrated for it
either (asked by key, such sides were admitted at 7.2 % of unsafe placements on the shared set
while 91.7 % of safe ones were refused: bench/results/interference_cold_start.md).

The distance is the root mean square of the robust z-scores (median, inter-quartile range
over the trained workloads) of the solo fields both vectors carry; the step time in logs.
A model fitted without solo fields (Gavel's throughputs: workload names only) has no support
and calls every side familiar.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: Solo fields that describe how a workload uses the GPU (memory size and the PCIe and
#: config fields say little about how it shares one).
FIELDS = ("gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
          "mem_copy_util", "power_w", "step_s")
_LOG = {"step_s"}
#: Trained workloads a support needs (fewer: every side is familiar).
MIN_WORKLOADS = 4


def _values(frame: pd.DataFrame, fields: list[str]) -> np.ndarray:
    return _logged(frame[fields].to_numpy(float) if fields else np.zeros((len(frame), 0)),
                   fields)


def _logged(X: np.ndarray, fields: list[str]) -> np.ndarray:
    """A copy of raw values (rows x `fields`) with the step time in logs."""
    X = np.array(X, float)
    for j, f in enumerate(fields):
        if f in _LOG:
            X[:, j] = np.log10(np.where(X[:, j] > 0, X[:, j], np.nan))
    return X


def _rms(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RMS difference of every row of `a` to every row of `b` over the fields both carry
    (NaN where none): shape (len(a), len(b))."""
    d = a[:, None, :] - b[None, :, :]
    n = np.isfinite(d).sum(axis=2)
    s = np.nansum(d * d, axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.sqrt(s / np.maximum(n, 1)), np.nan)


class Familiarity:
    """fit(names, sides) / distance(sides) / unfamiliar(sides) over solo fingerprints.

    `sides`: a frame with one row per observed side and the solo fields as columns (any of
    FIELDS; others are ignored); `names`: each row's workload ("" when unnamed: each distinct
    vector then counts as a workload of its own)."""

    def fit(self, names: pd.Series, sides: pd.DataFrame) -> "Familiarity":
        self.fields_ = [f for f in FIELDS if f in sides and sides[f].notna().any()]
        names = pd.Series(np.asarray(names, object), index=sides.index).astype(str)
        X = _values(sides, self.fields_)
        key = np.where(names == "", pd.Series([repr(r) for r in X.round(6).tolist()],
                                              index=sides.index), "w:" + names)
        frame = pd.DataFrame(X, columns=self.fields_).assign(_key=key)
        per = frame.groupby("_key", sort=True)[self.fields_].median()
        V = per.to_numpy(float)
        self.center_ = np.nanmedian(V, axis=0) if len(V) else np.zeros(0)
        with np.errstate(invalid="ignore"):
            iqr = np.nanpercentile(V, 75, axis=0) - np.nanpercentile(V, 25, axis=0) \
                if len(V) else np.zeros(0)
            spread = np.where(iqr > 0, iqr, np.nanstd(V, axis=0) if len(V) else 1.0)
        self.spread_ = np.where(np.isfinite(spread) & (spread > 0), spread, 1.0)
        self.vectors_ = (V - self.center_) / self.spread_
        self.threshold_ = None
        if len(V) >= MIN_WORKLOADS and self.fields_:
            d = _rms(self.vectors_, self.vectors_)
            np.fill_diagonal(d, np.nan)
            nearest = np.nanmin(np.where(np.isnan(d), np.inf, d), axis=1)
            nearest = nearest[np.isfinite(nearest)]
            self.threshold_ = float(nearest.max()) if len(nearest) else None
        return self

    def _matrix(self, sides: pd.DataFrame) -> np.ndarray:
        """Raw values of `sides` (rows x `fields_`; NaN where a field is absent)."""
        return np.column_stack([sides[f].to_numpy(float) if f in sides else
                                np.full(len(sides), np.nan) for f in self.fields_]) \
            if self.fields_ else np.zeros((len(sides), 0))

    def distance(self, sides: pd.DataFrame) -> np.ndarray:
        """Each row's distance to the nearest trained workload (NaN: nothing to compare)."""
        return self.nearest(self._matrix(sides))

    def nearest(self, X: np.ndarray) -> np.ndarray:
        """`distance` of raw values (rows x `fields_`, in that order): the prediction path.
        Requests repeat a few workloads: each distinct row is compared once."""
        if not len(self.vectors_) or not self.fields_ or not len(X):
            return np.full(len(X), np.nan)
        Z = np.ascontiguousarray((_logged(X, self.fields_) - self.center_) / self.spread_)
        rows = Z.view(np.dtype((np.void, Z.dtype.itemsize * Z.shape[1]))).ravel()
        _, first, inv = np.unique(rows, return_index=True, return_inverse=True)
        d = _rms(Z[first], self.vectors_)
        some = np.isfinite(d).any(axis=1)
        near = np.full(len(first), np.nan)
        near[some] = np.nanmin(d[some], axis=1)
        return near[inv.ravel()]

    def unfamiliar(self, sides: pd.DataFrame) -> np.ndarray:
        """Rows farther from every trained workload than the threshold, or with no field to
        compare (all False without a threshold)."""
        return self.unfamiliar_values(self._matrix(sides))

    def unfamiliar_values(self, X: np.ndarray) -> np.ndarray:
        """`unfamiliar` of raw values (rows x `fields_`): the prediction path."""
        if self.threshold_ is None:
            return np.zeros(len(X), bool)
        d = self.nearest(X)
        return ~np.isfinite(d) | (d > self.threshold_)

    def to_json(self) -> dict:
        return {"fields": self.fields_, "center": np.nan_to_num(self.center_).tolist(),
                "spread": self.spread_.tolist(),
                "vectors": [[None if not np.isfinite(v) else float(v) for v in row]
                            for row in self.vectors_], "threshold": self.threshold_}

    @classmethod
    def from_json(cls, d: dict) -> "Familiarity":
        m = cls()
        m.fields_ = list(d["fields"])
        m.center_ = np.asarray(d["center"], float)
        m.spread_ = np.asarray(d["spread"], float)
        m.vectors_ = np.array([[np.nan if v is None else v for v in row] for row in d["vectors"]],
                              float).reshape(-1, len(m.fields_))
        m.threshold_ = None if d["threshold"] is None else float(d["threshold"])
        return m
