"""Placement policies of the timeline replay: the openb replay's own classes, wrapped.

`bestfit`, `fgd` and `foresight` are `simulator.replay.policies` unchanged (FGD's mix is the
whole generated workload's, as the published FGD takes the whole trace's; Foresight learns its
mix online from arrivals). `foresight-reserve` adds the hook's reservation with the online
demand forecast, `foresight-flat` the same with a flat-average forecast (the ablation). The backfilling
policies (issue 28) let held-off pods borrow reserved nodes they will give back in time.

Speed: a decision here scores the node of each candidate from per-shape caches on 1-D arrays
(``node_scores``, ``slot``) instead of the policies' (N x G) ``score``; the values are the
same (same numpy expressions, row by row), and tests/test_timeline.py compares them with the
policies' own ``score`` on random cluster states.
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.fragmentation import fragmentation_increase
from simulator.replay.data import Pods
from simulator.replay.policies import FGD, BestFit, Foresight, Pod, Policy, gpu_milli
from simulator.timeline.cluster import TimelineCluster


class TimelineBestFit(BestFit):
    """`BestFit.score` per node from the cluster's kept free-milli sums."""

    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self._cap = gpu_milli(cluster.nodes)

    def touch(self, node: int) -> None:
        pass

    def node_scores(self, pod: Pod, node_ok: np.ndarray) -> np.ndarray:
        c = self.cluster
        left = (c.cpu_free - pod.cpu) / c.nodes.cpu + \
               (c.node_free - pod.num_gpu * pod.milli) / self._cap
        return -left

    def slot(self, pod: Pod, node: int) -> int:
        row = self.cluster.gpu_free[node]
        return int(np.argmax(np.where(row >= pod.milli, -row.astype(float), -np.inf)))


class TimelineLeastAllocated(TimelineBestFit):
    """kube-scheduler's default scoring, NodeResourcesFit LeastAllocated, on GPUs: the integer
    score (allocatable - requested) x 100 / allocatable after placement, ties broken at random
    (selectHost). Stock kube-scheduler scores CPU and memory only; this replay leaves those out,
    so the GPU is scored as a cluster adding ``nvidia.com/gpu`` to the scored resources would.
    A shared GPU is picked as BestFit picks it (the least free GPU that fits)."""

    def node_scores(self, pod: Pod, node_ok: np.ndarray) -> np.ndarray:
        left = self.cluster.node_free - pod.num_gpu * pod.milli
        return np.floor(left * 100 / self._cap)


class _CachedIncrease:
    """FGD's fragmentation increase and the node score from it, kept per pod shape and
    recomputed only on the nodes that changed since (a node's increase depends on that node
    and the mix alone), and of those only on the nodes the pod fits on now: over time most
    decisions touch a handful of nodes, and 1,213 nodes x every decision would cost minutes.
    Subclasses say how a node scores (``_score_rows``)."""

    def _cache_init(self, n: int) -> None:
        self._inc: dict[tuple[int, int], list] = {}
        self._ver = np.zeros(n, np.int64)

    def touch(self, node: int) -> None:
        self._ver[node] += 1

    def node_scores(self, pod: Pod, node_ok: np.ndarray) -> np.ndarray:
        """(N,) the policy's node score for ``pod``, up to date where ``node_ok`` (the nodes
        it fits on; the others are brought up to date when they are asked for)."""
        c, key = self.cluster, (pod.num_gpu, pod.milli)
        ent = self._inc.get(key)
        if ent is None or ent[0] is not self.mix:
            n, g = c.shape
            ent = self._inc[key] = [self.mix, np.zeros(n), np.zeros((n, g)), np.full(n, -1)]
        dirty = np.flatnonzero((self._ver != ent[3]) & node_ok)
        if len(dirty):
            cnt, small = self.stats
            inc = fragmentation_increase(
                c.gpu_free[dirty], c.cpu_free[dirty], self.mix, self.acc[dirty], pod.cpu,
                pod.milli, pod.num_gpu, stats=(cnt[dirty], small[dirty]))
            ent[1][dirty], ent[2][dirty] = self._score_rows(pod, dirty, inc)
            ent[3][dirty] = self._ver[dirty]
        self._last = ent[2]
        return ent[1]

    def slot(self, pod: Pod, node: int) -> int:
        """The GPU the policy's slot score picks on ``node`` (after ``node_scores`` for the
        pod, with ``node`` among the nodes it fits on)."""
        row = self.cluster.gpu_free[node]
        return int(np.argmax(np.where(row >= pod.milli, self._slot_row(row, self._last[node]),
                                      -np.inf)))


class TimelineFGD(_CachedIncrease, FGD):
    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self._cache_init(len(cluster.nodes))

    def _score_rows(self, pod, rows, inc):
        # FGD.score, row by row: the published plugin's quantized score, best usable slot
        with np.errstate(over="ignore"):
            q = np.floor(100.0 / (1.0 + np.exp(np.clip(inc, -1e6, 1e6) / 1000.0)))
        slots = self.cluster.gpu_free[rows] >= pod.milli
        return np.where(slots, q, -1.0).max(axis=1), q

    @staticmethod
    def _slot_row(row, q):
        return q


