"""Feature rows of the usage forecaster: one row per (series, origin), history y[:i] only.

Every level is divided by the series' running max (`scale`), so one global model serves pods
of any magnitude (a duty cycle near 5 % or 90 %, memory in bytes) and `log_scale` still tells
it which kind of pod it is. Scales run from minutes to hours (the issue's multi-scale set):
last values, rolling mean/std/min/max, the pod's long-run level; plus the phase-like shape
features that carried the synthetic benchmark (how long since the pod was near its compute
level, how long the current level has lasted, the step that began it) and, optionally, the
time of day and the pod's known phase.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MEAN_WINDOWS = (3, 5, 10, 30, 60, 120, 240)
SPREAD_WINDOWS = (10, 60, 240)
EWM_ALPHAS = (0.03, 0.1, 0.3)
AGE_CAP = 240
# Phase names the `phase` column may carry (features.usage_series.attach_phases); anything
# else is "unknown". Fixed codes, so an artifact reads the same codes it was trained on.
PHASE_NAMES = ("startup", "compute", "eval", "checkpoint", "stall", "idle", "serving_busy",
               "serving_idle")


def phase_runs(phase: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin: phase code (-1 unknown), bins since that phase began (1 = first bin), and the
    median length of the same phase's *completed* runs earlier in the series (NaN if none)."""
    codes = {p: i for i, p in enumerate(PHASE_NAMES)}
    code = np.asarray([codes.get(str(p), -1) for p in phase], dtype=float)
    n = len(code)
    age, own = np.ones(n), np.full(n, np.nan)
    done: dict[float, list[int]] = {}
    for i in range(1, n):
        if code[i] == code[i - 1]:
            age[i] = age[i - 1] + 1
        else:
            done.setdefault(code[i - 1], []).append(int(age[i - 1]))
        past = done.get(code[i])
        if past:
            own[i] = float(np.median(past[-20:]))  # recent runs: a job's rhythm drifts
    return code, age, own


def typical_phase_bins(df: pd.DataFrame) -> dict:
    """Median length (bins) of completed phase runs per phase code over all series of df."""
    runs: dict[str, list[float]] = {}
    for _, g in df.sort_values(["unique_id", "ds"]).groupby("unique_id", sort=False):
        code, age, _ = phase_runs(g["phase"].fillna("").to_numpy())
        ends = np.flatnonzero(np.r_[np.diff(code) != 0, False])  # last bin of a finished run
        for c, a in zip(code[ends], age[ends]):
            if c >= 0:
                runs.setdefault(str(int(c)), []).append(float(a))
    return {c: float(np.median(v)) for c, v in runs.items()}


def _phase_features(f: dict, y: np.ndarray, phase: np.ndarray, scale: np.ndarray,
                    typical: dict | None) -> None:
    """The phase of the last complete bin (the pod's current phase), its age and level."""
    n = len(y)
    code, age, own = phase_runs(phase)
    sh = lambda a: np.r_[np.nan, a[:-1]]  # noqa: E731  (row i sees bin i-1)
    f["ph"], f["ph_age"], f["ph_own_typ"] = sh(code), sh(age), sh(own)
    f["ph_own_left"] = f["ph_own_typ"] - f["ph_age"]
    cs = np.cumsum(y)
    first = np.arange(n) - age.astype(int) + 1  # first bin of the current run
    lvl = (cs - np.where(first > 0, cs[np.maximum(first - 1, 0)], 0.0)) / age
    f["ph_level"] = sh(lvl) / scale
    if typical:  # the phase's typical run length over the training pods
        f["ph_typ"] = np.asarray([typical.get(str(int(c)), np.nan) if np.isfinite(c)
                                  else np.nan for c in f["ph"]])
        f["ph_left"] = f["ph_typ"] - f["ph_age"]


