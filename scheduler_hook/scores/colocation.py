"""Colocation safety: predicted slowdown of the incoming pod beside each resident, and of each
resident beside it. A pod's minimum speed (`foresight.io/min-speed`, or the older
`foresight.io/slo-min-speed`) turns a pessimistic predicted speed under it into a hard
violation - only with a fresh interference model. The pessimistic speed is the model's
admission bound at that floor where it has one (calibrated to admit at most its `admit_risk` of
unsafe placements: forecaster/interference/admission.py), its p10 otherwise. A shared GPU is
asked in its node's sharing mode (GFD's `nvidia.com/gpu.sharing-strategy`: time-slicing or MPS
divide a GPU differently).
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


def under_floor(bound: np.ndarray, floor: float | np.ndarray) -> np.ndarray:
    """Where a side's bound breaks its minimum speed: the gate refuses such a placement (no
    floor, 0: never; an unknown bound, NaN: never, as "no known slowdown"). The API's
    `/v1/interference` answers `admitted` with the same rule."""
    floor = np.asarray(floor, float)
    return (floor > 0) & (np.nan_to_num(np.asarray(bound, float), nan=1.0) < floor)


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
        others = [names[c] for c in present]
        modes = s.sharing[r] if pod.fractional else np.full(ctx.n, "node", dtype=object)
        bounded = hasattr(model, "bounds")
        admits = bool(getattr(model, "admits", False))
        slo = s.res_slo[r]
        s_in = np.full(codes.shape, np.nan)
        s_res, lo_in, lo_res = s_in.copy(), s_in.copy(), s_in.copy()
        u_in, u_res = s_in.copy(), s_in.copy()
        W = len(names)
        for mode in np.unique(modes):  # one mode per cluster, as a rule: one call
            rows = modes == mode
            tables = [model.speeds(pod.workload, others, mode)]
            outs = [(s_in, s_res)]
            if bounded:
                tables.append(model.bounds(pod.workload, others, mode))
                outs.append((lo_in, lo_res))
            if admits:
                tables.append(model.units(pod.workload, others, mode))
                outs.append((u_in, u_res))
            for (a, b), (out_in, out_res) in zip(tables, outs):
                t_in, t_res = np.full(W, np.nan), np.full(W, np.nan)
                t_in[present], t_res[present] = a, b
                out_in[rows] = ctx.lookup(t_in, codes[rows], np.nan)
                out_res[rows] = ctx.lookup(t_res, codes[rows], np.nan)
            if admits:  # each side held to its own floor's admission bound
                lo_in[rows] = model.admit_bound(mode, s_in[rows], u_in[rows], lo_in[rows],
                                                pod.slo_min_speed)
                lo_res[rows] = model.admit_bound(mode, s_res[rows], u_res[rows], lo_res[rows],
                                                 slo[rows])
        if not bounded:  # a provider without p10: its point speeds are the bound
            lo_in, lo_res = s_in, s_res
        if pod.mig_count:  # beside other MIG slices: the model's "mig" pairs, not node-level
            from scheduler_hook.scores.mig import mig_pair_speeds
            s_in, s_res = mig_pair_speeds(ctx, model, codes, s_in, s_res)
            lo_in, lo_res = s_in, s_res  # no p10 across MIG boundaries: the point speeds
        # fmin skips NaN (unknown pair or empty slot); all-NaN rows mean "no known slowdown"
        worst_in = np.nan_to_num(np.fmin.reduce(np.where(codes >= 0, s_in, np.nan), axis=1),
                                 nan=1.0)
        worst_res = np.nan_to_num(np.fmin.reduce(np.where(codes >= 0, s_res, np.nan), axis=1),
                                  nan=1.0)
        worst = np.minimum(np.minimum(worst_in, worst_res), 1.0)
        floor = float(ctx.cfg.get("slowdown_floor", 0.5))
        value = np.clip((worst - floor) / (1.0 - floor), 0.0, 1.0)
        broken_res = under_floor(lo_res, slo).any(axis=1)
        low_in = np.fmin.reduce(np.where(codes >= 0, lo_in, np.nan), axis=1)
        broken_in = under_floor(low_in, pod.slo_min_speed)
        violation = broken_in | broken_res

        def reason(j: int) -> str:
            return (f"predicted speed {worst_in[j]:.2f} for the pod, {worst_res[j]:.2f} "
                    f"for the worst resident")

        def why(j: int) -> str:
            bound = "admission-bound" if admits else "p10"
            if broken_in[j]:
                who, low, fl = "the pod", low_in[j], float(pod.slo_min_speed)
            else:  # the resident furthest under its own floor
                gap = np.where(under_floor(lo_res[j], slo[j]), lo_res[j] - slo[j], np.inf)
                k = int(np.argmin(gap))
                who, low, fl = "a resident", lo_res[j, k], float(slo[j, k])
            return (f"minimum speed broken: {bound} speed of {who} {low:.2f} under its floor "
                    f"{fl:.2f} ({modes[j]} sharing)")

        return ComponentResult(value, reason, violation, why)
