"""One (arrival profile, seed) case of the MIG replay: the pods drawn once, replayed under each
policy, and their summaries.

Policies:
- ``static``: mig-parted's `all-balanced` on every node, never changed.
- ``static-past-week``: one geometry per node, fixed, chosen by the planner from the mean
  concurrent demand per profile of the week before the replay starts (what an operator would
  pick without hindsight: only pods that arrived before then, counted only up to then).
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
from scheduler_hook.mig_plan import (
    NodeState,
    burst_levels,
    candidates,
    plan,
    protect_small,
    small_bursts,
)
from simulator.timeline.mig import MigNodeSpec, MigResult, mig_cluster, run_mig
from simulator.timeline.mig_demand import ArrivalForecast, planner_demand
from simulator.timeline.mig_lend import LendRule
from simulator.timeline.mig_workload import FAMILY, MigPods, generate_mig_pods

POLICIES = ("static", "static-past-week", "static-hindsight", "planner-first-plan", "planner",
            "oracle")
WARMUP_S = 86400.0
WEEK_S = 7 * 86400.0
SMALL_MAX = 3  # 1g-3g: the profiles the planner protects (issue 28)
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
    history_days: float = 8.0      # before the warm-up: the past week, the forecast's history
    # the planner (issue 28): custom geometries (mig-parted entries it prints), 1g-3g demand
    # first (`mig_small.protect_small`), and its start: all-balanced or its plan of the past week
    custom: bool = False
    protect: str = "none"          # 1g-3g first: "none", "start" (the first plan) or "all"
    start: str = "all-balanced"
    hold_small: bool = False       # re-plans may not take 1g-3g instances away
    burst_q: float | None = None   # protect: 1g-3g also up to this quantile of concurrency
    # protect: 4g/7g keep the instances of the plan of the mean, and the slices 1g-3g get are
    # split among them by their past-week concurrency (`mig_small.burst_levels`): "split", or
    # "floor" (each 1g-3g profile keeps at least what static-past-week gives it)
    burst_levels: str | None = None
    # protect: each 1g-3g profile asks its mean x (this quantile / the mean of the 1g-3g slices
    # in use per memory size over the past week), 4g/7g their mean after them
    burst_pool_q: float | None = None
    floor_week: bool = False       # demand no lower than the past 7 days' mean concurrency
    demand: str = "forecast"       # or "week": the mean concurrency of the past 7 days only
    # the planner's policies also lend idle 4g/7g instances to waiting 1g-3g pods (dynamic
    # MIG, `simulator.timeline.mig_lend`), keeping this many idle per large profile; None = off
    lend_keep: int | None = None
    lend_downtime_s: float = 300.0  # each way, the lent instance's slices only
    lend_small: bool = False        # idle 2g/3g instances lent to smaller profiles too
    policies: tuple[str, ...] = POLICIES


def mean_concurrent(pods: MigPods, t0: float, t1: float) -> dict[str, float]:
    """Mean concurrent instances per profile over [t0, t1) of the pods arrived before t1, each
    counted only until t1 (a pod still running at t1 adds nothing past it): read from t1 on,
    this is what the cluster's history shows, nothing of the future."""
    seen = pods.arrival < t1
    busy = np.clip(np.minimum(pods.arrival + pods.duration, t1) - np.maximum(pods.arrival, t0),
                   0, None)
    return {p: float(busy[seen & (pods.profile == i)].sum() / (t1 - t0))
            for i, p in enumerate(pods.profiles)}


def concurrent_samples(pods: MigPods, t0: float, t1: float, step: float = 600.0
                       ) -> dict[str, np.ndarray]:
    """Per profile, the instances that the pods arrived before t1 would hold at every ``step``
    of [t0, t1), each from its arrival for its run time (the demand `mean_concurrent`
    averages), as seen from t1."""
    ts = np.arange(t0, t1, step)
    seen = pods.arrival < t1
    out = {}
    for i, p in enumerate(pods.profiles):
        m = seen & (pods.profile == i)
        a = np.sort(pods.arrival[m])
        e = np.sort(np.minimum(pods.arrival[m] + pods.duration[m], t1))
        out[p] = np.searchsorted(a, ts, "right") - np.searchsorted(e, ts, "right")
    return out


