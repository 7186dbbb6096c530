"""The prediction fast path (numpy feature building) equals the training-side pandas path."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.h200 import load_h200_pairs
from features.pairs import validate_pairs
from foresight.errors import ForesightError
from forecaster.interference.model import InterferenceModel, margin_scale
from forecaster.interference.features import directed

from test_interference import FAST, make_pairs


def _reference(m: InterferenceModel, pairs: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """The predict of DataFrames: validate_pairs -> known workloads' solo features filled ->
    directed -> _matrix -> mechanism prior + trees, p10 by band (or the constant margin)."""
    v = validate_pairs(pairs, require_targets=False)
    for side in ("a", "b"):
        if m.solo_ and f"{side}_workload" in v:
            sharing = v["sharing"] if "sharing" in v else pd.Series("", index=v.index)
            for f in m.side_features_:
                known = [(m.solo_.get(f"{w}\x1f{s}") or m.solo_.get(f"{w}\x1f") or {}).get(f)
                         for w, s in zip(v[f"{side}_workload"], sharing)]
                known = pd.Series(known, index=v.index, dtype=float)
                v[f"{side}_{f}"] = v[f"{side}_{f}"].fillna(known) if f"{side}_{f}" in v else known
    X = m._matrix(directed(v), m.encoder_)
    for c in m.feature_names_:
        if c not in X:
            X[c] = np.nan
    X = X[m.feature_names_].to_numpy(dtype=np.float64)
    prior = X[:, m.feature_names_.index("mech_speed")] if "mech_speed" in m.feature_names_ \
        else None
    trees = point = m.point_.predict(X)  # blend "plain" has no mech_speed column at all
    if prior is not None:
        if m.blend_ != "trees":
            point = np.where(np.isnan(prior), trees + m.base_,
                             prior + (trees if m.blend_ in ("residual", "mix") else 0))
    point = np.clip(point, 0.01, m.cap_)
    if m.blend_ == "mix":  # the mean of that and the trees without the structure's speed
        j = m.feature_names_.index("mech_speed")
        point = (point + np.clip(m.plain_.predict(np.delete(X, j, axis=1)), 0.01, m.cap_)) / 2
    low = point - m.offset_ * margin_scale(point)
    mode = directed(v)["sharing"].to_numpy() if "sharing" in v else np.full(len(X), "")
    if prior is None and m.blend_ == "plain" and m.mechanism_ is not None:
        # trees serve alone: the learned scale still covers the modes the forms cover
        prior = np.where(np.isin(mode, m.mechanism_.modes_), 0.0, np.nan)
    if prior is not None and m.scale_ is not None:
        q = np.array([m.scale_q_mode_.get(x, m.scale_q_) for x in mode])
        unit = np.maximum(m.scale_.predict(np.column_stack([X, point])), 0.02)
        low = np.where(np.isnan(prior), low, point - q * unit)
    elif prior is not None and m.band_offsets_:
        band = np.searchsorted([0.5, 0.85], point, side="right")
        q = np.array([m.band_offsets_.get(str(b), m.band_offsets_[""]) for b in band])
        low = np.where(np.isnan(prior), low, point - q)
    low = np.minimum(np.clip(low, 0.0, 2.0), point)
    n = len(pairs)
    return X, pd.DataFrame({"a_speed_pred": point[:n], "b_speed_pred": point[n:],
                            "a_speed_p10": low[:n], "b_speed_p10": low[n:]})


@pytest.fixture(scope="module")
def fitted_ctx() -> tuple[InterferenceModel, pd.DataFrame]:
    p = make_pairs(n_workloads=12, n_pairs=240, seed=2)
    p["sharing"] = np.where(np.arange(len(p)) % 3 == 0, "mps", "timeslice")
    p["gpu_model"] = "A100"
    return InterferenceModel(**FAST).fit(p), p


def _variants(p: pd.DataFrame) -> dict[str, pd.DataFrame]:
    q = p.drop(columns=["a_speed", "b_speed"]).head(50).copy()
    unseen = q.copy()
    unseen.loc[:4, "a_workload"] = "never-seen"
    unseen.loc[5:9, "sharing"] = ""              # unknown category -> missing
    unseen.loc[10:12, "gpu_model"] = "H100"      # category not seen in training
    unseen.loc[13:15, "a_sm_active"] = np.nan    # missing measurement
    return {"same": q, "unseen": unseen,
            "missing_column": q.drop(columns=["b_dram_active", "gpu_model"]),
            "one_pair": q.head(1),
            "names_as_objects_with_none": q.astype({"a_workload": object}).assign(
                b_workload=[None] + q["b_workload"].tolist()[1:])}


@pytest.mark.parametrize("variant", ["same", "unseen", "missing_column", "one_pair",
                                     "names_as_objects_with_none"])
def test_fast_path_equals_reference(fitted_ctx, variant):
    m, p = fitted_ctx
    q = _variants(p)[variant]
    X_ref, ref = _reference(m, q)
    X = m.predict_matrix(q)
    assert X.shape == X_ref.shape
    np.testing.assert_array_equal(np.isnan(X), np.isnan(X_ref))
    np.testing.assert_allclose(X, X_ref, rtol=0, atol=1e-9, equal_nan=True)
    pd.testing.assert_frame_equal(m.predict(q), ref, rtol=0, atol=1e-9)


def test_fast_path_equals_reference_when_the_mix_serves(tmp_path):
    data = Path(__file__).resolve().parent.parent / "data" / "h200"
    if not (data / "pairs.csv").is_file():
        pytest.skip("data/h200 not in this checkout")
    p = load_h200_pairs(data)
    m = InterferenceModel(**FAST).fit(p)
    assert "mech_speed" in m.feature_names_  # a blend that keeps the structure
    if m.blend_ != "mix":  # serve the mix anyway: its trees without the structure's speed
        d = directed(validate_pairs(p, require_targets=True))
        X, y, _ = m._train_matrix(d[d["y"].notna()].reset_index(drop=True))
        m.blend_ = "mix"
        m.plain_ = m._train(X.drop(columns="mech_speed"), y, {"objective": "regression"})
    q = p.drop(columns=["a_speed", "b_speed"]).head(40)
    _, ref = _reference(m, q)
    pd.testing.assert_frame_equal(m.predict(q), ref, rtol=0, atol=1e-9)
    back = InterferenceModel.load(m.save(tmp_path / "mix"))
    pd.testing.assert_frame_equal(back.predict(q), ref, rtol=0, atol=1e-9)


def test_fast_path_identity_only_equals_reference():
    p = make_pairs(n_workloads=10, n_pairs=200, seed=4, features=False)
    m = InterferenceModel(**FAST).fit(p)
    q = p.drop(columns=["a_speed", "b_speed"]).head(30).copy()
    q.loc[:3, "b_workload"] = "new"
    X_ref, ref = _reference(m, q)
    np.testing.assert_allclose(m.predict_matrix(q), X_ref, rtol=0, atol=1e-9, equal_nan=True)
    pd.testing.assert_frame_equal(m.predict(q), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("mutate,message", [
    (lambda q: q.assign(a_sm_active="high"), "non-numeric"),
    (lambda q: q.assign(sharing="nvlink"), "sharing"),
    (lambda q: q.iloc[:0], "empty"),
    (lambda q: q[["b_workload", "b_sm_active"]], "side 'a'"),
])
def test_fast_path_keeps_validation_errors(fitted_ctx, mutate, message):
    m, p = fitted_ctx
    with pytest.raises(ForesightError, match=message):
        m.predict(mutate(p.drop(columns=["a_speed", "b_speed"]).head(5)))


def test_fast_path_warns_on_unknown_columns_and_converts_strings(fitted_ctx):
    m, p = fitted_ctx
    q = p.drop(columns=["a_speed", "b_speed"]).head(8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = m.predict(q.assign(extra=1))
    assert any("extra" in str(x.message) for x in w)
    # numbers sent as strings (a CSV read as text) go through the full validator
    as_text = q.assign(a_sm_active=q["a_sm_active"].map(repr))
    pd.testing.assert_frame_equal(m.predict(as_text), out, rtol=0, atol=1e-12)
