"""Reservation: keep empty nodes for forecast high-priority and gang demand. A low-priority pod
scores 0 on an empty node when taking it would leave fewer whole free GPUs on empty nodes than
the demand forecaster reserves."""
from __future__ import annotations

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


class Reservation:
    name = "reservation"

    def score(self, ctx: Context) -> ComponentResult:
        model = ctx.providers.fresh("demand")
        if model is None:
            return constant(ctx, 1.0, "no demand forecast: nothing reserved")
        if ctx.pod.priority >= int(ctx.cfg.get("high_priority", 1000)):
            return constant(ctx, 1.0, "high-priority pod may use reserved capacity")
        if ctx.pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        reserved = float(model.reserved_whole_gpus())
        mine, total = empty_gpus(ctx)
        breaks = reservation_breaks(mine, total, reserved)
        value = np.where(breaks, 0.0, 1.0)

        def reason(j: int) -> str:
            if breaks[j]:
                return (f"empty node: taking it leaves {total - mine[j]:.0f} whole GPUs free "
                        f"on empty nodes, {reserved:.0f} reserved for forecast demand")
            return f"keeps the {reserved:.0f} GPUs reserved for forecast demand"

        return ComponentResult(value, reason)
