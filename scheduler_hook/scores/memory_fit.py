"""Memory fit: predicted peak framebuffer of the pod against the free framebuffer of the best
GPU that could take it, where residents count at their *predicted* peak, not their request.

Only a fresh fingerprint prediction can make this a hard violation (predicted OOM); declared
sizes just score.
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


class MemoryFit:
    name = "memory_fit"

    def gpu_room(self, ctx: Context) -> tuple[np.ndarray, np.ndarray, bool]:
        """(free framebuffer per GPU (n, G), -inf where the pod cannot go; what the pod needs
        per node (n,); whether a fresh fingerprint predicted it). Residents count at their
        predicted peak where the fingerprint knows them."""
        pod, s, r = ctx.pod, ctx.state, ctx.rows
        gm = ctx.gpu_mem
        model = ctx.providers.fresh("fingerprint")
        peak = np.nan
        if model is not None:
            codes, resident_fb = s.res_code[r], s.res_fb[r]
            names = ctx.workload_names()
            by_code = np.asarray(model.peak_fb_mib(names), float) if names else np.zeros(0)
            pred = ctx.lookup(by_code, codes, np.nan)
            resident_fb = np.where(np.isnan(pred), resident_fb, pred)
            peak = float(np.asarray(model.peak_fb_mib([pod.workload]), float)[0])
        predicted = not np.isnan(peak)
        need_fb = np.full(ctx.n, peak) if predicted else (
            np.full(ctx.n, pod.gpu_memory_mib) if pod.gpu_memory_mib
            else ctx.need / 1000.0 * gm)
        G = ctx.free.shape[1]
        if model is None:
            used = s.fb_decl[r]  # declared sizes, kept per GPU by the state
        else:
            used = np.zeros((ctx.n, G))
            res_gpu = s.res_gpu[r]
            for g in range(G):  # G <= 8 typically: cheaper than a scatter-add over residents
                used[:, g] = (resident_fb * (res_gpu == g)).sum(axis=1)
        return np.where(ctx.fits & ctx.usable, gm[:, None] - used, -np.inf), need_fb, predicted

    def score(self, ctx: Context) -> ComponentResult:
        pod = ctx.pod
        if pod.mig_count:  # a MIG slice has its own memory
            from scheduler_hook.scores.mig import mig_memory_fit
            return mig_memory_fit(ctx)
        if pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        gm = ctx.gpu_mem
        free_fb, need_fb, predicted = self.gpu_room(ctx)
        G = ctx.free.shape[1]
        best = free_fb.max(axis=1) if G else np.full(ctx.n, -np.inf)
        slack = best - need_fb
        known = gm > 0
        head = ctx.cfg.get("memory_headroom", 0.1) * np.where(known, gm, 1.0)
        value = np.where(known, np.clip(slack / head, 0.0, 1.0), 1.0)
        value = np.where(np.isfinite(best) | ~known, value, 0.0)
        src = "predicted" if predicted else "declared"
        violation = (predicted & known & (slack < 0) & np.isfinite(best)) if predicted else None

        def reason(j: int) -> str:
            if not known[j]:
                return "GPU memory of node unknown (no nvidia.com/gpu.memory label)"
            if not np.isfinite(best[j]):
                return "no healthy GPU with room for the pod"
            return (f"{src} peak {need_fb[j]:.0f} MiB vs {best[j]:.0f} MiB free on best GPU "
                    f"(slack {slack[j]:.0f} MiB)")

        def why(j: int) -> str:
            return f"predicted OOM: peak {need_fb[j]:.0f} MiB > {best[j]:.0f} MiB free"

        return ComponentResult(value, reason, violation, why if predicted else None)
