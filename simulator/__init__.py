"""Synthetic GPU-cluster telemetry: a seeded, deterministic generator of a cluster's history
(samples, pods, queue gauges) with its ground truth (phases, interference, demand, health)."""
from simulator.config import (APP_ITERATIONS, BENCH_METRICS, DCGM_METRICS, PHASES, SimConfig,
                              SyntheticCluster)
from simulator.generate import generate_cluster

__all__ = ["SimConfig", "SyntheticCluster", "generate_cluster", "DCGM_METRICS", "BENCH_METRICS",
           "APP_ITERATIONS", "PHASES"]
