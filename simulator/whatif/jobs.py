"""A recorded history as the timeline engine's input: `Nodes`, `Jobs` and the replayed window.

Time 0 of the replay is the history's start plus the warm-up, rounded down to a 10-minute
bin: jobs before it are history (the forecasters' first training data; those still running
at 0 start on the cluster), jobs from 0 to the history's end are replayed and measured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.history import History
from simulator.replay.data import Nodes
from simulator.timeline.forecast import FREQ_S
from simulator.timeline.workload import Jobs

BIG = 10**9  # CPU milli / memory MiB per node: the replay places GPUs only


@dataclass
class ReplayInput:
    nodes: Nodes
    jobs: Jobs
    t_end: float  # replay window is [0, t_end)
    origin: float  # history seconds of replay time 0
    recorded_wait: np.ndarray  # per job: queueing delay as recorded (s; NaN unknown)


def to_nodes(df: pd.DataFrame) -> Nodes:
    n = len(df)
    return Nodes(df["node"].astype(str).to_numpy(), np.full(n, BIG, np.int64),
                 np.full(n, BIG, np.int64), df["gpus"].to_numpy(np.int64),
                 df["model"].astype(str).to_numpy())


def replay_input(h: History, warmup_s: float) -> ReplayInput:
    origin = float(np.floor((h.start + warmup_s) / FREQ_S) * FREQ_S)
    from ground.errors import ForesightError

    if h.end <= h.start:  # --end before the first arrival cut everything away
        raise ForesightError("no job arrives before the history's end (check --end)")
    if origin >= h.end:
        raise ForesightError(f"the history spans {(h.end - h.start) / 86400:.2f} days: "
                             f"nothing is left to replay after a {warmup_s / 86400:g}-day "
                             "warm-up (lower --warmup)")
    j = h.jobs
    queues = tuple(sorted(j["queue"].unique()))
    tenant = pd.Categorical(j["queue"], categories=queues).codes.astype(np.int64)
    jobs = Jobs(j["arrival"].to_numpy(float) - origin, j["runtime_s"].to_numpy(float),
                j["pods"].to_numpy(np.int64), j["gpus"].to_numpy(np.int64),
                j["milli"].to_numpy(np.int64), j["priority"].to_numpy(np.int64), tenant,
                queues, h.t0 + pd.Timedelta(seconds=origin),
                j["workload"].astype(str).to_numpy(object))
    return ReplayInput(to_nodes(h.nodes), jobs, h.end - origin, origin,
                       j["wait_s"].to_numpy(float))


def fewer_nodes(nodes: Nodes, frac: float) -> Nodes:
    """The cluster less ``frac`` of its nodes, taken evenly from every (GPU count, model)
    group (the last ones listed), at least one node kept per group."""
    keep = np.ones(len(nodes), bool)
    key = pd.Series([f"{g}|{m}" for g, m in zip(nodes.gpus, nodes.model)])
    for _, idx in key.groupby(key).groups.items():
        idx = np.asarray(idx)
        drop = min(int(np.ceil(frac * len(idx) - 1e-9)), len(idx) - 1)
        if drop > 0:
            keep[idx[-drop:]] = False
    return Nodes(nodes.name[keep], nodes.cpu[keep], nodes.mem[keep], nodes.gpus[keep],
                 nodes.model[keep])
