"""Straggler signal from per-worker step (mini-batch) times of a data-parallel job.

In synchronous data parallelism every step waits for the slowest worker, so a worker whose
step time is persistently above its peers' costs the whole job. Per step we take each
worker's time relative to the median over workers (robust to the job speeding up or slowing
down as a whole), smooth that ratio over a window of steps (a single slow step is noise, a
straggler is persistent), and flag a step of a worker when its smoothed ratio exceeds
`1 + min_slowdown` times the workers' median; a worker is a straggler when at least
`min_share` of its steps (with a full window) are flagged.
"""
from __future__ import annotations

import pandas as pd


def relative_step_times(df: pd.DataFrame, step: str = "time", worker: str = "worker",
                        value: str = "batch_time_norm") -> pd.DataFrame:
    """Wide table steps x workers of time / median over workers at that step."""
    if len({step, worker, value}) < 3:  # pandas' own error ("Grouper ... not 1-dimensional")
        raise ValueError(f"step, worker and value must be three columns, not {step!r}, "
                         f"{worker!r}, {value!r}")
    wide = df.pivot_table(index=step, columns=worker, values=value, aggfunc="mean").sort_index()
    return wide.div(wide.median(axis=1), axis=0)


def flag_stragglers(df: pd.DataFrame, window: int = 20, min_slowdown: float = 0.05,
                    min_share: float = 0.2, **cols) -> pd.DataFrame:
    """Per worker: median relative time, share of steps flagged, and the straggler verdict
    (flagged in at least `min_share` of the steps with a full window)."""
    rel = relative_step_times(df, **cols)
    smooth = rel.rolling(window, min_periods=window).median()
    med = smooth.median(axis=1)
    thr = med * (1 + min_slowdown)
    hot = smooth.gt(thr, axis=0) & smooth.notna()
    valid = smooth.notna().sum()
    share = hot.sum() / valid.clip(lower=1)
    out = pd.DataFrame({"worker": rel.columns, "median_rel_time": rel.median().to_numpy(),
                        "flagged_share": share.to_numpy(),
                        "first_flagged_step": [hot.index[hot[c].to_numpy()].min()
                                               if hot[c].any() else None for c in rel.columns]})
    out["straggler"] = out["flagged_share"] >= min_share
    return out.reset_index(drop=True)
