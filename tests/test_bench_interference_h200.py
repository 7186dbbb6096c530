"""bench/interference_h200.py: a window in which a pod completed no step is an unsafe placement
in the safety lines (when its solo rate bounds its speed under the floor), not a missing row."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from features.h200 import zero_step_bounds  # noqa: E402
from interference_h200 import bars, safety, scores, without_prof  # noqa: E402


def test_a_zero_step_window_is_bounded_by_the_solo_rate(tmp_path):
    pd.DataFrame({"mode": ["timeslice", "timeslice"], "a": ["slow", "fast"],
                  "b": ["gemm", "gemm"], "speed_a": [0.0, 0.0],
                  "speed_b": [0.9, 0.5]}).to_csv(tmp_path / "pairs.csv", index=False)
    pd.DataFrame({"mode": "timeslice", "workload": ["slow", "fast", "gemm"],
                  "rate": [1.0, 0.2, 50.0]}).to_csv(tmp_path / "solo.csv", index=False)
    (tmp_path / "env.json").write_text(json.dumps({"measure_s": 3.0}))
    got = zero_step_bounds(str(tmp_path))
    # one step a second, none in 3 s: under 1/3; the other's bound (1 / 0.6) says nothing
    assert got == {("timeslice", "slow", "gemm"): pytest.approx(1 / 3),
                   ("timeslice", "fast", "gemm"): pytest.approx(1 / 0.6)}


def test_zero_step_rows_count_in_safety_and_not_in_the_mae():
    r = pd.DataFrame({"sharing": "timeslice", "y": [0.9, 0.5, 0.0, 0.0],
                      "y_upper": [np.nan, np.nan, 1 / 3, 1.5],
                      "model": [0.9, 0.5, 0.95, 0.95], "p10": [0.8, 0.4, 0.85, 0.85],
                      "admit": [0.85, 0.45, 0.9, 0.9], "train_mean": 0.6, "util_rule": 0.5})
    assert scores(r)["rows"] == 2 and scores(r)["mae_model"] == pytest.approx(0.0)
    s = safety(r).set_index(["mode", "policy"]).loc[("both", "model (admission bound)")]
    # unsafe: the measured 0.5 (refused) and the bounded window (admitted); the 1.5 bound
    # cannot say which side of the floor it was on
    assert s["unsafe"] == 2 and s["admitted_unsafe"] == pytest.approx(0.5)


def test_a_set_without_safe_placements_does_not_claim_the_refused_safe_bar():
    # every pair unsafe (a time-slicing-only set of busy jobs): nothing to refuse wrongly
    r = pd.DataFrame({"sharing": "timeslice", "y": [0.5, 0.4, 0.3, 0.6],
                      "model": [0.5, 0.45, 0.3, 0.55], "p10": [0.4, 0.3, 0.2, 0.45],
                      "admit": [0.45, 0.4, 0.25, 0.5], "train_mean": 0.6, "util_rule": 0.5})
    text = "\n".join(bars(r))
    line = next(x for x in text.splitlines() if x.startswith("| refused safe"))
    assert "n/a (no such placements)" in line and "yes" not in line
    assert "| admitted unsafe at min-speed 0.8 <= 5 % | 0.0 % | yes |" in text


def _measurement(tmp_path, speeds, rates, env=None):
    solo_cols = ["util_gpu", "util_mem", "power_w", "fb_used_mib", "gpm_sm_active",
                 "gpm_sm_occupancy", "gpm_tensor_active", "gpm_dram_active"]
    solo = pd.DataFrame({"mode": "timeslice", "workload": list(rates),
                         "rate": list(rates.values()), "step_median_s": 0.1,
                         **{c: 50.0 for c in solo_cols}})
    solo.to_csv(tmp_path / "solo.csv", index=False)
    pd.DataFrame({"mode": "timeslice", "a": [a for a, _ in speeds], "b": "gemm",
                  "speed_a": [v for _, v in speeds], "speed_b": 0.5}).to_csv(
        tmp_path / "pairs.csv", index=False)
    if env is not None:
        (tmp_path / "env.json").write_text(json.dumps(env))
    return tmp_path


def test_a_window_with_no_step_trains_at_half_what_it_allows(tmp_path):
    from features.h200 import load_h200_pairs
    d = _measurement(tmp_path, [("slow", 0.0), ("fast", 0.0), ("blank", np.nan), ("ok", 0.7)],
                     {"slow": 1.0, "fast": 0.2, "blank": 1.0, "ok": 5.0, "gemm": 50.0},
                     env={"measure_s": 4.0})
    got = load_h200_pairs(d).set_index("a_workload")["a_speed"]
    # one step a second, none in 4 s: under 0.25, read 0.125; 0.2 steps a second bounds
    # nothing (1.25); a blank is not a zero; a measured speed is kept
    assert got["slow"] == pytest.approx(0.125)
    assert np.isnan(got["fast"]) and np.isnan(got["blank"]) and got["ok"] == pytest.approx(0.7)
    dropped = load_h200_pairs(d, starved="drop").set_index("a_workload")["a_speed"]
    assert np.isnan(dropped["slow"])


def test_the_window_defaults_to_colocate_s_three_seconds(tmp_path):
    from features.h200 import zero_step_bounds
    d = _measurement(tmp_path, [("slow", 0.0)], {"slow": 1.0, "gemm": 50.0})
    assert zero_step_bounds(d) == {("timeslice", "slow", "gemm"): pytest.approx(1 / 3)}


def test_a_seen_pair_trains_and_is_not_scored():
    from features.h200 import load_h200_pairs
    from interference_h200 import lowo
    pairs = load_h200_pairs(Path(__file__).resolve().parent.parent / "data" / "h200")
    w, keys = "decode_gemv", ["sharing", "self", "partner"]
    r0, r1 = lowo(pairs, [w], {}, seen=0), lowo(pairs, [w], {}, seen=1)
    # seven pairs per mode, both directions: one pair per mode moves to training
    assert len(r0) == 28 and len(r1) == 24
    both = r0.merge(r1, on=keys, suffixes=("_0", "_1"))
    assert len(both) == 24
    gone = r0.merge(r1[keys], on=keys, how="left", indicator=True)
    assert (gone["_merge"] == "left_only").groupby(gone["sharing"]).sum().to_dict() == \
        {"mps": 2, "timeslice": 2}
    # the workload is no longer unseen: what the model says of its other pairs moves
    assert np.abs(both["model_0"] - both["model_1"]).max() > 1e-3


def test_the_repeat_gate_is_scored_against_the_other_run():
    from interference_repeat import gate, label_table
    y1 = np.array([0.5, 0.7, 0.9, 0.95, 0.82])
    y2 = np.array([0.85, 0.7, 0.9, 0.6, 0.79])
    r = pd.DataFrame({"y1": y1, "y2": y2, "admit": 0.0, "model": 1.0, "util_rule": 0.0})
    # run 1: unsafe rows 0, 1 (run 2 admits row 0); safe rows 2, 3, 4 (run 2 refuses 3 and 4)
    assert gate(y1, y2 >= 0.8, 0.8) == (0.5, pytest.approx(2 / 3), 2, 3)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in label_table(r)}
    assert "| 2 | 50.0 % | 3 | 66.7 % |" in rows[("the other run's measured speed", "run 1")]
    # run 2: unsafe rows 1, 3, 4, all but row 1 admitted by run 1; safe 0 (refused), 2
    assert "| 3 | 66.7 % | 2 | 50.0 % |" in rows[("the other run's measured speed", "run 2")]
    assert ("the other run's measured speed", "mean of both") not in rows
    # a gate that admits everything admits every unsafe placement, whatever the label
    assert "| 100.0 % |" in rows[("model point (no margin)", "mean of both")]


def test_no_prof_drops_the_profiling_fields_and_nothing_else():
    cols = [f"{s}_{f}" for s in "ab" for f in ("gpu_util", "power_w", "step_s", "sm_active",
                                                 "sm_occupancy", "tensor_active", "dram_active")]
    pairs = pd.DataFrame(np.ones((2, len(cols))), columns=cols).assign(sharing="mps")
    left = set(without_prof(pairs).columns)
    assert left == {"sharing"} | {f"{s}_{f}" for s in "ab" for f in ("gpu_util", "power_w", "step_s")}
    # a table already without them (an Ampere measurement) passes unchanged
    assert list(without_prof(without_prof(pairs)).columns) == list(without_prof(pairs).columns)


def test_the_unfamiliar_line_counts_refused_rows_by_fold_and_safety():
    from interference_h200 import unfamiliar_line

    r = pd.DataFrame({"fold": ["odd", "odd", "odd", "plain"], "self": ["odd", "x", "odd", "p"],
                      "y": [0.9, 0.3, 0.5, 0.9], "unfamiliar": [True, True, True, False]})
    line = unfamiliar_line(r)
    assert "3 of 4 held-out rows, 2 of them unsafe at 0.8 and 1 safe (folds odd)" in line
    assert unfamiliar_line(r.assign(unfamiliar=False)).endswith("none.")


def test_the_cold_start_solo_row_is_the_median_of_the_workloads_sides():
    from interference_cold_start import solo_row

    held = pd.DataFrame({"a_workload": ["w", "x", "w"], "b_workload": ["x", "w", "y"],
                         "a_gpu_util": [10.0, 99.0, 30.0], "b_gpu_util": [99.0, 20.0, 99.0],
                         "a_step_s": [0.1, 9.0, 0.3], "b_step_s": [9.0, 0.2, 9.0]})
    row = solo_row(held, "w").iloc[0]
    assert row["workload"] == "w" and row["gpu_util"] == pytest.approx(20.0)
    assert row["step_s"] == pytest.approx(0.2)
