"""Issue 28: the run-time predictor's point calibration (`calibrate_p50`): one log-space shift
of p50, chosen on a slice that mimics the held-out split (pods created last, history finished
before them). Synthetic data only."""
from __future__ import annotations

import numpy as np
import pandas as pd

from forecaster.runtime.model import RuntimePredictor


def pods(n: int, seed: int, drift: float, t0: float = 0.0, span: float = 1e6) -> pd.DataFrame:
    """Workloads a/b (~100 s / ~10,000 s); log run time drifts by ``drift`` per 1e6 s."""
    rng = np.random.default_rng(seed)
    w = rng.choice(["a", "b"], n)
    start = t0 + np.sort(rng.uniform(0, span, n))
    rt = np.exp(np.where(w == "a", np.log(100), np.log(10_000)) + drift * start / 1e6
                + rng.normal(0, 0.5, n))
    return pd.DataFrame({"workload": w, "queue": "q1", "gpu_request": 1.0, "priority": 0,
                         "created": start, "started": start, "finished": start + rt})


def _mae(m: RuntimePredictor, test: pd.DataFrame) -> float:
    y = (test["finished"] - test["started"]).to_numpy()
    return float(np.abs(m.predict(test)["p50"].to_numpy() - y).mean())


def test_calibration_follows_a_drift_down_and_beats_the_plain_median():
    train, test = pods(3000, 0, drift=-1.0), pods(1000, 1, drift=-1.0, t0=1e6, span=2e5)
    plain = RuntimePredictor().fit(train)
    cal = RuntimePredictor(calibrate_p50=True).fit(train)
    assert cal.shift_ < -0.1 and plain.shift_ == 0.0
    assert _mae(cal, test) < 0.95 * _mae(plain, test)
    # the interval is the plain model's (chosen separately); p50 stays inside it
    p, q = cal.predict(test), plain.predict(test)
    np.testing.assert_allclose(p["p90"], q["p90"])
    assert ((p["p50"] >= p["p10"]) & (p["p50"] <= p["p90"])).all()


def test_calibration_leaves_a_stationary_trace_nearly_alone():
    train, test = pods(3000, 2, drift=0.0), pods(1000, 3, drift=0.0, t0=1e6)
    cal = RuntimePredictor(calibrate_p50=True).fit(train)
    assert abs(cal.shift_) <= 0.2
    assert _mae(cal, test) < 1.05 * _mae(RuntimePredictor().fit(train), test)


def test_calibration_round_trips_and_old_manifests_load_without_it(tmp_path):
    train = pods(2000, 4, drift=-1.0)
    m = RuntimePredictor(calibrate_p50=True).fit(train)
    m.save(tmp_path / "m")
    back = RuntimePredictor.load(tmp_path / "m")
    assert back.calibrate_p50 and back.shift_ == m.shift_
    pd.testing.assert_frame_equal(m.predict(train), back.predict(train))
    # a manifest written before the calibration existed has no shift: it serves as before
    import json
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    del man["shift"], man["params"]["calibrate_p50"]
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(man))
    old = RuntimePredictor.load(tmp_path / "m")
    assert old.shift_ == 0.0 and not old.calibrate_p50


def test_too_few_pods_for_the_slice_means_no_shift():
    m = RuntimePredictor(calibrate_p50=True).fit(pods(60, 5, drift=-2.0))
    assert m.shift_ == 0.0


def test_calibration_reads_datetime_columns_as_the_float_ones():
    t = pods(2000, 6, drift=-1.0)
    dt = t.copy()
    for c in ("created", "started", "finished"):
        dt[c] = pd.to_datetime(t[c], unit="s", utc=True)
    a = RuntimePredictor(calibrate_p50=True).fit(t)
    b = RuntimePredictor(calibrate_p50=True).fit(dt)
    assert a.shift_ == b.shift_ < 0
