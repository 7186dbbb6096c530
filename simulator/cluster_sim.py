"""Event-driven cluster: queueing, placement, co-location and the resulting slowdowns.

Each job carries `work` = its solo run time. While running, it progresses at the speed given
by the interference function for its current partners (GPU sharers and node neighbours), so
co-located jobs really take longer and the truth records every co-location episode.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simulator import interference, sharing
from simulator.config import SimConfig
from simulator.workloads import CATALOGUE, mean_features, solo_features

FEATS = ("sm_active", "sm_occupancy", "dram_active", "pcie")
PATIENCE_S = 6 * 3600.0  # assumption: how long a user lets a pod pend before deleting it


@dataclass
class Pod:
    pid: int
    queue: str
    workload: str
    priority: int
    num_gpu: int
    milli: int
    created: float
    work: float
    feats: dict          # steady-compute solo features (telemetry levels)
    ifeats: dict         # phase-averaged solo features (what partners feel)
    node: int = -1
    gpus: list = field(default_factory=list)
    started: float = np.nan
    finished: float = np.nan
    remaining: float = 0.0
    speed: float = 1.0
    last: float = 0.0
    version: int = 0
    seg_start: float = 0.0
    partners_since: dict = field(default_factory=dict)  # partner pid -> (sharing, since)
    speed_segments: list = field(default_factory=list)  # (t0, t1, speed)
    # H200-calibrated sharing: the pod's mechanism inputs (simulator/sharing.side_features)
    mech: dict = field(default_factory=dict)


class ClusterSim:
    def __init__(self, cfg: SimConfig, spec: dict, rng: np.random.Generator):
        self.cfg, self.spec, self.rng = cfg, spec, rng
        self.p = interference.params()
        # which form gives time-slice / MPS slowdowns: the real H200 measurement's, or the
        # Gavel (V100) calibration of simulator/interference.py
        if cfg.sharing_calibration not in ("gavel", "h200"):
            raise ValueError(f"unknown sharing_calibration {cfg.sharing_calibration!r}")
        self.h200 = cfg.sharing_calibration == "h200"
        self._noise: dict[tuple, float] = {}
        n_mps = int(round(cfg.mps_node_fraction * cfg.nodes))
        self.node_mode = ["mps" if n >= cfg.nodes - n_mps else "timeslice"
                          for n in range(cfg.nodes)]
        if cfg.sharing_calibration == "h200" and 0 < n_mps < cfg.nodes:
            # best-fit placement packs fractional pods onto the lowest-numbered nodes first:
            # spread the MPS nodes evenly so that shared GPUs occur in both modes
            k = cfg.nodes / n_mps
            self.node_mode = ["mps" if int((n + 1) / k) > int(n / k) else "timeslice"
                              for n in range(cfg.nodes)]
        self.free = np.full(cfg.n_gpus, 1000, dtype=int)
        self.gpu_pods: list[set] = [set() for _ in range(cfg.n_gpus)]
        self.node_pods: list[set] = [set() for _ in range(cfg.nodes)]
        self.pods: list[Pod] = []
        self.pending: list[int] = []
        self.heap: list = []
        self.episodes: list[tuple] = []

    # -- placement ------------------------------------------------------------------------
    def _place(self, pod: Pod) -> bool:
        g, cfg = self.cfg.gpus_per_node, self.cfg
        free = self.free.reshape(cfg.nodes, g)
        if pod.milli >= 1000:
            k = pod.num_gpu
            whole = (free == 1000).sum(axis=1)
            fits = np.flatnonzero(whole >= k)
            if len(fits) == 0:
                return False
            node = int(fits[np.argmin(whole[fits])])  # best fit: fewest whole GPUs left
            local = np.flatnonzero(free[node] == 1000)[:k]
        else:
            ok = np.flatnonzero(self.free >= pod.milli)
            if len(ok) == 0:
                return False
            # best fit: the GPU with the least share left (prefer partly used GPUs)
            gi = int(ok[np.argmin(self.free[ok])])
            node, local = gi // g, np.asarray([gi % g])
        pod.node, pod.gpus = node, [int(node * g + i) for i in local]
        for gi in pod.gpus:
            self.free[gi] -= pod.milli
            self.gpu_pods[gi].add(pod.pid)
        self.node_pods[node].add(pod.pid)
        return True

    # -- interference ---------------------------------------------------------------------
    def _sum(self, pids) -> dict:
        return {k: sum(self.pods[q].ifeats[k] for q in pids) for k in FEATS}

    def _refresh_node(self, node: int, t: float) -> None:
        """Recompute the speed of every pod on `node` (one vectorized call per sharing kind)."""
        mode = self.node_mode[node]
        pids = sorted(self.node_pods[node])
        if not pids:
            return
        feats = {k: np.asarray([self.pods[q].ifeats[k] for q in pids]) for k in FEATS}
        node_pcie = float(feats["pcie"].sum())
        pair_pod, pair_sum, pair_others, rest_pcie, partner_maps = [], [], [], [], []
        for i, pid in enumerate(pids):
            pod = self.pods[pid]
            gpu_partners = set().union(*(self.gpu_pods[gi] for gi in pod.gpus)) - {pid}
            for gi in pod.gpus:
                others = self.gpu_pods[gi] - {pid}
                if others:
                    pair_pod.append(i)
                    pair_sum.append(self._sum(others))
                    pair_others.append(sorted(others))
            rest_pcie.append(node_pcie - pod.ifeats["pcie"] - sum(
                self.pods[q].ifeats["pcie"] for q in gpu_partners))
            partners = {q: mode for q in gpu_partners}
            partners.update({q: "node" for q in self.node_pods[node] - gpu_partners - {pid}})
            partner_maps.append(partners)
        speeds = interference.speed(feats, {"pcie": np.maximum(np.asarray(rest_pcie), 0.0),
                                            "sm_active": 0.0, "dram_active": 0.0}, "node",
                                    self.p)
        if pair_pod:
            idx = np.asarray(pair_pod)
            a = {k: v[idx] for k, v in feats.items()}
            b = {k: np.asarray([d[k] for d in pair_sum]) for k in FEATS}
            gpu_s = np.ones(len(pids))
            if self.h200:  # one speed per partner, their delays added (simulator/sharing.py)
                grp = np.repeat(np.arange(len(idx)), [len(o) for o in pair_others])
                me = np.repeat(np.asarray(pids)[idx], [len(o) for o in pair_others])
                other = np.concatenate([np.asarray(o) for o in pair_others])
                g_s = sharing.combine(self.pair_speeds(me, other, mode), grp, len(idx))
            else:
                g_s = interference.speed(a, b, mode, self.p)
            np.minimum.at(gpu_s, idx, g_s)
            speeds = speeds * gpu_s
        for i, pid in enumerate(pids):
            pod, s = self.pods[pid], float(speeds[i])
            self._update_partners(pod, partner_maps[i], t)
            if abs(s - pod.speed) > 1e-12:
                self._close_segment(pod, t)
                pod.remaining -= pod.speed * (t - pod.last)
                pod.last, pod.speed = t, s
                pod.version += 1
                heapq.heappush(self.heap, (t + max(pod.remaining, 0.0) / s, pid, pod.version))

    def pair_speeds(self, a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
        """True speed of pod `a` beside the single partner `b` (arrays of pids) under `mode`."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        if not (self.h200 and mode in sharing.MODES):
            fa = {k: np.asarray([self.pods[q].ifeats[k] for q in a], float) for k in FEATS}
            fb = {k: np.asarray([self.pods[q].ifeats[k] for q in b], float) for k in FEATS}
            return interference.speed(fa, fb, mode, self.p)
        keys = [(int(x), int(y), mode) for x, y in zip(a, b)]
        new = [k for k in dict.fromkeys(keys) if k not in self._noise]
        if new:
            z = sharing.pair_noise(self.cfg.seed, np.asarray([k[0] for k in new]),
                                   np.asarray([k[1] for k in new]), mode)
            self._noise.update(zip(new, z.tolist()))
        me = {k: np.asarray([self.pods[q].mech[k] for q in a]) for k in self.pods[0].mech}
        part = {k: np.asarray([self.pods[q].mech[k] for q in b]) for k in self.pods[0].mech}
        return sharing.pair_speed(me, part, mode, np.asarray([self._noise[k] for k in keys]))

    def _update_partners(self, pod: Pod, partners: dict, t: float) -> None:
        """Open an episode for each new partner, close it for each partner gone."""
        for q in list(pod.partners_since):
            sharing, since = pod.partners_since[q]
            if partners.get(q) != sharing:
                if t > since:
                    self.episodes.append((pod.pid, q, sharing, since, t))
                del pod.partners_since[q]
        for q, sharing in partners.items():
            pod.partners_since.setdefault(q, (sharing, t))

    def _close_segment(self, pod: Pod, t: float) -> None:
        if t > pod.seg_start:
            pod.speed_segments.append((pod.seg_start, t, pod.speed))
        pod.seg_start = t

    # -- main loop ------------------------------------------------------------------------
    def _add_pod(self, row, created: float, work: float) -> Pod:
        w = CATALOGUE[row["workload"]]
        f = solo_features(w, self.spec, self.rng)
        # a job never asks for more GPUs than a node has (gangs are single-node here)
        n_gpu = min(int(row["num_gpu"]), self.cfg.gpus_per_node)
        pod = Pod(len(self.pods), row["queue"], w.name, int(max(row["priority"], w.priority)),
                  n_gpu, int(row["milli"]), created, work,
                  {k: float(v[0]) for k, v in f.items()},
                  mean_features(w, {k: float(v[0]) for k, v in f.items()}))
        if self.h200:
            pod.mech = sharing.side_features(pod.feats, w, self.spec)
        self.pods.append(pod)
        return pod

    def _start(self, pod: Pod, t: float) -> None:
        pod.started, pod.last, pod.seg_start, pod.remaining = t, t, t, pod.work
        pod.speed = 1.0
        pod.version += 1
        heapq.heappush(self.heap, (t + pod.work, pod.pid, pod.version))

    def _try_schedule(self, t: float) -> set:
        touched = set()
        self.pending.sort(key=lambda q: (-self.pods[q].priority, self.pods[q].created, q))
        still = []
        # Placement is monotone: once k whole GPUs (or a share m) do not fit, larger asks
        # do not either, so skip them without searching.
        min_whole, min_milli = 10**9, 10**9
        for pid in self.pending:
            pod = self.pods[pid]
            if (pod.milli >= 1000 and pod.num_gpu >= min_whole) or \
                    (pod.milli < 1000 and pod.milli >= min_milli):
                still.append(pid)
                continue
            if self._place(pod):
                self._start(pod, t)
                touched.add(pod.node)
            else:
                if pod.milli >= 1000:
                    min_whole = min(min_whole, pod.num_gpu)
                else:
                    min_milli = min(min_milli, pod.milli)
                still.append(pid)
        # Users delete pods that wait too long (Helios: 13.6 % of Earth's GPU jobs end
        # cancelled); without this, gangs that never fit would wait forever.
        self.pending = []
        for pid in still:
            if t - self.pods[pid].created > PATIENCE_S:
                self.pods[pid].finished = t
            else:
                self.pending.append(pid)
        return touched

    def run(self, arrivals: pd.DataFrame) -> None:
        end, t0 = self.cfg.duration_s, -self.cfg.warmup_hours * 3600.0
        for i in range(self.cfg.serving_pods):  # long-lived inference services
            row = {"workload": "llm-serving", "queue": self.cfg.queues[i % len(self.cfg.queues)],
                   "priority": 1000, "num_gpu": 1, "milli": 1000}
            self.pending.append(self._add_pod(row, t0, np.inf).pid)
        touched = self._try_schedule(t0)
        for n in touched:
            self._refresh_node(n, t0)
        rows = arrivals.to_dict("records")
        i = 0
        while True:
            t_arr = rows[i]["created"] if i < len(rows) else np.inf
            t_dep = self.heap[0][0] if self.heap else np.inf
            t = min(t_arr, t_dep)
            if t >= end:
                break
            touched = set()
            if t_arr <= t_dep:
                pod = self._add_pod(rows[i], t_arr, float(rows[i]["work"]))
                self.pending.append(pod.pid)
                i += 1
            else:
                _, pid, version = heapq.heappop(self.heap)
                pod = self.pods[pid]
                if version != pod.version or not np.isnan(pod.finished):
                    continue
                self._close_segment(pod, t)
                self._update_partners(pod, {}, t)
                pod.finished = t
                for gi in pod.gpus:
                    self.free[gi] += pod.milli
                    self.gpu_pods[gi].discard(pid)
                self.node_pods[pod.node].discard(pid)
                touched.add(pod.node)
            touched |= self._try_schedule(t)
            for n in sorted(touched):
                self._refresh_node(n, t)
        for pod in self.pods:
            if not np.isnan(pod.started) and np.isnan(pod.finished):
                self._close_segment(pod, end)
                self._update_partners(pod, {}, end)
