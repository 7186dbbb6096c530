"""Demand kind: GPUs requested by arriving pods per queue -> DemandForecaster (direct, p10-p90).

Split by time: the forecaster is fitted on bins before the cutoff; the backtest scores every
forecast origin at or after the cutoff whose horizon is complete, using only bins before each
origin as inputs. Baselines from the same origins: persistence and seasonal-naive (day).
The series is rebuilt at the scored model's own bin width, so a model in service trained with
other settings is compared on the same window and the same pods.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from training.kinds import SkipKind

NAME = "demand"
PRIMARY = "mae"


def _series(pods: pd.DataFrame, freq: str, end: pd.Timestamp) -> pd.DataFrame:
    from features.demand_series import arrivals_from_pods

    s = arrivals_from_pods(pods[pods["created"] < end], freq)
    # every queue on one grid up to the end of the history (no arrivals = 0 GPUs)
    grid = pd.date_range(s["ds"].min(), end - pd.Timedelta(freq), freq=freq)
    full = pd.MultiIndex.from_product([sorted(s["unique_id"].unique()), grid],
                                      names=["unique_id", "ds"])
    return (s.set_index(["unique_id", "ds"])["y"].reindex(full, fill_value=0.0)
            .reset_index())


def prepare(history, cfg) -> dict:
    pods = history.pods.dropna(subset=["created"])
    pods = pods[pods["created"] >= history.start]
    if pods.empty or pods["queue"].astype(str).eq("").all():
        raise SkipKind("no pods with a queue and a creation time in the history")
    return {"pods": pods, "end": history.end.floor(cfg.demand_freq)}


def split(data: dict, cutoff: pd.Timestamp) -> tuple[dict, dict]:
    return ({"pods": data["pods"], "end": cutoff}, {**data, "cutoff": cutoff})


def _fit_args(train: dict, cfg) -> tuple[pd.DataFrame, dict]:
    s = _series(train["pods"], cfg.demand_freq, train["end"])
    bins = s.groupby("unique_id").size().min()
    val = max(12, int(bins // 5))
    if bins - val < 2 * cfg.demand_horizon + 12:
        raise SkipKind(f"{bins} bins of {cfg.demand_freq} before the cutoff: too short")
    return s, dict(freq=cfg.demand_freq, horizon=cfg.demand_horizon, agg="sum", val_bins=val,
                   n_estimators=cfg.n_estimators, min_child_samples=20, seed=cfg.seed,
                   n_jobs=cfg.threads)


def fit(train: dict, cfg):
    from forecaster.demand import DemandForecaster

    s, kw = _fit_args(train, cfg)
    return DemandForecaster(**kw).fit(s)


def fit_dask(train: dict, cfg, client):
    """The same forecaster, its boosters trained through lightgbm.dask."""
    from training.dask_fit import fit_demand_dask

    s, kw = _fit_args(train, cfg)
    return fit_demand_dask(s, cfg, client, **kw)


def score(model, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    s = _series(test["pods"], model.freq, test["end"])
    pred = model.predict_origins(s, test["cutoff"])
    if pred.empty:
        raise SkipKind("no complete forecast horizon after the cutoff")
    y = pred["y_true"].to_numpy()
    mae = lambda col: float(np.nanmean(np.abs(pred[col].to_numpy() - y)))  # noqa: E731
    m = {"primary": PRIMARY, "mae": mae("p50"), "baseline_persistence_mae": mae("persistence"),
         "baseline_snaive_day_mae": mae("snaive_day"),
         "p10_p90_coverage": float(((y >= pred["p10"]) & (y <= pred["p90"])).mean()),
         "backtest_origins": int(len(pred)), "queues": int(pred["unique_id"].nunique()),
         "freq": model.freq, "horizon_bins": int(model.horizon)}
    return m, pred


def save(model, path: Path) -> None:
    model.save(path)


def load(path: Path):
    from forecaster.demand import DemandForecaster

    return DemandForecaster.load(path)


def features(model) -> list[str]:
    return list(model.features_)


def plot(pred: pd.DataFrame, ax) -> None:
    q = pred.groupby("unique_id")["y_true"].sum().idxmax()  # the busiest queue
    p = pred[pred["unique_id"] == q].sort_values("origin")
    t = pd.to_datetime(p["origin"])
    ax.fill_between(t, p["p10"], p["p90"], alpha=0.25, label="p10-p90")
    ax.plot(t, p["y_true"], "k-", lw=1.2, label="actual")
    ax.plot(t, p["p50"], "-", lw=1.2, label="forecast p50")
    ax.plot(t, p["persistence"], ":", lw=1, label="persistence")
    ax.set_title(f"demand backtest, queue {q}: GPUs arriving over the next horizon")
    ax.set_ylabel("GPUs requested")
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
