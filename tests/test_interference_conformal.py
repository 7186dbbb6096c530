"""The p10's learned margin scale (normalized conformal): narrow where held-out errors are
small, wide where they are large, and still covering about 1 - alpha of fresh rows."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.interference.conformal import fit_scale, scaled_margin
from forecaster.interference.model import InterferenceModel
from ground.errors import ForesightError


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    noisy = rng.random(n) < 0.5  # half the rows err 8x more (a noisy kind of workload)
    X = np.column_stack([noisy.astype(float), rng.random(n)])
    err = rng.normal(0.0, np.where(noisy, 0.16, 0.02))
    return X, err, rng.integers(0, 6, n)


def test_scale_is_narrow_where_errors_are_small_and_keeps_coverage():
    X, err, groups = _rows(1200, 0)
    scale, q, _, _ = fit_scale(X, err, groups, alpha=0.1)
    Xn, errn, _ = _rows(4000, 1)
    margin = scaled_margin(scale, q, Xn)
    calm, noisy = margin[Xn[:, 0] == 0], margin[Xn[:, 0] == 1]
    assert np.median(noisy) > 4 * np.median(calm)
    below = np.mean(errn > margin)  # true speed under point - margin
    assert 0.05 <= below <= 0.15
    # one margin for all rows would have to be as wide as the noisy rows need
    assert np.median(calm) < np.quantile(errn, 0.9) / 3


def test_each_sharing_mode_gets_its_own_q_where_the_scale_cannot_tell_them_apart():
    X, err, groups = _rows(1600, 4)
    mode = np.where(np.random.default_rng(5).random(1600) < 0.5, "mps", "timeslice")
    err = np.where(mode == "mps", 2.5 * err, err)  # the mode is not among the features
    scale, q, per, _ = fit_scale(X, err, groups, alpha=0.1, strata=mode)
    assert set(per) == {"mps", "timeslice"} and per["mps"] > 1.8 * per["timeslice"]
    Xn, errn, _ = _rows(4000, 6)
    moden = np.where(np.random.default_rng(7).random(4000) < 0.5, "mps", "timeslice")
    errn = np.where(moden == "mps", 2.5 * errn, errn)
    pooled = scaled_margin(scale, q, Xn)
    own = scaled_margin(scale, np.where(moden == "mps", per["mps"], per["timeslice"]), Xn)
    for m in ("mps", "timeslice"):
        assert 0.05 <= np.mean((errn > own)[moden == m]) <= 0.15
    # the pooled q leaves one mode's speeds under the bound far more often than the other's
    gap = abs(np.mean((errn > pooled)[moden == "mps"]) - np.mean((errn > pooled)[moden != "mps"]))
    assert gap > 0.05


def test_too_few_rows_or_one_group_gives_no_scale():
    X, err, groups = _rows(60, 2)
    assert fit_scale(X, err, groups, alpha=0.1) is None
    X, err, _ = _rows(600, 3)
    assert fit_scale(X, err, np.zeros(600, int), alpha=0.1) is None


def test_unknown_margin_is_one_clear_error():
    pairs = pd.DataFrame({"a_workload": ["x"], "b_workload": ["y"], "speed_a": [0.5],
                          "speed_b": [0.5]})
    with pytest.raises(ForesightError, match="margin must be"):
        InterferenceModel(margin="wide").fit(pairs)
