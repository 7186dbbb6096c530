"""Prometheus metrics of the extender (default registry, created once per process)."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("foresight_extender_requests_total", "Extender requests", ["verb", "code"])
LATENCY = Histogram("foresight_extender_latency_seconds", "Extender answer time", ["verb"],
                    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 1, 5))
FALLBACK = Gauge("foresight_extender_fallback",
                 "1 while scoring falls back to allocation-based packing (models missing/stale)")
PROVIDER_FRESH = Gauge("foresight_extender_provider_fresh",
                       "1 when the provider is loaded and fresh", ["provider"])
COMPONENT_ERRORS = Counter("foresight_extender_component_errors_total",
                           "Score components that raised; scored neutral instead", ["component"])
READY = Gauge("foresight_extender_state_ready", "1 once cluster state is loaded")
NODES = Gauge("foresight_extender_nodes", "Nodes in the extender's cluster state")
FILTER_NODES = Counter("foresight_extender_filter_nodes_total",
                       "Nodes answered by the filter verb, by outcome", ["outcome"])