def concurrent_quantile(pods: MigPods, t0: float, t1: float, q: float, step: float = 600.0
                        ) -> dict[str, float]:
    """Per profile, the ``q`` quantile of `concurrent_samples`."""
    return {p: float(np.quantile(n, q)) if len(n) else 0.0
            for p, n in concurrent_samples(pods, t0, t1, step).items()}


def static_geometry(specs: list[MigNodeSpec], demand: dict[str, float], custom: bool = False,
                    protect: bool = False, burst=None, raw_burst: bool = False
                    ) -> dict[str, str | tuple[str, dict]]:
    """node -> config (a name, or (name, geometry) for a custom one): the planner on a demand
    per profile, every node free and starting from all-balanced."""
    states = []
    for s in specs:
        m = mig.MODELS[s.model]
        geo = mig.configs_for(m)["all-balanced"].as_dict
        states.append(NodeState(s.name, m, s.gpus, "mixed", "all-balanced",
                                Counter({p: n * s.gpus for p, n in geo.items()}), []))
    rows = plan(states, demand, custom=custom,
                weights=protect_small(demand) if protect else None,
                burst=(burst if raw_burst else small_bursts(burst)) if protect and burst
                else None).nodes
    by = {st.name: st for st in states}
    out: dict[str, str | tuple[str, dict]] = {}
    for r in rows:
        c = next(c for c in candidates(by[r.node], custom) if c.name == r.proposed) \
            if r.changed else None
        out[r.node] = r.proposed if c is None or c.named else (c.name, dict(c.geometry))
    return out


def hindsight_geometry(specs: list[MigNodeSpec], pods: MigPods, t0: float, t1: float
                       ) -> dict[str, str | tuple[str, dict]]:
    """The window's true mean concurrent instances per profile (hindsight)."""
    return static_geometry(specs, mean_concurrent(pods, t0, t1))


def memory_size(p: str) -> str:
    """"40" for a profile name the workload gives the A100-40GB's pods, else "80"."""
    return "40" if p in FAMILY["40"].values() else "80"


def pooled_burst(pods: MigPods, t0: float, t1: float, q: float, mean: dict[str, float]
                 ) -> dict[str, float]:
    """``mean`` with each 1g-3g profile's scaled by q-quantile / mean of the compute slices
    the 1g-3g profiles of its memory size held together over [t0, t1) (`concurrent_samples`):
    their bursts pooled (they peak together or not), kept in each profile's share."""
    samples = concurrent_samples(pods, t0, t1)
    out = dict(mean)
    for size in ("40", "80"):
        ps = [p for p in samples if mig.profile_compute(p) <= SMALL_MAX and memory_size(p) == size]
        if not ps:
            continue
        tot = sum(mig.profile_compute(p) * samples[p] for p in ps)
        m = float(np.mean(tot))
        if m > 0:
            for p in ps:
                out[p] = mean[p] * float(np.quantile(tot, q)) / m
    return out


def geometry_supply(specs: list[MigNodeSpec], geo: dict[str, str | tuple[str, dict]]
                    ) -> Counter[str]:
    """Instances per profile the nodes offer under ``geo`` (node -> config)."""
    out: Counter[str] = Counter()
    for s in specs:
        c = geo[s.name]
        g = c[1] if isinstance(c, tuple) else mig.configs_for(mig.MODELS[s.model])[c].as_dict
        out.update({p: n * s.gpus for p, n in g.items()})
    return out


