"""Event-driven replay over time: arrivals, departures, priority FIFO with backfill, gangs.

Every event (an arrival or a departure) runs a scheduling pass: among the pending jobs whose
shape fits somewhere now, the first in (priority, arrival) order is placed, and so on until
nothing pending fits (backfill: a blocked job does not stop later ones). A gang is placed
all-or-nothing; with ``gang=False`` its pods are placed one by one as they fit and hold their
GPUs until the last one starts (the job runs from then), which can deadlock two gangs: a
partial gang waiting more than ``gang_timeout_s`` gives its GPUs back and queues again.
A pass checks fits from per-node aggregates (free whole GPUs, largest free share;
simulator.timeline.pass_aggregates), so a long queue costs O(shapes) per event, not O(jobs).
Which jobs waited blocked in fragments or held is simulator.timeline.blocked.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np

from scheduler_hook.scores.reservation import MAX_HOLD_S, held_too_long
from scheduler_hook.scores.topology_prospect import pack_tiers
from simulator.replay.data import Nodes
from simulator.timeline.blocked import BlockedLog
from simulator.timeline.cluster import TimelineCluster
from simulator.timeline.drain import DrainGate
from simulator.timeline.pass_aggregates import PassAggregates
from simulator.timeline.policies import Placer, trace_of
from simulator.timeline.reserve import NCLASS, ReservationGate, hold_bounds, runtime_class
from simulator.timeline.topology_ends import NodeEnds
from simulator.timeline.workload import Jobs

SAMPLE_S = 600.0


@dataclass
class TimelineResult:
    policy: str
    start: np.ndarray  # per job: start time (NaN = never started)
    frag_blocked: np.ndarray  # per job: blocked while enough GPUs were free in fragments
    held: np.ndarray  # per job: held back by the reservation at least once
    samples: dict[str, np.ndarray]  # t, alloc (%), queue (jobs), queue_gpus, reserved
    frag_events: int  # (pass, shape) episodes: a shape turned blocked-in-fragments
    deadlocks: int  # episodes with >= 2 partial gangs, none able to finish
    gang_restarts: int  # partial gangs that timed out and queued again
    preemptions: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class _Gangs:
    """Partial placements of gangs without gang semantics."""

    def __init__(self) -> None:
        self.placed: dict[int, list[tuple[int, list[int]]]] = {}
        self.since: dict[int, float] = {}


def run_timeline(nodes: Nodes, jobs: Jobs, policy: str, t_start: float, t_end: float,
                 reserved=None, gang: bool = True, gang_timeout_s: float = 6 * 3600.0,
                 reserve_for: str = "gang", seed: int = 0, runtime_s=None,
                 max_hold_s: float | None = None, drain_jobs: int | None = None,
                 hold_multi: float = 1.0, protect_jobs: int = 0,
                 remaining=None, order_s: np.ndarray | None = None,
                 pack: bool = False) -> TimelineResult:
    """Replay ``jobs`` arriving in [t_start, t_end) on ``nodes`` with one policy.

    ``reserved``: an object with ``at(t)`` (whole GPUs to keep on empty nodes), required by the
    reserving policies. ``reserve_for``: the jobs the reservation is for, which may use it
    (``gang``: gang pods; ``big``: gang and 8-GPU pods); every other pod is held off it.
    Jobs arriving before ``t_start`` are not replayed (forecast history) but those still
    running at ``t_start`` start on the cluster. ``runtime_s``: per job, the run time the
    backfilling policies believe (a prediction, or the truth for the oracle).
    ``max_hold_s``: backfilling policies, a pod pending longer may use reserved nodes (the
    component's `held_too_long`; None: its default, 0: no bound); the others hold with no bound.
    ``drain_jobs``: draining policies, plan for the first this many pending big jobs (None: all).
    ``hold_multi``: see `hold_bounds`. ``protect_jobs``: draining policies, a pod past its
    hold bound still keeps off the nodes drained for the first this many big jobs (0: none).
    ``remaining``: draining policies, residents' predicted ends given their age (`DrainGate`;
    None: start + ``runtime_s``).
    ``order_s``: per job, the time it queues by within its priority (None: its arrival, FIFO);
    a pass and the drain plan take pending jobs in (priority, order_s) order.
    ``pack``: a pod of < 8 GPUs goes first where it does not prolong how long an 8-GPU node
    stays taken, by ``runtime_s`` (scores.topology_prospect.pack_tiers, issue 31's rule).
    """
    if reserve_for not in ("gang", "big"):
        raise ValueError("reserve_for must be 'gang' or 'big'")
    wall = time.perf_counter()
    placer = Placer(policy)
    if placer.reserve and reserved is None:
        raise ValueError(f"policy {policy} needs a reserved-GPU schedule")
    c = TimelineCluster(nodes)
    sel = np.flatnonzero((jobs.arrival >= t_start) & (jobs.arrival < t_end))
    placer.reset(c, trace_of(np.repeat(jobs.gpus[sel], jobs.pods[sel]),
                             np.repeat(jobs.milli[sel], jobs.pods[sel])), seed)
    backfill = placer.reserve and placer.backfill
    if backfill and runtime_s is None:
        raise ValueError(f"policy {policy} needs predicted run times")
    hold = (MAX_HOLD_S if max_hold_s is None else max_hold_s) if backfill else 0.0
    if placer.drain:  # issue 28's targeted draining answers the same gate questions
        gate = DrainGate(c, jobs, runtime_s, reserved.horizon_s, hold, drain_jobs,
                         remaining=remaining, order_s=order_s)
    else:
        gate = ReservationGate(c, horizon_s=reserved.horizon_s if backfill else 0.0,
                               max_hold_s=hold) if placer.reserve else None
    drain = gate if placer.drain else None
    rclass = runtime_class(runtime_s) if backfill else None
    leases: list[tuple[int, float]] = []  # (job, lease end) of pods that borrowed a node
    aged_jobs: list[tuple[int, bool]] = []  # (job, took a node its class was held off)
    n = len(jobs)
    start = np.full(n, np.nan)
    where: dict[int, list[tuple[int, list[int]]]] = {}
    okey = jobs.arrival if order_s is None else np.asarray(order_s, float)
    pending: dict[tuple, list] = {}  # shape key -> heap of (-priority, pod rank, order, job)
    blocked = BlockedLog(n)  # the shapes and jobs a pass found blocked in fragments, or held
    departures: list[tuple[float, int]] = []
    wakes: list[tuple[float, int]] = []  # (arrival + hold bound, job): a pass when it ages
    gangs = _Gangs()
    counters = {"deadlocks": 0, "restarts": 0}
    in_deadlock = False
    big_nodes = c.nodes.gpus >= 8
    if pack and runtime_s is None:
        raise ValueError("pack needs predicted run times")
    ends = NodeEnds(len(nodes)) if pack else None
    samples: dict[str, list[float]] = {k: [] for k in ("t", "alloc", "queue", "queue_gpus",
                                                       "reserved", "empty8")}
    pending_jobs = 0
    pending_gpus = 0.0

    exempt = jobs.pods > 1 if reserve_for == "gang" else jobs.gpus >= 8
    hold_j = hold_bounds(jobs.gpus, exempt, hold, hold_multi)

    def key_of(j: int) -> tuple:
        pods = int(jobs.pods[j]) if gang else 1
        cls = int(rclass[j]) if rclass is not None and not exempt[j] else -1
        return (int(jobs.gpus[j]), int(jobs.milli[j]), pods, bool(exempt[j]), cls)

    def push(j: int, k: tuple, rank: int = 0) -> None:
        # without gang semantics pods of gangs queued together interleave (pod 0 of each, then
        # pod 1, ...), as pods created by several gang controllers at once reach the queue
        heapq.heappush(pending.setdefault(k, []),
                       (-int(jobs.priority[j]), rank, float(okey[j]), j))

    def release_pods(pl: list[tuple[int, list[int]]], g: int, m: int) -> None:
        for node, slots in pl:
            c.release(node, slots, g, m)
            placer.changed(node, slots, g, m)
            if backfill and c.whole[node] == c.nodes.gpus[node]:
                gate.emptied(node)

    def packed(j: int, allowed, now: float):
        """The first pack tier (within ``allowed``) the pod fits in, else ``allowed``."""
        g, m = int(jobs.gpus[j]), int(jobs.milli[j])
        fit = c.fits_pod(g, m)
        if allowed is not None:
            fit = fit & allowed
        for tier in pack_tiers(ends.effective(now), c.empty(), big_nodes,
                               now + float(np.nan_to_num(runtime_s[j]))):
            if (fit & tier).any():
                return tier if allowed is None else allowed & tier
        return allowed

    def place_pods(j: int, count: int, allowed, now: float | None = None
                   ) -> list[tuple[int, list[int]]] | None:
        g, m = int(jobs.gpus[j]), int(jobs.milli[j])
        if ends is not None and now is not None and g < 8:
            allowed = packed(j, allowed, now)
        out = []
        for _ in range(count):
            pick = placer.choose(g, m, allowed)
            if pick is None:  # cannot happen after the aggregate check; undo to stay safe
                release_pods(out, g, m)
                return None
            node, slot = pick
            slots = c.place(node, slot, 0, 0, g, m)
            placer.changed(node, slots, g, m)
            out.append((node, slots))
        return out

    def aged(j: int, now: float) -> bool:
        """Pending longer than the hold bound: no longer held off reserved nodes."""
        return hold_j[j] > 0 and held_too_long(now - jobs.arrival[j], hold_j[j])

    def pass_aggregates() -> PassAggregates:  # a placement changes them: new each time
        return PassAggregates(c, gate, drain, protect_jobs, exempt, rclass, aged)

    def fits(k: tuple, agg, top: int | None = None, now: float = 0.0) -> bool:
        a = agg.aged()[0] if top is not None and aged(top, now) else agg.for_key(k, top)
        return a.fits(k[0], k[1], k[2])

    def start_job(j: int, now: float, pl) -> None:
        nonlocal pending_jobs, pending_gpus
        where[j] = pl
        start[j] = now
        pending_jobs -= 1
        pending_gpus -= float(jobs.gpu_request[j])
        heapq.heappush(departures, (now + float(jobs.duration[j]), j))
        if placer.drain:
            drain.started(j, now, pl)
        if ends is not None:
            ends.occupy(j, [nd for nd, _ in pl], now, now + float(np.nan_to_num(runtime_s[j])))

    def lend(j: int, pl, strict) -> None:
        """A held-off pod placed: lease the empty node it took, if it took one."""
        for node, _ in pl:
            end = gate.lend(node, not strict[node])
            if end is not None:
                leases.append((j, end))

    def schedule(now: float) -> None:
        if gate is not None:
            gate.now = now
        agg = pass_aggregates()
        while True:
            best = None
            for k, heap in pending.items():
                if heap and (best is None or heap[0] < pending[best][0]) and \
                        fits(k, agg, heap[0][-1], now):
                    best = k
            if best is None:
                break
            j = heapq.heappop(pending[best])[-1]
            if gang or jobs.pods[j] == 1:
                old = aged(j, now)
                lent = backfill and not exempt[j] and rclass[j] < NCLASS and not old
                strict = gate.allowed(1, False).copy() if lent else None
                held_mask = agg.mask(j) if old else None
                pl = place_pods(j, int(jobs.pods[j]), agg.mask(j, now), now)
                if pl is None:
                    break
                if lent:
                    lend(j, pl, strict)
                if old:
                    aged_jobs.append((j, any(not held_mask[nd] for nd, _ in pl)))
                start_job(j, now, pl)
            else:  # one pod of a gang, without gang semantics
                pl = place_pods(j, 1, agg.mask(j, now), now)
                if pl is None:
                    break
                gangs.placed.setdefault(j, []).extend(pl)
                gangs.since.setdefault(j, now)
                if len(gangs.placed[j]) == jobs.pods[j]:
                    gangs.since.pop(j)
                    start_job(j, now, gangs.placed.pop(j))
            agg = pass_aggregates()
        blocked.record(now, pending, agg)

    def check_gangs(now: float) -> bool:
        """Time out partial gangs, count deadlock episodes; True if GPUs were given back."""
        nonlocal in_deadlock
        if gang or not gangs.placed:
            in_deadlock = False
            return False
        late = [j for j, t in gangs.since.items() if now - t > gang_timeout_s]
        for j in late:
            release_pods(gangs.placed.pop(j), int(jobs.gpus[j]), int(jobs.milli[j]))
            gangs.since.pop(j)
            counters["restarts"] += 1
            # the gang is submitted again: all its pods are new, behind every pod waiting
            k = key_of(j)
            pending[k] = [e for e in pending.get(k, []) if e[-1] != j]
            heapq.heapify(pending[k])
            for r in range(int(jobs.pods[j])):
                push(j, k, 1000 * counters["restarts"] + r)
        partial = list(gangs.placed)
        free8 = int((c.whole[big_nodes] >= 8).sum())
        stuck = len(partial) >= 2 and all(
            int(jobs.pods[j]) - len(gangs.placed[j]) > free8 for j in partial)
        if stuck and not in_deadlock:
            counters["deadlocks"] += 1
        in_deadlock = stuck
        return bool(late)

    # Jobs that arrived before t_start and would still run then are on the cluster at start
    # (the forecaster's history doubles as the cluster's past): no empty-cluster transient.
    early = np.flatnonzero((jobs.arrival < t_start) & (jobs.arrival + jobs.duration > t_start))
    for j in early:
        for _ in range(int(jobs.pods[j])):
            placer.observe(int(jobs.gpus[j]), int(jobs.milli[j]))
        pl = place_pods(int(j), int(jobs.pods[j]), None)
        if pl is not None:
            where[int(j)] = pl
            if placer.drain:
                drain.started(int(j), float(jobs.arrival[j]), pl)
            if ends is not None:
                ends.occupy(int(j), [nd for nd, _ in pl], float(jobs.arrival[j]),
                            float(jobs.arrival[j] + np.nan_to_num(runtime_s[j])))
            heapq.heappush(departures, (float(jobs.arrival[j] + jobs.duration[j]), int(j)))
    order = sel  # arrivals, already sorted by time
    ai = 0
    next_sample = t_start
    now = t_start
    while True:
        t_arr = float(jobs.arrival[order[ai]]) if ai < len(order) else np.inf
        t_dep = departures[0][0] if departures else np.inf
        t_wake = wakes[0][0] if wakes else np.inf
        now = min(t_arr, t_dep, t_wake)
        if next_sample <= min(now, t_end):  # one sample, then look at the events again
            if gate is not None:
                gate.set_reserved(reserved.at(next_sample))
                schedule(next_sample)  # a lower reservation may release held pods
            if check_gangs(next_sample):
                schedule(next_sample)
            samples["t"].append(next_sample)
            samples["alloc"].append(c.alloc_share)
            samples["queue"].append(pending_jobs)
            samples["queue_gpus"].append(pending_gpus)
            samples["reserved"].append(0.0 if gate is None else reserved.at(next_sample))
            samples["empty8"].append(float((c.whole[big_nodes] >= 8).sum()))
            next_sample += SAMPLE_S
            continue
        if now >= t_end:
            break
        if t_wake < min(t_arr, t_dep):  # a pending pod passes the hold bound
            _, j = heapq.heappop(wakes)
            if not np.isfinite(start[j]):
                schedule(now)
            continue
        if t_dep <= t_arr:
            _, j = heapq.heappop(departures)
            pl = where.pop(j)
            release_pods(pl, int(jobs.gpus[j]), int(jobs.milli[j]))
            if placer.drain:
                drain.left(j, pl)
            if ends is not None:
                ends.vacate(j, [nd for nd, _ in pl])
        else:
            j = int(order[ai])
            ai += 1
            for _ in range(int(jobs.pods[j])):
                placer.observe(int(jobs.gpus[j]), int(jobs.milli[j]))
            k = key_of(j)
            for r in range(1 if gang else int(jobs.pods[j])):
                push(j, k, r)
            pending_jobs += 1
            pending_gpus += float(jobs.gpu_request[j])
            if hold_j[j] > 0:
                heapq.heappush(wakes, (now + hold_j[j] + 1e-3, j))
            if placer.drain and exempt[j]:
                drain.arrived(j)
            if not fits(k, pass_aggregates()):
                # nothing freed: only it could start
                blocked.record(now, pending, pass_aggregates())
                continue
        schedule(now)
    for j in sel:
        blocked.flag(int(j), key_of(int(j)), float(jobs.arrival[j]),
                     float(start[j]) if np.isfinite(start[j]) else t_end)
    extra = {}
    if backfill:
        lj = np.array([x[0] for x in leases], np.int64)
        le = np.array([x[1] for x in leases], float)
        over = start[lj] + jobs.duration[lj] - le if len(lj) else np.zeros(0)
        extra = {"backfill_jobs": lj, "overrun_s": over,
                 "aged_jobs": np.array([x[0] for x in aged_jobs], np.int64),
                 "aged_took": np.array([x[1] for x in aged_jobs], bool)}
    return TimelineResult(policy, start, blocked.frag, blocked.held,
                          {k: np.asarray(v) for k, v in samples.items()},
                          blocked.events, counters["deadlocks"], counters["restarts"],
                          0, time.perf_counter() - wall, extra)
