"""GPU health: ECC, XID and throttling of the GPUs that could take the pod. A node whose only
room is on drained or failed GPUs is a hard (unresolvable) violation."""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant

# Per-GPU health (1 - 0.4 if volatile ECC SBEs - 0.3 if HW throttling, 0 if drained/failed) is
# derived in ClusterState on each node event (state.SBE_PENALTY, state.THROTTLE_PENALTY).


class GpuHealth:
    name = "health"

    def score(self, ctx: Context) -> ComponentResult:
        if ctx.pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        s, r = ctx.state, ctx.rows
        h = s.gpu_health[r]  # 0 on unusable slots, penalised for SBEs and throttling
        cand = ctx.fits & ctx.usable
        n_cand = cand.sum(axis=1)
        mean_h = np.where(n_cand > 0, (h * cand).sum(axis=1) / np.maximum(n_cand, 1), 0.0)
        value = np.where(ctx.feasible, mean_h, 0.0)
        room_any = ctx.fits.sum(axis=1) >= ctx.pod.gpus
        violation = room_any & ~ctx.feasible

        def counts(j: int) -> tuple[int, int, int]:
            row = int(r[j])
            c = cand[j]
            return (int((ctx.fits[j] & ~ctx.usable[j]).sum()),
                    int((c & (s.ecc_sbe[row] > 0)).sum()), int((c & (s.throttle[row] > 0)).sum()))

        def reason(j: int) -> str:
            n_bad, n_sbe, n_thr = counts(j)
            if violation[j]:
                return f"room only on {n_bad} drained/failed GPU(s)"
            return f"{n_cand[j]} candidate GPU(s): {n_sbe} with ECC SBE, {n_thr} throttling"

        def why(j: int) -> str:
            return (f"GPU drained or failed (XID/ECC DBE): room only on {counts(j)[0]} "
                    f"unusable GPU(s)")

        return ComponentResult(value, reason, violation, why, unresolvable=True)
