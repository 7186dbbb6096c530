"""The usage forecaster's p10/p90: split-conformal quantiles of validation residuals."""
from __future__ import annotations

import numpy as np


def conformal_quantiles(y: np.ndarray, preds: dict[str, np.ndarray], scale: np.ndarray,
                        flat: np.ndarray, coverage: float) -> dict:
    """Split-conformal quantiles of each predictor's own scale-free validation residuals,
    apart for origins whose last horizon was flat (an idle pod: its future is mostly the
    same flat line) and for moving ones, so the busy pods' intervals are not narrowed by
    the many exact zeros of idle ones (Mondrian conformal; pooled if a group is small).

    Returns {predictor: {"flat" | "moving": [low, high]}} in units of `scale`."""
    a = (1 - coverage) / 2
    out = {}
    for c, p in preds.items():
        z = (y - p) / scale
        pooled = [float(np.quantile(z, a)), float(np.quantile(z, 1 - a))]
        out[c] = {g: ([float(np.quantile(z[m], a)), float(np.quantile(z[m], 1 - a))]
                      if m.sum() >= 30 else pooled)
                  for g, m in (("flat", flat), ("moving", ~flat))}
    return out
