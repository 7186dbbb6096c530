"""Occasional unhealthy GPUs: ECC errors, XID errors and thermal throttling episodes.

Rates are assumptions chosen to be visible in a few days of data (field studies report SBEs
in bursts of tens per hour on a degrading GPU, a DBE followed by XID 48, and hardware
slowdown under failing cooling). The truth table lists each episode.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.config import SimConfig

CONDITIONS = ("ecc_sbe", "ecc_dbe", "xid", "thermal")
XID_CODE = {"ecc_dbe": 48, "xid": 43}  # 48: double-bit ECC error; 43: GPU stopped processing


def draw_health(cfg: SimConfig, rng: np.random.Generator) -> pd.DataFrame:
    """Episodes (gpu index, start s, end s, condition) for a few random GPUs."""
    n = int(round(cfg.unhealthy_fraction * cfg.n_gpus))
    if cfg.unhealthy_fraction > 0:
        n = max(n, 1)
    gpus = np.sort(rng.choice(cfg.n_gpus, size=min(n, cfg.n_gpus), replace=False))
    rows = []
    first = int(rng.integers(0, len(CONDITIONS)))  # conditions cycle: a few GPUs show them all
    for k, g in enumerate(gpus):
        cond = CONDITIONS[(first + k) % len(CONDITIONS)]
        start = rng.uniform(0.1, 0.6) * cfg.duration_s
        # A DBE needs a GPU reset: it lasts to the end; the others clear after hours.
        end = cfg.duration_s if cond == "ecc_dbe" else min(
            cfg.duration_s, start + rng.uniform(0.1, 0.3) * cfg.duration_s + 1800)
        rows.append((int(g), start, end, cond))
    return pd.DataFrame(rows, columns=["gpu_index", "start", "end", "condition"])


def apply_health(health: pd.DataFrame, n_steps: int, step: float, rng: np.random.Generator,
                 grids: dict) -> None:
    """Write the episodes' effects into the per-GPU grids (in place)."""
    t = np.arange(n_steps) * step
    for row in health.itertuples():
        on = (t >= row.start) & (t < row.end)
        g = row.gpu_index
        if row.condition in ("ecc_sbe", "ecc_dbe"):
            # Counters are cumulative: increments while degraded, flat afterwards.
            sbe = rng.poisson(20.0 * step / 3600.0, n_steps) * on
            grids["sbe"][g] += np.cumsum(sbe)
        if row.condition == "ecc_dbe":
            dbe = rng.poisson(0.5 * step / 3600.0, n_steps) * on
            dbe[np.argmax(on)] += 1  # the error that opened the episode
            grids["dbe"][g] += np.cumsum(dbe)
        if row.condition in XID_CODE:
            grids["xid"][g] = np.where(on, XID_CODE[row.condition], grids["xid"][g])
        if row.condition == "thermal":
            grids["temp_offset"][g] += 18.0 * on
            grids["hw_slowdown"][g] |= on
