"""The support check of the co-location gate (forecaster/interference/familiar.py): a side unlike
every workload the model was fitted on is not held to a calibrated bound."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from artifacts.adapters import InterferenceAdapter
from features.h200 import load_h200_pairs
from forecaster.interference.admission import bound_at
from forecaster.interference.familiar import MIN_WORKLOADS, Familiarity
from forecaster.interference.model import InterferenceModel

DATA = Path(__file__).resolve().parent.parent / "data"


def _sides(rows: list[tuple[str, float, float, float]]) -> tuple[pd.Series, pd.DataFrame]:
    names = pd.Series([r[0] for r in rows])
    return names, pd.DataFrame([r[1:] for r in rows], columns=["gpu_util", "sm_active",
                                                                "step_s"])


def test_a_workload_past_the_trained_workloads_spacing_is_unfamiliar_a_near_one_is_not():
    # five workloads on a line of util 20..60 and SM 0.2..0.6: neighbours 10 / 0.1 apart
    names, sides = _sides([(f"w{i}", 20.0 + 10 * i, 0.2 + 0.1 * i, 0.01) for i in range(5)]
                          * 2)  # each seen twice: one vector per name
    fam = Familiarity().fit(names, sides)
    assert len(fam.vectors_) == 5
    _, asked = _sides([("near", 45.0, 0.45, 0.01), ("far", 99.0, 0.99, 0.01),
                       ("w2", 40.0, 0.4, 0.01)])
    d = fam.distance(asked)
    assert d[2] == pytest.approx(0.0) and 0 < d[0] < fam.threshold_ < d[1]
    assert fam.unfamiliar(asked).tolist() == [False, True, False]
    # the step time counts in logs: 100x slower steps with the same util is another workload
    _, slow = _sides([("slow", 40.0, 0.4, 1.0)])
    assert fam.unfamiliar(slow).tolist() == [True]
    # a side with none of the fitted fields (a key never seen run) has nothing calibrated
    assert fam.unfamiliar(pd.DataFrame({"power_w": [900.0]})).tolist() == [True]
    assert np.isnan(fam.distance(pd.DataFrame({"power_w": [900.0]}))).all()
    back = Familiarity.from_json(fam.to_json())
    assert np.allclose(back.distance(asked), d)


def test_too_few_workloads_make_no_support_and_every_side_familiar():
    names, sides = _sides([(f"w{i}", 10.0 * i, 0.1 * i, 0.01) for i in range(MIN_WORKLOADS - 1)])
    fam = Familiarity().fit(names, sides)
    assert fam.threshold_ is None
    assert not fam.unfamiliar(_sides([("x", 100.0, 1.0, 9.0)])[1]).any()


def test_an_infinite_unit_refuses_every_floor_even_where_q_is_zero():
    table = {"0.8": 0.0, "0.9": 0.0}
    b = bound_at(table, np.array([0.95, 0.95]), np.array([1.0, np.inf]), np.array([0.9, 0.9]),
                 0.8)
    assert b.tolist() == [0.95, 0.0]
    # without a table the p10 serves a familiar side, an unfamiliar one is still refused
    b = bound_at({}, np.array([0.95, 0.95]), np.array([np.nan, np.inf]), np.array([0.9, 0.9]),
                 0.8)
    assert b.tolist() == [0.9, 0.0]


def test_the_gate_refuses_a_pod_unlike_any_trained_workload_and_keeps_its_speeds(tmp_path):
    if not (DATA / "h200c" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    train = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200m", "h200b")],
                      ignore_index=True)
    model = InterferenceModel(n_estimators=60).fit(train)
    pair = train[(train["sharing"] == "mps")].iloc[[0]].reset_index(drop=True)
    odd = pair.copy()  # side a: a host-bound loop no trained workload resembles
    odd[["a_gpu_util", "a_sm_active", "a_sm_occupancy", "a_power_w", "a_step_s"]] = \
        [3.0, 0.01, 0.001, 95.0, 40.0]
    got = model.predict(pd.concat([pair, odd], ignore_index=True), admit=True)
    assert np.isfinite(got["a_speed_unit"].iloc[0]) and np.isinf(got["a_speed_unit"].iloc[1])
    assert np.isinf(got["b_speed_unit"].iloc[1])  # its partner's floor is not held either
    bound = model.admit_bound("mps", got["b_speed_pred"].to_numpy(),
                              got["b_speed_unit"].to_numpy(), got["b_speed_p10"].to_numpy(),
                              0.5)
    assert bound[0] > 0 and bound[1] == 0.0
    # the published speeds are answered as before
    plain = model.predict(odd)
    assert plain["a_speed_pred"].iloc[0] == pytest.approx(got["a_speed_pred"].iloc[1])
    # saved and loaded: the same support; known workloads asked by name stay familiar
    back = InterferenceModel.load(model.save(tmp_path / "m"))
    assert np.isinf(back.predict(odd, admit=True)["a_speed_unit"].iloc[0])
    (ua,), _ = InterferenceAdapter(back).units("gemm_bf16", ["decode_gemv"], "mps")
    assert ua == 1.0


def test_a_workload_seen_only_alone_is_asked_by_name_with_its_own_fingerprint(tmp_path):
    if not (DATA / "h200c" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    pairs = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200m", "h200b")],
                      ignore_index=True)
    new = "gemm_bf16"  # held out of every pair: it has only run alone
    train = pairs[(pairs["a_workload"] != new) & (pairs["b_workload"] != new)]
    mps = pairs[(pairs["a_workload"] == new) & (pairs["sharing"] == "mps")].iloc[0]
    feats = [c[2:] for c in pairs.columns if c.startswith("a_") and c[2:] not in
             ("workload", "speed") and pd.notna(mps[c])]
    solo = pd.DataFrame([{"workload": new, **{f: mps[f"a_{f}"] for f in feats}}])
    blind = InterferenceModel(n_estimators=60).fit(train)
    seen = InterferenceModel(n_estimators=60).fit(train, solo=solo)
    asked = pd.DataFrame({"a_workload": [new], "b_workload": [mps["b_workload"]],
                          "sharing": ["mps"]})
    given = asked.assign(**{f"a_{f}": [mps[f"a_{f}"]] for f in feats})
    # by name, the model that learned the solo row answers as if given the fingerprint
    assert seen.predict(asked).iloc[0].tolist() == pytest.approx(
        seen.predict(given).iloc[0].tolist())
    assert blind.predict(asked).iloc[0].tolist() != pytest.approx(
        blind.predict(given).iloc[0].tolist())
    # a workload of the pairs keeps its pairs' values; the row is saved with the model
    other = pd.DataFrame([{"workload": "decode_gemv", "gpu_util": 1.0}])
    kept = InterferenceModel(n_estimators=20).fit(train, solo=other)
    assert kept.solo_["decode_gemv\x1f"]["gpu_util"] > 1.0
    back = InterferenceModel.load(seen.save(tmp_path / "m"))
    assert back.predict(asked).iloc[0].tolist() == pytest.approx(
        seen.predict(asked).iloc[0].tolist())


def test_an_artifact_saved_before_the_support_check_holds_every_side_to_its_bound(tmp_path):
    import json

    from forecaster.interference.artifact import _digest

    if not (DATA / "h200c" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    train = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200b")], ignore_index=True)
    path = InterferenceModel(n_estimators=20).fit(train).save(tmp_path / "m")
    body = json.loads((path / "manifest.json").read_text())
    del body["familiar"]
    body["checksum"] = _digest({k: v for k, v in body.items() if k != "checksum"})
    (path / "manifest.json").write_text(json.dumps(body))
    old = InterferenceModel.load(path)
    assert old.familiar_ is None
    asked = pd.DataFrame({"a_workload": ["never-seen"], "b_workload": ["gemm_bf16"],
                          "sharing": ["mps"]})
    assert not np.isinf(old.predict(asked, admit=True)["a_speed_unit"]).any()  # NaN: the p10
    fresh = InterferenceModel.load(InterferenceModel(n_estimators=20).fit(train).save(
        tmp_path / "n"))
    assert np.isinf(fresh.predict(asked, admit=True)["a_speed_unit"]).all()
