"""One (arrival profile, seed) case: generate the jobs once, replay them under each policy."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.replay.data import Nodes
from simulator.timeline.engine import TimelineResult, run_timeline
from simulator.timeline.forecast import ReservedSchedule
from simulator.timeline.metrics import backfill_summary, summarize
from simulator.timeline.policies import POLICIES, PREDICTED_RUNTIME, Placer
from simulator.timeline.runtime import RemainingRuntime, accuracy, online_models, \
    predicted_runtimes
from simulator.timeline.workload import Jobs, generate_jobs

WARMUP_S = 86400.0


@dataclass
class CaseConfig:
    profile: str = "helios"
    seed: int = 0
    days: float = 14.0
    load: float = 0.9  # offered load of the replayed window (see the notes)
    big_share: float = 0.5  # share of running GPUs in jobs >= 8 GPUs (see workload.py)
    max_days: float = 14.0  # small jobs' run-time clip
    gang: bool = True
    reserve_for: str = "big"
    horizon: int = 3  # forecast horizon, 10-minute bins
    quantile: str = "p90"  # chosen on dev seeds (bench/replay_timeline_notes.md)
    runtime_quantile: str = "p90"  # backfill: the run time a pod is believed to take
    decay_bins: int = 6  # backfill: the reservation decays over the last hour's shortfall
    max_hold_s: float | None = None  # backfill: hold bound (None: the component's default)
    drain_jobs: int | None = None  # draining: pending big jobs planned for (None: all)
    hold_multi: float = 1.0  # 2-4 GPU jobs' hold bound: max_hold_s x this (inf: none)
    protect_jobs: int = 0  # draining: aged pods keep off the first N big jobs' drained nodes
    # draining with predicted run times: residents' ends from this quantile of the remaining
    # run time given their age (None: start + runtime_quantile's prediction)
    resident_quantile: float | None = None
    resident_floor: bool = False  # ... and no earlier than start + runtime_quantile's
    # backfilling policies: big jobs queue by arrival + this x their predicted run time
    # (shortest predicted first, aged by waiting; 0: FIFO, as `fgd`)
    big_order: float = 0.0
    big_order_area: bool = False  # ... x its pods too (GPU-time: a gang of 4 counts 4 x)
    # backfilling policies: pods of < 8 GPUs go first where their predicted end does not
    # prolong how long an 8-GPU node stays taken (issue 31's pack rule; run_timeline(pack=))
    pack: bool = False
    policies: tuple[str, ...] = tuple(POLICIES)
    extra: dict = field(default_factory=dict)


def case_jobs(nodes: Nodes, cfg: CaseConfig) -> Jobs:
    """The case's jobs (history and replayed window), the same for every policy."""
    return generate_jobs(cfg.profile, cfg.seed, days=cfg.days, load=cfg.load,
                         big_share=cfg.big_share, max_days=cfg.max_days,
                         history_days=max(7.0, cfg.max_days),
                         capacity_gpus=int(nodes.gpus.sum()))


def schedule_maker(jobs: Jobs, cfg: CaseConfig, t0: float, t1: float
                   ) -> Callable[[str, bool], ReservedSchedule]:
    """(mode, backfill) -> the reserved-GPU schedule a policy of that mode is fed (built once
    per key): ``forecast`` (decaying when backfilling), ``flat``, ``flat-matched``, ``none``,
    ``oracle``."""
    scheds: dict[tuple, ReservedSchedule] = {}

    def schedule_for(mode: str, backfill: bool) -> ReservedSchedule:
        key = (mode, backfill)
        if key not in scheds:
            kw = dict(horizon=cfg.horizon, quantile=cfg.quantile, reserve_for=cfg.reserve_for,
                      seed=cfg.seed)
            if mode == "flat-matched":  # the flat level at the backfill forecast's mean
                # over the measured window, where the tables compare them (issue 28's first
                # try matched over the warm-up too: 256 vs 153 GPUs measured, dlrm dev seed 0)
                fc = schedule_for("forecast", True).mean(0.0, t1)
                flat = ReservedSchedule(jobs, "flat", t0, t1, **kw)
                kw["scale"] = fc / max(flat.mean(0.0, t1), 1e-9)
                mode = "flat"
            elif mode == "none":  # no pre-drain: a zero level (the horizon still read)
                kw["scale"], mode = 0.0, "flat"
            scheds[key] = ReservedSchedule(jobs, mode, t0, t1, **kw, decay_bins=cfg.decay_bins
                                           if backfill and mode == "forecast" else 0)
        return scheds[key]

    return schedule_for


