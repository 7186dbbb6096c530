"""Topology replay (issue 31): gangs on racks and blocks of the openb nodes, over time.

The openb node list has no topology, so one is laid on it: racks of ``rack_nodes`` consecutive
nodes, blocks of ``block_racks`` racks (node-label levels, read with scheduler_hook.topology as
the extender reads real labels). A gang whose pods span two racks runs ``spread_rack`` times
longer for its whole life, two blocks ``spread_block`` times (parameters). The defaults, 1.3 and
1.6, are read from the one published measurement in ../shared: Gavel's (Narayanan et al.,
OSDI'20; ../shared/traces/gavel-colocation) throughputs of the same distributed job with its
workers on one server and spread over servers: on P100, consolidated / unconsolidated has
quartiles 1.22-1.93 over 2-8 workers (medians 1.41-1.53); V100 medians 1.91-3.35; K80 about 1
(bench/topology.py prints the table into bench/results/topology.md). 1.3 and 1.6 lie inside the
P100 quartiles. That figure crosses the server boundary, not a rack or block one; no
cross-rack measurement is in ../shared, so the values stay a reading of Gavel's, not a
measurement of racks.

Policies, all with FGD choosing the node inside whatever set of nodes they allow:
- ``fgd``: the gang starts as soon as the cluster can hold it, wherever that is.
- ``required``: what Kueue / KAI required placement do: the gang waits until one rack can hold
  it, then goes to the rack that fits it most tightly.
- ``topology``: the extender's rule (scheduler_hook.scores.topology): the smallest domain that
  holds the gang now (rack, else block); when none does, it waits for the rack that the
  predicted departures (run-time p50 of the running jobs) free first, as long as the time
  already waited plus that predicted wait stays under what spreading would add to its run
  (predicted run time x (slowdown - 1)); else it spreads (a wait is never longer than the cost
  it avoids, however wrong the prediction: the ski-rental bound). Single pods go first to racks
  that cannot hold a gang anyway (whole racks stay free for gangs: fragmentation per domain).
- ``topology-elastic``: ``topology``, and a gang that no rack holds whole starts in the rack that
  holds most of it if that is at least half its pods (`foresight.io/gang-min` = half, assumed);
  the same work then runs on fewer pods, longer (linear scaling, an assumption).
- ``hold`` (topology policies): the first ``hold`` gangs that wait for a rack each hold the rack
  the predicted departures free first for them; other jobs may take a held node only if their
  predicted run ends before the predicted time the gang starts there (EASY backfill per
  domain): 8-GPU singles no longer take every node a waiting gang needs.
- ``reserved`` (topology policies): the gang demand forecast; single pods keep off the racks
  kept whole-free for it, as the extender's `topology.keep_level` does.

The queue is priority then arrival order with backfill, like simulator.timeline.engine (which
this does not change): a pass places the first pending job of each shape that can start, until
none can. The nodes ``hold`` and ``drain`` keep for waiting big jobs are
simulator.timeline.topology_holds.
"""
from __future__ import annotations

import heapq
import time

import numpy as np

from scheduler_hook.scores.drain import MAX_HOLD_S
from scheduler_hook.scores.reservation import held_too_long
from scheduler_hook.scores.topology_prospect import keep_free, pack_tiers
from scheduler_hook.topology import HOSTNAME, encode
from simulator.replay.data import Nodes
from simulator.timeline.cluster import TimelineCluster
from simulator.timeline.policies import Placer, trace_of
from simulator.timeline.reserve import ReservationGate
from simulator.timeline.run import queue_order
from simulator.timeline.topology_ends import NodeEnds
from simulator.timeline.topology_holds import RackHolds
from simulator.timeline.topology_metrics import big_work_gpu_h, summarize
from simulator.timeline.workload import Jobs

RACK, BLOCK = "foresight.io/replay-rack", "foresight.io/replay-block"
POLICIES = ("fgd", "required", "topology")
ELASTIC = "topology-elastic"  # topology, and gangs may start at half their size or more


