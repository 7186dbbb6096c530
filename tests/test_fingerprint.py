"""Fingerprint JSON, new-job predictor, plot, straggler signal and the fingerprint CLI."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from features.segments import wide_series
from forecaster.fingerprint.model import FingerprintModel, job_table, peak_runs
from forecaster.fingerprint.predict import NewJobPredictor
from forecaster.fingerprint.straggler import flag_stragglers


@pytest.fixture(scope="module")
def cluster():
    from simulator import SimConfig, generate_cluster

    return generate_cluster(SimConfig(seed=3, days=0.5, step_s=30, nodes=3))


@pytest.fixture(scope="module")
def model(cluster):
    return FingerprintModel().fit(wide_series(cluster.samples), cluster.pods, cluster.pod_labels)


def test_fingerprint_document(model, tmp_path, cluster):
    path = tmp_path / "fp.json"
    model.save(path)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1
    keys = set(job_table(cluster.pods, cluster.pod_labels)["workload"])
    assert set(doc["workloads"]) <= keys
    for fp in doc["workloads"].values():
        shares = [p["time_share"] for p in fp["phases"].values()]
        assert abs(sum(shares) - 1) < 1e-3
        for ph in fp["phases"].values():
            sm = ph["metrics"]["sm"]
            assert sm["p50"] <= sm["p95"] + 1e-9
        for row in fp["transitions"].values():
            assert abs(sum(row.values()) - 1) < 1e-3
        assert fp["iteration_period_s"] is None  # 30 s samples: no period visible
    fp = next(iter(doc["workloads"].values()))
    if "compute" in fp["phases"] and "idle" in fp["phases"]:
        assert fp["phases"]["compute"]["power_w"] > fp["phases"]["idle"]["power_w"]
    back = FingerprintModel.load(path)
    assert back.fingerprints_ == doc["workloads"]
    doc["schema_version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError):
        FingerprintModel.load(path)


def test_peak_fb_close_to_generator_truth(model, cluster):
    runs = peak_runs(model.runs_)
    solo = cluster.truth["pod_solo"].set_index(["namespace", "pod"])["fb_used_mib"]
    got = runs.set_index(["namespace", "pod"])["peak_fb_mib"]
    common = got.index.intersection(solo.index)
    assert len(common) >= 5
    assert np.median(np.abs(got[common] / solo[common] - 1)) < 0.02


def synthetic_runs(n, seed):
    rng = np.random.default_rng(seed)
    w = rng.choice(["a", "b", "c"], n)
    base = pd.Series(w).map({"a": 4000, "b": 12000, "c": 30000}).to_numpy()
    return pd.DataFrame({"workload": w, "image": [f"img/{x}:1" for x in w],
                         "namespace": "ns", "queue": "q", "gpu_request": 1.0, "priority": 0,
                         "peak_fb_mib": base * rng.lognormal(0, 0.1, n)})


def test_new_job_predictor_covers_and_roundtrips(tmp_path):
    tr, te = synthetic_runs(300, 0), synthetic_runs(400, 1)
    p = NewJobPredictor(coverage=0.95).fit(tr)
    pr = p.predict(te)
    cov = np.mean(pr["peak_fb_upper_mib"] >= te["peak_fb_mib"])
    over = np.mean(pr["peak_fb_upper_mib"] / te["peak_fb_mib"] - 1)
    assert 0.9 <= cov <= 0.995 and over < 0.3
    assert (pr["source"] == "key").all()
    unknown = p.predict(te.assign(workload="new").head(5))
    assert (unknown["source"] == "model").all()
    assert set(unknown["workload"]) <= {"a", "b", "c"}
    p.save(tmp_path / "m")
    q = NewJobPredictor.load(tmp_path / "m")
    pd.testing.assert_frame_equal(q.predict(te.head(20)), p.predict(te.head(20)))
    pd.testing.assert_frame_equal(q.predict(te.assign(workload="new").head(5)), unknown)
    q.save(tmp_path / "again")  # a loaded predictor saves like a fitted one
    pd.testing.assert_frame_equal(NewJobPredictor.load(tmp_path / "again").predict(
        te.assign(workload="new").head(5)), unknown)


def config_runs(n, seed):
    """Runs whose peak is fixed + per-sample x batch size with a 4 % residual."""
    rng = np.random.default_rng(seed)
    w = rng.choice(["a", "b"], n)
    bs = rng.choice([8, 16, 32, 64, 128], n).astype(float)
    fixed = np.where(w == "a", 2000.0, 15000.0)
    per = np.where(w == "a", 80.0, 200.0)
    return pd.DataFrame({"workload": w, "image": "img", "namespace": "ns", "queue": "q",
                         "gpu_request": 1.0, "priority": 0, "batch_size": bs,
                         "peak_fb_mib": (fixed + per * bs) * rng.lognormal(0, 0.04, n)})


def test_batch_size_narrows_the_bound(tmp_path):
    tr, te = config_runs(200, 0), config_runs(1000, 1)
    p = NewJobPredictor(coverage=0.95).fit(tr)
    act = te["peak_fb_mib"].to_numpy()
    up = p.predict(te)["peak_fb_upper_mib"].to_numpy()
    assert np.mean(up >= act) >= 0.93 and np.mean(up / act - 1) < 0.15
    blind = p.predict(te.drop(columns="batch_size"))["peak_fb_upper_mib"].to_numpy()
    assert np.mean(blind / act - 1) > 2 * np.mean(up / act - 1)  # the label is what helps
    # a batch size never seen in training: the memory model extrapolates, leverage widens
    big = p.predict(te.head(1).assign(batch_size=512.0)).iloc[0]
    seen = p.predict(te.head(1).assign(batch_size=128.0)).iloc[0]
    assert big["peak_fb_upper_mib"] / big["peak_fb_p50_mib"] > \
        seen["peak_fb_upper_mib"] / seen["peak_fb_p50_mib"]
    p.save(tmp_path / "m")
    pd.testing.assert_frame_equal(NewJobPredictor.load(tmp_path / "m").predict(te.head(20)),
                                  p.predict(te.head(20)))


def test_confidence_margin_widens_the_quantile():
    from forecaster.fingerprint.predict import conformal_q

    r = np.random.default_rng(0).normal(size=200)
    avg, safe = conformal_q(r, 0.95), conformal_q(r, 0.95, confidence=0.95)
    assert avg < safe < np.max(r)
    # 30 runs cannot promise it: the average-case quantile, not an infinite bound
    assert conformal_q(r[:30], 0.95, confidence=0.95) == conformal_q(r[:30], 0.95) < np.inf


def test_job_table_reads_the_batch_label(cluster):
    from simulator.workloads import BATCH_LABEL

    jt = job_table(cluster.pods, cluster.pod_labels)
    assert jt["batch_size"].notna().all() and (jt["batch_size"] > 0).all()
    lab = cluster.pod_labels[cluster.pod_labels["label"] != BATCH_LABEL]
    assert job_table(cluster.pods, lab)["batch_size"].isna().all()


def test_straggler_flagged():
    rng = np.random.default_rng(0)
    rows = [(w, s, 100 * rng.lognormal(0, 0.03) * (1.15 if w == 3 and s >= 100 else 1.0))
            for s in range(300) for w in range(8)]
    d = pd.DataFrame(rows, columns=["worker", "time", "batch_time_norm"])
    r = flag_stragglers(d).set_index("worker")
    assert r.loc[3, "straggler"] and r["straggler"].sum() == 1
    d2 = d[d["worker"] != 3]
    assert not flag_stragglers(d2)["straggler"].any()


def _cli(capsys, *args):
    from foresight.cli import main

    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_cli_build_show_predict(cluster, tmp_path, capsys):
    from features.ingest import write_tables

    data = tmp_path / "data"
    write_tables(data, {"samples": cluster.samples, "pods": cluster.pods,
                        "pod_labels": cluster.pod_labels})
    fp, png = tmp_path / "fp.json", tmp_path / "x.png"
    rc, out = _cli(capsys, "fingerprint", "build", "--data", str(data), "--out", str(fp),
                   "--predictor", str(tmp_path / "pred"))
    assert rc == 0, out
    w = sorted(json.loads(fp.read_text())["workloads"])[0]
    rc, out = _cli(capsys, "fingerprint", "show", w, "--fingerprint", str(fp), "--out", str(png))
    assert rc == 0, out
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20000
    rc, out = _cli(capsys, "fingerprint", "show", "nope", "--fingerprint", str(fp), "--out",
                   str(png))
    assert rc == 2 and "unknown workload" in out
    rc, out = _cli(capsys, "fingerprint", "predict", "--predictor", str(tmp_path / "pred"),
                   "--workload", w)
    assert rc == 0 and "source=key" in out
    # (a 12-hour cluster has too few runs for a finite bound: compare the medians)
    p50 = lambda o: float(o.split("peak_fb_p50_mib=")[1].split()[0])  # noqa: E731
    bounds = []
    for bs in ("8", "4096"):  # the batch size moves the prediction the way memory moves
        rc, out = _cli(capsys, "fingerprint", "predict", "--predictor", str(tmp_path / "pred"),
                       "--workload", "resnet50-template", "--batch-size", bs)
        assert rc == 0, out
        bounds.append(p50(out))
    assert bounds[1] > 2 * bounds[0]
    rc, out = _cli(capsys, "fingerprint", "build", "--data", str(tmp_path / "missing"),
                   "--out", str(fp))
    assert rc == 2 and "does not exist" in out and "Traceback" not in out


def test_forked_labelling_matches_one_process_and_leaves_no_state(cluster):
    import forecaster.fingerprint.model as fm

    ws = wide_series(cluster.samples)
    one = FingerprintModel(n_jobs=1).label_all(ws)
    two = FingerprintModel(n_jobs=2).label_all(ws)
    assert len(ws) >= 4 and len(one) == len(two) == len(ws)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))
    assert fm._WORKER == {}  # the series live in the workers only, not in the parent module


def test_without_a_batch_size_a_known_workload_is_bounded_by_its_own_run_peaks(tmp_path):
    """A workload whose peaks spread with a batch size the job does not declare: with runs
    enough, the bound is the order statistic of its own peaks (here, with 60 runs at 95 % /
    95 %, their max), not the median times a residual quantile pooled over workloads."""
    rng = np.random.default_rng(0)

    def runs(w, n, lo, hi):
        return pd.DataFrame({"workload": w, "image": w, "namespace": "ml", "queue": "q",
                             "gpu_request": 1.0, "priority": 0, "batch_size": np.nan,
                             "peak_fb_mib": rng.uniform(lo, hi, n)})

    # `tight` has too few runs for a quantile of its own residuals (< 50): the pooled one,
    # which `wide` dominates, used to put its bound at 1.7x its largest peak
    wide, tight = runs("wide", 60, 6000, 36000), runs("tight", 40, 10000, 10400)
    few = runs("few", 8, 3000, 30000)
    p = NewJobPredictor(n_estimators=10).fit(pd.concat([wide, tight, few], ignore_index=True))
    ask = pd.DataFrame({"workload": ["wide", "tight", "few"], "image": ["wide", "tight", "few"],
                        "namespace": "ml", "queue": "q", "gpu_request": 1.0, "priority": 0})
    up = p.predict(ask).set_index("workload")["peak_fb_upper_mib"]
    assert up["wide"] == pytest.approx(wide["peak_fb_mib"].max(), rel=1e-3)
    # 40 runs: the average-case rank, the 39th of 40
    assert up["tight"] == pytest.approx(np.sort(tight["peak_fb_mib"])[38], rel=1e-3)
    # eight runs cannot promise 95 %: the median and the residual quantile, as before
    assert up["few"] == pytest.approx(np.exp(p.center_["few"] + p.q_key_["few"]), rel=1e-3)
    p.save(tmp_path / "m")
    pd.testing.assert_frame_equal(NewJobPredictor.load(tmp_path / "m").predict(ask),
                                  p.predict(ask))
