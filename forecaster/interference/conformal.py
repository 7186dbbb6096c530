"""The p10's conformal pieces: the margin's width unit, the split-conformal quantile, the bands of
predicted speed that get a margin of their own (Mondrian conformal), and the learned scale of a
normalized (locally adaptive) margin."""
from __future__ import annotations

import math
from typing import NamedTuple

import lightgbm as lgb
import numpy as np

#: Bands of predicted speed with a margin of their own (Mondrian conformal), once a band has
#: MIN_BAND_SCORES calibration scores; the pooled margin otherwise.
BANDS = np.array([0.5, 0.85])
MIN_BAND_SCORES = 20
#: Calibration rows a learned scale needs (fewer: the band margins serve).
MIN_SCALE_ROWS = 120
#: Floor of the learned scale: a row it calls certain still gets a margin.
SCALE_FLOOR = 0.02
#: Held-out scores a stratum (sharing mode) needs for a q of its own (fewer: the pooled q).
MIN_STRATUM_SCORES = 100
_SCALE_ROUNDS = 100


def margin_scale(point: np.ndarray) -> np.ndarray:
    """Width unit of the constant p10 margin (rows without a structured part). Constant: on
    unseen workloads the error is mostly a per-workload bias that does not shrink as the
    predicted speed nears 1 (tried on the synthetic solo table before the speed cap: a score in
    units of 0.02 + predicted slowdown left 41% of held-out true speeds under the bound, the
    constant one 31%)."""
    return np.ones_like(point)


def conformal(scores: np.ndarray, alpha: float) -> float:
    """The (1 - alpha) split-conformal quantile of `scores` (0 when there are none)."""
    n = len(scores)
    if n == 0:
        return 0.0
    level = min(1.0, math.ceil((n + 1) * (1 - alpha)) / n)
    return float(np.quantile(scores, level, method="higher"))


def band(pred: np.ndarray) -> np.ndarray:
    """Band of each predicted speed: 0 below 0.5, 1 below 0.85, 2 above."""
    return np.searchsorted(BANDS, np.asarray(pred, float), side="right")


class ScaleFit(NamedTuple):
    """A fitted learned scale: the served booster, the pooled q, q per stratum, and each
    calibration row's scale from the half-fit that never saw it (what admission.py holds the
    admitted-unsafe risk to)."""
    scale: lgb.Booster
    q: float
    q_mode: dict[str, float]
    held_scale: np.ndarray


def fit_scale(X: np.ndarray, err: np.ndarray, groups: np.ndarray, alpha: float,
              seed: int = 0, n_threads: int = 1, strata: np.ndarray | None = None
              ) -> ScaleFit | None:
    """Normalized conformal: a small booster learns how far off the point is for rows like
    this one (|held-out error| from the features and the point itself), and the margin is
    q * scale, q the (1 - alpha) conformal quantile of error / scale. The scale is fit on half
    the calibration groups and scored on the other half (then the reverse), so q comes from
    rows the scale never saw; the served scale is refit on all.

    Why: one margin per band is as wide for a throughput job beside a copy as for a latency-
    bound job beside a hog, and a bound that wide refuses nearly every safe co-location
    (bench/results/interference_h200_*.md). None when there are too few rows or groups.

    `strata` (the sharing mode of each row) gets a q of its own where it has MIN_STRATUM_SCORES
    held-out scores (Mondrian by mode): time-slicing errs less than MPS on unseen workloads,
    and one pooled q left 5 % of time-sliced and 11 % of MPS speeds under the bound on the six
    H200 dev sets."""
    ug = np.unique(groups)
    if len(err) < MIN_SCALE_ROWS or len(ug) < 2:
        return None
    params = {"objective": "regression_l1", "num_leaves": 4, "min_data_in_leaf": 30,
              "learning_rate": 0.05, "max_bin": 63, "verbosity": -1, "seed": seed,
              "num_threads": n_threads, "deterministic": True}
    order = np.random.default_rng(seed).permutation(ug)
    strata = np.full(len(err), "", object) if strata is None else np.asarray(strata, object)
    scores, where = [], []
    held = np.full(len(err), np.nan)
    for k in range(2):
        fit = np.isin(groups, order[k::2])
        if fit.sum() < 30 or (~fit).sum() == 0:
            return None
        b = lgb.train(params, lgb.Dataset(X[fit], np.abs(err[fit])), _SCALE_ROUNDS)
        held[~fit] = np.maximum(b.predict(X[~fit]), SCALE_FLOOR)
        scores.append(err[~fit] / held[~fit])
        where.append(strata[~fit])
    full = lgb.train(params, lgb.Dataset(X, np.abs(err)), _SCALE_ROUNDS)
    sc, st = np.concatenate(scores), np.concatenate(where)
    per = {str(v): conformal(sc[st == v], alpha) for v in np.unique(st)
           if v != "" and (st == v).sum() >= MIN_STRATUM_SCORES}
    return ScaleFit(full, conformal(sc, alpha), per, held)


def scaled_margin(scale: lgb.Booster, q: float | np.ndarray, X: np.ndarray,
                  n_threads: int = 1) -> np.ndarray:
    """q (one, or one per row) * the learned scale of each row (X: features with the point as
    the last column)."""
    return q * np.maximum(scale.predict(X, num_threads=n_threads), SCALE_FLOOR)
