"""p10/p90 of the usage forecaster (and, with `recent_intervals`, the demand forecaster):
split-conformal bounds, calibrated so that the *interval* [p10, p90] holds `coverage` of the
targets: from the validation tail of the training window (`conformal_quantiles`), or at each
origin from the horizons that ended in a recent window (`recent_bounds`)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def _bounds(z: np.ndarray, coverage: float) -> list[float]:
    """The lower bound at the central level, the upper level raised or lowered by what the
    lower bound really misses.

    An idle pod's future is mostly exactly its last value, 0 (a flat memory line: exactly its
    level): the lower quantile then sits on that atom and misses nothing below it (a tie is
    covered, as the score counts it), so central quantiles (10 % missed below, 10 % above)
    cover ~90 %, not 80 %. The interval is what is scored, so the upper level takes the whole
    remaining miss: coverage + the realised lower miss (0.9 where the lower side misses its
    10 %, 0.8 where it misses nothing)."""
    lo = float(np.quantile(z, (1 - coverage) / 2))
    hi = float(np.quantile(z, min(1.0, coverage + float(np.mean(z < lo)))))
    return [lo, max(hi, lo)]


def conformal_quantiles(y: np.ndarray, preds: dict[str, np.ndarray], scale: np.ndarray,
                        flat: np.ndarray, coverage: float) -> dict:
    """Split-conformal bounds of each predictor's own scale-free validation residuals,
    apart for origins whose last horizon was flat (an idle pod: its future is mostly the
    same flat line) and for moving ones, so the busy pods' intervals are not narrowed by
    the many exact zeros of idle ones (Mondrian conformal; pooled if a group is small).

    Returns {predictor: {"flat" | "moving": [low, high]}} in units of `scale`."""
    out = {}
    for c, p in preds.items():
        z = (y - p) / scale
        pooled = _bounds(z, coverage)
        out[c] = {g: (_bounds(z[m], coverage)
                      if m.sum() >= 30 else pooled)
                  for g, m in (("flat", flat), ("moving", ~flat))}
    return out


def recent_bounds(origins: np.ndarray, y: np.ndarray, p: np.ndarray, scale: np.ndarray,
                  flat: np.ndarray, usable: np.ndarray, target: np.ndarray, horizon: int,
                  window: int, coverage: float,
                  min_rows: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Sliding-window conformal: at each target origin t the bounds are `_bounds` of the
    fleet's served residuals on origins in [t - H - W + 1, t - H] (horizons that have ended
    by t), apart for flat and moving origins. A serving fleet's regime drifts within a day
    (it goes quiet at night), so residuals of a validation tail hours old stop being
    exchangeable with today's; the last W bins' are the nearest to it (windowed conformal,
    Barber et al. 2023). `usable`: rows whose residual may count (the horizon ended inside
    the data, and the served predictor did not train on that target). Needs W / 2 bins of
    usable origins and `min_rows` rows of the group, else NaN (the caller keeps the fit-time
    bounds). Returns (low, high) per target row, in units of `scale`."""
    t = pd.DatetimeIndex(pd.to_datetime(origins, utc=True)).as_unit("ns").asi8
    diffs = np.diff(np.unique(t))
    step = int(diffs.min()) if len(diffs) else 1
    k = (t - t.min()) // step
    z = (y - p) / scale
    lo, hi = np.full(len(y), np.nan), np.full(len(y), np.nan)
    order = np.argsort(k[usable], kind="stable")
    ku, zu = k[usable][order], z[usable][order]
    fu = flat[usable][order]
    tk = np.flatnonzero(target)
    tk = tk[np.argsort(k[tk], kind="stable")]  # target rows grouped by origin
    kts, first = np.unique(k[tk], return_index=True)
    for kt, here in zip(kts, np.split(tk, first[1:])):
        a, b = np.searchsorted(ku, [kt - horizon - window + 1, kt - horizon + 1])
        if len(np.unique(ku[a:b])) < max(1, window // 2):
            continue
        for g in (True, False):
            zg = zu[a:b][fu[a:b] == g]
            rows = here[flat[here] == g]
            if len(zg) < min_rows or not len(rows):
                continue
            lo[rows], hi[rows] = _bounds(zg, coverage)
    return lo, hi
