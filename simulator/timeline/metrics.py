"""Summaries of a timeline replay: queueing delay per size class, allocation, blocked events."""
from __future__ import annotations

import hashlib

import numpy as np

from simulator.timeline.engine import TimelineResult
from simulator.timeline.workload import CLASSES, Jobs


def delays(jobs: Jobs, res: TimelineResult, t0: float, t1: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(mask of jobs arriving in [t0, t1), queueing delay in s; a job never started by t1
    counts t1 - arrival, a lower bound)."""
    m = (jobs.arrival >= t0) & (jobs.arrival < t1)
    d = np.where(np.isfinite(res.start), res.start, t1) - jobs.arrival
    return m, d


def digest(res: TimelineResult) -> str:
    """16 hex digits over every job's start, the per-job flags, the samples and the counters:
    equal digests = the same replay, decision for decision (how a speed-up shows it changed
    nothing)."""
    h = hashlib.sha1()
    for a in (np.nan_to_num(res.start, nan=-1.0), res.frag_blocked, res.held):
        h.update(np.ascontiguousarray(a).tobytes())
    for k in sorted(res.samples):
        h.update(np.asarray(res.samples[k], float).tobytes())
    h.update(repr((res.frag_events, res.deadlocks, res.gang_restarts)).encode())
    return h.hexdigest()[:16]


def summarize(jobs: Jobs, res: TimelineResult, t0: float, t1: float) -> dict:
    m, d = delays(jobs, res, t0, t1)
    cls = jobs.size_class
    out: dict = {"policy": res.policy, "seconds": round(res.seconds, 1)}
    groups = {c: m & (cls == c) for c in CLASSES}
    groups["8+gang"] = m & np.isin(cls, ["8", "gang"])
    for name, g in groups.items():
        x = d[g]
        out[name] = {"n": int(g.sum()),
                     "p50_min": round(float(np.percentile(x, 50)) / 60, 2) if len(x) else None,
                     "p95_min": round(float(np.percentile(x, 95)) / 60, 2) if len(x) else None,
                     "frag_blocked": round(float(res.frag_blocked[g].mean()), 4) if len(x) else 0,
                     "held": round(float(res.held[g].mean()), 4) if len(x) else 0,
                     "unstarted": int((~np.isfinite(res.start[g])).sum())}
    s = res.samples
    w = (s["t"] >= t0) & (s["t"] < t1)
    out["alloc_mean"] = round(float(s["alloc"][w].mean()), 3)
    out["queue_mean"] = round(float(s["queue"][w].mean()), 2)
    out["empty8_mean"] = round(float(s["empty8"][w].mean()), 2)
    out["reserved_mean"] = round(float(s["reserved"][w].mean()), 2)
    out["frag_blocked_jobs"] = int(res.frag_blocked[m].sum())
    out["frag_events"] = res.frag_events
    out["gang_deadlocks"] = res.deadlocks
    out["gang_restarts"] = res.gang_restarts
    out["preemptions"] = res.preemptions
    out["digest"] = digest(res)
    return out


def backfill_summary(jobs: Jobs, res: TimelineResult, t0: float, t1: float) -> dict:
    """Pods placed on lent (reserved) nodes, of them those that outlived the lease (not
    preempted: counted), and by how long, over jobs arriving in [t0, t1)."""
    lj = res.extra.get("backfill_jobs", np.zeros(0, np.int64))
    over = res.extra.get("overrun_s", np.zeros(0))
    m = (jobs.arrival[lj] >= t0) & (jobs.arrival[lj] < t1)
    late = over[m] > 0
    aj = res.extra.get("aged_jobs", np.zeros(0, np.int64))
    took = res.extra.get("aged_took", np.zeros(0, bool))
    am = (jobs.arrival[aj] >= t0) & (jobs.arrival[aj] < t1)
    return {"jobs": int(m.sum()), "overran": int(late.sum()),
            "overrun_p50_min": round(float(np.median(over[m][late])) / 60, 1) if late.any()
            else 0.0,
            # started past the hold bound / of them, on a node their class was held off
            "aged": int(am.sum()), "aged_took": int(took[am].sum())}
