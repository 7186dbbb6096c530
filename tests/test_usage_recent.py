"""Usage forecaster's per-origin re-pick (recent window): follows a regime change without
leaking, reads exactly the horizons ended by each origin, leaves the validated choice only on
evidence, and round-trips its settings."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from forecaster.usage.model import UsageForecaster

def regime_series(n_series=12, n=720, seed=0):
    """Busy first (a drifting noisy level the EWMA tracks), then a flat line from bin 480 on:
    the regime the validation tail never saw, where the last value is exact."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    parts = []
    for k in range(n_series):
        y = 50 + np.cumsum(rng.normal(0, 2, n)) + rng.normal(0, 8, n)
        y[480:] = y[479]
        parts.append(pd.DataFrame({"unique_id": f"r{k}", "ds": t0 + pd.to_timedelta(
            np.arange(n), "min"), "y": np.clip(y, 0, None)}))
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("scope", ["series", "fleet"])
def test_recent_pick_follows_a_regime_change_without_leaking(scope):
    df = regime_series()
    start = pd.Timestamp("2026-01-01T06:00Z")  # bin 360: fitted on the busy part only
    kw = dict(horizon=10, n_estimators=60, min_gain=0.03)
    static = UsageForecaster(**kw).fit(df[df["ds"] < start])
    m = UsageForecaster(**kw, recent_window=60, recent_scope=scope).fit(df[df["ds"] < start])
    a, s = m.predict_origins(df, start), static.predict_origins(df, start)
    late = (pd.to_datetime(a["origin"], utc=True) >= start + pd.Timedelta("3h")).to_numpy()
    assert (a.loc[late, "model"] == "last_value").mean() > 0.8  # flat since bin 480
    assert (s.loc[late, "model"] != "last_value").mean() > 0.9  # the fit-time choice
    err = lambda p: float(np.mean(np.abs(p["p50"] - p["y_true"]).to_numpy()[late]))
    assert err(a) < 0.2 * err(s)
    # the pick at an origin reads only horizons that ended before it
    origin = start + pd.Timedelta("150min")  # bin 510
    changed = df.copy()
    changed.loc[changed["ds"] >= origin, "y"] += 40.0
    b = m.predict_origins(changed, start)
    at = lambda p: p[pd.to_datetime(p["origin"], utc=True) == origin].set_index("unique_id")
    pd.testing.assert_series_equal(at(a)["model"], at(b)["model"])
    np.testing.assert_allclose(at(a)["p50"], at(b)["p50"])


def two_series(n):
    """Bins, series ids and origins of two series of n 1-min bins (recent_pick's layout)."""
    t = pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC")
    return (t, np.repeat(np.array(["a", "b"], dtype=object), n),
            np.tile(t.tz_localize(None).to_numpy(), 2))


@pytest.mark.parametrize("scope", ["series", "fleet"])
def test_recent_pick_reads_exactly_the_horizons_ended_by_the_origin(scope):
    # the model is exact on the horizon from origin k alone (bins k .. k+H-1), the baselines
    # never: with a one-horizon window, only the origin k+H (the first whose past holds bin
    # k+H-1) may serve the model; k+H-1 would read a bin not yet seen
    H, n, k = 5, 30, 12
    from forecaster.repick import recent_pick

    t, ids, origins = two_series(n)
    cand = {"last_value": np.full(2 * n, 1.0), "mean_last_h": np.full(2 * n, 1.5),
            "ses": np.full(2 * n, 2.0), "model": np.full(2 * n, 3.0)}
    cand["model"][[k, n + k]] = 0.0
    y = np.zeros(2 * n)
    y[[n - 1, 2 * n - 1]] = np.nan  # a horizon past the data: no error, nothing to read
    static = np.full(2 * n, "fit", dtype=object)
    got = recent_pick(ids, origins, y, cand, static, H, 1, scope)
    for g in (got[:n], got[n:]):
        assert (g[:H] == "fit").all()  # no horizon has ended yet
        assert list(np.flatnonzero(g == "model")) == [k + H]
        assert set(g[H:]) == {"model", "last_value"}
    # up to the training end the model's errors are its own targets: not evidence
    got = recent_pick(ids, origins, y, cand, static, H, 1, scope, train_end=t[k])
    assert "model" not in set(got)


