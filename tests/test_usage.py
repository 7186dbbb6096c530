"""Usage forecaster: no leakage, beats the baselines on phase-switching series, CLI contract."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.usage_series import usage_long
from forecaster.usage import UsageForecaster


def phase_series(n_series=30, n=600, seed=0):
    """Steady compute at a per-pod level with short evaluation dips (as real jobs do)."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    parts = []
    for k in range(n_series):
        level = rng.uniform(0.3, 0.9)
        y = np.full(n, level)
        i = int(rng.integers(5, 30))
        while i < n:
            d = int(rng.integers(2, 6))
            y[i:i + d] = level * 0.5
            i += d + int(rng.integers(15, 45))
        y = y + rng.normal(0, 0.01, n)
        parts.append(pd.DataFrame({"unique_id": f"p{k}", "ds": t0 + pd.to_timedelta(
            np.arange(n), "min"), "y": y}))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def fitted():
    df = phase_series()
    start = pd.Timestamp("2026-01-01T07:00Z")
    m = UsageForecaster(horizon=10, n_estimators=100).fit(df[df["ds"] < start])
    return m, df, start


def test_beats_baselines(fitted):
    m, df, start = fitted
    p = m.predict_origins(df, start)
    mae = {c: np.mean(np.abs(p[c] - p["y_true"])) for c in ("p50", "last_value",
                                                            "mean_last_h", "ses")}
    assert mae["p50"] < 0.9 * min(mae["last_value"], mae["mean_last_h"], mae["ses"])
    assert set(p.columns) >= {"unique_id", "origin", "y_true", "p10", "p50", "p90"}
    assert (pd.to_datetime(p["origin"], utc=True) >= start).all()


def test_no_leakage(fitted):
    m, df, start = fitted
    origin = start + pd.Timedelta("30min")
    changed = df.copy()
    changed.loc[changed["ds"] >= origin, "y"] = 5.0  # everything from the origin on
    a = m.predict_origins(df, start)
    b = m.predict_origins(changed, start)
    key = ["unique_id", "origin"]
    j = a.merge(b, on=key, suffixes=("_a", "_b"))
    at = j[pd.to_datetime(j["origin"], utc=True) == origin]
    assert len(at) == 30
    np.testing.assert_allclose(at["p50_a"], at["p50_b"])
    np.testing.assert_allclose(at["mean_last_h_a"], at["mean_last_h_b"])
    assert not np.allclose(at["y_true_a"], at["y_true_b"])


def test_save_load(fitted, tmp_path):
    m, df, start = fitted
    m.save(tmp_path / "u")
    q = UsageForecaster.load(tmp_path / "u")
    pd.testing.assert_frame_equal(q.predict_origins(df, start), m.predict_origins(df, start))


def test_usage_long_bins_per_pod_gpu():
    ts = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.arange(8) * 30, "s")
    s = pd.DataFrame({"ts": np.r_[ts, ts], "node": "n", "gpu": np.repeat(["0", "1"], 8),
                      "uuid": "u", "namespace": "ns", "pod": np.repeat(["a", ""], 8),
                      "metric": "DCGM_FI_PROF_SM_ACTIVE", "value": np.arange(16.0)})
    out = usage_long(s, "sm", "1min")
    assert list(out["unique_id"].unique()) == ["ns/a/n/0"]
    np.testing.assert_allclose(out["y"], [0.5, 2.5, 4.5, 6.5])


def test_cli_backtest(tmp_path, capsys):
    from foresight.cli import main

    df = phase_series(n_series=20, n=400, seed=1)
    s = tmp_path / "s.csv"
    df.to_csv(s, index=False)
    out = tmp_path / "pred.csv"
    rc = main(["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon", "10min",
               "--test-start", "2026-01-01T05:00:00Z", "--out", str(out)])
    assert rc == 0, capsys.readouterr()
    p = pd.read_csv(out)
    assert {"unique_id", "origin", "y_true", "p50", "last_value", "mean_last_h", "ses"} <= \
        set(p.columns)
    rc = main(["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon", "7min30s",
               "--test-start", "2026-01-01T05:00:00Z", "--out", str(out)])
    err = capsys.readouterr()
    assert rc == 2 and "horizon" in (err.out + err.err)


