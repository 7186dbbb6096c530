"""Per-GPU metric grids (GPUs x sample steps) from pod segments, fully vectorized.

Additive contributions of every pod on a GPU are accumulated with difference arrays (one
np.add.at per segment boundary, one cumsum), then turned into the dcgm-exporter metrics.
"""
from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

from simulator.config import PHASES, SimConfig
from simulator.segments import Segments
from simulator.workloads import (CATALOGUE, CHECKPOINT_TX_BYTES, PCIE_FULL_BYTES, PHASE_LEVEL,
                                 iteration_period)

_ACT = np.asarray([PHASE_LEVEL[p][0] for p in PHASES])
_RX = np.asarray([PHASE_LEVEL[p][1] for p in PHASES])
_TX = np.asarray([PHASE_LEVEL[p][2] for p in PHASES])
# Framebuffer held per phase: weights/activations are allocated during start-up.
_FB = np.asarray([0.45 if p == "startup" else 1.0 for p in PHASES])
DIP_DEPTH, DIP_MEAN = 0.6, 35 / 128  # optimizer-step dip: SM to 40 %; mean of cos^8
AMBIENT_C, C_PER_W, THERMAL_TAU_S = 27.0, 0.15, 120.0  # temperature follows power (assumed)
IDLE_CLOCK_MHZ = 210.0           # P8 idle clock
# Throttle reason bits (nvmlClocksThrottleReasons): GpuIdle, SwPowerCap, HwSlowdown,
# SwThermalSlowdown.
TR_IDLE, TR_SW_POWER, TR_HW_SLOW, TR_SW_THERMAL = 0x1, 0x4, 0x8, 0x20


def _expand(pods: list, seg: Segments, cfg: SimConfig, n_steps: int):
    """Segments repeated for each GPU of their pod, with sample-index bounds [i0, i1)."""
    n_gpu = np.asarray([len(p.gpus) for p in pods], dtype=np.int64)[seg.pod]
    rep = np.repeat(np.arange(len(seg.pod)), n_gpu)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(n_gpu) - n_gpu, n_gpu)
    gpu = np.asarray([pods[p].gpus[o] for p, o in zip(seg.pod[rep], offs)], dtype=np.int64)
    i0 = np.clip(np.ceil(seg.t0[rep] / cfg.step_s), 0, n_steps).astype(np.int64)
    i1 = np.clip(np.ceil(seg.t1[rep] / cfg.step_s), 0, n_steps).astype(np.int64)
    keep = i1 > i0
    return rep[keep], gpu[keep], i0[keep], i1[keep]


def _accumulate(n_gpus: int, n_steps: int, gpu, i0, i1, values) -> np.ndarray:
    diff = np.zeros((n_gpus, n_steps + 1))
    np.add.at(diff, (gpu, i0), values)
    np.add.at(diff, (gpu, i1), -values)
    return np.cumsum(diff[:, :-1], axis=1)


