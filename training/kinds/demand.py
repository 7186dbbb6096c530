"""Demand kind: GPUs requested by arriving pods per queue -> DemandForecaster (direct, p10-p90).

Split by time: the forecaster is fitted on bins before the cutoff; the backtest scores every
forecast origin at or after the cutoff whose horizon is complete, using only bins before each
origin as inputs. Baselines from the same origins: persistence and seasonal-naive (day).
The series is rebuilt at the scored model's own bin width, so a model in service trained with
other settings is compared on the same window and the same pods.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from artifacts.models import SHAPE_MIX_FILE, load_model
from training.kinds import SkipKind

NAME = "demand"
PRIMARY = "mae"


def _series(pods: pd.DataFrame, freq: str, end: pd.Timestamp) -> pd.DataFrame:
    from features.demand_series import arrivals_until

    return arrivals_until(pods, freq, end)


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
    # Arrivals are bursty with a drifting level: the ratio target with absolute GPU floors,
    # the design chosen on the DLRM trace's dev window (bench/demand_dlrm.py).
    return s, dict(freq=cfg.demand_freq, horizon=cfg.demand_horizon, agg="sum", val_bins=val,
                   n_estimators=cfg.n_estimators, min_child_samples=20, seed=cfg.seed,
                   n_jobs=cfg.threads, target="ratio", unit_scale=False, level_floor=0.1)


def fit(train: dict, cfg):
    from forecaster.demand.model import DemandForecaster

    s, kw = _fit_args(train, cfg)
    return _with_mix(DemandForecaster(**kw).fit(s), train)


def fit_dask(train: dict, cfg, client):
    """The same forecaster, its boosters trained through lightgbm.dask."""
    from training.dask_fit import fit_demand_dask

    s, kw = _fit_args(train, cfg)
    return _with_mix(fit_demand_dask(s, cfg, client, **kw), train)


# ---------------------------------------------------------------- shape mix
# The forecast mix of pod shapes (gpus, milli-GPU per GPU, as the scheduler hook counts them)
# is published inside the demand artifact, as `shape_mix.json`: the API's /v1/demand and the
# hook's fragmentation score need it, and it is learned from the same arrivals and window.


def _shapes(pods: pd.DataFrame) -> pd.DataFrame:
    """Arrivals with a GPU request, shape "gpus:milli" (a fraction of one GPU -> 1:milli)."""
    g = pd.to_numeric(pods["gpu_request"], errors="coerce").to_numpy(float)
    keep = np.isfinite(g) & (g > 0)
    g = g[keep]
    gpus = np.where(g < 1, 1, np.ceil(g)).astype(int)
    milli = np.where(g < 1, np.round(g * 1000), 1000).astype(int)
    return pd.DataFrame({"ds": pods["created"].to_numpy()[keep],
                         "queue": pods["queue"].astype(str).to_numpy()[keep],
                         "shape": [f"{a}:{b}" for a, b in zip(gpus, milli)]})


def _mix_list(pred: pd.DataFrame) -> list[dict]:
    return [{"gpus": int(sh.split(":")[0]), "milli": int(sh.split(":")[1]),
             "share": round(float(v), 6)} for sh, v in zip(pred["shape"], pred["share"])]


def shape_mix(pods: pd.DataFrame, end: pd.Timestamp) -> dict | None:
    """The shape mix forecast at `end` from arrivals before it, overall and per queue."""
    from forecaster.demand.shapes import ShapeMixForecaster

    a = _shapes(pods[pods["created"] < end])
    if a.empty:
        return None
    f = ShapeMixForecaster().fit(a)
    return {"kind": "shape_mix", "schema_version": 1, "as_of": pd.Timestamp(end).isoformat(),
            "half_life": f.half_life, "prior_strength": f.prior_strength,
            "arrivals": int(len(a)), "shapes": _mix_list(f.predict(end)),
            "by_queue": {q: _mix_list(f.predict(end, queue=q))
                         for q in sorted(a["queue"].unique()) if q}}


def _with_mix(model, train: dict):
    model.shape_mix_ = shape_mix(train["pods"], train["end"])
    return model


def _mix_tv(mix: pd.Series, pods: pd.DataFrame) -> float:
    """Total variation distance between a mix (share by "gpus:milli") and the shapes that
    actually arrived among `pods`."""
    real = _shapes(pods)["shape"].value_counts(normalize=True)
    both = real.index.union(mix.index)
    return 0.5 * float((real.reindex(both, fill_value=0) - mix.reindex(both, fill_value=0))
                       .abs().sum())


def score(model, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    s = _series(test["pods"], model.freq, test["end"])
    pred = model.predict_origins(s, test["cutoff"])
    if pred.empty:
        raise SkipKind("no complete forecast horizon after the cutoff")
    y = pred["y_true"].to_numpy()
    # a baseline undefined at some origins (too little history) is not on the same window: NaN
    mae = lambda col: float(np.mean(np.abs(pred[col].to_numpy() - y)))  # noqa: E731
    m = {"primary": PRIMARY, "mae": mae("p50"), "baseline_persistence_mae": mae("persistence"),
         "baseline_snaive_day_mae": mae("snaive_day"),
         "baseline_snaive_week_mae": mae("snaive_week"),
         "p10_p90_coverage": float(((y >= pred["p10"]) & (y <= pred["p90"])).mean()),
         "backtest_origins": int(len(pred)), "queues": int(pred["unique_id"].nunique()),
         "freq": model.freq, "horizon_bins": int(model.horizon)}
    mix = getattr(model, "shape_mix_", None)
    after = test["pods"][test["pods"]["created"] >= test["cutoff"]]
    if mix and not _shapes(after).empty:
        # the published mix against the shapes arriving after the cutoff, and, for comparison
        # (not a gate baseline), the plain mix of all arrivals before the cutoff
        pub = pd.Series({f"{x['gpus']}:{x['milli']}": x["share"] for x in mix["shapes"]})
        before = _shapes(train["pods"][train["pods"]["created"] < test["cutoff"]])
        m["shape_mix_tv"] = _mix_tv(pub, after)
        m["shape_mix_tv_longrun"] = _mix_tv(before["shape"].value_counts(normalize=True), after)
    return m, pred


def as_baseline(model, name: str):
    """The same artifact serving baseline `name` for every series (and unseen ones)."""
    model.served_ = {**{u: name for u in model.unit_}, "*": name}
    return model


def save(model, path: Path) -> None:
    model.save(path)
    mix = getattr(model, "shape_mix_", None)
    if mix:
        (Path(path) / SHAPE_MIX_FILE).write_text(json.dumps(mix, indent=1))


def load(path: Path):
    return load_model(NAME, path)


def features(model) -> list[str]:
    return list(model.features_)


def plot(pred: pd.DataFrame, ax) -> str:
    from training.plots import forecast_panel, inside, mae, title

    q = pred.groupby("unique_id")["y_true"].sum().idxmax()  # the busiest queue
    p = pred[pred["unique_id"] == q].sort_values("origin")
    forecast_panel(ax, p, "persistence", "persistence", "GPUs requested", low=0.0)
    title(ax, f"demand backtest, queue {q}: GPUs requested over the next horizon, "
              "forecast at each origin")
    return (f"Queue {q}: p50 MAE {mae(p['p50'], p['y_true']):.3g} GPUs vs persistence "
            f"{mae(p['persistence'], p['y_true']):.3g}; the actual lies inside [p10, p90] at "
            f"{inside(p['y_true'], p['p10'], p['p90']):.0%} of origins (80 % nominal).")
