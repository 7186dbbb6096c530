"""Jobs of the timeline replay: who arrives when, asking what, for how long.

Arrival profiles (per tenant = one of the six Helios Earth VCs of data/seeds/arrivals.json):
- ``helios``: each tenant's own hour-of-day x day-of-week shares and bursts of new GPU demand
  (Helios Earth, SC'21, May 2020; simulator.arrivals' burst model).
- ``dlrm``: every tenant follows the hour-of-day x day-of-week profile of GPU-instance
  creations of the Alibaba DLRM trace (NSDI'25, 31 days; data/seeds/timeline.json).

Sizes: a tenant's job is big (>= 8 GPUs) with its VC's Helios share of new jobs >= 8 GPUs
(0.01 for vchbv to 0.89 for vcLJZ; all Earth VCs 0.106). A big job is one 8-GPU pod (70 %) or a
gang of 2 (20 %) or 4 (10 %) 8-GPU pods: mean 12.0 GPUs against Helios Earth's 12.1 for jobs
>= 8 GPUs (the split itself is our assumption). Small jobs take openb's GPU-count shares
among 1/2/4 GPUs (98.9/0.2/0.2 %), 44 % of 1-GPU pods ask a share of a GPU (openb gpu_milli
quantiles); their mean, 1.0 GPU, is Helios Earth's 1.10 for jobs < 8 GPUs within rounding.
Durations: openb run times (quantiles in data/seeds/jobs.json) clipped to [10 min, 3 days] for
small jobs; big jobs the same distribution x ``big_duration_factor``, chosen so that big jobs
hold Helios Earth's share of running GPUs (0.87, Earth_vcs `running_gpu_num_noless_8`).
QoS: openb's LS share (0.57) is high priority (1), the rest 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.seeds import load_seed

PROFILES = ("helios", "dlrm")
START = pd.Timestamp("2026-01-05")  # a Monday 00:00 UTC: day-of-week shares start on Monday


def start_of(seed: int) -> pd.Timestamp:
    """The replay's time 0: a seed-chosen weekday, so that short runs see different days."""
    return START + pd.Timedelta(days=seed % 7)
GANG_SPLIT = {1: 0.7, 2: 0.2, 4: 0.1}  # pods of 8 GPUs per big job
BIG_RUNNING_SHARE = 0.87  # Helios Earth: share of running GPUs in jobs >= 8 GPUs
DUR_CLIP = (600.0, 3 * 86400.0)
BIG_MAX_S = 7 * 86400.0  # big jobs, after the factor: at most the forecaster's history
CLASSES = ("frac", "1", "2-4", "8", "gang")


@dataclass
class Jobs:
    """One row per job, sorted by arrival (seconds from START; negative = warm-up/history)."""

    arrival: np.ndarray
    duration: np.ndarray
    pods: np.ndarray  # pods in the job (> 1 only for gangs)
    gpus: np.ndarray  # whole GPUs per pod (1 for a fractional pod)
    milli: np.ndarray  # per GPU: 1000, or the share for fractional pods
    priority: np.ndarray
    tenant: np.ndarray  # index into ``tenants``
    tenants: tuple[str, ...]
    t0: pd.Timestamp = START  # wall-clock time of arrival 0 (calendar features read it)
    workload: np.ndarray | None = None  # workload key (job template) per job, see workload_keys

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def big(self) -> np.ndarray:
        """Jobs the reservation is for: 8-GPU pods and gangs."""
        return self.gpus >= 8

    @property
    def size_class(self) -> np.ndarray:
        c = np.where(self.milli < 1000, "frac", np.where(self.gpus == 1, "1", "2-4"))
        return np.where(self.pods > 1, "gang", np.where(self.gpus >= 8, "8", c))

    def __post_init__(self) -> None:
        self.gpu_request = self.pods * self.gpus * self.milli / 1000.0  # GPUs per job


def _inv_cdf(rng: np.random.Generator, levels, values, n: int) -> np.ndarray:
    v = np.log(np.maximum(np.asarray(values, dtype=float), 1.0))
    return np.exp(np.interp(rng.random(n), levels, v))


