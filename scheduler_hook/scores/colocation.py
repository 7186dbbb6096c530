"""Colocation safety: predicted slowdown of the incoming pod beside each resident, and of each
resident beside it. A pod's minimum speed (`foresight.io/min-speed`, or the older
`foresight.io/slo-min-speed`) turns a pessimistic predicted speed under it into a hard
violation - only with a fresh interference model. The pessimistic speed is the model's
admission bound at that floor where it has one (calibrated to admit at most its `admit_risk` of
unsafe placements: forecaster/interference/admission.py), its p10 otherwise. A shared GPU is
asked in its node's sharing mode (GFD's `nvidia.com/gpu.sharing-strategy`: time-slicing or MPS
divide a GPU differently). A GPU share meets only the residents of the GPU it lands on, and
several of them slow it together (colocation_gpu.py: their delays add).
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant
from scheduler_hook.scores.colocation_gpu import GpuView, gpu_view, under_floor

__all__ = ["ColocationSafety", "under_floor"]


class ColocationSafety:
    name = "colocation"

    def _pairs(self, ctx: Context, model, codes: np.ndarray, modes: np.ndarray,
               names: list[str]) -> tuple[np.ndarray, ...]:
        """Pairwise (n, K): the pod's speed beside each resident, each resident's beside the
        pod, and both sides' bounds at their own floors (the admission bound where the model
        has one, its p10 otherwise, the point speed for a provider with neither)."""
        s, r, pod = ctx.state, ctx.rows, ctx.pod
        present = np.unique(codes[codes >= 0])
        others = [names[c] for c in present]
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
        return s_in, s_res, lo_in, lo_res

    def _residents(self, ctx: Context) -> np.ndarray:
        """Resident workload codes (n, K) the pod can meet: for a GPU share, only residents
        that themselves share one GPU (-1 elsewhere)."""
        s, r = ctx.state, ctx.rows
        codes = s.res_code[r]
        if ctx.pod.shares_gpu:
            codes = np.where(s.res_gpu[r] >= 0, codes, -1)
            codes = np.where(s.res_milli[r] < 1000, codes, -1)
        return codes

    def gpu_view(self, ctx: Context) -> GpuView | None:
        """The per-GPU view of a GPU share (colocation_gpu.GpuView), None where the gate has
        nothing to say per GPU (no fresh model, not a GPU share, no resident that shares)."""
        model = ctx.providers.fresh("interference")
        pod = ctx.pod
        if model is None or not pod.shares_gpu or pod.mig_count:
            return None
        codes = self._residents(ctx)
        return self._view(ctx, model, codes) if (codes >= 0).any() else None

    def _view(self, ctx: Context, model, codes: np.ndarray) -> GpuView:
        names = ctx.workload_names()
        modes = ctx.state.sharing[ctx.rows]
        s_in, s_res, lo_in, lo_res = self._pairs(ctx, model, codes, modes, names)
        bound_at = model.admit_bound if getattr(model, "admits", False) else None
        return gpu_view(ctx, model, codes, modes, names, s_in, lo_in, s_res, lo_res, bound_at)

    def score(self, ctx: Context) -> ComponentResult:
        model = ctx.providers.fresh("interference")
        if model is None:
            return constant(ctx, 1.0, "no fresh interference model: not scored")
        pod = ctx.pod
        codes = self._residents(ctx)
        if not (codes >= 0).any():
            return constant(ctx, 1.0, "no co-located pods")
        floor = float(ctx.cfg.get("slowdown_floor", 0.5))
        if pod.shares_gpu and not pod.mig_count:
            return self._score_gpus(ctx, self._view(ctx, model, codes), floor,
                                    "admission-bound" if getattr(model, "admits", False)
                                    else "p10", model, codes)
        names = ctx.workload_names()
        modes = np.full(ctx.n, "node", dtype=object)
        slo = ctx.state.res_slo[ctx.rows]
        s_in, s_res, lo_in, lo_res = self._pairs(ctx, model, codes, modes, names)
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
        value = np.clip((worst - floor) / (1.0 - floor), 0.0, 1.0)
        broken_res = under_floor(lo_res, slo).any(axis=1)
        low_in = np.fmin.reduce(np.where(codes >= 0, lo_in, np.nan), axis=1)
        broken_in = under_floor(low_in, pod.slo_min_speed)
        violation = broken_in | broken_res

        def reason(j: int) -> str:
            return (f"predicted speed {worst_in[j]:.2f} for the pod, {worst_res[j]:.2f} "
                    f"for the worst resident")

        def why(j: int) -> str:
            bound = "admission-bound" if getattr(model, "admits", False) else "p10"
            if broken_in[j]:
                who, low, fl = "the pod", low_in[j], float(pod.slo_min_speed)
            else:  # the resident furthest under its own floor
                gap = np.where(under_floor(lo_res[j], slo[j]), lo_res[j] - slo[j], np.inf)
                k = int(np.argmin(gap))
                who, low, fl = "a resident", lo_res[j, k], float(slo[j, k])
            others = [names[c] for c in codes[j][codes[j] >= 0]]
            return (f"minimum speed broken: {bound} speed of {who} {low:.2f} under its floor "
                    f"{fl:.2f} ({modes[j]} pairs)"
                    f"{unfamiliar_note(model, pod.workload, others, str(modes[j]))}")

        return ComponentResult(value, reason, violation, why)

    @staticmethod
    def _score_gpus(ctx: Context, v: GpuView, floor: float, bound: str, model,
                    codes: np.ndarray) -> ComponentResult:
        """A GPU share: the value of the GPU it is best placed on; refused where no GPU that
        fits it is safe for it and for every resident with a minimum speed."""
        pod = ctx.pod
        g = v.chosen()
        at = (np.arange(ctx.n), g)
        pod_pt, res_pt, n_res = v.pod_point[at], v.res_point[at], v.crowd[at]
        worst = np.minimum(np.minimum(pod_pt, res_pt), 1.0)
        value = np.clip((worst - floor) / (1.0 - floor), 0.0, 1.0)
        violation = v.candidate.any(axis=1) & ~v.safe.any(axis=1)
        modes = ctx.state.sharing[ctx.rows]

        def reason(j: int) -> str:
            return (f"GPU {g[j]} ({n_res[j]:.0f} sharing pods): predicted speed "
                    f"{pod_pt[j]:.2f} for the pod, {res_pt[j]:.2f} for the slowest resident")

        def why(j: int) -> str:
            k = g[j]
            if v.pod_broken[j, k]:
                side = (f"{bound} speed of the pod {v.pod_bound[j, k]:.2f} under its floor "
                        f"{float(pod.slo_min_speed):.2f}")
            else:
                side = (f"{bound} speed of a resident {v.res_low[j, k]:.2f} under its floor "
                        f"{v.res_floor[j, k]:.2f}")
            on_k = (ctx.state.res_gpu[ctx.rows][j] == k) & (codes[j] >= 0)
            names = ctx.workload_names()  # only to explain: not on the scoring path
            others = [names[c] for c in codes[j][on_k]]
            return (f"minimum speed broken on every GPU that fits the pod; on GPU {k} "
                    f"({v.crowd[j, k]:.0f} sharing pods): {side} ({modes[j]} sharing)"
                    f"{unfamiliar_note(model, pod.workload, others, str(modes[j]))}")

        return ComponentResult(value, reason, violation, why)


def unfamiliar_note(model, workload: str, others: list[str], mode: str) -> str:
    """Why a refusal's bound is 0, where it is: a pair with a side the model has no
    calibrated bound for (forecaster/interference/familiar.py). Asked only to explain."""
    if not others or not getattr(model, "admits", False) or not hasattr(model, "units"):
        return ""
    u_in, _ = model.units(workload, others, mode)
    odd = sorted({o for o, u in zip(others, u_in) if np.isposinf(u)})
    if not odd:
        return ""
    return (f"; no bound is calibrated beside {', '.join(odd[:3])}"
            f"{' ...' if len(odd) > 3 else ''}: the pod or that neighbour has no solo "
            "fingerprint the model knows, or one unlike every workload it was fitted on")

