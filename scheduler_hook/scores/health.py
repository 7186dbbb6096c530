"""GPU health: ECC, XID and throttling of the GPUs that could take the pod. A node whose only
room is on drained or failed GPUs is a hard (unresolvable) violation."""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant

SBE_PENALTY, THROTTLE_PENALTY = 0.4, 0.3


class GpuHealth:
    name = "health"

    def score(self, ctx: Context) -> ComponentResult:
        if ctx.pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        s, r = ctx.state, ctx.rows
        sbe, thr = s.ecc_sbe[r] > 0, s.throttle[r] > 0
        h = np.where(ctx.usable, 1.0 - SBE_PENALTY * sbe - THROTTLE_PENALTY * thr, 0.0)
        cand = ctx.fits & ctx.usable
        n_cand = cand.sum(axis=1)
        with np.errstate(invalid="ignore"):
            mean_h = np.where(n_cand > 0, (h * cand).sum(axis=1) / np.maximum(n_cand, 1), 0.0)
        value = np.where(ctx.feasible, mean_h, 0.0)
        room_any = ctx.fits.sum(axis=1) >= ctx.pod.gpus
        violation = room_any & ~ctx.feasible
        n_bad = (ctx.fits & ~ctx.usable).sum(axis=1)
        n_sbe, n_thr = (cand & sbe).sum(axis=1), (cand & thr).sum(axis=1)

        def reason(j: int) -> str:
            if violation[j]:
                return f"room only on {n_bad[j]} drained/failed GPU(s)"
            return (f"{n_cand[j]} candidate GPU(s): {n_sbe[j]} with ECC SBE, "
                    f"{n_thr[j]} throttling")

        def why(j: int) -> str:
            return f"GPU drained or failed (XID/ECC DBE): room only on {n_bad[j]} unusable GPU(s)"

        return ComponentResult(value, reason, violation, why, unresolvable=True)
