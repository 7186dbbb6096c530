"""Rolling-origin backtest of the demand forecaster against baselines, computed in one run.

Rows of the metrics table: `model` is the served forecast (per series the LightGBM, or the
baseline it fell back to on validation, named in the predictions' `model` column);
`lightgbm` is the LightGBM everywhere, before that fallback.

Origins are every bin from `test_start` to the last one whose horizon is complete. At origin t
every forecast uses only bins with ds < t: the LightGBM model is fitted on ds < test_start
(its validation/calibration window is the training tail), and its features, like the
baselines, are lags of earlier bins.

Baselines (each gets split-conformal [p10, p90] from its own residuals on the calibration
window, the `val_bins` origins just before test_start, so coverage is comparable):
- persistence: agg="sum" the previous horizon's sum; agg="mean" the last bin's value.
- mean_last_h, ewma (agg="mean" only): the mean of the last H bins; an EWMA of past bins
  (alpha picked on the fitting part).
- snaive_day / snaive_week: the same window one day / one week earlier.
- ewma_mix (with `mix=True`): the forecaster's own forecast combination, the mean of the
  EWMAs at every alpha of its grid (a candidate it may serve, not a simple baseline).
- ets: statsforecast AutoETS (non-seasonal, fitted once on the data before the calibration
  window), its state filtered over the trailing `ets_input_bins` at each origin
  (cross_validation with refit=False). Why not MSTL or a 144-season ETS: measured here,
  MSTL with refit=False costs ~0.4 s per origin (~2 h for Helios), and AutoETS(season_length=144)
  did not finish 500 origins in 3 min; the daily season is covered by snaive_day.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from forecaster.demand.model import DemandForecaster

BASELINES = ("persistence", "mean_last_h", "ewma", "ewma_mix", "snaive_day", "snaive_week",
             "ets")


def ets_baseline(df: pd.DataFrame, horizon: int, agg: str, freq: str, first_origin,
                 input_bins: int = 2016) -> pd.DataFrame:
    """AutoETS forecasts aggregated over the horizon at every origin >= first_origin."""
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS

    step = pd.Timedelta(freq)
    first = pd.Timestamp(first_origin)
    parts = []
    for uid, g in df.groupby("unique_id", sort=False):
        g = g.sort_values("ds")
        n_windows = int(((g["ds"] >= first).sum()) - horizon + 1)
        if n_windows < 1 or (g["ds"] < first).sum() < 20:
            continue
        d = g[["unique_id", "ds", "y"]].assign(ds=g["ds"].dt.tz_localize(None))
        sf = StatsForecast(models=[AutoETS(season_length=1)], freq=freq, n_jobs=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cv = sf.cross_validation(df=d, h=horizon, step_size=1, n_windows=n_windows,
                                     refit=False, input_size=input_bins)
        val = cv.groupby("cutoff")["AutoETS"].agg(agg)
        parts.append(pd.DataFrame({"unique_id": uid,
                                   "origin": (val.index + step).tz_localize("UTC"),
                                   "ets": val.to_numpy()}))
    if not parts:
        return pd.DataFrame(columns=["unique_id", "origin", "ets"])
    return pd.concat(parts, ignore_index=True)


#: fewest calibration residuals a series' own baseline interval takes (the model's rule,
#: DemandForecaster._conformal); a series with fewer takes the pooled one
MIN_OWN = 50


def _conformal(cal: pd.DataFrame, test: pd.DataFrame, col: str, coverage: float) -> tuple:
    """Split-conformal [p10, p90] of a baseline, per series in units of the series' mean
    |y| on calibration (pooled over series, in those units, for a series with fewer than
    MIN_OWN residuals). Pooled raw residuals, as before 2026-11-28, gave a busy series' spread
    to a quiet one: the requests of an LLM trace got its tokens' interval (coverage 100 %)."""
    a = (1 - coverage) / 2
    r = cal["y_true"] - cal[col]
    # a series of zeros (or no finite target) keeps raw units
    scale = cal["y_true"].abs().groupby(cal["unique_id"]).mean().fillna(0.0).replace(0.0, 1.0)
    z = (r / cal["unique_id"].map(scale)).dropna()
    ids = cal.loc[z.index, "unique_id"]
    pooled = (np.quantile(z, a), np.quantile(z, 1 - a)) if len(z) else (np.nan, np.nan)
    q = {u: (np.quantile(g, a), np.quantile(g, 1 - a)) for u, g in z.groupby(ids)
         if len(g) >= MIN_OWN}
    qs = np.array([q.get(u, pooled) for u in test["unique_id"]], float).reshape(-1, 2)
    s = test["unique_id"].map(scale).fillna(1.0).to_numpy()
    return (np.maximum(test[col] + qs[:, 0] * s, 0.0),
            test[col] + qs[:, 1] * s)