def openb_levels(nodes: Nodes, rack_nodes: int = 16, block_racks: int = 8):
    """Domains of the laid-on topology (scheduler_hook.topology.Domains)."""
    labels = [{RACK: f"rack-{i // rack_nodes}", BLOCK: f"block-{i // (rack_nodes * block_racks)}"}
              for i in range(len(nodes))]
    return encode(labels, (RACK, BLOCK, HOSTNAME), [str(n) for n in nodes.name])


def run_topology(nodes: Nodes, jobs: Jobs, policy: str, t_start: float, t_end: float,
                 runtime_p50: np.ndarray | None = None, spread_rack: float = 1.3,
                 spread_block: float = 1.6, rack_nodes: int = 16, block_racks: int = 8,
                 seed: int = 0, wait_share: float = 1.0, keep_racks: bool = True,
                 hold: int = 0, hold_pick: str = "predicted", reserved=None,
                 regrow: bool = False, reserve_nodes: bool = False, pack: bool = False,
                 elastic_wait: bool = False, pack_racks: bool = False, drain: int = 0,
                 drain_hold_s: float = MAX_HOLD_S, big_order: float = 0.0) -> dict:
    """Replay jobs arriving in [t_start, t_end); per job: start (NaN: never), run time.
    ``wait_share``: the topology policy waits while the wait stays under this share of the
    spreading cost; ``keep_racks``: it sends single pods to racks that cannot hold a gang;
    ``hold``: how many waiting gangs hold a rack (see the module doc), the rack the predicted
    departures free first (``hold_pick`` "predicted"), the one with most room now ("free"), or
    no rack: the whole-free nodes of the block with most of them, up to the gang ("collect");
    ``reserved``: the gang demand forecast (``.at(t)`` GPUs, simulator.timeline.forecast): single
    pods keep off the whole-free racks that hold it (scores.topology_prospect.keep_free) unless
    pending longer than the reservation's hold bound; ``regrow`` (elastic): a gang started smaller
    takes free room in its rack after each pass until whole (PyTorch elastic scales up when
    nodes join), and its remaining work runs on the larger size; ``reserve_nodes``: single pods
    are also held off empty nodes as issue 28's reservation holds them (simulator.timeline.reserve
    ReservationGate) for the ``reserved`` gang GPUs, under any policy; pods pending longer than
    the reservation's hold bound (300 s) are held off neither racks nor nodes; ``pack``
    (topology policies): a pod of < 8 GPUs goes first where it does not prolong how long an
    8-GPU node stays taken (scores.topology_prospect.pack_tiers, by predicted run times);
    ``pack_racks`` (with pack): then on taken nodes of racks that cannot hold a 4-pod gang
    before it ends anyway (long runners together, so that the other racks drain);
    ``elastic_wait``: an elastic gang waits for a whole rack as a static one does and starts
    smaller only where it would spread; ``drain`` (topology policies): the first ``drain``
    pending big jobs (gangs and 8-GPU pods, queue order) each drain one rack, the one their
    shape is predicted to free first in (issue 28's plan per domain, predicted ends read as
    issue 28 reads overdue ones: scores.drain.plan_domain_shadows); other jobs take a drained
    node only if predicted to end by its shadow time, and pods of < 8 GPUs pending longer than
    ``drain_hold_s`` are not held; ``big_order`` (topology policies): big jobs queue by
    arrival + this x their predicted run time (shortest predicted first, aged by waiting:
    simulator.timeline.run.queue_order; 0: arrival order)."""
    if policy not in (*POLICIES, ELASTIC):
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}, "
                         f"{ELASTIC}")
    elastic = policy == ELASTIC
    policy = "topology" if elastic else policy
    if policy == "topology" and runtime_p50 is None:
        raise ValueError("the topology policy needs predicted run times")
    if drain and (hold or policy != "topology"):
        raise ValueError("drain is a topology policy rule and replaces hold")
    wall = time.perf_counter()
    dom = openb_levels(nodes, rack_nodes, block_racks)
    rack, block = dom.codes[RACK], dom.codes[BLOCK]
    nr, nb = int(rack.max()) + 1, int(block.max()) + 1
    c = TimelineCluster(nodes)
    if reserve_nodes and reserved is None:
        raise ValueError("reserve_nodes needs the reserved gang GPUs (reserved=)")
    gate = ReservationGate(c) if reserve_nodes else None  # any policy: fgd's is the ablation
    placer = Placer("fgd")
    sel = np.flatnonzero((jobs.arrival >= t_start) & (jobs.arrival < t_end))
    placer.reset(c, trace_of(np.repeat(jobs.gpus[sel], jobs.pods[sel]),
                             np.repeat(jobs.milli[sel], jobs.pods[sel])), seed)
    n = len(jobs)
    start, run = np.full(n, np.nan), jobs.duration.astype(float).copy()
    spread = np.zeros(n, np.int8)  # 0 one rack, 1 racks of one block, 2 blocks
    size = jobs.pods.astype(np.int64).copy()  # pods a job runs on (elastic: fewer)
    size0 = size.copy()  # pods it started with
    end_at = np.full(n, np.nan)  # its departure (a regrown gang's earlier entries are stale)
    growing: dict[int, list] = {}  # elastic gang started smaller -> [time, pod-seconds left]
    segments: dict[int, list[tuple[float, float]]] = {}  # (from, work GPU-s per s) if regrown
    where: dict[int, list[tuple[int, list[int]]]] = {}
    nodes_of: dict[int, list[int]] = {}  # the nodes each started job ran on
    node_end = np.zeros(len(nodes))  # predicted time the node's last pod ends
    departures: list[tuple[float, int]] = []
    pending: dict[tuple, list] = {}
    pred = runtime_p50 if runtime_p50 is not None else jobs.duration
    pred = np.where(np.isfinite(pred), pred, jobs.duration)
    okey = queue_order(jobs, pred, big_order if policy == "topology" else 0.0)
    okey = jobs.arrival if okey is None else okey
    ends = NodeEnds(len(nodes))  # pack, drain: each node's predicted end
    gang_node = nodes.gpus >= 8
    # the nodes held for waiting gangs (hold) or drained for pending big jobs (drain)
    rh = RackHolds(jobs, nodes, c, rack, block, pred, node_end, ends, hold_pick, drain,
                   drain_hold_s)
    free_for = rh.free_for

    def occupy(j: int, nds: list[int], now: float) -> None:
        ends.occupy(j, nds, now, now + pred[j] * run[j] / jobs.duration[j])

    def place(j: int, count: int, allowed: np.ndarray | None, now: float = 0.0
              ) -> list | None:
        g, m = int(jobs.gpus[j]), int(jobs.milli[j])
        if rh.any_held():
            ok = free_for(j, now)
            allowed = ok if allowed is None else allowed & ok
        out = []
        for _ in range(count):
            pick = placer.choose(g, m, allowed)
            if pick is None:
                for node, slots in out:
                    c.release(node, slots, g, m)
                    placer.changed(node, slots, g, m)
                return None
            slots = c.place(pick[0], pick[1], 0, 0, g, m)
            placer.changed(pick[0], slots, g, m)
            out.append((pick[0], slots))
        return out

    def slots_now(g: int) -> np.ndarray:
        return c.whole // g

    def start_smaller(j: int, rcap: np.ndarray, now: float) -> list | None:
        r = int(np.argmax(rcap))
        size[j] = int(min(jobs.pods[j], rcap[r]))
        return place(j, size[j], rack == r, now)

    def try_gang(j: int, now: float) -> list | None:
        g, p = int(jobs.gpus[j]), int(jobs.pods[j])
        s = slots_now(g)
        if rh.any_held():
            s = np.where(free_for(j, now), s, 0)
        if s.sum() < p:
            return None
        if policy == "fgd":
            return place(j, p, None)
        rcap = np.bincount(rack, weights=s, minlength=nr)
        fit = np.flatnonzero(rcap >= p)
        if len(fit):
            r = int(fit[np.argmin(rcap[fit])])  # best fit: the tightest rack that holds it
            return place(j, p, rack == r, now)
        if policy == "required":
            return None
        smaller = elastic and rcap.max() >= max(1, p // 2)  # the largest size one rack holds
        if smaller and not elastic_wait:
            return start_smaller(j, rcap, now)
        bcap = np.bincount(block, weights=s, minlength=nb)
        bfit = np.flatnonzero(bcap >= p)
        cost = pred[j] * ((spread_rack if len(bfit) else spread_block) - 1.0)
        waited = now - float(jobs.arrival[j])
        if waited + float(rh.rack_times(j, now).min()) - now <= wait_share * cost:
            return None  # a rack frees before spreading would have cost more: wait for it
        if smaller:  # elastic_wait: smaller in one rack instead of spread (no GPU-time lost)
            return start_smaller(j, rcap, now)
        if len(bfit):
            b = int(bfit[np.argmin(bcap[bfit])])
            return place(j, p, block == b, now)
        return place(j, p, None, now)

    def try_single(j: int, now: float) -> list | None:
        g, m = int(jobs.gpus[j]), int(jobs.milli[j])
        away = None  # racks kept whole-free for the gang demand forecast (the extender's rule)
        if reserved is not None and not held_too_long(now - float(jobs.arrival[j])):
            if policy == "topology":
                away = ~keep_free(rack, c.whole.astype(float), nodes.gpus.astype(float),
                                  reserved.at(now))[0]
            if gate is not None:  # and off the empty nodes issue 28's reservation keeps
                gate.set_reserved(reserved.at(now))
                ok = gate.allowed(1, False)
                away = ok if away is None else away & ok
        if policy != "topology":
            return place(j, 1, away, now)
        bases = []
        if keep_racks:  # racks that cannot hold a 4x8 gang first
            rcap = np.bincount(rack, weights=c.whole // 8, minlength=nr)
            bases.append(rcap[rack] < 4 if away is None else (rcap[rack] < 4) & away)
        tiers: tuple = ()
        if pack and g < 8:  # where it does not keep an 8-GPU node taken longer, first
            tiers = pack_tiers(ends.effective(now), c.empty(), gang_node,
                               now + float(pred[j]), rack if pack_racks else None)
        fits = c.fits_pod(g, m) & free_for(j, now)
        for base in [*bases, away]:
            for tier in (*tiers, None):
                if base is None and tier is None:
                    continue
                allowed = tier if base is None else base if tier is None else base & tier
                if (fits & allowed).any():
                    return place(j, 1, allowed, now)
        return place(j, 1, away, now)

    def start_job(j: int, now: float, pl: list) -> None:
        rh.started(j)
        where[j] = pl
        nodes_of[j] = [nd for nd, _ in pl]
        start[j] = now
        racks = {int(rack[nd]) for nd, _ in pl}
        blocks = {int(block[nd]) for nd, _ in pl}
        spread[j] = 2 if len(blocks) > 1 else 1 if len(racks) > 1 else 0
        run[j] = jobs.duration[j] * (spread_block if spread[j] == 2 else
                                     spread_rack if spread[j] == 1 else 1.0) \
            * jobs.pods[j] / size[j]  # elastic: the same work on fewer pods (linear scaling)
        end_pred = now + pred[j] * (run[j] / jobs.duration[j])
        for nd, _ in pl:
            node_end[nd] = max(node_end[nd], end_pred)
        heapq.heappush(departures, (now + run[j], j))
        end_at[j], size0[j] = now + run[j], size[j]
        if pack or drain:
            occupy(j, nodes_of[j], now)
        if regrow and size[j] < jobs.pods[j]:
            growing[j] = [now, float(size[j] * run[j])]
            segments[j] = [(now, float(jobs.gpus[j] * size[j]))]

    def grow(now: float) -> None:
        """Elastic gangs started smaller take the room their rack has now."""
        for j in list(growing):
            g, r = int(jobs.gpus[j]), int(rack[nodes_of[j][0]])
            k = int(np.where(free_for(j, now) & (rack == r), slots_now(g), 0).sum())
            k = min(k, int(jobs.pods[j] - size[j]))
            pl = place(j, k, rack == r, now) if k > 0 else None
            if pl is None:
                continue
            t, left = growing[j]
            left -= size[j] * (now - t)  # pod-seconds done at the old size
            size[j] += k
            where[j] += pl
            nodes_of[j] += [nd for nd, _ in pl]
            if pack or drain:
                occupy(j, [nd for nd, _ in pl], now)
            end_at[j] = now + left / size[j]
            run[j] = end_at[j] - start[j]
            heapq.heappush(departures, (end_at[j], j))
            segments[j].append((now, float(g * size[j])))
            growing[j] = [now, left]
            if size[j] >= jobs.pods[j]:
                del growing[j]

    def schedule(now: float) -> None:
        failed: set[tuple] = set()
        rh.refresh(now, pending)  # the holds' predicted start times, the drain plan
        while True:
            heads = sorted((h[0], k) for k, h in pending.items() if h and k not in failed)
            if not heads:
                break
            for (_, _, j), k in heads:
                pl = try_gang(j, now) if jobs.pods[j] > 1 else try_single(j, now)
                if pl is None:
                    failed.add(k)
                    if jobs.pods[j] > 1 and policy == "topology" and \
                            (j in rh.holds or len(rh.holds) < hold):
                        rh.hold_rack(j, now)
                    continue
                heapq.heappop(pending[k])
                start_job(j, now, pl)
                if drain and (k[2] > 1 or k[0] >= 8):
                    rh.drain_plan(now, pending)  # a big job left the queue: the next one drains
                break
        if growing:
            grow(now)

    early = np.flatnonzero((jobs.arrival < t_start) & (jobs.arrival + jobs.duration > t_start))
    for j in early:
        pl = place(int(j), int(jobs.pods[j]), None)
        if pl is not None:
            start_job(int(j), float(jobs.arrival[j]), pl)
    ai = 0
    while True:
        t_arr = float(jobs.arrival[sel[ai]]) if ai < len(sel) else np.inf
        t_dep = departures[0][0] if departures else np.inf
        now = min(t_arr, t_dep)
        if now >= t_end:
            break
        if t_dep <= t_arr:
            t, j = heapq.heappop(departures)
            if t != end_at[j]:
                continue  # an elastic gang that grew since: it leaves later
            growing.pop(j, None)
            if pack or drain:
                ends.vacate(j, nodes_of[j])
            g, m = int(jobs.gpus[j]), int(jobs.milli[j])
            for nd, slots in where.pop(j):
                c.release(nd, slots, g, m)
                placer.changed(nd, slots, g, m)
        else:
            j = int(sel[ai])
            ai += 1
            k = (int(jobs.gpus[j]), int(jobs.milli[j]), int(jobs.pods[j]))
            heapq.heappush(pending.setdefault(k, []), (-int(jobs.priority[j]),
                                                       float(okey[j]), j))
        schedule(now)
    return {"policy": ELASTIC if elastic else policy, "start": start, "run": run,
            "spread": spread, "size": size0, "nodes": nodes_of, "segments": segments,
            "seconds": time.perf_counter() - wall}


__all__ = ["BLOCK", "ELASTIC", "POLICIES", "RACK", "big_work_gpu_h", "openb_levels",
           "run_topology", "summarize"]
