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


def test_the_gate_on_triples_composes_the_held_out_bounds():
    from interference_triples import gate, gate_table
    tri = pd.DataFrame({"mode": ["mps"], "a": ["x"], "b": ["y"], "c": ["z"],
                        "speed_a": [0.6], "speed_b": [0.95], "speed_c": [0.9]})
    rows = []
    for me in "xyz":  # the fold of the pod's own workload: it never saw `me`
        for other in "xyz".replace(me, ""):
            rows.append({"fold": me, "sharing": "mps", "self": me, "partner": other,
                         "model": 0.95, "p10": 0.7, "admit": 0.9 if me != "x" else 0.85})
    solo = pd.DataFrame({"mode": "mps", "workload": list("xyz"), "util_gpu": [30.0, 20, 10]})
    g = gate(tri, pd.DataFrame(rows), solo).set_index("pod")
    # two partners, bound 0.85 each: 1 / (1 + 2 x (1 / 0.85 - 1)) = 0.739 < 0.8: refused
    assert g.loc["x", "model (admission bound)"] == pytest.approx(0.739, abs=1e-3)
    assert g.loc["y", "model (admission bound)"] == pytest.approx(1 / (1 + 2 / 9), abs=1e-9)
    assert g.loc["x", "util_rule"] == pytest.approx(1.0)  # 60 % summed: the rule sees no harm
    text = "\n".join(gate_table(g.reset_index()))
    # x ran at 0.6 (unsafe) and was refused; y and z (safe) were admitted at 0.818
    assert "| both | model (admission bound) | 3 | " in text and "| 1 | 0 | 2 | 0 |" in text
