"""Named UsageForecaster configurations, with durations in wall time (turned into bins)."""
from __future__ import annotations

import pandas as pd

# "serving" is what bench/usage_genai.py's rule picked on the tune pods of the GenAI 2026
# serving trace (dev stage only; bench/results/usage_genai.md): small trees, the fleet's load,
# recency weights, the hurdle and the per-origin re-pick from the fleet's recent errors over
# the last 6 horizons (60 bins at a 10-bin horizon, 180 at 30).
# "plain": the constructor defaults.
PRESETS: dict[str, dict] = {
    "plain": {},
    "serving": {"num_leaves": 7, "min_child_samples": 200, "learning_rate": 0.03,
                "fleet": True, "half_life": pd.Timedelta("4h"), "hurdle": True,
                "recent_window": 6, "recent_unit": "horizons", "recent_scope": "fleet"},
}


def preset(name: str, step: pd.Timedelta) -> dict:
    """UsageForecaster keyword arguments of a named preset on bins of width `step`."""
    if name not in PRESETS:
        raise ValueError(f"unknown usage preset {name!r} (known: {', '.join(PRESETS)})")
    return {k: (max(1, int(round(v / step))) if isinstance(v, pd.Timedelta) else v)
            for k, v in PRESETS[name].items()}