def series_features(y: np.ndarray, H: int, ds: np.ndarray | None = None,
                    phase: np.ndarray | None = None, typical: dict | None = None
                    ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Feature rows for every origin i of one series; the target mean(y[i:i+H]) (NaN where the
    horizon runs past the data) and the scale. `ds` (bin starts) adds the time of day."""
    n = len(y)
    s = pd.Series(y)
    prev = s.shift(1)  # row i sees y[i-1] and earlier only
    scale = np.maximum(prev.expanding().max().to_numpy(), 1e-6)
    # age capped: a start-up is young, but an uncapped age is clock time for pods that run
    # the whole window, and a tree cannot extrapolate clock time into the test window
    f = {"age": np.minimum(np.arange(n, dtype=float), AGE_CAP), "log_scale": np.log10(scale)}
    for k in (1, 2, 3):
        f[f"lag{k}"] = s.shift(k).to_numpy() / scale
    for w in sorted(set(MEAN_WINDOWS + (H,))):
        f[f"mean{w}"] = prev.rolling(w, min_periods=1).mean().to_numpy() / scale
    for w in SPREAD_WINDOWS:
        r = prev.rolling(w, min_periods=1)
        f[f"std{w}"] = prev.rolling(w, min_periods=2).std().to_numpy() / scale
        f[f"min{w}"] = r.min().to_numpy() / scale
        f[f"max{w}"] = r.max().to_numpy() / scale
    for a in EWM_ALPHAS:  # exponential smoothing at several speeds (the EWMA baseline's kin)
        f[f"ewm{a:g}"] = prev.ewm(alpha=a, adjust=False).mean().to_numpy() / scale
    f["mean_all"] = prev.expanding().mean().to_numpy() / scale  # the pod's long-run level
    f["std_all"] = prev.expanding(min_periods=2).std().to_numpy() / scale
    high = (prev.to_numpy() >= 0.8 * scale).astype(float)
    f["high_share60"] = pd.Series(high).rolling(60, min_periods=1).mean().to_numpy()
    # bins since the pod was last near its compute level, and run length of the current level
    idx = np.arange(n, dtype=float)
    last_high = pd.Series(np.where(high > 0, idx, np.nan)).ffill().to_numpy()
    f["since_high"] = np.nan_to_num(idx - last_high, nan=idx)
    lag1 = f["lag1"]
    change = np.r_[True, np.abs(np.diff(np.nan_to_num(lag1))) > 0.1]
    start = pd.Series(np.where(change, idx, np.nan)).ffill().to_numpy()
    f["run_len"] = idx - start
    # the step that began the current level (a partner pod starting on a shared GPU shows as
    # a step up that a second one follows when its start-up ends; a departure as a step down)
    pv = prev.to_numpy()
    st = start.astype(int)
    f["last_step"] = (pv[st] - np.where(st >= 1, pv[np.maximum(st - 1, 0)], np.nan)) / scale
    if ds is not None:
        t = pd.DatetimeIndex(pd.to_datetime(ds, utc=True))
        f["tod"] = (t.hour * 60 + t.minute).to_numpy(dtype=float) / 1440.0
    if phase is not None:
        _phase_features(f, y, phase, scale, typical)
    fut = s[::-1].rolling(H, min_periods=H).mean()[::-1].to_numpy()  # mean of y[i:i+H]
    return pd.DataFrame(f), fut, scale


def fleet_features(df: pd.DataFrame) -> pd.DataFrame:
    """Per bin start `ds`: the mean level over every series in `df` (the fleet's load) in the
    bins before ds, over 1/10/60 bins, relative to its own running max. Serving pods behind
    one gateway rise and fall together, so the fleet says whether a quiet pod stays quiet."""
    m = df.groupby("ds")["y"].mean().sort_index()
    step = pd.Series(m.index[1:] - m.index[:-1]).min() if len(m) > 1 else pd.Timedelta("1min")
    m = m.reindex(pd.date_range(m.index[0], m.index[-1], freq=step)).ffill()
    prev = m.shift(1)
    scale = np.maximum(prev.expanding().max(), 1e-9)
    out = {f"fleet{w}": prev.rolling(w, min_periods=1).mean() / scale for w in (1, 10, 60)}
    return pd.DataFrame(out, index=m.index)
