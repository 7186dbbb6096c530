"""`drain-oracle-pred` (issue 28): the oracle's pre-drain with the predicted run times the
forecast policy plans with, so that drain-oracle's lead splits into timing and run times.
The replay itself is stubbed: this checks what each drain policy is fed."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

import simulator.timeline.run as run


def test_each_drain_policy_gets_its_pre_drain_and_its_run_times(monkeypatch):
    jobs = SimpleNamespace(duration=np.array([100.0, 200.0]), arrival=np.array([0.0, 10.0]),
                           big=np.array([False, False]))
    fed = {}
    monkeypatch.setattr(run, "case_jobs", lambda nodes, cfg: jobs)
    monkeypatch.setattr(run, "schedule_maker", lambda *a: (
        lambda mode, backfill: SimpleNamespace(mode=mode)))
    monkeypatch.setattr(run, "predicted_runtimes", lambda j, t0, t1: pd.DataFrame(
        {"p50": [1.0, 2.0], "p90": [3.0, 4.0]}))

    def fake_run(nodes, j, policy, t0, t1, reserved=None, runtime_s=None, **kw):
        fed[policy] = (reserved.mode, np.asarray(runtime_s))
        return SimpleNamespace(seconds=0.0)

    monkeypatch.setattr(run, "run_timeline", fake_run)
    monkeypatch.setattr(run, "summarize", lambda *a: {})
    monkeypatch.setattr(run, "backfill_summary", lambda *a: {})
    monkeypatch.setattr(run, "accuracy", lambda *a: {"mae_min": 0.0})
    rows, _ = run.run_case(None, run.CaseConfig(days=1.0, policies=(
        "drain-oracle", "drain-oracle-pred", "foresight-drain")))
    assert fed["drain-oracle"][0] == "oracle"
    np.testing.assert_array_equal(fed["drain-oracle"][1], jobs.duration)  # the truth
    assert fed["drain-oracle-pred"][0] == "oracle"
    np.testing.assert_array_equal(fed["drain-oracle-pred"][1], [3.0, 4.0])  # predicted p90
    assert fed["foresight-drain"][0] == "forecast"
    np.testing.assert_array_equal(fed["foresight-drain"][1], [3.0, 4.0])
    acc = {r.get("runtime_accuracy") is not None for r in rows[1:]}
    assert acc == {True} and "runtime_accuracy" not in rows[0]
