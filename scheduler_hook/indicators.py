"""Failure-mode indicators of the cluster, from the extender's state, as Prometheus gauges.

Three leading indicators of what users feel: fragmentation (GPUs free, yet a job of that shape
cannot start because the free GPUs are scattered), queue waiting time, and gangs holding part of
what they need while waiting for the rest. Computed from ClusterState (the same arrays scoring
reads) when the state has changed since the last scrape, never per scheduling request; the
pending ages alone are refreshed per scrape (now - creationTimestamp).
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np
from prometheus_client import Gauge

SHAPES = (1, 2, 4, 8)  # whole GPUs on one node

GPUS_FREE = Gauge("foresight_cluster_gpus_free",
                  "Whole-GPU equivalents free on healthy, schedulable GPUs")
GPUS_SCHEDULABLE = Gauge("foresight_cluster_gpus_schedulable",
                         "GPUs that pods of this shape could take right now", ["shape"])
FRAGMENTATION = Gauge("foresight_cluster_fragmentation_ratio",
                      "1 - schedulable / free for this shape (0 when nothing is free)", ["shape"])
QUEUE_PENDING = Gauge("foresight_queue_pending_pods", "Pending GPU pods per queue", ["queue"])
QUEUE_OLDEST = Gauge("foresight_queue_oldest_pending_seconds",
                     "Age of the oldest pending GPU pod per queue", ["queue"])
PENDING_SHAPE = Gauge("foresight_pending_pods_by_shape",
                      "Pending pods asking this many whole GPUs (1, 2, 4, 8)", ["shape"])
GANGS_PARTIAL = Gauge("foresight_gangs_partially_placed",
                      "Gangs with some members bound and some still waiting")
GANG_OLDEST = Gauge("foresight_gang_partial_oldest_seconds",
                    "How long the longest-waiting partially placed gang has waited")
GPUS_UNHEALTHY = Gauge("foresight_cluster_gpus_unhealthy",
                       "GPUs the health component keeps from new pods, by first reason",
                       ["reason"])
UNHEALTHY_REASONS = ("drained", "xid", "ecc_dbe")
DOMAINS = Gauge("foresight_cluster_domains",
                "Topology domains per node-label level (scheduler_hook.topology)", ["level"])
DOMAINS_FREE = Gauge("foresight_cluster_domains_free",
                     "Topology domains of this level with every GPU free", ["level"])
DOMAIN_FRAGMENTATION = Gauge("foresight_cluster_domain_fragmentation_ratio",
                             "Share of the free GPUs that lie in domains of this level not wholly "
                             "free (a gang that needs a whole domain cannot use them)", ["level"])
MIG_FREE = Gauge("foresight_mig_devices_free", "Free MIG devices per profile", ["profile"])
MIG_STRANDED = Gauge("foresight_mig_slices_stranded",
                     "MIG compute slices no MIG shape seen can use (in no instance, or free in "
                     "a profile nobody asks for)")


def capacity(state: Any) -> dict[str, Any]:
    """GPUs free and schedulable per shape, and unhealthy GPUs by reason (under state.lock)."""
    with state.lock:
        live = state.live & state.schedulable
        usable = state.usable[live]
        free = np.where(usable, state.free_milli[live], 0.0)
        exists = state.gpu_exists[live]
        drained, xid = state.drained[live], state.xid_fatal[live]
        dbe = state.ecc_dbe[live] > 0
    whole = (free >= 1000.0).sum(axis=1)  # GPUs with nothing on them, per node
    out: dict[str, Any] = {"free": float(free.sum() / 1000.0), "schedulable": {}}
    for k in SHAPES:
        out["schedulable"][str(k)] = float(((whole // k) * k).sum())
    first = {"drained": exists & drained, "xid": exists & ~drained & xid,
             "ecc_dbe": exists & ~drained & ~xid & dbe}
    out["unhealthy"] = {r: int(first[r].sum()) for r in UNHEALTHY_REASONS}
    return out


def domains(state: Any) -> dict[str, tuple[int, int, float]]:
    """Per topology level: (domains, domains with every GPU free, fragmentation ratio)."""
    from scheduler_hook.topology import state_domains

    with state.lock:
        dom = state_domains(state)
        live = state.live & state.schedulable & (state.gpu_count > 0)
        gpus = np.where(live, state.usable.sum(axis=1), 0)
        whole = np.where(live, (state.usable & (state.free_milli >= 1000.0)).sum(axis=1), 0)
    out = {}
    for level in dom.levels:
        c = dom.codes[level]
        m = (c >= 0) & live
        k = len(dom.values[level])
        total = np.bincount(c[m], weights=gpus[m], minlength=k)
        free = np.bincount(c[m], weights=whole[m], minlength=k)
        has = total > 0
        all_free = has & (free >= total)
        frag = 1.0 - free[all_free].sum() / free.sum() if free.sum() > 0 else 0.0
        out[level] = (int(has.sum()), int(all_free.sum()), float(frag))
    return out


def waiting(state: Any, now: float) -> dict[str, Any]:
    """Pending pods and oldest age per queue; partially placed gangs and the oldest's wait."""
    with state.lock:
        pend = state.waiting.pending()
        partial = state.waiting.partial_gangs()
    queues: dict[str, list[float]] = {}
    shapes = {str(k): 0 for k in SHAPES}
    for p in pend:
        if p.gpus in SHAPES:
            shapes[str(int(p.gpus))] += 1
        queues.setdefault(p.queue, []).append(now - p.created if p.created > 0 else math.nan)
    gang_waits = []
    for members in partial.values():
        born = [m.created for m in members if m.pending and m.created > 0] or \
            [m.created for m in members if m.created > 0]
        gang_waits.append(now - min(born) if born else 0.0)
    return {"queues": {q: (len(a), max((x for x in a if x == x), default=0.0))
                       for q, a in queues.items()},
            "gangs_partial": len(partial), "gang_oldest": max(gang_waits, default=0.0),
            "pending_shapes": shapes}