def past_week_geometry(specs: list[MigNodeSpec], pods: MigPods, t: float, days: float = 7.0,
                       custom: bool = False, protect: bool = False,
                       burst_q: float | None = None, levels: str | None = None,
                       pool_q: float | None = None) -> dict[str, str | tuple[str, dict]]:
    """The mean concurrent instances of the ``days`` before t, seen from t (no hindsight);
    ``burst_q`` (with ``protect``): 1g-3g also up to that quantile of their concurrency then.
    ``levels`` (with ``protect``): a second plan in which the 4g/7g profiles ask exactly the
    instances the first gave them (so they keep the slack above their mean, which is what
    serves their p95) and the 1g-3g profiles their mean plus `burst_levels` of their
    concurrency then: the slices 1g-3g get are split among their profiles (and memory
    sizes: a 40 GB name only fits the A100-40GB nodes) where the past week's bursts say they
    spare most waiting pods; "floor": each 1g-3g profile asks at least the instances the
    named plan without priority (static-past-week) gives it. ``pool_q`` (with ``protect``):
    each 1g-3g profile asks its mean scaled by that quantile of the 1g-3g compute slices in
    use per memory size (40 / 80 GB names) over their mean, 4g/7g their mean after them."""
    t0 = t - days * 86400.0
    if pods.arrival.min() > t0 + 3600.0:
        raise ValueError(f"past-week geometry: the pods start at {pods.arrival.min():.0f} s, "
                         f"after {t0:.0f} s (history_days too short)")
    mean = mean_concurrent(pods, t0, t)
    if protect and pool_q:
        mean = pooled_burst(pods, t0, t, pool_q, mean)
    burst = concurrent_quantile(pods, t0, t, burst_q) if protect and burst_q else None
    first = static_geometry(specs, mean, custom, protect, burst)
    if not (protect and levels):
        return first
    have = geometry_supply(specs, first)
    named = geometry_supply(specs, static_geometry(specs, mean))  # what static-past-week has
    big = {p for p in mean if mig.profile_compute(p) > SMALL_MAX}
    demand = {p: float(have[p]) if p in big else
              max(v, float(min(have[p], named[p]))) if levels == "floor" else v
              for p, v in mean.items()}
    seen = pods.arrival < t
    n = {p: float(((pods.arrival >= t0) & seen & (pods.profile == i)).sum())
         for i, p in enumerate(pods.profiles)}
    rows = burst_levels(concurrent_samples(pods, t0, t), n, SMALL_MAX)
    return static_geometry(specs, demand, custom, protect, rows, raw_burst=True)


def _floored(demand, pods: MigPods):
    """demand(t, live) raised, per profile, to the mean concurrent instances of the 7 days
    before t as seen at t: a re-plan answers a surge the forecast sees, but does not give
    up the capacity a profile held on average (its troughs are short, its drains long)."""
    def out(t: float, live) -> dict[str, float]:
        d, week = demand(t, live), mean_concurrent(pods, t - WEEK_S, t)
        return {p: max(d.get(p, 0.0), week[p]) for p in {*d, *week}}
    return out


def _week(pods: MigPods, ahead: bool):
    """demand(t, live): the mean concurrent instances of the 7 days before t as seen at t (or,
    ``ahead``, of the 7 days after t: hindsight)."""
    def out(t: float, live) -> dict[str, float]:
        return mean_concurrent(pods, t, t + WEEK_S) if ahead else \
            mean_concurrent(pods, t - WEEK_S, t)
    return out


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
    size = np.array([mig.profile_compute(p) for p in pods.profiles])[pods.profile]
    out: dict = {"policy": res.policy, "all": q(m), "large": q(m & pods.large),
                 "small": q(m & ~pods.large), "balanced": q(m & np.isin(pods.profile, balanced)),
                 "per_profile": {p: q(m & (pods.profile == i))
                                 for i, p in enumerate(pods.profiles)},
                 # size class = compute slices (the 40 GB and 80 GB names of a size pooled)
                 "per_size": {f"{c}g": q(m & (size == c)) for c in sorted(set(size.tolist()))}}
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
               lent={k: round(v, 1) for k, v in res.extra.items()},
               seconds=round(res.seconds, 1), cpu_seconds=round(res.cpu_seconds, 1))
    return out


