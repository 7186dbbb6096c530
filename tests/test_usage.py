"""Usage forecaster: no leakage, beats the baselines on phase-switching series, names the
baseline it serves where it does not beat it, clips to the physical range; CLI contract
(the GenAI loader: test_usage_genai.py; the per-origin re-pick: test_usage_recent.py)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from forecaster.usage.model import BASELINES, UsageForecaster


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
    assert q.bin_ == m.bin_ == pd.Timedelta("1min")  # the bins fitted: the API checks them


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
