"""Usage forecaster: no leakage, beats the baselines on phase-switching series, names the
baseline it serves where it does not beat it, clips to the physical range; CLI contract;
GenAI trace loader and held-out pod rule."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.usage_series import usage_long
from forecaster.usage.model import BASELINES, UsageForecaster

FIXTURE = Path(__file__).parent / "fixtures" / "genai"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "genai-2026-dev"


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
    assert set(p.columns) >= {"unique_id", "origin", "y_true", "p10", "p50", "p90", "model",
                              *BASELINES}
    assert (pd.to_datetime(p["origin"], utc=True) >= start).all()
    # the model beat every baseline on validation here, so it is what is served
    assert m.served_ == "model" and set(m.val_scores_) == {"model", *BASELINES}
    assert m.val_scores_["model"] < min(m.val_scores_[b] for b in BASELINES)
    assert (p["model"] == "model").mean() > 0.9
    cov = ((p["y_true"] >= p["p10"]) & (p["y_true"] <= p["p90"])).mean()
    assert 0.6 < cov < 0.97


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


def test_old_schema_is_a_clear_error(fitted, tmp_path):
    from forecaster.manifest import ArtifactError

    m, _, _ = fitted
    m.save(tmp_path / "u")
    man = json.loads((tmp_path / "u" / "manifest.json").read_text())
    assert man["served"] == m.served_ and man["val_scores"] == m.val_scores_
    assert man["served_series"] == m.served_series_
    man["schema_version"] = 2
    (tmp_path / "u" / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ArtifactError, match=r"schema_version 2, expected one of \(3, 4\)"):
        UsageForecaster.load(tmp_path / "u")


def mixed_series(seed=0, n_dips=16):
    """`n_dips` pods follow the learnable dip pattern; 16 more are steps at random
    times (nothing in the past foresees them), where the last value is the best forecast."""
    df = phase_series(n_series=n_dips, n=600, seed=seed)
    rng = np.random.default_rng(seed + 1)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    parts = [df]
    for k in range(16):
        steps = np.zeros(600)
        steps[rng.integers(0, 600, 12)] = rng.normal(0, 0.3, 12)
        y = 5.0 + np.cumsum(steps)
        parts.append(pd.DataFrame({"unique_id": f"s{k}", "ds": t0 + pd.to_timedelta(
            np.arange(600), "min"), "y": y}))
    return pd.concat(parts, ignore_index=True)


def test_fallback_per_series_is_named_and_served():
    df = mixed_series()
    start = pd.Timestamp("2026-01-01T07:00Z")
    m = UsageForecaster(horizon=10, n_estimators=100).fit(df[df["ds"] < start])
    p = m.predict_origins(df, start)
    served = p.groupby("unique_id")["model"].first()
    # each series serves what it was given at fit time; a baseline row's p50 is that baseline
    assert served.to_dict() == {u: m.served_series_[u] for u in served.index}
    steps = served[served.index.str.startswith("s")]
    assert (steps != "model").mean() >= 0.5, steps.value_counts()
    assert (served[served.index.str.startswith("p")] == "model").mean() >= 0.8
    for b in BASELINES:
        r = p[p["model"] == b]
        np.testing.assert_allclose(r["p50"], r[b])
    r = p[p["model"] == "model"]
    np.testing.assert_allclose(r["p50"], r["model_p50"])
    assert (p["p10"] <= p["p50"]).all() and (p["p50"] <= p["p90"]).all()
    # "global" selection: one predictor for every series
    g = UsageForecaster(horizon=10, n_estimators=100, select="global").fit(df[df["ds"] < start])
    assert g.served_series_ == {}
    assert set(g.predict_origins(df, start)["model"]) == {g.served_}


def test_hurdle_serves_the_last_value_where_nothing_moves(tmp_path):
    """Step pods stay flat over most horizons: the hurdle classifier sends those origins to the
    last value exactly, which lowers the model's absolute error there, and it round-trips."""
    df = mixed_series(seed=3)
    start = pd.Timestamp("2026-01-01T07:00Z")
    train = df[df["ds"] < start]
    plain = UsageForecaster(horizon=10, n_estimators=100).fit(train)
    h = UsageForecaster(horizon=10, n_estimators=100, hurdle=True).fit(train)
    assert h.hurdle_ and h.val_scores_["model"] < h.val_scores_["model_no_hurdle"]
    p, q = h.predict_origins(df, start), plain.predict_origins(df, start)
    steps = p["unique_id"].str.startswith("s").to_numpy()
    exact = (p["model_p50"] == p["last_value"]).to_numpy()
    assert exact[steps].mean() >= 0.5 and exact[~steps].mean() < exact[steps].mean()
    assert (q["model_p50"] != q["last_value"]).to_numpy()[steps].mean() > 0.9  # no hurdle
    err = lambda r: float(np.mean(np.abs(r["model_p50"] - r["y_true"]).to_numpy()[steps]))
    assert err(p) < err(q)
    h.save(tmp_path / "h")
    assert (tmp_path / "h" / "still.txt").exists()
    pd.testing.assert_frame_equal(UsageForecaster.load(tmp_path / "h").predict_origins(
        df, start), p)
    UsageForecaster.load(tmp_path / "h").save(tmp_path / "again")  # loaded saves as fitted
    assert (tmp_path / "again" / "still.txt").exists()
    pd.testing.assert_frame_equal(UsageForecaster.load(tmp_path / "again").predict_origins(
        df, start), p)


