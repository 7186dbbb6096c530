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


def online_models(jobs: Jobs, t_start: float, t_end: float, refit_s: float = 86400.0
                  ) -> list[tuple[object, np.ndarray]]:
    """(model, jobs it answers) per refit: the model fitted on the jobs finished before the
    refit time answers those arriving in the next ``refit_s`` (refits with too few finished
    runs are skipped: their jobs stay unknown, never lent a reserved node)."""
    from forecaster.runtime.model import RuntimePredictor

    out = []
    t = t_start
    while t < t_end:
        ask = np.flatnonzero((jobs.arrival >= t) & (jobs.arrival < min(t + refit_s, t_end)))
        done = np.flatnonzero(jobs.arrival + jobs.duration < t)
        t += refit_s
        try:
            model = RuntimePredictor().fit(pods_table(jobs, done))
        except ValueError:
            continue
        if len(ask):
            out.append((model, ask))
    return out


def predicted_runtimes(jobs: Jobs, t_start: float, t_end: float, refit_s: float = 86400.0,
                       models: list | None = None) -> pd.DataFrame:
    """p10/p50/p90 (s) per job arriving in [t_start, t_end) (NaN elsewhere), each from the
    model fitted at the last refit before its arrival (``models``: `online_models`' output,
    to reuse)."""
    out = pd.DataFrame(np.nan, index=np.arange(len(jobs)), columns=["p10", "p50", "p90"])
    for model, ask in models if models is not None else online_models(jobs, t_start, t_end,
                                                                       refit_s):
        p = model.predict(pods_table(jobs, ask))
        out.loc[ask, ["p10", "p50", "p90"]] = p[["p10", "p50", "p90"]].to_numpy()
    return out


class RemainingRuntime:
    """Residents' predicted ends given how long they have run (the sixth look): quantile ``q``
    of the remaining run time of each job from the online model that predicted it
    (`RuntimePredictor.predict_remaining`, every refit's histories merged so that one call
    answers residents of several days). Fitted from `online_models`' output."""

    def __init__(self, q: float) -> None:
        self.q = q

    def fit(self, jobs: Jobs, models: list[tuple[object, np.ndarray]],
            floor_s: np.ndarray | None = None) -> "RemainingRuntime":
        """``floor_s``: per job, a run time its predicted end is never before (start +
        floor_s: the fixed prediction, so that only residents past it read their age)."""
        from forecaster.runtime.model import merge_runs

        self.floor_ = None if floor_s is None else np.asarray(floor_s, float)

        self.runs_, off = merge_runs([m.runs_ for m, _ in models]) if models else ([], [])
        n_lv = len(self.runs_)
        self.codes_ = np.full((len(jobs), n_lv), -1, np.int64)
        self.min_count_ = models[0][0].min_count_ if models else 0
        for i, (m, ask) in enumerate(models):
            c = m.key_codes(pods_table(jobs, ask))
            self.codes_[ask] = np.where(c >= 0, c + np.array([off[lv][i] for lv in
                                                              range(n_lv)]), -1)
        return self

    def end(self, j: np.ndarray, start: np.ndarray, now: float
            ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted end (absolute s; NaN: unknown) of jobs ``j`` started at ``start``, asked
        at ``now``, and until when (absolute s) that answer holds."""
        from forecaster.runtime.model import remaining

        if not self.runs_:
            return np.full(len(j), np.nan), np.full(len(j), np.inf)
        start = np.asarray(start, float)
        age = np.maximum(now - start, 0.0)
        rem, nxt = remaining(self.runs_, self.codes_[j], age, self.q, self.min_count_,
                             with_next=True)
        end = now + rem
        if self.floor_ is not None:  # NaN floor (unknown) leaves the conditional end
            end = np.fmax(end, start + self.floor_[j])
        return end, start + nxt


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
