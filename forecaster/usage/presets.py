"""Named UsageForecaster configurations, with durations in wall time (turned into bins)."""
from __future__ import annotations

import pandas as pd

# The constructor's tree settings without recency weights: what the synthetic bench prefers
# (bench/results/usage_backtest.md: small recency-weighted trees cost 7-9 % MAE there).
DEFAULT_TREES = {"num_leaves": 15, "min_child_samples": 100, "learning_rate": 0.05,
                 "half_life": None}
# "serving" is what bench/usage_genai.py's rule picked on the tune pods of the GenAI 2026
# serving trace (dev stage only; bench/results/usage_genai.md): small trees, the fleet's load,
# recency weights, the hurdle and the per-origin re-pick from the fleet's recent errors over
# the last 6 horizons (60 bins at a 10-bin horizon, 180 at 30). Since session 6 it also tries
# DEFAULT_TREES on the validation tail (`tune`) and keeps whichever validates better: on the
# GenAI trace the small trees win every fit (dev and final), on the synthetic fleet the
# defaults do. Since session 7 its p10/p90 are re-calibrated at each origin from the same
# window's served residuals (`recent_intervals`; dev stage: coverage 0.80-0.81 on all four
# (metric, horizon) rows, was 0.66-0.87, the point forecast unchanged).
# "plain": the constructor defaults.
PRESETS: dict[str, dict] = {
    "plain": {},
    "serving": {"num_leaves": 7, "min_child_samples": 200, "learning_rate": 0.03,
                "fleet": True, "half_life": pd.Timedelta("4h"), "hurdle": True,
                "recent_window": 6, "recent_unit": "horizons", "recent_scope": "fleet",
                "tune": (DEFAULT_TREES,), "recent_intervals": True},
}


def _bins(v, step: pd.Timedelta):
    """Durations in bins of width `step`, inside `tune`'s candidate dicts too."""
    if isinstance(v, pd.Timedelta):
        return max(1, int(round(v / step)))
    if isinstance(v, tuple):
        return tuple({k: _bins(x, step) for k, x in c.items()} for c in v)
    return v


def preset(name: str, step: pd.Timedelta) -> dict:
    """UsageForecaster keyword arguments of a named preset on bins of width `step`."""
    if name not in PRESETS:
        raise ValueError(f"unknown usage preset {name!r} (known: {', '.join(PRESETS)})")
    return {k: _bins(v, step) for k, v in PRESETS[name].items()}
