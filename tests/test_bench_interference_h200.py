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
from interference_h200 import bars, safety, scores, starved  # noqa: E402


def test_a_zero_step_window_is_bounded_by_the_solo_rate(tmp_path):
    pd.DataFrame({"mode": ["timeslice", "timeslice"], "a": ["slow", "fast"],
                  "b": ["gemm", "gemm"], "speed_a": [0.0, 0.0],
                  "speed_b": [0.9, 0.5]}).to_csv(tmp_path / "pairs.csv", index=False)
    pd.DataFrame({"mode": "timeslice", "workload": ["slow", "fast", "gemm"],
                  "rate": [1.0, 0.2, 50.0]}).to_csv(tmp_path / "solo.csv", index=False)
    (tmp_path / "env.json").write_text(json.dumps({"measure_s": 3.0}))
    got = starved(str(tmp_path))
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
