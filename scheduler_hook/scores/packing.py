"""Allocation-based packing (best fit): the fallback when predictions are missing or stale.
Prefers the node whose GPUs are most allocated after placing the pod."""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


class Packing:
    name = "packing"

    def score(self, ctx: Context) -> ComponentResult:
        pod = ctx.pod
        if pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        total = 1000.0 * ctx.state.gpu_count[ctx.rows]
        free = np.where(ctx.usable, ctx.free, 0.0).sum(axis=1)
        after = free - ctx.need * pod.gpus
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(total > 0, 1.0 - after / total, 0.0)
        value = np.where(ctx.feasible, np.clip(share, 0.0, 1.0), 0.0)

        def reason(j: int) -> str:
            if not ctx.feasible[j]:
                return "pod does not fit on healthy GPUs"
            return f"{100 * value[j]:.0f}% of node GPU allocated after placement (best fit)"

        return ComponentResult(value, reason)
