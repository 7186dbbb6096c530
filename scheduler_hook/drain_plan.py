"""The extender's drain plan (issue 28): `scores.drain`'s rule fed from the pod watch.

The timeline replay keeps each running job's predicted end itself (simulator/timeline/drain.py);
the extender reads the same inputs from its `ClusterState`:

- each bound GPU pod's GPUs (the GPU-index annotation; else the node's busy GPUs in order),
  its start (``status.startTime``; a pod bound but not yet started: the time the plan first
  saw it) and its predicted run time from the `runtime` provider (the published runtime
  model). No prediction: the pod reads as overdue (`effective_end`), as in the replay;
- the pending big jobs: pods asking a whole big node's GPUs, and gangs (their pending
  members' GPUs, in big nodes), in queue order: priority, then creation time (with
  ``drain_big_order`` alpha > 0: creation + alpha x the job's predicted run time, the
  replay's shortest-predicted-first order with aging, `simulator.timeline.run.queue_order`);
- the forecast's pre-drain level from the `demand` provider (reserved whole GPUs, horizon).

Per-row predicted free times are cached on the row's version (a pod event recomputes only its
node, as the state does); shadows are replanned when the state, the providers or the pending
big jobs change, or ``drain_replan_s`` has passed (the replay replans at big jobs' arrivals
and starts, departures from drained nodes and each 10-min forecast origin).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from scheduler_hook.podspec import PodRequest
from scheduler_hook.scores.drain import drain_times, effective_end, plan_shadows

BIG_GPUS = 8          # the big shape: a whole 8-GPU node (the replay's `big_gpus`)
REPLAN_S = 600.0      # the replay's forecast origin step


def is_big(pod: PodRequest, big_gpus: int = BIG_GPUS) -> bool:
    """Pods the plan drains nodes for: a whole big node's GPUs, or a gang member."""
    return pod.gpus >= big_gpus or bool(pod.gang)


def job_of(pod: PodRequest) -> str:
    """The pending job a big pod belongs to: its gang, else the pod itself."""
    return f"gang:{pod.gang}" if pod.gang else pod.key


def pending_jobs(pending: dict[str, PodRequest], big_gpus: int = BIG_GPUS,
                 runtime_s: Callable[[PodRequest], float | None] | None = None,
                 alpha: float = 0.0) -> list[tuple[str, int]]:
    """(job, big nodes it needs) per pending big job, in queue order: priority, then creation
    time + ``alpha`` x the job's predicted run time (``runtime_s``; unknown: 0)."""
    gpus: dict[str, int] = {}
    first: dict[str, tuple[int, float, str]] = {}
    for p in pending.values():
        if p.gpus <= 0 or not is_big(p, big_gpus):
            continue
        j = job_of(p)
        gpus[j] = gpus.get(j, 0) + p.gpus
        t = p.created or math.inf
        if alpha and runtime_s is not None:
            run = runtime_s(p)
            t += alpha * run if run is not None and np.isfinite(run) else 0.0
        first[j] = min(first.get(j, (0, math.inf, "")), (-p.priority, t, p.key))
    order = sorted(gpus, key=lambda j: first[j])
    return [(j, max(1, math.ceil(gpus[j] / big_gpus))) for j in order]


