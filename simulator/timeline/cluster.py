"""Cluster state of the timeline replay: the openb replay's arrays plus departures.

Pods here ask GPUs only (CPU and memory are left at 0: the question is GPU fragmentation).
"""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import MILLI, Cluster
from simulator.replay.data import Nodes


class TimelineCluster(Cluster):
    """`simulator.replay.cluster.Cluster` with ``release`` and cheap fit aggregates."""

    def __init__(self, nodes: Nodes) -> None:
        super().__init__(nodes)
        self.whole = self.nodes.gpus.astype(np.int64).copy()  # fully free GPUs per node
        self.maxfree = np.where(self.nodes.gpus > 0, MILLI, 0).astype(np.int64)
        self.node_free = self.gpu_free.sum(axis=1)  # free milli per node
        self.empty_version = 0  # bumped when a node turns empty or stops being empty
        # running totals, so that the whole-cluster aggregates cost O(1) per decision
        self._hist = np.bincount(self.whole, minlength=self.shape[1] + 1).tolist()
        self._mf_hist = np.bincount(self.maxfree, minlength=MILLI + 1).tolist()
        self._mf_top = int(self.maxfree.max())  # largest free share on any node
        self._whole_sum = int(self.whole.sum())
        self._milli_sum = int(self.node_free.sum())
        self._every: Aggregates | None = None
        self._gone: dict = {}  # aggregates_excluding's kept rows, per key

    def _refresh(self, node: int) -> None:
        row = self.gpu_free[node].tolist()  # a handful of ints: plain Python is quicker
        old_w, old_mf, old_free = int(self.whole[node]), int(self.maxfree[node]), \
            int(self.node_free[node])
        w, mf, free = sum(x >= MILLI for x in row), max(row), sum(row)
        full = int(self.nodes.gpus[node])
        if (old_w == full) != (w == full):
            self.empty_version += 1
        self.whole[node], self.maxfree[node], self.node_free[node] = w, mf, free
        self._hist[old_w] -= 1
        self._hist[w] += 1
        self._mf_hist[old_mf] -= 1
        self._mf_hist[mf] += 1
        if mf > self._mf_top:
            self._mf_top = mf
        while self._mf_top > 0 and not self._mf_hist[self._mf_top]:
            self._mf_top -= 1
        self._whole_sum += w - old_w
        self._milli_sum += free - old_free
        self._every = None

    def place(self, node, first_slot, cpu, mem, num_gpu, milli):
        slots = super().place(node, first_slot, cpu, mem, num_gpu, milli)
        self._refresh(node)
        return slots

    def release(self, node: int, slots: list[int], num_gpu: int, milli: int) -> None:
        """Give back what ``place`` took (the pod left)."""
        if num_gpu == 1 and milli < MILLI:
            self.gpu_free[node, slots[0]] += milli
            self.allocated_milli -= milli
        else:
            self.gpu_free[node, slots] = MILLI
            self.allocated_milli -= MILLI * num_gpu
        self._refresh(node)

    def empty(self) -> np.ndarray:
        """(N,) bool: every GPU of the node is free."""
        return self.whole == self.nodes.gpus

    def fits_pod(self, gpus: int, milli: int) -> np.ndarray:
        """(N,) bool: nodes one GPU-only pod fits on now (what Cluster.feasible answers),
        from the kept per-node aggregates: a fractional pod needs one GPU with that much
        free, a whole-GPU pod that many whole GPUs."""
        return self.maxfree >= milli if milli < MILLI else self.whole >= gpus

    def aggregates(self, allowed: np.ndarray | None = None) -> "Aggregates":
        """What a scheduling pass needs to know whether a shape fits: from the running
        totals for the whole cluster, in O(N) over the ``allowed`` nodes otherwise (a recount:
        the replay asks ``aggregates_excluding``; tests check both against it)."""
        if allowed is None:
            if self._every is None:
                ge, acc = [0] * len(self._hist), 0
                for g in range(len(self._hist) - 1, -1, -1):
                    acc += self._hist[g]
                    ge[g] = acc
                ge += [0] * max(0, 9 - len(ge))
                self._every = Aggregates(ge, self._mf_top,
                                         self._whole_sum, self._milli_sum)
            return self._every
        w, mf, g = self.whole[allowed], self.maxfree[allowed], self.node_free[allowed]
        ge = np.cumsum(np.bincount(w, minlength=9)[::-1])[::-1]  # ge[g]: nodes with >= g
        return Aggregates(ge.tolist(), int(mf.max()) if mf.size else 0, int(w.sum()),
                          int(g.sum()))

    def aggregates_excluding(self, rows: np.ndarray, key: object = None) -> "Aggregates":
        """``aggregates(mask)`` for the mask that is False on ``rows`` alone, from the running
        totals less those rows: O(len(rows)) where the mask costs O(N) (the reservation holds
        pods off a few empty nodes, and a scheduling pass asks this at every placement).
        ``key``: while it stays the same, the rows are the same and unchanged (the reservation
        holds off empty nodes only, and a change to an empty node bumps ``empty_version``), so
        what they take off the totals is kept."""
        every = self.aggregates()
        if not len(rows):
            return every
        gone = self._gone.get(key) if key is not None else None
        if gone is None:
            w, mf = self.whole[rows], self.maxfree[rows]
            ge = np.cumsum(np.bincount(w, minlength=len(every.ge))[::-1])[::-1]
            at = dict(zip(*(x.tolist() for x in np.unique(mf, return_counts=True))))
            gone = (ge.tolist(), mf, at, int(w.sum()), int(self.node_free[rows].sum()))
            if key is not None:  # several keys live at once (one per run-time class)
                if len(self._gone) >= 64:
                    self._gone.clear()
                self._gone[key] = gone
        ge_off, mf, at, whole, milli = gone
        top = every.maxfree
        if self._mf_hist[top] <= at.get(top, 0):  # every node at the top is excluded
            h = np.array(self._mf_hist)
            np.subtract.at(h, mf, 1)
            nz = np.flatnonzero(h)
            top = int(nz[-1]) if len(nz) else 0
        return Aggregates([a - b for a, b in zip(every.ge, ge_off)], top, every.whole - whole,
                          every.milli - milli)


class Aggregates:
    """Free capacity summaries of (part of) the cluster."""

    __slots__ = ("ge", "maxfree", "whole", "milli")

    def __init__(self, ge: list[int], maxfree: int, whole: int, milli: int) -> None:
        self.ge, self.maxfree, self.whole, self.milli = ge, maxfree, whole, milli

    def fits(self, gpus: int, milli: int, pods: int) -> bool:
        """``pods`` pods of ``gpus`` GPUs (``milli`` each) fit, each pod on one node."""
        if milli < MILLI:
            return self.maxfree >= milli
        return len(self.ge) > gpus and self.ge[gpus] >= pods

    def free_enough(self, gpus: int, milli: int, pods: int) -> bool:
        """Enough is free in total, however it is split (whole GPUs for whole-GPU pods)."""
        if milli < MILLI:
            return self.milli >= milli
        return self.whole >= gpus * pods
