"""The ground-truth interference function: co-located throughput / solo throughput.

speed(a | partners) depends on both sides' *solo* features, not on workload identity, and never
increases when a partner is added or gets busier:
- time-slicing: contexts take turns, so a's share falls with the partners' SM demand once the
  summed demand exceeds the GPU, plus context-switch and cache-refill costs that grow with the
  partners' SM and DRAM activity;
- MPS: kernels run concurrently, so the cost comes from SM-resource overlap (summed occupancy
  above the SMs' capacity) and memory-bandwidth contention (summed DRAM activity above a
  threshold, weighted by a's own DRAM intensity);
- node: separate GPUs, shared PCIe root complex / host memory: a mild cost from PCIe overlap.
The MPS parameters are calibrated (simulator/calibrate.py) so that speeds over random pairs of
training classes match Gavel's measured V100 space-sharing speeds (data/seeds/gavel_speeds.json);
the stored parameters live in data/seeds/interference.json.
"""
from __future__ import annotations

import numpy as np

from simulator.seeds import load_seed

#: Used when interference.json is absent (during calibration itself).
DEFAULT_PARAMS = {"occ_cap": 0.9, "occ_exp": 1.5, "bw_theta": 0.7, "bw_beta": 2.0,
                  "ctx_cost": 0.1, "node_gamma": 0.25}


def params() -> dict:
    try:
        return dict(DEFAULT_PARAMS, **load_seed("interference.json")["params"])
    except Exception:  # noqa: BLE001 - the seed may not exist yet while calibrating
        return dict(DEFAULT_PARAMS)


def _bandwidth(a_dram, p_dram, p: dict):
    # Monotone in the partners' load (another partner never speeds `a` up): the cost grows
    # with the summed demand above the threshold, weighted by a's own DRAM intensity.
    over = np.maximum(a_dram + p_dram - p["bw_theta"], 0.0)
    return 1.0 / (1.0 + p["bw_beta"] * over * (0.5 + a_dram))


def speed(a: dict, partner: dict, sharing: str, p: dict | None = None) -> np.ndarray:
    """Speed of side `a` (arrays of solo features) next to `partner` (partners' features
    summed). Keys: sm_active, sm_occupancy, dram_active, pcie. Returns values in (0, 1]."""
    p = p or params()
    a_sm, b_sm = np.asarray(a["sm_active"]), np.asarray(partner["sm_active"])
    a_dr, b_dr = np.asarray(a["dram_active"]), np.asarray(partner["dram_active"])
    if sharing == "node":
        s = 1.0 - p["node_gamma"] * np.asarray(a["pcie"]) * np.minimum(partner["pcie"], 1.0)
    elif sharing == "timeslice":
        share = 1.0 / np.maximum(a_sm + b_sm, 1.0)
        ctx = 1.0 - p["ctx_cost"] * np.minimum(b_sm, 1.0)
        # contexts run one at a time: no bandwidth sharing, but each switch finds the L2
        # cache filled by the partner, a cost growing with the partner's DRAM traffic
        s = share * ctx * (1.0 - p["ctx_cost"] * np.minimum(b_dr, 1.0))
    elif sharing == "mps":
        occ = np.asarray(a["sm_occupancy"]) + np.asarray(partner["sm_occupancy"])
        sm_term = np.maximum(occ / p["occ_cap"], 1.0) ** -p["occ_exp"]
        busy = np.minimum(1.0, 0.5 + 0.5 * b_sm)  # an idle partner costs little
        s = (1.0 - busy * (1.0 - sm_term)) * _bandwidth(a_dr, b_dr, p)
    else:
        raise ValueError(f"unknown sharing mode {sharing!r}")
    return np.clip(s, 0.02, 1.0)
