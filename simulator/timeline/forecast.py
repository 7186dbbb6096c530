"""Reserved GPUs over time: the demand forecaster trained online on the replay's arrivals.

Series: per tenant, the GPUs of the jobs the reservation is for (gangs by default) arriving per
10-minute bin.
- ``forecast``: `forecaster.demand.model.DemandForecaster` refit every ``refit_s`` on the bins before
  the refit time only, then asked at every origin of the next period; a forecast at origin t
  reads only bins before t (the forecaster's contract; tested here by changing later arrivals).
  Reserved = the sum over tenants of the chosen quantile of the next ``horizon`` bins' demand.
- ``flat``: the ablation, the running mean of that same horizon sum over all bins before t:
  the level without the time profile (``scale`` sets it to another level, e.g. the
  forecast's mean: equal mean reserved GPUs).
- ``oracle``: the true GPUs arriving in the next ``horizon`` bins (hindsight).
- ``decay_bins`` (forecast only, issue 28): the forecast is multiplied by min(1, realized /
  forecast) summed over the last ``decay_bins`` origins whose horizon has ended, so the
  reservation decays when the big demand it was kept for does not come (and returns when it
  does); causal: an origin's realized sum is read only once its horizon is over.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.timeline.workload import Jobs

FREQ_S = 600


def demand_series(jobs: Jobs, t0: float, t1: float, reserve_for: str = "gang") -> pd.DataFrame:
    """Nixtla long frame (unique_id, ds, y): GPUs per bin in [t0, t1) of the jobs the
    reservation is for (gangs, or gangs and 8-GPU pods)."""
    edges = np.arange(np.floor(t0 / FREQ_S) * FREQ_S, t1 + FREQ_S, FREQ_S)
    nb = len(edges) - 1
    which = jobs.pods > 1 if reserve_for == "gang" else jobs.big
    m = which & (jobs.arrival >= edges[0]) & (jobs.arrival < edges[-1])
    b = ((jobs.arrival[m] - edges[0]) // FREQ_S).astype(int)
    frames = []
    for i, name in enumerate(jobs.tenants):
        sel = jobs.tenant[m] == i
        y = np.bincount(b[sel], weights=(jobs.pods * jobs.gpus)[m][sel], minlength=nb)[:nb]
        frames.append(pd.DataFrame({"unique_id": name, "ds": jobs.t0 + pd.to_timedelta(
            edges[:-1], unit="s"), "y": y}))
    return pd.concat(frames, ignore_index=True)


class ReservedSchedule:
    """reserved(t) in whole GPUs, piecewise constant per bin, built causally."""

    def __init__(self, jobs: Jobs, mode: str, t_start: float, t_end: float,
                 horizon: int = 3, quantile: str = "p50", refit_s: float = 86400.0,
                 scale: float = 1.0, n_estimators: int = 80, reserve_for: str = "gang",
                 seed: int = 0, decay_bins: int = 0) -> None:
        if mode not in ("forecast", "flat", "oracle"):
            raise ValueError("mode must be 'forecast', 'flat' or 'oracle'")
        self.t0 = float(np.floor(t_start / FREQ_S) * FREQ_S)
        self.horizon_s = float(horizon * FREQ_S)
        hist = float(jobs.arrival.min())
        series = demand_series(jobs, hist, t_end + (horizon + 1) * FREQ_S, reserve_for)
        origins = jobs.t0 + pd.to_timedelta(np.arange(self.t0, t_end + FREQ_S, FREQ_S), unit="s")
        self.values = np.zeros(len(origins))
        total = series.groupby("ds")["y"].sum()
        # realized[o]: GPUs that arrived in [o, o + horizon), per origin
        ahead = total[::-1].rolling(horizon, min_periods=1).sum()[::-1]
        realized = ahead.reindex(origins).fillna(0.0).to_numpy()
        if mode == "oracle":
            self.values = realized * scale
        self.short_days = 0  # refits with too little history: the flat level served instead
        if mode != "oracle":
            csum = total.cumsum().shift(1, fill_value=0.0)  # bins before the origin only
            count = pd.Series(np.arange(len(total)), index=total.index)
            mean = (csum / count.replace(0, np.nan)).fillna(0.0)
            flat = mean.reindex(origins).to_numpy() * horizon
        if mode == "flat":
            self.values = flat * scale
        elif mode == "forecast":
            self._fit_forecast(series, origins, horizon, quantile, refit_s, n_estimators, seed,
                               flat)
            self.fitted, self.realized, self.horizon, self.scale = \
                self.values.copy(), realized, horizon, scale
            if decay_bins > 0:
                self.values = self.values * decay(self.values, realized, horizon, decay_bins)
            self.values *= scale
        self.values = np.maximum(np.nan_to_num(self.values), 0.0)

    def _fit_forecast(self, series, origins, horizon, quantile, refit_s, n_est, seed,
                      flat) -> None:
        from forecaster.demand.model import DemandForecaster

        step = pd.Timedelta(seconds=refit_s)
        t = origins[0]
        while t <= origins[-1]:
            past = series[series["ds"] < t]
            model = DemandForecaster(freq=f"{FREQ_S // 60}min", horizon=horizon,
                                     val_bins=288, n_estimators=n_est, seed=seed)
            try:
                model.fit(past)
            except ValueError:  # too little history (a recorded one may start short): flat
                span = (origins >= t) & (origins < t + step)
                self.values[span] = flat[span]
                self.short_days += 1
                t = t + step
                continue
            # features at an origin use bins before it only; later rows just carry the target
            upto = series[series["ds"] < t + step + pd.Timedelta(seconds=horizon * FREQ_S)]
            out = model.predict_origins(upto, start=t)
            out = out[pd.to_datetime(out["origin"]) < t + step]
            tot = out.groupby("origin")[quantile].sum()
            idx = np.searchsorted(origins, pd.to_datetime(tot.index))
            ok = idx < len(self.values)
            self.values[idx[ok]] = tot.to_numpy()[ok]
            t = t + step

    def with_decay(self, decay_bins: int) -> "ReservedSchedule":
        """This forecast schedule as if built with ``decay_bins``, without fitting again (the
        what-if replay's reserve and backfill policies share one fit)."""
        import copy

        out = copy.copy(self)
        v = self.fitted * decay(self.fitted, self.realized, self.horizon, decay_bins)
        v *= self.scale
        out.values = np.maximum(np.nan_to_num(v), 0.0)
        return out

    def mean(self, t0: float, t1: float) -> float:
        """Mean reserved GPUs over the origins in [t0, t1)."""
        i0, i1 = (int((t - self.t0) // FREQ_S) for t in (t0, t1))
        return float(self.values[max(i0, 0):max(i1, 1)].mean())

    def at(self, t: float) -> float:
        i = int((t - self.t0) // FREQ_S)
        return float(self.values[min(max(i, 0), len(self.values) - 1)])


def decay(forecast: np.ndarray, realized: np.ndarray, horizon: int, bins: int) -> np.ndarray:
    """Per origin i: min(1, sum realized / sum forecast) over origins i-horizon-bins+1 ..
    i-horizon (their horizons have ended by i); 1 where none has."""
    f = np.concatenate([[0.0], np.cumsum(forecast)])
    r = np.concatenate([[0.0], np.cumsum(realized)])
    i = np.arange(len(forecast))
    hi = np.clip(i - horizon + 1, 0, None)  # exclusive end: origins <= i - horizon
    lo = np.clip(hi - bins, 0, None)
    fs, rs = f[hi] - f[lo], r[hi] - r[lo]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(fs > 0, np.minimum(1.0, rs / fs), 1.0)
    return out
