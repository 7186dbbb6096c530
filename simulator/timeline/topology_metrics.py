"""What the topology replay reports per run (simulator.timeline.topology): gang job completion
time, 1-GPU delays, and the work of big jobs delivered in the measured window."""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import MILLI
from simulator.timeline.workload import Jobs


def summarize(jobs: Jobs, res: dict, t0: float, t1: float) -> dict:
    """Gang job completion time (wait + run) and 1-GPU delays, in minutes, over the jobs that
    arrive in [t0, t1); a job that never started counts with its wait until t1 (a floor)."""
    m = (jobs.arrival >= t0) & (jobs.arrival < t1)
    started = np.isfinite(res["start"])
    wait = np.where(started, res["start"] - jobs.arrival, t1 - jobs.arrival)
    jct = wait + np.where(started, res["run"], jobs.duration)
    gang = m & (jobs.pods > 1)
    one = m & (jobs.pods == 1) & (jobs.gpus == 1) & (jobs.milli >= MILLI)
    q = lambda a, p: round(float(np.percentile(a, p)) / 60, 1) if len(a) else float("nan")
    return {"policy": res["policy"], "gangs": int(gang.sum()),
            "gang_jct_p50_min": q(jct[gang], 50), "gang_jct_p95_min": q(jct[gang], 95),
            "gang_wait_p95_min": q(wait[gang], 95),
            "gangs_spread_racks": int((gang & started & (res["spread"] >= 1)).sum()),
            "gangs_spread_blocks": int((gang & started & (res["spread"] == 2)).sum()),
            "gangs_unstarted": int((gang & ~started).sum()),
            "one_gpu": int(one.sum()), "one_gpu_wait_p95_min": q(wait[one], 95),
            "one_gpu_jct_p95_min": q(jct[one], 95),
            "unstarted": int((m & ~started).sum()), "seconds": round(res["seconds"], 1),
            # work (GPU-hours at full size) of the gangs that finished in the window, per day
            "gang_gpu_h_done_per_day": round(float((jobs.pods * jobs.gpus * jobs.duration)[
                gang & started & (res["start"] + res["run"] <= t1)].sum()) / 3600 /
                max((t1 - t0) / 86400, 1e-9), 1),
            "gangs_started_smaller": int((gang & started & (res["size"] < jobs.pods)).sum()),
            "big_work_gpu_h_per_day": round(big_work_gpu_h(jobs, res, t0, t1) /
                                            max((t1 - t0) / 86400, 1e-9), 1),
            "eight_gpu_wait_p95_min": q(wait[m & (jobs.pods == 1) & (jobs.gpus >= 8)], 95)}


def big_work_gpu_h(jobs: Jobs, res: dict, t0: float, t1: float) -> float:
    """Work of big jobs (8 GPUs or more) done inside [t0, t1), in full-size full-speed
    GPU-hours, finished or not: a job delivers its pods x GPUs x duration evenly over its run,
    so a spread gang (slower) or one started smaller (fewer pods, longer) delivers less per
    hour of its run than its GPUs x hours."""
    segs = res.get("segments", {})
    big = (jobs.pods * jobs.gpus >= 8) & np.isfinite(res["start"])
    even = big.copy()
    even[list(segs)] = False
    s, r = res["start"][even], res["run"][even]
    inside = np.clip(np.minimum(s + r, t1) - np.maximum(s, t0), 0.0, None)
    work = (jobs.pods * jobs.gpus * jobs.duration)[even].astype(float)
    total = float((work * inside / np.maximum(r, 1e-9)).sum())
    for j, parts in segs.items():  # regrown elastic gangs: each size at its own rate
        end = float(res["start"][j] + res["run"][j])
        for (a, rate), nxt in zip(parts, [*[p[0] for p in parts[1:]], end]):
            total += rate * max(0.0, min(nxt, t1) - max(a, t0))
    return total / 3600
