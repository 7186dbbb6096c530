"""MIG replay over time: MIG pods arrive, queue, run and leave on MIG nodes whose geometry is
static or re-planned by the geometry planner (`scheduler_hook.mig_plan.plan`, the code behind
`foresight mig plan`).

A node carries one geometry on every GPU (mig-parted's `devices: all`); a pod takes one
instance of its profile. Queue: FIFO per profile, and a pod of any profile starts as soon as an
instance of its profile is free (backfill across profiles). Placement among the nodes with a
free instance: the extender's MIG score (`scheduler_hook.scores.mig`: fragmentation against the
mix of profiles seen so far, weight FRAG_WEIGHT, plus packing), first best by node name.

Re-planning (``demand`` given): every ``period_s`` the planner gets the nodes and a demand per
profile; a node it changes is drained (no new pod placed on it; the planner charges this as
its drain cost) and, once empty, is down for ``downtime_s`` and comes back with the new
geometry. A node re-split less than ``min_gap_s`` ago, draining or down, is passed to the planner
as busy (left as it is): at most one re-split per node per ``min_gap_s``. A drain that has not
emptied the node after ``drain_max_s`` (None: never) is called off (it takes pods again). With
``max_drain_pods``, a node running more pods is passed as busy too: with heavy-tailed run times
a full node takes most of a day to empty, and its drained capacity idles meanwhile; with
``max_draining``, at most that many nodes drain at once (the plan's changes with fewest pods
to wait for are started first, the rest wait for a later plan).
"""
from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from scheduler_hook import mig
from scheduler_hook.mig_plan import NodeState, candidates, plan
from scheduler_hook.scores.mig import FRAG_WEIGHT, unusable_slices
from simulator.timeline.mig_lend import Lender, LendRule, Slot
from simulator.timeline.mig_workload import MigPods

SAMPLE_S = 600.0
MODELS = ("A100-40GB", "A100-80GB", "H100-80GB")


@dataclass(frozen=True)
class MigNodeSpec:
    name: str
    model: str
    gpus: int = 8


def mig_cluster(per_model: int = 10, gpus: int = 8, models: tuple[str, ...] = MODELS
                ) -> list[MigNodeSpec]:
    return [MigNodeSpec(f"{m.lower()}-{i:02d}", m, gpus) for m in models
            for i in range(per_model)]


@dataclass
class Live:
    """What the cluster shows the planner: pods per profile running and waiting, and the
    pods that finished (count, total run seconds: their mean run time)."""

    running: Counter
    waiting: Counter
    done: Counter
    done_s: Counter

    def mean_run_s(self, p: str, default: float = 3600.0) -> float:
        return self.done_s[p] / self.done[p] if self.done[p] else default


class _Node:
    def __init__(self, spec: MigNodeSpec, config: str | tuple[str, dict]) -> None:
        self.name, self.gpus = spec.name, spec.gpus
        self.model = mig.MODELS[spec.model]
        # a named mig-parted config, or (name, geometry per GPU) for a custom one
        self.config, self.geometry = (config, mig.configs_for(self.model)[config].as_dict) \
            if isinstance(config, str) else (config[0], dict(config[1]))
        self.free: Counter[str] = self.offer()
        self.pods: set[int] = set()
        self.target: tuple[str, dict] | None = None  # draining towards (config, geometry)
        self.drain_since = 0.0
        self.down = False
        self.resplits: list[float] = []

    def offer(self, geometry: dict | None = None) -> Counter[str]:
        return Counter({p: n * self.gpus for p, n in (geometry or self.geometry).items()})

    @property
    def eligible(self) -> bool:
        return self.target is None and not self.down


