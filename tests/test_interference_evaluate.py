"""Leave one workload out with a library of other measurements in every fold's training, and
the co-location gate scored at a minimum speed (forecaster.interference.evaluate, and
`foresight interference evaluate --extra / --min-speed`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import forecaster.interference.evaluate as ev
from forecaster.interference.evaluate import gate, lowo_predictions, safety, score
from test_interference import FAST, make_pairs


def _split(p: pd.DataFrame, names: set[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    inside = p["a_workload"].isin(names) & p["b_workload"].isin(names)
    return p[inside].reset_index(drop=True), p[~inside].reset_index(drop=True)


def test_a_library_joins_every_fold_but_never_with_the_held_out_workload(monkeypatch):
    whole = make_pairs(n_workloads=14, n_pairs=500, seed=3)
    mine, library = _split(whole, {f"w0{i}" for i in range(5)})
    seen: dict[str, set[str]] = {}
    real = ev.InterferenceModel

    class Recording(real):
        def fit(self, pairs, *args, **kwargs):
            seen[f"fold{len(seen)}"] = set(pairs["a_workload"]) | set(pairs["b_workload"])
            return super().fit(pairs, *args, **kwargs)

    monkeypatch.setattr(ev, "InterferenceModel", Recording)
    folds = ["w00", "w03"]
    alone = lowo_predictions(mine, FAST, workloads=folds)
    n_alone = len(seen)
    both = lowo_predictions(mine, FAST, workloads=folds, extra=library)
    # only the scored table's pairs are scored, the same rows either way
    assert len(both) == len(alone)
    assert set(both["self_workload"]) | set(both["partner_workload"]) <= {f"w0{i}" for i in range(5)}
    # the library's workloads are in training, the held-out one never is (it has pairs there)
    assert ((library["a_workload"] == "w00") | (library["b_workload"] == "w00")).any()
    for fold, w in zip(list(seen)[n_alone:], folds):
        assert w not in seen[fold] and {"w09", "w13"} <= seen[fold]
    # nine more workloads to learn from: the held-out ones are predicted better
    mae = {k: score(p).set_index("method").loc["model", "mae"]
           for k, p in (("alone", alone), ("library", both))}
    assert mae["library"] < mae["alone"]


def test_the_gate_is_scored_against_the_floor_per_mode():
    y = np.array([0.5, 0.7, 0.9, 0.95, 0.82, 0.3])
    preds = pd.DataFrame({"y": y, "sharing": ["mps"] * 3 + ["timeslice"] * 3,
                          "model_admit": [0.85, 0.6, 0.7, 0.9, 0.81, 0.1],
                          "model_p10": [0.1] * 6, "util_rule": [1.0] * 6})
    assert gate(y, preds["model_admit"].to_numpy() >= 0.8, 0.8) == (
        1 / 3, 1 / 3, 3, 3)
    s = safety(preds, 0.8).set_index(["mode", "policy"])
    assert s.loc[("all", "model (admission bound)"), "admitted_unsafe"] == 1 / 3
    assert s.loc[("mps", "model (admission bound)"), "admitted_unsafe"] == 0.5
    assert s.loc[("mps", "model (admission bound)"), "refused_safe"] == 1.0
    assert s.loc[("timeslice", "model (admission bound)"), "refused_safe"] == 0.0
    assert s.loc[("all", "model (p10)"), "refused_safe"] == 1.0
    assert s.loc[("all", "memaware"), "admitted_unsafe"] == 1.0
    # at a lower floor the same decisions are scored differently
    assert safety(preds, 0.6).set_index(["mode", "policy"]).loc[
        ("all", "model (admission bound)"), "unsafe"] == 2


def test_cli_evaluate_with_a_library_and_a_floor(tmp_path):
    from foresight.cli import main

    whole = make_pairs(n_workloads=9, n_pairs=260, seed=4)
    mine, library = _split(whole, {"w00", "w01", "w02", "w03"})
    mine.to_csv(tmp_path / "mine.csv", index=False)
    library.to_csv(tmp_path / "lib.csv", index=False)
    assert main(["interference", "evaluate", "--pairs", str(tmp_path / "mine.csv"),
                 "--extra", str(tmp_path / "lib.csv"), "--min-speed", "0.7",
                 "--out", str(tmp_path / "ev"), "--n-estimators", "40"]) == 0
    md = (tmp_path / "ev" / "interference_eval.md").read_text()
    assert "also in every fold's training" in md and "min-speed 0.7" in md
    assert "| all | model (admission bound) |" in md
    rows = pd.read_csv(tmp_path / "ev" / "interference_lowo_predictions.csv")
    assert set(rows["self_workload"]) <= {"w00", "w01", "w02", "w03"}
    assert "model_admit" in rows


def test_cli_evaluate_names_the_extra_input_that_is_wrong(tmp_path, capsys):
    from foresight.cli import main

    make_pairs(n_workloads=5, n_pairs=120, seed=2).to_csv(tmp_path / "mine.csv", index=False)
    (tmp_path / "lib.csv").write_text("a_workload,b_workload\nx,y\n")
    code = main(["interference", "evaluate", "--pairs", str(tmp_path / "mine.csv"), "--extra",
                 str(tmp_path / "lib.csv"), "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert code == 2 and "--extra:" in err and "a_speed" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ev").exists()


def test_the_training_mean_baseline_is_per_sharing_mode():
    # time-slicing halves both sides, MPS leaves them near 1: one mean over both is neither
    def pairs(modes, speeds):
        n = len(modes)
        return pd.DataFrame({"a_workload": [f"a{i}" for i in range(n)],
                             "b_workload": [f"b{i}" for i in range(n)], "sharing": modes,
                             "a_speed": speeds, "b_speed": speeds,
                             "a_gpu_util": 90.0, "b_gpu_util": 90.0})
    train = pairs(["timeslice"] * 3 + ["mps"] * 3, [0.4, 0.5, 0.6, 0.9, 1.0, 0.95])
    test = pairs(["mps", "timeslice", "node"], [1.0, 0.5, 1.0])
    got = ev.baselines(train, test)["train_mean"]
    # directed rows: every pair's a side, then its b side
    assert np.allclose(got, [0.95, 0.5, 0.725] * 2)


def test_extra_takes_a_library_directory_less_the_measurement_scored(tmp_path, capsys):
    import shutil

    from features.pairs import library_paths
    from foresight.cli import main

    root = Path(__file__).resolve().parents[1] / "data"
    lib = tmp_path / "lib"
    for name in ("h200c", "h200i", "h200k"):
        shutil.copytree(root / name, lib / name)
    (lib / "notes").mkdir()  # not a measurement: passed over
    # the scored measurement, copied beside the library under another name, is left out
    got = library_paths([lib], [root / "h200k"])
    assert got == [lib / "h200c", lib / "h200i"]
    assert library_paths([lib / "h200c"], [root / "h200k"]) == [lib / "h200c"]  # as given
    code = main(["interference", "evaluate", "--pairs", str(lib / "h200k"), "--extra",
                 str(tmp_path), "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert code == 2 and "--extra: " in err and "or a directory of them" in err
    assert not (tmp_path / "ev").exists()
    # fit stacks every measurement of a library directory
    assert main(["interference", "fit", "--pairs", str(lib), "--model-dir",
                 str(tmp_path / "m")]) == 0
    assert "fitted on 168 pairs" in " ".join(capsys.readouterr().out.split())


def test_cli_evaluate_says_which_folds_the_gate_refused_as_unfamiliar(tmp_path, capsys):
    from foresight.cli import main

    pairs = make_pairs(n_workloads=8, n_pairs=240, seed=5)
    for side in "ab":  # w07 is a workload like no other: a host-bound loop
        odd = pairs[f"{side}_workload"] == "w07"
        for f, v in (("gpu_util", 2.0), ("sm_active", 0.001), ("power_w", 60.0),
                     ("step_s", 50.0)):
            if f"{side}_{f}" in pairs:
                pairs.loc[odd, f"{side}_{f}"] = v
    pairs.to_csv(tmp_path / "p.csv", index=False)
    assert main(["interference", "evaluate", "--pairs", str(tmp_path / "p.csv"),
                 "--min-speed", "0.7", "--out", str(tmp_path / "ev"),
                 "--n-estimators", "30"]) == 0
    out = capsys.readouterr().out
    assert "refused by the gate as unfamiliar" in out and "w07" in out.split("unfamiliar")[-1]
    rows = pd.read_csv(tmp_path / "ev" / "interference_lowo_predictions.csv")
    odd = rows[rows["model_unfamiliar"]]
    assert len(odd) and (odd["model_admit"] == 0).all()
    assert set(odd["fold"]) == {"w07"}