def startup_series(n_series=30, n=500, seed=0):
    """Idle and start-up sit at the same level, so only the phase tells whether the compute
    level (2.2x) is about to come back."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    parts = []
    for k in range(n_series):
        level = rng.uniform(0.4, 0.9)
        y, ph = [], []
        while len(y) < n:
            for name, d, lv in (("idle", rng.integers(10, 40), 0.45), ("startup",
                                rng.integers(3, 7), 0.45), ("compute", rng.integers(15, 40), 1)):
                y += [level * lv] * int(d)
                ph += [name] * int(d)
        y = np.asarray(y[:n]) + rng.normal(0, 0.005, n)
        parts.append(pd.DataFrame({"unique_id": f"p{k}", "ds": t0 + pd.to_timedelta(
            np.arange(n), "min"), "y": y, "phase": ph[:n]}))
    return pd.concat(parts, ignore_index=True)


def test_phase_feature_helps_and_does_not_leak():
    df = startup_series()
    start = pd.Timestamp("2026-01-01T06:00Z")
    mae = {}
    for name, d in (("phase", df), ("none", df.drop(columns="phase"))):
        m = UsageForecaster(horizon=10, n_estimators=100).fit(d[d["ds"] < start])
        p = m.predict_origins(d, start)
        mae[name] = float(np.mean(np.abs(p["p50"] - p["y_true"])))
    assert m.phases_ is False
    assert mae["phase"] < 0.8 * mae["none"]
    m = UsageForecaster(horizon=10, n_estimators=100).fit(df[df["ds"] < start])
    origin = start + pd.Timedelta("30min")
    changed = df.copy()
    changed.loc[changed["ds"] >= origin, "phase"] = "startup"  # phases from the origin on
    a, b = m.predict_origins(df, start), m.predict_origins(changed, start)
    at = lambda p: p[pd.to_datetime(p["origin"], utc=True) == origin]["p50"]  # noqa: E731
    np.testing.assert_allclose(at(a), at(b))


def test_attach_phases_uses_the_phase_at_the_end_of_each_bin():
    from features.usage_series import attach_phases

    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    long = pd.DataFrame({"unique_id": ["ns/a/n/0"] * 4 + ["ns/a/n/1"] * 4,
                         "ds": list(t0 + pd.to_timedelta(np.arange(4), "min")) * 2, "y": 1.0})
    ph = pd.DataFrame({"namespace": "ns", "pod": "a", "start": [t0, t0 + pd.Timedelta("90s")],
                       "end": [t0 + pd.Timedelta("90s"), t0 + pd.Timedelta("3min")],
                       "phase": ["startup", "compute"]})
    out = attach_phases(long, ph, "1min")  # no node/gpu: every GPU of the pod
    assert out["phase"].tolist() == ["startup", "compute", "compute", ""] * 2


def test_cli_backtest_with_phases(tmp_path, capsys):
    from foresight.cli import main

    df = startup_series(n_series=15, n=400, seed=2)
    df["unique_id"] = "ns/" + df["unique_id"] + "/node-0/0"  # what `usage series` writes
    s, s2, ph = tmp_path / "s.csv", tmp_path / "s2.csv", tmp_path / "ph.csv"
    df.to_csv(s, index=False)
    df.drop(columns="phase").to_csv(s2, index=False)
    # the same phases as intervals (one bin each: the phase at the end of the bin)
    step = pd.Timedelta("1min")
    iv = pd.DataFrame({"namespace": "ns", "pod": df["unique_id"].str.split("/").str[1],
                       "start": df["ds"],
                       "end": df["ds"] + step, "phase": df["phase"]})
    iv.to_csv(ph, index=False)
    outs = []
    for args in (["--series", str(s)], ["--series", str(s2), "--phases", str(ph)]):
        out = tmp_path / f"pred{len(outs)}.csv"
        rc = main(["usage", "backtest", *args, "--freq", "1min", "--horizon", "10min",
                   "--test-start", "2026-01-01T05:00:00Z", "--out", str(out)])
        assert rc == 0, capsys.readouterr()
        outs.append(pd.read_csv(out))
    pd.testing.assert_frame_equal(outs[0], outs[1])