class DrainPlan:
    """The `drain` provider of `scores.drain.Drain`: ``now()``, ``shadow_s(rows)`` and, for
    big pods, ``ahead_of(rows)`` (queue rank of the job each node is drained for, +inf for
    none) and ``rank(pod)``."""

    def __init__(self, state: Any, providers: Any, cfg: dict[str, Any],
                 clock: Callable[[], float] = time.time) -> None:
        self.state, self.providers, self.cfg, self.clock = state, providers, cfg, clock
        self.big_gpus = int(cfg.get("drain_big_gpus", BIG_GPUS))
        self.replan_s = float(cfg.get("drain_replan_s", REPLAN_S))
        self.big_order = float(cfg.get("drain_big_order", 0.0))
        self._end = self._start = self._done = None  # per row: (n, G), (n, G), row version
        self._runtime_version = -1
        self._key: tuple | None = None
        self._at = -math.inf
        self.shadow = self.ahead = np.zeros(0)
        self.ranks: dict[str, int] = {}

    # -- provider interface -----------------------------------------------------------------
    def now(self) -> float:
        return float(self.clock())

    def shadow_s(self, rows: np.ndarray) -> np.ndarray:
        return self._take(self.shadow, rows)

    def ahead_of(self, rows: np.ndarray) -> np.ndarray:
        return self._take(self.ahead, rows)

    def rank(self, pod: PodRequest) -> int:
        return self.ranks.get(job_of(pod), len(self.ranks))

    @staticmethod
    def _take(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        out = np.full(len(rows), np.inf)
        ok = rows < len(arr)  # rows added since the last plan: not drained
        out[ok] = arr[rows[ok]]
        return out

    # -- the plan ---------------------------------------------------------------------------
    def refresh(self) -> "DrainPlan":
        """Replan if the state or providers changed or ``replan_s`` passed; the caller holds
        the state's lock."""
        now = self.now()
        st = self.state
        # a pending pod's arrival or departure does not move the state's version: the jobs
        # themselves are part of the key (O(pending pods) per call, no scoring)
        rt = self.providers.fresh("runtime") if self.big_order else None
        jobs = pending_jobs(st.pending, self.big_gpus, rt.runtime_s if rt is not None else None,
                            self.big_order)
        key = (st.version, self.providers.version, tuple(jobs))
        if key == self._key and now - self._at < self.replan_s:
            return self
        self._key, self._at = key, now
        self._rows_fresh(now)
        r = np.flatnonzero(st.live & st.schedulable & (st.gpu_count >= self.big_gpus))
        end = np.where(st.usable[r], effective_end(self._end[r], self._start[r], now), np.inf)
        demand = self.providers.fresh("demand")
        reserved = float(demand.reserved_whole_gpus()) if demand is not None else 0.0
        horizon = float(getattr(demand, "horizon_s", lambda: 0.0)()) if demand else 0.0
        shadow, owner = plan_shadows(drain_times(end, self.big_gpus, now),
                                     [k for _, k in jobs], reserved / self.big_gpus,
                                     horizon, now)
        n = len(st.gpu_count)
        self.shadow, self.ahead = np.full(n, np.inf), np.full(n, np.inf)
        self.shadow[r] = shadow
        self.ahead[r] = np.where(owner >= 0, owner, np.inf)
        self.ranks = {j: i for i, (j, _) in enumerate(jobs)}
        return self

    def _rows_fresh(self, now: float) -> None:
        """Each row's predicted GPU free times and earliest resident start, recomputed on the
        rows whose version moved (all of them when the runtime provider changed)."""
        st = self.state
        shape = st.free_milli.shape
        pv = self.providers.version
        if self._end is None or self._end.shape != shape or self._runtime_version != pv:
            self._end, self._start = np.zeros(shape), np.zeros(shape)
            self._done, self._runtime_version = np.full(shape[0], -1, np.int64), pv
        done = self._done
        rt = self.providers.fresh("runtime")
        for r in np.flatnonzero(st.live & (st.row_version != done)):
            self._end[r], self._start[r] = self._row(int(r), rt, now)
            done[r] = st.row_version[r]

    def _row(self, r: int, rt: Any, now: float) -> tuple[np.ndarray, np.ndarray]:
        st = self.state
        g = st.free_milli.shape[1]
        exists = st.gpu_exists[r]
        end = np.where(exists, -np.inf, np.inf)  # a free GPU is free now; padding never
        start = np.full(g, np.inf)
        # GPUs of pods without an index annotation: the node's busy ones, in order (the
        # state places them the same way, tightest first, without recording where)
        busy = [int(x) for x in np.flatnonzero(exists & (st.free_milli[r] < 1000))]
        k = 0
        for key in sorted(st.by_node.get(st.names[r], ())):
            pod = st.pods.get(key)
            if pod is None or pod.gpus <= 0:
                continue
            used = [x for x in pod.gpu_index if 0 <= x < g]
            if not used and busy:
                used = [busy[(k + i) % len(busy)] for i in range(pod.gpus)]
                k += pod.gpus
            t0 = pod.started if pod.started > 0 else now
            run = rt.runtime_s(pod) if rt is not None else None
            e = t0 + run if run is not None and np.isfinite(run) else -np.inf
            end[used] = np.maximum(end[used], e)
            start[used] = np.minimum(start[used], t0)
        return end, start
