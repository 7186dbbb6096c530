"""Targeted draining in the timeline replay, through the extender's own rule.

`DrainGate` answers the engine's gate questions (`allowed`, `held_off`, `class_off`, `lend`,
`may_take_reserved`, as `ReservationGate` does) from a drain plan made with
`scheduler_hook.scores.drain`: it keeps every running pod's predicted end on its GPUs
(start + the run time the policy believes; unknown: read as overdue), the big jobs pending,
and the forecast level, and replans when one of those moves (a big job arrives or starts, the
10-minute forecast origin, or a departure from a drained node). Between replans the plan's
shadow times stay as they were, as a plan published to the extender would.

With ``remaining`` (the sixth look: `simulator.timeline.runtime.RemainingRuntime`) the
residents' predicted ends are recomputed at each replan from how long each has run (a quantile
of the remaining run time given its age) instead of start + a fixed quantile; every GPU of a
drainable node then keeps the (job, slot) entries of its residents for that.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from scheduler_hook.scores.drain import Drain, drain_times, effective_end, later_job_off, \
    plan_shadows
from scheduler_hook.scores.reservation import held_too_long
from simulator.timeline.reserve import CFG, HIGH, NCLASS, class_bound


class _Plan:
    def __init__(self, gate: "DrainGate") -> None:
        self._g = gate

    def now(self) -> float:
        return self._g.now

    def shadow_s(self, rows: np.ndarray) -> np.ndarray:
        return self._g.shadow[rows]


class DrainGate:
    """Per-node masks of where a pod may go under the drain plan."""

    def __init__(self, cluster, jobs, runtime_s: np.ndarray, horizon_s: float,
                 max_hold_s: float = 0.0, plan_jobs: int | None = None, big_gpus: int = 8,
                 remaining=None, order_s: np.ndarray | None = None) -> None:
        self.cluster, self.jobs = cluster, jobs
        self.pred = np.asarray(runtime_s, float)
        # queue order within a priority (the engine's): arrival unless the policy reorders
        self.order = jobs.arrival if order_s is None else np.asarray(order_s, float)
        self.horizon_s, self.max_hold_s, self.big_gpus = horizon_s, max_hold_s, big_gpus
        self.plan_jobs = plan_jobs  # drain for the first this many pending big jobs (None: all)
        n, g = cluster.shape
        self.rows = np.flatnonzero(cluster.nodes.gpus >= big_gpus)
        self.slot_end = np.where(cluster.slot_exists, -np.inf, np.inf)
        self.slot_start = np.full((n, g), np.inf)
        self.resident: dict[int, dict[int, list[int]]] = {}
        self.pending: set[int] = set()
        self.start = np.full(len(jobs), np.nan)
        self.reserved = 0.0
        self.shadow = np.full(n, np.inf)
        self.ahead_of = np.full(n, np.inf)
        self.rank: dict[int, int] = {}
        self.now = 0.0
        self.dirty = True
        self.component = Drain()
        self.providers = SimpleNamespace(fresh=self._fresh)
        self._masks: dict[int, tuple] = {}
        self.replans = 0
        self.remaining = remaining
        self._row = cluster.nodes.gpus >= big_gpus
        self._e = np.full((0, 3), -1, np.int64)  # (job, node, slot) per resident entry
        self._free: list[int] = []
        self._e_of: dict[int, list[int]] = {}
        self._c_end = np.full(len(jobs), -np.inf)  # cached conditional end per job
        self._c_until = np.full(len(jobs), -np.inf)  # ... valid while now is before this

    def _fresh(self, slot: str):
        if slot == "drain":
            return _Plan(self)
        if slot == "runtime":
            return SimpleNamespace(runtime_s=lambda pod: pod.runtime_s)
        return None

    # -- events -----------------------------------------------------------------------------
    def set_reserved(self, gpus: float) -> None:
        self.reserved = float(gpus)
        self.dirty = True  # the 10-minute origin: shadows of pre-drained nodes move on

    def arrived(self, j: int) -> None:
        self.pending.add(j)
        self.dirty = True

    def started(self, j: int, t: float, placed) -> None:
        if j in self.pending:
            self.pending.discard(j)
            self.dirty = True
        self.start[j] = t
        end = t + self.pred[j] if np.isfinite(self.pred[j]) else -np.inf  # unknown: overdue
        for node, slots in placed:
            if self.remaining is not None and self._row[node]:
                self._add(j, node, slots)
            self.resident.setdefault(node, {})[j] = slots
            self.slot_end[node, slots] = np.maximum(self.slot_end[node, slots], end)
            self.slot_start[node, slots] = np.minimum(self.slot_start[node, slots], t)

    def _add(self, j: int, node: int, slots) -> None:
        for slot in slots:
            if not self._free:  # grow by doubling
                n = len(self._e)
                self._e = np.vstack([self._e, np.full((max(n, 1024), 3), -1, np.int64)])
                self._free = list(range(len(self._e) - 1, n - 1, -1))
            i = self._free.pop()
            self._e[i] = (j, node, slot)
            self._c_until[j] = -np.inf
            self._e_of.setdefault(j, []).append(i)

    def _conditional_end(self) -> np.ndarray:
        """(n, G) predicted free time per GPU, each resident's end given its age now."""
        out = np.where(self.cluster.slot_exists, -np.inf, np.inf)
        e = self._e[self._e[:, 0] >= 0]
        if len(e):
            # each job's answer is cached until its age passes the next run of its history
            stale = e[self._c_until[e[:, 0]] <= self.now, 0]
            if len(stale):
                stale = np.unique(stale)
                end, until = self.remaining.end(stale, self.start[stale], self.now)
                self._c_end[stale] = np.where(np.isfinite(end), end, -np.inf)  # unknown:
                self._c_until[stale] = until  # overdue, as before (effective_end)
            np.maximum.at(out, (e[:, 1], e[:, 2]), self._c_end[e[:, 0]])
        return out

    def left(self, j: int, placed) -> None:
        for i in self._e_of.pop(j, ()):
            self._e[i] = -1
            self._free.append(i)
        for node, _ in placed:
            res = self.resident.get(node, {})
            res.pop(j, None)
            ok = self.cluster.slot_exists[node]
            self.slot_end[node] = np.where(ok, -np.inf, np.inf)
            self.slot_start[node] = np.inf
            for k, slots in res.items():
                e = self.start[k] + self.pred[k] if np.isfinite(self.pred[k]) else -np.inf
                self.slot_end[node, slots] = np.maximum(self.slot_end[node, slots], e)
                self.slot_start[node, slots] = np.minimum(self.slot_start[node, slots],
                                                          self.start[k])
            if np.isfinite(self.shadow[node]):
                self.dirty = True  # a drained node moved: its big job may be due sooner

    # -- the plan ---------------------------------------------------------------------------
    def _replan(self) -> None:
        self.dirty = False
        self.replans += 1
        self._masks.clear()
        r, now = self.rows, self.now
        slot_end = self.slot_end if self.remaining is None else self._conditional_end()
        end = effective_end(slot_end[r], self.slot_start[r], now)
        end = np.where(self.cluster.slot_exists[r], end, np.inf)
        t = drain_times(end, self.big_gpus, now)
        j = self.jobs
        queue = sorted(self.pending, key=lambda x: (-int(j.priority[x]), self.order[x], x))
        queue = queue[:self.plan_jobs] if self.plan_jobs is not None else queue
        shadow, owner = plan_shadows(t, [int(j.pods[x]) for x in queue],
                                 self.reserved / self.big_gpus, self.horizon_s, now)
        self.shadow = np.full(len(self.cluster.nodes), np.inf)
        self.shadow[r] = shadow
        self.ahead_of = np.full(len(self.cluster.nodes), np.inf)  # queue rank of the owner
        self.ahead_of[r] = np.where(owner >= 0, owner, np.inf)
        self.rank = {x: i for i, x in enumerate(queue)}

    def _mask(self, runtime_s: float | None) -> tuple[np.ndarray, np.ndarray]:
        if self.dirty:
            self._replan()
        pod = SimpleNamespace(priority=0, gpus=1, runtime_s=runtime_s)
        rows = self.rows
        ctx = SimpleNamespace(rows=rows, n=len(rows), pod=pod, providers=self.providers,
                              cfg=CFG)
        value = self.component.score(ctx).value
        out = np.ones(len(self.cluster.nodes), bool)
        out[rows] = value > 0
        return out, rows[value <= 0]

    def allowed(self, gpus: int, big: bool) -> np.ndarray:
        if big:
            return np.ones(len(self.cluster.nodes), bool)
        return self.class_off(NCLASS)[0]

    def held_off(self, gpus: int, big: bool) -> tuple[np.ndarray, None]:
        return self.class_off(NCLASS)[1], None

    def class_off(self, b: int) -> tuple[np.ndarray, np.ndarray, None]:
        """(mask, held-off nodes, None) for a pod of run-time class ``b``: the component asked
        with the class's bound. The held-off nodes are busy, so no memo key (they change)."""
        if self.dirty:
            self._replan()
        key = (b, self.now)
        got = self._masks.get(b)
        if got is None or got[0] != key:
            got = self._masks[b] = (key, *self._mask(class_bound(b)))
        return got[1], got[2], None

    def big_off(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(mask, held-off nodes) for big job ``j``: nodes drained for a big job ahead of it
        in the queue, unless ``j`` is predicted to end by their shadow time (EASY's rule: a
        later job does not delay an earlier one's reservation; a 1-pod job would otherwise
        take every node a gang drains, one at a time)."""
        if self.dirty:
            self._replan()
        mine = self.rank.get(j, len(self.rank))
        r = self.rows
        off = r[later_job_off(self.ahead_of[r], mine, self.now, self.pred[j], self.shadow[r])]
        out = np.ones(len(self.cluster.nodes), bool)
        out[off] = False
        return out, off

    def head_off(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(mask, held-off nodes) for a pod past its hold bound that still keeps off the
        nodes drained for the first ``n`` pending big jobs (EASY's guarantee to the head)."""
        if self.dirty:
            self._replan()
        r = self.rows
        off = r[self.ahead_of[r] < n]
        out = np.ones(len(self.cluster.nodes), bool)
        out[off] = False
        return out, off

    def may_take_reserved(self, waited_s: float) -> bool:
        return held_too_long(waited_s, self.max_hold_s)

    def lend(self, node: int, strict_off: bool) -> float | None:
        """A pod placed on a drained node: it must end by the node's shadow time."""
        return float(self.shadow[node]) if strict_off else None

    def emptied(self, node: int) -> None:
        pass


__all__ = ["DrainGate", "HIGH"]
