"""Configuration and result containers of the synthetic cluster generator."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import pandas as pd

#: dcgm-exporter metric names (DESIGN.md), in the order the samples table lists them.
DCGM_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)
#: Application progress counter of training pods (not a DCGM metric; optional, see README).
APP_ITERATIONS = "foresight_app_iterations_total"

#: The 8 metrics the ingestion benchmark reads.
BENCH_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)

PHASES = ("startup", "compute", "eval", "checkpoint", "stall", "idle",
          "serving_busy", "serving_idle")


@dataclass
class SimConfig:
    """Everything that determines a synthetic history; equal configs give identical tables."""

    seed: int = 0
    start: pd.Timestamp | str = "2026-01-05T00:00:00Z"  # a Monday, 00:00 UTC
    days: float = 2.0
    step_s: float = 30.0
    nodes: int = 4
    gpus_per_node: int = 4
    gpu_model: str = "A40"
    queues: tuple[str, ...] = ("research", "production", "dev")
    #: offered GPU load: arriving GPU-seconds per second / GPUs in the cluster
    load: float = 0.7
    #: class mix of arriving jobs (serving pods are placed at start, see `serving_pods`)
    workload_mix: dict[str, float] = field(default_factory=lambda: {
        "resnet50": 0.22, "bert": 0.2, "llm-finetune": 0.1, "recsys": 0.13,
        "speech": 0.1, "notebook": 0.25})
    serving_pods: int = 2
    #: share of single-GPU jobs asking for a GPU fraction (None: openb's, from jobs.json)
    fractional_share: float | None = None
    #: fraction of nodes whose shared GPUs use MPS (the rest use time-slicing)
    mps_node_fraction: float = 0.25
    #: what calibrates time-slice / MPS slowdowns: "gavel" (V100 throughputs,
    #: simulator/interference.py) or "h200" (the real H200 measurement, simulator/sharing.py)
    sharing_calibration: str = "gavel"
    unhealthy_fraction: float = 0.06
    #: restrict the samples to these metric names (None: all DCGM metrics + app counter)
    metrics: tuple[str, ...] | None = None
    app_counter: bool = True
    #: arrivals start this long before `start` so the cluster is busy at `start`
    warmup_hours: float = 12.0
    demand_bin: str = "1h"
    namespace_prefix: str = "team-"

    def __post_init__(self) -> None:
        self.start = pd.Timestamp(self.start)
        if self.start.tzinfo is None:
            self.start = self.start.tz_localize("UTC")
        self.start = self.start.tz_convert("UTC")
        # the messages name the command-line options these fields come from (simulate,
        # demo, train --synthetic): that is where a user fixes them
        if not isinstance(self.seed, numbers.Integral) or self.seed < 0:  # numpy's rule
            raise ValueError(f"--seed {self.seed}: must be a non-negative integer")
        for option, v in (("--days", self.days), ("--step", self.step_s)):
            if not 0 < v < float("inf"):  # and NaN
                raise ValueError(f"{option} {v:g}: must be positive and finite")
        if self.days * 86400.0 < 2 * self.step_s:  # no grid to put a sample on
            raise ValueError(f"--days {self.days:g} is shorter than two samples of "
                             f"{self.step_s:g} s")
        for option, n in (("--nodes", self.nodes), ("--gpus-per-node", self.gpus_per_node)):
            if n < 1:
                raise ValueError(f"{option} {n}: must be at least 1")
        if not self.queues:
            raise ValueError("at least one queue is needed")
        if not 0 <= self.load < float("inf"):  # and NaN
            raise ValueError(f"--load {self.load:g}: must be non-negative and finite")

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def duration_s(self) -> float:
        return self.days * 86400.0

    def metric_names(self) -> list[str]:
        """The metrics the samples table will hold, in order."""
        every = list(DCGM_METRICS) + ([APP_ITERATIONS] if self.app_counter else [])
        if self.metrics is None:
            return every
        unknown = [m for m in self.metrics if m not in every]
        if unknown:
            raise ValueError(f"unknown metric(s): {', '.join(unknown)}")
        return [m for m in every if m in self.metrics]


@dataclass
class SyntheticCluster:
    """A generated history: the tidy tables of features.schema plus the ground truth."""

    config: SimConfig
    samples: pd.DataFrame
    pods: pd.DataFrame
    pod_labels: pd.DataFrame
    queues: pd.DataFrame
    truth: dict[str, pd.DataFrame]
