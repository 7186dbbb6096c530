"""Workload classes, GPU models, per-pod solo features and phase programmes.

Where numbers come from:
- Compute-phase power (fraction of the power limit) and micro-batch periods: Zeus
  (data/seeds/power.json, derived from zeus-power/summary_power_<gpu>.csv by derive_seeds.py).
- SM/tensor/DRAM activity levels, framebuffer footprints, PCIe rates and phase durations are
  design assumptions (typical dcgm-exporter readings of these model families); no public
  trace in ../shared/traces has per-kernel profiling counters. They are named here in one place.
- Peak framebuffer is set by the pod's configuration, known before it starts (see FB_CONFIG):
  the batch-size sets are the sizes Zeus swept for each network; the memory model and its
  constants are assumptions (no trace in ../shared/traces records memory per configuration).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.seeds import load_seed

# GPU datasheet constants: framebuffer (MiB as nvidia-smi reports it), max SM clock (MHz),
# idle power (W, typical P8 reading), and which Zeus file calibrates the power fractions
# (A100/H100 are not in Zeus: they borrow the A40 fractions, the closest Ampere part).
GPU_SPECS = {
    "A40": {"fb_mib": 46068, "sm_clock": 1740, "idle_w": 30.0, "zeus": "a40", "tdp_w": None},
    "V100": {"fb_mib": 32510, "sm_clock": 1380, "idle_w": 35.0, "zeus": "v100", "tdp_w": None},
    "P100": {"fb_mib": 16280, "sm_clock": 1328, "idle_w": 30.0, "zeus": "p100", "tdp_w": None},
    "RTX6000": {"fb_mib": 24220, "sm_clock": 1770, "idle_w": 25.0, "zeus": "rtx6000",
                "tdp_w": None},
    "A100": {"fb_mib": 81920, "sm_clock": 1410, "idle_w": 55.0, "zeus": "a40", "tdp_w": 400.0},
    "H100": {"fb_mib": 81559, "sm_clock": 1980, "idle_w": 70.0, "zeus": "a40", "tdp_w": 700.0},
}


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    kind: str            # train | serve | notebook
    zeus: str            # power.json network key that calibrates the compute-phase power
    sm: float            # DCGM_FI_PROF_SM_ACTIVE in steady compute (solo)
    occ: float           # DCGM_FI_PROF_SM_OCCUPANCY
    tensor: float        # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    dram: float          # DCGM_FI_PROF_DRAM_ACTIVE
    pcie: float          # host<->device traffic in compute, share of ~16 GB/s (PCIe 4 x16)
    fb_mib: float        # peak framebuffer at the reference (median) batch size of FB_CONFIG
    accum: int = 1       # micro-batches per optimizer step (sets the visible iteration period)
    priority: int = 0
    # Mean activity over the phase programme relative to steady compute (what a partner
    # feels on average). Training: ~6 % eval at 0.55, ~3 % stalls, ~2 % checkpoints -> 0.9;
    # notebooks: compute bursts of ~270 s per ~1830 s -> 0.15; serving: busy about half the
    # day (diurnal_busy_prob averages ~0.5), idle at 0.06 -> 0.55.
    duty: float = 0.9


# Iteration period = Zeus micro-batch period x `accum`: the optimizer step (gradient
# all-reduce + update) is the dip that shows in SM activity at <= 1 s sampling.
CATALOGUE = {w.name: w for w in [
    WorkloadClass("resnet50", "train", "resnet50/imagenet", 0.88, 0.55, 0.45, 0.55, 0.30,
                  14500, accum=8),
    WorkloadClass("bert", "train", "bert_base_uncased/squad", 0.84, 0.45, 0.55, 0.45, 0.10,
                  11000, accum=8),
    WorkloadClass("llm-finetune", "train", "bert_base_uncased/sentiment140", 0.93, 0.35, 0.70,
                  0.72, 0.08, 30000, accum=64),
    WorkloadClass("recsys", "train", "ncf/movielens-1m", 0.35, 0.25, 0.10, 0.45, 0.45, 3500,
                  accum=128),
    WorkloadClass("speech", "train", "deepspeech2/librispeech", 0.70, 0.40, 0.30, 0.50, 0.15,
                  9000, accum=4),
    WorkloadClass("llm-serving", "serve", "bert_base_uncased/squad", 0.60, 0.30, 0.40, 0.80,
                  0.05, 21000, priority=1000, duty=0.55),
    WorkloadClass("notebook", "notebook", "shufflenetv2/cifar100", 0.50, 0.30, 0.20, 0.35,
                  0.10, 4000, duty=0.15),
]}

# Phase activity relative to steady compute (SM/tensor/DRAM/power dynamic part) and PCIe
# traffic (share of 16 GB/s: rx = host->device, tx = device->host). Assumptions.
PHASE_LEVEL = {  # phase: (activity, pcie_rx, pcie_tx)
    "startup": (0.08, 0.55, 0.02),
    "compute": (1.0, 1.0, 0.1),
    "eval": (0.55, 0.6, 0.1),
    "checkpoint": (0.04, 0.02, 1.0),  # tx: share of CHECKPOINT_TX_BYTES, not of the pod's pcie
    "stall": (0.12, 0.05, 0.05),
    "idle": (0.0, 0.0, 0.0),
    "serving_busy": (1.0, 1.0, 0.6),
    "serving_idle": (0.06, 0.05, 0.03),
}
PCIE_FULL_BYTES = 16e9
# Checkpoint writes are bound by the storage path, not by the job's input pipeline: device ->
# host at ~2.4 GB/s (NVMe / parallel file system write rate; assumption) whatever the class.
CHECKPOINT_TX_BYTES = 2.4e9


def gpu_spec(model: str) -> dict:
    """Datasheet constants plus the power limit (Zeus' highest limit for the calibrating GPU)."""
    key = model.upper().replace("NVIDIA ", "").split("-")[0]
    if key not in GPU_SPECS:
        raise ValueError(f"unknown gpu_model {model!r}; known: {', '.join(GPU_SPECS)}")
    spec = dict(GPU_SPECS[key], name=key)
    zeus = load_seed("power.json")["gpus"][spec["zeus"]]
    spec["tdp_w"] = spec["tdp_w"] or zeus["power_limit_w"]
    spec["power_fraction"] = {k: v["power_fraction"] for k, v in zeus["networks"].items()}
    spec["micro_period"] = {k: v["iteration_period_s"] for k, v in zeus["networks"].items()}
    return spec


def iteration_period(w: WorkloadClass, spec: dict) -> float:
    """True solo iteration (optimizer step) period in seconds; NaN for non-training pods."""
    if w.kind != "train":
        return float("nan")
    return spec["micro_period"][w.zeus] * w.accum


# Peak framebuffer of one pod = fixed part (weights, optimizer state, CUDA context) + a
# per-sample part (activations, or the KV cache of a server) x its per-GPU batch size, times a
# small residual. Why: in real clusters a job's peak memory is fixed by its configuration
# (model, batch size, sequence length, precision), which is in the job spec before the pod
# starts; the generator exposes it as the pod label BATCH_LABEL so a predictor can use it.
# - Batch-size sets: the sizes Zeus swept for the calibrating network (zeus-power
#   summary_power_*.csv); llm-finetune (micro-batches 1-16) and llm-serving (concurrent
#   sequences 8-256) are assumptions. A pod draws one of the sizes whose peak fits in 90 % of
#   the GPU (a configuration that runs out of memory does not run).
# - Fixed parts (MiB) are assumptions; the per-sample part is set so that the reference
#   (lower-median) batch gives the class's fb_mib. Check against Zeus: the largest ResNet-50
#   batch it ran is 128 on a 16 GB P100, 256 on a 24 GB RTX6000, 512 on a 48 GB A40; this model
#   puts those at 10.3, 18.7 and 35.3 GB, all of which fit.
# - Residual: lognormal(0, FB_RESIDUAL_SIGMA), the run-to-run variation of one configuration
#   (caching-allocator fragmentation, cuDNN workspace choice): an assumption. The generator
#   used to draw the whole per-pod variation as an unexplained lognormal(0, 0.15), which puts
#   a 95 % pre-start upper bound ~29 % above the peak on average whatever the predictor.
BATCH_LABEL = "foresight.io/batch-size"
FB_RESIDUAL_SIGMA = 0.04
FB_CONFIG = {  # class: (per-GPU batch sizes, fixed MiB)
    "resnet50": ((32, 64, 128, 192, 256, 360, 512), 2000.0),
    "bert": ((8, 12, 16, 24, 32, 48, 56, 64, 72), 2500.0),
    "llm-finetune": ((1, 2, 4, 8, 16), 20000.0),
    "recsys": ((512, 1024, 2048, 4096, 8192, 16384, 32768), 1500.0),
    "speech": ((8, 16, 32, 64, 128, 192), 2000.0),
    "llm-serving": ((8, 16, 32, 64, 128, 256), 15000.0),
    "notebook": ((16, 32, 64, 128, 256, 512, 1024), 1000.0),
}


def framebuffer_model(w: WorkloadClass, batch: np.ndarray | float) -> np.ndarray:
    """Mean peak framebuffer (MiB) of class `w` at per-GPU batch size `batch`."""
    sizes, fixed = FB_CONFIG[w.name]
    ref = sorted(sizes)[(len(sizes) - 1) // 2]
    return fixed + (w.fb_mib - fixed) / ref * np.asarray(batch, dtype=float)


def draw_config(w: WorkloadClass, spec: dict, rng: np.random.Generator, n: int = 1
                ) -> np.ndarray:
    """Per-pod batch sizes: uniform over the class's sizes that fit in 90 % of the GPU."""
    sizes = np.asarray(FB_CONFIG[w.name][0], dtype=float)
    fits = sizes[framebuffer_model(w, sizes) <= 0.9 * spec["fb_mib"]]
    return rng.choice(fits if len(fits) else sizes[:1], n)


def solo_features(w: WorkloadClass, spec: dict, rng: np.random.Generator, n: int = 1) -> dict:
    """Per-pod solo steady-compute features: activity = class means with a per-pod log-normal
    jitter (model variants of the same class differ by ~15 %); framebuffer from the pod's
    batch size (FB_CONFIG) with a small residual; `batch_size` is the pod's configuration."""
    def jit(v: float, cap: float = 1.0) -> np.ndarray:
        return np.clip(v * rng.lognormal(0.0, 0.15, n), 0.01, cap)

    power_dyn = spec["power_fraction"][w.zeus] * spec["tdp_w"] - spec["idle_w"]
    out = {"sm_active": jit(w.sm, 0.99), "sm_occupancy": jit(w.occ, 0.99),
           "tensor_active": jit(w.tensor, 0.99), "dram_active": jit(w.dram, 0.99),
           "pcie": jit(w.pcie)}
    # The same standard-normal draws the old framebuffer jitter took, in the same place, so a
    # seed's stream (every other feature, and with them the simulated schedule) is unchanged;
    # the configuration comes from a spawned child generator, which leaves the stream alone.
    z = rng.standard_normal(n)
    out["power_dyn_w"] = jit(max(power_dyn, 5.0), spec["tdp_w"])
    batch = draw_config(w, spec, rng.spawn(1)[0], n)
    out["fb_used_mib"] = np.clip(framebuffer_model(w, batch) * np.exp(FB_RESIDUAL_SIGMA * z),
                                 1.0, 0.92 * spec["fb_mib"])
    out["batch_size"] = batch
    return out


ACTIVITY = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "pcie", "power_dyn_w")


def mean_features(w: WorkloadClass, feats: dict) -> dict:
    """Solo features averaged over the phase programme: activity scaled by the class duty,
    framebuffer kept at its peak. These drive (and describe) interference."""
    return {k: (v * w.duty if k in ACTIVITY else v) for k, v in feats.items()}


def phase_programme(w: WorkloadClass, t0: float, t1: float, rng: np.random.Generator,
                    busy_prob=None) -> list[tuple[float, float, str]]:
    """The sequence of (start, end, phase) of one pod running over [t0, t1) (seconds).

    `busy_prob(t)` gives serving pods their diurnal probability of being under load.
    """
    out: list[tuple[float, float, str]] = []
    t = t0

    def add(d: float, phase: str) -> None:
        nonlocal t
        end = min(t + d, t1)
        if end > t:
            out.append((t, end, phase))
        t = end

    if w.kind == "serve":
        add(rng.uniform(120, 400), "startup")  # weights load
        while t < t1:
            busy = rng.random() < busy_prob(t)
            add(rng.exponential(600) + 60, "serving_busy" if busy else "serving_idle")
        return out
    if w.kind == "notebook":
        add(rng.uniform(30, 120), "startup")
        while t < t1:
            add(rng.exponential(1500) + 60, "idle")
            add(rng.exponential(240) + 30, "compute")
        return out
    add(rng.uniform(60, 400), "startup")
    eval_every = rng.uniform(1200, 3600)      # seconds of compute between evaluations
    ckpt_each = int(rng.integers(1, 4))       # checkpoint after every k-th evaluation
    k = 0
    while t < t1:
        block_end = t + eval_every
        while t < min(block_end, t1):        # compute, with communication stalls
            add(min(rng.exponential(900) + 30, block_end - t), "compute")
            if t < block_end and rng.random() < 0.5:
                add(rng.uniform(10, 90), "stall")
        k += 1
        add(rng.uniform(60, 240), "eval")
        if k % ckpt_each == 0:
            add(rng.uniform(45, 180), "checkpoint")
    return out
