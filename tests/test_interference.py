"""InterferenceModel: fit/predict, generalisation, monotonicity, calibration, artifacts, CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.errors import ForesightError
from forecaster.interference.model import InterferenceModel
from forecaster.interference.evaluate import lowo_predictions, score

FAST = {"n_estimators": 60, "n_folds": 3}


def _workloads(n: int, rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({"workload": [f"w{i:02d}" for i in range(n)],
                         "sm_active": rng.uniform(0.1, 0.95, n),
                         "dram_active": rng.uniform(0.05, 0.9, n),
                         "gpu_util": rng.uniform(20, 100, n)})


def _speed(me: pd.DataFrame, other: pd.DataFrame) -> np.ndarray:
    # time-slicing-like truth: fair share once summed demand exceeds the GPU, plus DRAM cost
    share = 1.0 / np.maximum(me.sm_active.to_numpy() + other.sm_active.to_numpy(), 1.0)
    bw = 1.0 / (1.0 + 0.8 * np.maximum(me.dram_active.to_numpy() + other.dram_active.to_numpy()
                                       - 0.8, 0.0))
    return np.clip(share * bw, 0.05, 1.0)


def make_pairs(n_workloads: int = 16, n_pairs: int = 300, seed: int = 0,
               features: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    w = _workloads(n_workloads, rng)
    ia, ib = rng.integers(n_workloads, size=n_pairs), rng.integers(n_workloads, size=n_pairs)
    a, b = w.iloc[ia].reset_index(drop=True), w.iloc[ib].reset_index(drop=True)
    noise = lambda: rng.normal(0, 0.01, n_pairs)  # noqa: E731
    out = pd.DataFrame({"a_workload": a.workload, "b_workload": b.workload,
                        "a_speed": np.clip(_speed(a, b) + noise(), 0.02, 1.0),
                        "b_speed": np.clip(_speed(b, a) + noise(), 0.02, 1.0)})
    if features:
        for f in ("sm_active", "dram_active", "gpu_util"):
            out[f"a_{f}"], out[f"b_{f}"] = a[f].to_numpy(), b[f].to_numpy()
    return out


@pytest.fixture(scope="module")
def pairs() -> pd.DataFrame:
    return make_pairs()


@pytest.fixture(scope="module")
def fitted(pairs) -> InterferenceModel:
    return InterferenceModel(**FAST).fit(pairs)


def test_predict_columns_ranges_and_bound(fitted, pairs):
    pred = fitted.predict(pairs.drop(columns=["a_speed", "b_speed"]))
    assert list(pred.columns) == ["a_speed_pred", "b_speed_pred", "a_speed_p10", "b_speed_p10"]
    assert len(pred) == len(pairs)
    points = pred[["a_speed_pred", "b_speed_pred"]].to_numpy()
    assert ((points > 0) & (points <= 2)).all()
    assert (pred[["a_speed_p10", "b_speed_p10"]].to_numpy() >= 0).all()
    assert (pred["a_speed_p10"] <= pred["a_speed_pred"]).all()
    # a swapped pair gives the swapped answer: both directions come from one model
    swapped = pairs.rename(columns=lambda c: {"a": "b", "b": "a"}[c[0]] + c[1:])
    ps = fitted.predict(swapped.drop(columns=["a_speed", "b_speed"]))
    np.testing.assert_allclose(ps["a_speed_pred"], pred["b_speed_pred"], atol=1e-9)


def test_features_generalise_to_unseen_workloads(pairs):
    preds = lowo_predictions(pairs, FAST, workloads=["w00", "w03", "w07", "w11"])
    s = score(preds).set_index("method")
    assert s.loc["model", "mae"] < 0.6 * s.loc["train_mean", "mae"]
    assert s.loc["model", "mae"] < s.loc["util_linreg", "mae"]
    assert s.loc["model", "spearman"] > 0.7


def test_identity_only_beats_training_mean():
    # speeds driven by per-workload sensitivity and aggressiveness, no features given
    rng = np.random.default_rng(3)
    n = 14
    sens, aggr = rng.uniform(0.3, 1.0, n), rng.uniform(0.4, 1.0, n)
    rows = [(i, j) for i in range(n) for j in range(i, n)]
    a, b = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    p = pd.DataFrame({"a_workload": [f"w{i}" for i in a], "b_workload": [f"w{j}" for j in b],
                      "a_speed": np.clip(sens[a] * aggr[b] + rng.normal(0, .02, len(a)), .02, 1),
                      "b_speed": np.clip(sens[b] * aggr[a] + rng.normal(0, .02, len(a)), .02, 1)})
    s = score(lowo_predictions(p, FAST, workloads=["w1", "w5", "w9"])).set_index("method")
    # the held-out side's own sensitivity is unknowable: the gain comes from the partner
    assert s.loc["model", "mae"] < 0.9 * s.loc["train_mean", "mae"]
    assert np.isnan(s.loc["util_rule", "mae"])  # no utilization: the rule cannot be computed


def test_more_partner_activity_never_speeds_up(fitted, pairs):
    base = pairs.drop(columns=["a_speed", "b_speed"]).head(40)
    speeds = []
    for sm in np.linspace(0.05, 1.0, 8):
        speeds.append(fitted.predict(base.assign(b_sm_active=sm))["a_speed_pred"].to_numpy())
    assert (np.diff(np.vstack(speeds), axis=0) <= 1e-9).all()


def test_p10_is_calibrated_on_unseen_workloads():
    p = make_pairs(n_workloads=20, n_pairs=400, seed=5)
    p["a_speed"] = np.clip(p["a_speed"] + np.random.default_rng(1).normal(0, 0.05, len(p)), .02, 1)
    preds = lowo_predictions(p, FAST, workloads=[f"w{i:02d}" for i in range(0, 20, 5)])
    cov = score(preds).set_index("method").loc["model", "p10_coverage"]
    assert 0.02 <= cov <= 0.25


def test_save_load_roundtrip_and_no_pickle(fitted, pairs, tmp_path):
    fitted.save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["manifest.json", "point.txt"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["schema_version"] == 4 and manifest["features"] == fitted.feature_names_
    loaded = InterferenceModel.load(tmp_path)
    pd.testing.assert_frame_equal(loaded.predict(pairs), fitted.predict(pairs))


def test_schema_1_artifact_with_quantile_booster_still_loads(pairs, tmp_path):
    # artifacts published before the conformal-margin p10 carry a p10.txt quantile booster
    old = InterferenceModel(**FAST).fit(pairs)
    old.p10_ = InterferenceModel(**FAST).fit(pairs.assign(
        a_speed=pairs["a_speed"] * 0.8, b_speed=pairs["b_speed"] * 0.8)).point_
    old.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and (tmp_path / "p10.txt").exists()
    loaded = InterferenceModel.load(tmp_path)
    q = pairs.drop(columns=["a_speed", "b_speed"])
    pd.testing.assert_frame_equal(loaded.predict(q), old.predict(q))
    new = InterferenceModel(**FAST).fit(pairs)
    # the quantile booster, not the margin, sets the schema 1 bound
    assert not np.allclose(old.predict(q)["a_speed_p10"], new.predict(q)["a_speed_p10"])


def test_point_is_capped_where_no_training_speed_went(pairs):
    m = InterferenceModel(**FAST).fit(pairs)
    calm = pairs.drop(columns=["a_speed", "b_speed"]).assign(
        a_sm_active=0.001, b_sm_active=0.001, a_dram_active=0.001, b_dram_active=0.001,
        a_gpu_util=0.1, b_gpu_util=0.1, a_workload="new1", b_workload="new2")
    pred = m.predict(calm)
    assert (pred[["a_speed_pred", "b_speed_pred"]].to_numpy() <= m.cap_ + 1e-12).all()
    assert m.cap_ == pytest.approx(max(1.0, np.quantile(pd.concat(
        [pairs["a_speed"], pairs["b_speed"]]), 0.99)))


@pytest.mark.parametrize("target", ["point.txt", "manifest.json"])
def test_load_refuses_tampered_artifact(fitted, tmp_path, target):
    fitted.save(tmp_path)
    f = tmp_path / target
    text = f.read_text()
    if target == "manifest.json":
        body = json.loads(text)
        body["conformal_offset"] = -0.5
        f.write_text(json.dumps(body))
    else:
        f.write_text(text.replace("learning_rate", "learning_rate ", 1) + "\n")
    with pytest.raises(ForesightError, match="checksum"):
        InterferenceModel.load(tmp_path)


def test_load_missing_dir_is_user_error(tmp_path):
    with pytest.raises(ForesightError, match="manifest"):
        InterferenceModel.load(tmp_path / "nope")


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.iloc[0:0], "empty"),
    (lambda p: p.assign(a_speed=2.5), r"\(0, 2\]"),
    (lambda p: p.assign(b_speed=0.0), r"\(0, 2\]"),
    (lambda p: p.assign(a_sm_active="high"), "non-numeric"),
    (lambda p: p[["a_speed", "b_speed"]].assign(junk=1), "no usable column"),
])
def test_bad_tables_raise_one_line_errors(pairs, mutate, message):
    with pytest.raises(ForesightError, match=message) as exc:
        InterferenceModel(**FAST).fit(mutate(pairs.copy()))
    assert "\n" not in str(exc.value)


def test_cli_fit_predict_and_errors(pairs, tmp_path, capsys):
    from foresight.cli import main

    train = tmp_path / "train.csv"
    pairs.assign(comment="x").to_csv(train, index=False)
    test = tmp_path / "test.parquet"
    pairs.drop(columns=["a_speed", "b_speed"]).head(25).to_parquet(test)
    assert main(["interference", "fit", "--pairs", str(train), "--model-dir",
                 str(tmp_path / "m")]) == 0
    said = capsys.readouterr()
    assert "ignoring unknown" in said.err  # warnings go to stderr
    assert "support check" not in said.out  # no admission bound here: nothing to refuse
    out = tmp_path / "pred.csv"
    assert main(["interference", "predict", "--model-dir", str(tmp_path / "m"), "--pairs",
                 str(test), "--out", str(out)]) == 0
    pred = pd.read_csv(out)
    assert len(pred) == 25
    assert {"a_workload", "a_speed_pred", "b_speed_pred", "a_speed_p10", "b_speed_p10"} <= set(
        pred.columns)
    bad = tmp_path / "bad.csv"
    pairs.assign(a_speed=3.0).to_csv(bad, index=False)
    assert main(["interference", "fit", "--pairs", str(bad), "--model-dir",
                 str(tmp_path / "m2")]) == 2
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert main(["interference", "fit", "--pairs", str(empty), "--model-dir",
                 str(tmp_path / "m3")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert main(["interference", "fit", "--pairs", str(train), "--model-dir",
                 str(tmp_path / "m"), "--alpha", "0.7"]) == 2
    assert "alpha" in capsys.readouterr().err
    assert main(["interference", "fit", "--pairs", str(train), "--model-dir",
                 str(tmp_path / "m"), "--admit-risk", "0"]) == 2
    assert "admit_risk" in capsys.readouterr().err
    assert (tmp_path / "m" / "point.txt").is_file()  # the model already there is kept
    # a less pessimistic bound (the p40) sits above the p10 on the same pairs
    assert main(["interference", "fit", "--pairs", str(train), "--model-dir",
                 str(tmp_path / "m40"), "--alpha", "0.4"]) == 0
    out40 = tmp_path / "pred40.csv"
    assert main(["interference", "predict", "--model-dir", str(tmp_path / "m40"), "--pairs",
                 str(test), "--out", str(out40)]) == 0
    pred40 = pd.read_csv(out40)
    assert (pred40["a_speed_p10"] >= pred["a_speed_p10"] - 1e-9).all()
    assert (pred40["a_speed_p10"] > pred["a_speed_p10"] + 1e-6).any()


def test_cli_evaluate_writes_table_and_png(tmp_path):
    from foresight.cli import main

    p = make_pairs(n_workloads=5, n_pairs=120, seed=2)
    f = tmp_path / "pairs.csv"
    p.to_csv(f, index=False)
    assert main(["interference", "evaluate", "--pairs", str(f), "--out", str(tmp_path / "ev"),
                 "--n-estimators", "40"]) == 0
    md = (tmp_path / "ev" / "interference_eval.md").read_text()
    for name in ("model", "always_1", "train_mean", "util_rule", "util_linreg"):
        assert f"| {name} |" in md
    assert (tmp_path / "ev" / "interference_pred_vs_true.png").stat().st_size > 1000


@pytest.mark.parametrize("drop", ["b_dram_active", "a_dram_active"])
def test_one_sided_feature_is_missing_not_an_error(pairs, drop):
    # a feature measured on one side only (e.g. the partner's exporter lacks profiling
    # counters): fit and predict treat the other side as missing instead of raising
    one_sided = pairs.drop(columns=[drop])
    m = InterferenceModel(**FAST).fit(one_sided)
    assert "dram_active" in m.side_features_
    pred = m.predict(one_sided.drop(columns=["a_speed", "b_speed"]))
    assert len(pred) == len(pairs) and np.isfinite(pred.to_numpy()).all()
    # a model trained with both sides predicts a one-sided table as "that side unknown"
    # where the workload is unknown (a known one has its measured solo features filled in)
    full = InterferenceModel(**FAST).fit(pairs)
    unknown = {"a_workload": "never-seen-a", "b_workload": "never-seen-b"}
    req = pairs.drop(columns=["a_speed", "b_speed"]).assign(**unknown)
    both = full.predict(req)
    half = full.predict(req.drop(columns=[drop]))
    pd.testing.assert_frame_equal(half, full.predict(req.assign(**{drop: np.nan})))
    assert not np.allclose(half.to_numpy(), both.to_numpy())


def test_retraining_job_fits_the_configured_bound_level(pairs):
    from training.kinds import interference as kind
    from training.pipeline import TrainConfig

    m = kind.fit({"pairs": pairs}, TrainConfig(n_estimators=40, interference_alpha=0.4))
    assert m.alpha == 0.4
    low = kind.fit({"pairs": pairs}, TrainConfig(n_estimators=40))
    p40, p10 = m.predict(pairs), low.predict(pairs)
    assert (p40["a_speed_p10"] >= p10["a_speed_p10"] - 1e-9).all()
    assert (p40["a_speed_p10"] > p10["a_speed_p10"] + 1e-6).any()


@pytest.mark.parametrize("mechanism", [True, False])
def test_a_pair_asked_by_workload_names_gets_the_known_workloads_solo_features(pairs,
                                                                               mechanism):
    # the extender's gate asks by workload key only: with or without the structured part
    # (and whichever blend serves), a known workload's measured solo features fill the rest
    m = InterferenceModel(**FAST, mechanism=mechanism).fit(pairs)
    req = pairs.drop(columns=["a_speed", "b_speed"])
    by_name = m.predict(req[["a_workload", "b_workload"]])
    pd.testing.assert_frame_equal(by_name, m.predict(req))  # features are per workload here
    assert by_name["a_speed_pred"].nunique() > 10  # not one constant for every pair