def test_recent_pick_round_trips_with_its_min_gain(tmp_path):
    # the per-origin re-pick applies min_gain at predict time: a loaded model must use the
    # fitted one's, not the constructor default
    df = regime_series(seed=1)
    start = pd.Timestamp("2026-01-01T06:00Z")
    m = UsageForecaster(horizon=10, n_estimators=60, min_gain=0.6, recent_window=30).fit(
        df[df["ds"] < start])
    a = m.predict_origins(df, start)
    m.save(tmp_path / "g")
    pd.testing.assert_frame_equal(UsageForecaster.load(tmp_path / "g").predict_origins(
        df, start), a)


@pytest.mark.parametrize("scope", ["series", "fleet"])
def test_recent_pick_leaves_the_validated_choice_only_on_evidence(scope):
    # the model beats the validated choice (last_value) by 10 % on average in the window,
    # but its error swings: z = 0 follows the mean, z = 1.645 (one-sided 5 %, with W / H
    # effective samples) keeps the validated choice; a steady 10 % gain is evidence at any z
    from forecaster.repick import recent_pick

    H, n, W = 5, 80, 20
    t, ids, origins = two_series(n)
    y = np.zeros(2 * n)
    swing = np.where(np.arange(2 * n) % 2 == 0, 0.3, 1.5)  # mean 0.9, sd 0.6
    cand = {"last_value": np.full(2 * n, 1.0), "mean_last_h": np.full(2 * n, 2.0),
            "ses": np.full(2 * n, 2.0), "model": swing}
    static = np.full(2 * n, "last_value", dtype=object)
    late = np.tile(np.arange(n) >= H + W, 2)
    assert (recent_pick(ids, origins, y, cand, static, H, W, scope)[late] == "model").all()
    kept = recent_pick(ids, origins, y, cand, static, H, W, scope, z=1.645)
    assert (kept[late] == "last_value").all()
    steady = {**cand, "model": np.full(2 * n, 0.9)}
    got = recent_pick(ids, origins, y, steady, static, H, W, scope, z=1.645)
    assert (got[late] == "model").all()
    # a choice the re-pick cannot score (no candidate of that name) is left as before
    other = np.full(2 * n, "fit", dtype=object)
    assert (recent_pick(ids, origins, y, cand, other, H, W, scope, z=1.645)[late]
            == "model").all()


def test_recent_window_in_horizons_round_trips(tmp_path):
    # recent_unit="horizons": the window holds recent_window horizons (3 x 10 bins), the
    # same as 30 bins; the unit and the evidence threshold live in the manifest
    df = regime_series(seed=2)
    start = pd.Timestamp("2026-01-01T06:00Z")
    kw = dict(horizon=10, n_estimators=60, recent_scope="fleet", recent_z=1.0)
    m = UsageForecaster(**kw, recent_window=3, recent_unit="horizons").fit(df[df["ds"] < start])
    b = UsageForecaster(**kw, recent_window=30).fit(df[df["ds"] < start])
    assert m.window_bins() == 30 == b.window_bins()
    a = m.predict_origins(df, start)
    pd.testing.assert_frame_equal(a, b.predict_origins(df, start))
    m.save(tmp_path / "h")
    man = json.loads((tmp_path / "h" / "manifest.json").read_text())
    assert man["recent_unit"] == "horizons" and man["recent_z"] == 1.0
    q = UsageForecaster.load(tmp_path / "h")
    assert q.window_bins() == 30 and q.recent_z == 1.0
    pd.testing.assert_frame_equal(q.predict_origins(df, start), a)
