"""The structured (sharing-mechanism) part of the interference model, on hand-made cases and on
the committed H200 measurement (data/h200)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.h200 import load_h200_pairs
from forecaster.interference.mechanism import (SharingMechanism, _ready, _slice_speed, mps_speed,
                                                timeslice_speed)
from forecaster.interference.model import InterferenceModel

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"


def test_timeslice_two_always_busy_jobs_get_about_half_each():
    one = np.ones(1)
    s = timeslice_speed(one, 0.02 * one, one, 0.02 * one, slice_ms=2.0, switch_ms=0.0)
    assert s[0] == pytest.approx(0.5, abs=0.02)


def test_timeslice_idle_partner_costs_nothing_and_short_steps_wait_a_slice():
    idle = timeslice_speed(np.array([0.9]), np.array([0.01]), np.array([0.0]), np.array([0.01]),
                           slice_ms=2.0, switch_ms=0.2)
    assert idle[0] == pytest.approx(1.0)
    # a 0.2 ms step beside a GEMM of long kernels waits out the GEMM's whole slice every step
    short = timeslice_speed(np.array([0.8]), np.array([2e-4]), np.array([1.0]),
                            np.array([6e-3]), slice_ms=2.0, switch_ms=0.2)
    gemm = timeslice_speed(np.array([1.0]), np.array([6e-3]), np.array([0.8]),
                           np.array([2e-4]), slice_ms=2.0, switch_ms=0.2)
    assert short[0] < 0.15 and gemm[0] > 0.8  # asymmetric: speed_a != speed_b


@pytest.mark.parametrize("ready,occupancy", [(False, None), (True, None), (True, 0.95)])
def test_timeslice_hand_made_cases_hold_in_every_form(ready, occupancy):
    one = np.ones(1)
    both = timeslice_speed(one, 0.02 * one, one, 0.02 * one, 2.0, 0.0, ready=ready,
                           occupancy=occupancy)
    assert both[0] == pytest.approx(0.5, abs=0.03)
    idle = timeslice_speed(np.array([0.9]), np.array([0.01]), np.array([0.0]),
                           np.array([0.01]), 2.0, 0.2, ready=ready, occupancy=occupancy)
    assert idle[0] == pytest.approx(1.0)


def test_conserve_form_keeps_the_split_and_sets_the_pair_total():
    # a long-step job beside a short-step busy one (lstm_infer beside sort_keys on the H200:
    # 0.90 / 0.41, together the GPU busy 100 % of the time)
    a, b = (np.array([0.66]), np.array([0.0042])), (np.array([0.985]), np.array([0.0016]))
    ra = timeslice_speed(*a, *b, 2.0, 0.3, ready=True)[0]
    rb = timeslice_speed(*b, *a, 2.0, 0.3, ready=True)[0]
    ca = timeslice_speed(*a, *b, 2.0, 0.3, ready=True, occupancy=0.95)[0]
    cb = timeslice_speed(*b, *a, 2.0, 0.3, ready=True, occupancy=0.95)[0]
    assert 0.66 * ca + 0.985 * cb == pytest.approx(0.95)  # the pair's total, as fitted
    assert ca / cb == pytest.approx(ra / rb)  # the slices' split
    assert 0.66 * ra + 0.985 * rb < 0.95  # what the slices alone leave idle


def test_conserve_fit_recovers_its_parameters():
    rng = np.random.default_rng(1)
    n = 80
    d = pd.DataFrame({"sharing": ["timeslice"] * n,
                      "self_gpu_util": rng.uniform(20, 100, n),
                      "partner_gpu_util": rng.uniform(20, 100, n),
                      "self_step_s": rng.uniform(1e-4, 3e-2, n),
                      "partner_step_s": rng.uniform(1e-4, 3e-2, n)})
    y = timeslice_speed(d["self_gpu_util"].to_numpy() / 100, d["self_step_s"].to_numpy(),
                        d["partner_gpu_util"].to_numpy() / 100, d["partner_step_s"].to_numpy(),
                        3.0, 0.1, ready=True, occupancy=0.9)
    m = SharingMechanism(ts_form="conserve").fit(d, y)
    assert np.abs(m.predict(d) - y).mean() < 0.01
    assert m.params_["timeslice"][2] == pytest.approx(0.9, abs=0.03)
    back = SharingMechanism.from_json(m.to_json())
    assert back.ts_form == "conserve" and np.allclose(back.predict(d), m.predict(d))


def test_ready_form_charges_a_launch_bound_partner_more_than_its_util_says():
    # a 27 %-busy partner of 5 ms steps (tiny kernels between CPU launches, the H200's
    # small_kernels): held back by the job's slices, it has work queued far more than 27 % of
    # the time, and takes the slice each time (on the H200 its partners ran at 0.72-0.78)
    job = (np.array([1.0]), np.array([0.02]))
    launch = (np.array([0.27]), np.array([0.005]))
    busy = timeslice_speed(*job, *launch, 2.0, 0.15)[0]
    ready = timeslice_speed(*job, *launch, 2.0, 0.15, ready=True)[0]
    assert ready < busy - 0.03
    # the fixed point: each side's speed is the form's at the other side's readiness
    back = timeslice_speed(*launch, *job, 2.0, 0.15, ready=True)[0]
    assert 0.0 < back < 1.0
    assert ready == pytest.approx(
        _slice_speed(*job, *launch, _ready(launch[0], np.array([back])), 2.0, 0.15)[0], abs=1e-6)
    assert back == pytest.approx(
        _slice_speed(*launch, *job, _ready(job[0], np.array([ready])), 2.0, 0.15)[0], abs=1e-6)


def test_mps_hog_keeps_its_speed_and_starves_a_light_partner():
    p = np.array([-0.5, 1.5, 1.5, 0.5, 0.0])
    hog, light = (np.array([1.0]), np.array([0.99]), np.array([0.2])), \
        (np.array([0.6]), np.array([0.35]), np.array([0.3]))
    assert mps_speed(*light, *hog, p)[0] < 0.3 < 0.9 < mps_speed(*hog, *light, p)[0]
    idle = (np.array([0.0]), np.array([0.0]), np.array([0.0]))
    assert mps_speed(*light, *idle, p)[0] > mps_speed(*light, *hog, p)[0]


def test_mechanism_fit_recovers_the_time_slice_and_skips_modes_it_cannot_model():
    rng = np.random.default_rng(0)
    n = 60
    d = pd.DataFrame({"sharing": ["timeslice"] * n + ["mig"] * 4,
                      "self_gpu_util": rng.uniform(20, 100, n + 4),
                      "partner_gpu_util": rng.uniform(20, 100, n + 4),
                      "self_step_s": rng.uniform(1e-4, 3e-2, n + 4),
                      "partner_step_s": rng.uniform(1e-4, 3e-2, n + 4)})
    y = timeslice_speed(d["self_gpu_util"] / 100, d["self_step_s"], d["partner_gpu_util"] / 100,
                        d["partner_step_s"], slice_ms=3.0, switch_ms=0.1).to_numpy()
    m = SharingMechanism().fit(d, y)
    assert m.modes_ == ["timeslice"]
    assert abs(m.params_["timeslice"][0]) == pytest.approx(3.0, rel=0.1)
    pred = m.predict(d)
    assert np.isnan(pred[-4:]).all() and np.abs(pred[:n] - y[:n]).mean() < 0.01


@pytest.fixture(scope="module")
def h200() -> pd.DataFrame:
    return load_h200_pairs(H200)


def test_h200_pairs_follow_the_contract(h200):
    assert len(h200) == 56 and set(h200["sharing"]) == {"timeslice", "mps"}
    assert {"a_step_s", "b_sm_active", "a_gpu_util"} <= set(h200.columns)


def test_model_beats_the_util_rule_on_a_held_out_h200_workload(h200, tmp_path):
    w = "embedding_gather"
    test = (h200["a_workload"] == w) | (h200["b_workload"] == w)
    m = InterferenceModel(n_estimators=40).fit(h200[~test])
    held = h200[test].reset_index(drop=True)
    pred = m.predict(held)
    y = np.r_[held["a_speed"], held["b_speed"]]
    model = np.r_[pred["a_speed_pred"], pred["b_speed_pred"]]
    util = np.r_[held["a_gpu_util"] + held["b_gpu_util"], held["b_gpu_util"] + held["a_gpu_util"]]
    rule = np.minimum(1.0, 100.0 / util)
    assert np.abs(model - y).mean() < 0.6 * np.abs(rule - y).mean()
    assert (np.r_[pred["a_speed_p10"], pred["b_speed_p10"]] <= model + 1e-12).all()
    # round trip keeps the mechanism, and a known workload asked by name gets its solo features
    m2 = InterferenceModel.load(m.save(tmp_path))
    pd.testing.assert_frame_equal(m2.predict(held), pred)
    known = h200[~test].reset_index(drop=True)
    by_name = m2.predict(known[["a_workload", "b_workload", "sharing"]])
    assert np.allclose(by_name["a_speed_pred"], m2.predict(known)["a_speed_pred"], atol=0.02)


def test_mps_priority_form_idle_partner_costs_nothing_and_priority_decides_the_split():
    from forecaster.interference.mechanism import mps_priority_speed, mps_priority_x
    one = np.ones(1)
    hog = mps_priority_x(one, 0.97 * one, 6e-3 * one, 0.9 * one, 0.2 * one, 0.15 * one)
    light = mps_priority_x(0.3 * one, 0.0 * one, 4e-3 * one, 0 * one, 0 * one, 0 * one)
    w = np.array([0.2, 1.5, 0.4, 0.6, -0.5, -0.6, -5.0, 3.4])  # ~ what the H200 pairs give
    assert mps_priority_speed(light, hog, np.zeros(1), w)[0] == pytest.approx(1.0)
    assert mps_priority_speed(hog, hog, one, w)[0] == pytest.approx(1 / (1 + np.exp(-0.2)))
    starved, kept = mps_priority_speed(light, hog, one, w)[0], mps_priority_speed(hog, light, 0.3 * one, w)[0]
    assert starved < 0.3 and kept > 0.9  # asymmetric: the launch-bound job waits behind the hog


@pytest.mark.parametrize("form", ["priority", "conserve"])
def test_mps_form_fit_on_some_workloads_predicts_eight_others_better_than_the_rule(form):
    data = H200.parent
    train = pd.concat([load_h200_pairs(data / d) for d in ("h200", "h200m")], ignore_index=True)
    test = load_h200_pairs(data / "h200b")  # attention, softmax, fft, resnet18 never in train
    from forecaster.interference.features import directed
    dtr, dte = directed(train), directed(test)
    dtr, dte = dtr[dtr["y"].notna() & (dtr["sharing"] == "mps")], dte[dte["sharing"] == "mps"]
    m = SharingMechanism(mps_form=form).fit(dtr, dtr["y"].to_numpy())
    y = dte["y"].to_numpy()
    rule = np.minimum(1.0, 100.0 / (dte["self_gpu_util"] + dte["partner_gpu_util"])).to_numpy()
    assert np.mean(np.abs(m.predict(dte) - y)) < 0.75 * np.mean(np.abs(rule - y))


def test_mps_conserve_form_keeps_the_split_and_sets_the_pairs_total():
    from forecaster.interference.mechanism import (mps_conserve_speed, mps_priority_speed,
                                                   mps_priority_x)
    one = np.ones(1)
    hog = mps_priority_x(one, 0.97 * one, 6e-3 * one, 0.9 * one, 0.2 * one, 0.15 * one)
    light = mps_priority_x(0.3 * one, 0.0 * one, 4e-3 * one, 0 * one, 0 * one, 0 * one)
    w = np.array([0.2, 1.5, 0.4, 0.6, -0.5, -0.6, -5.0, 3.4])
    p = np.r_[w, 1.06]
    # an idle partner still costs nothing; two always-busy twins share the total
    assert mps_conserve_speed(light, hog, 0.3 * one, np.zeros(1), p)[0] == pytest.approx(1.0)
    twin = mps_conserve_speed(hog, hog, one, one, np.r_[0.0, w[1:], 1.06])[0]
    assert twin == pytest.approx(0.53)
    # the pair's util-weighted progress is the total; the ratio is the priority form's
    a = mps_conserve_speed(light, hog, 0.3 * one, one, p)[0]
    b = mps_conserve_speed(hog, light, one, 0.3 * one, p)[0]
    pa, pb = mps_priority_speed(light, hog, one, w)[0], mps_priority_speed(hog, light, 0.3 * one, w)[0]
    if b < 1.0:
        assert 0.3 * a + 1.0 * b == pytest.approx(1.06)
        assert a / b == pytest.approx(pa / pb)
    assert a < 0.3 and b > 0.9
    # two busy jobs both slowed (neither capped at 1): the total and the ratio hold exactly
    hog2 = mps_priority_x(0.95 * one, 0.9 * one, 4e-3 * one, 0.5 * one, 0.4 * one, 0.2 * one)
    a = mps_conserve_speed(hog2, hog, 0.95 * one, one, p)[0]
    b = mps_conserve_speed(hog, hog2, one, 0.95 * one, p)[0]
    assert b < 1.0 and 0.95 * a + 1.0 * b == pytest.approx(1.06)
    assert a / b == pytest.approx(mps_priority_speed(hog2, hog, one, w)[0]
                                  / mps_priority_speed(hog, hog2, 0.95 * one, w)[0])


def test_mps_conserve_form_fit_recovers_the_total_and_survives_json():
    rng = np.random.default_rng(3)
    n = 300
    d = pd.DataFrame({"sharing": "mps",
                      "self_gpu_util": rng.uniform(30, 100, n), "partner_gpu_util": rng.uniform(30, 100, n),
                      "self_sm_active": rng.uniform(0.1, 1, n), "partner_sm_active": rng.uniform(0.1, 1, n),
                      "self_step_s": rng.uniform(5e-4, 2e-2, n), "partner_step_s": rng.uniform(5e-4, 2e-2, n),
                      "self_tensor_active": rng.uniform(0, 1, n), "partner_tensor_active": rng.uniform(0, 1, n),
                      "self_dram_active": rng.uniform(0, 1, n), "partner_dram_active": rng.uniform(0, 1, n),
                      "self_sm_occupancy": rng.uniform(0, 1, n), "partner_sm_occupancy": rng.uniform(0, 1, n)})
    truth = SharingMechanism(mps_form="conserve")
    truth.params_ = {"mps": [0.0, 1.0, 0.3, 0.5, 0.0, 0.0, 0.2, 1.0, 0.92]}
    y = truth.predict(d)
    fit = SharingMechanism(mps_form="conserve").fit(d, y)
    assert fit.params_["mps"][-1] == pytest.approx(0.92, abs=0.03)
    assert np.abs(fit.predict(d) - y).mean() < 0.01
    back = SharingMechanism.from_json(fit.to_json())
    assert back.mps_form == "conserve"
    assert np.allclose(back.predict(d), fit.predict(d))


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_a_copy_engine_job_neither_slows_nor_is_slowed_by_kernels(mode):
    """~99 % GPU util with no SM activity is copy engines (h2d_copy, d2h_copy on the H200): time
    slices and MPS share the SMs, so the form gives both sides 1.0, as measured; a job of tiny
    kernels (some SM activity at low util) still contends."""
    m = SharingMechanism(mps_form="conserve", ts_form="conserve")
    m.params_ = {"timeslice": [2.0, 0.2, 0.95],
                 "mps": [0.0, 1.0, 0.3, 0.5, 0.0, 0.0, 0.2, 1.0, 1.05]}
    gemm = {"gpu_util": 99.0, "sm_active": 0.95, "step_s": 0.02, "tensor_active": 0.8,
            "dram_active": 0.2, "sm_occupancy": 0.3}
    copy = {"gpu_util": 99.5, "sm_active": 0.0, "step_s": 0.005, "tensor_active": 0.0,
            "dram_active": 0.011, "sm_occupancy": 0.0}
    tiny = dict(copy, gpu_util=28.0, sm_active=0.0003, step_s=2e-4)

    def speed(me: dict, partner: dict) -> float:
        row = {"sharing": mode, **{f"self_{k}": [v] for k, v in me.items()},
               **{f"partner_{k}": [v] for k, v in partner.items()}}
        return float(m.predict(pd.DataFrame(row))[0])

    assert speed(gemm, copy) == pytest.approx(1.0) and speed(copy, gemm) == pytest.approx(1.0)
    assert speed(tiny, gemm) < 0.9  # the short-step job still waits behind the GEMM
    no_sm = pd.DataFrame({"sharing": [mode], "self_gpu_util": [99.0], "partner_gpu_util": [99.5],
                          "self_step_s": [0.02], "partner_step_s": [0.005]})
    assert m.predict(no_sm)[0] < 0.9  # without SM activity in the telemetry: util decides


def test_the_legacy_forms_still_read_a_copy_job_as_busy():
    """The simulator's committed seed ("busy" / "hogging") predicts as it was fit."""
    m = SharingMechanism(mps_form="hogging", ts_form="busy")
    m.params_ = {"timeslice": [2.0, 0.2], "mps": [2.0, 1.0, 1.0, 0.0, 0.0]}
    row = pd.DataFrame({"sharing": ["timeslice", "mps"], "self_gpu_util": 99.0,
                        "partner_gpu_util": 99.5, "self_sm_active": 0.95,
                        "partner_sm_active": 0.0, "self_step_s": 0.02, "partner_step_s": 0.005})
    assert (m.predict(row) < 0.9).all()
