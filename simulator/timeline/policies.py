"""Placement policies of the timeline replay: the openb replay's own classes, wrapped.

`bestfit`, `fgd` and `foresight` are `simulator.replay.policies` unchanged (FGD's mix is the
whole generated workload's, as the published FGD takes the whole trace's; Foresight learns its
mix online from arrivals). `foresight-reserve` adds the hook's reservation with the online
demand forecast, `foresight-flat` the same with a flat-average forecast (the ablation).
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.fragmentation import fragmentation_increase
from simulator.replay.data import Pods
from simulator.replay.policies import FGD, BestFit, Foresight, Pod, Policy
from simulator.timeline.cluster import TimelineCluster


class _CachedIncrease:
    """FGD's fragmentation increase kept per pod shape and recomputed only on the nodes that
    changed since (a node's increase depends on that node and the mix alone): over time most
    decisions touch a handful of nodes, and 1,213 nodes x every decision would cost minutes."""

    def _cache_init(self, n: int) -> None:
        self._inc: dict[tuple[int, int], tuple] = {}
        self._ver = np.zeros(n, np.int64)

    def touch(self, node: int) -> None:
        self._ver[node] += 1

    def increase(self, pod: Pod, node_ok: np.ndarray) -> np.ndarray:
        c, key = self.cluster, (pod.num_gpu, pod.milli)
        ent = self._inc.get(key)
        if ent is None or ent[0] is not self.mix:
            vals = super().increase(pod, np.ones(len(node_ok), bool))
            ent = self._inc[key] = (self.mix, vals, self._ver.copy())
        else:
            dirty = np.flatnonzero(self._ver != ent[2])
            if len(dirty):
                cnt, small = self.stats
                ent[1][dirty] = fragmentation_increase(
                    c.gpu_free[dirty], c.cpu_free[dirty], self.mix, self.acc[dirty], pod.cpu,
                    pod.milli, pod.num_gpu, stats=(cnt[dirty], small[dirty]))
                ent[2][dirty] = self._ver[dirty]
        return np.where(node_ok[:, None], ent[1], np.inf)


class TimelineFGD(_CachedIncrease, FGD):
    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self._cache_init(len(cluster.nodes))


class TimelineForesight(_CachedIncrease, Foresight):
    # the learned mix is re-read every 500 arrivals (32 in the openb replay): with a half-life
    # of 5,000 pods it barely moves in 500, and each re-read recomputes every cached shape
    refresh = 500
    balance = 0.0  # the stranded-GPU term weighs CPU and memory, which this replay leaves out

    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self._cache_init(len(cluster.nodes))


POLICIES = {"bestfit": (BestFit, None), "fgd": (TimelineFGD, None),
            "foresight": (TimelineForesight, None),
            "foresight-reserve": (TimelineForesight, "forecast"),
            "foresight-flat": (TimelineForesight, "flat")}


class Placer:
    """Chooses (node, first GPU) for one pod with a replay policy; keeps its caches in step
    with departures (the openb replay never releases, so its policies only see `placed`)."""

    def __init__(self, name: str) -> None:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
        self.name = name
        base, self.reserve = POLICIES[name]
        self.policy: Policy = base()

    def reset(self, cluster: TimelineCluster, trace: Pods, seed: int) -> None:
        self.cluster = cluster
        self.policy.reset(cluster, trace)
        self.rng = np.random.default_rng(seed)

    def observe(self, gpus: int, milli: int) -> None:
        self.policy.observe(Pod(0, 0, gpus, milli, ""))

    def choose(self, gpus: int, milli: int, allowed: np.ndarray | None
               ) -> tuple[int, int] | None:
        c = self.cluster
        pod = Pod(0, 0, gpus, milli, "")
        # what Cluster.feasible answers for a GPU-only pod, from the kept per-node aggregates
        if milli < 1000:
            node_ok = c.maxfree >= milli
        else:
            node_ok = c.whole >= gpus
        if allowed is not None:
            node_ok &= allowed
        cand = np.flatnonzero(node_ok)
        if not len(cand):
            return None
        slots = (c.gpu_free >= milli) & node_ok[:, None]
        self.policy.pod_index += 1
        node_score, slot_score = self.policy.score(pod, node_ok, slots)
        s = node_score[cand]
        best = cand[s == s.max()]
        node = int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        slot = int(np.argmax(np.where(slots[node], slot_score[node], -np.inf)))
        return node, slot

    def changed(self, node: int, slots: list[int], gpus: int, milli: int) -> None:
        """The node's GPUs changed (a pod was placed or left): refresh per-node caches.
        FGD's `placed` recomputes the node's level statistics from its current free GPUs."""
        self.policy.placed(node, slots, Pod(0, 0, gpus, milli, ""))
        if isinstance(self.policy, _CachedIncrease):
            self.policy.touch(node)


def trace_of(pods_gpus: np.ndarray, pods_milli: np.ndarray) -> Pods:
    """The whole workload as an openb-style pod list (what FGD reads its shape mix from)."""
    n = len(pods_gpus)
    return Pods(np.zeros(n, np.int64), np.zeros(n, np.int64), pods_gpus.astype(np.int64),
                pods_milli.astype(np.int64), np.full(n, "", dtype=object))
