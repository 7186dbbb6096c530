"""Phase segmentation of high-resolution (10 Hz) telemetry CSVs: `fingerprint build --csv`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forecaster.fingerprint.hires import label_hires, segment_hires
from forecaster.fingerprint.segmentation_eval import change_points, match_count

SHARED = Path(__file__).resolve().parents[2] / "shared" / "gpu-h200" / "phases.csv"
VOCAB = {"compute": "train", "eval": "eval", "checkpoint": "checkpoint", "stall": "input_stall",
         "idle": "input_stall"}
# (phase, seconds, util %, mem util %, SM active, power W): eval is *more* intense than
# training, as on the H200; a checkpoint shows only sporadic 0-4 % util, a stall 0 %.
LEVELS = {"train": (80, 35, 0.6, 410), "eval": (99, 58, 0.85, 550),
          "checkpoint": (2.5, 0, 0.0, 122), "input_stall": (0, 0, 0.0, 120)}
PLAN = [("train", 8.0), ("eval", 3.0), ("checkpoint", 2.5), ("input_stall", 2.0)] * 3


def synthetic_csv(path: Path, seed: int = 0, prof_dead_s: float = 5.0) -> pd.DataFrame:
    """A 10 Hz phased training job written like ../shared/gpu-h200/phases.csv; the
    profiling counters read 0 for the first `prof_dead_s` (warm-up)."""
    rng = np.random.default_rng(seed)
    rows, t, i = [], 1.79e9, 0
    for ph, dur in PLAN:
        u, m, sm, pw = LEVELS[ph]
        for _ in range(int(round(dur * 10))):
            if ph == "checkpoint":
                util = float(rng.integers(0, 5))
            elif u == 0:
                util = 0.0
            else:
                util = float(np.clip(u + rng.normal(0, 5 if ph == "train" else 0.5), 0, 100))
            dead = i < prof_dead_s * 10
            rows.append({"ts": t, "phase": ph, "util_gpu": round(util),
                         "util_mem": round(max(m + rng.normal(0, 2) * (m > 0), 0)),
                         "power_w": pw + rng.normal(0, 3), "fb_used_mib": 5830.0,
                         "gpm_sm_active": 0.0 if dead or sm == 0 else
                         max(sm + rng.normal(0, 0.05), 0.0),
                         "gpm_tensor_active": 0.0 if dead else sm / 6})
            t, i = t + 0.1, i + 1
    df = pd.DataFrame(rows)
    df.to_csv(path, index=False)
    return df


def _scores(truth: np.ndarray, pred: np.ndarray, tol: int = 5) -> tuple[float, float]:
    tc, pc = change_points(truth), change_points(pred)
    hits = match_count(tc, pc, tol)
    p, r = hits / max(len(pc), 1), hits / max(len(tc), 1)
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    acc = float(np.mean(np.array([VOCAB.get(x, x) for x in pred]) == truth))
    return f1, acc


def test_csv_fingerprint_recovers_phases_and_levels(tmp_path):
    from foresight.commands.fingerprint import csv_model

    df = synthetic_csv(tmp_path / "job.csv")
    model, ws, truth, notes = csv_model(tmp_path / "job.csv", "job")
    assert notes["prof_not_reporting"] == 50  # 5 s of busy train with dead counters
    assert {"util", "mem", "sm", "power"} <= set(ws.columns)
    pred = model.label_all(ws)[0]
    f1, acc = _scores(df["phase"].to_numpy(), pred)
    assert f1 >= 0.9 and acc >= 0.95, (f1, acc)
    ph = model.fingerprints_["job"]["phases"]
    # the busy level holding most time is training, though eval runs the SMs harder
    assert ph["compute"]["time_share"] > ph["eval"]["time_share"]
    assert ph["eval"]["metrics"]["sm"]["mean"] > ph["compute"]["metrics"]["sm"]["mean"]
    # dead counters are missing, not idle: the compute SM mean stays at its true level
    assert ph["compute"]["metrics"]["sm"]["mean"] == pytest.approx(0.6, rel=0.05)
    assert ph["eval"]["power_w"] == pytest.approx(550, rel=0.05)
    assert ph["checkpoint"]["time_share"] > 0.1


def test_checkpoint_told_from_stall_by_copy_util_only_without_pcie():
    # segment means in HIRES_FEATURES order: sutil, smem, sm, mem, rx, tx, util
    means = np.array([[0.9, 0.6, 0.6, 35, 0, 0, 80], [0.15, 0, 0, 0, 0, 0, 2.5],
                      [0.0, 0, 0, 0, 0, 0, 0.0]])
    counts = np.full((3, 7), 20)
    assert list(label_hires(means, counts, pcie=False)) == ["compute", "checkpoint", "idle"]
    # with PCIe counters and no device->host traffic, sporadic util is not a checkpoint
    assert list(label_hires(means, counts, pcie=True)) == ["compute", "idle", "idle"]


def test_single_busy_level_is_all_compute():
    rng = np.random.default_rng(1)
    n = 300
    util = np.clip(85 + rng.normal(0, 6, n), 0, 100)
    v = np.column_stack([util, 36 + rng.normal(0, 2, n), 0.6 + rng.normal(0, 0.05, n)])
    lab = segment_hires(v, ["util", "mem", "sm"], step_s=0.1)
    assert set(lab) == {"compute"}


def test_cli_build_csv_and_bad_input(tmp_path, capsys):
    from foresight.cli import main

    synthetic_csv(tmp_path / "job.csv")
    out = tmp_path / "fp.json"
    assert main(["fingerprint", "build", "--csv", str(tmp_path / "job.csv"), "--out",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {"compute", "eval", "checkpoint"} <= set(doc["workloads"]["job"]["phases"])
    capsys.readouterr()
    (tmp_path / "bad.csv").write_text("time,util_gpu\n0,1\n")
    assert main(["fingerprint", "build", "--csv", str(tmp_path / "bad.csv"), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no 'ts' column" in err and len(err.splitlines()) == 1
    assert main(["fingerprint", "build", "--csv", str(tmp_path / "job.csv"), "--data",
                 str(tmp_path), "--out", str(out)]) == 2


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/gpu-h200/phases.csv not present")
def test_real_h200_phases_cp_f1():
    from features.segments import truth_labels
    from foresight.commands.fingerprint import csv_model

    model, ws, truth, _ = csv_model(SHARED, "resnet50")
    tl = truth_labels(ws, truth, 0)
    ok = tl != ""
    f1, acc = _scores(tl[ok], model.label_all(ws)[0][ok])
    assert f1 >= 0.9 and acc >= 0.9, (f1, acc)


def test_cli_stragglers_names_the_slow_worker(tmp_path, capsys):
    rng = np.random.default_rng(3)
    rows = [{"time": t, "worker": w, "batch_time_norm": 100 * rng.lognormal(0, 0.02)
             * (1.3 if w == 2 and t >= 60 else 1.0)} for t in range(150) for w in range(6)]
    f = tmp_path / "job.csv"
    pd.DataFrame(rows).to_csv(f)
    from foresight.cli import main

    assert main(["fingerprint", "stragglers", "--csv", str(f)]) == 0  # PAI 2020's columns
    out = capsys.readouterr().out
    assert "1 straggler(s): 2" in out  # worker 2, slow from step 60 on
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"step": [1], "w": [0], "t": [1.0]}).to_csv(bad, index=False)
    assert main(["fingerprint", "stragglers", "--csv", str(bad)]) == 2


def test_cli_stragglers_output(tmp_path, capsys):
    rng = np.random.default_rng(4)
    rows = [{"step": t, "rank": w, "ms": 50 * rng.lognormal(0, 0.02)
             * (1.5 if w == 4 else 1.0)} for t in range(80) for w in range(8)]
    f = tmp_path / "job.csv"
    pd.DataFrame(rows).to_csv(f, index=False)
    from foresight.cli import main

    assert main(["fingerprint", "stragglers", "--csv", str(f), "--step-col", "step",
                 "--worker-col", "rank", "--value-col", "ms"]) == 0
    assert "1 straggler(s): 4" in capsys.readouterr().out
