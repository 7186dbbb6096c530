"""Feature rows and aggregated targets for the demand forecaster (one row per origin).

Features come from mlforecast's `preprocess` (lags, rolling windows through coreforecast,
calendar and Fourier date features): the row `ds=t` uses only `y` of bins before `t`, and with
`max_horizon=H` it hands back the next H values, aggregated into the target. The baselines
(persistence, seasonal naive day/week) are read off the same lag columns, so model and
baselines see exactly the same past.

`multiscale=True` adds windows from 30 min to 7 days (means, std, max, two EWMAs) and the
`level` (a slow EWMA of the horizon aggregate) that the `ratio` target divides by: on bursty
arrival series whose level drifts (the DLRM trace doubles within a month) a tree fitted on the
absolute counts cannot extrapolate, one fitted on counts relative to the recent level can.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from mlforecast import MLForecast
from mlforecast.lag_transforms import (ExponentiallyWeightedMean, RollingMax, RollingMean,
                                       RollingStd)

DAY = pd.Timedelta("1D")
#: EWMA weights the EWMA baseline (levels) may use; the forecaster picks one on training.
EWMA_ALPHAS = (0.05, 0.1, 0.2, 0.3, 0.5)
#: EWMA weight of the ratio target's level (~100 bins: about 17 h at 10 min).
LEVEL_ALPHA = 0.01
#: Default floor of the level, in units of the series' training mean per bin (keeps ratios
#: finite after quiet spells).
LEVEL_FLOOR = 0.5
_SCALED = ("lag", "rolling_mean", "rolling_std", "rolling_max", "exponentially",
           "persistence", "profile_7d", "diff1", "dev_day")


def _fourier(period: pd.Timedelta, k: int, fn):
    def f(ds: pd.DatetimeIndex) -> np.ndarray:
        phase = (ds.asi8 % period.value) / period.value
        return fn(2 * np.pi * k * phase)

    f.__name__ = f"{fn.__name__}_{int(period.total_seconds() // 3600)}h_{k}"
    return f


def _fourier_features() -> list:
    out = []
    for period, ks in ((DAY, (1, 2, 3)), (7 * DAY, (1, 2))):
        for k in ks:
            out += [_fourier(period, k, np.sin), _fourier(period, k, np.cos)]
    return out


@dataclass
class Design:
    """Features and aggregated targets for every origin of a regular long series."""

    ids: np.ndarray
    origins: np.ndarray
    X: pd.DataFrame
    y_true: np.ndarray  # NaN where the horizon runs past the data
    persistence: np.ndarray
    snaive_day: np.ndarray
    snaive_week: np.ndarray
    mean_last_h: np.ndarray  # mean of the last H bins, as the horizon aggregate
    scale: np.ndarray  # local conformal scale, in series units
    unit: np.ndarray  # per-series unit the model works in
    level: np.ndarray  # ratio-target denominator, in series units
    extra: dict = field(default_factory=dict)

    def baseline(self, name: str) -> np.ndarray:
        if name == "ewma":  # EWMA of the bins before t, at the alpha the forecaster chose
            return self.extra["ewma"][self.extra["alpha"]]
        if name == "ewma_mix":  # a forecast combination: the mean over every alpha's EWMA
            return np.mean(list(self.extra["ewma"].values()), axis=0)
        if name.startswith("ewma_"):  # ewma_<alpha>: one alpha of the grid
            return self.extra["ewma"][float(name[5:])]
        return getattr(self, name)


def bins(freq: str, td: pd.Timedelta) -> int:
    return int(td // pd.Timedelta(freq))


def make_mlf(freq: str, H: int, multiscale: bool) -> MLForecast:
    day, week = bins(freq, DAY), bins(freq, 7 * DAY)
    lags = sorted({1, 2, 3, 6, 12, day, week} - {0})
    lt: dict[int, list] = {1: [RollingMean(3), RollingMean(max(H, 2)), RollingMean(36),
                               RollingStd(36), RollingMean(day)]}
    if multiscale:
        have = {3, max(H, 2), 36, day}
        lt[1] += [RollingMean(w) for w in (6, 12, 72, 3 * day, week) if w not in have and w > 1]
        lt[1] += [RollingStd(day), RollingMax(6), RollingMax(36), RollingMax(day),
                  ExponentiallyWeightedMean(0.1), ExponentiallyWeightedMean(LEVEL_ALPHA)]
    # The same horizon window one day and one week earlier (seasonal-naive as features).
    for back in (day, week):
        if back - H + 1 >= 1:
            lt.setdefault(back - H + 1, []).append(RollingMean(max(H, 2)))
    return MLForecast(models=[], freq=freq, lags=lags, lag_transforms=lt,
                      date_features=["hour", "dayofweek", *_fourier_features()], num_threads=1)


def design(df: pd.DataFrame, unit: dict[str, float], freq: str, H: int, agg: str,
           multiscale: bool = False, level_floor: float = LEVEL_FLOOR) -> Design:
    """Feature rows for every bin of `df` taken as an origin (uses only earlier bins)."""
    d = df.sort_values(["unique_id", "ds"], kind="stable").reset_index(drop=True)
    u = d["unique_id"].map(unit).fillna(1.0).to_numpy()
    d = d.assign(y=d["y"].to_numpy() / u)
    X, Y = make_mlf(freq, H, multiscale).preprocess(d[["unique_id", "ds", "y"]], max_horizon=H,
                                                    return_X_y=True, dropna=False)
    X = X.reset_index(drop=True)
    Y = np.asarray(Y, dtype=float).reshape(len(d), H)
    y_true = Y.sum(1) if agg == "sum" else Y.mean(1)
    k = H if agg == "sum" else 1  # bin means -> horizon aggregate
    mean_prev = X[f"rolling_mean_lag1_window_size{max(H, 2)}"].to_numpy()
    if H == 1:
        mean_prev = X["lag1"].to_numpy()
    day, week = bins(freq, DAY), bins(freq, 7 * DAY)
    sn = {}
    for name, back in (("day", day), ("week", week)):
        col = f"rolling_mean_lag{back - H + 1}_window_size{max(H, 2)}"
        v = X[col].to_numpy() if col in X else np.full(len(d), np.nan)
        if H == 1 and f"lag{back}" in X:
            v = X[f"lag{back}"].to_numpy()
        sn[name] = v * k
    pers = mean_prev * H if agg == "sum" else X["lag1"].to_numpy()
    X["persistence"] = pers
    X["diff1"] = X["lag1"] - X["lag2"]
    X["dev_day"] = X["lag1"] - X[f"rolling_mean_lag1_window_size{day}"]
    # Daily profile: mean of the same horizon window over the previous 7 days (a smoother
    # seasonal level than one day's window). Window k days back ends before t when H <= day.
    if H <= day:
        ys = d.groupby("unique_id", sort=False)["y"]
        fwd = ys.transform(lambda s: s.rolling(H, min_periods=H).mean().shift(-(H - 1)))
        fg = fwd.groupby(d["unique_id"], sort=False)
        stack = np.column_stack([fg.shift(j * day).to_numpy() for j in range(1, 8)])
        n = np.isfinite(stack).sum(1)
        X["profile_7d"] = np.where(n > 0, np.nansum(stack, 1) / np.maximum(n, 1), np.nan)
    # Local scale: recent mean |bin-to-bin change|, floored by the series' long-run one.
    g = d.groupby("unique_id", sort=False)["y"]
    # Shift within each series: a plain shift would hand one queue's last bin to the next.
    absdiff = g.diff().abs().groupby(d["unique_id"], sort=False).shift(1)
    local = absdiff.groupby(d["unique_id"], sort=False).transform(
        lambda s: s.rolling(day, min_periods=1).mean()).to_numpy()
    base = absdiff.groupby(d["unique_id"], sort=False).transform(
        lambda s: s.expanding(min_periods=1).mean()).to_numpy()
    scale = np.nan_to_num(0.5 * local + 0.5 * base, nan=1.0) + 1e-3
    scale = scale * (H if agg == "sum" else np.sqrt(H))
    level = np.full(len(d), np.nan)
    ewm = f"exponentially_weighted_mean_lag1_alpha{LEVEL_ALPHA}"
    if multiscale:
        level = (np.nan_to_num(X[ewm].to_numpy(), nan=1.0) + level_floor) * k
        # Count features relative to the level: what a burst looks like against the recent
        # level, not in absolute GPUs a drifting series may never have shown in training.
        for c in [c for c in X.columns if c.startswith(_SCALED)]:
            X[c] = X[c].to_numpy() * k / level
        X["level"] = level
    ewma = {}
    if agg == "mean":  # the EWMA baseline of a level (pandas: alpha-weighted, no min window)
        for a in EWMA_ALPHAS:
            e = g.transform(lambda s, a=a: s.ewm(alpha=a).mean().shift(1)).to_numpy()
            ewma[a] = e * u
    return Design(ids=d["unique_id"].to_numpy(), origins=d["ds"].to_numpy(), X=X,
                  y_true=y_true * u, persistence=pers * u, snaive_day=sn["day"] * u,
                  snaive_week=sn["week"] * u, mean_last_h=mean_prev * k * u, scale=scale * u,
                  unit=u, level=level * u, extra={"ewma": ewma, "alpha": EWMA_ALPHAS[0]})
