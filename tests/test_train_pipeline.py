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
from artifacts.registry import Registry
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
    kinds = ("fingerprint", "interference", "demand", "usage", "runtime")
    assert {k: v.status for k, v in by.items()} == {k: "published" for k in kinds}
    r = Registry(reg)
    for kind in kinds:
        assert r.current(kind) == "1"
        body = r.manifest(kind, "1")
        # trained strictly before the backtest window, and says so
        assert body["training_window"]["end"] == res.window["cutoff"]
        assert body["backtest_window"]["start"] == res.window["cutoff"]
        assert body["features"] and body["data_hash"] and body["code_version"]
    # the models beat (or, a baseline of record, equal) their same-window baselines
    inter, dem = by["interference"].metrics, by["demand"].metrics
    assert inter["mae"] < inter["baseline_median_mae"]
    # asked by workload name only, as the extender's gate asks it, it still beats the median
    assert inter["mae_by_name"] < inter["baseline_median_mae"]
    # (on this 2-day history demand may serve persistence, its baseline of record: equal)
    assert dem["mae"] <= min(dem["baseline_snaive_day_mae"], dem["baseline_persistence_mae"])
    use, fp = by["usage"].metrics, by["fingerprint"].metrics
    assert use["mae"] < min(v for k, v in use.items() if k.startswith("baseline_"))
    assert fp["mae"] < fp["baseline_median_mae"]
    m, html = write_report(res, str(reg), tmp_path / "out")
    doc = json.loads(m.read_text())
    assert doc["kinds"]["interference"]["version"] == "1"
    assert "counter_resets" in doc["hygiene"]
    text = html.read_text()
    # per kind a backtest plot and a version-history plot, plus the fingerprint bars
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{200,}"', text)) >= 9
    # each plot carries a one-line reading with numbers in it
    captions = re.findall(r"<figcaption>([^<]*)</figcaption>", text)
    assert len(captions) >= 9 and all(re.search(r"\d", c) for c in captions)

    # second run on the same data: identical artifacts are not published again
    again = {k.kind: k for k in _run(history, reg, kinds=("interference", "demand")).kinds}
    assert all(k.status == "kept" and "identical" in k.reason for k in again.values())
    assert r.versions("demand") == ["1"]



# ---------------------------------------------------------------- the baseline gate
def test_best_baseline_is_the_lowest_of_the_primary_metric() -> None:
    from training.pipeline import beats, best_baseline

    m = {"primary": "mae", "mae": 1.0, "baseline_persistence_mae": 1.2,
         "baseline_snaive_day_mae": 0.9, "baseline_snaive_week_mae": float("nan"),
         "baseline_persistence_rmse": 0.1, "p10_p90_coverage": 0.8}
    assert best_baseline(m) == ("snaive_day", 0.9)
    assert not beats(1.0, ("snaive_day", 0.9)) and not beats(0.9, ("snaive_day", 0.9))
    assert beats(0.89, ("snaive_day", 0.9)) and beats(5.0, None)
    assert best_baseline({"primary": "mae", "mae": 1.0}) is None


class _Fake:
    """A kind whose model scores `mae` against a baseline `const` scoring 1.0."""

    NAME, PRIMARY = "demand", "mae"

    def __init__(self, mae: float, can_serve_baseline: bool) -> None:
        self.mae = mae
        if can_serve_baseline:
            self.as_baseline = lambda model, name: {"served": name}

    def prepare(self, history, cfg):
        return {}

    def split(self, data, cutoff):
        return {}, {}

    def fit(self, train, cfg):
        return {"served": "model", "mae": self.mae}

    def score(self, model, test, train):
        mae = 1.0 if model["served"] == "const" else model["mae"]
        return ({"primary": "mae", "mae": mae, "baseline_const_mae": 1.0,
                 "baseline_worse_mae": 3.0}, pd.DataFrame())

    def save(self, model, path):
        Path(path, "m.json").write_text(json.dumps(model))

    def load(self, path):
        return json.loads(Path(path, "m.json").read_text())

    def features(self, model):
        return ["x"]


def _fake_run(history, reg, monkeypatch, mae: float, can_serve_baseline: bool):
    import training.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_kind", lambda name: _Fake(mae, can_serve_baseline))
    return _run(history, reg, kinds=("demand",)).kinds[0]