class Indicators:
    """Sets the gauges from a ClusterState; `refresh()` is cheap when nothing changed."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self._seen: int | None = None  # state.version of the capacity gauges
        self._queues: set[str] = set()
        self._lock = threading.Lock()

    def _mig(self) -> None:
        from scheduler_hook.mig_k8s import cluster_mig

        st = self.state
        with st.lock:
            free, stranded = cluster_mig(list(st.nodes.values()), st.mig_free, st.mig_counts)
        for p, n in free.items():
            MIG_FREE.labels(p).set(n)
        MIG_STRANDED.set(stranded)

    def refresh(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            if self.state.version != self._seen:
                cap = capacity(self.state)
                GPUS_FREE.set(cap["free"])
                for shape, n in cap["schedulable"].items():
                    GPUS_SCHEDULABLE.labels(shape).set(n)
                    FRAGMENTATION.labels(shape).set(1.0 - n / cap["free"] if cap["free"] > 0
                                                    else 0.0)
                for reason, n in cap["unhealthy"].items():
                    GPUS_UNHEALTHY.labels(reason).set(n)
                self._mig()
                for level, (n, n_free, frag) in domains(self.state).items():
                    DOMAINS.labels(level).set(n)
                    DOMAINS_FREE.labels(level).set(n_free)
                    DOMAIN_FRAGMENTATION.labels(level).set(frag)
            self._seen = self.state.version
            w = waiting(self.state, now)
            for q in self._queues - set(w["queues"]):  # a queue that emptied reads 0
                QUEUE_PENDING.labels(q).set(0)
                QUEUE_OLDEST.labels(q).set(0)
            for q, (n, oldest) in w["queues"].items():
                QUEUE_PENDING.labels(q).set(n)
                QUEUE_OLDEST.labels(q).set(oldest)
            self._queues |= set(w["queues"])
            for shape, n in w["pending_shapes"].items():
                PENDING_SHAPE.labels(shape).set(n)
            GANGS_PARTIAL.set(w["gangs_partial"])
            GANG_OLDEST.set(w["gang_oldest"])


def refresh(state: Any) -> None:
    """Refresh the gauges of `state` (one Indicators per state, made on first use)."""
    ind = state.__dict__.get("_indicators")
    if ind is None:
        ind = state.__dict__["_indicators"] = Indicators(state)
    ind.refresh()
