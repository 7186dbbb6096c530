"""In-memory cluster state, per node and per GPU, kept as numpy arrays for vectorized scoring.

Rows are nodes; columns of the 2-D arrays are GPU slots (padded to the widest node) or resident
pods (padded to `max_residents`). A node or pod event recomputes only that node's row, so a
watch stream costs O(pods on the node) per event and scoring never rebuilds the whole table.
Readers and writers share one lock; scoring holds it for a few milliseconds.
"""
from __future__ import annotations

import threading
from collections import Counter
from operator import itemgetter
from typing import Any

import numpy as np

from scheduler_hook import mig_k8s
from scheduler_hook.nodeinfo import (  # noqa: F401  (re-exported: the names' old home)
    DRAINED_ANNOTATION, FATAL_XIDS, HEALTH_ANNOTATION, MEMORY_LABEL, POWER_CAP_KEY, RACK_LABELS,
    REGION_LABEL, SBE_PENALTY, SHARING_LABEL, THROTTLE_PENALTY, NodeInfo, parse_node)
from scheduler_hook.podspec import PodRequest, parse_pod
from scheduler_hook.waiting import WaitBook, wait_info


class ClusterState:
    """Nodes, bound pods and the shape mix seen so far; see module docstring."""

    def __init__(self, max_gpus: int = 8, max_residents: int = 16) -> None:
        self.lock = threading.RLock()
        self.version = 0
        self.ready = False
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodRequest] = {}
        self.by_node: dict[str, set[str]] = {}
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self.shape_counts: Counter[tuple[int, int]] = Counter()
        self.mig_counts: Counter[tuple[str, int]] = Counter()  # (profile, count) seen
        self.mig_free: dict[str, dict[str, int]] = {}  # node -> profile -> devices free
        # the pods of shape_counts that carry a GPU-model requirement, by (gpus, milli, terms)
        self.model_shape_counts: Counter[tuple] = Counter()
        self._shape_seen: set[str] = set()
        self.waiting = WaitBook()  # pending GPU pods and gangs (the indicators' view)
        # GPU pods waiting for a node, by key (ExtenderHook.warm_next scores the next one ahead)
        self.pending: dict[str, PodRequest] = {}
        self.workloads: dict[str, int] = {}
        self.racks: dict[str, int] = {"": 0}
        self._free_rows: list[int] = []
        self._rows_cache: dict[tuple[str, ...], tuple[np.ndarray, list[str]]] = {}
        self._rows_last: tuple[Any, int, tuple[np.ndarray, list[str]]] | None = None
        self.index_version = 0  # bumped whenever a row changes owner (node added/removed)
        self.models_version = 0  # bumped when a row's GPU model label changes in place
        self.labels_version = 0  # bumped when a node's labels change (topology domains)
        self._row_clock = 0     # row_version[r] = clock value of row r's last change
        self._alloc(64, max_gpus, max_residents)

    # ---- storage -------------------------------------------------------------------------
    def _alloc(self, rows: int, gpus: int, residents: int) -> None:
        old = self.__dict__.get("gpu_count")
        n0 = 0 if old is None else len(old)
        new = {
            "live": np.zeros(rows, bool), "schedulable": np.zeros(rows, bool),
            "gpu_count": np.zeros(rows, np.int32), "gpu_mem": np.zeros(rows),
            "power_cap": np.full(rows, np.nan), "rack": np.zeros(rows, np.int32),
            "gpu_model": np.full(rows, "", dtype=object),
            "sharing": np.full(rows, "timeslice", dtype=object),
            "free_milli": np.zeros((rows, gpus)), "gpu_exists": np.zeros((rows, gpus), bool),
            "fb_decl": np.zeros((rows, gpus)), "usable": np.zeros((rows, gpus), bool),
            "gpu_health": np.zeros((rows, gpus)), "free_key": np.zeros(rows, np.int64),
            "row_version": np.zeros(rows, np.int64),
            "drained": np.zeros((rows, gpus), bool), "xid_fatal": np.zeros((rows, gpus), bool),
            "ecc_dbe": np.zeros((rows, gpus)), "ecc_sbe": np.zeros((rows, gpus)),
            "throttle": np.zeros((rows, gpus)),
            "res_code": np.full((rows, residents), -1, np.int32),
            "res_gpu": np.full((rows, residents), -1, np.int32),
            "res_milli": np.zeros((rows, residents)), "res_fb": np.zeros((rows, residents)),
            "res_slo": np.zeros((rows, residents)),
        }
        for key, arr in new.items():
            if old is not None:
                prev = self.__dict__[key]
                arr[tuple(slice(0, s) for s in prev.shape)] = prev
            setattr(self, key, arr)
        self._free_rows.extend(range(rows - 1, n0 - 1, -1))
        self.region = (self.__dict__.get("region") or []) + [""] * (rows - n0)

    def _row_for(self, name: str) -> int:
        if name in self.index:
            return self.index[name]
        if not self._free_rows:
            g, k = self.free_milli.shape[1], self.res_code.shape[1]
            self._alloc(2 * len(self.gpu_count), g, k)
        row = self._free_rows.pop()
        self.index[name] = row
        self._rows_cache.clear()
        self.index_version += 1
        while len(self.names) <= row:
            self.names.append("")
        self.names[row] = name
        return row

    def workload_code(self, workload: str) -> int:
        if workload not in self.workloads:
            self.workloads[workload] = len(self.workloads)
        return self.workloads[workload]

    # ---- events ------------------------------------------------------------------------
    def upsert_node(self, obj: dict | NodeInfo) -> None:
        info = obj if isinstance(obj, NodeInfo) else parse_node(obj)
        with self.lock:
            if info.gpu_count > self.free_milli.shape[1]:
                self._alloc(len(self.gpu_count), info.gpu_count, self.res_code.shape[1])
            if (old := self.nodes.get(info.name)) is None or old.labels != info.labels:
                self.labels_version += 1
            self.nodes[info.name] = info
            self.racks.setdefault(info.rack, len(self.racks))
            self._recompute(info.name)

    def delete_node(self, name: str) -> None:
        with self.lock:
            self.nodes.pop(name, None)
            self.mig_free.pop(name, None)
            row = self.index.pop(name, None)
            if row is not None:
                self._rows_cache.clear()
                self.index_version += 1
                self._row_clock += 1
                self.row_version[row] = self._row_clock
                self.live[row] = False
                self.names[row] = ""
                self._free_rows.append(row)
            self.version += 1

    def upsert_pod(self, obj: dict | PodRequest) -> None:
        pod = obj if isinstance(obj, PodRequest) else parse_pod(obj)
        with self.lock:
            self.observe_shape(pod)
            self.waiting.update(wait_info(pod))
            old = self.pods.get(pod.key)
            if not pod.node and not pod.terminal and (pod.gpus or pod.mig_count):
                self.pending[pod.key] = pod
            else:
                self.pending.pop(pod.key, None)
            if pod.terminal or not pod.node or (pod.gpus == 0 and not pod.mig_count):
                self.pods.pop(pod.key, None)
            else:
                self.pods[pod.key] = pod
                self.by_node.setdefault(pod.node, set()).add(pod.key)
            if old is not None and old.node and old.node != pod.node:
                self.by_node.get(old.node, set()).discard(pod.key)
                self._recompute(old.node)
            if pod.node:
                if pod.key not in self.pods:
                    self.by_node.get(pod.node, set()).discard(pod.key)
                self._recompute(pod.node)

    def delete_pod(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        with self.lock:
            self.waiting.remove(key)
            self.pending.pop(key, None)
            old = self.pods.pop(key, None)
            if old is not None:
                self.by_node.get(old.node, set()).discard(key)
                self._recompute(old.node)

    def observe_shape(self, pod: PodRequest) -> None:
        """Count each pod's GPU shape once: the 'mix seen so far' the fragmentation score uses."""
        if pod.mig_count and pod.key not in self._shape_seen:
            self._shape_seen.add(pod.key)
            self.mig_counts[(pod.mig_profile, pod.mig_count)] += 1
        if pod.gpus and pod.milli > 0 and pod.key not in self._shape_seen:
            self._shape_seen.add(pod.key)
            self.shape_counts[pod.shape] += 1
            if pod.gpu_models:
                self.model_shape_counts[(*pod.shape, pod.gpu_models)] += 1

    def mix_counts(self) -> dict[tuple, float]:
        """Seen shapes: (gpus, milli) for pods free to use any GPU model, (gpus, milli,
        model terms) for the others (counted once, under their requirement)."""
        out: dict[tuple, float] = {k: float(v) for k, v in self.shape_counts.items()}
        for key, v in self.model_shape_counts.items():
            out[key[:2]] -= v
            out[key] = float(v)
        return {k: v for k, v in out.items() if v > 0}

    def row_models(self, rows: np.ndarray) -> np.ndarray:
        """GPU model (`nvidia.com/gpu.product`) of each row, '' where unlabelled."""
        return self.gpu_model[rows]

    def replace_all(self, nodes: list[dict], pods: list[dict]) -> None:
        """A full list: drop everything and load again (first list and every resync)."""
        with self.lock:
            keep_shapes = (self.shape_counts.copy(), set(self._shape_seen),
                           self.model_shape_counts.copy())
            keep_mig = self.mig_counts.copy()
            g, k = self.free_milli.shape[1], self.res_code.shape[1]
            fresh = ClusterState(max_gpus=g, max_residents=k)
            lock, ready, version, clock = self.lock, self.ready, self.version, self._row_clock
            index_version = self.index_version
            fresh.waiting.gang_min = dict(self.waiting.gang_min)  # PodGroups are listed apart
            self.__dict__.update(fresh.__dict__)
            self.lock, self.ready, self.version = lock, ready, version + 1
            self._row_clock = clock + 1  # never reuse a clock value: caches key on it
            # nor an index version: rows are handed out again, maybe to other names
            self.index_version = index_version + 1
            self.shape_counts, self._shape_seen, self.model_shape_counts = keep_shapes
            self.mig_counts = keep_mig
            for n in nodes:
                self.upsert_node(n)
            for p in pods:
                self.upsert_pod(p)

    def replace_nodes(self, nodes: list[dict]) -> None:
        """A full node list (watch resync): upsert all, drop the ones no longer listed."""
        infos = [parse_node(n) for n in nodes]
        with self.lock:
            for gone in set(self.nodes) - {i.name for i in infos}:
                self.delete_node(gone)
            for info in infos:
                self.upsert_node(info)

    def replace_pods(self, pods: list[dict], workload_labels: tuple[str, ...] | None = None
                     ) -> None:
        """A full pod list (watch resync): upsert all, drop the ones no longer listed."""
        parsed = [parse_pod(p, workload_labels) if workload_labels else parse_pod(p)
                  for p in pods]
        with self.lock:
            keys = {p.key for p in parsed}
            self.waiting.keep_only(keys)
            self.pending = {k: p for k, p in self.pending.items() if k in keys}
            for key in [k for k in self.pods if k not in keys]:
                ns, _, name = key.partition("/")
                self.delete_pod(ns, name)
            for pod in parsed:
                self.upsert_pod(pod)

    # ---- row computation ---------------------------------------------------------------
    def _recompute(self, name: str) -> None:
        self.version += 1
        info = self.nodes.get(name)
        if info is None:
            return  # pods on a node we have not seen yet: recomputed when the node arrives
        r = self._row_for(name)
        self._row_clock += 1
        self.row_version[r] = self._row_clock
        g = info.gpu_count
        self.live[r], self.schedulable[r] = True, info.schedulable
        self.gpu_count[r], self.gpu_mem[r] = g, info.gpu_mem_mib
        self.power_cap[r], self.rack[r] = info.power_cap_w, self.racks[info.rack]
        self.region[r] = info.region
        if self.gpu_model[r] != info.gpu_model:
            self.models_version += 1
        self.gpu_model[r] = info.gpu_model
        self.sharing[r] = info.sharing
        exists = np.arange(self.free_milli.shape[1]) < g
        self.gpu_exists[r] = exists
        free = np.where(exists, 1000.0, 0.0)
        fb = np.zeros(len(exists))
        drained = np.full(len(exists), info.drained_all)
        drained[[g for g in info.drained if g < len(exists)]] = True
        self.drained[r] = exists & drained
        for arr, key in ((self.ecc_dbe, "ecc_dbe"), (self.ecc_sbe, "ecc_sbe"),
                         (self.throttle, "throttle")):
            arr[r] = 0.0
            for gi, d in info.health.items():
                if gi < len(exists):
                    arr[r, gi] = d.get(key, 0.0)
        self.xid_fatal[r] = False
        for gi, d in info.health.items():
            if gi < len(exists) and int(d.get("xid", 0)) in FATAL_XIDS:
                self.xid_fatal[r, gi] = True
        # derived once per event so that scoring only gathers: usable slots and their health
        self.usable[r] = exists & ~self.drained[r] & ~self.xid_fatal[r] & (self.ecc_dbe[r] <= 0)
        self.gpu_health[r] = np.where(self.usable[r], 1.0 - SBE_PENALTY * (self.ecc_sbe[r] > 0)
                                      - THROTTLE_PENALTY * (self.throttle[r] > 0), 0.0)
        self.res_code[r], self.res_gpu[r], self.res_milli[r] = -1, -1, 0.0
        self.res_fb[r], self.res_slo[r] = 0.0, 0.0
        K = self.res_code.shape[1]
        pods = sorted((self.pods[k] for k in self.by_node.get(name, ()) if k in self.pods),
                      key=lambda p: p.key)
        if info.mig is not None:  # only MIG nodes have an entry: "no MIG at all" is O(1)
            used = mig_k8s.used_by(pods)
            self.mig_free[name] = {p: n - used.get(p, 0) for p, n in info.mig.capacity}
        else:
            self.mig_free.pop(name, None)
        for i, pod in enumerate(pods):
            milli = 0.0 if pod.mig_count else pod.milli if pod.milli > 0 else (
                min(1000.0, 1000.0 * pod.gpu_memory_mib / info.gpu_mem_mib)
                if info.gpu_mem_mib else 1000.0)
            used = [x for x in pod.gpu_index if 0 <= x < g]
            if not used:  # where it actually runs is unknown: tightest GPUs that fit
                order = np.argsort(np.where(free[:g] >= milli, free[:g], np.inf), kind="stable")
                used = [int(x) for x in order[:pod.gpus] if free[x] >= milli]
            for x in used:
                free[x] -= milli
                fb[x] += pod.gpu_memory_mib or milli / 1000 * info.gpu_mem_mib
            if i < K:  # residents beyond K still count in free_milli, not in interference
                self.res_code[r, i] = self.workload_code(pod.workload)
                self.res_gpu[r, i] = used[0] if len(used) == 1 else -1
                self.res_milli[r, i] = milli * max(1, len(used))
                self.res_fb[r, i] = pod.gpu_memory_mib or milli / 1000 * info.gpu_mem_mib
                self.res_slo[r, i] = pod.slo_min_speed
        self.free_milli[r] = np.maximum(free, 0.0)
        self.fb_decl[r] = fb
        # identity of the multiset of usable free milli: nodes sharing it fragment alike
        self.free_key[r] = hash(tuple(np.sort(np.where(self.usable[r], self.free_milli[r], 0.0))
                                      .astype(np.int64).tolist()))

    # ---- reads ---------------------------------------------------------------------------
    def rows(self, names: list[str]) -> tuple[np.ndarray, list[str]]:
        """Row indices of the known names, in input order, and those names (unknowns dropped).

        The scheduler sends the same feasible-node list pod after pod: answers are cached
        until a node is added or removed, and the same `known` list object is returned.
        """
        last = self._rows_last
        if last is not None and last[0] is names and last[1] == self.index_version:
            return last[2]  # the very tuple ArgsParser reuses: no need to hash 5,000 names
        key = tuple(names)
        hit = self._rows_cache.pop(key, None)
        if hit is not None:
            self._rows_cache[key] = hit  # least recently used goes first: one-node lookups
            if isinstance(names, tuple):  # (bind) must not push out the full node list
                self._rows_last = (names, self.index_version, hit)
            return hit
        try:  # every name known (the usual case): one C-level lookup of them all
            found = itemgetter(*names)(self.index) if names else ()
            out = (np.array(found if len(names) != 1 else (found,), dtype=np.int64),
                   list(names))
        except KeyError:  # some unknown: drop them
            known = [n for n in names if n in self.index]
            out = (np.array([self.index[n] for n in known], dtype=np.int64), known)
        if len(self._rows_cache) >= 16:
            self._rows_cache.pop(next(iter(self._rows_cache)))
        self._rows_cache[key] = out
        if isinstance(names, tuple):
            self._rows_last = (names, self.index_version, out)
        return out

    def all_names(self) -> list[str]:
        return [n for n in self.names if n]
