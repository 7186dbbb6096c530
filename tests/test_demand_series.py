"""Demand series builders: arrivals, pending and shapes from a pods table, regularized bins,
Helios demand (not quota), DLRM arrivals inside the window, the GenAI gateway's QPS."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.demand_series import (arrivals_from_pods, helios_series, horizon_bins,
                                    pending_from_pods, pod_shape, regularize,
                                    shape_arrivals_from_pods)
from foresight.errors import ForesightError

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def test_builders_from_pods():
    t = pd.Timestamp("2026-01-05T00:00:00Z")
    pods = pd.DataFrame({
        "queue": ["a", "a", "b"], "gpu_request": [2.0, 0.5, 8.0],
        "created": [t + pd.Timedelta("1min"), t + pd.Timedelta("12min"), t + pd.Timedelta("3min")],
        "started": [t + pd.Timedelta("6min"), t + pd.Timedelta("35min"), pd.NaT],
        "finished": [t + pd.Timedelta("40min"), pd.NaT, pd.NaT]})
    arr = arrivals_from_pods(pods, "10min")
    assert arr[arr["unique_id"] == "a"]["y"].tolist() == [2.0, 0.5]
    pend = pending_from_pods(pods, "10min").set_index(["unique_id", "ds"])["y"]
    assert pend[("a", t)] == pytest.approx(2.0 * 5 / 10)  # pending 00:01-00:06
    assert pend[("a", t + pd.Timedelta("20min"))] == pytest.approx(0.5)
    assert pend[("b", t + pd.Timedelta("30min"))] == pytest.approx(8.0 * 10 / 10)
    shapes = shape_arrivals_from_pods(pods, "10min")
    assert set(shapes["unique_id"]) == {"a|2", "a|frac:0.25-0.5", "b|8"}
    assert shapes.groupby("unique_id")["y"].sum().to_dict() == {"a|2": 1.0, "a|frac:0.25-0.5": 1.0, "b|8": 1.0}
    assert [pod_shape(g) for g in (1, 8, 0.5, 0.3)] == ["1", "8", "frac:0.25-0.5", "frac:0.25-0.5"]
    assert horizon_bins("6h", "10min") == 36
    with pytest.raises(ForesightError):
        regularize(pd.DataFrame({"unique_id": ["q"], "ds": ["x"], "y": [1]}), "10min")


def test_regularize_fills_gaps_as_asked():
    """A bin with no sample: 0 for flows and for rates exported only when non-zero (`zero`),
    the last level for gauges (`carry`); `auto` follows the aggregation."""
    t = pd.Timestamp("2026-01-01", tz="UTC")
    d = pd.DataFrame({"unique_id": "g", "ds": [t, t + pd.Timedelta("30s"), t + pd.Timedelta("3min")],
                      "y": [1.0, 3.0, 5.0]})
    assert regularize(d, "1min", "mean")["y"].tolist() == [2.0, 2.0, 2.0, 5.0]
    assert regularize(d, "1min", "mean", "zero")["y"].tolist() == [2.0, 0.0, 0.0, 5.0]
    assert regularize(d, "1min", "sum")["y"].tolist() == [4.0, 0.0, 0.0, 5.0]
    assert regularize(d, "1min", "sum", "carry")["y"].tolist() == [4.0, 4.0, 4.0, 5.0]
    with pytest.raises(ForesightError, match="bad fill"):
        regularize(d, "1min", "mean", "nan")


def test_helios_series_is_demand_not_quota():
    vcs = TRACES / "helios-earth" / "Earth_vcs"
    if not vcs.is_dir():
        pytest.skip(f"Helios traces absent at {vcs}")
    df = helios_series(vcs)
    raw = pd.read_csv(sorted(vcs.glob("*.csv"))[0], nrows=10)
    first = df[df["unique_id"] == sorted(vcs.glob("*.csv"))[0].stem]["y"].iloc[0]
    assert first == pytest.approx((raw["running_gpu_num"] + raw["pending_gpu_num"]).mean())
    assert df.groupby("unique_id").size().min() == 31 * 144


def test_dlrm_arrivals_exclude_instances_that_existed_before_the_window():
    from features.dlrm_trace import TOTAL, dlrm_arrivals

    path = TRACES / "dlrm-2025" / "disaggregated_DLRM_trace.csv"
    if not path.is_file():
        pytest.skip(f"DLRM trace absent at {path}")
    raw = pd.read_csv(path, usecols=["gpu_request", "creation_time"])
    tot = dlrm_arrivals(path)
    apps = dlrm_arrivals(path, by="app")
    inside = raw["creation_time"].notna()
    assert tot["y"].sum() == raw.loc[inside, "gpu_request"].sum() < raw["gpu_request"].sum()
    assert set(tot["unique_id"]) == {TOTAL} and tot["ds"].diff().dropna().eq(pd.Timedelta("10min")).all()
    # the apps partition the total, bin by bin
    np.testing.assert_allclose(apps.groupby("ds")["y"].sum().to_numpy(), tot["y"].to_numpy())


def test_dlrm_arrivals_start_at_the_first_arrival_not_the_anchor(tmp_path):
    from features.dlrm_trace import EPOCH, dlrm_arrivals

    day = 86400.0  # a later window of the same format: its first instance on day 15
    pd.DataFrame({"app_name": ["a", "b", "a", "c"], "gpu_request": [1, 2, 0, 4],
                  "creation_time": [None, 15 * day + 700, 15 * day + 4000, 16 * day]}
                 ).to_csv(tmp_path / "late.csv", index=False)
    tot = dlrm_arrivals(tmp_path / "late.csv")
    assert tot["ds"].iloc[0] == EPOCH + pd.Timedelta(days=15, minutes=10)  # not 15 days of zeros
    assert tot["ds"].iloc[-1] == EPOCH + pd.Timedelta(days=16) and tot["y"].sum() == 6
    assert len(tot) == 144


def test_gateway_qps_is_the_gateway_wide_series():
    from features.gateway_qps import gateway_qps

    path = TRACES / "genai-2026-dev" / "qps_dev.csv"
    if not path.is_file():
        pytest.skip(f"GenAI trace absent at {path}")
    s = gateway_qps(path)
    raw = pd.read_csv(path, dtype={"container_ip": str})
    gw = raw[raw["container_ip"].isna() & (raw["request_type"] == "API Requests")]
    assert s["unique_id"].unique().tolist() == ["gateway"]
    assert s["y"].max() <= gw["value"].max()
    assert len(s) == pytest.approx((gw["timestamp_anon"].max() - gw["timestamp_anon"].min()) / 60, abs=2)
    # a rate row exists only when requests arrived (no row is 0): a bin without one is 0,
    # and a bin with one is at least the smallest quantum
    assert (gw["value"] > 0).all()
    binned = pd.to_datetime(gw["timestamp_anon"], unit="s", utc=True).dt.floor("1min")
    sampled = s["ds"].isin(binned)
    assert (s.loc[~sampled, "y"] == 0).all() and (~sampled).sum() > 100
    assert (s.loc[sampled, "y"] >= gw["value"].min()).all()
    carried = gateway_qps(path, fill="carry")
    assert (carried["y"] >= gw["value"].min()).all() and carried["y"].mean() > s["y"].mean()
