"""Bad inputs to `fingerprint build|show|predict|stragglers` found by a sweep: text where a
number goes, an edited fingerprint JSON, a predictor missing a model file, an unbounded peak."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main
from cli_support import one_line


def _telemetry(path: Path, n: int = 40, **edit) -> Path:
    df = pd.DataFrame({"ts": 1.7954e9 + 0.1 * np.arange(n), "util_gpu": 100.0,
                       "fb_used_mib": 5000.0,
                       "DCGM_FI_PROF_SM_ACTIVE": np.linspace(0.2, 0.9, n)}).astype(object)
    for col, (row, value) in edit.items():
        df.loc[row, col] = value
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("col, value, needle", [
    ("DCGM_FI_PROF_SM_ACTIVE", "abc", "not a number"),
    ("ts", "1e300", "outside years"),
])
def test_text_or_an_absurd_time_in_telemetry_is_refused(tmp_path, capsys, col, value, needle):
    csv = _telemetry(tmp_path / "tel.csv", **{col: (4, value)})
    code = main(["fingerprint", "build", "--csv", str(csv), "--out", str(tmp_path / "fp.json")])
    one_line(capsys, code, "tel.csv", col, "data row 5", needle)
    assert not (tmp_path / "fp.json").exists()


@pytest.mark.parametrize("col", ["batch_time_norm", "time"])
def test_text_in_a_step_time_or_step_column_is_refused(tmp_path, capsys, col):
    df = pd.DataFrame([(t, w, 1.0) for t in range(30) for w in ("w0", "w1", "w2")],
                      columns=["time", "worker", "batch_time_norm"]).astype(object)
    df.loc[4, col] = "abc"
    df.to_csv(tmp_path / "j_t.csv", index=False)
    code = main(["fingerprint", "stragglers", "--csv", str(tmp_path / "j_t.csv")])
    one_line(capsys, code, "j_t.csv", f"column {col}", "data row 5", "'abc'", "not a number")


@pytest.fixture(scope="module")
def fp_json(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fp")
    csv = _telemetry(d / "bert-template.csv", 200)
    assert main(["fingerprint", "build", "--csv", str(csv), "--out", str(d / "fp.json")]) == 0
    return d / "fp.json"


@pytest.mark.parametrize("edit, needle", [
    (lambda w: w.pop("example_run"), "lacks example_run"),
    (lambda w: w.clear(), "lacks example_run"),
    (lambda w: w.__setitem__("phases", "x"), "lacks phases"),
    (lambda w: w["example_run"].__setitem__("segments", [[1]]), "ValueError"),
])
def test_an_edited_fingerprint_entry_is_not_a_fingerprint(fp_json, tmp_path, capsys, edit,
                                                          needle):
    doc = json.loads(fp_json.read_text())
    edit(doc["workloads"]["bert-template"])
    bad = tmp_path / "fp.json"
    bad.write_text(json.dumps(doc))
    code = main(["fingerprint", "show", "bert-template", "--fingerprint", str(bad), "--out",
                 str(tmp_path / "f.png")])
    one_line(capsys, code, "fp.json: not a fingerprint JSON", "bert-template", needle)


@pytest.fixture(scope="module")
def small_predictor(tmp_path_factory) -> Path:
    """Two workloads of three runs: too few for a bounded upper quantile."""
    from forecaster.fingerprint.predict import NewJobPredictor

    w = ["a", "a", "a", "b", "b", "b"]
    runs = pd.DataFrame({"workload": w, "image": [f"img/{x}" for x in w], "namespace": "ns",
                         "queue": "q", "gpu_request": 1.0, "priority": 0,
                         "peak_fb_mib": [4e3, 4.1e3, 3.9e3, 1.2e4, 1.1e4, 1.3e4]})
    path = tmp_path_factory.mktemp("pred") / "p"
    NewJobPredictor(n_estimators=10).fit(runs).save(path)
    return path


def test_a_deleted_model_file_is_one_line_not_a_silent_fallback(small_predictor, tmp_path,
                                                                capsys):
    bad = shutil.copytree(small_predictor, tmp_path / "bad")
    (bad / "workload.txt").unlink()
    code = main(["fingerprint", "predict", "--predictor", str(bad), "--image", "img/b"])
    one_line(capsys, code, "workload.txt", "cannot read the model file")


def test_an_unbounded_peak_is_said_so_and_two_workloads_predict(small_predictor, capsys):
    # two workloads: a binary booster once read back (its predict was 1-D, argmax failed)
    assert main(["fingerprint", "predict", "--predictor", str(small_predictor),
                 "--image", "img/b"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "source=model workload=b" in out
    assert "peak_fb_upper_mib=unbounded (too few runs" in out and "inf" not in out
