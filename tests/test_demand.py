"""Demand forecaster: no leakage, baselines, artifacts, CLI errors (the series builders:
test_demand_series.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.demand.model import DemandForecaster
from forecaster.demand.backtest import backtest
from foresight.cli import main
from foresight.errors import ForesightError

FAST = dict(n_estimators=40, val_bins=288)


def flows(days: int = 12, seed: int = 0) -> pd.DataFrame:
    """Poisson arrivals with a daily cycle, two queues of different size, 10-min bins."""
    rng = np.random.default_rng(seed)
    ds = pd.date_range("2026-01-05", periods=days * 144, freq="10min", tz="UTC")
    phase = 2 * np.pi * (ds.hour * 60 + ds.minute) / 1440
    parts = []
    for q, size in (("big", 8.0), ("small", 1.5)):
        rate = size * (1.2 + np.sin(phase))
        parts.append(pd.DataFrame({"unique_id": q, "ds": ds, "y": rng.poisson(rate).astype(float)}))
    return pd.concat(parts, ignore_index=True)


def test_no_leakage_forecast_unchanged_when_future_altered():
    df = flows()
    T = df["ds"].min() + pd.Timedelta("9D")
    t0 = T + pd.Timedelta("1D")
    altered = df.copy()
    future = altered["ds"] >= t0
    altered.loc[future, "y"] = np.random.default_rng(9).uniform(0, 500, future.sum())
    a, _, _ = backtest(df, "10min", 6, T, agg="sum", **FAST)
    b, _, _ = backtest(altered, "10min", 6, T, agg="sum", **FAST)
    cols = ["p10", "p50", "p90", "persistence", "snaive_day", "snaive_week", "ets"]
    at = a[a["origin"] == t0].sort_values("unique_id")[cols].to_numpy()
    bt = b[b["origin"] == t0].sort_values("unique_id")[cols].to_numpy()
    assert at.shape == (2, len(cols)) and np.isfinite(at).all()
    np.testing.assert_array_equal(at, bt)
    # ...and the alteration does reach later origins and the target (the test can fail).
    later = t0 + pd.Timedelta("2h")
    assert not np.allclose(a.loc[a["origin"] == later, "p50"], b.loc[b["origin"] == later, "p50"])
    assert not np.allclose(a.loc[a["origin"] == t0, "y_true"], b.loc[b["origin"] == t0, "y_true"])


def test_targets_and_baselines_follow_the_contract():
    df = flows(days=10)
    T = df["ds"].min() + pd.Timedelta("8D")
    pred, met, _ = backtest(df, "10min", 6, T, agg="sum", with_ets=False, **FAST)
    s = df[df["unique_id"] == "big"].set_index("ds")["y"]
    r = pred[pred["unique_id"] == "big"].iloc[5]
    t = r["origin"]
    step = pd.Timedelta("10min")
    assert r["y_true"] == s[t:t + 5 * step].sum()  # t <= ds < t + 1h
    assert r["persistence"] == pytest.approx(s[t - 6 * step:t - step].sum())
    assert r["snaive_day"] == pytest.approx(s[t - pd.Timedelta("1D"):t - pd.Timedelta("1D") + 5 * step].sum())
    assert pred["origin"].min() == T
    m = met.set_index("method")
    # Poisson noise: the model (a smoothed seasonal level) must beat last-hour persistence.
    assert m.loc["model", "MAE"] < 0.9 * m.loc["persistence", "MAE"]
    assert 0.6 < m.loc["model", "coverage_p10_p90"] < 0.95


def test_save_load_roundtrip(tmp_path):
    df = flows(days=10)
    f = DemandForecaster(horizon=6, agg="sum", **FAST).fit(df)
    f.save(tmp_path / "m")
    g = DemandForecaster.load(tmp_path / "m")
    a, b = f.predict(df), g.predict(df)
    pd.testing.assert_frame_equal(a, b)
    assert set(a["unique_id"]) == {"big", "small"}
    assert (a["origin"] == df["ds"].max() + pd.Timedelta("10min")).all()
    assert (a["p10"] <= a["p50"]).all() and (a["p50"] <= a["p90"]).all()
    (tmp_path / "m" / "model.txt").write_text((tmp_path / "m" / "model.txt").read_text() + " ")
    with pytest.raises(ValueError, match="checksum"):
        DemandForecaster.load(tmp_path / "m")


def _run(args: list[str]) -> int:
    return main(["demand", *args])


@pytest.mark.parametrize("content, extra, needle", [
    ("unique_id,ds\nq,2026-01-01\n", [], "missing column"),
    ("unique_id,ds,y\nq,2026-01-01,abc\n", [], "non-numeric"),
    ("unique_id,ds,y\nq,notadate,1\n", [], "not parsable"),
    (None, ["--target", "magic"], "bad --target"),
    (None, ["--test-start", "2030-01-01"], "outside the data"),
    (None, ["--freq", "ten"], "bad frequency"),
    (None, ["--horizon", "7min"], "bad horizon"),
    (None, ["--fill", "nan"], "bad --fill"),
])
def test_cli_bad_input_is_one_line_error(tmp_path, capsys, content, extra, needle):
    path = tmp_path / "S.csv"
    if content is None:
        flows(days=3).to_csv(path, index=False)
    else:
        path.write_text(content)
    args = ["backtest", "--series", str(path), "--test-start", "2026-01-06",
            "--out", str(tmp_path / "P.csv")]
    if extra[:1] == ["--test-start"]:
        args[4] = extra[1]
        extra = []
    assert _run(args + extra) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_cli_backtest_and_forecast(tmp_path, capsys):
    path = tmp_path / "S.csv"
    flows(days=9).to_csv(path, index=False)
    out = tmp_path / "P.csv"
    assert _run(["backtest", "--series", str(path), "--test-start", "2026-01-13",
                 "--out", str(out), "--val-bins", "288", "--no-ets"]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns[:7]) == ["unique_id", "origin", "y_true", "p10", "p50", "p90", "model"]
    assert set(pred["model"]) <= {"model", "persistence", "snaive_day", "snaive_week"}
    assert {"persistence", "snaive_day", "snaive_week"} <= set(pred.columns)
    assert out.with_suffix(".png").stat().st_size > 1000
    text = capsys.readouterr().out
    assert "MASE" in text and "persistence" in text and "served per series" in text
    assert _run(["forecast", "--series", str(path), "--horizon", "1h", "--val-bins", "288",
                 "--target", "ratio"]) == 0
    text = capsys.readouterr().out
    assert "big" in text and "model" in text


def test_fallback_is_per_series_and_named():
    """A series that repeats every day exactly: no model beats seasonal naive (MAE 0) on
    validation, so that series is served by `snaive_day`, named in every output; the noisy
    series keeps the model."""
    df = flows(days=12)
    ds = df.loc[df["unique_id"] == "big", "ds"]
    tod = (ds.dt.hour * 6 + ds.dt.minute // 10).to_numpy()
    periodic = pd.DataFrame({"unique_id": "periodic", "ds": ds, "y": (tod % 7 == 0) * 5.0})
    df = pd.concat([df, periodic], ignore_index=True)
    T = df["ds"].min() + pd.Timedelta("10D")
    pred, met, model = backtest(df, "10min", 6, T, agg="sum", with_ets=False, **FAST)
    assert model.served("periodic") == "snaive_day"
    assert model.served("big") == "model"
    assert model.val_scores_["periodic"]["snaive_day"] == 0.0 < model.val_scores_["periodic"]["model"]
    per = pred[pred["unique_id"] == "periodic"]
    assert (per["model"] == "snaive_day").all() and (pred.loc[pred["unique_id"] == "big", "model"] == "model").all()
    np.testing.assert_allclose(per["p50"], per["snaive_day"])
    assert np.abs(per["p50"] - per["y_true"]).max() == 0.0
    nxt = model.predict(df)
    assert nxt.set_index("unique_id").loc["periodic", "model"] == "snaive_day"


@pytest.mark.parametrize("target", ["residual", "ratio"])
def test_targets_roundtrip_and_beat_persistence(tmp_path, target):
    df = flows(days=12)
    T = df["ds"].min() + pd.Timedelta("10D")
    kw = dict(target=target, unit_scale=target == "residual", level_floor=0.1)
    pred, met, model = backtest(df, "10min", 6, T, agg="sum", with_ets=False, **FAST, **kw)
    m = met.set_index("method")
    assert m.loc["model", "MAE"] < 0.9 * m.loc["persistence", "MAE"]
    assert 0.65 < m.loc["model", "coverage_p10_p90"] < 0.95
    model.save(tmp_path / "m")
    back = DemandForecaster.load(tmp_path / "m")
    pd.testing.assert_frame_equal(model.predict(df), back.predict(df))
    assert back.target == target and back.served_ == model.served_


def test_cli_target_auto_follows_the_aggregation():
    """Summed series are arrivals (the DLRM dev design: ratio target, floor, slower trees),
    averaged ones levels (residual); a bad value is a one-line user error."""
    from foresight.commands.demand import ARRIVALS, _target
    from foresight.errors import ForesightError

    assert _target("auto", "sum") == ARRIVALS and ARRIVALS["target"] == "ratio"
    assert _target("auto", "mean") == {"target": "residual"}
    assert _target("residual", "sum") == {"target": "residual"}
    with pytest.raises(ForesightError, match="bad --target 'x'"):
        _target("x", "sum")


def test_ewma_mix_is_a_named_candidate_that_round_trips(tmp_path):
    """mix=True: the mean of the EWMAs at every alpha of the grid is one more fallback,
    validated and served by name. A random walk (a fast EWMA is right, picked on the fitting
    part) that turns into noise around a level (a slow one is right) in the validation tail:
    the combination beats the EWMA picked on the fitting part there."""
    from forecaster.demand.features import EWMA_ALPHAS

    rng = np.random.default_rng(3)
    n, cut = 900, 540
    y = 50 + np.cumsum(rng.normal(0, 3, n))
    y[cut:] = y[cut - 1] + rng.normal(0, 6, n - cut)
    ds = pd.date_range("2026-01-05", periods=n, freq="1min", tz="UTC")
    df = pd.DataFrame({"unique_id": "g", "ds": ds, "y": y})
    T = ds[780]
    kw = dict(agg="mean", with_ets=False, n_estimators=20, val_bins=180, base="ewma")
    pred, met, model = backtest(df, "1min", 10, T, mix=True, **kw)
    mix = np.mean([df["y"].ewm(alpha=a).mean().shift(1) for a in EWMA_ALPHAS], axis=0)
    at = df.set_index("ds").index.get_indexer(pd.to_datetime(pred["origin"], utc=True))
    np.testing.assert_allclose(pred["ewma_mix"], mix[at])
    sc = model.val_scores_["g"]
    assert sc["ewma_mix"] < min(sc["ewma"], sc["persistence"], sc["model"])
    assert model.served("g") == "ewma_mix" and (pred["model"] == "ewma_mix").all()
    np.testing.assert_allclose(pred["p50"], pred["ewma_mix"])
    model.save(tmp_path / "m")
    back = DemandForecaster.load(tmp_path / "m")
    assert back.mix and back.served("g") == "ewma_mix"
    pd.testing.assert_frame_equal(model.predict(df), back.predict(df))
    _, _, plain = backtest(df, "1min", 10, T, **kw)  # off by default: not a candidate
    assert "ewma_mix" not in plain.val_scores_["g"] and "ewma_mix" not in plain.baselines()
    with pytest.raises(ValueError, match="agg='mean'"):
        DemandForecaster(freq="1min", horizon=10, agg="sum", mix=True).fit(df)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a baseline with no forecast: NaN, quietly
def test_recent_window_repicks_per_origin_without_leaking(tmp_path):
    """recent_window: at each origin the served predictor is the best over the last horizons
    that have ended. Noise around a level (a slow EWMA is right, and validates) that turns
    into a random walk after the training end (the last value and fast EWMAs are right)."""
    rng = np.random.default_rng(4)
    n, cut, H = 1200, 780, 10
    y = 50 + rng.normal(0, 6, n)
    y[cut:] = 50 + np.cumsum(rng.normal(0, 3, n - cut))
    ds = pd.date_range("2026-01-05", periods=n, freq="1min", tz="UTC")
    df = pd.DataFrame({"unique_id": "g", "ds": ds, "y": y})
    T = ds[cut]
    kw = dict(agg="mean", with_ets=False, n_estimators=20, val_bins=180, base="ewma", mix=True)
    static, _, fixed = backtest(df, "1min", H, T, **kw)
    pred, _, model = backtest(df, "1min", H, T, recent_window=6, **kw)
    late = (pd.to_datetime(pred["origin"], utc=True) >= T + pd.Timedelta("2h")).to_numpy()
    fast = {"persistence", "ewma_0.5", "ewma_0.3"}
    assert fixed.served("g") not in fast and (static["model"] == fixed.served("g")).all()
    assert pred.loc[late, "model"].isin(fast).mean() > 0.7
    err = lambda p: float(np.mean(np.abs(p["p50"] - p["y_true"]).to_numpy()[late]))
    assert err(pred) < 0.8 * err(static)
    for name in set(pred["model"]):  # every served name's value is its own column or EWMA
        rows = (pred["model"] == name).to_numpy()
        a = float(name[5:]) if name.startswith("ewma_") and name != "ewma_mix" else None
        ref = (df["y"].ewm(alpha=a).mean().shift(1).to_numpy()[
            df.set_index("ds").index.get_indexer(pd.to_datetime(pred["origin"], utc=True))]
            if a is not None else pred[name if name != "model" else "lightgbm"].to_numpy())
        np.testing.assert_allclose(pred["p50"].to_numpy()[rows], ref[rows], rtol=1e-9)
    # the pick at an origin reads only horizons that ended before it
    t0 = T + pd.Timedelta("150min")
    changed = df.copy()
    changed.loc[changed["ds"] >= t0, "y"] += 40.0
    b = model.predict_origins(changed, T)
    a = model.predict_origins(df, T)
    at = lambda p: p[pd.to_datetime(p["origin"], utc=True) == t0]
    assert at(a)["model"].tolist() == at(b)["model"].tolist()
    np.testing.assert_allclose(at(a)[["p10", "p50", "p90"]], at(b)[["p10", "p50", "p90"]])
    # the live forecast from the bins before t0 serves what the backtest served at t0
    live = model.predict(df[df["ds"] < t0])
    assert live["model"].tolist() == at(a)["model"].tolist()
    np.testing.assert_allclose(live[["p10", "p50", "p90"]], at(a)[["p10", "p50", "p90"]])
    # with an evidence bar no window can clear, the validated choice serves throughout
    strict, _, _ = backtest(df, "1min", H, T, recent_window=6, recent_z=1e9, **kw)
    assert (strict["model"] == fixed.served("g")).all()
    model.save(tmp_path / "m")
    back = DemandForecaster.load(tmp_path / "m")
    assert back.recent_window == 6
    pd.testing.assert_frame_equal(back.predict_origins(df, T), a)
    back.save(tmp_path / "again")  # a loaded model saves like a fitted one
    pd.testing.assert_frame_equal(DemandForecaster.load(tmp_path / "again").predict_origins(
        df, T), a)
    pd.testing.assert_frame_equal(back.predict(df), model.predict(df))


def test_cli_target_rate_repicks_and_names_what_it_serves(tmp_path, capsys):
    """--target rate (--agg mean): the gateway-QPS design; each origin's served predictor is
    named in the PRED file and the forecast table; with --agg sum it is a one-line error."""
    from foresight.commands.demand import RATE, _target

    assert _target("rate", "mean") == RATE and RATE["recent_window"] == 6
    assert RATE["recent_intervals"] == 36
    rng = np.random.default_rng(5)
    n = 900
    y = np.r_[50 + rng.normal(0, 6, 500), 50 + np.cumsum(rng.normal(0, 3, n - 500))]
    path = tmp_path / "Q.csv"
    pd.DataFrame({"unique_id": "gateway", "ds": pd.date_range(
        "2026-01-05", periods=n, freq="1min", tz="UTC"), "y": y}).to_csv(path, index=False)
    out = tmp_path / "P.csv"
    base = ["--series", str(path), "--freq", "1min", "--horizon", "10min", "--val-bins", "180"]
    assert _run(["backtest", *base, "--test-start", "2026-01-05T09:00Z", "--out", str(out),
                 "--agg", "mean", "--target", "rate", "--no-ets"]) == 0
    pred = pd.read_csv(out)
    names = set(pred["model"])
    assert len(names) > 1 and any(n.startswith("ewma_") for n in names)
    capsys.readouterr()
    assert _run(["forecast", *base, "--agg", "mean", "--target", "rate"]) == 0
    assert "gateway" in capsys.readouterr().out
    assert _run(["backtest", *base, "--test-start", "2026-01-05T09:00Z", "--out", str(out),
                 "--target", "rate"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--agg mean" in err and "\n" not in err


def test_recent_intervals_follow_a_quieter_regime_without_leaking(tmp_path):
    """recent_intervals: p10/p90 re-calibrated at each origin from the served errors of the
    horizons that ended in the window. Noise that drops to a quarter after the training end:
    the validation tail's band holds nearly everything, the recent one comes back to ~80 %."""
    rng = np.random.default_rng(7)
    n, cut, H = 1400, 700, 10
    y = 50 + rng.normal(0, 8, n)
    y[cut:] = 50 + rng.normal(0, 2, n - cut)
    ds = pd.date_range("2026-01-05", periods=n, freq="1min", tz="UTC")
    df = pd.DataFrame({"unique_id": "g", "ds": ds, "y": y})
    T = ds[cut]
    kw = dict(agg="mean", with_ets=False, n_estimators=20, val_bins=180, base="ewma", mix=True,
              recent_window=6, recent_z=1.645)
    fixed, _, _ = backtest(df, "1min", H, T, **kw)
    pred, _, model = backtest(df, "1min", H, T, recent_intervals=18, **kw)
    late = (pd.to_datetime(pred["origin"], utc=True) >= T + pd.Timedelta("4h")).to_numpy()
    cov = lambda p: float(np.mean(((p["y_true"] >= p["p10"]) & (p["y_true"] <= p["p90"]))
                                  .to_numpy()[late]))
    assert cov(fixed) > 0.97 and 0.7 < cov(pred) < 0.9
    np.testing.assert_allclose(pred["p50"], fixed["p50"])  # the point forecast is untouched
    width = (pred["p90"] - pred["p10"]).to_numpy()
    assert np.median(width[late]) < 0.5 * np.median((fixed["p90"] - fixed["p10"]).to_numpy()[late])
    # the band at an origin reads only horizons that ended before it
    t0 = T + pd.Timedelta("5h")
    changed = df.copy()
    changed.loc[changed["ds"] >= t0, "y"] += rng.normal(0, 30, int((changed["ds"] >= t0).sum()))
    at = lambda p: p[pd.to_datetime(p["origin"], utc=True) == t0][["p10", "p50", "p90"]]
    np.testing.assert_allclose(at(model.predict_origins(changed, T)),
                               at(model.predict_origins(df, T)))
    model.save(tmp_path / "m")
    back = DemandForecaster.load(tmp_path / "m")
    assert back.recent_intervals == 18
    with pytest.raises(ValueError, match="needs recent_window"):
        DemandForecaster(freq="1min", horizon=H, agg="mean", recent_intervals=18).fit(df)
    pd.testing.assert_frame_equal(back.predict_origins(df, T), model.predict_origins(df, T))


