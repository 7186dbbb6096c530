"""Prometheus metrics of the prediction API (default registry, created once per process)."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("foresight_api_requests_total", "API requests", ["route", "code"])
LATENCY = Histogram("foresight_api_latency_seconds", "API answer time", ["route"],
                    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5))
PREDICTIONS = Counter("foresight_api_predictions_total", "Rows predicted", ["kind"])
FALLBACKS = Counter("foresight_api_fallbacks_total",
                    "Answers given without a model (503 or fallback scoring)", ["kind"])
MODEL_VERSION = Gauge("foresight_api_model_version", "Model version in service", ["kind"])
MODEL_AGE = Gauge("foresight_api_model_age_seconds", "Seconds since the model was loaded",
                  ["kind"])
RELOADS = Counter("foresight_api_model_reloads_total", "Model versions swapped in", ["kind"])
RELOAD_FAILURES = Counter("foresight_api_model_reload_failures_total",
                          "New model versions refused (old one kept)", ["kind"])
REFUSED = Gauge("foresight_api_model_refused", "1 while the registry's current version of the "
                "kind is refused and an older one (or none) serves", ["kind"])
# From the manifest of the version in service: what the retraining job measured on its
# backtest window, so a dashboard can show model error beside its best baseline's.
BACKTEST_ERROR = Gauge("foresight_model_backtest_error",
                       "Backtest error (the kind's primary metric) of the model in service",
                       ["kind"])
BASELINE_ERROR = Gauge("foresight_model_baseline_error",
                       "Best baseline's error on the same backtest window", ["kind"])
MODEL_CREATED = Gauge("foresight_model_created_timestamp_seconds",
                      "When the model in service was trained (Unix time)", ["kind"])