def run_mig_case(cfg: MigCaseConfig) -> list[dict]:
    specs = mig_cluster(cfg.per_model)
    slices = sum(s.gpus for s in specs) * mig.COMPUTE_SLICES
    share40 = sum(s.gpus for s in specs if s.model == "A100-40GB") / (slices / 7)
    pods = generate_mig_pods(cfg.profile, cfg.seed, days=cfg.days, load=cfg.load,
                             slices=slices, share40=share40, large_factor=cfg.large_factor,
                             history_days=cfg.history_days)
    t0, t1 = -WARMUP_S, cfg.days * 86400.0
    lend = LendRule(cfg.lend_keep, cfg.lend_downtime_s, cfg.lend_small) \
        if cfg.lend_keep is not None else None
    rows = []
    for pol in cfg.policies:
        if pol not in POLICIES:
            raise ValueError(f"unknown MIG policy {pol!r}; choose {', '.join(POLICIES)}")
        w0, c0 = time.perf_counter(), time.process_time()
        kw: dict = dict(period_s=cfg.period_s, downtime_s=cfg.downtime_s,
                        drain_max_s=cfg.drain_max_s, max_drain_pods=cfg.max_drain_pods,
                        max_draining=cfg.max_draining)
        if pol == "static-past-week":  # chosen when the replay starts, from the week before
            kw["initial"] = past_week_geometry(specs, pods, t0)
        elif pol == "planner-first-plan":  # the planner's start kept all week: no re-planning
            kw["initial"] = past_week_geometry(specs, pods, t0, custom=cfg.custom,
                                               protect=cfg.protect != "none",
                                               burst_q=cfg.burst_q, levels=cfg.burst_levels,
                                               pool_q=cfg.burst_pool_q)
            kw["lend"] = lend
        elif pol == "static-hindsight":
            kw["initial"] = hindsight_geometry(specs, pods, 0.0, t1)
        elif pol in ("planner", "oracle"):
            if cfg.demand == "week":  # the oracle reads the week ahead instead (hindsight)
                kw["demand"] = _week(pods, pol == "oracle")
            else:
                fc = ArrivalForecast(pods, "forecast" if pol == "planner" else "oracle", t0,
                                     t1, lookahead=cfg.lookahead, quantile=cfg.quantile,
                                     seed=cfg.seed)
                kw["demand"] = planner_demand(fc, cfg.lookahead)
            if cfg.floor_week:
                kw["demand"] = _floored(kw["demand"], pods)
            kw.update(custom=cfg.custom, weights=protect_small(dict.fromkeys(pods.profiles, 1.0))
                      if cfg.protect == "all" else None, lend=lend)
            if cfg.hold_small:
                kw["hold"] = frozenset(p for p in pods.profiles
                                       if mig.profile_compute(p) <= SMALL_MAX)
            if cfg.start == "past-week":
                kw["initial"] = past_week_geometry(specs, pods, t0, custom=cfg.custom,
                                                   protect=cfg.protect != "none",
                                                   burst_q=cfg.burst_q,
                                                   levels=cfg.burst_levels,
                                                   pool_q=cfg.burst_pool_q)
        fc_w, fc_c = time.perf_counter() - w0, time.process_time() - c0
        res = run_mig(specs, pods, pol, t0, t1, **kw)
        row = summarize(pods, res, 0.0, t1)
        row.update(profile=cfg.profile, seed=cfg.seed, days=cfg.days,
                   forecast_seconds=round(fc_w, 1),
                   seconds=round(res.seconds + fc_w, 1),
                   cpu_seconds=round(res.cpu_seconds + fc_c, 1))
        rows.append(row)
    return rows