def test_cli_reads_a_missing_rate_bin_as_zero(tmp_path):
    """--target rate: a bin without a sample is a rate of 0 (exports drop zero rows);
    another --agg mean series carries its last level; --fill says otherwise."""
    from foresight.commands.demand import _load

    path = tmp_path / "R.csv"
    pd.DataFrame({"unique_id": "gw", "ds": ["2026-01-05T00:00Z", "2026-01-05T00:03Z"],
                  "y": [2.0, 1.0]}).to_csv(path, index=False)
    ys = lambda **kw: _load(path, "1min", "mean", **kw)["y"].tolist()
    assert ys(target="rate") == [2.0, 0.0, 0.0, 1.0]
    assert ys() == ys(target="residual") == ys(fill="carry", target="rate") == [2.0, 2.0, 2.0, 1.0]
    assert ys(fill="zero") == [2.0, 0.0, 0.0, 1.0]


def test_baseline_intervals_are_per_series_not_the_busy_series_spread():
    """Two series 1,000x apart: each baseline's [p10, p90] covers about 80 % of its own series
    (pooled raw residuals gave the quiet series the busy one's spread: coverage ~100 %)."""
    df = flows(days=10)
    df.loc[df["unique_id"] == "big", "y"] *= 1000.0
    T = df["ds"].min() + pd.Timedelta("8D")
    pred, _, _ = backtest(df, "10min", 6, T, agg="sum", with_ets=False, **FAST)
    for uid, g in pred.groupby("unique_id"):
        for name in ("persistence", "snaive_day"):
            inside = (g["y_true"] >= g[f"{name}_p10"]) & (g["y_true"] <= g[f"{name}_p90"])
            assert 0.6 < inside.mean() < 0.95, (uid, name, inside.mean())
            assert (g[f"{name}_p90"] - g[f"{name}_p10"]).median() < 5 * g["y_true"].std(), uid