def queue_order(jobs: Jobs, runtime_s, alpha: float, area: bool = False):
    """Per job, the time it queues by: big jobs at arrival + alpha x the run time the policy
    believes (a predicted-short big job overtakes a predicted-long one that arrived less than
    alpha x their difference earlier), every other job at arrival. None (FIFO) where alpha is 0
    or the policy believes no run times. ``area``: the run time x the job's pods (8-GPU pods)."""
    if not alpha or runtime_s is None:
        return None
    w = np.nan_to_num(runtime_s) * (jobs.pods if area else 1)
    return jobs.arrival + np.where(jobs.big, alpha * w, 0.0)


def run_case(nodes: Nodes, cfg: CaseConfig, keep: bool = False
             ) -> tuple[list[dict], dict[str, TimelineResult]]:
    """Summaries per policy (and the raw results when ``keep``)."""
    for p in cfg.policies:
        Placer(p)  # unknown names fail before any work
    jobs = case_jobs(nodes, cfg)
    t0, t1 = -WARMUP_S, cfg.days * 86400.0
    rows, raw = [], {}
    schedule_for = schedule_maker(jobs, cfg, t0, t1)
    preds = remain = None

    for p in cfg.policies:
        sched, fc_s, runtime, rem = None, 0.0, None, None
        placer = Placer(p)
        mode = placer.reserve
        if mode:
            w0, c0 = time.perf_counter(), time.process_time()
            sched = schedule_for(mode, placer.backfill)
            if placer.backfill and (mode != "oracle" or p in PREDICTED_RUNTIME):
                if preds is None:
                    preds = predicted_runtimes(jobs, t0, t1)
                    if cfg.resident_quantile is not None:  # the same refits, fitted again
                        floor = preds[cfg.runtime_quantile].to_numpy() \
                            if cfg.resident_floor else None
                        remain = RemainingRuntime(cfg.resident_quantile).fit(
                            jobs, online_models(jobs, t0, t1), floor_s=floor)
                runtime = preds[cfg.runtime_quantile].to_numpy()
                rem = remain if placer.drain else None
            elif placer.backfill:
                runtime = jobs.duration
            fc_s = time.perf_counter() - w0
            fc_cpu = time.process_time() - c0
        c0 = time.process_time()
        res = run_timeline(nodes, jobs, p, t0, t1, reserved=sched, gang=cfg.gang,
                           reserve_for=cfg.reserve_for, seed=cfg.seed, runtime_s=runtime,
                           max_hold_s=cfg.max_hold_s, drain_jobs=cfg.drain_jobs,
                           hold_multi=cfg.hold_multi, protect_jobs=cfg.protect_jobs,
                           remaining=rem, order_s=queue_order(jobs, runtime, cfg.big_order,
                                                            cfg.big_order_area),
                           pack=cfg.pack and runtime is not None)
        cpu = time.process_time() - c0
        row = summarize(jobs, res, 0.0, t1)
        if placer.backfill:
            m = (jobs.arrival >= 0.0) & (jobs.arrival < t1) & ~jobs.big
            row["backfill"] = backfill_summary(jobs, res, 0.0, t1)
            if mode != "oracle" or p in PREDICTED_RUNTIME:
                row["runtime_accuracy"] = accuracy(jobs, preds, m)
        row.update(profile=cfg.profile, seed=cfg.seed, gang_semantics=cfg.gang, jobs=int(
            ((jobs.arrival >= t0) & (jobs.arrival < t1)).sum()),
            seconds=round(res.seconds + fc_s, 1),
            cpu_seconds=round(cpu + (fc_cpu if mode else 0.0), 1),
            forecast_seconds=round(fc_s, 1))
        rows.append(row)
        if keep:
            raw[p] = res
    return rows, raw
