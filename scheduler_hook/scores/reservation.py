"""Reservation: keep empty nodes for forecast high-priority and gang demand. A low-priority pod
scores 0 on an empty node when taking it would leave fewer whole free GPUs on empty nodes than
the demand forecaster reserves, unless it backfills: its predicted run time (the `runtime`
provider, issue 28) ends before the rest of the empty pool runs out at the forecast's rate
(reserved GPUs per forecast horizon), i.e. before the forecast needs the node. Priority
stratification bounds the hold: a pod pending longer than `reservation_max_hold_s` may take
reserved capacity like a high-priority one (issue 28: small jobs waited hours otherwise)."""
from __future__ import annotations

import time

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


def empty_gpus(ctx: Context) -> tuple[np.ndarray, float]:
    """(n,) whole GPUs on each candidate if it is empty (else 0), and the cluster-wide sum."""
    s = ctx.state
    usable = s.usable
    empty = s.live & s.schedulable & (s.gpu_count > 0) & \
        ((s.free_milli >= 1000) | ~s.gpu_exists).all(axis=1)
    per_node = np.where(empty, usable.sum(axis=1), 0)
    return per_node[ctx.rows], float(per_node.sum())


def reservation_breaks(mine: np.ndarray, total: float, reserved: float) -> np.ndarray:
    """(n,) bool: taking the node (``mine`` whole GPUs if empty, else 0) would leave fewer
    than ``reserved`` whole GPUs free on empty nodes (``total`` of them now). The one rule that
    the extender's score and the timeline replay (simulator/timeline) both apply."""
    return (mine > 0) & (total - mine < reserved)


def backfill_window_s(mine: np.ndarray, total: float, reserved: float, horizon_s: float
                      ) -> np.ndarray:
    """(n,) seconds the empty pool left after taking the node (``total - mine`` whole GPUs)
    lasts while forecast demand arrives at ``reserved`` GPUs per ``horizon_s``: a pod that
    ends sooner gives the node back before the forecast needs it. Shared by the extender's
    score and the timeline replay's gate."""
    if reserved <= 0:
        return np.full(np.shape(mine), np.inf)
    return horizon_s * np.maximum(total - mine, 0.0) / reserved


MAX_HOLD_S = 300.0  # default_config.yaml `reservation_max_hold_s` (chosen on dev seeds)


def held_too_long(waited_s: float, max_hold_s: float = MAX_HOLD_S) -> bool:
    """A pod pending longer than ``max_hold_s`` (<= 0: no bound) is no longer held off the
    reservation. The one rule that the extender's score and the timeline replay both apply."""
    return max_hold_s > 0 and waited_s > max_hold_s


def waited_s(ctx: Context) -> float:
    """How long the pod has been pending (s): the replay says it, the extender reads the
    pod's age. Shared with the drain component."""
    w = getattr(ctx.pod, "waited_s", None)  # the replay says it; the extender has the pod's age
    if w is not None:
        return float(w)
    created = float(getattr(ctx.pod, "created", 0.0) or 0.0)
    return time.time() - created if created > 0 else 0.0


def hold_expired(ctx: Context, key: str, default: float, what: str) -> ComponentResult | None:
    """1 everywhere, with the reason, for a pod pending longer than the hold bound
    ``ctx.cfg[key]`` (held_too_long); None while it is still held off ``what``. Shared by the
    reservation, drain and topology components."""
    waited, hold = waited_s(ctx), float(ctx.cfg.get(key, default))
    if not held_too_long(waited, hold):
        return None
    return constant(ctx, 1.0, f"pending {waited / 60:.0f} min, longer than the "
                    f"{hold / 60:.0f} min a pod is held off {what}")


def predicted_runtime(ctx: Context) -> float | None:
    """The pod's predicted run time (s) from the `runtime` provider; None if unknown."""
    rt = ctx.providers.fresh("runtime")
    v = None if rt is None else rt.runtime_s(ctx.pod)
    return None if v is None or not np.isfinite(v) else float(v)


def not_held(ctx: Context, provider: object, missing: str, what: str
             ) -> ComponentResult | None:
    """1 everywhere, with the reason, for a pod no reservation holds off (no ``provider``,
    a high-priority pod, no GPU asked); None for a low-priority GPU pod. Shared by this
    component and the drain one (`drain.py`)."""
    if provider is None:
        return constant(ctx, 1.0, missing)
    if ctx.pod.priority >= int(ctx.cfg.get("high_priority", 1000)):
        return constant(ctx, 1.0, f"high-priority pod may use {what}")
    if ctx.pod.gpus == 0:
        return constant(ctx, 1.0, "no GPU requested")
    return None


class Reservation:
    name = "reservation"

    def score(self, ctx: Context) -> ComponentResult:
        model = ctx.providers.fresh("demand")
        out = not_held(ctx, model, "no demand forecast: nothing reserved", "reserved capacity")
        if out is not None:
            return out
        out = hold_expired(ctx, "reservation_max_hold_s", MAX_HOLD_S, "reserved capacity")
        if out is not None:
            return out
        reserved = float(model.reserved_whole_gpus())
        mine, total = empty_gpus(ctx)
        breaks = reservation_breaks(mine, total, reserved)
        horizon = float(getattr(model, "horizon_s", lambda: 0.0)())
        run = predicted_runtime(ctx) if horizon > 0 and breaks.any() else None
        window = backfill_window_s(mine, total, reserved, horizon) if run is not None else None
        backfill = breaks & (run <= window) if window is not None else np.zeros_like(breaks)
        value = np.where(breaks & ~backfill, 0.0, 1.0)

        def reason(j: int) -> str:
            if backfill[j]:
                return (f"backfill: predicted run time {run / 60:.0f} min ends before the "
                        f"forecast needs the node ({window[j] / 60:.0f} min)")
            if breaks[j]:
                return (f"empty node: taking it leaves {total - mine[j]:.0f} whole GPUs free "
                        f"on empty nodes, {reserved:.0f} reserved for forecast demand")
            return f"keeps the {reserved:.0f} GPUs reserved for forecast demand"

        return ComponentResult(value, reason)
