"""Retraining job faults: dirty history, Prometheus down or partial, tampered model in service,
failure during publish. The models in service must survive every one of them."""
from __future__ import annotations

import copy
import hashlib
import json
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main
from training import sources
from training.hygiene import clean_samples
from training.pipeline import TrainConfig, run
from artifacts.registry import Registry

CFG = dict(holdout=pd.Timedelta("18h"), n_estimators=30, threads=1, demand_freq="1h",
           demand_horizon=3, kinds=("demand",))
CTR = "foresight_app_iterations_total"


@pytest.fixture(scope="module")
def history() -> sources.History:
    return sources.synthetic(seed=3, days=2.5, nodes=1)


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _published(history, tmp_path: Path) -> Path:
    reg = tmp_path / "reg"
    res = run(copy.copy(history), str(reg), TrainConfig(**CFG))
    assert res.kinds[0].status == "published"
    return reg


def test_hygiene_counts_and_fixes_each_fault() -> None:
    ts = pd.date_range("2026-01-01", periods=10, freq="30s", tz="UTC")
    rows = []
    for gpu in ("g0", "g1"):
        for i, t in enumerate(ts):
            if gpu == "g1" and i in (4, 5):
                continue  # a 90 s hole in g1's scrapes
            rows.append((t, gpu, "p", "DCGM_FI_DEV_GPU_UTIL", 50.0))
            if gpu == "g0":  # g1 never reports power: a missing series
                rows.append((t, gpu, "p", "DCGM_FI_DEV_POWER_USAGE", 100.0))
            rows.append((t, gpu, "p", CTR, float(i * 10 if i < 6 else (i - 6) * 10 + 1)))
    df = pd.DataFrame(rows, columns=["ts", "uuid", "pod", "metric", "value"])
    df = df.assign(node="n", gpu="0", namespace="ns")
    df.loc[3, "value"] = np.nan
    df = pd.concat([df, df.iloc[[7]]], ignore_index=True)  # one duplicate scrape
    out, rep = clean_samples(df, ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE",
                                  "DCGM_FI_PROF_SM_ACTIVE"])
    assert rep.nan_values == 1 and rep.duplicate_rows == 1
    assert rep.counter_resets == 2  # one per GPU's counter
    assert rep.missing_series == 1 and rep.missing_metrics == ["DCGM_FI_PROF_SM_ACTIVE"]
    # g1's hole in util and counter (60 s each) + the dropped NaN in g0's util (30 s)
    assert rep.gaps == 3 and rep.gap_seconds == pytest.approx(2 * 60.0 + 30.0)
    assert out["value"].notna().all() and len(out) == len(df) - 2
    for _, g in out[out["metric"] == CTR].groupby("uuid"):
        assert np.all(np.diff(g.sort_values("ts")["value"].to_numpy()) >= 0)  # monotone again


def test_dirty_history_is_handled_counted_and_reported(history, tmp_path: Path) -> None:
    h = copy.copy(history)
    s = h.samples.copy()
    rng = np.random.default_rng(0)
    nan_rows = rng.choice(len(s), 500, replace=False)
    s.loc[nan_rows, "value"] = np.nan
    # an exporter restart: the progress counter of one pod drops to 0 halfway
    ctr = s[(s["metric"] == CTR) & (s["pod"] != "")]
    pod = ctr["pod"].value_counts().index[0]
    one = ctr[ctr["pod"] == pod].sort_values("ts")
    half = one.index[len(one) // 2:]
    s.loc[half, "value"] = s.loc[half, "value"] - s.loc[half[0], "value"]
    # one GPU loses its power series entirely
    gpu = s["uuid"].iloc[0]
    s = s[~((s["uuid"] == gpu) & (s["metric"] == "DCGM_FI_DEV_POWER_USAGE"))]
    h.samples = s.reset_index(drop=True)
    res = run(h, str(tmp_path / "reg"), TrainConfig(**CFG))
    hy = res.hygiene
    assert hy["nan_values"] == int(np.isnan(s["value"]).sum()) > 0
    assert hy["counter_resets"] >= 1 and hy["missing_series"] >= 1
    assert res.kinds[0].status == "published"
    from training.report import write_report

    m, _ = write_report(res, str(tmp_path / "reg"), tmp_path / "out")
    assert json.loads(m.read_text())["hygiene"]["counter_resets"] == hy["counter_resets"]


def test_prometheus_down_exits_nonzero_and_keeps_models(history, tmp_path: Path, capsys) -> None:
    reg = _published(history, tmp_path)
    before = _tree(reg)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]  # closed again: nothing listens there
    # --since longer than the 1d holdout: a shorter one is refused before any pull
    rc = main(["train", "--prometheus-url", f"http://127.0.0.1:{port}", "--since", "2d",
               "--registry", str(reg), "--out", str(tmp_path / "out")])
    assert rc == 2
    assert "cannot reach Prometheus" in capsys.readouterr().err
    assert _tree(reg) == before


