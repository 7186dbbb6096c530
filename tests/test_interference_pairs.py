"""features.pairs: validation, the Gavel loader, and the pair table built from telemetry."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.pairs import (build_pair_table, load_gavel_pairs, match_truth, read_pairs,
                            validate_pairs)
from foresight.errors import ForesightError

GAVEL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "gavel-colocation"
T0 = pd.Timestamp("2026-01-05T00:00:00Z")


def _telemetry(p2_shared: float = 2.0, p2_after: float = 4.0, p2_still: range = range(0)
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Node n1 with GPUs g0, g1; pods p1 (10 it/s solo) and p2 (4 it/s solo).

    steps 0-9 and 20-29: p1 alone on g0, p2 alone on g1 (a node co-location);
    steps 10-19: both on g0 (a shared GPU), p1 at 6 it/s (speed 0.6), p2 at 2 it/s (0.5);
    a notebook p3 (no progress counter) runs alone on g1 during steps 10-19.
    `p2_shared` / `p2_after`: p2's rate on the shared GPU and in steps 20-29; p2's counter
    stands still in the steps `p2_still` (a checkpoint).
    """
    rows = []
    it = {"p1": 0.0, "p2": 0.0}
    for k in range(30):
        ts = T0 + pd.Timedelta(seconds=30 * k)
        shared = 10 <= k < 20
        place = {"p1": "g0", "p2": "g0" if shared else "g1"}
        rate = {"p1": 6.0 if shared else 10.0,
                "p2": 0.0 if k in p2_still else
                p2_shared if shared else (p2_after if k >= 20 else 4.0)}
        sm = {"g0": 1.0 if shared else 0.8, "g1": 0.4}
        if shared:
            place["p3"] = "g1"
            sm["g1"] = 0.3
        for pod, gpu in place.items():
            if pod in it:
                it[pod] += rate[pod] * 30
                rows.append((ts, "n1", gpu, gpu, "ns", pod, "foresight_app_iterations_total",
                             it[pod]))
            rows.append((ts, "n1", gpu, gpu, "ns", pod, "DCGM_FI_PROF_SM_ACTIVE", sm[gpu]))
            rows.append((ts, "n1", gpu, gpu, "ns", pod, "DCGM_FI_DEV_GPU_UTIL", 100 * sm[gpu]))
    samples = pd.DataFrame(rows, columns=["ts", "node", "gpu", "uuid", "namespace", "pod",
                                          "metric", "value"])
    pods = pd.DataFrame({"namespace": "ns", "pod": ["p1", "p2", "p3"],
                         "workload": ["train-a", "train-b", "notebook"]})
    return samples, pods


def test_build_pair_table_finds_episodes_speeds_and_fingerprints():
    samples, pods = _telemetry()
    pairs, eps = build_pair_table(samples, pods, gpu_sharing={"n1": "mps"})
    gpu = pairs[pairs["sharing"] == "mps"]
    assert len(gpu) == 1
    r = gpu.iloc[0]
    assert {r["a_workload"], r["b_workload"]} == {"train-a", "train-b"}
    speeds = {r["a_workload"]: r["a_speed"], r["b_workload"]: r["b_speed"]}
    assert speeds["train-a"] == pytest.approx(0.6, abs=0.03)
    assert speeds["train-b"] == pytest.approx(0.5, abs=0.03)
    # solo fingerprints come from steps alone on the GPU, never from the shared steps
    sm = {r["a_workload"]: r["a_sm_active"], r["b_workload"]: r["b_sm_active"]}
    assert sm == {"train-a": pytest.approx(0.8), "train-b": pytest.approx(0.4)}
    node = pairs[pairs["sharing"] == "node"]
    # p1-p2 across GPUs before and after the shared stretch: two episodes (a gap splits them);
    # p3 is never alone on its node's other GPU next to a pod alone on its own GPU
    assert len(node) == 2 and (node["b_workload"] == "train-b").all()
    assert np.allclose(node[["a_speed", "b_speed"]].to_numpy(), 1.0, atol=0.05)
    assert len(eps) == len(pairs) and (eps["n_steps"] >= 4).all()
    # the table passes the contract (an unmeasured side is allowed)
    validate_pairs(pairs, require_targets=True)


