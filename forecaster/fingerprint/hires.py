"""Segmentation features and phase names for high-resolution series that carry GPU util.

At <= 1 s per sample (NVML/GPM, or dcgm-exporter scraped fast) the macro phases of a training
job are visible sample by sample, and three things differ from 15-60 s scrapes:
- GPU util and memory-copy util (DCGM_FI_DEV_GPU_UTIL / _MEM_COPY_UTIL) answer within a
  sample; power is averaged by the driver over ~1 s and lags, so it is reported per phase but
  not used to place boundaries.
- A checkpoint without PCIe counters shows only as a faint, sporadic GPU util (1-4 %: the
  device-to-host copies of the state dict) where an input stall shows 0. On a linear scale that
  is noise next to 90 % compute; on sqrt(util) it is a step like compute -> eval. So the
  change-point features are sqrt(util) and sqrt(memory-copy util); the penalty is the BIC of
  their pooled noise (a rule, not a fitted number).
- Evaluation can be *more* intense than training (inference with a larger batch, no backward):
  a fixed threshold on SM activity names the wrong one. Training is what a training job does
  most of the time, so the busy level holding the most time is `compute`, and busy segments
  clearly off that level (either way) are `eval`.
- The profiling counters (SM activity) may not report for a while (GPM/DCGM warm-up): the
  loader leaves those samples NaN and the naming uses SM activity only where it is there.
"""
from __future__ import annotations

import numpy as np

#: columns of the hires feature matrix: the two change-point features first
HIRES_FEATURES = ("sutil", "smem", "sm", "mem", "rx", "tx", "util")
N_CPD = 2
HIRES_RULES = {
    "busy_util": 5.0,     # % mean GPU util above which kernels run (idle noise 0-4 %)
    "low_act": 0.2,       # SM activity below this share of the compute level: SM idle
    "copy_util": 1.0,     # % mean GPU util of an SM-idle segment: copies (checkpoint) vs none
    "eval_gap": 0.15,     # busy segment this far (relative) from the compute level: eval
    "ckpt_tx": 0.15,      # with PCIe counters: device->host traffic well above the noise ...
    "ckpt_tx_rx": 3.0,    # ... and dominating host->device
    "stall_max_s": 60.0,  # idle run this short between work: a stall; longer: idle
    "min_phase_s": 0.5,   # shortest phase resolved: below, an iteration-level blip
}


def has_util(columns: list[str]) -> bool:
    return "util" in columns


def hires_features(values: np.ndarray, columns: list[str]) -> tuple[np.ndarray, dict]:
    """(n, len(HIRES_FEATURES)) features of one series and the references used.

    sqrt(util/100) and sqrt(memory-copy util/100) are the change-point features: the square
    root stabilises the variance of a duty cycle (a 2 % vs 0 % step counts as much as 80 % vs
    99 %), so one penalty serves idle and busy stretches. SM activity stays NaN where the
    profiling counters did not report; the naming uses it where it is there."""
    col = {c: values[:, i].astype(float) for i, c in enumerate(columns)}
    n = len(values)
    util = np.clip(np.nan_to_num(col["util"], nan=0.0), 0, 100)
    mem = np.clip(np.nan_to_num(col.get("mem", np.zeros(n)), nan=0.0), 0, 100)
    busy = util >= HIRES_RULES["busy_util"]
    sm = col.get("sm", np.full(n, np.nan))
    rx, tx = col.get("rx", np.full(n, np.nan)), col.get("tx", np.full(n, np.nan))
    pcie = bool(np.isfinite(rx).any() or np.isfinite(tx).any())
    rx, tx = np.nan_to_num(rx), np.nan_to_num(tx)
    pref = max(float(np.median(rx[busy])) if busy.sum() >= 3 else 0.0, 2e8)
    X = np.column_stack([np.sqrt(util / 100), np.sqrt(mem / 100), sm, mem,
                         np.clip(rx / pref, 0, 3), np.clip(tx / pref, 0, 3), util])
    return X, {"pcie_ref": pref, "pcie": pcie}


