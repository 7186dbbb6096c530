"""CPU-rich hosts of a constraint class, kept for the class's CPU-heavy pods (issue 13, pass 3).

A `gpu_spec` class S may run on nodes of very different CPU per GPU: `P100` has 107 nodes of
16 cores for 2 GPUs and 22 of 64 cores for 2 GPUs. S's pods that ask more CPU per GPU than S's
typical node has (P100-only pods of 470 milli and 11.9 cores: 25 cores per GPU) strand GPU
on the CPU-poor nodes and run well only on the CPU-rich ones. ``ClassReserve`` sees S as one
pool at S's average CPU per GPU, so CPU-only pods, unconstrained 1-GPU pods and S's own light
pods filled the 64-core P100 nodes first, and the CPU-heavy P100 pods then landed on 16-core
nodes and stranded the other GPU (`default-spec20`, issue 13's second pass).

``HostReserve`` makes, per class S, a sub-class R_S of S's CPU-heavy pods: CPU per GPU milli
above the GPU-weighted median of S's nodes (rho*). Its hosts H_S are S's nodes above rho*.
Every pod outside R_S (other classes, unconstrained, CPU-only, S's light pods) pays, on H_S,
pressure x what it takes of R_S's capacity there: its GPU milli, or its CPU in R_S's GPU
equivalents (R_S's GPU milli per CPU milli) where that is more. Pressure as in
``ClassReserve``: R_S's share of the arrived GPU request x free cluster GPU / free GPU on H_S.
Classes whose nodes all have the same CPU per GPU (`G2`, `T4`'s 2-GPU nodes) have no H_S.
"""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import MILLI, Cluster
from simulator.replay.reserve import _Pod, spec_models


def rich_threshold(cpu: np.ndarray, gpus: np.ndarray) -> float:
    """GPU-weighted median CPU milli per GPU milli of the nodes (``gpus`` > 0)."""
    ratio = cpu / (gpus * MILLI)
    order = np.argsort(ratio)
    cum = np.cumsum(gpus[order])
    return float(ratio[order][np.searchsorted(cum, cum[-1] / 2.0)])


class HostReserve:
    """Per constraint class S: rho*, the CPU-rich hosts H_S, the arrived demand of R_S."""

    def __init__(self, cluster: Cluster) -> None:
        nd = cluster.nodes
        self.cluster = cluster
        self.gpu_node = nd.gpus > 0
        self.total = 0.0  # GPU milli requested by the arrived pods
        self.sub: dict[frozenset[str], tuple[float, np.ndarray]] = {}  # S -> (rho*, H_S)
        self.demand: dict[frozenset[str], np.ndarray] = {}  # R_S: CPU, memory, GPU milli

    def _subclass(self, models: frozenset[str]) -> tuple[float, np.ndarray]:
        if models not in self.sub:
            nd = self.cluster.nodes
            mask = np.isin(nd.model, list(models)) & self.gpu_node
            if not mask.any():
                self.sub[models] = (np.inf, mask)
            else:
                rho = rich_threshold(nd.cpu[mask].astype(float), nd.gpus[mask].astype(float))
                ratio = nd.cpu / np.maximum(nd.gpus * MILLI, 1)
                self.sub[models] = (rho, mask & (ratio > rho))
        return self.sub[models]

    @staticmethod
    def heavy(pod: _Pod, rho: float) -> bool:
        """The pod strands GPU on S's typical node: a GPU fraction that asks at least a whole
        GPU's share of CPU (the rest of its GPU is left without CPU), or whole GPUs with more
        CPU per GPU than the node has."""
        take = pod.num_gpu * pod.milli
        if not take:
            return False
        if pod.num_gpu == 1 and pod.milli < MILLI:
            return pod.cpu >= rho * MILLI
        return pod.cpu > rho * take

    def observe(self, pod: _Pod) -> None:
        take = pod.num_gpu * pod.milli
        self.total += take
        models = spec_models(pod.spec)
        if models is None or not take:
            return
        rho, hosts = self._subclass(models)
        if hosts.any() and self.heavy(pod, rho):
            d = self.demand.setdefault(models, np.zeros(3))
            d += (pod.cpu, pod.mem, take)

    def cost(self, pod: _Pod) -> np.ndarray | float:
        """(N,) R_S capacity (GPU milli) the pod would take on each node, x pressure."""
        if not self.demand or self.total <= 0:
            return 0.0
        c = self.cluster
        free = c.gpu_free.sum(axis=1).astype(float)
        total_free = float(free.sum())
        allowed = spec_models(pod.spec)
        take = pod.num_gpu * pod.milli
        cost = np.zeros(len(free))
        for models, (cpu, _, gpu) in self.demand.items():
            rho, hosts = self.sub[models]
            if allowed is not None and allowed <= models and self.heavy(pod, rho):
                continue  # the pod is R_S's own demand
            pressure = gpu / self.total * total_free / max(float(free[hosts].sum()), MILLI)
            cost[hosts] += pressure * max(take, pod.cpu * gpu / max(cpu, 1.0))
        return cost
