"""Per-origin re-pick of the served predictor (usage and demand forecasters) from recently
ended horizons.

Load regimes change within hours (a serving fleet goes quiet) and the validation tail of the
training window cannot see the next one; the errors of the horizons that have *ended* by an
origin can. At each origin the served predictor is the best baseline over the last `window`
such horizons, or the model if it beat that baseline by `min_gain` (the retraining gate's rule,
per origin: a baseline is the default, the model earns its place). The model's errors on
origins up to its training end are in-sample (its own training targets), so they are not
counted. Origins without enough history keep the fit-time choice.

Evidence (`z` > 0): the window's errors overlap (each bin's error is part of H consecutive
origins' horizons), so a window of W bins holds about W / H independent errors, ~2 at W = 60,
H = 30. With `z` > 0 the re-pick leaves the fit-time choice only where the winner's mean error
is below it by more than `z` standard errors of the paired difference, the standard error
taken with W / H effective samples; otherwise the validated choice stays.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


class _Roller:
    """Rolling statistics over the last W bins of ended horizons, per row."""

    def __init__(self, ids: np.ndarray, t: pd.DatetimeIndex, H: int, W: int, scope: str):
        self.key, self.t, self.H, self.W, self.scope = pd.Series(ids), t, H, W, scope
        if scope == "fleet":
            step = pd.Series(t).groupby(self.key.to_numpy()).diff()  # bin width, within series
            self.step = step[step > pd.Timedelta(0)].min()

    def __call__(self, e: pd.Series, stat: str = "mean") -> np.ndarray:
        H, W, minp = self.H, self.W, max(1, self.W // 2)
        if self.scope == "fleet":
            per_t = e.groupby(self.t).mean()
            grid = pd.date_range(per_t.index.min(), per_t.index.max(), freq=self.step)
            roll = per_t.reindex(grid).shift(H).rolling(W, min_periods=minp)
            return getattr(roll, stat)().reindex(self.t).to_numpy()
        past = e.groupby(self.key).shift(H)  # NaN: the horizon had not ended
        roll = past.groupby(self.key).rolling(W, min_periods=minp)
        return getattr(roll, stat)().reset_index(level=0, drop=True).sort_index().to_numpy()


def recent_pick(ids: np.ndarray, origins: np.ndarray, y: np.ndarray, cand: dict[str, np.ndarray],
                static: np.ndarray, horizon: int, window: int, scope: str = "series",
                min_gain: float = 0.03, train_end: pd.Timestamp | None = None,
                z: float = 0.0) -> np.ndarray:
    """The served predictor's name per row. Rows are per series in time order on regular bins
    (the design's layout); `y` is each origin's horizon mean (NaN where it runs past the data);
    `cand` maps "model" and the baselines (any names, in their tie-break order) to their
    forecasts on the same rows. scope "series": each series' own errors; "fleet": the mean over
    every series at each origin (a load regime is fleet-wide, and one pod's rare steps make its
    own window noisy). `z`: see the module."""
    t = pd.DatetimeIndex(pd.to_datetime(origins, utc=True))
    roll = _Roller(ids, t, horizon, window, scope)
    err = {}
    for c, p in cand.items():
        e = pd.Series(np.abs(y - p))  # NaN: the horizon runs past the data
        if c == "model" and train_end is not None:
            e[np.asarray(t <= train_end)] = np.nan  # in-sample: not evidence
        err[c] = e
    rec = {c: roll(e) for c, e in err.items()}
    names = [c for c in cand if c != "model"]  # the baselines, in their tie-break order
    # a baseline with no recent error (a seasonal naive before its first season) cannot win
    bl = np.column_stack([rec[b] for b in names])
    bl = np.where(np.isfinite(bl), bl, np.inf)
    ok = np.isfinite(bl).any(axis=1) & np.isfinite(rec["model"])
    best_bl = np.asarray(names, dtype=object)[np.argmin(bl, axis=1)]
    model = rec["model"] < (1 - min_gain) * np.min(bl, axis=1)
    pick = np.where(ok, np.where(model, "model", best_bl), static)
    if z > 0:
        n_eff = max(1.0, window / horizon)
        for a in set(pick[pick != static]):
            for s in set(static[(pick == a)]) & set(cand):
                rows = (pick == a) & (static == s)
                d = err[s] - err[a]  # > 0 where the winner did better than the validated choice
                gap, sd = roll(d), roll(d, "std")
                strong = np.isfinite(gap) & (gap > z * np.nan_to_num(sd, nan=np.inf)
                                             / np.sqrt(n_eff))
                pick = np.where(rows & ~strong, static, pick)
    return pick
