"""Usage kind: short-horizon SM activity of running pods -> UsageForecaster.

Split by time: fitted on bins before the cutoff; the backtest scores every origin at or after
it with a complete horizon (pods that start after the cutoff included). Baselines from the same
origins: the forecaster's baselines (last value, mean of the last horizon, simple exponential
smoothing with alpha chosen on training); the gate compares the model with the best of them.
`as_baseline` makes the fitted forecaster serve one baseline everywhere (model of record).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from artifacts.models import load_model
from training.kinds import SkipKind

NAME = "usage"
PRIMARY = "mae"


def prepare(history, cfg) -> dict:
    return combine([partial(history.samples, history, cfg)], history, cfg)


def partial(samples: pd.DataFrame, history, cfg) -> pd.DataFrame | None:
    """One node group's usage series (None: no pod there ran the metric)."""
    from features.usage_series import usage_long
    from ground.errors import ForesightError

    try:
        return usage_long(samples, cfg.usage_metric, cfg.usage_freq)
    except ForesightError:
        return None


def combine(parts: list, history, cfg) -> dict:
    from features.usage_series import USAGE_METRICS

    parts = [p for p in parts if p is not None]
    if not parts:
        name = USAGE_METRICS.get(cfg.usage_metric, cfg.usage_metric)
        raise SkipKind(f"no samples of {name} with a pod label")
    s = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True).sort_values(
        ["unique_id", "ds"], kind="mergesort", ignore_index=True)
    return {"series": s}


def split(data: dict, cutoff: pd.Timestamp) -> tuple[dict, dict]:
    s = data["series"]
    train = s[s["ds"] < cutoff]
    if train.empty or not (s["ds"] >= cutoff).any():
        raise SkipKind(f"no usage bins on both sides of {cutoff}")
    return {"series": train}, {"series": s, "cutoff": cutoff}


def _kw(cfg) -> dict:
    return dict(horizon=cfg.usage_horizon, n_estimators=cfg.n_estimators, seed=cfg.seed,
                n_jobs=cfg.threads)


def capped(series: pd.DataFrame, max_rows: int | None, seed: int) -> pd.DataFrame:
    """Whole series drawn at random until `max_rows` bins (all of them when fewer)."""
    if not max_rows or len(series) <= max_rows:
        return series
    sizes = series.groupby("unique_id", sort=True).size()
    order = np.random.default_rng(seed).permutation(len(sizes))
    take = sizes.iloc[order][sizes.iloc[order].cumsum().to_numpy() <= max_rows].index
    return series[series["unique_id"].isin(set(take))].reset_index(drop=True)


def fit(train: dict, cfg):
    from forecaster.usage.model import UsageForecaster

    try:
        return UsageForecaster(**_kw(cfg)).fit(
            capped(train["series"], getattr(cfg, "usage_max_rows", None), cfg.seed))
    except ValueError as exc:
        raise SkipKind(f"usage: {exc}") from None


def fit_dask(train: dict, cfg, client):
    """The same forecaster, its boosters trained through lightgbm.dask."""
    from training.dask_fit import fit_usage_dask

    try:
        return fit_usage_dask(capped(train["series"], getattr(cfg, "usage_max_rows", None),
                                     cfg.seed), client, **_kw(cfg))
    except ValueError as exc:
        raise SkipKind(f"usage: {exc}") from None


def score(model, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    # only series still running at the cutoff have origins after it (same predictions, less
    # feature building: a week's ended pods are most of the series)
    s = test["series"]
    alive = s.loc[s["ds"] >= test["cutoff"], "unique_id"].unique()
    pred = model.predict_origins(s[s["unique_id"].isin(set(alive))], test["cutoff"])
    if pred.empty:
        raise SkipKind("no usage origin with a complete horizon after the cutoff")
    y = pred["y_true"].to_numpy()
    mae = lambda c: float(np.mean(np.abs(pred[c].to_numpy() - y)))  # noqa: E731
    from forecaster.usage.model import BASELINES

    m = {"primary": PRIMARY, "mae": mae("p50"),
         **{f"baseline_{b}_mae": mae(b) for b in BASELINES if b in pred},
         "p10_p90_coverage": float(((y >= pred["p10"]) & (y <= pred["p90"])).mean()),
         "backtest_origins": int(len(pred)), "series": int(pred["unique_id"].nunique()),
         "horizon_bins": int(model.horizon)}
    return m, pred


def as_baseline(model, name: str):
    """The same artifact serving baseline `name` for every series (and unseen ones)."""
    model.served_ = name
    model.served_series_ = {u: name for u in getattr(model, "served_series_", {})}
    return model


def save(model, path: Path) -> None:
    model.save(path)


def load(path: Path):
    return load_model(NAME, path)


def features(model) -> list[str]:
    return list(model.features_)


def plot(pred: pd.DataFrame, ax) -> str:
    from training.plots import forecast_panel, inside, mae, title

    uid = pred["unique_id"].value_counts().index[0]  # the longest-running series
    p = pred[pred["unique_id"] == uid].sort_values("origin")
    # SM activity is a ratio: the band stays in [0, 1]
    forecast_panel(ax, p, "mean_last_h", "mean of last horizon", "SM active", 0.0, 1.0)
    title(ax, f"usage backtest, pod {uid.split('/')[1]}: mean SM activity over the next "
              "horizon")
    return (f"Pod {uid.split('/')[1]}: p50 MAE {mae(p['p50'], p['y_true']):.3g} vs mean of "
            f"the last horizon {mae(p['mean_last_h'], p['y_true']):.3g}; inside [p10, p90] at "
            f"{inside(p['y_true'], p['p10'], p['p90']):.0%} of origins.")
