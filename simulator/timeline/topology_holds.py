"""Nodes held for waiting big jobs in the topology replay (simulator.timeline.topology).

Two rules hold nodes, both EASY backfill per domain: a held node goes to another job only if
that job is predicted to end before the holder is predicted to start there.
- ``hold``: a gang that waits for a rack holds the rack the predicted departures free first for
  it (or the one with most room now, or the whole-free nodes of one block: ``pick``), until it
  starts; its predicted start there is refreshed each pass.
- ``drain``: the first ``drain`` pending big jobs (gangs and 8-GPU pods, queue order) each drain
  the rack their shape is predicted to free first in (issue 28's plan per domain,
  scores.drain.plan_domain_shadows); a job behind in the queue may not take them, a pod of
  < 8 GPUs pending longer than the hold bound may.
"""
from __future__ import annotations

import heapq

import numpy as np

from scheduler_hook.scores.drain import MAX_HOLD_S, plan_domain_shadows
from scheduler_hook.scores.reservation import held_too_long
from simulator.replay.data import Nodes
from simulator.timeline.cluster import TimelineCluster
from simulator.timeline.topology_ends import NodeEnds
from simulator.timeline.workload import Jobs


class RackHolds:
    """Per node, the job it is held for and when that job is predicted to start there.

    ``pred``: per job, the predicted run time; ``node_end``: per node, the predicted end of its
    last pod (the replay updates it in place); ``ends``: the replay's NodeEnds (drain)."""

    def __init__(self, jobs: Jobs, nodes: Nodes, c: TimelineCluster, rack: np.ndarray,
                 block: np.ndarray, pred: np.ndarray, node_end: np.ndarray, ends: NodeEnds,
                 pick: str = "predicted", drain: int = 0,
                 drain_hold_s: float = MAX_HOLD_S) -> None:
        self.jobs, self.nodes, self.c, self.rack, self.block = jobs, nodes, c, rack, block
        self.nr, self.nb = int(rack.max()) + 1, int(block.max()) + 1
        self.pred, self.node_end, self.ends = pred, node_end, ends
        self.pick, self.drain, self.drain_hold_s = pick, drain, drain_hold_s
        self.gang_node = nodes.gpus >= 8
        self.held_by = np.full(len(nodes), -1)  # the gang a node is held for, -1: none
        self.held_t = np.zeros(len(nodes))  # when that gang is predicted to start there
        self.held_rank = np.full(len(nodes), np.inf)  # drain: queue rank of the job it is for
        self.rank: dict[int, int] = {}  # drain: the planned jobs' queue ranks
        self.drained: dict[int, int] = {}  # drain: the rack each planned job drained last
        self.holds: dict[int, int] = {}  # gang -> the rack it holds, until it starts

    def any_held(self) -> bool:
        return bool((self.held_by >= 0).any())

    def free_for(self, j: int, now: float) -> np.ndarray:
        """Nodes job j may take: not held, held for it or a job behind it (drain), or it ends
        before the holder starts; a small pod pending past the drain's hold bound: any."""
        jobs = self.jobs
        if self.drain and jobs.gpus[j] < 8 and held_too_long(now - float(jobs.arrival[j]),
                                                             self.drain_hold_s):
            return np.ones(len(self.nodes), bool)
        return (self.held_by < 0) | (self.held_by == j) | \
            (now + self.pred[j] <= self.held_t) | (self.rank.get(j, np.inf) < self.held_rank)

    def refresh(self, now: float, pending: dict[tuple, list]) -> None:
        """At the start of a pass: the holds' predicted start times, and the drain plan."""
        self.held_by[:] = -1
        for j in list(self.holds):
            self.hold_rack(j, now)
        if self.drain:
            self.drain_plan(now, pending)

    def started(self, j: int) -> None:
        self.holds.pop(j, None)

    def drain_plan(self, now: float, pending: dict[tuple, list]) -> None:
        """Hold the racks the first ``drain`` pending big jobs drain (see the module doc)."""
        c, drain = self.c, self.drain
        big = [h for k, hp in pending.items() if hp and (k[2] > 1 or k[0] >= 8)
               for h in heapq.nsmallest(drain, hp)]
        queue = [h[2] for h in sorted(big)[:drain]]
        t = np.where(self.gang_node, np.where(c.whole >= 8, now,
                                              np.maximum(self.ends.effective(now), now)), np.inf)
        shadow, owner, chosen = plan_domain_shadows(
            t, self.rack, [int(self.jobs.pods[j]) for j in queue],
            [self.drained.get(j, -1) for j in queue])
        ids = np.asarray(queue + [-1])
        self.held_by[:], self.held_t[:] = ids[owner], shadow
        self.held_rank[:] = np.where(owner >= 0, owner, np.inf)
        self.rank.clear()
        self.rank.update({j: i for i, j in enumerate(queue)})
        self.drained.clear()
        self.drained.update(zip(queue, chosen))

    def rack_times(self, j: int, now: float) -> np.ndarray:
        """Per rack, the predicted time it can hold gang j (departures only; inf: never)."""
        c, nodes, rack, nr = self.c, self.nodes, self.rack, self.nr
        g, p = int(self.jobs.gpus[j]), int(self.jobs.pods[j])
        ok = nodes.gpus >= g  # a node frees whole once its last pod has left
        avail = np.where(c.whole >= g, now, np.maximum(self.node_end, now))
        per = np.where(ok, nodes.gpus // g, 0).astype(np.int64)
        a, r = np.repeat(avail, per), np.repeat(rack, per)  # one entry per pod slot
        order = np.lexsort((a, r))
        a, r = a[order], r[order]
        count = np.bincount(r, minlength=nr)
        first = np.concatenate([[0], np.cumsum(count)[:-1]])
        t = np.full(nr, np.inf)
        full = np.flatnonzero(count >= p)
        t[full] = a[first[full] + p - 1]
        return t

    def hold_rack(self, j: int, now: float) -> None:
        """Gang j holds the rack predicted to hold it first among those not held yet; the
        hold stays until j starts, its predicted start time is refreshed each pass."""
        c, rack, block, held_by, holds = self.c, self.rack, self.block, self.held_by, self.holds
        if self.pick == "collect":  # every whole-free node of the block with most, up to p
            g, p = int(self.jobs.gpus[j]), int(self.jobs.pods[j])
            mine = np.flatnonzero((c.whole >= g) & ((held_by < 0) | (held_by == j)))
            if len(mine):
                b = int(np.argmax(np.bincount(block[mine], minlength=self.nb)))
                take = mine[block[mine] == b][:p]
                held_by[take], self.held_t[take] = j, now
            holds.setdefault(j, -1)
            return
        t = self.rack_times(j, now)
        r = holds.get(j)
        if r is None:
            t[[v for v in holds.values() if v >= 0]] = np.inf
            if self.pick == "free":  # the rack with the most room now: fewest pods to drain
                room = np.bincount(rack, weights=c.whole // int(self.jobs.gpus[j]),
                                   minlength=self.nr)
                r = int(np.lexsort((t, -room))[0])
            else:  # the rack the predicted departures free first
                r = int(np.argmin(t))
            if not np.isfinite(t[r]):
                return
            holds[j] = r
        held_by[rack == r], self.held_t[rack == r] = j, max(float(t[r]), now)
