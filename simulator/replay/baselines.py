"""The openb replay's common policy surface (Pod, Policy) and the five FGD-paper baselines:
random, dot product, best fit, GPU packing, GPU clustering.

Each policy scores feasible nodes (higher is better; the engine breaks ties at random, as
kube-scheduler's selectHost does) and the GPU slots of a node (the engine takes the best slot of
the chosen node, lowest index on ties).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.replay.cluster import MILLI, Cluster
from simulator.replay.data import Nodes, Pods


@dataclass(frozen=True)
class Pod:
    cpu: int
    mem: int
    num_gpu: int
    milli: int
    spec: str

    @property
    def shared(self) -> bool:
        return self.num_gpu == 1 and self.milli < MILLI


class Policy:
    name = "base"
    mode = None  # a replay mode (beyond packing), set by the engine
    pod_index = 0  # index of the pod being scored in the replayed sequence

    def reset(self, cluster: Cluster, trace: Pods) -> None:
        """Called once before the replay; ``trace`` is the whole pod CSV (only FGD may use it)."""
        self.cluster = cluster

    def observe(self, pod: Pod) -> None:
        """The pod has arrived (before it is scored)."""

    def filter(self, pod: Pod, node_ok: np.ndarray) -> np.ndarray | None:
        """Extra hard filter: (N,) bool per node, (N, G) per GPU, or None (baselines)."""
        return None

    def placed(self, node: int, slots: list[int], pod: Pod) -> None:
        """The pod was bound to ``node`` (GPU ``slots``)."""

    def score(self, pod: Pod, node_ok: np.ndarray, slots: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def gpu_milli(nodes: Nodes) -> np.ndarray:
    """(N,) GPU milli of each node, 1 on CPU-only nodes (their GPU shares are then 0, not nan)."""
    return np.maximum(nodes.gpus * MILLI, 1)


def _bestfit_slots(c: Cluster, pod: Pod) -> np.ndarray:
    """Shared GPUs: the GPU with least free milli that fits first (open-gpu-share's choice)."""
    return -c.gpu_free.astype(float)


class RandomFit(Policy):
    name = "random"

    def score(self, pod, node_ok, slots):
        return np.zeros(len(node_ok)), _bestfit_slots(self.cluster, pod)


class DotProduct(Policy):
    """Tetris-style alignment; FGD paper's variant: smallest dot product of free x request."""

    name = "dotprod"

    def score(self, pod, node_ok, slots):
        c = self.cluster
        nd = c.nodes
        gpu_cap = gpu_milli(nd)
        dot = (c.cpu_free / nd.cpu) * (pod.cpu / nd.cpu) + \
              (c.gpu_free.sum(axis=1) / gpu_cap) * (pod.num_gpu * pod.milli / gpu_cap)
        return -dot, _bestfit_slots(c, pod)


class BestFit(Policy):
    """Least remaining (CPU + GPU, each as a share of the node) after placement."""

    name = "bestfit"

    def score(self, pod, node_ok, slots):
        c = self.cluster
        nd = c.nodes
        left = (c.cpu_free - pod.cpu) / nd.cpu + \
               (c.gpu_free.sum(axis=1) - pod.num_gpu * pod.milli) / gpu_milli(nd)
        return -left, _bestfit_slots(c, pod)


class GpuPacking(Policy):
    """Shared GPUs that fit first, then nodes with GPUs in use, then idle nodes."""

    name = "gpupacking"

    def score(self, pod, node_ok, slots):
        c = self.cluster
        partly = (c.gpu_free < MILLI) & c.slot_exists
        busy = partly.any(axis=1).astype(float)
        if pod.shared:
            sharable = partly & (c.gpu_free >= pod.milli) & (c.gpu_free > 0)
            busy = busy + sharable.any(axis=1)
        return busy, _bestfit_slots(c, pod)


class GpuClustering(Policy):
    """Pods with the same GPU request go together: prefer GPUs/nodes already serving that size.

    Our reading of the paper's baseline; ties are broken by best fit.
    """

    name = "gpuclustering"

    def reset(self, cluster, trace):
        super().reset(cluster, trace)
        self.tag = np.zeros(cluster.shape, dtype=np.int64)  # milli of the pods a GPU serves

    def placed(self, node, slots, pod):
        for s in slots:
            if self.tag[node, s] == 0:
                self.tag[node, s] = pod.milli
        if self.cluster.gpu_free[node].sum() == self.cluster.nodes.gpus[node] * MILLI:
            self.tag[node] = 0

    def score(self, pod, node_ok, slots):
        c = self.cluster
        same = (self.tag == pod.milli) & (pod.num_gpu > 0)
        slot_score = same * 2.0 * MILLI - c.gpu_free
        # nodes with no GPU serving this size yet: tightest fit (not random), as a packer would
        left = (c.gpu_free.sum(axis=1) - pod.num_gpu * pod.milli) / gpu_milli(c.nodes) + \
               (c.cpu_free - pod.cpu) / c.nodes.cpu
        return same.sum(axis=1) - 1e-3 * left, slot_score
