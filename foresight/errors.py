"""Kept for compatibility: the error types live on the ground floor (ground.errors)."""
from ground.errors import ForesightError, MetricMissing, SourceUnavailable

__all__ = ["ForesightError", "MetricMissing", "SourceUnavailable"]
