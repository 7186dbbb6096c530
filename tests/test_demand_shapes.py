"""Shape-mix forecast: recency, no look-ahead, per-queue, JSON round trip."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.demand.shapes import ShapeMixForecaster


def arrivals() -> pd.DataFrame:
    t0 = pd.Timestamp("2026-01-05T00:00:00Z")
    # Ten days of mostly "1" arrivals, then a burst of "8" in the last 6 hours of day 10.
    old = pd.DataFrame({"ds": t0 + pd.to_timedelta(np.arange(0, 240, 0.5), unit="h"),
                        "shape": "1", "gpus": 1.0, "queue": "a"})
    new = pd.DataFrame({"ds": t0 + pd.to_timedelta(np.arange(234, 240, 0.25), unit="h"),
                        "shape": "8", "gpus": 8.0, "queue": "a"})
    other = pd.DataFrame({"ds": t0 + pd.to_timedelta(np.arange(0, 240, 2.0), unit="h"),
                          "shape": "frac:0.25-0.5", "gpus": 0.5, "queue": "b"})
    return pd.concat([old, new, other], ignore_index=True)


def test_recent_shift_raises_the_share_above_the_long_run():
    a = arrivals()
    mix = ShapeMixForecaster(half_life="3h", prior_strength=10).fit(a)
    origin = pd.Timestamp("2026-01-15T00:00:00Z")
    p = mix.predict(origin, queue="a").set_index("shape")["share"]
    longrun = a[a["queue"] == "a"]["shape"].value_counts(normalize=True)
    assert p.sum() == pytest.approx(1.0)
    assert p["8"] > longrun["8"] + 0.2
    # Before the burst, the forecast sees none of it (no look-ahead).
    early = mix.predict(pd.Timestamp("2026-01-14T00:00:00Z"), queue="a")
    assert early["shape"].tolist() == ["1"]
    assert mix.predict(pd.Timestamp("2026-01-01T00:00:00Z")).empty


def test_gpu_weighting_queue_filter_and_roundtrip(tmp_path):
    a = arrivals()
    mix = ShapeMixForecaster(weight="gpus").fit(a)
    origin = pd.Timestamp("2026-01-16T00:00:00Z")
    all_q = mix.predict(origin).set_index("shape")["share"]
    assert set(all_q.index) == {"1", "8", "frac:0.25-0.5"}
    by_count = ShapeMixForecaster().fit(a).predict(origin).set_index("shape")["share"]
    assert all_q["8"] > by_count["8"]
    mix.save(tmp_path / "mix.json")
    back = ShapeMixForecaster.load(tmp_path / "mix.json").predict(origin)
    pd.testing.assert_frame_equal(back, mix.predict(origin))
    with pytest.raises(ValueError):
        ShapeMixForecaster().fit(a.drop(columns="shape"))