def test_shrink_on_a_short_validation_needs_a_gain_that_holds_across_horizons():
    """Under MIN_DAY_BLOCKS days of validation the bootstrap resamples whole horizons: a gain
    made in one burst is not kept (with day blocks, one day resamples to itself and any gain
    was). Over 7 days the day blocks stay, and a gain every day is kept."""
    m = DemandForecaster(freq="10min", horizon=6)
    origins = pd.date_range("2026-01-05 10:00", periods=72, freq="10min", tz="UTC").to_numpy()
    errs = np.ones((len(m.shrink_grid), len(origins)))
    errs[-1] = 1.05          # lam = 1 a little worse at every origin...
    errs[-1, :6] = 0.0       # ...but far better over one horizon: lower on average
    assert errs[-1].mean() < errs[0].mean()
    assert m._choose_shrink(errs, origins) == 0.0
    week = pd.date_range("2026-01-05", periods=7 * 144, freq="10min", tz="UTC").to_numpy()
    steady = np.ones((len(m.shrink_grid), len(week)))
    steady[-1] = 0.9
    assert m._choose_shrink(steady, week) == 1.0


def test_per_series_scores_each_series_against_its_own_best_baseline():
    from forecaster.demand.backtest import per_series

    pred = pd.DataFrame({
        "unique_id": ["a"] * 4 + ["b"] * 4,
        "y_true": [10.0, 12, 10, 12, 1000, 1200, 1000, 1200],
        "p50": [11.0, 11, 11, 11, 1000, 1000, 1000, 1000],
        "p10": [9.0] * 4 + [900.0] * 4, "p90": [13.0] * 4 + [1100.0] * 4,
        "persistence": [12.0, 10, 12, 10, 1200, 1000, 1200, 1000],
        "ets": [11.0, 11, 11, 11, np.nan, np.nan, np.nan, np.nan]})
    t = per_series(pred).set_index("series")
    assert t.loc["a", "best baseline"] == "ets" and t.loc["a", "ratio"] == pytest.approx(1.0)
    # b has no AutoETS forecast: persistence (MAE 200) is its best; served MAE 100
    assert t.loc["b", "best baseline"] == "persistence"
    assert t.loc["b", "ratio"] == pytest.approx(0.5)
    assert t.loc["a", "coverage"] == 1.0 and t.loc["b", "coverage"] == 0.5
