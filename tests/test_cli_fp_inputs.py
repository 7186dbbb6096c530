"""Bad inputs to `fingerprint build|show|predict|stragglers` and `interference fit|predict|
evaluate` (found by a CLI fuzz): one line on stderr and a non-zero exit, never a traceback,
NaN in the output or a quietly wrong answer."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main
from cli_support import one_line

H200 = Path(__file__).resolve().parents[1] / "data" / "h200f"  # committed colocate.py output


# ------------------------------------------------------------------ fingerprint build --csv
def _telemetry(path: Path, n: int = 40, **edit) -> Path:
    """A wide per-GPU telemetry CSV (the ../shared/gpu-h200 column names), 10 Hz."""
    df = pd.DataFrame({"ts": 1.7954e9 + 0.1 * np.arange(n), "util_gpu": 100.0,
                       "fb_used_mib": 5000.0, "gpm_sm_active": np.linspace(0.2, 0.9, n)})
    for col, (row, value) in edit.items():
        df[col] = df[col].astype(object)
        df.loc[row, col] = value
    df.to_csv(path, index=False)
    return path


def _build_csv(tmp_path: Path, csv: Path) -> int:
    return main(["fingerprint", "build", "--csv", str(csv), "--out", str(tmp_path / "fp.json")])


def test_a_header_only_telemetry_csv_has_no_samples(tmp_path, capsys):
    csv = tmp_path / "h.csv"
    csv.write_text("ts,util_gpu,fb_used_mib,gpm_sm_active\n")
    one_line(capsys, _build_csv(tmp_path, csv), "h.csv", "no samples")


@pytest.mark.parametrize("n, same", [(1, False), (30, True)])
def test_a_telemetry_csv_without_a_time_span_is_refused(tmp_path, capsys, n, same):
    csv = _telemetry(tmp_path / "t.csv", n)
    if same:  # every ts equal: no span, and the fingerprint came out NaN
        df = pd.read_csv(csv).assign(ts=1.7954e9)
        df.to_csv(csv, index=False)
    one_line(capsys, _build_csv(tmp_path, csv), "at least 2 samples")
    assert not (tmp_path / "fp.json").exists()


def test_one_bad_timestamp_is_counted_once_and_pandas_stays_quiet(tmp_path, capsys):
    csv = _telemetry(tmp_path / "t.csv", ts=(3, "abc"))
    one_line(capsys, _build_csv(tmp_path, csv), "1 value(s)", "line 5", "'abc'")


def test_a_negative_framebuffer_is_refused_by_column_and_line(tmp_path, capsys):
    csv = _telemetry(tmp_path / "t.csv", fb_used_mib=(5, -5000.0))
    one_line(capsys, _build_csv(tmp_path, csv), "fb_used_mib", "line 7", "never negative")


# ------------------------------------------------------------------ fingerprint build --data
def _tables(data: Path, labels: bool = True) -> Path:
    """The smallest tables directory `fingerprint build --data` reads."""
    from features.ingest import write_tables

    ts = pd.date_range("2026-01-01", periods=4, freq="30s", tz="UTC")
    samples = pd.DataFrame({"ts": ts, "node": "n0", "gpu": "0", "uuid": "GPU-0",
                            "namespace": "ns", "pod": "p0",
                            "metric": "DCGM_FI_PROF_SM_ACTIVE", "value": 0.5})
    pods = pd.DataFrame({"namespace": ["ns"], "pod": ["p0"], "workload": ["train"]})
    tables = {"samples": samples, "pods": pods}
    if labels:
        tables["pod_labels"] = pd.DataFrame({"namespace": ["ns", "ns"], "pod": ["p0", "p0"],
                                             "label": ["foresight.io/job-template", "team"],
                                             "value": ["t1", "a"]})
    write_tables(data, tables)
    return data


def test_an_unknown_key_is_refused_with_the_labels_there_are(tmp_path, capsys):
    data = _tables(tmp_path / "d")
    args = ["fingerprint", "build", "--data", str(data), "--out", str(tmp_path / "fp.json")]
    one_line(capsys, main(args + ["--key", "nosuchlabel"]), "nosuchlabel",
             "foresight.io/job-template, team")
    one_line(capsys, main(args + ["--key", ","]), "--key")
    assert not (tmp_path / "fp.json").exists()


def test_another_table_under_the_samples_name_is_one_line(tmp_path, capsys):
    data = _tables(tmp_path / "d")
    queues = pd.DataFrame({"ts": pd.date_range("2026-01-01", periods=3, tz="UTC"),
                           "queue": "q", "metric": "pending", "value": 1.0})
    queues.to_parquet(data / "samples.parquet")
    one_line(capsys, main(["fingerprint", "build", "--data", str(data), "--out",
                           str(tmp_path / "fp.json")]),
             "samples.parquet", "missing column(s) node, gpu, namespace, pod")


def test_a_directory_given_for_a_file_says_so(tmp_path, capsys):
    d = tmp_path / "dir"
    d.mkdir()
    for args in (["fingerprint", "show", "w", "--fingerprint", str(d), "--out",
                  str(tmp_path / "x.png")],
                 ["fingerprint", "build", "--csv", str(d), "--out", str(tmp_path / "f.json")],
                 ["fingerprint", "stragglers", "--csv", str(d)]):
        one_line(capsys, main(args), str(d), "is a directory")


# ------------------------------------------------------------------ fingerprint stragglers
def _pai(path: Path, **edit) -> Path:
    """Per-worker step times in the PAI 2020 mini-batch files' format."""
    steps, workers = np.meshgrid(np.arange(1, 41), np.arange(4), indexing="ij")
    df = pd.DataFrame({"worker": workers.ravel(), "gpu": 25, "time": steps.ravel(),
                       "batch_time_norm": 450.0})
    for col, (row, value) in edit.items():
        df.loc[row, col] = value
    df.to_csv(path)
    return path


