"""MIG pods of the timeline's MIG replay: who arrives when, asking which MIG profile, how long.

Every pod asks one instance of one profile. Sources and assumptions:
- Total arrival rate per hour: the timeline's arrival profiles (`workload.tenant_rates`):
  ``helios`` = the six Helios Earth VCs' hour-of-day x day-of-week shares and bursts, weighted
  by their new-job counts; ``dlrm`` = the DLRM trace's hour-of-day x day-of-week shape.
- Which tenant a pod is from, per hour: the Helios VCs' own hour-of-day x day-of-week shares x
  their job counts (both profiles: the DLRM trace has no tenants). Evidence: in Helios the VCs
  running mostly >= 8-GPU jobs (vc6YE, vcLJZ, ...) submit almost nothing 03:00-08:00 while
  vchbv (99 % small jobs) is flat, so the big-job share swings over the day and week.
- Large or small: a tenant's pod is "large" (training-like) with its VC's Helios share of new
  jobs >= 8 GPUs (data/seeds/timeline.json): 1 % for vchbv, 55-89 % for the others, ~10 % of
  all pods. ASSUMPTION: large pods ask 3g/4g/7g (30/30/40 %), small ones (inference-like)
  1g/2g/3g (50/30/20 %); no public trace gives MIG profile requests.
- GPU family: a pod asks a 40 GB profile name (`1g.5gb` ... `7g.40gb`) with the share of
  A100-40GB GPUs in the cluster, else an 80 GB name (`1g.10gb` ... `7g.80gb`).
- Durations: openb run times (data/seeds/jobs.json quantiles, Alibaba) clipped to
  [10 min, 1 day]; large pods x ``large_factor`` (ASSUMPTION: training runs longer; Helios's
  mean GPU-job run time, 5,131 s, is ~2x openb's clipped mean), clipped the same.
- Load: the run times are scaled so that the compute slices busy in the replayed window, were
  nothing to queue, average ``load`` of the cluster's slices (as `workload.generate_jobs`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.seeds import load_seed
from simulator.timeline.workload import start_of, tenant_rates

SMALL = {1: 0.5, 2: 0.3, 3: 0.2}     # compute slices -> share (assumption, see above)
LARGE = {3: 0.3, 4: 0.3, 7: 0.4}
FAMILY = {"40": {1: "1g.5gb", 2: "2g.10gb", 3: "3g.20gb", 4: "4g.20gb", 7: "7g.40gb"},
          "80": {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}}
DUR_CLIP = (600.0, 86400.0)


@dataclass
class MigPods:
    """One row per pod, sorted by arrival (s from the replay's time 0; < 0 = history)."""

    arrival: np.ndarray
    duration: np.ndarray
    profile: np.ndarray           # index into ``profiles``
    large: np.ndarray             # bool: from the training-like class
    profiles: tuple[str, ...]
    t0: pd.Timestamp

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def compute(self) -> np.ndarray:
        """Compute slices per pod."""
        c = np.array([int(p.split("g.")[0]) for p in self.profiles])
        return c[self.profile]


def mix_by_hour(hours: np.ndarray, seed: int) -> np.ndarray:
    """(H,) probability that a pod arriving in each hour is large (Helios VCs' shapes)."""
    profs = load_seed("arrivals.json")["profiles"]
    sizes = load_seed("timeline.json")["helios_sizes"]["per_vc"]
    ts = start_of(seed) + pd.to_timedelta(hours, unit="h")
    w = np.array([sizes[p["vc"]]["new_jobs"] for p in profs], float)
    p_big = np.array([sizes[p["vc"]]["big_job_share"] for p in profs])
    share = np.array([np.asarray(p["hour_of_day_share"])[ts.hour] *
                      np.asarray(p["day_of_week_share"])[ts.dayofweek] for p in profs])
    comp = w[:, None] * share  # tenants' arrivals per hour, up to a constant
    return (comp * p_big[:, None]).sum(0) / np.maximum(comp.sum(0), 1e-12)


def _durations(rng: np.random.Generator, n: int) -> np.ndarray:
    jobs = load_seed("jobs.json")
    v = np.log(np.maximum(np.asarray(jobs["duration_s_quantiles"], float), 1.0))
    return np.clip(np.exp(np.interp(rng.random(n), jobs["quantile_levels"], v)), *DUR_CLIP)


def generate_mig_pods(profile: str, seed: int, days: float = 7.0, warmup_days: float = 1.0,
                      history_days: float = 7.0, load: float = 0.85, slices: int = 1680,
                      share40: float = 1 / 3, large_factor: float = 4.0) -> MigPods:
    """Pods arriving in [-history_days, days) on a cluster of ``slices`` compute slices."""
    rng = np.random.default_rng(seed)
    hours = np.arange(-int(np.ceil(history_days * 24)), int(np.ceil(days * 24)))
    names, _, rel = tenant_rates(profile, hours, seed, rng)
    sizes = load_seed("timeline.json")["helios_sizes"]["per_vc"]
    w = np.array([sizes[v]["new_jobs"] for v in names], float)
    rate = (w[:, None] * rel).sum(0) / w.sum()
    rate = rate / max(rate.mean(), 1e-9)
    p_large = mix_by_hour(hours, seed)
    # expected slice-seconds per pod (probe draw) turns the load into pods per hour
    prng = np.random.default_rng(seed + 7919)
    big = prng.random(20000) < float(p_large.mean())
    c = np.where(big, prng.choice(list(LARGE), 20000, p=list(LARGE.values())),
                 prng.choice(list(SMALL), 20000, p=list(SMALL.values())))
    d = np.clip(_durations(prng, 20000) * np.where(big, large_factor, 1.0), *DUR_CLIP)
    per_hour = load * slices * 3600.0 / float((c * d).mean())
    n = rng.poisson(per_hour * rate)
    t = np.repeat(hours, n) * 3600.0 + rng.uniform(0, 3600, n.sum())
    order = np.argsort(t, kind="stable")
    t = t[order]
    hidx = np.repeat(np.arange(len(hours)), n)[order]
    large = rng.random(len(t)) < p_large[hidx]
    comp = np.where(large, rng.choice(list(LARGE), len(t), p=list(LARGE.values())),
                    rng.choice(list(SMALL), len(t), p=list(SMALL.values())))
    fam = np.where(rng.random(len(t)) < share40, "40", "80")
    profiles = tuple(sorted({p for f in FAMILY.values() for p in f.values()},
                            key=lambda p: (int(p.split("g.")[0]), p)))
    index = {p: i for i, p in enumerate(profiles)}
    prof = np.array([index[FAMILY[f][k]] for f, k in zip(fam, comp)], dtype=np.int64)
    dur = np.clip(_durations(rng, len(t)) * np.where(large, large_factor, 1.0), *DUR_CLIP)
    lo, hi = -warmup_days * 86400.0, days * 86400.0
    busy = float((comp * np.clip(np.minimum(t + dur, hi) - np.maximum(t, lo), 0, None)).sum())
    if busy > 0:  # one factor per seed: the replayed window's offered load is the target
        dur = dur * (load * slices * (hi - lo) / busy)
    return MigPods(t, dur, prof, large, profiles, start_of(seed))
