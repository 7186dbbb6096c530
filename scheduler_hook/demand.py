"""Demand provider: what the prospective scores read from the demand model in service.

- `shape_mix()`: the pod-shape mix published with the demand model (training/kinds/demand.py,
  `shape_mix.json`, forecast from arrivals before the end of its training window). Empty for a
  version published without one: the fragmentation score then keeps the mix of pods seen.
- `reserved_whole_gpus()`: the forecast GPU demand of the queues listed in
  `demand.reserve_queues` over the model's horizon (quantile `demand.reserve_quantile`), from
  the recent series in `demand.series` (Nixtla long CSV: unique_id, ds, y). Without both, 0.

Both are computed once when the provider is built, so scores stay constant (and cacheable)
between reloads; `foresight serve` rebuilds it every --reload-s.
"""
from __future__ import annotations

from typing import Any

import pandas as pd


class DemandProvider:
    def __init__(self, mix: dict[tuple[int, int], float], reserved: float = 0.0,
                 source: str = "", horizon_s: float = 0.0) -> None:
        self._mix = dict(mix)
        self._reserved = float(reserved)
        self._horizon_s = float(horizon_s)
        self.source = source

    def horizon_s(self) -> float:
        """Seconds the reserved amount is forecast over (0: unknown, no backfill)."""
        return self._horizon_s

    def shape_mix(self) -> dict[tuple[int, int], float]:
        return dict(self._mix)

    def reserved_whole_gpus(self) -> float:
        return self._reserved

    @classmethod
    def from_model(cls, model: Any, version: str, dcfg: dict[str, Any]) -> "DemandProvider":
        pub = getattr(model, "shape_mix_", None) or {}
        mix: dict[tuple[int, int], float] = {}
        for x in pub.get("shapes") or []:
            key, share = (int(x["gpus"]), int(x["milli"])), float(x["share"])
            if key[0] > 0 and 0 < key[1] <= 1000 and share > 0:
                mix[key] = mix.get(key, 0.0) + share
        return cls(mix, _reserved(model, dcfg), f"demand model version {version}",
                   _horizon_s(model))


def _horizon_s(model: Any) -> float:
    """The span the model's forecast covers (horizon bins x bin width), 0 when unknown."""
    try:
        return float(model.horizon) * pd.Timedelta(model.freq).total_seconds()
    except (AttributeError, TypeError, ValueError):
        return 0.0


def _reserved(model: Any, dcfg: dict[str, Any]) -> float:
    queues, series = [str(q) for q in dcfg.get("reserve_queues") or []], dcfg.get("series")
    if not queues or not series:
        return 0.0
    from features.demand_series import read_series_csv

    q = str(dcfg.get("reserve_quantile", "p90"))
    if q not in ("p10", "p50", "p90"):
        raise ValueError(f"demand.reserve_quantile {q!r}: choose p10, p50 or p90")
    s = read_series_csv(series)
    s["ds"] = s["ds"].dt.tz_localize(None)  # the model's bins are naive UTC, as in training
    out = model.predict(s)
    by_queue = dict(zip(out["unique_id"].astype(str), out[q].fillna(0.0).astype(float)))
    return float(sum(max(by_queue.get(name, 0.0), 0.0) for name in queues))
