"""Issue 28 (sixth look): remaining run time of a running pod given its elapsed time
(`RuntimePredictor.predict_remaining`), on hand-made run histories."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.runtime.model import RuntimePredictor, merge_runs, remaining


def table(runs: dict[str, list[float]], queue: str = "q") -> pd.DataFrame:
    rows = [(w, d) for w, ds in runs.items() for d in ds]
    d = np.array([x[1] for x in rows], float)
    start = np.arange(len(rows), dtype=float) * 10.0
    return pd.DataFrame({"workload": [x[0] for x in rows], "queue": queue, "gpu_request": 1.0,
                         "priority": 0, "created": start, "started": start,
                         "finished": start + d})


def ask(workload: str, n: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"workload": [workload] * n, "queue": "q", "gpu_request": 1.0,
                         "priority": 0})


# bimodal: 10 short runs of ~100 s and 10 long ones of ~10,000 s
BIMODAL = {"bi": [90, 95, 100, 100, 100, 105, 110, 100, 98, 102,
                  9000, 9500, 10000, 10000, 10000, 10500, 11000, 10000, 9800, 10200]}


def test_past_the_short_mode_the_long_mode_remains():
    m = RuntimePredictor().fit(table(BIMODAL))
    p50_young = m.predict_remaining(ask("bi"), 0.0, 0.5)[0]
    p50_old = m.predict_remaining(ask("bi"), 200.0, 0.5)[0]
    # unconditional median sits between the modes; past 200 s only long runs remain
    assert p50_young < 9000
    assert p50_old == pytest.approx(10000 - 200, rel=1e-6)
    # vectorized over ages: each row its own
    got = m.predict_remaining(ask("bi", 3), np.array([0.0, 50.0, 200.0]), 0.5)
    assert got[0] == pytest.approx(p50_young) and got[2] == pytest.approx(p50_old)
    assert got[1] == pytest.approx(m.predict_remaining(ask("bi"), 50.0, 0.5)[0])
    # p90 past the short mode: the top of the long mode
    lo = sorted(BIMODAL["bi"])[10:]
    assert m.predict_remaining(ask("bi"), 200.0, 0.9)[0] == pytest.approx(
        np.exp(np.quantile(np.log(lo), 0.9)) - 200, rel=1e-6)


def test_elapsed_zero_is_the_unconditional_quantile():
    # too few pods for the interval calibration (scale 1): predict's p10/p50/p90 are raw
    m = RuntimePredictor().fit(table(BIMODAL))
    assert m.scale_ == 1.0
    p = m.predict(ask("bi"))
    for q, col in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        assert m.predict_remaining(ask("bi"), 0.0, q)[0] == pytest.approx(p[col][0], rel=1e-6)


def test_too_few_survivors_fall_back_along_the_hierarchy():
    runs = {"short": [10.0] * 6 + [20.0] * 4, "other": [500.0, 600, 700, 800, 900, 1000]}
    m = RuntimePredictor(min_count=5).fit(table(runs))
    # past 15 s only 4 runs of "short" remain (< min_count): the queue's history answers
    # (its runs longer than 15 s: the four 20 s and "other"'s six)
    got = m.predict_remaining(ask("short"), 15.0, 0.5)[0]
    rest = np.log([20.0] * 4 + runs["other"])
    assert got == pytest.approx(np.exp(np.quantile(rest, 0.5)) - 15.0, rel=1e-6)
    # an unseen workload: its queue's history at once
    assert m.predict_remaining(ask("new"), 0.0, 0.5)[0] == pytest.approx(
        np.exp(np.quantile(np.log(runs["short"] + runs["other"]), 0.5)), rel=1e-6)
    # older than every run seen: unknown (the caller's overdue rule)
    assert np.isnan(m.predict_remaining(ask("short"), 5000.0, 0.5)[0])


def test_merged_models_answer_as_each_alone():
    a = RuntimePredictor().fit(table(BIMODAL))
    b = RuntimePredictor().fit(table({"bi": [50.0] * 8, "x": [7.0] * 6}))
    runs, off = merge_runs([a.runs_, b.runs_])
    pods = ask("bi", 2)
    ca, cb = a.key_codes(pods), b.key_codes(pods)
    codes = np.vstack([ca[:1] + np.where(ca[:1] >= 0, [o[0] for o in off], 0),
                       cb[1:] + np.where(cb[1:] >= 0, [o[1] for o in off], 0)])
    got = remaining(runs, codes, np.array([200.0, 20.0]), 0.5, a.min_count)
    assert got[0] == pytest.approx(a.predict_remaining(pods[:1], 200.0, 0.5)[0])
    assert got[1] == pytest.approx(b.predict_remaining(pods[1:], 20.0, 0.5)[0])


def test_a_loaded_model_says_it_has_no_histories(tmp_path):
    m = RuntimePredictor().fit(table(BIMODAL))
    m.save(tmp_path / "m")
    with pytest.raises(ValueError, match="fitted model"):
        RuntimePredictor.load(tmp_path / "m").predict_remaining(ask("bi"), 0.0, 0.5)


def test_the_answer_holds_until_the_next_run_of_the_history():
    m = RuntimePredictor().fit(table(BIMODAL))
    codes = m.key_codes(ask("bi", 3))
    rem, nxt = remaining(m.runs_, codes, np.array([0.0, 120.0, 20000.0]), 0.9, m.min_count,
                         with_next=True)
    assert nxt[0] == pytest.approx(90.0) and nxt[1] == pytest.approx(9000.0)
    # the end (age + remaining) is the same at any age before that
    later = remaining(m.runs_, codes[1:2], np.array([8999.0]), 0.9, m.min_count)[0]
    assert 8999.0 + later == pytest.approx(120.0 + rem[1])
    assert np.isnan(rem[2]) and nxt[2] == np.inf  # no run that long: never changes


def test_replay_remaining_runtime_asks_each_jobs_own_refit():
    from simulator.timeline.runtime import RemainingRuntime, online_models
    from simulator.timeline.workload import Jobs

    # day -1: workload "w" runs 100 s; day 0: it runs 10,000 s (finished by the day-1 refit)
    arr = np.concatenate([np.arange(-86000.0, -80000.0, 600.0), np.arange(0.0, 6000.0, 600.0),
                          [86400.0 + 10, 86400.0 + 20]])
    dur = np.concatenate([np.full(10, 100.0), np.full(10, 10000.0), [1.0, 1.0]])
    n = len(arr)
    one = np.ones(n, int)
    jobs = Jobs(arr, dur, one, one, one * 1000, np.zeros(n, int), np.zeros(n, int), ("q",),
                workload=np.array(["w"] * n))
    models = online_models(jobs, 0.0, 2 * 86400.0)
    rem = RemainingRuntime(0.5).fit(jobs, models)
    j = np.array([10, n - 1])  # asked on day 0 (history: 100 s runs) and on day 1
    end, until = rem.end(j, arr[j], arr[j])
    assert end[0] - arr[10] == pytest.approx(100.0) and until[0] == pytest.approx(arr[10] + 100)
    # on day 1 the history is both modes (median between them), answered by that refit
    assert 100.0 < end[1] - arr[n - 1] < 10000.0
    # past 100 s on day 1: only the 10,000 s runs remain
    end, _ = rem.end(j[1:], arr[j[1:]], arr[n - 1] + 500.0)
    assert end[0] - arr[n - 1] == pytest.approx(10000.0)
    # a job no refit answered (history) is unknown
    assert np.isnan(rem.end(np.array([0]), arr[:1], 0.0)[0][0])


def test_a_floor_keeps_young_residents_at_the_fixed_prediction():
    from simulator.timeline.runtime import RemainingRuntime, online_models
    from simulator.timeline.workload import Jobs

    arr = np.concatenate([np.arange(-86000.0, -80000.0, 600.0), [10.0, 20.0]])
    dur = np.concatenate([np.full(5, 100.0), np.full(5, 10000.0), [1.0, 1.0]])
    n = len(arr)
    one = np.ones(n, int)
    jobs = Jobs(arr, dur, one, one, one * 1000, np.zeros(n, int), np.zeros(n, int), ("q",),
                workload=np.array(["w"] * n))
    floor = np.full(n, 5000.0)
    floor[-1] = np.nan  # unknown prediction: the conditional end alone
    rem = RemainingRuntime(0.5).fit(jobs, online_models(jobs, 0.0, 86400.0), floor_s=floor)
    j = np.array([n - 2, n - 1])
    end, _ = rem.end(j, arr[j], arr[j])
    assert end[0] == pytest.approx(arr[n - 2] + 5000.0)  # young: the floor
    assert end[1] < arr[n - 1] + 5000.0
    # past the short mode the conditional end (10,000 s runs) is later than the floor
    end, _ = rem.end(j[:1], arr[j[:1]], arr[n - 2] + 200.0)
    assert end[0] == pytest.approx(arr[n - 2] + 10000.0)