@pytest.mark.parametrize("option", ["--worker-col", "--value-col"])
def test_one_column_in_two_roles_is_refused(tmp_path, capsys, option):
    csv = _pai(tmp_path / "pai.csv")
    one_line(capsys, main(["fingerprint", "stragglers", "--csv", str(csv), option, "time"]),
             "--step-col", option, "'time'")


def test_a_negative_step_time_is_refused_by_its_line(tmp_path, capsys):
    csv = _pai(tmp_path / "pai.csv", batch_time_norm=(7, -300.0))
    one_line(capsys, main(["fingerprint", "stragglers", "--csv", str(csv)]),
             "batch_time_norm", "negative", "line 9")


# ------------------------------------------------------------------ fingerprint predict
@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from forecaster.fingerprint.predict import NewJobPredictor

    rng = np.random.default_rng(0)
    w = rng.choice(["a", "b", "c"], 60)
    runs = pd.DataFrame({"workload": w, "image": [f"img/{x}" for x in w], "namespace": "ns",
                         "queue": "q", "gpu_request": 1.0, "priority": 0,
                         "peak_fb_mib": pd.Series(w).map({"a": 4e3, "b": 1.2e4, "c": 3e4})
                         * rng.lognormal(0, 0.1, 60)})
    path = tmp_path_factory.mktemp("pred") / "p"
    NewJobPredictor(n_estimators=10).fit(runs).save(path)
    return path


def _predict(path: Path) -> int:
    return main(["fingerprint", "predict", "--predictor", str(path), "--image", "img/a"])


