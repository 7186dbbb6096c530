"""Reservation in the timeline replay, through the extender's own code.

The replay builds, for every decision, the few fields of a scoring context that
`scheduler_hook.scores.reservation.Reservation` reads (cluster arrays, the pod's priority and
GPU count, the demand provider) and calls that component; the demand provider is
`scheduler_hook.demand.DemandProvider`, whose `reserved_whole_gpus()` is the online forecast.
The pool is the nodes that can host the reserved shape (>= 8 GPUs): empty 2-GPU nodes do not
count as room for an 8-GPU pod. Jobs the reservation is for (8-GPU pods and gang pods) get the
hook's high priority, so they may use reserved nodes, as high-priority pods do in the hook.

Backfill (issue 28): a held-off pod may still take an empty pool node when its predicted run
time ends before the forecast needs the node (the component's own rule, `backfill_window_s`);
the node is then lent until that time. Once a lent node is occupied it is no longer a whole
node to protect: any pod may join it, as on any busy node under the fence (issue 28's first
try closed lent nodes to pods predicted to outlive the lease, and small pods waited hours).
Pods are put in run-time classes (powers of two of 10 minutes, the class's upper bound is
what the component is asked), so that a scheduling pass keeps checking fits per (shape,
class) and not per pod. A borrower that outlives its lease is not preempted; it is counted
(`overran`). A pod pending longer than the component's hold bound (`held_too_long`) is not
held off at all (priority stratification; the engine asks `may_take_reserved`).

Where the extender weighs the component's 0 against other scores, the replay holds the pod
instead (a value of 0 removes the node): that is the reservation a queue-aware scheduler
enforces, and the difference is said in bench/results/replay_timeline.md.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from scheduler_hook.demand import DemandProvider
from scheduler_hook.scores.reservation import Reservation, backfill_window_s, held_too_long

HIGH = 1000  # scheduler_hook default_config.yaml `high_priority`
CFG = {"high_priority": HIGH}
BASE_S = 600.0
NCLASS = 12  # class NCLASS: predicted beyond 600 s x 2^11 (~14 days) or unknown: never lent


def hold_bounds(gpus: np.ndarray, exempt: np.ndarray, hold: float, multi: float = 1.0
                ) -> np.ndarray:
    """Per job, the hold bound (s; 0: none): ``hold``, times ``multi`` for 2-4 GPU jobs (inf:
    none; issue 28 bounds only the fractional and 1-GPU classes' p95), 0 for the jobs the
    reservation is for."""
    mid = (gpus >= 2) & (gpus < 8)
    scaled = hold * multi if np.isfinite(multi) else 0.0
    return np.where(exempt, 0.0, np.where(mid, scaled, hold))


def runtime_class(pred_s: np.ndarray) -> np.ndarray:
    """Run-time class per job: the smallest b with pred <= 600 s x 2^b (NCLASS if none)."""
    r = np.asarray(pred_s, float)
    b = np.ceil(np.log2(np.maximum(np.nan_to_num(r, nan=np.inf), 1.0) / BASE_S))
    return np.where(np.isfinite(r), np.clip(b, 0, NCLASS), NCLASS).astype(np.int64)


def class_bound(b: int) -> float:
    return BASE_S * 2.0 ** b if 0 <= b < NCLASS else np.inf


class _ClassRuntime:
    """The `runtime` provider the component reads: the asked class's upper bound."""

    @staticmethod
    def runtime_s(pod) -> float | None:
        return getattr(pod, "runtime_s", None)


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
        self.runtime = _ClassRuntime()

    def fresh(self, slot: str):
        return {"demand": self.demand, "runtime": self.runtime}.get(slot)


class ReservationGate:
    """Per-node mask of where a pod may go under the forecast reservation."""

    def __init__(self, cluster, min_gpus: int = 8, horizon_s: float = 0.0,
                 max_hold_s: float = 0.0) -> None:
        self.cluster = cluster
        self.horizon_s = horizon_s  # > 0: backfill on (the forecast's span)
        self.max_hold_s = max_hold_s  # > 0: a pod pending longer is not held off
        self.lease_end = np.full(len(cluster.nodes), -np.inf)
        self.now = 0.0
        self._class_memo: dict[int, tuple] = {}
        self.rows = np.flatnonzero(cluster.nodes.gpus >= min_gpus)
        self.state = _PoolState(cluster, self.rows)
        self.providers = _Providers()
        self.component = Reservation()
        self._all = np.arange(len(self.rows))
        self._memo: tuple | None = None

    def set_reserved(self, gpus: float) -> None:
        if self.providers.demand is None or self.providers.demand.reserved_whole_gpus() != gpus:
            self.providers.demand = DemandProvider({}, gpus, "timeline online forecast",
                                                   self.horizon_s)

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

    def may_take_reserved(self, waited_s: float) -> bool:
        """The component's hold bound: a pod pending ``waited_s`` may use reserved nodes."""
        return held_too_long(waited_s, self.max_hold_s)

    # -- backfill ---------------------------------------------------------------------------
    def class_off(self, b: int) -> tuple[np.ndarray, np.ndarray, tuple | None]:
        """(mask, held-off nodes, memo key or None) for a 1-GPU-or-less pod of run-time
        class ``b``: the component asked with the class's bound (the empty nodes it may
        borrow); a lent node once occupied is open to every pod, as any busy node is."""
        d = self.providers.demand
        key = (self.cluster.empty_version, None if d is None else d.reserved_whole_gpus(), b)
        memo = self._class_memo.get(b)
        if memo is None or memo[0] != key:
            memo = self._class_memo[b] = (key, *self._compute(1, False, class_bound(b)))
        return memo[1], memo[2], key if memo[3] else None

    def lend(self, node: int, strict_off: bool) -> float | None:
        """A held-off pod was placed on ``node``: if it was an empty node the strict rule held
        off, lease it until the forecast needs it and return the lease end the pod must keep
        (None when it joined a busy node: no lease)."""
        if not strict_off:
            return None
        d = self.providers.demand
        whole = self.cluster.whole[self.rows]
        total = float(whole[whole == self.cluster.nodes.gpus[self.rows]].sum())
        mine = float(self.cluster.nodes.gpus[node])
        w = backfill_window_s(np.array([mine]), total + mine, d.reserved_whole_gpus(),
                              self.horizon_s)[0]
        self.lease_end[node] = self.now + w
        return float(self.lease_end[node])

    def emptied(self, node: int) -> None:
        self.lease_end[node] = -np.inf

    def _compute(self, gpus: int, big: bool, runtime_s: float | None = None
                 ) -> tuple[np.ndarray, np.ndarray, bool]:
        pod = SimpleNamespace(priority=HIGH if big else 0, gpus=gpus, runtime_s=runtime_s)
        ctx = SimpleNamespace(state=self.state, rows=self._all, n=len(self._all), pod=pod,
                              providers=self.providers, cfg=CFG)
        value = self.component.score(ctx).value
        out = np.ones(len(self.cluster.nodes), bool)
        out[self.rows] = value > 0
        off = self.rows[value <= 0]
        # the key names the held-off nodes' state only while they are empty (the component
        # holds pods off empty nodes alone today; were that to change, nothing is kept)
        c = self.cluster
        return out, off, bool((c.whole[off] == c.nodes.gpus[off]).all())
