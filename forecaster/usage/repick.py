"""Per-origin re-pick of the served usage predictor from recently ended horizons.

Load regimes change within hours (a serving fleet goes quiet) and the validation tail of the
training window cannot see the next one; the errors of the horizons that have *ended* by an
origin can. At each origin the served predictor is the best baseline over the last `window`
such horizons, or the model if it beat that baseline by `min_gain` (the retraining gate's rule,
per origin: a baseline is the default, the model earns its place). The model's errors on
origins up to its training end are in-sample (its own training targets), so they are not
counted. Origins without enough history keep the fit-time choice.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

BASELINES = ("last_value", "mean_last_h", "ses")


def recent_pick(ids: np.ndarray, origins: np.ndarray, y: np.ndarray, cand: dict[str, np.ndarray],
                static: np.ndarray, horizon: int, window: int, scope: str = "series",
                min_gain: float = 0.03, train_end: pd.Timestamp | None = None) -> np.ndarray:
    """The served predictor's name per row. Rows are per series in time order on regular bins
    (the design's layout); `y` is each origin's horizon mean (NaN where it runs past the data);
    `cand` maps "model" and the BASELINES to their forecasts on the same rows. scope "series":
    each series' own errors; "fleet": the mean over every series at each origin (a load regime
    is fleet-wide, and one pod's rare steps make its own window noisy)."""
    H, W = horizon, window
    key = pd.Series(ids)
    t = pd.DatetimeIndex(pd.to_datetime(origins, utc=True))
    rec = {}
    for c, p in cand.items():
        e = pd.Series(np.abs(y - p))  # NaN: the horizon runs past the data
        if c == "model" and train_end is not None:
            e[np.asarray(t <= train_end)] = np.nan  # in-sample: not evidence
        if scope == "fleet":
            per_t = e.groupby(t).mean()
            step = pd.Series(t).groupby(key.to_numpy()).diff()  # the bin width, within series
            step = step[step > pd.Timedelta(0)].min()
            grid = pd.date_range(per_t.index.min(), per_t.index.max(), freq=step)
            roll = per_t.reindex(grid).shift(H).rolling(W, min_periods=max(1, W // 2))
            rec[c] = roll.mean().reindex(t).to_numpy()
            continue
        past = e.groupby(key).shift(H)  # NaN: the horizon had not ended
        rec[c] = past.groupby(key).rolling(W, min_periods=max(1, W // 2)).mean(
        ).reset_index(level=0, drop=True).sort_index().to_numpy()
    bl = np.column_stack([rec[b] for b in BASELINES])
    ok = np.isfinite(bl).all(axis=1) & np.isfinite(rec["model"])
    best_bl = np.asarray(BASELINES, dtype=object)[np.argmin(np.where(ok[:, None], bl, 0), axis=1)]
    model = rec["model"] < (1 - min_gain) * np.min(np.where(ok[:, None], bl, np.inf), axis=1)
    return np.where(ok, np.where(model, "model", best_bl), static)