def test_a_side_starved_between_progress_reads_as_starved_not_missing():
    """A counter that stops for the whole shared stretch, and moves right before and right
    after it, is a starved pod (as colocate.py's window with no step): its speed is under
    1 / (solo rate x the stretch), read at half of it (here under the 1e-3 floor)."""
    samples, pods = _telemetry(p2_shared=0.0)
    pairs, _ = build_pair_table(samples, pods, gpu_sharing={"n1": "timeslice"})
    r = pairs[pairs["sharing"] == "timeslice"].iloc[0]
    assert r["a_speed"] == pytest.approx(0.6, abs=0.03) and r["b_speed"] == pytest.approx(1e-3)
    # a counter that stays still after the partner left too (a server out of requests) says
    # nothing about the co-location: missing, as before
    samples, pods = _telemetry(p2_shared=0.0, p2_after=0.0)
    pairs, _ = build_pair_table(samples, pods, gpu_sharing={"n1": "timeslice"})
    r = pairs[pairs["sharing"] == "timeslice"].iloc[0]
    assert r["a_speed"] == pytest.approx(0.6, abs=0.03) and np.isnan(r["b_speed"])
    # nor does a stop no longer than one the pod makes alone (a 270 s checkpoint after it)
    for still, starved in ((range(21, 29), True), (range(21, 30), False)):
        samples, pods = _telemetry(p2_shared=0.0, p2_still=still)
        pairs, _ = build_pair_table(samples, pods, gpu_sharing={"n1": "timeslice"})
        b = pairs[pairs["sharing"] == "timeslice"].iloc[0]["b_speed"]
        assert (b == pytest.approx(1e-3)) if starved else np.isnan(b)


def test_match_truth_weights_by_overlap():
    samples, pods = _telemetry()
    pairs, eps = build_pair_table(samples, pods)
    gpu_row = eps.index[eps["sharing"] == "timeslice"][0]
    e = eps.loc[gpu_row]
    truth = pd.DataFrame({
        "namespace": "ns", "pod": ["p1", "p1", "p2"],
        "partner_namespace": "ns", "partner_pod": ["p2", "p2", "p1"],
        "start": [e.start, e.start + (e.end - e.start) / 2, e.start],
        "end": [e.start + (e.end - e.start) / 2, e.end, e.end],
        "pair_speed": [0.4, 0.8, 0.5]})
    t = match_truth(eps.loc[[gpu_row]], truth)
    assert t.loc[gpu_row, "a_speed_true"] == pytest.approx(0.6)
    assert t.loc[gpu_row, "b_speed_true"] == pytest.approx(0.5)