def _sizes(rng: np.random.Generator, big: np.ndarray) -> tuple[np.ndarray, ...]:
    jobs = load_seed("jobs.json")
    n = len(big)
    share = {int(k): v for k, v in jobs["num_gpu_share"].items() if int(k) < 8}
    k = np.array(list(share))
    p = np.array(list(share.values()))
    gpus = k[rng.choice(len(k), n, p=p / p.sum())]
    frac = (gpus == 1) & (rng.random(n) < jobs["fractional_share_of_single"])
    # openb's gpu_milli quantiles as a discrete distribution (nearest quantile level): the
    # trace's shares take few values, and so the shape mix stays small (FGD costs O(shapes))
    lv = np.asarray(jobs["quantile_levels"])
    q = np.asarray(jobs["gpu_milli_quantiles"])[np.abs(rng.random(n)[:, None] - lv).argmin(1)]
    milli = np.where(frac, np.clip(np.round(q / 10) * 10, 50, 990), 1000).astype(np.int64)
    gk, gp = np.array(list(GANG_SPLIT)), np.array(list(GANG_SPLIT.values()))
    pods = np.where(big, gk[rng.choice(len(gk), n, p=gp)], 1)
    gpus = np.where(big, 8, gpus)
    milli = np.where(big, 1000, milli)
    return pods.astype(np.int64), gpus.astype(np.int64), milli


def _durations(rng: np.random.Generator, n: int, clip=DUR_CLIP) -> np.ndarray:
    jobs = load_seed("jobs.json")
    return np.clip(_inv_cdf(rng, jobs["quantile_levels"], jobs["duration_s_quantiles"], n),
                   *clip)


def big_duration_factor(tenant_p: np.ndarray, weights: np.ndarray,
                        share: float = BIG_RUNNING_SHARE) -> float:
    """Big-job duration multiplier giving them ``share`` of running GPU-seconds."""
    pb = float((tenant_p * weights).sum() / weights.sum())
    rng = np.random.default_rng(12345)
    pods, gpus, milli = _sizes(rng, np.zeros(20000, bool))
    small = float((pods * gpus * milli / 1000).mean())
    big = 8 * sum(k * v for k, v in GANG_SPLIT.items())
    s = share
    return s * (1 - pb) * small / ((1 - s) * pb * big)


def tenant_rates(profile: str, hours: np.ndarray, seed: int, rng: np.random.Generator
                 ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tenants, big-job share per tenant, relative rate (T, H) with mean ~1 per tenant)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown arrival profile {profile!r}; choose {', '.join(PROFILES)}")
    profs = load_seed("arrivals.json")["profiles"]
    sizes = load_seed("timeline.json")["helios_sizes"]["per_vc"]
    names = [p["vc"] for p in profs]
    p_big = np.array([sizes[v]["big_job_share"] for v in names])
    ts = start_of(seed) + pd.to_timedelta(hours, unit="h")
    rel = np.empty((len(names), len(hours)))
    if profile == "helios":
        for i, p in enumerate(profs):
            r = np.asarray(p["hour_of_day_share"])[ts.hour] * 24 * \
                np.asarray(p["day_of_week_share"])[ts.dayofweek] * 7
            f, s = p["burst_hour_fraction"], p["burst_share_of_demand"]
            m = s * (1 - f) / max(f * (1 - s), 1e-9)
            burst = rng.random(len(hours)) < f
            rel[i] = r * np.where(burst, m, 1.0) / (f * m + 1 - f)
    else:
        # the DLRM trace's hour-of-day and day-of-week profile over its 31 days (its day 0 is
        # taken as a Monday: the trace's times are relative); its day-to-day level swings
        # (7 to 406 creations a day) are left out, or short replays would not be stationary
        series = np.asarray(load_seed("timeline.json")["dlrm_hourly_rate"]).reshape(31, 24)
        hod = series.mean(axis=0) / series.mean()
        day = series.mean(axis=1)
        dow = np.array([day[d::7].mean() for d in range(7)]) / day.mean()
        rel[:] = hod[ts.hour] * dow[ts.dayofweek]
    return names, p_big, rel


