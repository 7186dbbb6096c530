"""Interference on a real H200 (time-slicing and MPS), leave one workload out, and the co-location
safety that the p10 gives at a declared minimum speed.

Usage: nice .venv/bin/python bench/interference_h200.py [--data DIR] [--part dev|final|all]
`--data` is a colocate.py output directory (default ../shared/gpu-h200, else data/h200).
Parts: the two workloads drawn before any tuning (seeded: decode_gemv, resnet50_train) are the
final part, scored once; `dev` scores the other six among themselves (their pairs only), `final`
the final workloads' folds with every other pair as training, `all` every workload's fold (what
to run on another measurement: nothing is tuned there). Writes bench/results/interference_h200.md
(or --out).

For each workload w: every pair involving w is held out (both modes), the model and the
baselines are fit on the rest, and both directions of each held-out pair are scored.
Baselines (same folds): `train_mean` = the training mean speed of the row's mode; `util_rule` =
min(1, 100 / summed GPU util). Safety: a pending pod annotated `foresight.io/min-speed: 0.8`
beside a resident: the model admits when the pod's p10 >= 0.8, the rule when its speed >= 0.8,
`memaware` when the pair's memory fits (always on a 141 GB H200: it never looks at speed).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402

from features.h200 import load_h200_pairs  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from forecaster.interference.model import InterferenceModel  # noqa: E402

FINAL = ("decode_gemv", "resnet50_train")  # np.random.default_rng(27).choice(sorted 8, 2)
SAFE, MIN_SPEED = 0.85, 0.8


def lowo(pairs: pd.DataFrame, folds: list[str], params: dict) -> pd.DataFrame:
    """Held-out rows of every fold: y, model, p10, baselines."""
    out = []
    for w in folds:
        test = (pairs["a_workload"] == w) | (pairs["b_workload"] == w)
        train, held = pairs[~test].reset_index(drop=True), pairs[test].reset_index(drop=True)
        m = InterferenceModel(**params).fit(train)
        pred = m.predict(held)
        d, dtr = directed(held), directed(train)
        mean = dtr.groupby("sharing")["y"].mean()
        u = (d["self_gpu_util"] + d["partner_gpu_util"]).to_numpy()
        out.append(pd.DataFrame({
            "fold": w, "sharing": d["sharing"], "self": d["self_workload"],
            "partner": d["partner_workload"], "y": d["y"],
            "model": np.r_[pred["a_speed_pred"], pred["b_speed_pred"]],
            "p10": np.r_[pred["a_speed_p10"], pred["b_speed_p10"]],
            "train_mean": d["sharing"].map(mean).to_numpy(),
            "util_rule": np.minimum(1.0, 100.0 / u)}))
    res = pd.concat(out, ignore_index=True)
    return res[res["y"].notna()].reset_index(drop=True)


def scores(r: pd.DataFrame) -> dict:
    y = r["y"].to_numpy()
    mae = {k: float(np.mean(np.abs(r[k] - y))) for k in ("model", "train_mean", "util_rule")}
    best = min(mae["train_mean"], mae["util_rule"])
    unsafe = y < SAFE
    return {"rows": len(r), **{f"mae_{k}": v for k, v in mae.items()},
            "ratio": mae["model"] / best,
            "below_p10": float(np.mean(y < r["p10"])),
            "miss_085": float(np.mean(r["p10"][unsafe] >= SAFE)) if unsafe.any() else np.nan,
            "n_unsafe_085": int(unsafe.sum())}


def safety(r: pd.DataFrame) -> pd.DataFrame:
    """Admitted-unsafe and refused-safe at MIN_SPEED, per policy and mode."""
    rows = []
    for mode, g in [("both", r)] + list(r.groupby("sharing")):
        y = g["y"].to_numpy()
        unsafe = y < MIN_SPEED
        admits = {"model (p10)": g["p10"].to_numpy() >= MIN_SPEED,
                  "util_rule": g["util_rule"].to_numpy() >= MIN_SPEED,
                  "memaware": np.ones(len(g), bool)}
        for name, adm in admits.items():
            rows.append({"mode": mode, "policy": name, "unsafe": int(unsafe.sum()),
                         "safe": int((~unsafe).sum()),
                         "admitted_unsafe": float(np.mean(adm[unsafe])) if unsafe.any() else np.nan,
                         "refused_safe": float(np.mean(~adm[~unsafe])) if (~unsafe).any() else np.nan})
    return pd.DataFrame(rows)


def fmt(v: float, pct: bool = False) -> str:
    return "n/a" if pd.isna(v) else (f"{100 * v:.1f} %" if pct else f"{v:.3f}")


def report(r: pd.DataFrame, title: str) -> list[str]:
    lines = [f"## {title}", "",
             "| mode | rows | model MAE | train_mean MAE | util_rule MAE | model / better rule "
             "| below p10 | p10 >= 0.85 among speed < 0.85 |", "|---|---|---|---|---|---|---|---|"]
    for mode, g in [("both", r)] + list(r.groupby("sharing")):
        s = scores(g)
        lines.append(f"| {mode} | {s['rows']} | {fmt(s['mae_model'])} | {fmt(s['mae_train_mean'])}"
                     f" | {fmt(s['mae_util_rule'])} | **{s['ratio']:.2f}x** | "
                     f"{fmt(s['below_p10'], True)} | {fmt(s['miss_085'], True)} "
                     f"(of {s['n_unsafe_085']}) |")
    lines += ["", "Per held-out workload (its fold's rows, both directions):", "",
              "| fold | mode | model MAE | better rule MAE | ratio | below p10 |",
              "|---|---|---|---|---|---|"]
    for (w, mode), g in r.groupby(["fold", "sharing"]):
        s = scores(g)
        lines.append(f"| {w} | {mode} | {fmt(s['mae_model'])} | "
                     f"{fmt(min(s['mae_train_mean'], s['mae_util_rule']))} | {s['ratio']:.2f}x | "
                     f"{fmt(s['below_p10'], True)} |")
    lines += ["", f"Co-location safety at `foresight.io/min-speed: \"{MIN_SPEED}\"` (the pending "
              "pod is the row's self, the resident its partner):", "",
              "| mode | policy | unsafe placements | admitted unsafe | safe placements | refused safe |",
              "|---|---|---|---|---|---|"]
    for s in safety(r).itertuples():
        lines.append(f"| {s.mode} | {s.policy} | {s.unsafe} | {fmt(s.admitted_unsafe, True)} | "
                     f"{s.safe} | {fmt(s.refused_safe, True)} |")
    return lines + [""]


NOTES = [
    "## How to read it", "",
    "- The model is the structured part of forecaster/interference/mechanism.py (time-slicing: "
    "round robin from each side's busy share and step time; MPS: concurrent-kernel hogging "
    "from SM activity x busy share, and DRAM) fit per fold, and LightGBM on top: on its "
    "residual, or with its speed as a feature, or not at all, whichever errs least on the "
    "workloads held out inside the training folds (on these few pairs the structure alone "
    "wins in every final fold).",
    "- Step time is not a DCGM field: it comes from the solo step (colocate.py's "
    "`step_median_s`; on a cluster 1 / the progress counter's solo rate). `--no-step` drops "
    "it: time-slicing then falls to the rule, MPS keeps its gain (interference_h200_all_nostep.md).",
    "- Disclosure: the two physical forms were written after reading the whole 8-workload table "
    "(the README's description of the mechanisms and the numbers). The dev/final split "
    "(final: decode_gemv, resnet50_train, drawn with a seed before any parameter choice) "
    "governed the later choices: how the learned part combines (chosen inside the training folds), margins pooled over "
    "modes by band of predicted speed (per mode: 94 % refused-safe on dev), bounded MPS "
    "weights. The bound was found while diagnosing an inner calibration fold that included "
    "the final workloads' rows; final was scored before and after it (safety unchanged).",
    "- The p10 margin is wide because a held-out launch-bound job (small_kernels: busy 29 %, "
    "SM activity 0) collapses beside a hog under MPS (0.05-0.18) where the form predicts "
    "~1.0: calibrated on unseen workloads, the bound has to cover that miss, and so it refuses "
    "most safe placements. Time-slicing's safe pairs sit at 0.80-0.86, too close to 0.8 for a "
    "bound 0.1 wide.", ""]


def main() -> None:
    ap = argparse.ArgumentParser()
    default = ROOT.parent / "shared" / "gpu-h200"
    ap.add_argument("--data", default=str(default if default.is_dir() else ROOT / "data" / "h200"))
    ap.add_argument("--part", choices=["dev", "final", "all"], default="dev")
    ap.add_argument("--mechanism", choices=["on", "off"], default="on")
    ap.add_argument("--trees", type=int, default=None, help="n_estimators of the learned part")
    ap.add_argument("--no-step", action="store_true", help="drop step_s (DCGM fields only)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    pairs = load_h200_pairs(a.data)
    if a.no_step:
        pairs = pairs.drop(columns=["a_step_s", "b_step_s"])
    params = {"mechanism": a.mechanism == "on"}
    if a.trees is not None:
        params["n_estimators"] = a.trees
    names = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    if a.part == "dev":
        pairs = pairs[~pairs["a_workload"].isin(FINAL) & ~pairs["b_workload"].isin(FINAL)]
        folds = [w for w in names if w not in FINAL]
    else:
        folds = [w for w in names if w in FINAL] if a.part == "final" else names
    t = time.time()
    r = lowo(pairs.reset_index(drop=True), folds, params)
    took = time.time() - t
    cmd = "nice .venv/bin/python bench/interference_h200.py " + " ".join(sys.argv[1:])
    lines = [f"# Interference on a real H200, leave one workload out ({a.part})", "",
             f"Command: `{cmd.strip()}`  ", f"Machine: {machine()}  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
             f"Data: `{a.data}` ({len(pairs)} pairs, workloads {', '.join(names)}); folds: "
             f"{', '.join(folds)}; mechanism {a.mechanism}, step time "
             f"{'dropped' if a.no_step else 'from the solo step'}; {took:.0f} s.", "",
             *report(r, "Held-out rows"), *NOTES]
    text = "\n".join(lines)
    print(text)
    if a.out != "-":
        out = Path(a.out or ROOT / "bench" / "results" / f"interference_h200_{a.part}.md")
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
