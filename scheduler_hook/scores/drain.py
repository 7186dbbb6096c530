"""Targeted draining (issue 28, third try): EASY backfilling with learned run times.

The fence (`reservation.py`) keeps a number of empty nodes whatever is pending; issue 28's
tries showed it either holds nodes long enough to help big jobs and starves small ones, or
gives them back (hold bound) before the big jobs come. Here the reservation is made of
*specific* nodes, the ones predicted to drain first:

- each pending big job (8-GPU pods, gangs; in queue order) gets the nodes whose residents'
  predicted completion (start + predicted run time) frees its shape earliest; its *shadow
  time* is when the last of them is predicted free (conservative backfilling: every pending
  big job, so later ones' shadows lie far ahead and barely restrict anything);
- the demand forecast adds ``forecast_gpus / node_gpus`` pre-drained nodes (the next ones to
  drain): the forecast's demand arrives over its horizon, so the i-th of k pre-drained nodes
  is needed ``horizon * i / k`` from now (the same rate rule as `backfill_window_s`);
- a small pod may go on a drained node only when its predicted end is before the node's
  shadow time; every other node stays open to it. A pod whose run outlives the shadow is not
  preempted (the caller counts it).

- a later big job may not take a node drained for a job ahead of it unless it is predicted
  to end by the node's shadow time (EASY: a stream of 1-pod jobs would otherwise take a
  gang's nodes one at a time).

Pure functions on arrays, so that the extender's component (`Drain`) and the timeline replay
(`simulator/timeline/drain.py`) apply the same rule. The replay hands the component its plan;
the extender builds one from its watch (`scheduler_hook/drain_plan.py`).
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context
from scheduler_hook.scores.reservation import hold_expired, not_held, predicted_runtime

OVERDUE_FLOOR_S = 600.0
MAX_HOLD_S = 1800.0  # default_config.yaml `drain_max_hold_s` (the third try's dev choice)


def effective_end(end: np.ndarray, start: np.ndarray, now: float) -> np.ndarray:
    """Predicted end of each resident at ``now``. One that already outlived its prediction is
    expected to run as long again as it has run (at least 10 min): heavy-tailed run times
    make an overdue run a long one, and reading it as ending now would target a node that
    will not drain."""
    end, start = np.asarray(end, float), np.asarray(start, float)
    overdue = now + np.maximum(now - start, OVERDUE_FLOOR_S)
    return np.where(end > now, end, np.where(np.isfinite(start), overdue, end))


def drain_times(slot_free_at: np.ndarray, need: int, now: float) -> np.ndarray:
    """(n,) when each node has ``need`` whole GPUs free: the ``need``-th earliest of its GPUs'
    predicted free times (``slot_free_at`` (n, G): <= now for a free GPU, +inf for a GPU the
    node does not have). +inf where the node has fewer than ``need`` GPUs."""
    t = np.maximum(np.asarray(slot_free_at, float), now)
    if need <= 0:
        return np.full(len(t), now)
    if need > t.shape[1]:
        return np.full(len(t), np.inf)
    return np.partition(t, need - 1, axis=1)[:, need - 1]


def plan_shadows(drain_t: np.ndarray, pending_pods: list[int], forecast_nodes: float,
                 horizon_s: float, now: float) -> tuple[np.ndarray, np.ndarray]:
    """Shadow time per node (+inf: not drained) and the index of the pending job each node is
    drained for (-1: none; -2: pre-drained for the forecast).

    ``drain_t``: when each candidate node is predicted to hold the big shape (``drain_times``);
    ``pending_pods``: pods of each pending big job, in queue order; ``forecast_nodes``: nodes'
    worth of big demand forecast to arrive within ``horizon_s``."""
    n = len(drain_t)
    shadow = np.full(n, np.inf)
    owner = np.full(n, -1, np.int64)
    order = np.argsort(drain_t, kind="stable")
    order = order[np.isfinite(drain_t[order])]
    i = 0
    for job, pods in enumerate(pending_pods):
        if i + pods > len(order):
            break  # not enough nodes for it: later (smaller) jobs would jump it, stop here
        take = order[i:i + pods]
        shadow[take] = drain_t[take].max()
        owner[take] = job
        i += pods
    k = int(round(max(forecast_nodes, 0.0)))
    take = order[i:i + k]
    if len(take):
        need_at = now + horizon_s * np.arange(len(take)) / max(k, 1)
        shadow[take] = np.maximum(drain_t[take], need_at)
        owner[take] = -2
    return shadow, owner


def domain_ready(drain_t: np.ndarray, codes: np.ndarray, pods: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per domain, when ``pods`` of its nodes are predicted to hold the big shape: the
    ``pods``-th earliest ``drain_t`` of its nodes (+inf: too few). ``codes`` (n,) the domain
    per node (-1: none). Also returns the nodes in (domain, drain time) order and each
    domain's first position in it, to pick the nodes."""
    t = np.where(np.asarray(codes) >= 0, np.asarray(drain_t, float), np.inf)
    codes = np.maximum(np.asarray(codes), 0)
    k = int(codes.max()) + 1 if len(codes) else 0
    order = np.lexsort((t, codes))
    ts, cs = t[order], codes[order]
    count = np.bincount(cs[np.isfinite(ts)], minlength=k)
    first = np.searchsorted(cs, np.arange(k))
    at = np.full(k, np.inf)
    ok = np.flatnonzero(count >= pods)
    at[ok] = ts[first[ok] + pods - 1]
    return at, order, first


