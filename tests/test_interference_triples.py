"""bench/interference_triples.py's scoring: each pod of a measured triple against rules that
compose its two measured pair speeds."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from interference_triples import members, pair_speeds, score  # noqa: E402


def test_a_triple_that_follows_the_gates_rule_scores_zero_and_pairwise_min_is_optimistic():
    pairs = pd.DataFrame({"mode": ["timeslice"] * 3, "a": ["x", "x", "y"],
                          "b": ["y", "z", "z"], "speed_a": [0.5, 0.8, 0.9],
                          "speed_b": [0.5, 0.9, 0.8]})
    add = lambda s1, s2: 1 / (1 + (1 / s1 - 1) + (1 / s2 - 1))  # noqa: E731
    tri = pd.DataFrame({"mode": ["timeslice"], "a": ["x"], "b": ["y"], "c": ["z"],
                        "speed_a": [add(0.5, 0.8)], "speed_b": [add(0.5, 0.9)],
                        "speed_c": [add(0.9, 0.8)]})
    m = members(tri, pair_speeds(pairs))
    assert list(m["pod"]) == ["x", "y", "z"]
    assert list(m["s1"]) == [0.5, 0.5, 0.9] and list(m["s2"]) == [0.8, 0.9, 0.8]
    t = score(m).set_index(["mode", "rule"])
    assert t.loc[("timeslice", "delays add"), "MAE"] == pytest.approx(0.0, abs=1e-12)
    assert t.loc[("timeslice", "pairwise min"), "bias"] == pytest.approx(0.049, abs=1e-3)
    # z ran at 1 / (1 + 0.11 + 0.25) = 0.735 < 0.8: pairwise min (0.8) calls it safe
    assert t.loc[("timeslice", "pairwise min"), "called_safe"] == 1
    assert t.loc[("timeslice", "delays add"), "called_safe"] == 0
    # a pod whose pair was not measured is left out, not guessed: without y-z only x stays
    assert list(members(tri, pair_speeds(pairs.iloc[:2]))["pod"]) == ["x"]
