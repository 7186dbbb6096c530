"""Report plots: quantile bands stay inside the metric's physical range; titles are whole."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _pred(lo: float, hi: float, uid: str = "ns/pod-a/n1/0") -> pd.DataFrame:
    t = pd.date_range("2026-01-01", periods=30, freq="1min", tz="UTC")
    y = np.linspace(0.2, 0.9, 30)
    return pd.DataFrame({"unique_id": uid, "origin": t, "y_true": y, "p50": y,
                         "p10": y - lo, "p90": y + hi, "mean_last_h": y, "persistence": y})


def _band_range(ax) -> tuple[float, float]:
    ys = np.concatenate([p.vertices[:, 1] for c in ax.collections for p in c.get_paths()])
    return float(ys.min()), float(ys.max())


def test_usage_band_is_clipped_to_a_ratio_and_the_reading_has_numbers():
    from training.kinds import usage

    fig, ax = plt.subplots()
    reading = usage.plot(_pred(0.5, 0.5), ax)
    lo, hi = _band_range(ax)
    plt.close(fig)
    assert lo >= 0.0 and hi <= 1.0 and hi == 1.0  # p90 reached 1.4 before the clip
    assert "MAE" in reading and "%" in reading


def test_demand_band_never_goes_below_zero_and_title_is_whole():
    from training.kinds import demand

    fig, ax = plt.subplots(figsize=(6, 3.6))
    demand.plot(_pred(2.0, 0.1, uid="research"), ax)
    lo, _ = _band_range(ax)
    title = ax.get_title()
    plt.close(fig)
    assert lo == 0.0
    assert title.replace("\n", " ").endswith("forecast at each origin")  # wrapped, not cut
    assert max(len(line) for line in title.splitlines()) <= 62
