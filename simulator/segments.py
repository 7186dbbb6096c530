"""Per-pod timelines: phase programme x interference speed, as flat numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.config import PHASES, SimConfig
from simulator.workloads import CATALOGUE, iteration_period, phase_programme


@dataclass
class Segments:
    """One row per (pod, interval) with a constant phase and speed, sorted by (pod, t0)."""

    pod: np.ndarray      # index into ClusterSim.pods
    t0: np.ndarray       # seconds from cfg.start
    t1: np.ndarray
    phase: np.ndarray    # index into PHASES
    speed: np.ndarray    # interference speed (1 = solo)
    iters0: np.ndarray   # optimizer steps completed at t0 (training pods)
    rate: np.ndarray     # optimizer steps per second within the interval


def diurnal_busy_prob(cfg: SimConfig, profile_hod: list[float]):
    """Serving load follows the hour-of-day shape of human activity: the Helios hour-of-day
    share of new demand (arrivals.json profile 0) is the proxy for when users are active."""
    hod = np.asarray(profile_hod) * 24
    hod = (hod - hod.min()) / max(hod.max() - hod.min(), 1e-9)
    start_h = cfg.start.hour + cfg.start.minute / 60

    def busy(t: float) -> float:
        return 0.15 + 0.75 * float(hod[int((start_h + t / 3600) % 24)])
    return busy


def build_segments(cfg: SimConfig, spec: dict, pods: list, rng: np.random.Generator,
                   busy) -> tuple[Segments, list]:
    """Lay each started pod's phase programme over its run, split where its speed changes.

    Returns the segments and the list of (pod, start, end, phase) phase rows for the truth.
    """
    end = cfg.duration_s
    cols = {k: [] for k in ("pod", "t0", "t1", "phase", "speed", "iters0", "rate")}
    phase_rows = []
    code = {p: i for i, p in enumerate(PHASES)}
    for pod in pods:
        if np.isnan(pod.started):
            continue
        w = CATALOGUE[pod.workload]
        stop = pod.finished if not np.isnan(pod.finished) else end
        prog = phase_programme(w, pod.started, stop, rng, busy)
        if not prog:
            continue
        phase_rows.extend((pod.pid, a, b, ph) for a, b, ph in prog)
        p_start = np.asarray([a for a, _, _ in prog])
        p_code = np.asarray([code[ph] for _, _, ph in prog])
        sp = pod.speed_segments or [(pod.started, stop, 1.0)]
        s_start = np.asarray([a for a, _, _ in sp])
        s_val = np.asarray([v for _, _, v in sp])
        cuts = np.unique(np.concatenate([p_start, s_start, [stop]]))
        cuts = cuts[(cuts >= pod.started) & (cuts <= stop)]
        a, b = cuts[:-1], cuts[1:]
        ph = p_code[np.searchsorted(p_start, a, side="right") - 1]
        speed = s_val[np.clip(np.searchsorted(s_start, a, side="right") - 1, 0, len(sp) - 1)]
        period = iteration_period(w, spec)
        rate = np.where(ph == code["compute"], speed / period, 0.0) if period == period \
            else np.zeros(len(a))
        iters = rate * (b - a)
        cols["pod"].append(np.full(len(a), pod.pid))
        cols["t0"].append(a)
        cols["t1"].append(b)
        cols["phase"].append(ph)
        cols["speed"].append(speed)
        cols["iters0"].append(np.concatenate([[0.0], np.cumsum(iters)[:-1]]))
        cols["rate"].append(rate)
    arrays = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    arrays["pod"] = arrays["pod"].astype(np.int64)
    arrays["phase"] = arrays["phase"].astype(np.int64)
    return Segments(**arrays), phase_rows
