"""Iteration period from high-resolution (<= 1 s) SM activity or power.

A training step ends with an optimizer update (gradient all-reduce + weights update) during
which the SMs dip; at <= 1 s sampling that dip repeats once per iteration, so the spectrum of
SM activity has a peak at 1/period. We accept the periodogram's highest peak only if
(1) it beats the 99th percentile of the highest peaks of shuffled copies of the series (a
permutation test: shuffling keeps the distribution, destroys the periodicity), and
(2) the autocorrelation confirms it (significant at a whole multiple of the period, and
higher there than half a period earlier, which red noise and trends are not), and report
None ("none") otherwise.
"""
from __future__ import annotations

import numpy as np
from scipy.signal import periodogram


def _peak(x: np.ndarray, min_cycles: int) -> tuple[float, float]:
    f, p = periodogram(x, detrend="constant")
    ok = f >= min_cycles / len(x)
    if not ok.any():
        return np.nan, 0.0
    i = np.flatnonzero(ok)[int(np.argmax(p[ok]))]
    # parabolic interpolation of the log-power peak: sub-bin frequency
    fi = f[i]
    if 0 < i < len(p) - 1 and min(p[i - 1], p[i], p[i + 1]) > 0:
        a, b, c = np.log(p[i - 1]), np.log(p[i]), np.log(p[i + 1])
        den = a - 2 * b + c
        if den < 0:
            fi = f[i] + 0.5 * (a - c) / den * (f[1] - f[0])
    return float(fi), float(p[i])


def _acf(x: np.ndarray, lags: np.ndarray) -> np.ndarray:
    x = x - x.mean()
    d = float(np.dot(x, x)) or 1.0
    return np.asarray([np.dot(x[:-k], x[k:]) / d for k in lags])


def detect_period(x: np.ndarray, step_s: float, n_shuffle: int = 100, q: float = 99.0,
                  min_cycles: int = 4, seed: int = 0) -> float | None:
    """Iteration period in seconds, or None when no significant, confirmed peak exists."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 8 * min_cycles or np.std(x) == 0:
        return None
    f, power = _peak(x, min_cycles)
    if not np.isfinite(f) or f <= 0:
        return None
    rng = np.random.default_rng(seed)
    null = [_peak(rng.permutation(x), min_cycles)[1] for _ in range(n_shuffle)]
    if power <= np.percentile(null, q):
        return None
    period = 1.0 / f  # in samples
    # ACF confirmation at the multiple of the period closest to a whole lag
    mult = np.arange(1, 9)
    lags = np.round(mult * period).astype(int)
    keep = (lags >= 1) & (lags < len(x) // 2)
    if not keep.any():
        return None
    mult, lags = mult[keep], lags[keep]
    best = int(np.argmin(np.abs(lags - mult * period)))
    lag = int(lags[best])
    trough = max(int(round(lag - period / 2)), 0)  # half a period earlier: a trough if periodic
    r, r_half = _acf(x, np.asarray([lag, max(trough, 1)]))
    if r <= 2.0 / np.sqrt(len(x)) or (trough >= 1 and r <= r_half):
        return None
    return float(period * step_s)