def metric_grids(cfg: SimConfig, spec: dict, pods: list, seg: Segments, health_grids: dict,
                 rng: np.random.Generator) -> dict:
    """Every GPU-level metric as an (n_gpus, n_steps) grid."""
    n_steps = int(np.floor(cfg.duration_s / cfg.step_s + 1e-9))
    G = cfg.n_gpus
    rep, gpu, i0, i1 = _expand(pods, seg, cfg, n_steps)
    feats = {k: np.asarray([p.feats[k] for p in pods], dtype=float) for k in
             ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "pcie",
              "fb_used_mib", "power_dyn_w")}
    pod, ph, sp = seg.pod[rep], seg.phase[rep], seg.speed[rep]
    act = _ACT[ph] * sp

    def acc(values):
        return _accumulate(G, n_steps, gpu, i0, i1, values)

    sm = acc(feats["sm_active"][pod] * act)
    occ = acc(feats["sm_occupancy"][pod] * act)
    tensor = acc(feats["tensor_active"][pod] * act)
    dram = acc(feats["dram_active"][pod] * act)
    util = acc(np.where(_ACT[ph] > 0, np.minimum(1.0, 1.1 * feats["sm_active"][pod] *
                                                 _ACT[ph] * sp + 0.05), 0.0))
    rx = acc(feats["pcie"][pod] * _RX[ph] * sp * PCIE_FULL_BYTES)
    ckpt = ph == PHASES.index("checkpoint")
    tx = acc(np.where(ckpt, CHECKPOINT_TX_BYTES, feats["pcie"][pod] * PCIE_FULL_BYTES)
             * _TX[ph] * sp)
    fb = acc(feats["fb_used_mib"][pod] * _FB[ph])
    dyn = acc(feats["power_dyn_w"][pod] * act)

    mod = np.ones((G, n_steps))
    periods = np.asarray([_period(p, spec) for p in pods])[pod]
    # Only pods with a finite iteration period dip: notebooks and servers have none (inf).
    hi = (ph == PHASES.index("compute")) & np.isfinite(periods) & (2 * cfg.step_s * sp <= periods)
    for k in np.flatnonzero(hi):  # only in high-resolution mode: the optimizer-step dip
        t = np.arange(i0[k], i1[k]) * cfg.step_s
        cyc = ((t - seg.t0[rep[k]]) * sp[k] / periods[k]) % 1.0
        # a smooth dip (cos^8) once per iteration, normalized to keep the phase mean
        mod[gpu[k], i0[k]:i1[k]] *= (1 - DIP_DEPTH * np.cos(np.pi * cyc) ** 8) / \
            (1 - DIP_DEPTH * DIP_MEAN)

    def noisy(x, sd, hi_=1.0):
        return np.clip(x + rng.normal(0, sd, x.shape) * (x > 0), 0, hi_)

    out = {}
    out["sm"] = noisy(np.minimum(sm, 1.0) * mod, 0.015)
    out["occ"] = noisy(np.minimum(occ, 1.0) * mod, 0.01)
    out["tensor"] = noisy(np.minimum(tensor, 1.0) * mod, 0.01)
    out["dram"] = noisy(np.minimum(dram, 1.0), 0.01)
    out["util"] = np.round(noisy(np.minimum(util, 1.0), 0.02) * 100)
    out["copy"] = np.round(np.minimum(out["dram"] * 80.0, 100.0))
    out["rx"] = np.round(noisy(rx, 2e7, 32e9))
    out["tx"] = np.round(noisy(tx, 2e7, 32e9))
    out["fb"] = np.round(np.minimum(fb, spec["fb_mib"] * 0.98))
    reserved = np.round(spec["fb_mib"] * 0.012)  # driver/ECC reservation
    out["fb_free"] = spec["fb_mib"] - reserved - out["fb"]
    raw_power = spec["idle_w"] + dyn * mod ** 0.5
    power = np.minimum(raw_power, spec["tdp_w"]) * rng.normal(1.0, 0.01, raw_power.shape)
    out["power"] = np.round(np.clip(power, spec["idle_w"] * 0.8, spec["tdp_w"]), 3)
    # Temperature: first-order lag of the power-driven steady state (tau 120 s).
    a = np.exp(-cfg.step_s / THERMAL_TAU_S)
    steady = AMBIENT_C + C_PER_W * out["power"] + health_grids["temp_offset"]
    temp = lfilter([1 - a], [1, -a], steady - steady[:, :1], axis=1) + steady[:, :1]
    out["temp"] = np.round(temp)
    capped = raw_power >= 0.98 * spec["tdp_w"]
    hot = out["temp"] >= 85
    hw = health_grids["hw_slowdown"]
    idle = sm < 0.01  # from the noise-free activity: the clock does not flicker on noise
    out["throttle"] = (TR_IDLE * idle + TR_SW_POWER * capped + TR_HW_SLOW * hw
                       + TR_SW_THERMAL * hot).astype(float)
    clock = spec["sm_clock"] * (1 - 0.12 * capped) * (1 - 0.35 * hw) * (1 - 0.1 * hot)
    out["clock"] = np.round(np.where(idle & ~hw, IDLE_CLOCK_MHZ, clock))
    out["xid"] = health_grids["xid"].astype(float)
    out["sbe"] = health_grids["sbe"].astype(float)
    out["dbe"] = health_grids["dbe"].astype(float)
    return out


def _period(pod, spec) -> float:
    p = iteration_period(CATALOGUE[pod.workload], spec)
    return p if p == p else np.inf


METRIC_GRID = {
    "DCGM_FI_DEV_GPU_UTIL": "util", "DCGM_FI_DEV_MEM_COPY_UTIL": "copy",
    "DCGM_FI_DEV_FB_USED": "fb", "DCGM_FI_DEV_FB_FREE": "fb_free",
    "DCGM_FI_DEV_POWER_USAGE": "power", "DCGM_FI_DEV_SM_CLOCK": "clock",
    "DCGM_FI_DEV_GPU_TEMP": "temp", "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "sbe", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "dbe",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle", "DCGM_FI_PROF_SM_ACTIVE": "sm",
    "DCGM_FI_PROF_SM_OCCUPANCY": "occ", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram", "DCGM_FI_PROF_PCIE_TX_BYTES": "tx",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "rx",
}
