"""Power headroom: predicted draw after placement against node and rack caps. Draw per pod is
the fingerprint's predicted power where fresh, else a configured watts-per-GPU estimate."""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


def node_draw(ctx: Context) -> tuple[np.ndarray, np.ndarray | None]:
    """Estimated draw (W) of every state row, and the incoming pod's predicted W per GPU."""
    s, pcfg = ctx.state, ctx.cfg.get("power", {})
    dflt, idle = float(pcfg.get("default_gpu_watts", 300)), float(pcfg.get("idle_gpu_watts", 60))
    model = ctx.providers.fresh("fingerprint")
    per_code = np.full(len(s.workloads), dflt)
    pod_w = None
    if model is not None:
        names = ctx.workload_names()
        if names:
            pred = np.asarray(model.power_w(names), float)
            per_code = np.where(np.isnan(pred), dflt, pred)
        pod_w = float(np.asarray(model.power_w([ctx.pod.workload]), float)[0])
        pod_w = None if np.isnan(pod_w) else pod_w
    share = s.res_milli / 1000.0
    busy = (ctx.lookup(per_code, s.res_code, 0.0) * share).sum(axis=1)
    idle_gpus = np.clip(s.gpu_count - share.sum(axis=1), 0, None)
    return np.where(s.live, busy + idle * idle_gpus, 0.0), pod_w


class PowerHeadroom:
    name = "power"

    def score(self, ctx: Context) -> ComponentResult:
        s, r, pcfg = ctx.state, ctx.rows, ctx.cfg.get("power", {})
        rack_caps = pcfg.get("rack_caps_w") or {}
        node_cap = s.power_cap[r]
        if np.isnan(node_cap).all() and not rack_caps:
            return constant(ctx, 1.0, "no power cap configured")
        draw_all, pod_w = node_draw(ctx)
        dflt, idle = float(pcfg.get("default_gpu_watts", 300)), float(pcfg.get("idle_gpu_watts", 60))
        gpus = ctx.need / 1000.0 * max(ctx.pod.gpus, 0)
        add = gpus * ((pod_w if pod_w is not None else dflt) - idle)  # idle draw already counted
        share = float(pcfg.get("headroom_share", 0.1))
        node_after = draw_all[r] + add
        node_val = np.where(np.isnan(node_cap), 1.0,
                            np.clip((node_cap - node_after) / (share * np.nan_to_num(node_cap, nan=1.0)), 0, 1))
        rack_cap_by_code = np.full(len(s.racks), np.nan)
        for name, code in s.racks.items():
            if name in rack_caps:
                rack_cap_by_code[code] = float(rack_caps[name])
        rack_draw = np.bincount(s.rack, weights=draw_all, minlength=len(s.racks))
        rcap = rack_cap_by_code[s.rack[r]]
        rack_after = rack_draw[s.rack[r]] + add
        rack_val = np.where(np.isnan(rcap), 1.0,
                            np.clip((rcap - rack_after) / (share * np.nan_to_num(rcap, nan=1.0)), 0, 1))
        value = np.minimum(node_val, rack_val)
        src = "predicted" if pod_w is not None else "estimated"

        def reason(j: int) -> str:
            parts = []
            if not np.isnan(node_cap[j]):
                parts.append(f"node {node_after[j]:.0f}/{node_cap[j]:.0f} W")
            if not np.isnan(rcap[j]):
                parts.append(f"rack {rack_after[j]:.0f}/{rcap[j]:.0f} W")
            return f"{src} draw after placement: " + (", ".join(parts) or "no cap on this node")

        return ComponentResult(value, reason)
