"""Replay a recorded history under every policy, on the recorded nodes, and right-size.

The forecasters are the timeline's: the demand forecaster behind the reservation and the
run-time predictor behind backfill are refit once a replayed day on the bins / the runs that
ended before that day only (`ReservedSchedule`, `predicted_runtimes`); a refit with too little
history serves the flat running mean (demand) or no prediction (run time), and is counted.
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from simulator.timeline.engine import TimelineResult, run_timeline
from simulator.timeline.forecast import FREQ_S, ReservedSchedule
from simulator.timeline.policies import Placer
from simulator.timeline.runtime import predicted_runtimes
from simulator.whatif.jobs import ReplayInput, fewer_nodes
from simulator.whatif.metrics import policy_row, pick

POLICIES = ("kube-default", "bestfit", "fgd", "foresight", "foresight-reserve",
            "foresight-backfill")
BASELINE = "kube-default"
POD_BY_POD = "kube-default pod-by-pod"

#: progress(what, replays done, replays in all)
Progress = Callable[[str, int, int], None]


@dataclass
class WhatIfConfig:
    policies: tuple[str, ...] = POLICIES
    horizon: int = 3  # forecast horizon, 10-minute bins (the timeline's)
    quantile: str = "p90"
    runtime_quantile: str = "p50"
    decay_bins: int = 6
    reserve_for: str = "big"
    seed: int = 0
    right_size_steps: int = 3  # replays of the pick on fewer nodes (bisection); 0: none
    right_size_max: float = 0.9  # most of the nodes taken away
    workers: int = 2  # replays at once (processes); 1: all in this process
    extra: dict = field(default_factory=dict)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class _Nothing:
    """The reserved-GPU schedule where there is nothing to reserve for (no 8-GPU pod and no
    gang in the history, or no node of 8 GPUs): 0 at every time, no forecaster fitted."""

    short_days = 0

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s

    def at(self, t: float) -> float:
        return 0.0

    def mean(self, t0: float, t1: float) -> float:
        return 0.0


class _Inputs:
    """Reserved-GPU schedules and run-time predictions, built once and shared by policies."""

    def __init__(self, inp: ReplayInput, cfg: WhatIfConfig) -> None:
        self.inp, self.cfg = inp, cfg
        self.scheds: dict[tuple, ReservedSchedule] = {}
        self.preds = None
        self.seconds = 0.0
        big = inp.jobs.big if cfg.reserve_for == "big" else inp.jobs.pods > 1
        self.idle = not big.any() or not (inp.nodes.gpus >= 8).any()

    def for_policy(self, p: str):
        placer = Placer(p)
        if not placer.reserve:
            return None, None
        w = time.perf_counter()
        jobs, t1, cfg = self.inp.jobs, self.inp.t_end, self.cfg
        key = (placer.reserve, placer.backfill)
        if key not in self.scheds:
            if placer.reserve not in ("forecast", "flat", "oracle"):
                raise ValueError(f"policy {p} is not offered by the what-if replay")
            decay = cfg.decay_bins if placer.backfill and placer.reserve == "forecast" else 0
            if self.idle:
                self.scheds[key] = _Nothing(cfg.horizon * FREQ_S)
            elif decay:  # one fit serves both: the backfill's is the same forecast, decayed
                self.scheds[key] = self._build((placer.reserve, False)).with_decay(decay)
            else:
                self.scheds[key] = self._build(key)
        runtime = None
        if placer.backfill and placer.reserve == "oracle":
            runtime = jobs.duration
        elif placer.backfill:
            if self.preds is None:
                self.preds = predicted_runtimes(jobs, 0.0, t1)
            runtime = self.preds[cfg.runtime_quantile].to_numpy()
        self.seconds += time.perf_counter() - w
        return self.scheds[key], runtime

    def _build(self, key: tuple) -> ReservedSchedule:
        if key not in self.scheds:
            cfg = self.cfg
            self.scheds[key] = ReservedSchedule(
                self.inp.jobs, key[0], 0.0, self.inp.t_end, horizon=cfg.horizon,
                quantile=cfg.quantile, reserve_for=cfg.reserve_for, seed=cfg.seed)
        return self.scheds[key]


def _replay(inp: ReplayInput, nodes, p: str, shared: _Inputs, cfg: WhatIfConfig,
            gang: bool = True) -> TimelineResult:
    sched, runtime = shared.for_policy(p)
    return run_timeline(nodes, inp.jobs, p, 0.0, inp.t_end, reserved=sched, gang=gang,
                        reserve_for=cfg.reserve_for, seed=cfg.seed, runtime_s=runtime)


def run_whatif(inp: ReplayInput, cfg: WhatIfConfig, progress: Progress | None = None
               ) -> dict:
    """Every policy's summary row, the gang baseline, the pick, the right-sizing, timings;
    ``results`` (not JSON) keeps each policy's raw replay for the plots."""
    for p in cfg.policies:
        Placer(p)  # unknown names fail before any work
    gangs = bool((inp.jobs.pods > 1).any())
    total = len(cfg.policies) + int(gangs) + cfg.right_size_steps
    done = [0]

    def tick(what: str, step: int = 1) -> None:
        """``step`` more replays are done; ``what`` runs now."""
        done[0] += step
        if progress:
            progress(what, done[0], total)

    shared = _Inputs(inp, cfg)
    tick("forecasts, then the replays", 0)
    tasks = [(p, True) for p in cfg.policies] + ([(BASELINE, False)] if gangs else [])
    raw, wall, cpu, base = {}, {}, {}, None
    for p, gang, res, w, c in replays(tasks, inp, shared, cfg):
        tick(f"{p if gang else POD_BY_POD} done")  # the others run on
        if not gang:
            base, wall[POD_BY_POD], cpu[POD_BY_POD] = res, w, c
            continue
        raw[p], wall[p], cpu[p] = res, w, c
    rows = [policy_row(inp, raw[p]) for p in cfg.policies]
    raw = {p: raw[p] for p in cfg.policies}
    out: dict = {"policies": rows, "results": raw, "replay_seconds": wall,
                 "replay_cpu_seconds": cpu,
                 "forecast_short_days": {f"{k[0]}{'+backfill' if k[1] else ''}": s.short_days
                                         for k, s in shared.scheds.items()},
                 "nothing_reserved": bool(shared.idle and shared.scheds)}
    if base is not None:
        res = base
        out["gang_baseline"] = {"policy": POD_BY_POD, "deadlocks": res.deadlocks,
                                "gang_restarts": res.gang_restarts,
                                "p95_all_min": policy_row(inp, res)["all"]["p95_min"]}
    choice = pick(rows, BASELINE)
    out["pick"] = choice
    out["right_size"] = right_size(inp, cfg, shared, rows, choice["policy"], tick)
    tick("done", total - done[0])
    out["forecast_seconds"] = round(shared.seconds, 1)
    out["peak_rss_mb"] = round(peak_mb(), 0)
    out["peak_rss_worker_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                                      / 1024.0, 0)
    out["workers"] = cfg.workers
    return out


_STATE: dict = {}  # what forked workers read (inherited, not pickled)


def _task(task: tuple[str, bool]) -> tuple:
    p, gang = task
    inp, shared, cfg = _STATE["inp"], _STATE["shared"], _STATE["cfg"]
    w, c = time.perf_counter(), time.process_time()
    res = _replay(inp, inp.nodes, p, shared, cfg, gang)
    return p, gang, res, time.perf_counter() - w, time.process_time() - c


def replays(tasks: list[tuple[str, bool]], inp: ReplayInput, shared: _Inputs,
            cfg: WhatIfConfig):
    """(policy, gang, result, wall s, CPU s) per task, as they finish: the forecasts are built
    here first (once), then the replays run in ``cfg.workers`` forked processes (each replay
    is one thread of Python: two cores run two at a time; results are the same either way)."""
    for p, _ in tasks:
        shared.for_policy(p)
    _STATE.update(inp=inp, shared=shared, cfg=cfg)
    try:
        if cfg.workers <= 1 or len(tasks) <= 1:
            for t in tasks:
                yield _task(t)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("fork")
        # longest first (the reserving ones, then FGD's family), so the two cores end together
        order = sorted(tasks, key=lambda t: -_COST.get(t[0], 1.0))
        with ProcessPoolExecutor(min(cfg.workers, len(tasks)), mp_context=ctx) as ex:
            for f in as_completed([ex.submit(_task, t) for t in order]):
                yield f.result()
    finally:
        _STATE.clear()


#: relative CPU cost of one replay (bench/results/whatif_speed.md), for the order of the work
_COST = {"kube-default": 1.0, "bestfit": 1.0, "fgd": 2.7, "foresight": 3.2,
         "foresight-reserve": 3.4, "foresight-backfill": 3.9}


def right_size(inp: ReplayInput, cfg: WhatIfConfig, shared: _Inputs, rows: list[dict],
               policy: str, tick: Callable[[str], None]) -> dict:
    """The most GPUs the pick could do without, keeping its all-jobs p95 delay at or below
    the baseline's on the whole cluster: bisection over the share of nodes taken away."""
    by = {r["policy"]: r for r in rows}
    cap = int(inp.nodes.gpus.sum())
    out = {"policy": policy, "gpus": cap, "spare_gpus": 0, "tried": []}
    if BASELINE not in by or not cfg.right_size_steps:
        out["reason"] = "not run (no baseline or --right-size 0)"
        return out
    target = by[BASELINE]["all"]["p95_min"] or 0.0
    out["target_p95_min"] = target
    if (by[policy]["all"]["p95_min"] or 0.0) > target:
        out["reason"] = f"{policy} does not reach {BASELINE}'s p95 even on every node"
        return out
    lo, hi = 0.0, cfg.right_size_max
    for _ in range(cfg.right_size_steps):
        mid = (lo + hi) / 2
        nodes = fewer_nodes(inp.nodes, mid)
        res = _replay(inp, nodes, policy, shared, cfg)
        tick(f"right-size {policy} -{mid:.0%} nodes")
        p95 = policy_row(inp, res)["all"]["p95_min"] or 0.0
        gpus = int(nodes.gpus.sum())
        out["tried"].append({"nodes_removed": round(mid, 4), "gpus": gpus, "p95_min": p95})
        if p95 <= target:
            lo = mid
            out["spare_gpus"] = cap - gpus
        else:
            hi = mid
    return out


def whatif(history, warmup_s: float, cfg: WhatIfConfig, progress: Progress | None = None
           ) -> tuple[dict, ReplayInput, dict[str, TimelineResult]]:
    """The whole what-if of one history: (JSON document, replay input, raw results)."""
    from simulator.whatif.jobs import replay_input
    from simulator.whatif.metrics import recorded_row
    from simulator.whatif.summary import when

    w = time.perf_counter()
    inp = replay_input(history, warmup_s)
    got = run_whatif(inp, cfg, progress)
    raw = got.pop("results")
    t0 = history.t0
    m = (inp.jobs.arrival >= 0) & (inp.jobs.arrival < inp.t_end)
    doc = {"source": history.source, "notes": history.notes.render(),
           "window": {"history_start": when(t0, history.start),
                      "history_end": when(t0, history.end),
                      "replay_start": when(t0, inp.origin),
                      "replay_days": round(inp.t_end / 86400.0, 3),
                      "warmup_days": round(warmup_s / 86400.0, 3), "jobs": int(m.sum()),
                      "history_jobs": int(len(inp.jobs)), "nodes": int(len(inp.nodes)),
                      "gpus": int(inp.nodes.gpus.sum())},
           "recorded": recorded_row(inp), **got,
           "seconds": round(time.perf_counter() - w, 1)}
    if got.get("nothing_reserved"):
        doc["notes"].append("inferred: no job of 8 GPUs or more, no gang, or no node of 8 GPUs:"
                            " the reservation has nothing to keep room for (no forecaster "
                            "fitted; the reserving policies place as foresight does)")
    short = {k: v for k, v in got["forecast_short_days"].items() if v}
    for k, v in short.items():
        doc["notes"].append(f"inferred: {v} replayed day(s) had too little history for the "
                            f"demand forecaster ({k}): the flat mean of the history before "
                            "that day was reserved instead")
    return doc, inp, raw