class TimelineForesight(_CachedIncrease, Foresight):
    # the learned mix is re-read every 500 arrivals (32 in the openb replay): with a half-life
    # of 5,000 pods it barely moves in 500, and each re-read recomputes every cached shape
    refresh = 500
    balance = 0.0  # the stranded-GPU term weighs CPU and memory, which this replay leaves out
    # and so do issue 13's CPU terms (a class's CPU-rich hosts, the spare-CPU tie-break)
    host_weight = 0.0
    whole_tie = "bestfit"
    residue_weight = 0.0  # session 6's residue term: tried on the openb replay only

    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self._cache_init(len(cluster.nodes))
        self._cap = gpu_milli(cluster.nodes)

    def _score_rows(self, pod, rows, inc):
        # Foresight.score, row by row, without the terms this replay leaves at 0 (no GPU-type
        # constraint classes, balance 0, no replay mode: node_scores refuses them)
        c = self.cluster
        slots = c.gpu_free[rows] >= pod.milli
        gpu_left = c.node_free[rows] - pod.num_gpu * pod.milli
        tie = gpu_left / self._cap[rows] + (c.cpu_free[rows] - pod.cpu) / c.nodes.cpu[rows]
        node = (-inc).max(axis=1, initial=-np.inf, where=slots)
        return node - self.fit_weight_for(pod) * tie, inc

    @staticmethod
    def _slot_row(row, inc):
        return -inc - 1e-3 * row

    def node_scores(self, pod, node_ok):
        if (self.reserve.classes or self.balance or self.host_weight or pod.num_gpu == 0
                or self.whole_tie != "bestfit" or self.mode is not None):
            raise NotImplementedError("terms the timeline replay does not use")
        return super().node_scores(pod, node_ok)


POLICIES = {"bestfit": (TimelineBestFit, None), "fgd": (TimelineFGD, None),
            "foresight": (TimelineForesight, None),
            "foresight-reserve": (TimelineForesight, "forecast"),
            "foresight-flat": (TimelineForesight, "flat"),
            # issue 28: reservation with predicted backfill (forecast-following, decaying),
            # the same fed a flat level of equal mean, and fed the truth (future arrivals, run
            # times)
            "foresight-backfill": (TimelineForesight, "forecast"),
            "backfill-flat": (TimelineForesight, "flat-matched"),
            "oracle": (TimelineForesight, "oracle"),
            # issue 28, third try: targeted draining (EASY backfilling with predicted run
            # times) for pending big jobs, plus nodes pre-drained for the forecast; the same
            # with no pre-drain, with a flat level of equal mean, and fed the truth
            "foresight-drain": (TimelineForesight, "forecast"),
            "drain-pending": (TimelineForesight, "none"),
            "drain-flat": (TimelineForesight, "flat-matched"),
            "drain-oracle": (TimelineForesight, "oracle"),
            # the oracle's pre-drain with the predicted run times the forecast policy has:
            # splits drain-oracle's lead into the pre-drain's timing and the true run times
            "drain-oracle-pred": (TimelineForesight, "oracle"),
            # issue 29: the default kube-scheduler's scoring, the baseline every cluster has
            "kube-default": (TimelineLeastAllocated, None)}
DRAIN = ("foresight-drain", "drain-pending", "drain-flat", "drain-oracle", "drain-oracle-pred")
# oracle-fed policies that still plan with the online run-time predictor
PREDICTED_RUNTIME = ("drain-oracle-pred",)
BACKFILL = ("foresight-backfill", "backfill-flat", "oracle", *DRAIN)


class Placer:
    """Chooses (node, first GPU) for one pod with a replay policy; keeps its caches in step
    with departures (the openb replay never releases, so its policies only see `placed`)."""

    def __init__(self, name: str) -> None:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
        self.name = name
        base, self.reserve = POLICIES[name]
        self.backfill = name in BACKFILL
        self.drain = name in DRAIN
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
        node_ok = c.fits_pod(gpus, milli)
        if allowed is not None:
            node_ok &= allowed
        cand = np.flatnonzero(node_ok)
        if not len(cand):
            return None
        pod = Pod(0, 0, gpus, milli, "")
        self.policy.pod_index += 1
        s = self.policy.node_scores(pod, node_ok)[cand]
        best = cand[s == s.max()]
        node = int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        return node, self.policy.slot(pod, node)

    def changed(self, node: int, slots: list[int], gpus: int, milli: int) -> None:
        """The node's GPUs changed (a pod was placed or left): refresh per-node caches.
        FGD's `placed` recomputes the node's level statistics from its current free GPUs."""
        self.policy.placed(node, slots, Pod(0, 0, gpus, milli, ""))
        self.policy.touch(node)


def trace_of(pods_gpus: np.ndarray, pods_milli: np.ndarray) -> Pods:
    """The whole workload as an openb-style pod list (what FGD reads its shape mix from)."""
    n = len(pods_gpus)
    return Pods(np.zeros(n, np.int64), np.zeros(n, np.int64), pods_gpus.astype(np.int64),
                pods_milli.astype(np.int64), np.full(n, "", dtype=object))
