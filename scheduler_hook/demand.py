"""Demand provider: what the prospective scores read from the demand model in service.

- `shape_mix()`: the pod-shape mix published with the demand model (training/kinds/demand.py,
  `shape_mix.json`, forecast from arrivals before the end of its training window). Empty for a
  version published without one: the fragmentation score then keeps the mix of pods seen.
- `reserved_whole_gpus()`: the forecast GPU demand of the queues listed in
  `demand.reserve_queues` over the model's horizon (quantile `demand.reserve_quantile`), from
  the recent arrivals: read from Prometheus (`demand.prometheus_url`: kube-state-metrics'
  pods over the last `demand.history`, the series the retraining job builds, up to now;
  token and tenant from env FORESIGHT_PROM_TOKEN / FORESIGHT_PROM_TENANT) or from a file
  (`demand.series`, Nixtla long CSV: unique_id, ds, y). Without queues, 0.

Both are computed once when the provider is built, so scores stay constant (and cacheable)
between reloads; `foresight serve` rebuilds it every --reload-s on its reload thread (the
scheduling path never waits on Prometheus). A failing pull keeps the previous provider.
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
    def from_model(cls, model: Any, version: str, dcfg: dict[str, Any],
                   now: pd.Timestamp | None = None) -> "DemandProvider":
        pub = getattr(model, "shape_mix_", None) or {}
        mix: dict[tuple[int, int], float] = {}
        for x in pub.get("shapes") or []:
            key, share = (int(x["gpus"]), int(x["milli"])), float(x["share"])
            if key[0] > 0 and 0 < key[1] <= 1000 and share > 0:
                mix[key] = mix.get(key, 0.0) + share
        return cls(mix, _reserved(model, dcfg, now), f"demand model version {version}",
                   _horizon_s(model))


def _horizon_s(model: Any) -> float:
    """The span the model's forecast covers (horizon bins x bin width), 0 when unknown."""
    try:
        return float(model.horizon) * pd.Timedelta(model.freq).total_seconds()
    except (AttributeError, TypeError, ValueError):
        return 0.0


def recent_arrivals(url: str, freq: str, history: str = "8d",
                    now: pd.Timestamp | None = None, **auth: Any) -> pd.DataFrame:
    """GPUs requested per bin and queue by the pods created in the last `history`, up to the
    last whole bin before `now`, from kube-state-metrics in Prometheus: the series the
    retraining job's demand kind builds (features.demand_series.arrivals_until)."""
    from features.catalog import LabelConfig
    from features.demand_series import arrivals_until
    from features.prometheus import PrometheusSource
    from features.telemetry import pods_from_source

    end = pd.Timestamp(now if now is not None else pd.Timestamp.now(tz="UTC"))
    end = (end.tz_localize("UTC") if end.tzinfo is None else end).floor(freq)
    start = end - pd.Timedelta(history)
    pods = pods_from_source(PrometheusSource(url, **auth), start.to_pydatetime(),
                            end.to_pydatetime(), LabelConfig())
    pods = pods.dropna(subset=["created"])
    pods = pods[(pods["created"] >= start) & (pods["queue"].astype(str) != "")]
    if pods.empty:
        raise LookupError(f"no pod with a queue created in the last {history} at {url}")
    return arrivals_until(pods, freq, end)


def _reserved(model: Any, dcfg: dict[str, Any], now: pd.Timestamp | None = None) -> float:
    queues = [str(q) for q in dcfg.get("reserve_queues") or []]
    url, series = dcfg.get("prometheus_url"), dcfg.get("series")
    if not queues or not (url or series):
        return 0.0
    q = str(dcfg.get("reserve_quantile", "p90"))
    if q not in ("p10", "p50", "p90"):
        raise ValueError(f"demand.reserve_quantile {q!r}: choose p10, p50 or p90")
    if url:
        import os

        s = recent_arrivals(str(url), model.freq, str(dcfg.get("history") or "8d"), now,
                            token=os.environ.get("FORESIGHT_PROM_TOKEN") or None,
                            tenant=os.environ.get("FORESIGHT_PROM_TENANT") or None)
    else:
        from features.demand_series import read_series_csv

        s = read_series_csv(series)
    s["ds"] = s["ds"].dt.tz_localize(None)  # the model's bins are naive UTC, as in training
    out = model.predict(s)
    by_queue = dict(zip(out["unique_id"].astype(str), out[q].fillna(0.0).astype(float)))
    return float(sum(max(by_queue.get(name, 0.0), 0.0) for name in queues))
