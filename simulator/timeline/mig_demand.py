"""Demand per MIG profile for the geometry planner of the MIG replay, built causally.

- ``forecast``: `forecaster.demand.model.DemandForecaster` (the project's demand forecaster,
  LightGBM with its per-series baseline fallback) on the pods arriving per profile per hour,
  refit every ``refit_s`` on the bins before the refit time only, then asked at every hourly
  origin of the next period for the sum over the next ``lookahead`` hours; a forecast at
  origin t reads only bins before t (the forecaster's contract).
- ``oracle``: the true arrivals of the next ``lookahead`` hours (hindsight; labelled as such).

The planner's demand at t (`planner_demand`) is, per profile, the expected pods at t + L
(L = lookahead): the pods waiting, the running pods still running then, and the arrivals of
the window still running then. Run times are taken as exponential with the mean run time of
the pods of the profile that finished so far (observable at t; an approximation): a running
pod survives L with e^(-L/D), and A arrivals spread over L leave A (D/L) (1 - e^(-L/D)).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from simulator.timeline.mig_workload import MigPods

BIN_S = 3600


def arrival_series(pods: MigPods, t0: float, t1: float) -> pd.DataFrame:
    """Nixtla long frame (unique_id = `mig:<profile>`, ds, y = pods arriving per hour)."""
    edges = np.arange(np.floor(t0 / BIN_S) * BIN_S, t1 + BIN_S, BIN_S)
    nb = len(edges) - 1
    m = (pods.arrival >= edges[0]) & (pods.arrival < edges[-1])
    b = ((pods.arrival[m] - edges[0]) // BIN_S).astype(int)
    frames = []
    for i, name in enumerate(pods.profiles):
        y = np.bincount(b[pods.profile[m] == i], minlength=nb)[:nb].astype(float)
        frames.append(pd.DataFrame({"unique_id": f"mig:{name}", "ds": pods.t0 + pd.to_timedelta(
            edges[:-1], unit="s"), "y": y}))
    return pd.concat(frames, ignore_index=True)


class ArrivalForecast:
    """Arrivals per profile over the next ``lookahead`` hours at each hourly origin."""

    def __init__(self, pods: MigPods, mode: str, t_start: float, t_end: float,
                 lookahead: int = 3, quantile: str = "p90", refit_s: float = 86400.0,
                 n_estimators: int = 80, seed: int = 0) -> None:
        if mode not in ("forecast", "oracle"):
            raise ValueError("mode must be 'forecast' or 'oracle'")
        self.t0 = float(np.floor(t_start / BIN_S) * BIN_S)
        self.profiles = pods.profiles
        n = int(np.ceil((t_end - self.t0) / BIN_S)) + 1
        self.values = np.zeros((n, len(pods.profiles)))
        end = t_end + (lookahead + 1) * BIN_S
        series = arrival_series(pods, float(pods.arrival.min()), end)
        if mode == "oracle":
            for i, name in enumerate(pods.profiles):
                s = series[series["unique_id"] == f"mig:{name}"]
                y = s["y"].to_numpy()
                first = int(round((self.t0 - (s["ds"].iloc[0] - pods.t0).total_seconds())
                                  / BIN_S))
                csum = np.concatenate([[0.0], np.cumsum(y)])
                for k in range(n):
                    a = first + k
                    self.values[k, i] = csum[min(a + lookahead, len(y))] - csum[min(a, len(y))]
        else:
            self._fit(series, pods, n, lookahead, quantile, refit_s, n_estimators, seed)
        self.values = np.maximum(np.nan_to_num(self.values), 0.0)

    def _fit(self, series, pods, n, lookahead, quantile, refit_s, n_est, seed) -> None:
        from forecaster.demand.model import DemandForecaster

        origins = pods.t0 + pd.to_timedelta(self.t0 + BIN_S * np.arange(n), unit="s")
        col = {f"mig:{p}": i for i, p in enumerate(pods.profiles)}
        step = pd.Timedelta(seconds=refit_s)
        t = origins[0]
        while t <= origins[-1]:
            model = DemandForecaster(freq="1h", horizon=lookahead, val_bins=48,
                                     n_estimators=n_est, seed=seed)
            model.fit(series[series["ds"] < t])
            # features at an origin use bins before it only; later rows carry the target
            upto = series[series["ds"] < t + step + pd.Timedelta(hours=lookahead)]
            out = model.predict_origins(upto, start=t)
            out = out[pd.to_datetime(out["origin"]) < t + step]
            idx = np.searchsorted(origins, pd.to_datetime(out["origin"]))
            ok = idx < n
            self.values[idx[ok], out["unique_id"].map(col).to_numpy()[ok]] = \
                out[quantile].to_numpy()[ok]
            t = t + step

    def at(self, t: float) -> dict[str, float]:
        k = min(max(int((t - self.t0) // BIN_S), 0), len(self.values) - 1)
        return {p: float(v) for p, v in zip(self.profiles, self.values[k])}


def planner_demand(fc: ArrivalForecast, lookahead: int
                   ) -> Callable[[float, Any], dict[str, float]]:
    """demand(t, live) for `simulator.timeline.mig.run_mig` (see the module docstring)."""
    def demand(t: float, live) -> dict[str, float]:
        out = {}
        for p, v in fc.at(t).items():
            d, span = live.mean_run_s(p), lookahead * BIN_S
            keep = math.exp(-span / d)
            out[p] = live.waiting[p] + live.running[p] * keep + v * d / span * (1 - keep)
        return out
    return demand
