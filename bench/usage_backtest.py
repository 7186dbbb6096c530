"""`foresight usage backtest` on a synthetic cluster: MAE vs. last value / mean of the last
horizon / exponential smoothing, at 10 and 30 minutes, for SM activity, power and framebuffer.

    nice .venv/bin/python bench/usage_backtest.py
Runs the CLI exactly as a user would (simulate -> usage series -> usage backtest). The
current phase comes from the simulator's truth/phases table (`--phases`), standing in for a
phase the job reports or one segmented from its recent samples; SM and framebuffer are also
run without it, to show what the phase adds.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fingerprint_common import RESULTS, ROOT, header, table  # noqa: E402

FS = str(ROOT / ".venv" / "bin" / "foresight")
METRICS = {"sm": "DCGM_FI_PROF_SM_ACTIVE", "power": "DCGM_FI_DEV_POWER_USAGE",
           "fb": "DCGM_FI_DEV_FB_USED"}
TEST_START = "2026-01-09T00:00:00Z"  # days 1-4 train, days 5-6 test
RUNS = [(m, h, ph) for m in METRICS for ph in (True, False) for h in ("10min", "30min")
        if ph or m != "power"]


def run(*args: str) -> float:
    t = time.time()
    subprocess.run([FS, *args], check=True, capture_output=True, text=True)
    return time.time() - t


def error_by_phase(pred: pd.DataFrame, phases: str) -> pd.Series:
    """Share of last-value's absolute error by the pod's phase at the origin."""
    from features.usage_series import attach_phases

    o = pd.to_datetime(pred["origin"], utc=True) - pd.Timedelta("1min")  # the last full bin
    at = attach_phases(pd.DataFrame({"unique_id": pred["unique_id"], "ds": o, "y": 0.0}),
                       pd.read_parquet(phases), "1min")
    err = (pred["last_value"] - pred["y_true"]).abs()
    return err.groupby(at["phase"].to_numpy()).sum() / err.sum()


def seed_noise(series: Path, phases: str, seeds=range(4)) -> list[float]:
    """MAE of the plain preset on SM at 10 min for several LightGBM seeds (the CLI's fit,
    in-process: the CLI has no seed option)."""
    from features.demand_series import read_series_csv, regularize
    from features.usage_series import attach_phases, read_phases
    from forecaster.usage.model import UsageForecaster

    df = attach_phases(regularize(read_series_csv(series), "1min", agg="mean"),
                       read_phases(phases), "1min")
    start = pd.Timestamp(TEST_START)
    out = []
    for seed in seeds:
        p = UsageForecaster(horizon=10, seed=seed).fit(df[df["ds"] < start]).predict_origins(
            df, start)
        out.append(float(np.mean(np.abs(p["p50"] - p["y_true"]))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default=None,
                    help="`usage backtest --preset` (default: the CLI's own default)")
    ap.add_argument("--out", default="usage_backtest.md")
    opts = ap.parse_args()
    command = "nice .venv/bin/python bench/usage_backtest.py " + " ".join(sys.argv[1:])
    t0 = time.time()
    rows, cmds = [], []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        sim = ["simulate", "--out", str(d / "sim"), "--seed", "3", "--days", "6", "--step", "60",
               "--nodes", "8", "--metrics", ",".join(METRICS.values())]
        run(*sim)
        cmds.append("foresight " + " ".join(sim).replace(str(d), "DIR"))
        phases = str(d / "sim" / "truth" / "phases.parquet")
        for m, h, with_phase in RUNS:
            s = d / f"{m}.csv"
            a = ["usage", "series", "--data", str(d / "sim"), "--metric", m, "--freq", "1min",
                 "--out", str(s)]
            if not s.exists():
                run(*a)
            out = d / f"{m}_{h}.csv"
            b = ["usage", "backtest", "--series", str(s), "--freq", "1min", "--horizon", h,
                 "--test-start", TEST_START, "--out", str(out)] + \
                (["--phases", phases] if with_phase else []) + \
                (["--preset", opts.preset] if opts.preset else [])
            wall = run(*b)
            if m == "sm" and h == "10min" and with_phase:
                cmds += ["foresight " + " ".join(a).replace(str(d), "DIR"),
                         "foresight " + " ".join(b).replace(str(d), "DIR")]
            p = pd.read_csv(out)
            mae = {c: float(np.mean(np.abs(p[c] - p["y_true"])))
                   for c in ("p50", "last_value", "mean_last_h", "ses")}
            best = min(("last_value", "mean_last_h", "ses"), key=mae.get)
            rows.append({"metric": m, "horizon": h, "phase": "yes" if with_phase else "no",
                         "origins": len(p),
                         "series": p["unique_id"].nunique(), "MAE_model": mae["p50"],
                         "MAE_last_value": mae["last_value"],
                         "MAE_mean_last_h": mae["mean_last_h"], "MAE_ses": mae["ses"],
                         "best_baseline": best,
                         "gain_vs_best": 1 - mae["p50"] / mae[best],
                         "p10_p90_coverage": float(np.mean((p["y_true"] >= p["p10"]) &
                                                           (p["y_true"] <= p["p90"]))),
                         "wall_s": wall})
            if m == "fb" and h == "30min" and with_phase:
                share = error_by_phase(p, phases)
        noise = seed_noise(d / "sm.csv", phases)
    lines = header("Usage backtest (short-horizon per-pod usage forecast) on a synthetic cluster",
                   command.strip(), [
        "data: 8 nodes x 4 A40, 6 days at 60 s, seed 3; 1-min bins per (pod, GPU); train: "
        f"origins whose horizon ends before {TEST_START}; test: every later origin with a "
        "complete horizon (no-leakage rule of `demand backtest`: features use ds < origin)",
        "gain = 1 - MAE_model / MAE of the best baseline (SES alpha chosen on training data)",
        "commands: " + "; ".join(f"`{c}`" for c in cmds),
        f"wall {time.time() - t0:.0f} s (deterministic model: one run)"])
    fmt_rows = [{k: (f"{v:.4g}" if isinstance(v, float) and k.startswith("MAE") else v)
                 for k, v in r.items()} for r in rows]
    lines += table(fmt_rows)
    lines += ["", "What one LightGBM seed is worth (the noise floor of the rows above): SM, 10 min, "
              "with the phase, `--preset plain` fitted in-process with `seed` 0-3, MAE: " +
              ", ".join(f"{v:.5f}" for v in noise) + f" (mean {np.mean(noise):.5f}, sd "
              f"{np.std(noise, ddof=1):.5f})."]
    for m in METRICS:
        ok = all(r["gain_vs_best"] >= 0.10 for r in rows if r["metric"] == m and
                 r["phase"] == "yes")
        lines += ["", f"Target for {m} (MAE >= 10 % below the best baseline at 10 and 30 min, "
                  f"with the phase): **{'met' if ok else 'not met'}**"]
    lines += ["", "## Reading", "",
              "- One global l1 LightGBM on multi-scale features predicts the level or the "
              "residual on the best baseline; the validation tail of the training window (never"
              " the test window) decides which, and what is served: the model where it beats "
              "the best baseline by 3 % overall, else that baseline everywhere; per series, a "
              "baseline that beats the model there by 3 % replaces it (the `model` column).",
              "- Framebuffer: DCGM_FI_DEV_FB_USED is per GPU, so a (pod, GPU) series also moves"
              " when another pod starts or ends on a shared GPU. Here "
              f"{share.reindex(['compute', 'idle']).fillna(0).sum():.0%} of last-value's 30-min"
              " error falls while the pod itself sits in compute or idle (partners arriving and"
              " leaving, which nothing in the pod's own samples or phase foresees) and "
              f"{share.get('startup', 0.0):.0%} in its own start-up. The validation tail is a "
              "noisy judge of such moves: where the model wins there by a few % it can lose on "
              "the test days (negative gains above), and with 31-leaf trees it lost 15 % at 10 "
              "min; the default trees are now 15 leaves with >= 100 rows a leaf."]
    (RESULTS / opts.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
