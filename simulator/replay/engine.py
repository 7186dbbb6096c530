"""One replay: schedule the tuned pod sequence one by one, no departures, record the curve."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ground.errors import ForesightError
from simulator.replay.cluster import Cluster
from simulator.replay.data import Nodes, Pods, build_workload, unplaceable
from simulator.replay.policies import ABLATIONS, POLICIES, Pod, Policy

CURVE_POINTS = range(0, 131)


@dataclass
class ReplayResult:
    policy: str
    seed: int
    alloc_curve: dict[str, float]
    alloc_at_100: float
    seconds: float
    pods: int = 0
    unscheduled: int = 0
    placements: list[tuple[int, int, list[int]]] = field(default_factory=list, repr=False)
    extra: dict = field(default_factory=dict)  # a replay mode's counters

    def to_json(self) -> dict:
        return {"policy": self.policy, "seed": self.seed, "alloc_curve": self.alloc_curve,
                "alloc_at_100": self.alloc_at_100, "seconds": round(self.seconds, 3),
                "pods": self.pods, "unscheduled": self.unscheduled, **self.extra}


def make_policy(name: str) -> Policy:
    from simulator.replay.memaware import OTHERS  # here: it builds on policies

    known = {**POLICIES, **ABLATIONS, **OTHERS}
    if name not in known:
        raise ForesightError(f"unknown policy {name!r}; choose from {', '.join(known)}")
    return known[name]()


def replay(nodes: Nodes, trace: Pods, policy: str | Policy, seed: int, tune: float = 1.3,
           keep_placements: bool = False, until: int = 130, mode=None) -> ReplayResult:
    """Replay ``trace`` on ``nodes`` with the published protocol and one policy.

    ``until`` < 130 stops once the arrived load reaches that % (the curve then ends there):
    benches that need only ``alloc_at_100`` skip the last pods.
    """
    if not 100 <= until <= 130:
        raise ForesightError("until must be between 100 and 130")
    t0 = time.perf_counter()
    pol = make_policy(policy) if isinstance(policy, str) else policy
    cluster = Cluster(nodes)
    # The protocol leaves a pod that fits nowhere unscheduled; one that fits on no node even
    # when empty would, with its request in the arrived load, end the tuning at its arrival
    # (a typo of 1000000 GPUs: 1 pod replayed): such pods are left out and counted.
    never = unplaceable(trace, nodes)
    if len(never) == len(trace):
        raise ForesightError("every pod asks more GPUs than any node has "
                             f"({int(nodes.gpus.max())}): nothing to replay")
    if len(never):
        trace = trace.take(np.setdiff1d(np.arange(len(trace)), never))
    work = build_workload(trace, cluster.capacity_milli, tune, seed)
    pol.reset(cluster, trace)
    pol.mode = mode
    if mode is not None:
        if hasattr(mode, "allowed"):  # power mode needs the GPU count of each node
            mode.start(len(work), cluster.shape, seed, nodes.gpus)
        else:
            mode.start(len(work), cluster.shape, seed)
    rng = np.random.default_rng(seed)
    cap = cluster.capacity_milli
    thresholds = np.array([n * cap / 100.0 for n in CURVE_POINTS if n <= until])
    curve: dict[str, float] = {}
    next_n, arrived, unscheduled = 0, 0, 0
    placements: list[tuple[int, int, list[int]]] = []
    for i in range(len(work)):
        pod = Pod(int(work.cpu[i]), int(work.mem[i]), int(work.num_gpu[i]),
                  int(work.gpu_milli[i]), str(work.spec[i]))
        pol.pod_index = i
        pol.observe(pod)
        node_ok, slots = cluster.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
        keep = pol.filter(pod, node_ok)
        if keep is not None and keep.ndim == 2:  # per GPU: a node stays if one GPU does
            slots = slots & keep
            node_ok = node_ok & slots.any(axis=1)
        elif keep is not None:
            node_ok, slots = node_ok & keep, slots & keep[:, None]
        cand = np.flatnonzero(node_ok)
        if len(cand):
            node_score, slot_score = pol.score(pod, node_ok, slots)
            s = node_score[cand]
            best = cand[s == s.max()]
            node = int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])
            slot = int(np.argmax(np.where(slots[node], slot_score[node], -np.inf)))
            used = cluster.place(node, slot, pod.cpu, pod.mem, pod.num_gpu, pod.milli)
            pol.placed(node, used, pod)
            if mode is not None:
                mode.placed(i, node, used, pod.milli)
            if keep_placements:
                placements.append((i, node, used))
        else:
            unscheduled += 1
        arrived += pod.num_gpu * pod.milli
        while next_n < len(thresholds) and arrived >= thresholds[next_n]:
            curve[str(next_n)] = round(cluster.alloc_share, 4)
            next_n += 1
        if next_n >= len(thresholds):
            break
    for n in range(next_n, len(thresholds)):  # load never reached: the final allocation
        curve[str(n)] = round(cluster.alloc_share, 4)
    return ReplayResult(pol.name, seed, curve, curve["100"], time.perf_counter() - t0,
                        len(work), unscheduled, placements,
                        ({"unplaceable": len(never)} if len(never) else {})
                        | (mode.report() if mode is not None else {}))
