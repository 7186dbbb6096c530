"""What Foresight's replay policy keeps for later: GPU that CPU and memory can still sell, and
GPU models that GPU-type-constrained demand needs (issue 13).

- ``usable_gpu``: the GPU milli a node can still sell to pods that ask ``demand``'s CPU and
  memory per GPU milli (the rest is stranded: its CPU or memory is gone).
- ``constraint_classes``: one class per `gpu_spec` model set of the learned shape mix, with its
  share of the mix's GPU request.
- ``ClassReserve``: arrived demand per class, and the reserve cost of a pod that could run
  outside a class for the class-usable GPU it takes from the class's nodes.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from scheduler_hook.fragmentation import ShapeMix
from simulator.replay.cluster import MILLI, Cluster


class _Pod(Protocol):
    cpu: int
    mem: int
    num_gpu: int
    milli: int
    spec: str


def spec_models(spec: str) -> frozenset[str] | None:
    """The GPU models a `gpu_spec` allows (None = any), keyed like the shape mix's models."""
    models = frozenset(s.strip() for s in spec.split("|") if s.strip()) if spec else frozenset()
    return models or None


def usable_gpu(gpu: np.ndarray, cpu: np.ndarray, mem: np.ndarray,
               demand: np.ndarray) -> np.ndarray:
    """GPU milli the nodes can sell at ``demand`` = (CPU milli, memory MiB, GPU milli) ratios:
    free GPU, capped by what the free CPU and memory cover at those ratios."""
    c, m, g = demand
    if g <= 0:
        return np.asarray(gpu, dtype=float)
    return np.minimum(gpu, np.minimum(np.maximum(cpu, 0) * (g / max(c, 1.0)),
                                      np.maximum(mem, 0) * (g / max(m, 1.0))))


def constraint_classes(mix: ShapeMix, node_models: np.ndarray,
                       ) -> list[tuple[np.ndarray, frozenset[str], float]]:
    """(nodes of S, S, share of the mix's GPU request) for each constraint class S of the mix."""
    req = mix.gpu_milli * mix.num_gpu * mix.freq
    total = float(req.sum())
    share: dict[frozenset[str], float] = {}
    for k, models in enumerate(mix.models):
        if models is not None and req[k] > 0:
            share[models] = share.get(models, 0.0) + float(req[k]) / total
    return [(np.isin(node_models, list(m)), m, q) for m, q in share.items()]


class ClassReserve:
    """Per constraint class S: the arrived demand of S's pods, and the reserve cost.

    The pressure on S is (S's share of the arrived GPU request) x (free GPU milli of the
    cluster) / (free GPU milli on S's models): >= 1 when S's own demand would take all that
    is left of it. A pod that could run outside S pays, on each of S's nodes, pressure x the
    GPU milli that S's pods could have used there and no longer can: the GPU it takes, but
    only as far as the node's CPU and memory could have sold it to S at S's CPU and memory per
    GPU milli, and the CPU or memory it takes where that is what S would run short of.
    ``usable=False`` charges the GPU milli taken, whatever the node's CPU (the rule before).
    """

    def __init__(self, usable: bool = True) -> None:
        self.usable = usable
        self.demand: dict[frozenset[str], np.ndarray] = {}
        self.classes: list[tuple[np.ndarray, frozenset[str], float]] = []

    def observe(self, pod: _Pod) -> None:
        models = spec_models(pod.spec)
        if models is not None and pod.num_gpu:
            d = self.demand.setdefault(models, np.zeros(3))
            d += (pod.cpu, pod.mem, pod.num_gpu * pod.milli)

    def refresh(self, mix: ShapeMix, node_models: np.ndarray) -> None:
        self.classes = constraint_classes(mix, node_models)

    def cost(self, cluster: Cluster, pod: _Pod) -> np.ndarray | float:
        """(N,) GPU milli of constrained classes' capacity the pod would take (x pressure)."""
        if not self.classes or pod.num_gpu == 0:
            return 0.0
        free = cluster.gpu_free.sum(axis=1).astype(float)
        total = float(free.sum())
        allowed = spec_models(pod.spec)
        take = pod.num_gpu * pod.milli
        cost = np.zeros(len(free))
        for mask, models, q in self.classes:
            if allowed is not None and allowed <= models:
                continue  # the pod must run in S: it is S's demand, not a taker
            pressure = q * total / max(float(free[mask].sum()), MILLI)
            d = self.demand.get(models)
            if not self.usable or d is None:
                cost[mask] += pressure * take
                continue
            f, c, m = free[mask], cluster.cpu_free[mask], cluster.mem_free[mask]
            lost = usable_gpu(f, c, m, d) - usable_gpu(np.maximum(f - take, 0), c - pod.cpu,
                                                       m - pod.mem, d)
            cost[mask] += pressure * lost
        return cost
