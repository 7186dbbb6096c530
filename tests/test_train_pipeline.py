"""Retraining pipeline end to end on a small synthetic cluster: publish, gate, report."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from training import sources
from training.pipeline import TrainConfig, gate, run
from training.registry import Registry
from training.report import write_report

CFG = dict(holdout=pd.Timedelta("18h"), n_estimators=40, threads=1, demand_freq="1h",
           demand_horizon=3)


@pytest.fixture(scope="module")
def history() -> sources.History:
    return sources.synthetic(seed=0, days=2.5, nodes=2)


def _run(h, reg, **kw):
    return run(copy.copy(h), str(reg), TrainConfig(**{**CFG, **kw}))


def test_gate_rule() -> None:
    assert gate(1.0, None, 0.0)
    assert gate(1.0, 1.0, 0.0) and not gate(1.01, 1.0, 0.0)
    assert gate(1.04, 1.0, 0.05) and not gate(1.06, 1.0, 0.05)


def test_first_run_publishes_every_kind_with_backtest_and_report(history, tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    res = _run(history, reg)
    by = {k.kind: k for k in res.kinds}
    kinds = ("fingerprint", "interference", "demand", "usage")
    assert {k: v.status for k, v in by.items()} == {k: "published" for k in kinds}
    r = Registry(reg)
    for kind in kinds:
        assert r.current(kind) == "1"
        body = r.manifest(kind, "1")
        # trained strictly before the backtest window, and says so
        assert body["training_window"]["end"] == res.window["cutoff"]
        assert body["backtest_window"]["start"] == res.window["cutoff"]
        assert body["features"] and body["data_hash"] and body["code_version"]
    # the models beat their same-window baselines (the backtest is not a tautology)
    inter, dem = by["interference"].metrics, by["demand"].metrics
    assert inter["mae"] < inter["baseline_median_mae"]
    assert dem["mae"] < dem["baseline_persistence_mae"]
    use, fp = by["usage"].metrics, by["fingerprint"].metrics
    assert use["mae"] < min(use["baseline_mean_last_h_mae"], use["baseline_ses_mae"])
    assert fp["mae"] < fp["baseline_median_mae"]
    m, html = write_report(res, str(reg), tmp_path / "out")
    doc = json.loads(m.read_text())
    assert doc["kinds"]["interference"]["version"] == "1"
    assert "counter_resets" in doc["hygiene"]
    text = html.read_text()
    # per kind a backtest plot and a version-history plot, plus the fingerprint bars
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{200,}"', text)) >= 9

    # second run on the same data: identical artifacts are not published again
    again = {k.kind: k for k in _run(history, reg, kinds=("interference", "demand")).kinds}
    assert all(k.status == "kept" and "identical" in k.reason for k in again.values())
    assert r.versions("demand") == ["1"]

    # a weaker model (2 trees) is worse on the same window: kept out, v1 stays in service
    weak = {k.kind: k for k in _run(history, reg, n_estimators=2, kinds=("demand",)).kinds}
    d = weak["demand"]
    assert d.status == "kept" and "worse" in d.reason
    assert d.metrics["mae"] > d.service_metrics["mae"]
    assert r.current("demand") == "1"

    # ... unless the tolerance allows it
    loose = _run(history, reg, n_estimators=2, kinds=("demand",), tolerance=10.0).kinds[0]
    assert loose.status == "published" and r.current("demand") == "2"
    # and a better one (back to 40 trees, different seed) replaces it
    better = _run(history, reg, seed=1, kinds=("demand",)).kinds[0]
    assert better.metrics["mae"] < better.service_metrics["mae"]
    assert better.status == "published" and r.current("demand") == "3"