def plan_domain_shadows(drain_t: np.ndarray, codes: np.ndarray, pending_pods: list[int],
                        keep: list[int] | None = None
                        ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``plan_shadows`` per domain (issue 31): each pending big job, in queue order, drains
    the nodes of *one* domain (rack) for all its pods: the domain whose ``pods``-th earliest
    drain time among nodes not drained for a job ahead is earliest (a gang spread over
    domains runs slower, so draining nodes anywhere would not serve it). ``codes`` (n,) the
    domain per node (-1: none); ``keep`` per job the domain it drained last (-1: none), kept
    while it can still hold the job, so that the drained rack does not move each pass.

    Returns (shadow per node, owner job index per node (-1: none), domain chosen per planned
    job). Stops at the first job no domain can hold (as ``plan_shadows``: later jobs would
    otherwise jump it)."""
    t = np.where(np.asarray(codes) >= 0, np.asarray(drain_t, float), np.inf)
    shadow = np.full(len(t), np.inf)
    owner = np.full(len(t), -1, np.int64)
    chosen: list[int] = []
    for job, pods in enumerate(pending_pods):
        at, order, first = domain_ready(t, codes, pods)
        d = keep[job] if keep is not None and job < len(keep) else -1
        if not (0 <= d < len(at) and np.isfinite(at[d])):
            d = int(np.argmin(at)) if len(at) else -1
        if d < 0 or not np.isfinite(at[d]):
            break
        take = order[first[d]:first[d] + pods]
        shadow[take], owner[take] = at[d], job
        t[take] = np.inf
        chosen.append(d)
    return shadow, owner, chosen


def may_backfill(shadow: np.ndarray, now: float, runtime_s: float | None) -> np.ndarray:
    """(n,) bool: a pod predicted to run ``runtime_s`` (None: unknown) may go on each node:
    the node is not drained, or the pod is predicted to end by the node's shadow time."""
    if runtime_s is None or not np.isfinite(runtime_s):
        return ~np.isfinite(shadow)
    return now + float(runtime_s) <= shadow


def later_job_off(ahead_of: np.ndarray, mine: int, now: float, runtime_s: float | None,
                  shadow: np.ndarray) -> np.ndarray:
    """(n,) bool: nodes a big job of queue rank ``mine`` may not take: drained for a job
    ahead of it (rank ``ahead_of`` < ``mine``), unless it is predicted to end by their shadow
    (unknown run time: it is not)."""
    run = float(runtime_s) if runtime_s is not None and np.isfinite(runtime_s) else np.inf
    return (np.asarray(ahead_of) < mine) & (now + run > np.asarray(shadow, float))


class Drain:
    """The extender's form: a `drain` provider gives the plan's shadow time per node row
    (``shadow_s(rows)``, absolute seconds, +inf where not drained) and ``now()``; the
    `runtime` provider the pod's predicted run time. Low-priority GPU pods score 0 on drained
    nodes they would not leave in time; a pod pending longer than ``drain_max_hold_s`` is not
    held. In the extender (no `drain` provider) the plan is built from the cluster state, and
    big pods are held off nodes drained for a job ahead of them (``later_job_off``); the
    replay asks the component about small pods only and applies that rule itself."""

    name = "drain"

    def __init__(self) -> None:
        self._own = None  # the extender's plan, built on first use

    def _plan(self, ctx: Context):
        from scheduler_hook.drain_plan import DrainPlan

        own = self._own
        if own is None or own.state is not ctx.state or own.providers is not ctx.providers:
            own = self._own = DrainPlan(ctx.state, ctx.providers, ctx.cfg)
        return own.refresh()

    def score(self, ctx: Context) -> ComponentResult:
        plan = ctx.providers.fresh("drain")
        build = plan is None and hasattr(ctx, "state")  # the extender: its own plan, below
        # (built only for the pods the plan can hold: not_held needs a non-None stand-in)
        out = not_held(ctx, plan if not build else self, "no drain plan: nothing drained",
                       "drained nodes")
        if out is not None:
            return out
        out = hold_expired(ctx, "drain_max_hold_s", MAX_HOLD_S, "drained nodes")
        if out is not None:
            return out
        plan = self._plan(ctx) if build else plan
        run = predicted_runtime(ctx)
        now = float(plan.now())
        shadow = np.asarray(plan.shadow_s(ctx.rows), float)
        if hasattr(plan, "rank") and _big(ctx):
            off = later_job_off(plan.ahead_of(ctx.rows), plan.rank(ctx.pod), now, run, shadow)
            return ComponentResult(np.where(off, 0.0, 1.0), lambda j: (
                "drained for a big job ahead of this one" if off[j] else
                "open to this big job"))
        ok = may_backfill(shadow, now, run)

        def reason(j: int) -> str:
            if not np.isfinite(shadow[j]):
                return "not drained for a big job"
            left = max(shadow[j] - now, 0.0) / 60  # a plan made a moment ago: not "-0"
            if ok[j]:
                return f"backfill: predicted to end before the big job's start ({left:.0f} min)"
            return f"drained for a big job due in {left:.0f} min: predicted to run longer"

        return ComponentResult(np.where(ok, 1.0, 0.0), reason)


def _big(ctx: Context) -> bool:
    from scheduler_hook.drain_plan import BIG_GPUS, is_big

    return is_big(ctx.pod, int(ctx.cfg.get("drain_big_gpus", BIG_GPUS)))
