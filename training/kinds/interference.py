"""Interference kind: pair table from telemetry -> InterferenceModel; backtest on later episodes.

Split by time: train on co-location episodes that ended before the cutoff, test on episodes
that started after it (episodes straddling the cutoff are dropped from both). Baseline: the
training median speed for every pair, computed in the same run. `as_baseline` turns the fitted
model into that baseline (a one-leaf booster predicting the training median, its p10 margin
calibrated on the training speeds): the model of record when the fitted one does not beat it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from artifacts.models import load_model
from training.kinds import SkipKind

NAME = "interference"
PRIMARY = "mae"
MIN_PAIRS = 30


def prepare(history, cfg) -> dict:
    return combine([partial(history.samples, history, cfg)], history, cfg)


def partial(samples: pd.DataFrame, history, cfg) -> dict | None:
    """One node group's pair parts (features.pair_build.pair_parts); the sample step is the
    pull's when known (a small group's own timestamps may have holes)."""
    from features.pair_build import pair_parts

    step = getattr(history, "step_s", None)
    return pair_parts(samples, gpu_sharing=history.gpu_sharing or None,
                      step_ns=int(round(step * 1e9)) if step else None)


def combine(parts: list, history, cfg) -> dict:
    from features.pair_build import finish_pairs, workload_solo

    pairs, eps = finish_pairs(parts, history.pods, gpu_model=history.gpu_model)
    if pairs.empty:
        raise SkipKind("no co-location episodes in the history")
    keep = pairs[["a_speed", "b_speed"]].notna().any(axis=1).to_numpy()
    if keep.sum() < MIN_PAIRS:
        raise SkipKind(f"only {int(keep.sum())} co-location episodes with a measured speed "
                       f"(need {MIN_PAIRS}; is the progress counter exported?)")
    # every workload that ran alone, co-located or not: pods of a workload that has never
    # shared a GPU are then asked with their own fingerprint (forecaster/interference/solo.py)
    return {"pairs": pairs[keep].reset_index(drop=True),
            "episodes": eps[keep].reset_index(drop=True),
            "solo": workload_solo(parts, history.pods)}


def split(data: dict, cutoff: pd.Timestamp) -> tuple[dict, dict]:
    eps = data["episodes"]
    tr = (eps["end"] <= cutoff).to_numpy()
    te = (eps["start"] >= cutoff).to_numpy()
    if tr.sum() < MIN_PAIRS or te.sum() < 10:
        raise SkipKind(f"{int(tr.sum())} training / {int(te.sum())} backtest episodes around "
                       f"{cutoff}: history too short for a time split")
    def pick(m: np.ndarray) -> dict:  # the solo fingerprints are features: both sides
        return {k: v if k == "solo" else v[m].reset_index(drop=True) for k, v in data.items()}
    return pick(tr), pick(te)


def _speeds(pairs: pd.DataFrame) -> pd.Series:
    return pd.concat([pairs["a_speed"], pairs["b_speed"]]).dropna()


def fit(train: dict, cfg):
    from forecaster.interference.model import InterferenceModel

    m = InterferenceModel(n_estimators=cfg.n_estimators, n_threads=cfg.threads,
                          alpha=cfg.interference_alpha,
                          admit_risk=cfg.interference_admit_risk, seed=cfg.seed
                          ).fit(train["pairs"], solo=train.get("solo"))
    m.train_speeds_ = _speeds(train["pairs"]).to_numpy()
    return m


def as_baseline(model, name: str):
    """The fitted model's artifact, its point booster replaced by the training median (the
    `median` baseline; LightGBM stores it as float32) and its p10 margin set so that 10 % of
    the training speeds fall below it."""
    import lightgbm as lgb
    from forecaster.interference.conformal import margin_scale

    if name != "median":
        raise ValueError(f"interference has no baseline {name!r}")
    med = float(np.median(model.train_speeds_))
    n = len(model.feature_names_)
    model.point_ = lgb.train({"objective": "l2", "verbose": -1, "num_threads": 1},
                             lgb.Dataset(np.zeros((20, n)), np.full(20, med)),
                             num_boost_round=1)
    scale = float(np.asarray(margin_scale(np.array([med])))[0])
    model.offset_ = float(max(med - np.quantile(model.train_speeds_, 0.1), 0.0) / scale)
    model.p10_ = None
    model.mechanism_ = None  # the median alone: no sharing-mechanism prior under it
    model.plain_ = None  # nor the second booster of a "mix" blend
    model.admit_q_ = {}  # the fitted model's admission bound is not the median's: the p10
    model.served_ = "median"
    return model


def fit_dask(train: dict, cfg, client):
    """The same model, its point booster trained through lightgbm.dask (see training.dask_fit)."""
    from training.dask_fit import fit_interference_dask

    m = fit_interference_dask(train["pairs"], cfg, client, solo=train.get("solo"))
    m.train_speeds_ = _speeds(train["pairs"]).to_numpy()
    return m


def _long(pairs: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for side in ("a", "b"):
        rows.append(pd.DataFrame({"side": side, "workload": pairs[f"{side}_workload"].astype(str),
                                  "partner": pairs[f"{'b' if side == 'a' else 'a'}_workload"].astype(str),
                                  "sharing": pairs.get("sharing", ""),
                                  "y": pairs[f"{side}_speed"].to_numpy(),
                                  "pred": pred[f"{side}_speed_pred"].to_numpy(),
                                  "p10": pred[f"{side}_speed_p10"].to_numpy()}))
    out = pd.concat(rows, ignore_index=True)
    return out[out["y"].notna()].reset_index(drop=True)


def score(model, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    pairs = test["pairs"]
    pred = _long(pairs, model.predict(pairs))
    err = pred["pred"] - pred["y"]
    base = float(_speeds(train["pairs"]).median())
    m = {"primary": PRIMARY, "mae": float(err.abs().mean()),
         "rmse": float(np.sqrt((err ** 2).mean())),
         "p10_coverage": float((pred["y"] < pred["p10"]).mean()),
         "baseline_median_mae": float((pred["y"] - base).abs().mean()),
         "backtest_sides": int(len(pred)), "backtest_pairs": int(len(pairs)),
         "train_pairs": int(len(train["pairs"]))}
    names = [c for c in ("a_workload", "b_workload", "sharing", "gpu_model") if c in pairs]
    if {"a_workload", "b_workload"} <= set(names):
        # what the extender's gate gets: it asks by workload key, not with the pair's features
        by_name = _long(pairs, model.predict(pairs[names]))
        m["mae_by_name"] = float((by_name["pred"] - by_name["y"]).abs().mean())
    return m, pred


def save(model, path: Path) -> None:
    model.save(path)


def load(path: Path):
    return load_model(NAME, path)


def features(model) -> list[str]:
    return list(model.feature_names_)


def plot(pred: pd.DataFrame, ax) -> str:
    ax.scatter(pred["y"], pred["pred"], s=8, alpha=0.6, label="point")
    ax.scatter(pred["y"], pred["p10"], s=5, alpha=0.4, marker="v", label="p10")
    lo, hi = 0.0, max(1.1, float(pred[["y", "pred"]].max().max()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel("measured speed (co-located / solo)")
    ax.set_ylabel("predicted speed")
    ax.set_title("interference: predicted vs measured speed (backtest episodes)", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    below = float((pred["y"] < pred["p10"]).mean())
    return (f"{len(pred)} episodes: MAE {float((pred['pred'] - pred['y']).abs().mean()):.3g}; "
            f"the measured speed falls below the pessimistic p10 in {below:.0%} of them "
            "(10 % nominal).")
