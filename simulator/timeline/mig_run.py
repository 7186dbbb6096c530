"""One (arrival profile, seed) case of the MIG replay: the pods drawn once, replayed under each
policy, and their summaries.

Policies:
- ``static``: mig-parted's `all-balanced` on every node, never changed.
- ``static-hindsight``: one geometry per node, fixed, chosen by the planner from the window's
  true mean concurrent demand per profile (hindsight; an oracle for the best static choice).
- ``planner``: re-planned every period from the demand forecaster's arrivals forecast
  (`mig_demand.ArrivalForecast`, mode forecast) plus the live pods.
- ``oracle``: the same planner fed the true arrivals of the next hours (hindsight).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from scheduler_hook import mig
from scheduler_hook.mig_plan import NodeState, plan
from simulator.timeline.mig import MigNodeSpec, MigResult, mig_cluster, run_mig
from simulator.timeline.mig_demand import ArrivalForecast, planner_demand
from simulator.timeline.mig_workload import MigPods, generate_mig_pods

POLICIES = ("static", "static-hindsight", "planner", "oracle")
WARMUP_S = 86400.0
# profiles that all-balanced offers on some model: the static baseline can serve only these
BALANCED = frozenset(p for m in ("A100-40GB", "A100-80GB", "H100-80GB")
                     for p in mig.configs_for(m)["all-balanced"].as_dict)


@dataclass
class MigCaseConfig:
    profile: str = "helios"
    seed: int = 0
    days: float = 7.0
    load: float = 0.5              # the settings bench/mig_plan.py chose on dev seeds
    per_model: int = 10            # nodes per GPU model (8 GPUs each)
    period_s: float = 6 * 3600.0   # planning period
    lookahead: int = 24            # hours of arrivals the planner covers
    quantile: str = "p90"
    downtime_s: float = 300.0      # a re-split: MIG manager, GPU reset, device plugin restart
    drain_max_s: float | None = None
    max_drain_pods: int | None = None
    max_draining: int | None = 3
    large_factor: float = 4.0
    policies: tuple[str, ...] = POLICIES


def hindsight_geometry(specs: list[MigNodeSpec], pods: MigPods, t0: float, t1: float
                       ) -> dict[str, str]:
    """node -> config: the planner on the window's true mean concurrent instances per profile,
    every node free and starting from all-balanced."""
    busy = np.clip(np.minimum(pods.arrival + pods.duration, t1) - np.maximum(pods.arrival, t0),
                   0, None)
    demand = {p: float(busy[pods.profile == i].sum() / (t1 - t0))
              for i, p in enumerate(pods.profiles)}
    states = []
    for s in specs:
        m = mig.MODELS[s.model]
        geo = mig.configs_for(m)["all-balanced"].as_dict
        states.append(NodeState(s.name, m, s.gpus, "mixed", "all-balanced",
                                Counter({p: n * s.gpus for p, n in geo.items()}), []))
    return {r.node: r.proposed for r in plan(states, demand).nodes}


def summarize(pods: MigPods, res: MigResult, t0: float, t1: float) -> dict:
    """Queueing delay (all, per profile, large/small), allocation, stranded slices, re-splits."""
    m = (pods.arrival >= t0) & (pods.arrival < t1)
    d = (np.where(np.isfinite(res.start), res.start, t1) - pods.arrival) / 60.0

    def q(mask: np.ndarray) -> dict:
        x = d[mask]
        return {"n": int(mask.sum()),
                "p50_min": round(float(np.percentile(x, 50)), 2) if len(x) else None,
                "p95_min": round(float(np.percentile(x, 95)), 2) if len(x) else None,
                "unstarted": int((~np.isfinite(res.start[mask])).sum())}

    balanced = [i for i, p in enumerate(pods.profiles) if p in BALANCED]
    out: dict = {"policy": res.policy, "all": q(m), "large": q(m & pods.large),
                 "small": q(m & ~pods.large), "balanced": q(m & np.isin(pods.profile, balanced)),
                 "per_profile": {p: q(m & (pods.profile == i))
                                 for i, p in enumerate(pods.profiles)}}
    s = res.samples
    w = (s["t"] >= t0) & (s["t"] < t1)
    for k in ("alloc", "stranded", "blocked_idle", "waiting_slices", "resplitting"):
        out[f"{k}_mean"] = round(float(s[k][w].mean()), 2)
    # waiting compute slices x hours: the demand the geometry left unmet
    out["unmet_slice_hours"] = round(float(s["waiting_slices"][w].sum()) * 600 / 3600, 1)
    days = (t1 - t0) / 86400.0
    per_node = [sum(t0 <= x < t1 for x in v) for v in res.resplits.values()]
    per_day = [max(Counter(int((x - t0) // 86400) for x in v if t0 <= x < t1).values(),
                   default=0) for v in res.resplits.values()]
    gaps = [b - a for v in res.resplits.values() for a, b in zip(v, v[1:])]
    out.update(resplits=int(sum(per_node)),
               resplits_per_node_day_mean=round(sum(per_node) / len(per_node) / days, 3),
               resplits_per_node_day_max=int(max(per_day, default=0)),
               min_gap_h=round(min(gaps) / 3600, 1) if gaps else None,
               plans=res.plans, drains_called_off=res.drains_called_off,
               seconds=round(res.seconds, 1), cpu_seconds=round(res.cpu_seconds, 1))
    return out


def run_mig_case(cfg: MigCaseConfig) -> list[dict]:
    specs = mig_cluster(cfg.per_model)
    slices = sum(s.gpus for s in specs) * mig.COMPUTE_SLICES
    share40 = sum(s.gpus for s in specs if s.model == "A100-40GB") / (slices / 7)
    pods = generate_mig_pods(cfg.profile, cfg.seed, days=cfg.days, load=cfg.load,
                             slices=slices, share40=share40, large_factor=cfg.large_factor)
    t0, t1 = -WARMUP_S, cfg.days * 86400.0
    rows = []
    for pol in cfg.policies:
        if pol not in POLICIES:
            raise ValueError(f"unknown MIG policy {pol!r}; choose {', '.join(POLICIES)}")
        w0, c0 = time.perf_counter(), time.process_time()
        kw: dict = dict(period_s=cfg.period_s, downtime_s=cfg.downtime_s,
                        drain_max_s=cfg.drain_max_s, max_drain_pods=cfg.max_drain_pods,
                        max_draining=cfg.max_draining)
        if pol == "static-hindsight":
            kw["initial"] = hindsight_geometry(specs, pods, 0.0, t1)
        elif pol in ("planner", "oracle"):
            fc = ArrivalForecast(pods, "forecast" if pol == "planner" else "oracle", t0, t1,
                                 lookahead=cfg.lookahead, quantile=cfg.quantile,
                                 seed=cfg.seed)
            kw["demand"] = planner_demand(fc, cfg.lookahead)
        fc_w, fc_c = time.perf_counter() - w0, time.process_time() - c0
        res = run_mig(specs, pods, pol, t0, t1, **kw)
        row = summarize(pods, res, 0.0, t1)
        row.update(profile=cfg.profile, seed=cfg.seed, days=cfg.days,
                   forecast_seconds=round(fc_w, 1),
                   seconds=round(res.seconds + fc_w, 1),
                   cpu_seconds=round(res.cpu_seconds + fc_c, 1))
        rows.append(row)
    return rows
