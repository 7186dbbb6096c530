"""Foresight: predictive workload modeling for GPU Kubernetes clusters."""

__version__ = "0.1.0"
