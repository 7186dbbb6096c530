"""Carbon window: a deferrable pod (`foresight.io/deferrable: "true"`) prefers regions whose
grid is clean now; other pods are not affected."""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.base import ComponentResult, Context, constant


class CarbonWindow:
    name = "carbon"

    def score(self, ctx: Context) -> ComponentResult:
        if not ctx.pod.deferrable:
            return constant(ctx, 1.0, "pod not deferrable")
        model = ctx.providers.fresh("carbon")
        if model is None:
            return constant(ctx, 1.0, "no carbon-intensity source")
        regions = [ctx.state.region[i] for i in ctx.rows]
        uniq = sorted(set(regions))
        inten = dict(zip(uniq, np.asarray(model.intensity(uniq), float)))
        per = np.array([inten[x] for x in regions]) if regions else np.zeros(0)
        c = ctx.cfg.get("carbon", {})
        lo, hi = float(c.get("low_g_per_kwh", 100)), float(c.get("high_g_per_kwh", 500))
        value = np.where(np.isnan(per), 1.0, np.clip((hi - per) / (hi - lo), 0.0, 1.0))

        def reason(j: int) -> str:
            if np.isnan(per[j]):
                return f"carbon intensity of region {regions[j]!r} unknown"
            return f"grid {per[j]:.0f} gCO2/kWh in {regions[j] or 'unlabelled region'} now"

        return ComponentResult(value, reason)
