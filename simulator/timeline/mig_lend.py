"""The MIG replay's lent instances (issue 28 item 4; rules in `scheduler_hook.mig_lend`).

A `Slot` is one idle large (4g/7g) instance of a node re-created as small (1g-3g) instances.
Reconfiguration cost: the slices of the instance being changed serve nobody for
``downtime_s`` each way (instance destroy / create and the device plugin re-advertising;
the rest of the GPU and node keep running: NVIDIA's MIG guide has instances created and
destroyed on a GPU whose other instances are in use, as long as the changed ones are idle).
The replay (`simulator.timeline.mig.run_mig`, ``lend=``) places a small pod on a slot only
when no node has a free instance of its profile, and passes nodes carrying slots to the
planner as busy.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduler_hook import mig
from scheduler_hook.mig_lend import SMALL_MAX, lendable, slot_geometry


@dataclass
class LendRule:
    keep: int = 0              # idle instances of a large profile never lent
    downtime_s: float = 300.0  # each way: destroy + create instances, device plugin restart
    small_too: bool = False    # idle 2g/3g instances may be lent to smaller waiting profiles


@dataclass(eq=False)
class Slot:
    node: Any                 # the replay's node
    big: str                  # the large profile it was lent from
    geometry: Counter         # small instances on it
    free: Counter = field(default_factory=Counter)
    pods: set = field(default_factory=set)
    state: str = "starting"   # starting -> open -> closed -> returning -> (gone)
    since: float = 0.0


class Lender:
    def __init__(self, rule: LendRule) -> None:
        self.rule = rule
        self.slots: list[Slot] = []
        self.avail: Counter[str] = Counter()   # free small instances on open slots
        self.coming: Counter[str] = Counter()  # small instances on slots starting up
        self.events: list[tuple[float, int, Slot]] = []
        self.seq = 0
        self.stats = Counter()

    def busy(self, node: Any) -> bool:
        return any(s.node is node for s in self.slots)

    def next_time(self) -> float:
        return self.events[0][0] if self.events else float("inf")

    def _at(self, t: float, s: Slot) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, s))

    def fire(self, now: float, avail: Counter) -> None:
        """A slot's reconfiguration ended: it opens (small instances up) or, returning, the
        large instance is back on its node."""
        _, _, s = heapq.heappop(self.events)
        if s.state == "starting":
            s.state, s.free = "open", Counter(s.geometry)
            self.coming.subtract(s.geometry)
            self.avail.update(s.free)
        elif s.state == "returning":
            self.slots.remove(s)
            s.node.free[s.big] += 1
            if s.node.eligible:
                avail[s.big] += 1
            self.stats["slot_hours"] += (now - s.since) / 3600.0

    def take(self, p: str) -> Slot:
        """An open slot with a free ``p`` instance, the fullest first (so others empty)."""
        s = max((s for s in self.slots if s.state == "open" and s.free[p] > 0),
                key=lambda s: (len(s.pods), -self.slots.index(s)))
        s.free[p] -= 1
        self.avail[p] -= 1
        self.stats["pods"] += 1
        return s

    def depart(self, s: Slot, p: str, j: int, now: float) -> None:
        s.pods.discard(j)
        s.free[p] += 1
        if s.state == "open":
            self.avail[p] += 1
        elif s.state == "closed" and not s.pods:
            self._return(s, now)

    def _close(self, s: Slot, now: float) -> None:
        if s.state == "open":
            self.avail.subtract(s.free)
        s.state = "closed"
        if not s.pods:
            self._return(s, now)

    def _return(self, s: Slot, now: float) -> None:
        s.state = "returning"
        self._at(now + self.rule.downtime_s, s)

    def close(self, now: float, queue: dict, avail: Counter) -> None:
        """Before placing: slots whose large profile has pods waiting with no free instance
        stop taking pods (fewest pods first, one per waiting pod not yet covered by a slot on
        its way back); empty open slots no waiting pod can use go back."""
        for b in {s.big for s in self.slots}:
            short = len(queue[b]) - avail[b] - sum(
                s.big == b and s.state in ("closed", "returning") for s in self.slots)
            for s in sorted((s for s in self.slots if s.big == b and s.state == "open"),
                            key=lambda s: (len(s.pods), self.slots.index(s)))[:max(0, short)]:
                self._close(s, now)
                self.stats["closed_for_big"] += 1
        for s in [s for s in self.slots if s.state == "open" and not s.pods]:
            if not any(queue[p] for p in s.geometry):
                self._close(s, now)

    def lend(self, now: float, queue: dict, avail: Counter, nodes: list) -> None:
        """After placing: while a small profile has more pods waiting than instances on
        their way, lend one idle large instance (see `scheduler_hook.mig_lend`)."""
        for p in [p for p in queue if queue[p] and mig.profile_compute(p) <= SMALL_MAX]:
            while len(queue[p]) > self.coming[p] + self.avail[p] + avail[p]:
                if not self._lend_one(p, now, queue, avail, nodes):
                    break

    def _lend_one(self, p: str, now: float, queue: dict, avail: Counter, nodes: list) -> bool:
        idle = {b: n for b, n in avail.items() if n > 0}
        order = lendable(idle, {b: len(q) for b, q in queue.items()}, self.rule.keep,
                         mig.profile_compute(p) + 1 if self.rule.small_too else SMALL_MAX + 1)
        for b in order:
            for nd in nodes:
                if not (nd.eligible and nd.free.get(b, 0) > 0 and p in nd.model.profiles):
                    continue
                want = {q: max(0, len(queue[q]) - self.coming[q]) for q in queue
                        if q in nd.model.profiles and mig.profile_compute(q) <= SMALL_MAX}
                geo = slot_geometry(nd.model, nd.geometry, b, want)
                if not geo.get(p):
                    continue
                nd.free[b] -= 1
                avail[b] -= 1
                s = Slot(nd, b, Counter(geo), since=now)
                self.slots.append(s)
                self.coming.update(geo)
                self._at(now + self.rule.downtime_s, s)
                self.stats["lends"] += 1
                return True
        return False
