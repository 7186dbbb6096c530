"""Calibrate the MPS interference parameters to Gavel's measured co-location speeds.

Random pairs of training classes (with the per-pod jitter the generator uses) are scored by
simulator.interference.speed; a grid search picks the parameters whose speed quantiles
(10 %..90 %) are closest to Gavel's physical V100 single-GPU pairs (gavel_speeds.json).
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from simulator import interference
from simulator.workloads import CATALOGUE, gpu_spec, mean_features, solo_features

LEVELS = np.round(np.arange(0.1, 0.91, 0.1), 2)
GRID = {"occ_cap": [0.3, 0.4, 0.5, 0.6, 0.7, 0.9], "occ_exp": [0.25, 0.5, 1.0, 1.5, 2.0],
        "bw_theta": [0.5, 0.7, 0.9, 1.1], "bw_beta": [3.0, 6.0, 12.0, 24.0, 48.0]}


def random_training_pairs(n: int, seed: int = 7, gpu_model: str = "V100") -> tuple[dict, dict]:
    """Solo features of `n` random (a, b) pairs of training classes."""
    rng = np.random.default_rng(seed)
    spec = gpu_spec(gpu_model)
    train = [w for w in CATALOGUE.values() if w.kind == "train"]
    sides = []
    for _ in range(2):
        idx = rng.integers(0, len(train), n)
        feats = {k: np.empty(n) for k in ("sm_active", "sm_occupancy", "dram_active", "pcie")}
        for i, w in enumerate(train):
            m = idx == i
            f = mean_features(w, solo_features(w, spec, rng, int(m.sum())))
            for k in feats:
                feats[k][m] = f[k]
        sides.append(feats)
    return sides[0], sides[1]


def pair_speeds(p: dict, n: int = 4000, sharing: str = "mps") -> np.ndarray:
    """Both sides' speeds of `n` random training pairs under parameters `p`."""
    a, b = random_training_pairs(n)
    return np.concatenate([interference.speed(a, b, sharing, p),
                           interference.speed(b, a, sharing, p)])


def calibrate_interference(seed_dir: Path) -> dict:
    gavel = json.loads((Path(seed_dir) / "gavel_speeds.json").read_text())
    levels = np.asarray(gavel["quantile_levels"])
    target = np.interp(LEVELS, levels, gavel["reference_quantiles"])
    best, best_err = None, np.inf
    for values in itertools.product(*GRID.values()):
        p = dict(interference.DEFAULT_PARAMS, **dict(zip(GRID, values)))
        err = float(np.mean((np.quantile(pair_speeds(p, 1500), LEVELS) - target) ** 2))
        if err < best_err:
            best, best_err = p, err
    got = np.quantile(pair_speeds(best), LEVELS)
    return {
        "provenance": {
            "source": "gavel_speeds.json (gavel-colocation/gavel_pairs_flat.csv, physical V100)",
            "method": "grid search of the MPS parameters of simulator/interference.py over "
                      f"{GRID}; objective: mean squared difference of speed quantiles "
                      f"{LEVELS.tolist()} over random training-class pairs vs Gavel's; "
                      "ctx_cost (time-slice context switch) and node_gamma are assumptions",
        },
        "params": best,
        "rmse": round(best_err ** 0.5, 4),
        "quantile_levels": LEVELS.tolist(),
        "gavel_quantiles": [round(float(x), 4) for x in target],
        "simulated_quantiles": [round(float(x), 4) for x in got],
    }