def test_the_gate_scores_the_model_it_serves():
    # mostly step pods: the plain model loses to the last value on the validation tail, the
    # hurdled one (exact on the flat stretches) beats it; the model served is the hurdled one,
    # so that is the score the gate compares with the best baseline
    df = mixed_series(seed=0, n_dips=8)
    start = pd.Timestamp("2026-01-01T07:00Z")
    m = UsageForecaster(horizon=10, n_estimators=100, hurdle=True).fit(df[df["ds"] < start])
    v = m.val_scores_
    best = min(BASELINES, key=v.get)
    assert m.hurdle_ and v["model"] < (1 - m.min_gain) * v[best] <= v["model_no_hurdle"]
    assert m.served_ == "model"
    p = m.predict_origins(df, start)
    assert (p["model"] == "model").mean() > 0.3


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


def test_schema_3_artifact_still_loads(fitted, tmp_path):
    # a schema-3 manifest (before the hurdle and the re-pick) has none of their keys
    m, df, start = fitted
    m.save(tmp_path / "u")
    f = tmp_path / "u" / "manifest.json"
    man = json.loads(f.read_text())
    for k in ("recent_window", "recent_scope", "hurdle", "hurdle_used", "still_constant",
              "min_gain"):
        man.pop(k, None)
    man["schema_version"] = 3
    f.write_text(json.dumps(man))
    q = UsageForecaster.load(tmp_path / "u")
    assert not q.hurdle_ and q.recent_window is None
    pd.testing.assert_frame_equal(q.predict_origins(df, start), m.predict_origins(df, start))


def test_quantiles_clipped_to_physical_range():
    df = phase_series(n_series=20, n=500, seed=3)
    df["y"] = np.clip(df["y"] * 150, 0, 100)  # a duty cycle in %, often at its 100 % ceiling
    start = pd.Timestamp("2026-01-01T06:00Z")
    m = UsageForecaster(horizon=10, n_estimators=50, y_max=100.0).fit(df[df["ds"] < start])
    p = m.predict_origins(df, start)
    assert p["p90"].max() <= 100.0 and p["p10"].min() >= 0.0
    assert (p["p90"] == 100.0).any()  # the clip did bite: unclipped, p90 would exceed 100
    # without a bound, the training maximum is the ceiling
    m2 = UsageForecaster(horizon=10, n_estimators=50).fit(df[df["ds"] < start])
    assert m2.y_max_ == pytest.approx(df.loc[df["ds"] < start, "y"].max())


