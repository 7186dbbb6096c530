"""Run-time predictions of the replay's jobs: the run-time predictor trained online.

`forecaster.runtime.model.RuntimePredictor` is refit every ``refit_s`` on the jobs that
finished before the refit time (run time = duration; the jobs' pods table has workload =
the job's template key, queue = tenant, GPU request, priority), then asked for every job
arriving in the next period. "Finished" is read as arrival + duration, i.e. as if the job had
not queued: the predictions are made before any policy runs, so one set serves every policy;
a job that queued finishes later than that, so the history is at most its queueing delay
ahead of a causal one. The oracle reads the true durations instead.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.timeline.workload import Jobs


def pods_table(jobs: Jobs, idx: np.ndarray) -> pd.DataFrame:
    if jobs.workload is None:
        raise ValueError("jobs carry no workload keys")
    return pd.DataFrame({
        "workload": jobs.workload[idx].astype(str),
        "queue": np.asarray(jobs.tenants, dtype=object)[jobs.tenant[idx]],
        "gpu_request": jobs.gpu_request[idx], "priority": jobs.priority[idx],
        "created": jobs.arrival[idx], "started": jobs.arrival[idx],
        "finished": jobs.arrival[idx] + jobs.duration[idx]})


def predicted_runtimes(jobs: Jobs, t_start: float, t_end: float, refit_s: float = 86400.0
                       ) -> pd.DataFrame:
    """p10/p50/p90 (s) per job arriving in [t_start, t_end) (NaN elsewhere), each from the
    model fitted at the last refit before its arrival."""
    from forecaster.runtime.model import RuntimePredictor

    out = pd.DataFrame(np.nan, index=np.arange(len(jobs)), columns=["p10", "p50", "p90"])
    t = t_start
    while t < t_end:
        done = np.flatnonzero(jobs.arrival + jobs.duration < t)
        try:
            model = RuntimePredictor().fit(pods_table(jobs, done))
        except ValueError:  # too few finished runs yet: unknown (never lent a reserved node)
            t += refit_s
            continue
        ask = np.flatnonzero((jobs.arrival >= t) & (jobs.arrival < min(t + refit_s, t_end)))
        if len(ask):
            p = model.predict(pods_table(jobs, ask))
            out.loc[ask, ["p10", "p50", "p90"]] = p[["p10", "p50", "p90"]].to_numpy()
        t += refit_s
    return out


def accuracy(jobs: Jobs, pred: pd.DataFrame, mask: np.ndarray) -> dict:
    """MAE of p50 (min) and [p10, p90] / below-p90 coverage over the jobs in ``mask``."""
    y = jobs.duration[mask]
    p = pred.loc[np.flatnonzero(mask)]
    if not len(y):
        return {}
    # relative tolerance: many run times sit on the clip floor (an atom), and a quantile read
    # back through exp(log(x)) lands a few ulps off it; that is not a miss
    lo, hi = p["p10"].to_numpy() * (1 - 1e-9), p["p90"].to_numpy() * (1 + 1e-9)
    return {"mae_min": round(float(np.mean(np.abs(p["p50"].to_numpy() - y))) / 60, 1),
            "coverage": round(float(((y >= lo) & (y <= hi)).mean()), 3),
            "below_p90": round(float((y <= hi).mean()), 3), "n": int(len(y))}
