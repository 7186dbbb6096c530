"""Foresight: predictive workload modeling for GPU Kubernetes clusters."""

from ground.version import __version__

__all__ = ["__version__"]
