"""Phase segmentation: hand-made series with known phases, wide series, simulator truth."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.segments import shared_mask, truth_labels, wide_series
from forecaster.fingerprint.segmentation import PROTOTYPES, PhaseSegmenter
from forecaster.fingerprint.segmentation_eval import change_points, evaluate, match_count

COLS = ["sm", "rx", "tx", "fb", "power"]


def synthetic(programme, seed=0, sm=0.8, pcie=2e9, fb=10000.0):
    """A (pod, GPU) series from a list of (phase, samples) using the prototype levels."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for ph, n in programme:
        act, fbr, rx, tx = PROTOTYPES[ph]
        for _ in range(n):
            rows.append([max(sm * act + rng.normal(0, 0.015) * (act > 0), 0),
                         max(rx * pcie + rng.normal(0, 2e7), 0),
                         max(tx * pcie + rng.normal(0, 2e7), 0), fb * fbr, 40 + 200 * act])
            labels.append(ph)
    return np.asarray(rows), np.asarray(labels, dtype=object)


TRAIN = [("startup", 20), ("compute", 60), ("stall", 3), ("compute", 40), ("eval", 10),
         ("checkpoint", 6), ("compute", 50), ("eval", 8), ("compute", 30)]
SERVE = [("startup", 10), ("serving_busy", 40), ("serving_idle", 30), ("serving_busy", 25)]


@pytest.mark.parametrize("method", ["cpd", "hmm"])
@pytest.mark.parametrize("prog", [TRAIN, SERVE])
def test_recovers_known_phases(method, prog):
    X, truth = synthetic(prog)
    seg = PhaseSegmenter(method=method, penalty=100)
    if method == "hmm":
        ws = _as_wide([X])
        seg.fit(ws)
    pred = seg.label_series(X, COLS)
    assert np.mean(pred == truth) > 0.95
    tc, pc = change_points(truth), change_points(pred)
    assert match_count(tc, pc, 2) >= 0.9 * len(tc)
    assert len(pc) <= len(tc) + 2


def test_serving_detected_from_pcie_ratio_not_from_names():
    X, _ = synthetic(SERVE)
    pred = PhaseSegmenter(method="cpd").label_series(X, COLS)
    assert "serving_busy" in set(pred) and "compute" not in set(pred)
    Xt, _ = synthetic(TRAIN)
    assert "serving_busy" not in set(PhaseSegmenter(method="cpd").label_series(Xt, COLS))


def test_match_count_is_one_to_one():
    assert match_count(np.array([10, 11]), np.array([10]), 2) == 1
    assert match_count(np.array([10]), np.array([13]), 2) == 0
    assert match_count(np.array([10, 20]), np.array([12, 19]), 2) == 2


def _as_wide(series):
    rows = []
    for k, X in enumerate(series):
        ts = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.arange(len(X)) * 15, "s")
        for j, c in enumerate(COLS):
            name = {"sm": "DCGM_FI_PROF_SM_ACTIVE", "rx": "DCGM_FI_PROF_PCIE_RX_BYTES",
                    "tx": "DCGM_FI_PROF_PCIE_TX_BYTES", "fb": "DCGM_FI_DEV_FB_USED",
                    "power": "DCGM_FI_DEV_POWER_USAGE"}[c]
            rows.append(pd.DataFrame({"ts": ts, "node": "n0", "gpu": str(k), "uuid": "u",
                                      "namespace": "ns", "pod": f"p{k}", "metric": name,
                                      "value": X[:, j]}))
    return wide_series(pd.concat(rows, ignore_index=True))


def test_wide_series_pivots_and_orders():
    X1, _ = synthetic(TRAIN, seed=1)
    X2, _ = synthetic(SERVE, seed=2)
    ws = _as_wide([X1, X2])
    assert len(ws) == 2
    k = ws.find("p0")[0]
    t, v = ws.series(k)
    assert np.all(np.diff(t) > 0)
    np.testing.assert_allclose(v[:, ws.columns.index("fb")], X1[:, 3])
    assert not shared_mask(ws).any()


def test_simulator_truth_scores_high():
    from simulator import SimConfig, generate_cluster

    c = generate_cluster(SimConfig(seed=5, days=0.5, step_s=15, nodes=2))
    ws = wide_series(c.samples)
    ex = list(np.flatnonzero(~shared_mask(ws)))
    assert ex
    lab = truth_labels(ws, c.truth["phases"], ex[0])
    assert (lab != "").mean() > 0.9
    r = evaluate(PhaseSegmenter(method="cpd", penalty=100).fit(ws), ws, c.truth["phases"],
                 series=ex)
    assert r["cp_f1"] > 0.8 and r["phase_macro_f1"] > 0.8
