"""The p10's conformal pieces: the margin's width unit, the split-conformal quantile, and the
bands of predicted speed that get a margin of their own (Mondrian conformal)."""
from __future__ import annotations

import math

import numpy as np

#: Bands of predicted speed with a margin of their own (Mondrian conformal), once a band has
#: MIN_BAND_SCORES calibration scores; the pooled margin otherwise.
BANDS = np.array([0.5, 0.85])
MIN_BAND_SCORES = 20


def margin_scale(point: np.ndarray) -> np.ndarray:
    """Width unit of the p10 margin. Constant: on unseen workloads the error is mostly a
    per-workload bias that does not shrink as the predicted speed nears 1 (tried on the
    synthetic solo table before the speed cap: a score in units of 0.02 + predicted slowdown
    left 41% of held-out true speeds under the bound, the constant one 31%)."""
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