def test_fleet_and_recency_options_do_not_leak(tmp_path):
    df = phase_series(n_series=10, n=400, seed=4)
    start = pd.Timestamp("2026-01-01T05:00Z")
    m = UsageForecaster(horizon=10, n_estimators=50, fleet=True, half_life=60,
                        time_of_day=True).fit(df[df["ds"] < start])
    assert {"fleet1", "fleet60", "tod"} <= set(m.features_)
    origin = start + pd.Timedelta("20min")
    changed = df.copy()
    changed.loc[changed["ds"] >= origin, "y"] = 9.0  # every pod, so the fleet moves too
    a, b = m.predict_origins(df, start), m.predict_origins(changed, start)
    at = lambda p: p[pd.to_datetime(p["origin"], utc=True) == origin]["p50"]  # noqa: E731
    np.testing.assert_allclose(at(a), at(b))
    m.save(tmp_path / "f")
    q = UsageForecaster.load(tmp_path / "f")
    pd.testing.assert_frame_equal(q.predict_origins(df, start), a)


def test_genai_loader_bins_the_fixture():
    from features.genai_trace import read_genai, read_genai_metric

    d = read_genai_metric(FIXTURE, "duty_cycle")
    raw = pd.read_csv(FIXTURE / "pod_gpu_duty_cycle_dev.csv")
    assert set(d["unique_id"]) == set(raw["container_ip"])
    assert list(d.columns) == ["unique_id", "ds", "y"]
    for uid, g in d.groupby("unique_id"):
        # a regular 1-min grid from the first to the last sample's bin
        assert (g["ds"].diff().dropna() == pd.Timedelta("1min")).all()
        r = raw[raw["container_ip"] == uid]
        first = pd.to_datetime(r["timestamp_anon"].min(), unit="s", utc=True).floor("1min")
        assert g["ds"].iloc[0] == first
        # 57 s samples leave some bins empty: those carry the level, never invent one
        assert set(np.round(g["y"], 9)) <= set(np.round(
            r.assign(b=pd.to_datetime(r["timestamp_anon"], unit="s").dt.floor("1min"))
            .groupby("b")["value"].mean(), 9))
    assert d["y"].between(0, 100).all()
    mem = read_genai_metric(FIXTURE, "memory_used")
    assert mem["y"].max() > 1e9  # bytes, unchanged


def test_genai_loader_errors(tmp_path):
    from features.genai_trace import read_genai, read_genai_metric
    from foresight.errors import ForesightError

    with pytest.raises(ForesightError, match="not found"):
        read_genai(tmp_path / "nope.csv")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ForesightError, match="need columns"):
        read_genai(tmp_path / "x.csv")
    with pytest.raises(ForesightError, match="unknown genai metric"):
        read_genai_metric(tmp_path, "qps")


def test_final_pod_rule_is_fixed():
    import hashlib

    from features.genai_trace import final_pod

    ids = [f"{i:032x}" for i in range(400)]
    share = np.mean([final_pod(i) for i in ids])
    assert 0.25 < share < 0.37  # 5/16 in expectation
    for i in ids[:20]:
        assert final_pod(i) == (hashlib.md5(i.encode()).hexdigest()[0] in "01234")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces/genai-2026-dev is absent")
