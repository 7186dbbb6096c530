"""Which jobs of the timeline replay waited blocked in fragments or held by the reservation.

After each scheduling pass every pending shape is read against the aggregates of all nodes:
it fits (then only the reservation kept it waiting: held), or enough GPUs are free but only in
fragments (blocked in fragments), or there is not enough room. The pass times are kept per
shape, so that at the end a job is flagged when such a pass fell between its arrival and its
start; a shape turning blocked-in-fragments counts as one fragmentation event.
"""
from __future__ import annotations

import bisect

import numpy as np


class BlockedLog:
    """Per shape, the passes that found it blocked in fragments or held; per job, the flags."""

    def __init__(self, n: int) -> None:
        self.frag = np.zeros(n, bool)  # per job: blocked while enough GPUs were free
        self.held = np.zeros(n, bool)  # per job: held back by the reservation at least once
        self.blocked_at: dict[tuple, list[float]] = {}  # shape -> passes found in fragments
        self.held_at: dict[tuple, list[float]] = {}
        self.state: dict[tuple, int] = {}  # last pass outcome per key: 0 fits, 1 fragments, 2 held
        self.events = 0  # (pass, shape) episodes: a shape turned blocked-in-fragments

    def record(self, now: float, pending: dict[tuple, list], agg) -> None:
        """Read every pending shape after the pass at ``now`` (``agg``: the pass's
        simulator.timeline.pass_aggregates view; its every-node aggregates built on demand)."""
        every = None
        for k, heap in pending.items():
            if not heap:
                self.state.pop(k, None)
                continue
            g, m, pods = k[:3]
            every = every or agg.every
            if every.fits(g, m, pods):
                s = 2  # fits but for the reservation
            elif every.free_enough(g, m, pods):
                s = 1
            else:
                s = 0
            if s == 1:
                self.blocked_at.setdefault(k, []).append(now)
                if self.state.get(k) != 1:
                    self.events += 1
            elif s == 2:
                self.held_at.setdefault(k, []).append(now)
            self.state[k] = s

    def flag(self, j: int, k: tuple, arrival: float, t1: float) -> None:
        """Flag job ``j`` (shape ``k``) if a pass in [arrival, t1] found its shape blocked."""
        for times, arr in ((self.blocked_at.get(k), self.frag), (self.held_at.get(k), self.held)):
            if times:
                i = bisect.bisect_left(times, arrival)
                if i < len(times) and times[i] <= t1:
                    arr[j] = True
