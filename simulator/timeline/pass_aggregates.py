"""Node aggregates one scheduling pass of the timeline replay checks fits against.

The reservation (simulator.timeline.reserve) and the draining (simulator.timeline.drain) hold
some pods off some nodes, so a pending shape fits against the aggregates of the nodes its pods
may use: every node, the nodes a held-off pod may use (per run-time class when backfilling),
the nodes a big job may use (not an earlier big job's drained ones), or, for a pod past its
hold bound, every node but the first big jobs' drained ones. Each is built on first use and
kept for the pass (a placement changes them: the engine starts a new ``PassAggregates``).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simulator.timeline.cluster import TimelineCluster
from simulator.timeline.reserve import NCLASS


class PassAggregates:
    """Aggregates over every node and over the nodes held-off pods may use, on demand."""

    def __init__(self, c: TimelineCluster, gate, drain, protect_jobs: int, exempt: np.ndarray,
                 rclass: np.ndarray | None, is_aged: Callable[[int, float], bool]) -> None:
        self.c, self.gate, self.drain, self.protect_jobs = c, gate, drain, protect_jobs
        self.exempt, self.rclass, self.is_aged = exempt, rclass, is_aged
        self._every = None
        self._held = None
        self._cls: dict = {}
        self._aged = None

    def aged(self):  # (aggregates, mask) for a pod past its hold bound
        if self.drain is None or self.protect_jobs <= 0:
            return self.every, None
        if self._aged is None:
            mask, off = self.drain.head_off(self.protect_jobs)
            self._aged = (self.c.aggregates_excluding(off, None), mask)
        return self._aged

    @property
    def every(self):
        if self._every is None:
            self._every = self.c.aggregates()
        return self._every

    def held(self):
        if self._held is None:
            mask = self.gate.allowed(1, False)
            self._held = (self.c.aggregates_excluding(*self.gate.held_off(1, False)), mask)
        return self._held

    def by_class(self, b: int):
        if b < 0 or b >= NCLASS:  # no backfill, or never lent: the strict rule
            return self.held()
        if b not in self._cls:
            mask, off, key = self.gate.class_off(b)
            self._cls[b] = (self.c.aggregates_excluding(off, key), mask)
        return self._cls[b]

    def for_key(self, k: tuple, top: int | None = None):
        if self.drain is not None and k[3] and top is not None:  # EASY: not an earlier
            return self.big(top)[0]  # big job's drained nodes, unless done in time
        return self.every if self.gate is None or k[3] else self.by_class(k[4])[0]

    def big(self, j: int):
        if ("big", j) not in self._cls:
            mask, off = self.drain.big_off(j)
            self._cls["big", j] = (self.c.aggregates_excluding(off), mask)
        return self._cls["big", j]

    def mask(self, j: int, now: float | None = None):
        if self.drain is not None and self.exempt[j]:
            return self.big(j)[1]
        if self.gate is None or self.exempt[j]:
            return None
        if now is not None and self.is_aged(j, now):
            return self.aged()[1]
        return self.by_class(int(self.rclass[j]) if self.rclass is not None else -1)[1]
