"""Per-node, per-GPU cluster state for the replay, as numpy arrays (vectorized over nodes)."""
from __future__ import annotations

import numpy as np

from simulator.replay.data import Nodes

MILLI = 1000


class Cluster:
    """Free CPU, memory and per-GPU milli of every node; GPU slots past a node's count are 0."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        n, g = len(nodes), int(nodes.gpus.max())
        self.cpu_free = nodes.cpu.astype(np.int64).copy()
        self.mem_free = nodes.mem.astype(np.int64).copy()
        self.slot_exists = np.arange(g)[None, :] < nodes.gpus[:, None]
        self.gpu_free = np.where(self.slot_exists, MILLI, 0).astype(np.int64)
        self.capacity_milli = nodes.gpu_capacity_milli
        self.allocated_milli = 0
        self._access: dict[str, np.ndarray] = {}
        self.shape = (n, g)

    def access(self, spec: str) -> np.ndarray:
        """(N,) bool: nodes whose GPU model the pod's ``gpu_spec`` allows ('' = any)."""
        if spec not in self._access:
            if not spec:
                self._access[spec] = np.ones(len(self.nodes), dtype=bool)
            else:
                allowed = {s.strip() for s in spec.split("|") if s.strip()}
                self._access[spec] = np.isin(self.nodes.model, list(allowed))
        return self._access[spec]

    def feasible(self, cpu: int, mem: int, num_gpu: int, milli: int, spec: str,
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(node mask (N,), slot mask (N, G)): where the pod fits, and which GPUs could take it.

        For a CPU-only pod every slot of a fitting node is marked (the slot is then unused).
        """
        ok = (self.cpu_free >= cpu) & (self.mem_free >= mem)
        if num_gpu == 0:
            return ok, np.broadcast_to(ok[:, None], self.shape)
        ok &= self.access(spec)
        if num_gpu == 1 and milli < MILLI:
            slots = (self.gpu_free >= milli) & ok[:, None]
            return slots.any(axis=1), slots
        whole = self.gpu_free >= MILLI
        ok &= whole.sum(axis=1) >= num_gpu
        return ok, whole & ok[:, None]

    def place(self, node: int, first_slot: int, cpu: int, mem: int, num_gpu: int,
              milli: int) -> list[int]:
        """Allocate the pod; whole-GPU pods take ``first_slot`` then the next fully free GPUs."""
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        if num_gpu == 0:
            return []
        if num_gpu == 1 and milli < MILLI:
            self.gpu_free[node, first_slot] -= milli
            self.allocated_milli += milli
            return [first_slot]
        free = np.flatnonzero(self.gpu_free[node] >= MILLI)
        slots = [first_slot] + [int(s) for s in free if s != first_slot][: num_gpu - 1]
        self.gpu_free[node, slots] = 0
        self.allocated_milli += MILLI * num_gpu
        return slots

    @property
    def alloc_share(self) -> float:
        """Allocated share of the cluster's milli-GPUs, in %."""
        return 100.0 * self.allocated_milli / self.capacity_milli