def generate_jobs(profile: str, seed: int, days: float = 14.0, warmup_days: float = 1.0,
                  history_days: float = 7.0, load: float = 0.8, capacity_gpus: int = 6212,
                  big_share: float = BIG_RUNNING_SHARE, max_days: float = 3.0) -> Jobs:
    """Jobs arriving in [-history_days, days): the first part only feeds the forecaster's
    history, the replay starts at -warmup_days and measures from 0."""
    rng = np.random.default_rng(seed)
    sizes = load_seed("timeline.json")["helios_sizes"]["per_vc"]
    hours = np.arange(-int(np.ceil(history_days * 24)), int(np.ceil(days * 24)))
    names, p_big, rel = tenant_rates(profile, hours, seed, rng)
    w = np.array([sizes[v]["new_jobs"] for v in names], dtype=float)
    w = w / w.sum()  # share of jobs per tenant: Helios Earth new GPU jobs per VC
    factor = big_duration_factor(p_big, w, big_share)
    # Expected GPU-seconds per job, from a probe draw, turns the load into jobs per hour.
    prng = np.random.default_rng(seed + 7919)
    pb = float((p_big * w).sum())
    big = prng.random(20000) < pb
    pods, gpus, milli = _sizes(prng, big)
    clip = (DUR_CLIP[0], max_days * 86400.0)
    dur = np.minimum(_durations(prng, 20000, clip) * np.where(big, factor, 1.0), BIG_MAX_S)
    gpu_s = float((pods * gpus * milli / 1000 * dur).mean())
    per_hour = load * capacity_gpus * 3600.0 / gpu_s
    rows = []
    for i in range(len(names)):
        # rates are normalized over history + window: the jobs still running at the start
        # (the history's) then match the window's level, so the cluster starts in steady state
        n = rng.poisson(per_hour * w[i] * rel[i] / max(rel[i].mean(), 1e-9))
        t = np.repeat(hours, n) * 3600.0 + rng.uniform(0, 3600, n.sum())
        rows.append((t, np.full(len(t), i), rng.random(len(t)) < p_big[i]))
    t = np.concatenate([r[0] for r in rows])
    tenant = np.concatenate([r[1] for r in rows])
    big = np.concatenate([r[2] for r in rows])
    order = np.argsort(t, kind="stable")
    t, tenant, big = t[order], tenant[order], big[order]
    pods, gpus, milli = _sizes(rng, big)
    dur = np.minimum(_durations(rng, len(t), clip) * np.where(big, factor, 1.0), BIG_MAX_S)
    # Heavy tails (runs up to 14 days) make one seed's offered load swing between ~0.6 and
    # ~1.0; like the openb protocol tunes a trace to a fixed load, every run time is scaled so
    # that the GPUs busy in the replayed window, were nothing to queue, average ``load``.
    lo, hi = -warmup_days * 86400.0, days * 86400.0
    busy = float((pods * gpus * milli / 1000.0 * np.clip(
        np.minimum(t + dur, hi) - np.maximum(t, lo), 0, None)).sum()) / (hi - lo)
    if busy > 0:
        dur = dur * (load * capacity_gpus / busy)
    qos = load_seed("jobs.json")["qos_share"]
    prio = (rng.random(len(t)) < qos["LS"] / sum(qos.values())).astype(np.int64)
    return Jobs(t, dur, pods, gpus, milli, prio, tenant.astype(np.int64), tuple(names),
                start_of(seed), workload_keys(dur, tenant, big, seed))


#: Within-workload spread of log run time over the total spread: the DLRM trace's, per
#: app_name over all instances with a run time (2.32 / 2.82; bench/results/runtime.md's data).
WITHIN_KEY_SPREAD = 0.82
KEYS_PER_GROUP = 20


def workload_keys(dur: np.ndarray, tenant: np.ndarray, big: np.ndarray, seed: int
                  ) -> np.ndarray:
    """A workload key per job (tenant x big/small x one of ``KEYS_PER_GROUP`` templates),
    carrying as much about run time as DLRM's app names do and no more: the key is the bin
    of log run time plus noise, the noise sized so that the spread of log run time within a
    key is ``WITHIN_KEY_SPREAD`` of the total. Its own random stream: the jobs themselves
    (and every earlier replay's decisions) do not change."""
    rng = np.random.default_rng(seed + 104729)
    out = np.zeros(len(dur), np.int64)
    lg = np.log(np.maximum(dur, 1.0))
    r2 = WITHIN_KEY_SPREAD ** 2
    for grp in np.unique(tenant * 2 + big):
        m = (tenant * 2 + big) == grp
        sd = float(lg[m].std()) or 1.0
        # posterior spread of x given x + e is sd * sn / sqrt(sd^2 + sn^2) = r * sd
        noisy = lg[m] + rng.normal(0.0, sd * np.sqrt(r2 / (1 - r2)), int(m.sum()))
        edges = np.quantile(noisy, np.linspace(0, 1, KEYS_PER_GROUP + 1)[1:-1])
        out[m] = grp * KEYS_PER_GROUP + np.searchsorted(edges, noisy)
    return out
