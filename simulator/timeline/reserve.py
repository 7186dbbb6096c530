"""Reservation in the timeline replay, through the extender's own code.

The replay builds, for every decision, the few fields of a scoring context that
`scheduler_hook.scores.reservation.Reservation` reads (cluster arrays, the pod's priority and
GPU count, the demand provider) and calls that component; the demand provider is
`scheduler_hook.demand.DemandProvider`, whose `reserved_whole_gpus()` is the online forecast.
The pool is the nodes that can host the reserved shape (>= 8 GPUs): empty 2-GPU nodes do not
count as room for an 8-GPU pod. Jobs the reservation is for (8-GPU pods and gang pods) get the
hook's high priority, so they may use reserved nodes, as high-priority pods do in the hook.

Where the extender weighs the component's 0 against other scores, the replay holds the pod
instead (a value of 0 removes the node): that is the reservation a queue-aware scheduler
enforces, and the difference is said in bench/results/replay_timeline.md.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from scheduler_hook.demand import DemandProvider
from scheduler_hook.scores.reservation import Reservation

HIGH = 1000  # scheduler_hook default_config.yaml `high_priority`
CFG = {"high_priority": HIGH}


class _PoolState:
    """The ClusterState fields `Reservation` reads, as views of the replay's arrays."""

    def __init__(self, cluster, rows: np.ndarray) -> None:
        self._c, self._rows = cluster, rows
        n = len(rows)
        self.live = self.schedulable = np.ones(n, bool)
        self.gpu_count = cluster.nodes.gpus[rows]
        self.gpu_exists = self.usable = cluster.slot_exists[rows]

    @property
    def free_milli(self) -> np.ndarray:
        return self._c.gpu_free[self._rows]


class _Providers:
    def __init__(self) -> None:
        self.demand: DemandProvider | None = None

    def fresh(self, slot: str):
        return self.demand if slot == "demand" else None


class ReservationGate:
    """Per-node mask of where a pod may go under the forecast reservation."""

    def __init__(self, cluster, min_gpus: int = 8) -> None:
        self.cluster = cluster
        self.rows = np.flatnonzero(cluster.nodes.gpus >= min_gpus)
        self.state = _PoolState(cluster, self.rows)
        self.providers = _Providers()
        self.component = Reservation()
        self._all = np.arange(len(self.rows))
        self._memo: tuple | None = None

    def set_reserved(self, gpus: float) -> None:
        if self.providers.demand is None or self.providers.demand.reserved_whole_gpus() != gpus:
            self.providers.demand = DemandProvider({}, gpus, "timeline online forecast")

    def allowed(self, gpus: int, big: bool) -> np.ndarray:
        """(N,) bool over the whole cluster: False on pool nodes the component scores 0.

        The component reads only which pool nodes are empty and the reserved amount, so its
        answer is memoized on those (the cluster counts emptiness changes)."""
        d = self.providers.demand
        key = (self.cluster.empty_version, None if d is None else d.reserved_whole_gpus(),
               gpus > 0, big)
        if self._memo is None or self._memo[0] != key:
            self._memo = (key, *self._compute(gpus, big))
        return self._memo[1]

    def held_off(self, gpus: int, big: bool) -> tuple[np.ndarray, tuple | None]:
        """Indices of the nodes ``allowed(gpus, big)`` is False on (the cluster sums its
        aggregates without them, cheaper than over the mask), and the memo key: while it
        stays the same, so do those nodes (empty ones; any change to one bumps the key);
        None where they are not all empty."""
        self.allowed(gpus, big)
        return self._memo[2], self._memo[0] if self._memo[3] else None

    def _compute(self, gpus: int, big: bool) -> tuple[np.ndarray, np.ndarray, bool]:
        ctx = SimpleNamespace(state=self.state, rows=self._all, n=len(self._all),
                              pod=SimpleNamespace(priority=HIGH if big else 0, gpus=gpus),
                              providers=self.providers, cfg=CFG)
        value = self.component.score(ctx).value
        out = np.ones(len(self.cluster.nodes), bool)
        out[self.rows] = value > 0
        off = self.rows[value <= 0]
        # the key names the held-off nodes' state only while they are empty (the component
        # holds pods off empty nodes alone today; were that to change, nothing is kept)
        c = self.cluster
        return out, off, bool((c.whole[off] == c.nodes.gpus[off]).all())