def segment_means(X: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware mean of every feature per segment, and the count of finite values."""
    ends = np.r_[bounds[1:], len(X)]
    fin = np.isfinite(X)
    cs = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(np.where(fin, X, 0.0), axis=0)])
    cn = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(fin, axis=0)])
    cnt = cn[ends] - cn[bounds]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cs[ends] - cs[bounds]) / cnt, cnt


def bic_penalty(Z: np.ndarray) -> float:
    """Penalty per change point for the l2 cost, by rule (not fitted): the BIC of a mean
    shift in d dimensions, 2 * d * sigma^2 * log(n), with sigma^2 the pooled noise variance
    estimated from first differences (half their mean square; the few true jumps barely
    move it)."""
    n, d = Z.shape
    if n < 3:
        return 1.0
    sigma2 = float(np.mean(np.diff(Z, axis=0) ** 2)) / 2.0
    return max(2.0 * d * sigma2 * np.log(n), 1e-6)


def label_hires(means: np.ndarray, counts: np.ndarray, pcie: bool,
                rules: dict | None = None) -> np.ndarray:
    """Phase name for each segment from its mean features (HIRES_FEATURES order) and the
    number of finite samples behind each mean."""
    r = {**HIRES_RULES, **(rules or {})}
    sm, mem, rx, tx, util = (means[:, i] for i in range(2, 7))
    out = np.full(len(means), "idle", dtype=object)
    busy = util >= r["busy_util"]
    # SM activity, where it covers most of a segment, can veto "busy": kernels too thin to
    # keep the SMs busy (a few samples of it would decide for the whole segment)
    has_sm = np.isfinite(sm) & (counts[:, 2] * 2 >= counts[:, 6])
    bsm = busy & has_sm
    if bsm.any():
        sm_ref = _wmedian(sm[bsm], counts[bsm, 2])
        busy &= ~(has_sm & (sm < r["low_act"] * sm_ref))
    if pcie:
        copy = (tx > r["ckpt_tx"]) & (tx > r["ckpt_tx_rx"] * rx)
    else:  # no PCIe counters: sporadic util from the device->host copies
        copy = util >= r["copy_util"]
    out[~busy & copy] = "checkpoint"
    if busy.any():
        out[busy] = np.where(_eval_group(means[busy], counts[busy], r["eval_gap"]),
                             "eval", "compute")
    return out


def _eval_group(means: np.ndarray, counts: np.ndarray, min_gap: float) -> np.ndarray:
    """Busy segments in the level that is not training's: two levels exist when, in SM
    activity, memory-copy util or GPU util (each used only if every busy segment has it),
    the sorted means of the solid segments show a step of more than min_gap (relative); the
    field with the largest step splits them, and the side holding less time is evaluation.

    Solid: at least a fifth of the longest busy segment. A ramp of a few samples (the job
    warming up at 28 % util before 85 %) would otherwise be the largest step and take the
    name "eval" from the real evaluation (a GPT-like job on the H200, data/h200b)."""
    time = counts[:, 6]
    solid = time >= 0.2 * time.max() if len(time) else np.zeros(0, bool)
    best, split = min_gap, None
    for j in (2, 3, 6):  # sm, mem, util
        x = means[:, j]
        if len(x) < 2 or not np.isfinite(x).all() or (counts[:, j] == 0).any():
            continue
        xs = np.sort(x[solid])
        if len(xs) < 2:
            continue
        steps = np.diff(xs) / np.maximum(xs[:-1], 1e-3)
        k = int(np.argmax(steps))
        if xs[k + 1] > 1e-3 and steps[k] > best:  # a field that stays at 0 tells nothing
            best, split = steps[k], (x > (xs[k] + xs[k + 1]) / 2)
    if split is None:
        return np.zeros(len(means), bool)
    return split if time[split].sum() < time[~split].sum() else ~split


def _wmedian(x: np.ndarray, w: np.ndarray) -> float:
    o = np.argsort(x)
    c = np.cumsum(w[o])
    return float(x[o][np.searchsorted(c, c[-1] / 2)])


def name_stalls(labels: np.ndarray, step_s: float | None, rules: dict | None = None
                ) -> np.ndarray:
    """An idle run with work on both sides is the job waiting (an input stall) when it is
    shorter than stall_max_s (any length when the step is unknown); idle at either end of
    the series stays idle."""
    r = {**HIRES_RULES, **(rules or {})}
    out = labels.copy()
    if len(labels) == 0:
        return out
    st = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    en = np.r_[st[1:], len(labels)]
    for i, (a, b) in enumerate(zip(st, en)):
        if labels[a] != "idle" or i == 0 or i == len(st) - 1:
            continue
        if step_s is None or (b - a) * step_s <= r["stall_max_s"]:
            out[a:b] = "stall"
    return out


def segment_hires(values: np.ndarray, columns: list[str], penalty: float | None = None,
                  rules: dict | None = None, step_s: float | None = None) -> np.ndarray:
    """Phase name per sample: KernelCPD (ruptures, linear kernel = l2 cost) on the CPD
    features with the BIC penalty unless one is given, segments named by label_hires, then
    stalls told from idle."""
    import ruptures as rpt

    r = {**HIRES_RULES, **(rules or {})}
    # ruptures' min_size: min_phase_s in samples (3 when the step is unknown)
    min_size = max(2, int(round(r["min_phase_s"] / step_s))) if step_s else 3
    X, refs = hires_features(values, columns)
    n = len(X)
    if n == 0:
        return np.zeros(0, dtype=object)
    Z = X[:, :N_CPD]
    if n >= 2 * min_size:
        pen = bic_penalty(Z) if penalty is None else penalty
        bk = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(Z).predict(pen=pen)
        bounds = np.r_[0, np.asarray(bk[:-1], dtype=np.int64)]
    else:
        bounds = np.zeros(1, np.int64)
    means, counts = segment_means(X, bounds)
    names = label_hires(means, counts, refs["pcie"], rules)
    return name_stalls(np.repeat(names, np.diff(np.r_[bounds, n])), step_s, rules)
