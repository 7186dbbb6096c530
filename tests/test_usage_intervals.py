"""The usage forecaster's p10/p90: interval coverage with a floor, and the sliding window."""
from __future__ import annotations

import numpy as np
import pandas as pd

from forecaster.intervals import conformal_quantiles, recent_bounds
from forecaster.usage.model import UsageForecaster


def covered(y, p, scale, q):
    lo, hi = p + q[0] * scale, p + q[1] * scale
    return float(np.mean((y >= lo) & (y <= hi)))


def idle_pods(n=4000, atom=0.6, seed=0):
    """An idle pod's horizon means: exactly 0 (the floor) with probability `atom`, else a
    wake-up; the served forecast is its last value, 0."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < atom, 0.0, rng.exponential(5.0, n))
    return y, np.zeros(n), np.ones(n)


def test_a_bound_on_an_atom_gives_the_whole_miss_to_the_upper_side():
    y, p, s = idle_pods()
    flat = np.ones(len(y), bool)
    central = [np.quantile(y - p, 0.1), np.quantile(y - p, 0.9)]
    floor = conformal_quantiles(y, {"x": p}, s, flat, 0.8)["x"]["flat"]
    # central quantiles miss nothing below the atom at 0 (a tie is covered): ~90 %
    assert covered(y, p, s, central) > 0.89
    assert abs(covered(y, p, s, floor) - 0.8) < 0.01
    assert floor[1] < central[1]


def test_an_atom_above_the_nominal_coverage_covers_what_it_holds():
    # 85 % of idle horizons stay at 0: no interval can hold less than the atom
    y, p, s = idle_pods(atom=0.85, seed=1)
    q = conformal_quantiles(y, {"x": p}, s, np.ones(len(y), bool), 0.8)["x"]["flat"]
    assert q == [0.0, 0.0]
    assert abs(covered(y, p, s, q) - np.mean(y == 0)) < 1e-12


def test_unclipped_bounds_stay_central():
    rng = np.random.default_rng(2)
    y = 50 + rng.normal(0, 3, 5000)
    p, s = np.full(5000, 50.0), np.ones(5000)
    flat = np.zeros(5000, bool)
    q = conformal_quantiles(y, {"x": p}, s, flat, 0.8)["x"]["moving"]
    z = y - p
    np.testing.assert_allclose(q, [np.quantile(z, 0.1), np.quantile(z, 0.9)])


def window_rows(n=200, n_series=3, seed=3):
    rng = np.random.default_rng(seed)
    t = pd.date_range("2026-01-01", periods=n, freq="min").to_numpy()
    origins = np.tile(t, n_series)
    y = 10 + rng.normal(0, 1, n * n_series)
    return origins, y, np.full(len(y), 10.0), np.ones(len(y)), np.zeros(len(y), bool)


def test_recent_bounds_read_only_horizons_ended_by_the_origin():
    H, W = 5, 20
    origins, y, p, s, flat = window_rows()
    usable = np.ones(len(y), bool)
    kt = np.datetime64("2026-01-01T02:00")  # bin 120
    target = origins == kt
    lo, hi = recent_bounds(origins, y, p, s, flat, usable, target, H, W, 0.8, min_rows=10)
    assert np.isfinite(lo[target]).all() and np.isnan(lo[~target]).all()
    # origins from kt - H + 1 on have horizons still open at kt: changing them changes nothing
    y2 = y.copy()
    y2[origins > kt - np.timedelta64(H, "m")] += 100.0
    lo2, hi2 = recent_bounds(origins, y2, p, s, flat, usable, target, H, W, 0.8, min_rows=10)
    np.testing.assert_array_equal(lo[target], lo2[target])
    np.testing.assert_array_equal(hi[target], hi2[target])
    # the origin kt - H (its horizon ended at kt) is read
    y3 = y.copy()
    y3[origins == kt - np.timedelta64(H, "m")] += 100.0
    _, hi3 = recent_bounds(origins, y3, p, s, flat, usable, target, H, W, 0.8, min_rows=10)
    assert (hi3[target] > hi[target]).all()
    # too little usable history: no recent bounds (the caller keeps the fit-time ones)
    early = origins == np.datetime64("2026-01-01T00:10")
    lo4, _ = recent_bounds(origins, y, p, s, flat, usable, early, H, W, 0.8, min_rows=10)
    assert np.isnan(lo4).all()


def spread_series(n_series=12, n=720, seed=0):
    """A steady level whose noise grows fivefold from bin 480 on: a regime the validation
    tail never saw."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    parts = []
    for k in range(n_series):
        sd = np.where(np.arange(n) < 480, 2.0, 10.0)
        parts.append(pd.DataFrame({"unique_id": f"s{k}", "ds": t0 + pd.to_timedelta(
            np.arange(n), "min"), "y": 50 + rng.normal(0, 1, n) * sd}))
    return pd.concat(parts, ignore_index=True)


def test_recent_intervals_follow_a_change_of_spread_and_round_trip(tmp_path):
    df = spread_series()
    start = pd.Timestamp("2026-01-01T06:00Z")  # bin 360: fitted on the calm part only
    kw = dict(horizon=10, n_estimators=60, recent_window=6, recent_unit="horizons",
              recent_scope="fleet")
    static = UsageForecaster(**kw).fit(df[df["ds"] < start])
    m = UsageForecaster(**kw, recent_intervals=True).fit(df[df["ds"] < start])
    a, s = m.predict_origins(df, start), static.predict_origins(df, start)
    np.testing.assert_allclose(a["p50"], s["p50"])  # the point forecast is the same
    late = (pd.to_datetime(a["origin"], utc=True) >= start + pd.Timedelta("3h")).to_numpy()
    cov = lambda p: float(np.mean(((p["y_true"] >= p["p10"]) & (p["y_true"] <= p["p90"]))
                                  .to_numpy()[late]))
    assert cov(s) < 0.6  # calibrated on the calm part
    assert 0.7 <= cov(a) <= 0.9
    m.save(tmp_path / "m")
    back = UsageForecaster.load(tmp_path / "m")
    assert back.recent_intervals
    pd.testing.assert_frame_equal(back.predict_origins(df, start), a)
