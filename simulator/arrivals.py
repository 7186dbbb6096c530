"""Job arrivals per queue: daily and weekly seasonality and bursts from Helios, job shapes and
durations from openb (data/seeds/arrivals.json, jobs.json)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.config import SimConfig
from simulator.seeds import load_seed
from simulator.workloads import CATALOGUE


def _inv_cdf(rng: np.random.Generator, levels: list[float], values: list[float], n: int):
    """Sample from an empirical distribution given by its quantiles (log-linear between)."""
    v = np.log(np.maximum(np.asarray(values, dtype=float), 1.0))
    return np.exp(np.interp(rng.random(n), levels, v))


def sample_jobs(rng: np.random.Generator, n: int, mix: dict[str, float],
                fractional_share: float | None = None) -> pd.DataFrame:
    """Draw `n` job shapes: workload class, GPU count, fractional share, solo work, qos."""
    jobs = load_seed("jobs.json")
    names = list(mix)
    w = np.asarray([mix[k] for k in names], dtype=float)
    workload = np.asarray(names)[rng.choice(len(names), n, p=w / w.sum())]
    gshare = jobs["num_gpu_share"]
    counts = np.asarray([int(k) for k in gshare])
    num_gpu = counts[rng.choice(len(counts), n, p=np.asarray(list(gshare.values())) /
                                sum(gshare.values()))]
    share = jobs["fractional_share_of_single"] if fractional_share is None else fractional_share
    frac = (num_gpu == 1) & (rng.random(n) < share)
    frac |= workload == "notebook"  # dev pods always ask for a GPU share
    num_gpu[workload == "notebook"] = 1
    milli = np.where(frac, _inv_cdf(rng, jobs["quantile_levels"], jobs["gpu_milli_quantiles"], n),
                     1000.0)
    milli = np.clip(np.round(milli / 10) * 10, 100, 1000).astype(int)
    # openb run times (median ~9 min) clipped to [10 min, 3 days]: a phase programme needs time.
    work = np.clip(_inv_cdf(rng, jobs["quantile_levels"], jobs["duration_s_quantiles"], n),
                   600.0, 3 * 86400.0)
    qos = jobs["qos_share"]
    ls = rng.random(n) < qos.get("LS", 0.5) / sum(qos.values())
    priority = np.where(ls, 100, 0)
    return pd.DataFrame({"workload": workload, "num_gpu": num_gpu, "milli": milli,
                         "work": work, "priority": priority})


def seasonal_rate(cfg: SimConfig, t_hours: np.ndarray, profile: dict) -> np.ndarray:
    """Relative arrival rate per hour (mean 1 over a week): 24*hour share x 7*weekday share."""
    ts = cfg.start + pd.to_timedelta(t_hours, unit="h")
    hod = np.asarray(profile["hour_of_day_share"])[ts.hour] * 24
    dow = np.asarray(profile["day_of_week_share"])[ts.dayofweek] * 7
    return hod * dow


def _mix(cfg: SimConfig) -> dict[str, float]:
    mix = {k: v for k, v in cfg.workload_mix.items() if v > 0}
    unknown = [k for k in mix if k not in CATALOGUE]
    if unknown:
        raise ValueError(f"unknown workload class(es): {', '.join(unknown)}")
    return mix


def jobs_per_hour(cfg: SimConfig) -> float:
    """Mean arrivals per hour, all queues: the offered load over the expected GPU-seconds of
    a job (from a probe of its own seed, so the arrivals' random stream is not touched)."""
    probe = sample_jobs(np.random.default_rng(cfg.seed + 10_007), 4000, _mix(cfg),
                        cfg.fractional_share)
    gpu_s = float(np.mean(probe.num_gpu * probe.milli / 1000 * probe.work))
    return cfg.load * cfg.n_gpus * 3600.0 / gpu_s


def arrival_hours(cfg: SimConfig) -> np.ndarray:
    """The hours arrivals are drawn for, relative to `start` (the warm-up included)."""
    return np.arange(-np.ceil(cfg.warmup_hours), np.ceil(cfg.days * 24))


def generate_arrivals(cfg: SimConfig, rng: np.random.Generator) -> pd.DataFrame:
    """All job arrivals in [start - warmup, end), seconds relative to `start`."""
    profiles = load_seed("arrivals.json")["profiles"]
    mix = _mix(cfg)
    rate_h = jobs_per_hour(cfg)
    hours = arrival_hours(cfg)
    out = []
    for qi, queue in enumerate(cfg.queues):
        prof = profiles[qi % len(profiles)]
        rate = seasonal_rate(cfg, hours, prof) * rate_h / len(cfg.queues)
        # Bursts (sweeps): a share f of hours carry a multiplier m such that they hold the
        # observed share s of demand: s = f m / (f m + 1 - f)  =>  m = s (1 - f) / (f (1 - s)).
        f, s = prof["burst_hour_fraction"], prof["burst_share_of_demand"]
        m = s * (1 - f) / max(f * (1 - s), 1e-9)
        burst = rng.random(len(hours)) < f
        rate = rate * np.where(burst, m, 1.0) / (f * m + 1 - f)
        n = rng.poisson(rate)
        t = np.repeat(hours, n) * 3600 + rng.uniform(0, 3600, n.sum())
        jobs = sample_jobs(rng, int(n.sum()), mix, cfg.fractional_share)
        # A burst is a sweep of one job template: its jobs take the shape (class, GPUs,
        # priority) of the burst's first job; run times still differ.
        hour_of = np.repeat(np.arange(len(hours)), n)
        in_burst = burst[hour_of]
        if in_burst.any():
            shape = ["workload", "num_gpu", "milli", "priority"]
            jobs.loc[in_burst, shape] = jobs.loc[in_burst, shape].groupby(
                hour_of[in_burst]).transform("first").to_numpy()
        jobs["created"] = t
        jobs["queue"] = queue
        jobs["burst"] = in_burst
        out.append(jobs)
    arr = pd.concat(out, ignore_index=True)
    arr = arr[arr.created < cfg.duration_s].sort_values(["created", "queue"], kind="stable")
    return arr.reset_index(drop=True)