def test_validate_and_read_errors(tmp_path):
    ok = pd.DataFrame({"a_workload": ["x"], "b_workload": ["y"], "a_speed": [0.5],
                       "b_speed": [np.nan]})
    assert validate_pairs(ok, require_targets=True)["a_speed"].iloc[0] == 0.5
    with pytest.raises(ForesightError, match="no measured speed"):
        validate_pairs(ok.assign(a_speed=np.nan), require_targets=True)
    with pytest.raises(ForesightError, match="sharing"):
        validate_pairs(ok.assign(sharing="magic"), require_targets=False)
    with pytest.warns(UserWarning, match="zzz"):
        validate_pairs(ok.assign(zzz=1), require_targets=False)
    with pytest.raises(ForesightError, match="not found"):
        read_pairs(tmp_path / "missing.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(ForesightError, match="cannot read"):
        read_pairs(bad)


def test_gavel_single_gpu_pairs():
    if not GAVEL.is_dir():
        pytest.skip(f"Gavel traces not present at {GAVEL}")
    p = load_gavel_pairs(GAVEL, "v100")
    assert (p["a_workload"] <= p["b_workload"]).all()  # one row per unordered pair
    assert not p.duplicated(["a_workload", "b_workload"]).any()
    assert ((p["a_speed"] > 0) & (p["a_speed"] <= 2)).all()
    assert p["a_workload"].nunique() > 20
    validate_pairs(p, require_targets=True)


def test_solo_fingerprint_table_from_the_generator():
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from interference_solo import solo_pair_table

    from simulator import SimConfig, generate_cluster

    pairs, truth = solo_pair_table(0, 1.0, 4, solo_hours=6.0)
    assert len(pairs) > 20 and set(pairs["sharing"]) <= {"timeslice", "mps"}
    validate_pairs(pairs, require_targets=True)
    # targets = truth + counter noise of sd 0.012
    err = (pairs["a_speed"] - truth["a_speed_true"]).to_numpy()
    assert 0.005 < np.std(err) < 0.02 and abs(np.mean(err)) < 0.005
    assert truth["b_speed_true"].notna().mean() > 0.9
    # fingerprints are measured, not copied: close to the truth's phase-averaged inputs
    # (DRAM: the telemetry model's SM reading of non-training pods carries an optimizer-step
    # dip they do not have, so SM is not the column to compare)
    cfg = SimConfig(seed=0, days=1.0, nodes=4, gpus_per_node=4, load=1.0,
                    mps_node_fraction=0.5, metrics=("DCGM_FI_DEV_GPU_UTIL",), app_counter=False)
    tr = generate_cluster(cfg).truth["interference"]
    tr = tr[tr["sharing"] != "node"]
    by = tr.groupby(["a_workload"])["a_dram_active"].median()
    got = pairs.groupby("a_workload")["a_dram_active"].median()
    rel = (got / by.reindex(got.index)).to_numpy()
    assert np.all(np.abs(rel - 1) < 0.25) and not np.allclose(rel, 1, atol=1e-6)


GOLDEN = Path(__file__).parent / "fixtures" / "pairs"


def test_build_pair_table_matches_the_reference_output_on_a_simulated_cluster():
    """The vectorized builder gives the rows of the per-episode builder it replaced (git
    b9ce7c1, tests/fixtures/pairs/*.csv.gz written by it on this same simulated history)."""
    from training import sources

    # the golden files were written on the Gavel-calibrated simulator, before `step_s`
    h = sources.synthetic(seed=5, days=1.5, nodes=4, step_s=60, sharing_calibration="gavel",
                          fractional_share=None)
    pairs, eps = build_pair_table(h.samples, h.pods, gpu_sharing=h.gpu_sharing or None,
                                  gpu_model=h.gpu_model)
    # step_s = 1 / the solo rate: a side's co-located rate is speed x solo rate
    for side in ("a", "b"):
        ok = pairs[f"{side}_speed"].notna()
        assert ok.sum() > 50 and pairs.loc[ok, f"{side}_step_s"].between(1.0, 5.0).all()
    pairs = pairs.drop(columns=["a_step_s", "b_step_s"])
    want = pd.read_csv(GOLDEN / "golden_pairs_seed5.csv.gz")
    want_eps = pd.read_csv(GOLDEN / "golden_episodes_seed5.csv.gz")
    assert list(pairs.columns) == list(want.columns)
    assert len(pairs) == len(want) == 462
    for c in want.columns:
        if want[c].dtype == object:
            assert (pairs[c].fillna("").astype(str) == want[c].fillna("").astype(str)).all(), c
        else:
            np.testing.assert_allclose(pairs[c].to_numpy(float), want[c].to_numpy(float),
                                       rtol=1e-7, equal_nan=True, err_msg=c)
    for c in ("a_pod", "b_pod", "sharing", "n_steps"):
        assert (eps[c].astype(str) == want_eps[c].astype(str)).all(), c
    for c in ("start", "end"):
        assert (eps[c] == pd.to_datetime(want_eps[c])).all(), c


def _colocate_dir(root: Path, env: dict | None) -> Path:
    """A colocate.py output directory: three workloads solo and in pairs, both modes."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    solo = []
    for mode in ("timeslice", "mps"):
        for i, w in enumerate(("gemm", "copy", "tiny")):
            solo.append({"mode": mode, "workload": w, "rate": 100.0 + i, "step_median_s": 0.005,
                         "util_gpu": [99.0, 98.0, 25.0][i], "util_mem": [20.0, 99.0, 0.0][i],
                         "power_w": [680.0, 390.0, 120.0][i], "fb_used_mib": 20000.0,
                         "gpm_sm_active": [0.96, 0.99, 0.0][i], "gpm_sm_occupancy": 0.2,
                         "gpm_tensor_active": [0.9, 0.0, 0.0][i], "gpm_dram_active": 0.2})
    pd.DataFrame(solo).to_csv(root / "solo.csv", index=False)
    pairs = [{"mode": m, "a": a, "b": b, "speed_a": sa, "speed_b": sb}
             for m in ("timeslice", "mps")
             for (a, b, sa, sb) in (("gemm", "copy", 0.52, 0.48), ("gemm", "tiny", 0.95, 0.6),
                                    ("copy", "tiny", 0.9, 0.0))]
    pd.DataFrame(pairs).to_csv(root / "pairs.csv", index=False)
    if env is not None:
        (root / "env.json").write_text(json.dumps(env))
    return root


def test_read_pairs_builds_the_table_from_a_colocate_directory(tmp_path):
    d = read_pairs(_colocate_dir(tmp_path / "m", {"gpu": "NVIDIA H100 80GB HBM3"}))
    assert len(d) == 6 and set(d["sharing"]) == {"timeslice", "mps"}
    assert set(d["gpu_model"]) == {"H100 80GB HBM3"}  # from env.json, vendor prefix dropped
    row = d[(d["sharing"] == "mps") & (d["a_workload"] == "gemm") & (d["b_workload"] == "tiny")]
    assert row["a_speed"].item() == 0.95 and row["b_gpu_util"].item() == 25.0
    # the solo step the mechanism needs: 1 / the rate (a mean, as a cluster's progress counter
    # gives it), not colocate.py's median step
    assert row["a_step_s"].item() == pytest.approx(1 / 100.0)
    # "tiny" (102 steps a second solo) completed no step in a 3 s window beside "copy": it ran
    # under 1/306 of its solo speed, and trains at half that (features.h200.load_h200_pairs)
    starved = d[(d["a_workload"] == "copy") & (d["b_workload"] == "tiny")]["b_speed"]
    assert starved.to_numpy() == pytest.approx([0.5 / 306] * 2) and d["b_speed"].notna().all()
    validate_pairs(d, require_targets=True)  # a valid pair table as it stands
    assert set(read_pairs(_colocate_dir(tmp_path / "n", None))["gpu_model"]) == {"H200"}
    solo = pd.read_csv(tmp_path / "m" / "solo.csv")
    solo.loc[solo["workload"] == "gemm", "rate"] = 0.0  # no rate: the median step serves
    solo.to_csv(tmp_path / "m" / "solo.csv", index=False)
    d = read_pairs(tmp_path / "m")
    assert d.loc[d["a_workload"] == "gemm", "a_step_s"].eq(0.005).all()


def test_read_pairs_directory_errors_are_one_line(tmp_path):
    with pytest.raises(ForesightError, match="without a co-location measurement"):
        read_pairs(tmp_path)
    half = _colocate_dir(tmp_path / "half", None)
    (half / "solo.csv").unlink()
    with pytest.raises(ForesightError, match="solo.csv missing"):
        read_pairs(half)
    bad = _colocate_dir(tmp_path / "bad", None)
    pd.DataFrame({"mode": ["mps"], "workload": ["x"]}).to_csv(bad / "solo.csv", index=False)
    with pytest.raises(ForesightError, match="missing column") as exc:
        read_pairs(bad)
    assert "\n" not in str(exc.value)


def test_a_measurement_without_profiling_columns_reads_them_as_missing(tmp_path):
    # an Ampere GPU has no GPM; a tool that samples NVML only writes no gpm_* columns at all
    root = _colocate_dir(tmp_path / "m", None)
    solo = pd.read_csv(root / "solo.csv")
    solo.drop(columns=[c for c in solo if c.startswith("gpm_")]).to_csv(root / "solo.csv",
                                                                        index=False)
    d = read_pairs(root)
    assert len(d) == 6 and d["a_gpu_util"].notna().all()
    assert d[["a_sm_active", "b_tensor_active"]].isna().all().all()
    # the basic NVML fields stay required
    solo.drop(columns=["util_gpu"]).to_csv(root / "solo.csv", index=False)
    with pytest.raises(ForesightError, match="missing column util_gpu$"):
        read_pairs(root)


def test_cli_fits_on_a_colocate_directory(tmp_path, capsys):
    from foresight.cli import main

    # a committed H200 measurement (eight workloads, 28 pairs per mode), as colocate.py wrote it
    root = Path(__file__).resolve().parents[1] / "data" / "h200f"
    assert main(["interference", "fit", "--pairs", str(root), "--model-dir",
                 str(tmp_path / "model")]) == 0
    assert "fitted on 56 pairs" in capsys.readouterr().out
    out = tmp_path / "pred.csv"
    assert main(["interference", "predict", "--model-dir", str(tmp_path / "model"), "--pairs",
                 str(_colocate_dir(tmp_path / "m", None)), "--out", str(out)]) == 0
    pred = pd.read_csv(out)
    assert len(pred) == 6 and pred["a_speed_pred"].between(0.01, 1.0).all()
    # the always-busy pair under time-slicing shares the GPU; the idle-SM partner costs less
    ts = pred[pred["sharing"] == "timeslice"].set_index(["a_workload", "b_workload"])
    assert ts.loc[("gemm", "copy"), "a_speed_pred"] < ts.loc[("gemm", "tiny"), "a_speed_pred"]
    (tmp_path / "empty").mkdir()  # neither a measurement nor a directory of them
    assert main(["interference", "fit", "--pairs", str(tmp_path / "empty"), "--model-dir",
                 str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err
    assert "without a co-location measurement" in err and "Traceback" not in err
    assert (tmp_path / "model").is_dir()  # the model already there is kept


def test_cli_fits_on_several_measurements_stacked(tmp_path, capsys):
    from foresight.cli import main

    data = Path(__file__).resolve().parents[1] / "data"
    model = tmp_path / "model"
    assert main(["interference", "fit", "--pairs", str(data / "h200f"), "--pairs",
                 str(data / "h200g"), "--model-dir", str(model)]) == 0
    out = capsys.readouterr().out
    # 2 x 28 pairs per mode, sixteen workloads: both runs' rows, none lost or merged
    assert "fitted on 112 pairs" in out and "16 workloads" in out
    assert main(["interference", "fit", "--pairs", str(data / "h200f"), "--pairs",
                 str(tmp_path / "missing.csv"), "--model-dir", str(model)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "Traceback" not in err


def test_a_gavel_format_table_reads_as_a_pair_table(tmp_path):
    from features.pairs import read_pairs

    rows = []
    for gpu in ("k80", "v100"):
        # Gavel lists both orders of a pair
        for a, b, sa, sb in (("resnet", "lstm", 0.6, 0.7), ("lstm", "resnet", 0.7, 0.6),
                             ("resnet", "a3c", 0.0, 0.9), ("a3c", "resnet", 0.9, 0.0),
                             ("lstm", "a3c", 0.8, 0.5), ("a3c", "lstm", 0.5, 0.8)):
            rows.append({"source": "physical", "gpu": gpu, "job_a": a, "scale_a": 1,
                         "job_b": b, "scale_b": 1, "solo_thr_a": 10.0, "solo_thr_b": 5.0,
                         "colo_thr_a": 10.0 * sa, "colo_thr_b": 5.0 * sb,
                         "norm_speed_a": sa, "norm_speed_b": sb})
    rows.append({**rows[0], "scale_a": 2})  # a 2-GPU job: not a single-GPU co-location
    rows.append({**rows[0], "source": "simulation"})
    path = tmp_path / "gavel_pairs_flat.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    t = read_pairs(path)
    # per GPU: one row per unordered pair, the unmeasured (0 throughput) pair dropped
    assert sorted(t["gpu_model"]) == ["k80", "k80", "v100", "v100"]
    assert set(zip(t.a_workload, t.b_workload)) == {("lstm", "resnet"), ("a3c", "lstm")}
    r = t[(t.a_workload == "lstm") & (t.b_workload == "resnet")].iloc[0]
    assert (r.a_speed, r.b_speed, r.sharing) == (0.7, 0.6, "timeslice")
    pd.DataFrame(rows[2:4]).to_csv(path, index=False)  # only the unmeasured pair
    with pytest.raises(ForesightError, match="no single-GPU pair"):
        read_pairs(path)


def test_every_workload_that_ran_alone_gets_a_solo_row_co_located_or_not():
    from features.pair_build import pair_parts, workload_solo

    samples, pods = _telemetry()
    solo = workload_solo([pair_parts(samples, gpu_sharing={"n1": "mps"})], pods)
    by = solo.set_index("workload")
    # the notebook never shared a GPU, and has no progress counter: no step time
    assert set(by.index) == {"notebook", "train-a", "train-b"}
    assert by.loc["notebook", "sm_active"] == pytest.approx(0.3)
    assert by.loc["notebook", "gpu_util"] == pytest.approx(30.0)
    assert np.isnan(by.loc["notebook", "step_s"])
    # step time = 1 / the solo rate, as in the pair table (p1: 10 it/s alone)
    assert by.loc["train-a", "step_s"] == pytest.approx(0.1)
    assert by.loc["train-a", "sm_active"] == pytest.approx(0.8)  # alone, not shared
    assert workload_solo([None], pods).empty