def test_gate_never_publishes_a_model_worse_than_its_best_baseline(history, tmp_path,
                                                                   monkeypatch) -> None:
    reg = tmp_path / "reg"
    # a loser with no way to serve its baseline: nothing is published, and it says why
    r = _fake_run(history, reg, monkeypatch, 1.5, can_serve_baseline=False)
    assert r.status == "withheld" and r.version is None
    assert "does not beat the best baseline const 1" in r.reason
    assert Registry(reg).current("demand") is None
    # a tie is not a win
    r = _fake_run(history, reg, monkeypatch, 1.0, can_serve_baseline=False)
    assert r.status == "withheld"
    # a loser that can serve its baseline: the baseline becomes the model of record
    r = _fake_run(history, reg, monkeypatch, 1.5, can_serve_baseline=True)
    assert r.status == "published" and "baseline const is the model of record" in r.reason
    assert r.metrics["mae"] == 1.0 and r.metrics["best_baseline"] == "const"
    body = Registry(reg).manifest("demand", r.version)
    assert body["metrics"]["mae"] <= body["metrics"]["baseline_const_mae"]
    assert json.loads((Registry(reg).fetch("demand")[0] / "m.json").read_text())["served"] == "const"
    # a winner replaces it
    r = _fake_run(history, reg, monkeypatch, 0.5, can_serve_baseline=True)
    assert r.status == "published" and "beats best baseline const" in r.reason
    v = r.version
    # a later loser does not replace a model in service that beats the baseline
    r = _fake_run(history, reg, monkeypatch, 2.0, can_serve_baseline=True)
    assert r.status == "kept" and f"v{v} in service" in r.reason
    assert Registry(reg).current("demand") == v
    # one that beats the baseline but is worse than the model in service is kept out too,
    # unless the tolerance allows it
    r = _fake_run(history, reg, monkeypatch, 0.8, can_serve_baseline=True)
    assert r.status == "kept" and "worse than" in r.reason and Registry(reg).current("demand") == v
    import training.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_kind", lambda name: _Fake(0.8, True))
    r = _run(history, reg, kinds=("demand",), tolerance=1.0).kinds[0]
    assert r.status == "published" and Registry(reg).current("demand") == r.version != v


def test_no_published_kind_loses_to_its_best_baseline(history, tmp_path: Path) -> None:
    """The real kinds through the real gate: whatever is published is at least as good as the
    best baseline of its own backtest, and the table/report name that baseline."""
    from foresight.commands.train import summary_table
    from rich.console import Console
    from training.pipeline import best_baseline

    res = _run(history, tmp_path / "reg")
    published = [k for k in res.kinds if k.status == "published"]
    assert published, "nothing published: the check below would be vacuous"
    for k in res.kinds:
        base = best_baseline(k.metrics)
        assert base is not None, k.kind
        if k.status == "published":
            assert k.metrics["mae"] <= base[1] * (1 + 1e-6), (k.kind, k.metrics["mae"], base)
            body = Registry(tmp_path / "reg").manifest(k.kind, k.version)
            assert body["metrics"]["best_baseline"] == base[0]
        else:
            assert k.status == "withheld" and base[0] in k.reason
    con = Console(width=250, record=True)
    con.print(summary_table(res, tmp_path / "r.html", 1.0))
    text = con.export_text()
    for k in res.kinds:
        assert best_baseline(k.metrics)[0] in text
    _, html = write_report(res, str(tmp_path / "reg"), tmp_path / "out")
    assert html.read_text().count("compared with its best baseline on the same window") == len(res.kinds)


def test_interference_baseline_of_record_predicts_the_training_median(history, tmp_path) -> None:
    """The interference kind's `as_baseline`: a real artifact (loads like any model) whose
    point prediction is the training median for every pair, scoring the baseline's MAE."""
    from training.kinds import interference as kind

    data = kind.prepare(copy.copy(history), TrainConfig(**CFG))
    cutoff = history.end - CFG["holdout"]
    train, test = kind.split(data, cutoff)
    model = kind.as_baseline(kind.fit(train, TrainConfig(**CFG)), "median")
    m, _ = kind.score(model, test, train)
    assert m["mae"] == pytest.approx(m["baseline_median_mae"], rel=1e-6)
    assert m["mae_by_name"] == pytest.approx(m["baseline_median_mae"], rel=1e-6)
    kind.save(model, tmp_path / "m")
    back = kind.load(tmp_path / "m")
    p = back.predict(test["pairs"])
    med = float(pd.concat([train["pairs"]["a_speed"], train["pairs"]["b_speed"]]).median())
    assert p["a_speed_pred"].to_numpy() == pytest.approx(med, rel=1e-6)
    assert (p["a_speed_p10"] <= p["a_speed_pred"]).all()


def test_the_interference_kind_learns_workloads_that_only_ran_alone(history) -> None:
    """The retraining job hands the model every workload with a solo window, so that the
    extender's by-name request for one that never shared a GPU reads its own fingerprint."""
    from training.kinds import interference as kind

    data = kind.prepare(copy.copy(history), TrainConfig(**CFG))
    solo = data["solo"]
    paired = set(data["pairs"]["a_workload"]) | set(data["pairs"]["b_workload"])
    assert paired <= set(solo["workload"]) and solo["gpu_util"].notna().all()
    train, test = kind.split(data, history.end - CFG["holdout"])
    assert train["solo"] is solo and test["solo"] is solo  # features, not split by time
    w = sorted(paired)[0]  # drop its pairs: it has only run alone now
    alone = {**train, "pairs": train["pairs"][(train["pairs"]["a_workload"] != w)
                                              & (train["pairs"]["b_workload"] != w)]}
    model = kind.fit(alone, TrainConfig(**CFG))
    assert model.solo_[f"{w}\x1f"]["gpu_util"] == pytest.approx(
        float(solo.set_index("workload").loc[w, "gpu_util"]))
    blind = kind.fit({**alone, "solo": None}, TrainConfig(**CFG))
    assert f"{w}\x1f" not in blind.solo_