def test_prometheus_partial_data_exits_nonzero_and_keeps_models(history, tmp_path: Path,
                                                                monkeypatch, capsys) -> None:
    reg = _published(history, tmp_path)
    before = _tree(reg)
    s = history.samples
    cut = s["ts"].min() + (s["ts"].max() - s["ts"].min()) * 0.4  # a shard lost 60%

    class Fake:
        url = "http://fake:9090"

        def __init__(self, *a, **kw) -> None:
            pass

    def fake_pull(source, start, end, out, **kw):  # what ingest_to_dir leaves, 40 % of it
        import features.ingest_store as st

        kept = s[s["ts"] < cut]
        for (day, metric), part in kept.groupby([kept["ts"].dt.floor("D"), "metric"]):
            st.atomic_parquet(part, st.partition_path(Path(out), f"{day:%Y-%m-%d}", metric))
        for name in ("pods", "queues"):
            st.atomic_parquet(getattr(history, name), Path(out) / f"{name}.parquet")
        (Path(out) / st.MANIFEST).write_text(json.dumps(
            {"start": start.isoformat(), "end": end.isoformat(), "step_s": 30.0,
             "metrics": list(sources.TRAINING_METRICS), "complete": True}))
        return {}

    monkeypatch.setattr("features.prometheus.PrometheusSource", Fake)
    monkeypatch.setattr("features.ingest_store.ingest_to_dir", fake_pull)
    monkeypatch.setattr("features.ingest.now_utc", lambda: s["ts"].max().to_pydatetime())
    rc = main(["train", "--prometheus-url", "http://fake:9090", "--since", "2d",
               "--registry", str(reg), "--out", str(tmp_path / "out"),
               "--scratch", str(tmp_path / "scratch")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "partial data" in err and "models in service left untouched" in err
    assert _tree(reg) == before


def test_tampered_model_in_service_is_refused_and_replaced(history, tmp_path: Path) -> None:
    reg = _published(history, tmp_path)
    f = reg / "models" / "demand" / "1" / "model" / "model.txt"
    f.write_text(f.read_text().replace("tree", "treX", 1))
    res = run(copy.copy(history), str(reg), TrainConfig(**CFG)).kinds[0]
    assert res.status == "published" and res.version == "2"
    assert "unusable" in res.reason and "checksum mismatch" in res.reason
    r = Registry(reg)
    assert r.current("demand") == "2"
    assert [Path(p.path).name for p in r.verify()] == ["model.txt"]  # v1 still flagged


def test_failure_during_publish_keeps_current(history, tmp_path: Path, monkeypatch) -> None:
    reg = _published(history, tmp_path)
    orig = Registry.__init__

    def faulty(self, root, fault=None):
        def boom(step):
            if step == "rename_pointer":
                raise OSError("disk full")
        orig(self, root, fault=boom)

    monkeypatch.setattr(Registry, "__init__", faulty)
    res = run(copy.copy(history), str(reg),
              TrainConfig(**{**CFG, "seed": 7, "tolerance": 10.0})).kinds[0]
    monkeypatch.undo()
    assert res.status == "failed" and "disk full" in res.reason
    r = Registry(reg)
    assert r.current("demand") == "1"
    path, _ = r.fetch("demand")
    from forecaster.demand.model import DemandForecaster

    assert DemandForecaster.load(path).features_


def test_beat_baseline_gate_is_on_by_default(history, tmp_path) -> None:
    # what is published never loses to the best same-window baseline (the loser cases, with a
    # scripted kind, are in test_train_pipeline.py)
    res = run(copy.copy(history), str(tmp_path / "reg"), TrainConfig(**CFG)).kinds[0]
    base = min(v for k, v in res.metrics.items() if k.startswith("baseline") and v == v)
    assert res.status == "published" and res.metrics["mae"] <= base
    assert res.metrics["best_baseline"] in res.reason or "beats best baseline" in res.reason
    # switched off, only the model in service gates
    res = run(copy.copy(history), str(tmp_path / "reg2"),
              TrainConfig(**{**CFG, "beat_baseline": False})).kinds[0]
    assert res.status == "published"


def test_bad_interference_alpha_is_one_line_and_keeps_models(history, tmp_path: Path,
                                                              capsys) -> None:
    reg = _published(history, tmp_path)
    before = _tree(reg)
    for flag, bad in (("--interference-alpha", "0.9"), ("--interference-admit-risk", "0.6")):
        rc = main(["train", "--synthetic", "--days", "1", "--nodes", "2", "--registry",
                   str(reg), "--out", str(tmp_path / "out"), flag, bad])
        assert rc == 2
        err = capsys.readouterr().err
        assert flag in err and "Traceback" not in err
        assert _tree(reg) == before