def test_a_corrupted_predictor_file_is_one_line_naming_it(predictor, tmp_path, capsys):
    bad = shutil.copytree(predictor, tmp_path / "bad")
    (bad / "workload.txt").write_text("garbage")
    one_line(capsys, _predict(bad), str(bad / "workload.txt"), "not a LightGBM model")
    text = (predictor / "peak_fb.txt").read_text()
    (bad / "workload.txt").write_text((predictor / "workload.txt").read_text())
    (bad / "peak_fb.txt").write_text(text[:len(text) // 3])  # truncated: LightGBM aborted
    one_line(capsys, _predict(bad), str(bad / "peak_fb.txt"), "truncated")


def test_another_kind_of_model_is_not_a_new_job_predictor(predictor, tmp_path, capsys):
    other = shutil.copytree(predictor, tmp_path / "demand")
    (other / "manifest.json").write_text(json.dumps({"schema_version": 2, "kind": "demand"}))
    one_line(capsys, _predict(other), "holds a demand model", "not a new-job predictor")
    # a predictor written before manifests named their kind still loads
    old = shutil.copytree(predictor, tmp_path / "old")
    man = json.loads((old / "manifest.json").read_text())
    del man["kind"]
    (old / "manifest.json").write_text(json.dumps(man))
    assert _predict(old) == 0, capsys.readouterr().err
    del man["coverage"]
    (old / "manifest.json").write_text(json.dumps(man))
    one_line(capsys, _predict(old), "not a new-job predictor", "coverage")


# ------------------------------------------------------------------ interference
def _colocate(tmp_path: Path, pairs=None, solo=None) -> Path:
    """A copy of the committed H200 measurement, pairs.csv / solo.csv edited by callables."""
    root = shutil.copytree(H200, tmp_path / "m")
    for name, edit in (("pairs.csv", pairs), ("solo.csv", solo)):
        if edit is not None:
            df = pd.read_csv(root / name)
            edit(df).to_csv(root / name, index=False)
    return root


def _fit(tmp_path: Path, root: Path, *extra: str) -> int:
    return main(["interference", "fit", "--pairs", str(root), "--model-dir",
                 str(tmp_path / "model"), *extra])


def _text(df: pd.DataFrame, col: str, row: int, value: str) -> pd.DataFrame:
    df[col] = df[col].astype(object)
    df.loc[row, col] = value
    return df


@pytest.mark.parametrize("command", ["fit", "evaluate"])
def test_a_string_in_a_numeric_pairs_column_is_named(tmp_path, capsys, command):
    root = _colocate(tmp_path, pairs=lambda d: _text(d, "speed_a", 3, "abc"))
    out = "--model-dir" if command == "fit" else "--out"
    one_line(capsys, main(["interference", command, "--pairs", str(root), out,
                           str(tmp_path / "o")]), "pairs.csv", "speed_a", "'abc'", "line 5")


def test_a_string_in_a_numeric_solo_column_is_named(tmp_path, capsys):
    root = _colocate(tmp_path, solo=lambda d: _text(d, "util_gpu", 2, "high"))
    one_line(capsys, _fit(tmp_path, root), "solo.csv", "util_gpu", "'high'", "line 4")


def test_a_negative_speed_is_refused_not_read_as_unmeasured(tmp_path, capsys):
    root = _colocate(tmp_path, pairs=lambda d: _text(d, "speed_a", 3, "-5"))
    one_line(capsys, _fit(tmp_path, root), "pairs.csv", "speed_a", "negative value -5",
             "line 5")


@pytest.mark.parametrize("command", ["fit", "evaluate"])
def test_a_negative_seed_names_the_option(tmp_path, capsys, command):
    out = "--model-dir" if command == "fit" else "--out"
    one_line(capsys, main(["interference", command, "--pairs", str(H200), out,
                           str(tmp_path / "o"), "--seed=-1"]), "--seed")


def test_pairs_without_solo_windows_fit_with_one_warning(tmp_path, capsys):
    root = _colocate(tmp_path, solo=lambda d: d.head(0))  # a header-only solo.csv
    assert _fit(tmp_path, root) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("warning:") and "56 of 56 pair(s)" in err[0], err


def test_unknown_sharing_modes_are_named_with_the_known_ones(tmp_path, capsys):
    root = _colocate(tmp_path, pairs=lambda d: d.assign(mode="quantum"))
    one_line(capsys, _fit(tmp_path, root), "sharing mode", "quantum", "mps, timeslice")


def test_one_workload_is_what_is_short(tmp_path, capsys):
    root = _colocate(tmp_path, pairs=lambda d: d.assign(b=d["a"].iloc[0], a=d["a"].iloc[0]))
    one_line(capsys, _fit(tmp_path, root), "one workload only")


def test_a_missing_pairs_column_is_said_so(tmp_path, capsys):
    root = _colocate(tmp_path, pairs=lambda d: d.drop(columns="speed_b"))
    one_line(capsys, _fit(tmp_path, root), "pairs.csv", "missing column speed_b")


def test_an_unknown_workload_key_is_said_not_silently_replaced(predictor, capsys):
    args = ["fingerprint", "predict", "--predictor", str(predictor), "--image", "img/b"]
    assert main([*args, "--workload", "b"]) == 0
    out = capsys.readouterr().out
    assert "source=key workload=b" in out and "not in the predictor" not in out
    assert main([*args, "--workload", "resnet50"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "workload 'resnet50' is not in the predictor" in out and "source=model" in out
