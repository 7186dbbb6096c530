"""Iteration period: a periodic optimizer-step dip is found; noise, trends and constants are not."""
from __future__ import annotations

import numpy as np
import pytest

from forecaster.fingerprint.period import detect_period


def dips(period_s, n=1500, step=1.0, seed=0, noise=0.015):
    t = np.arange(n) * step
    rng = np.random.default_rng(seed)
    return 0.8 * (1 - 0.6 * np.cos(np.pi * ((t / period_s) % 1)) ** 8) + rng.normal(0, noise, n)


@pytest.mark.parametrize("period", [2.17, 2.66, 3.07, 7.5])
def test_period_found_within_5_percent(period):
    p = detect_period(dips(period), 1.0)
    assert p is not None and abs(p / period - 1) < 0.05


def test_half_second_sampling():
    p = detect_period(dips(1.3, step=0.5), 0.5)
    assert p is not None and abs(p / 1.3 - 1) < 0.05


@pytest.mark.parametrize("seed", range(4))
def test_none_for_noise_and_random_walk(seed):
    rng = np.random.default_rng(seed)
    assert detect_period(0.8 + rng.normal(0, 0.02, 1500), 1.0) is None
    assert detect_period(np.cumsum(rng.normal(0, 0.01, 1500)), 1.0) is None


def test_none_for_constant_and_short():
    assert detect_period(np.full(1000, 0.8), 1.0) is None
    assert detect_period(dips(2.5, n=20), 1.0) is None
