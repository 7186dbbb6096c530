"""Colocation safety: predicted slowdown of the incoming pod beside each resident, and of each
resident beside it. A pod's SLO class (`foresight.io/slo-min-speed`) turns a predicted speed
under its floor into a hard violation - only with a fresh interference model.
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


class ColocationSafety:
    name = "colocation"

    def score(self, ctx: Context) -> ComponentResult:
        model = ctx.providers.fresh("interference")
        if model is None:
            return constant(ctx, 1.0, "no fresh interference model: not scored")
        pod, s, r = ctx.pod, ctx.state, ctx.rows
        codes = s.res_code[r]
        if pod.fractional:  # GPU sharing: only residents that themselves share a GPU
            codes = np.where(s.res_gpu[r] >= 0, codes, -1)
            codes = np.where(s.res_milli[r] < 1000, codes, -1)
        present = np.unique(codes[codes >= 0])
        if len(present) == 0:
            return constant(ctx, 1.0, "no co-located pods")
        names = ctx.workload_names()
        s_in_u, s_res_u = model.speeds(pod.workload, [names[c] for c in present],
                                       "timeslice" if pod.fractional else "node")
        W = len(names)
        s_in_t, s_res_t = np.full(W, np.nan), np.full(W, np.nan)
        s_in_t[present], s_res_t[present] = s_in_u, s_res_u
        s_in = ctx.lookup(s_in_t, codes, np.nan)
        s_res = ctx.lookup(s_res_t, codes, np.nan)
        if pod.mig_count:  # beside other MIG slices: the model's "mig" pairs, not node-level
            from scheduler_hook.scores.mig import mig_pair_speeds
            s_in, s_res = mig_pair_speeds(ctx, model, codes, s_in, s_res)
        # fmin skips NaN (unknown pair or empty slot); all-NaN rows mean "no known slowdown"
        worst_in = np.nan_to_num(np.fmin.reduce(np.where(codes >= 0, s_in, np.nan), axis=1),
                                 nan=1.0)
        worst_res = np.nan_to_num(np.fmin.reduce(np.where(codes >= 0, s_res, np.nan), axis=1),
                                  nan=1.0)
        worst = np.minimum(np.minimum(worst_in, worst_res), 1.0)
        floor = float(ctx.cfg.get("slowdown_floor", 0.5))
        value = np.clip((worst - floor) / (1.0 - floor), 0.0, 1.0)
        slo = s.res_slo[r]
        broken_res = ((slo > 0) & (np.nan_to_num(s_res, nan=1.0) < slo)).any(axis=1)
        broken_in = (worst_in < pod.slo_min_speed) if pod.slo_min_speed > 0 else \
            np.zeros(ctx.n, bool)
        violation = broken_in | broken_res

        def reason(j: int) -> str:
            return (f"predicted speed {worst_in[j]:.2f} for the pod, {worst_res[j]:.2f} "
                    f"for the worst resident")

        def why(j: int) -> str:
            who = "the pod" if broken_in[j] else "a resident"
            return f"SLO class broken: predicted speed of {who} under its floor"

        return ComponentResult(value, reason, violation, why)