def _mean(x) -> float:
    """Mean of the finite values; NaN (and no warning) where there are none, e.g. a baseline
    that has no forecast for any test origin of a short series."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else float("nan")


def pinball(y: np.ndarray, q: dict[float, np.ndarray]) -> float:
    """Mean pinball loss over the quantile levels given."""
    losses = [_mean(np.maximum(a * (y - p), (a - 1) * (y - p))) for a, p in q.items()]
    return float(np.mean(losses))


def backtest(df: pd.DataFrame, freq: str, horizon: int, test_start, agg: str = "sum",
             with_ets: bool = True, score_ids: list[str] | None = None,
             **params) -> tuple[pd.DataFrame, pd.DataFrame, DemandForecaster]:
    """Returns (PRED: unique_id, origin, y_true, p10, p50, p90, model, <baselines>; metrics;
    model). The model is fitted on every series of `df`; the metrics cover `score_ids` (all
    series when None), e.g. a cluster total fitted together with its parts."""
    step = pd.Timedelta(freq)
    T = pd.Timestamp(test_start)
    model = DemandForecaster(freq=freq, horizon=horizon, agg=agg, **params)
    model.fit(df[df["ds"] < T])
    cal_start = T - model.val_bins * step
    # One design pass over all data: features at each origin use earlier bins only.
    pred = model.predict_origins(df, cal_start)
    pred["origin"] = pd.to_datetime(pred["origin"], utc=True)
    if score_ids is not None:
        pred = pred[pred["unique_id"].isin([str(u) for u in score_ids])].reset_index(drop=True)
    # Calibration origins must have their horizon inside the training data.
    cal_mask = pred["origin"] + horizon * step <= T
    if with_ets:
        keep = df if score_ids is None else df[df["unique_id"].isin(score_ids)]
        ets = ets_baseline(keep, horizon, agg, freq, cal_start)
        pred = pred.merge(ets, on=["unique_id", "origin"], how="left")
    cal, test = pred[cal_mask], pred[pred["origin"] >= T].reset_index(drop=True)
    if test.empty:
        raise ValueError("no test origin with a complete horizon")
    # MASE scale: MAE of the daily seasonal naive over the training origins.
    train = model.predict_origins(df[df["ds"] < T], df["ds"].min())
    if score_ids is not None:
        train = train[train["unique_id"].isin([str(u) for u in score_ids])]
    mase_scale = _mean(np.abs(train["y_true"] - train["snaive_day"]))
    rows = []
    y = test["y_true"].to_numpy()
    for name in ("model", "lightgbm", *[b for b in BASELINES if b in test]):
        if name == "model":
            p10, p50, p90 = test["p10"], test["p50"], test["p90"]
        else:
            p50 = test[name]
            p10, p90 = _conformal(cal, test, name, model.coverage)
            test[f"{name}_p10"], test[f"{name}_p90"] = p10, p90
        ok = np.isfinite(p50.to_numpy())
        mae = _mean(np.abs(y[ok] - p50.to_numpy()[ok]))
        mase = mae / mase_scale if mase_scale > 0 else float("nan")  # constant history: no scale
        rows.append({"method": name, "n": int(ok.sum()), "MAE": mae, "MASE": mase,
                     "pinball": pinball(y[ok], {0.1: p10.to_numpy()[ok], 0.5: p50.to_numpy()[ok],
                                                0.9: p90.to_numpy()[ok]}),
                     "coverage_p10_p90": _mean((y[ok] >= p10.to_numpy()[ok])
                                               & (y[ok] <= p90.to_numpy()[ok]))})
    return test, pd.DataFrame(rows), model


#: simple baselines: what the served forecast must beat (ewma_mix is the forecaster's own)
SIMPLE = tuple(b for b in BASELINES if b != "ewma_mix")


def per_series(pred: pd.DataFrame) -> pd.DataFrame:
    """Per series of a backtest's PRED: the served MAE, the best simple baseline on the same
    origins and its MAE, their ratio, and each one's [p10, p90] coverage. Series in other
    units (an LLM trace's tokens and requests) are read here, not in the pooled table."""
    rows = []
    for uid, g in pred.groupby("unique_id", sort=False):
        y = g["y_true"].to_numpy(float)
        mae = {b: _mean(np.abs(y - g[b].to_numpy(float))) for b in SIMPLE if b in g}
        mae = {b: v for b, v in mae.items() if np.isfinite(v)}
        served = _mean(np.abs(y - g["p50"].to_numpy(float)))
        best = min(mae, key=mae.get) if mae else None
        cover = lambda lo, hi: _mean((y >= g[lo].to_numpy(float)) & (y <= g[hi].to_numpy(float)))  # noqa: E731
        rows.append({"series": uid, "origins": len(g), "served MAE": served,
                     "best baseline": best or "-",
                     "baseline MAE": mae[best] if best else float("nan"),
                     "ratio": served / mae[best] if best and mae[best] > 0 else float("nan"),
                     "coverage": cover("p10", "p90"),
                     "baseline coverage": cover(f"{best}_p10", f"{best}_p90")
                     if best and f"{best}_p10" in g else float("nan")})
    return pd.DataFrame(rows)


def plot_busiest(pred: pd.DataFrame, path: str, title: str = "") -> str:
    """PNG of forecast vs actual for the queue with the largest total y_true."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    uid = pred.groupby("unique_id")["y_true"].sum().idxmax()
    g = pred[pred["unique_id"] == uid].sort_values("origin")
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.fill_between(g["origin"], g["p10"], g["p90"], alpha=0.3, label="model p10-p90")
    ax.plot(g["origin"], g["y_true"], "k", lw=1, label="actual")
    ax.plot(g["origin"], g["p50"], "C0", lw=1, label="model p50")
    ax.plot(g["origin"], g["persistence"], "C3", lw=0.8, alpha=0.7, label="persistence")
    ax.set_title(f"{title} queue {uid}".strip())
    ax.set_xlabel("origin")
    ax.set_ylabel("demand over horizon")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(uid)
