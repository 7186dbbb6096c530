"""Runtime kind: run time of pending pods from the pods table -> RuntimePredictor (issue 28).

Split by time: fitted on pods that *finished* before the cutoff (what was known then); the
backtest asks about every pod created at or after it that has a run time. Baselines from the
same pods: the workload's last finished run (queue median for a new workload) and the queue's
median run time. `as_baseline` serves the winning baseline as p50 (model of record).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from artifacts.models import load_model
from training.kinds import SkipKind

NAME = "runtime"
PRIMARY = "mae"
MIN_PODS = 10


def prepare(history, cfg) -> dict:
    pods = history.pods
    if pods is None or pods.empty or not {"started", "finished"} <= set(pods.columns):
        raise SkipKind("no pods table with start and finish times")
    return {"pods": pods.dropna(subset=["started", "finished"])}


def split(data: dict, cutoff: pd.Timestamp) -> tuple[dict, dict]:
    p = data["pods"]
    train, test = p[p["finished"] < cutoff], p[p["created"] >= cutoff]
    if len(train) < MIN_PODS or test.empty:
        raise SkipKind(f"{len(train)} pods finished before / {len(test)} created after "
                       f"{cutoff}: too few to train and test run times")
    return {"pods": train}, {"pods": test}


def fit(train: dict, cfg):
    from forecaster.runtime.model import RuntimePredictor

    try:
        # the point calibration: chosen on both traces' dev splits (bench/results/runtime.md)
        return RuntimePredictor(calibrate_p50=True, min_count="auto").fit(train["pods"])
    except ValueError as exc:
        raise SkipKind(f"runtime: {exc}") from None


def score(model, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    from forecaster.runtime.model import runtime_table

    t = runtime_table(test["pods"])
    pred = pd.concat([t[["workload", "queue", "runtime_s"]].rename(
        columns={"runtime_s": "y_true"}), model.predict(t)], axis=1)
    y = pred["y_true"].to_numpy(float)
    mae = lambda c: float(np.mean(np.abs(pred[c].to_numpy(float) - y)))  # noqa: E731
    m = {"primary": PRIMARY, "mae": mae("p50"), "baseline_last_mae": mae("last"),
         "baseline_queue_median_mae": mae("queue_median"),
         "p10_p90_coverage": float(((y >= pred["p10"]) & (y <= pred["p90"])).mean()),
         "backtest_pods": int(len(pred)), "train_pods": int(model.n_train_)}
    return m, pred


def as_baseline(model, name: str):
    model.served_ = name
    return model


def save(model, path: Path) -> None:
    model.save(path)


def load(path: Path):
    return load_model(NAME, path)


def features(model) -> list[str]:
    return list(model.features_)


def plot(pred: pd.DataFrame, ax) -> str:
    y, p = pred["y_true"].to_numpy(float) / 60, pred["p50"].to_numpy(float) / 60
    ax.scatter(y, p, s=6, alpha=0.5)
    top = float(max(y.max(), p.max(), 1.0))
    ax.plot([0.1, top], [0.1, top], color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("actual run time (min)")
    ax.set_ylabel("predicted p50 (min)")
    ax.set_title("run time of backtest pods, predicted before start", fontsize=9)
    inside = float(((pred["y_true"] >= pred["p10"]) & (pred["y_true"] <= pred["p90"])).mean())
    return (f"{len(pred)} pods: p50 MAE {np.mean(np.abs(p - y)):.1f} min; inside [p10, p90] "
            f"at {inside:.0%}.")
