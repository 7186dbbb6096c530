"""The admission bound (forecaster/interference/admission.py): calibrated to the share of unsafe
placements the co-location gate may let through, not to a fixed quantile."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from artifacts.adapters import InterferenceAdapter
from features.h200 import load_h200_pairs
from forecaster.interference.admission import admission_q, q_at
from forecaster.interference.artifact import _digest
from forecaster.interference.features import directed
from forecaster.interference.model import InterferenceModel
from ground.errors import ForesightError

DATA = Path(__file__).resolve().parent.parent / "data"


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.uniform(0.2, 1.0, n)
    scale = rng.uniform(0.02, 0.15, n)
    point = np.clip(y + rng.normal(0.0, scale), 0.01, 1.0)
    return point, y, scale


def _admitted_unsafe(point, y, scale, q, m) -> tuple[int, int]:
    unsafe = y < m
    return int((point[unsafe] - q * scale[unsafe] >= m).sum()), int(unsafe.sum())


FLOORS = (0.75, 0.8, 0.85)


def test_q_holds_the_corrected_risk_over_its_floors_and_is_the_smallest_that_does():
    point, y, scale = _rows(3000, 0)
    q = admission_q(point, y, scale, 0.05, FLOORS)
    assert q is not None and q > 0
    k = n = k_less = 0
    for m in FLOORS:
        a, b = _admitted_unsafe(point, y, scale, q, m)
        k, n, k_less = k + a, n + b, k_less + _admitted_unsafe(point, y, scale, q - 1e-6, m)[0]
    assert (k + 1) / (n + 1) <= 0.05 < (k_less + 1) / (n + 1)  # any smaller q breaks it
    # a lower risk asks for a wider margin
    assert admission_q(point, y, scale, 0.01, FLOORS) > q


def test_q_between_floors_is_the_larger_of_its_neighbours():
    table = {"0.6": 1.5, "0.7": 0.4, "0.8": 0.9}
    got = q_at(table, np.array([0.5, 0.6, 0.65, 0.7, 0.75, 0.95]))
    assert got.tolist() == [1.5, 1.5, 1.5, 0.4, 0.9, 0.9]
    assert np.isnan(q_at({}, np.array([0.8]))).all()


def test_fresh_rows_stay_near_the_risk_and_too_few_unsafe_rows_give_none():
    point, y, scale = _rows(3000, 1)
    q = admission_q(point, y, scale, 0.05, FLOORS)
    p2, y2, s2 = _rows(20000, 2)
    k, n = _admitted_unsafe(p2, y2, s2, q, 0.8)
    assert k / n < 0.08
    safe = y2 >= 0.8
    refused = np.mean(p2[safe] - q * s2[safe] < 0.8)
    p10_refused = np.mean(p2[safe] - 1.2816 * s2[safe] < 0.8)  # a Gaussian p10 margin
    assert refused < p10_refused
    few = y > 0.95  # no floor has 30 unsafe rows
    assert admission_q(point[few], y[few] + 0.05, scale[few], 0.05, FLOORS) is None


@pytest.fixture(scope="module")
def fitted() -> tuple[InterferenceModel, pd.DataFrame]:
    if not (DATA / "h200c" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    train = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200m", "h200b")],
                      ignore_index=True)
    return InterferenceModel(n_estimators=120).fit(train), load_h200_pairs(DATA / "h200c")


def test_admission_bound_refuses_fewer_safe_h200_placements_than_the_p10(fitted, tmp_path):
    model, test = fitted
    assert set(model.admit_q_) == {"mps", "timeslice"} and "0.8" in model.admit_q_["mps"]
    pred = model.predict(test, admit=True)
    d = directed(test)
    y = d["y"].to_numpy()
    point = np.r_[pred["a_speed_pred"], pred["b_speed_pred"]]
    p10 = np.r_[pred["a_speed_p10"], pred["b_speed_p10"]]
    unit = np.r_[pred["a_speed_unit"], pred["b_speed_unit"]]
    mode = d["sharing"].to_numpy()
    admit = p10.copy()
    for m in ("mps", "timeslice"):
        admit[mode == m] = model.admit_bound(m, point[mode == m], unit[mode == m],
                                             p10[mode == m], 0.8)
    assert (admit <= point + 1e-12).all()
    safe, unsafe = y >= 0.8, y < 0.8
    assert np.mean(admit[safe] < 0.8) < np.mean(p10[safe] < 0.8)
    assert np.mean(admit[unsafe] >= 0.8) <= 0.10  # eight workloads never seen in training
    # the published columns are unchanged without `admit`
    assert list(model.predict(test).columns) == ["a_speed_pred", "b_speed_pred",
                                                 "a_speed_p10", "b_speed_p10"]
    # saved and loaded, the gate's adapter answers with the admission bound
    back = InterferenceModel.load(model.save(tmp_path / "m"))
    assert back.admit_q_ == model.admit_q_
    asked = pd.DataFrame({"a_workload": ["gemm_bf16"], "b_workload": ["decode_gemv"],
                          "sharing": ["mps"]})  # known workloads, asked by name
    want = back.predict(asked, admit=True)
    adapter = InterferenceAdapter(back)
    assert adapter.admits
    (pa,), (pb,) = adapter.speeds("gemm_bf16", ["decode_gemv"], "mps")
    (ua,), (ub,) = adapter.units("gemm_bf16", ["decode_gemv"], "mps")
    (la,), (lb,) = adapter.bounds("gemm_bf16", ["decode_gemv"], "mps")
    got = adapter.admit_bound("mps", np.array([pa]), np.array([ua]), np.array([la]), 0.8)[0]
    assert got == pytest.approx(back.admit_bound("mps", want["a_speed_pred"].to_numpy(),
                                                 want["a_speed_unit"].to_numpy(),
                                                 want["a_speed_p10"].to_numpy(), 0.8)[0])
    # the default constant margin: the point less the mode's q at that floor
    assert back.admit_margin == "constant" and ua == 1.0
    assert got == pytest.approx(min(pa, pa - back.admit_q_["mps"]["0.8"]))


def test_scaled_margin_and_artifacts_saved_before_the_choice_hold_to_the_scale(tmp_path):
    if not (DATA / "h200c" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    train = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200b")], ignore_index=True)
    test = load_h200_pairs(DATA / "h200c")
    scaled = InterferenceModel(n_estimators=60, admit_margin="scaled").fit(train)
    const = InterferenceModel(n_estimators=60).fit(train)
    ps, pc = scaled.predict(test, admit=True), const.predict(test, admit=True)
    # the same point and p10; only the unit the admission q multiplies differs
    assert np.allclose(ps["a_speed_pred"], pc["a_speed_pred"])
    assert np.allclose(ps["a_speed_p10"], pc["a_speed_p10"])
    us, uc = ps["a_speed_unit"].to_numpy(), pc["a_speed_unit"].to_numpy()
    on = np.isfinite(uc)  # inf: a side unlike every trained workload (familiar.py)
    assert on.any() and (uc[on] == 1.0).all() and np.unique(us[on]).size > 10
    assert (np.isinf(us) == np.isinf(uc)).all()
    # an artifact written before `admit_margin` existed had its q calibrated in scale units
    path = scaled.save(tmp_path / "m")
    body = json.loads((path / "manifest.json").read_text())
    del body["params"]["admit_margin"]
    body["checksum"] = _digest({k: v for k, v in body.items() if k != "checksum"})
    (path / "manifest.json").write_text(json.dumps(body))
    old = InterferenceModel.load(path)
    assert old.admit_margin == "scaled"
    assert np.allclose(old.predict(test, admit=True)["a_speed_unit"], us, equal_nan=True)
    with pytest.raises(ForesightError, match="admit_margin"):
        InterferenceModel(admit_margin="wide").fit(train)
    with pytest.raises(ForesightError, match="ts_form"):
        InterferenceModel(ts_form="fair").fit(train)
    with pytest.raises(ForesightError, match="mps_form must be one of 'conserve'"):
        InterferenceModel(mps_form="fair").fit(train)


def test_admit_risk_out_of_range_is_one_clear_error():
    pairs = pd.DataFrame({"a_workload": ["x"], "b_workload": ["y"], "speed_a": [0.5],
                          "speed_b": [0.5]})
    with pytest.raises(ForesightError, match="admit_risk"):
        InterferenceModel(admit_risk=0.7).fit(pairs)