@dataclass
class MigResult:
    policy: str
    start: np.ndarray                 # per pod: start time (NaN = never started)
    samples: dict[str, np.ndarray]    # t, alloc %, stranded, blocked_idle, waiting_slices
    resplits: dict[str, list[float]]  # node -> re-split start times
    plans: int = 0
    drains_called_off: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def run_mig(specs: list[MigNodeSpec], pods: MigPods, policy: str, t_start: float, t_end: float,
            demand: Callable[[float, "Live"], dict[str, float]] | None = None,
            initial: str | dict[str, str | tuple[str, dict]] = "all-balanced",
            period_s: float = 3600.0,
            downtime_s: float = 300.0, drain_max_s: float | None = 6 * 3600.0,
            min_gap_s: float = 86400.0, max_drain_pods: int | None = None,
            max_draining: int | None = None, custom: bool = False,
            weights: dict[str, float] | None = None,
            hold: frozenset[str] = frozenset(), lend: LendRule | None = None) -> MigResult:
    """Replay the pods arriving in [t_start, t_end) (see the module docstring).

    ``initial``: a config name for every node or node -> config (a name, or (name, geometry)
    for a custom one). ``weights``: the planner's per-profile weights; ``hold``: profiles whose
    instances a plan may not take away (their demand is raised to what the nodes carry now).
    ``demand(t, live)``: the
    planner's demand per profile at t given what the cluster shows then (`Live`); None = the
    geometry stays as it starts. ``lend``: idle 4g/7g instances may be lent to waiting 1g-3g
    pods (`simulator.timeline.mig_lend`); None = never.
    """
    wall, cpu0 = time.perf_counter(), time.process_time()
    nodes = [_Node(s, initial if isinstance(initial, str) else initial[s.name]) for s in specs]
    names = pods.profiles
    prof = [names[i] for i in pods.profile]
    avail: Counter[str] = Counter()
    for nd in nodes:
        avail.update(nd.free)
    queue: dict[str, deque] = {p: deque() for p in names}
    live = Live(Counter(), Counter(), Counter(), Counter())
    seen: Counter[str] = Counter()
    start = np.full(len(pods), np.nan)
    where: dict[int, _Node] = {}
    deps: list[tuple[float, int]] = []
    ups: list[tuple[float, int]] = []
    sel = np.flatnonzero((pods.arrival >= t_start) & (pods.arrival < t_end))
    total = sum(nd.gpus for nd in nodes) * mig.COMPUTE_SLICES
    samples: dict[str, list[float]] = {k: [] for k in (
        "t", "alloc", "stranded", "blocked_idle", "waiting_slices", "resplitting")}
    counts = {"plans": 0, "off": 0}
    memo: dict[tuple, tuple[float, float]] = {}
    mix: dict[tuple[str, int], float] = {}
    compute = {p: mig.profile_compute(p) for p in
               {*names, *(q for nd in nodes for q in nd.model.profiles)}}
    lender = Lender(lend) if lend is not None else None

    def choose(p: str) -> _Node:
        best, cands = None, []
        for nd in nodes:
            if nd.free.get(p, 0) > 0 and nd.eligible:
                key = (p, tuple(sorted(nd.free.items())))
                got = memo.get(key)
                if got is None:
                    after = dict(nd.free)
                    after[p] -= 1
                    got = memo[key] = (unusable_slices(after, mix) - unusable_slices(
                        dict(nd.free), mix), sum(compute[q] * n
                                                 for q, n in after.items()))
                cands.append((nd, *got))
        lo, hi = min(c[1] for c in cands), max(c[1] for c in cands)
        lmax = max(c[2] for c in cands)
        for nd, inc, left in cands:  # the extender's MIG score (scores/mig.py MigPlacement)
            frag = 1.0 - (inc - lo) / (hi - lo) if hi > lo else 1.0
            pack = 1.0 - left / lmax if lmax > 0 else 1.0
            v = FRAG_WEIGHT * frag + (1 - FRAG_WEIGHT) * pack
            if best is None or v > best[0] + 1e-12:
                best = (v, nd)
        return best[1]

    def schedule(now: float) -> None:
        if lender:
            lender.close(now, queue, avail)
        for p in names:
            q = queue[p]
            while q and (avail[p] > 0 or (lender and lender.avail[p] > 0)):
                j = q.popleft()
                live.waiting[p] -= 1
                live.running[p] += 1
                if avail[p] > 0:  # a lent instance only when no node has a free one
                    nd = choose(p)
                    nd.free[p] -= 1
                    avail[p] -= 1
                else:
                    nd = lender.take(p)
                nd.pods.add(j)
                where[j] = nd
                start[j] = now
                heapq.heappush(deps, (now + float(pods.duration[j]), j))
        if lender:
            lender.lend(now, queue, avail, nodes)

    def begin_split(nd: _Node, now: float) -> None:
        cfg, geo = nd.target
        nd.resplits.append(now)
        nd.down, nd.target = True, None
        nd.config, nd.geometry = cfg, geo
        heapq.heappush(ups, (now + downtime_s, nodes.index(nd)))

    def replan(now: float) -> None:
        counts["plans"] += 1
        states = []
        for nd in nodes:
            busy = not nd.eligible or (nd.resplits and now - nd.resplits[-1] < min_gap_s) or (
                max_drain_pods is not None and len(nd.pods) > max_drain_pods) or (
                lender is not None and lender.busy(nd))
            geo = nd.target[1] if nd.target else nd.geometry
            states.append(NodeState(nd.name, nd.model, nd.gpus, "mixed", nd.config,
                                    nd.offer(geo), [str(j) for j in sorted(nd.pods)],
                                    bool(busy)))
        want = demand(now, live)
        if hold:  # the plan may add instances of these profiles, never take them away
            have = Counter()
            for st in states:
                have.update(st.offer)
            want = {**want, **{p: max(want.get(p, 0.0), float(have[p])) for p in hold}}
        pl = plan(states, want, custom=custom, weights=weights)
        by_name = {nd.name: nd for nd in nodes}
        rows = sorted((r for r in pl.nodes if r.changed), key=lambda r: (len(r.drain), r.node))
        if max_draining is not None:  # drain budget: the changes with fewest pods first
            rows = rows[:max(0, max_draining - sum(nd.target is not None for nd in nodes))]
        for row in rows:
            nd = by_name[row.node]
            st = next(s for s in states if s.name == nd.name)
            c = next(c for c in candidates(st, custom) if c.name == row.proposed)
            nd.target, nd.drain_since = (c.name, dict(c.geometry)), now
            for p, n in nd.free.items():
                avail[p] -= n
            if not nd.pods:
                begin_split(nd, now)

    def sample(now: float) -> None:
        nonlocal mix
        for nd in nodes:  # drains that take too long are called off
            if nd.target is not None and drain_max_s is not None and \
                    now - nd.drain_since > drain_max_s:
                nd.target = None
                avail.update(nd.free)
                counts["off"] += 1
        tot = sum(seen.values())
        new = {(p, 1): n / tot for p, n in seen.items()} if tot else {}
        if new.keys() != mix.keys() or any(abs(v - mix[k]) > 0.01 for k, v in new.items()):
            mix = new
            memo.clear()
        used = sum(compute[p] for j, nd in where.items() for p in (prof[j],))
        structural = sum(nd.gpus * mig.stranded_compute(nd.geometry, nd.model) for nd in nodes)
        waiting = {p for p in names if queue[p]}
        idle = sum(compute[p] * n for nd in nodes for p, n in nd.free.items()
                   if n > 0 and (p not in waiting or not nd.eligible)) if waiting else 0
        if lender and waiting:
            idle += sum(compute[p] * n for s in lender.slots for p, n in s.free.items()
                        if n > 0 and (p not in waiting or s.state != "open"))
        samples["t"].append(now)
        samples["alloc"].append(100.0 * used / total)
        samples["stranded"].append(float(structural))
        samples["blocked_idle"].append(float(idle + (structural if waiting else 0)))
        samples["waiting_slices"].append(float(sum(compute[p] * len(queue[p]) for p in names)))
        samples["resplitting"].append(float(sum(not nd.eligible for nd in nodes)))

    ai, next_sample = 0, t_start
    next_plan = t_start if demand is not None else np.inf
    while True:
        t_arr = float(pods.arrival[sel[ai]]) if ai < len(sel) else np.inf
        t_dep = deps[0][0] if deps else np.inf
        t_up = ups[0][0] if ups else np.inf
        t_lend = lender.next_time() if lender else np.inf
        now = min(t_arr, t_dep, t_up, t_lend, next_sample, next_plan)
        if now >= t_end:
            break
        if now == next_sample:
            sample(now)
            next_sample += SAMPLE_S
        elif now == next_plan:
            replan(now)
            next_plan += period_s
        elif now == t_lend:
            lender.fire(now, avail)
        elif now == t_up:
            nd = nodes[heapq.heappop(ups)[1]]
            nd.down = False
            nd.free = nd.offer()
            avail.update(nd.free)
        elif now == t_dep:
            _, j = heapq.heappop(deps)
            nd = where.pop(j)
            live.running[prof[j]] -= 1
            live.done[prof[j]] += 1
            live.done_s[prof[j]] += now - start[j]
            if isinstance(nd, Slot):
                lender.depart(nd, prof[j], j, now)
            else:
                nd.pods.discard(j)
                nd.free[prof[j]] += 1
                if nd.eligible:
                    avail[prof[j]] += 1
                elif nd.target is not None and not nd.pods:
                    begin_split(nd, now)
        else:
            j = int(sel[ai])
            ai += 1
            queue[prof[j]].append(j)
            live.waiting[prof[j]] += 1
            seen[prof[j]] += 1
        schedule(now)
    return MigResult(policy, start, {k: np.asarray(v) for k, v in samples.items()},
                     {nd.name: nd.resplits for nd in nodes}, counts["plans"], counts["off"],
                     time.perf_counter() - wall, time.process_time() - cpu0,
                     extra=dict(lender.stats) if lender else {})