def test_genai_dev_trace_split():
    from features.genai_trace import final_pod, read_genai_metric

    d = read_genai_metric(SHARED, "duty_cycle")
    ids = d["unique_id"].unique()
    assert len(ids) == 80
    assert sum(final_pod(i) for i in ids) == 23  # the committed split: 23 final, 57 tune


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
               "--test-start", "2026-01-01T05:00:00Z", "--out", str(out), "--preset", "plain"])
    shown = capsys.readouterr().out
    assert rc == 0, shown
    p = pd.read_csv(out)
    assert {"unique_id", "origin", "y_true", "p50", "last_value", "mean_last_h", "ses",
            "model"} <= set(p.columns)
    assert "served overall" in shown and "validation MAE" in shown
    assert "re-picked" not in shown
    cov = np.mean((p["y_true"] >= p["p10"]) & (p["y_true"] <= p["p90"]))
    assert f"p10-p90 covered {cov:.1%}" in shown and "validation tail" in shown
    # the default preset ("serving"): 6 horizons of ended errors for the re-pick, 4 h half-life
    rc = main(["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon", "10min",
               "--test-start", "2026-01-01T05:00:00Z", "--out", str(out), "--save",
               str(tmp_path / "m")])
    shown = capsys.readouterr().out
    flat = " ".join(shown.split())  # rich wraps lines at the terminal width
    assert rc == 0 and "re-picked at each origin" in flat and "last 60 bins" in flat
    assert "tree settings kept on the validation tail" in flat
    assert "re-calibrated at each origin" in flat
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert man["recent_window"] == 6 and man["recent_unit"] == "horizons"  # 6 x 10 bins
    assert man["recent_intervals"] is True
    assert man["hurdle"] is True and man["half_life"] == 240
    assert man["tune"] == [{"num_leaves": 15, "min_child_samples": 100, "learning_rate": 0.05,
                            "half_life": None}] and "params" in man
    rc = main(["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon", "10min",
               "--test-start", "2026-01-01T05:00:00Z", "--out", str(out), "--no-hurdle",
               "--recent-window", "30", "--save", str(tmp_path / "m2")])
    flat = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "last 30 bins" in flat
    man = json.loads((tmp_path / "m2" / "manifest.json").read_text())
    assert man["recent_window"] == 30 and man["recent_unit"] == "bins"
    assert man["hurdle"] is False
    for bad in (["--y-max", "-1"], ["--half-life", "0"], ["--recent-window", "-5"],
                ["--preset", "fancy"], ["--recent-window", "0", "--recent-intervals"]):
        rc = main(["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon",
                   "10min", "--test-start", "2026-01-01T05:00:00Z", "--out", str(out), *bad])
        err = capsys.readouterr()
        assert rc == 2 and len((err.out + err.err).strip().splitlines()) == 1
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


def test_tune_keeps_the_tree_settings_that_validate_best(tmp_path):
    """`tune` tries other tree settings on the validation tail: the kept one is the one a
    plain fit with those settings scores best there, and the manifest says which."""
    df = phase_series(n_series=12, n=400, seed=3)
    small = {"num_leaves": 3, "min_child_samples": 200, "learning_rate": 0.01,
             "n_estimators": 30, "half_life": 50}  # the constructor's: crippled trees
    default = {"num_leaves": 15, "min_child_samples": 100, "learning_rate": 0.05,
               "n_estimators": 300, "half_life": None}
    big = {"num_leaves": 31, "min_child_samples": 20, "learning_rate": 0.1}
    alone = {name: UsageForecaster(horizon=10, **{**small, **kw}).fit(df).val_scores_["model"]
             for name, kw in (("small", {}), ("default", default), ("big", big))}
    assert alone["small"] > min(alone.values())  # a real choice: the constructor's loses
    for cands in ((), (big,), (default,), (big, default)):
        m = UsageForecaster(horizon=10, tune=cands, **small).fit(df)
        names = ["small", *("big" if c is big else "default" for c in cands)]
        want = min(names, key=alone.get)
        assert m.val_scores_["model"] == pytest.approx(alone[want])
        assert m.params_ == {"small": {}, "default": default, "big": big}[want]
    assert m.params_ != {}
    m.save(tmp_path / "m")
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert man["params"] == m.params_ and man["tune"] == [big, default]
    again = UsageForecaster.load(tmp_path / "m")
    assert again.params_ == m.params_ and again.tune == (big, default)


def test_tune_rejects_an_unknown_setting():
    df = phase_series(n_series=4, n=200, seed=0)
    with pytest.raises(ValueError, match="num_leaf"):
        UsageForecaster(horizon=10, tune=({"num_leaf": 7},)).fit(df)
