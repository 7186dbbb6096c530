"""Interference model speed: fit on 10,000 pairs (< 10 s), predict 1,000 pairs (< 50 ms).

Run: nice .venv/bin/python bench/interference_speed.py [--runs 3] [--predict-runs 30]
[--threads 1 2]
Writes bench/results/interference_speed.md. The pair table is synthetic (200 workloads with
10 solo features each, time-slicing-like truth), with workload names, so both the identity
encodings and the fingerprint features are exercised. Medians over runs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from features.pairs import validate_pairs  # noqa: E402
from forecaster.interference.model import InterferenceModel  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from interference_gavel import machine  # noqa: E402

FEATS = {"gpu_util": (10, 100), "sm_active": (0.05, 0.95), "sm_occupancy": (0.05, 0.8),
         "tensor_active": (0.0, 0.8), "dram_active": (0.05, 0.9), "mem_copy_util": (5, 80),
         "fb_used_mib": (1000, 40000), "pcie_tx_mbps": (10, 3000), "pcie_rx_mbps": (10, 8000),
         "power_w": (60, 300)}


def synthetic_pairs(n: int, n_workloads: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    w = pd.DataFrame({f: rng.uniform(lo, hi, n_workloads) for f, (lo, hi) in FEATS.items()})
    ia, ib = rng.integers(n_workloads, size=n), rng.integers(n_workloads, size=n)
    out = {"a_workload": [f"w{i}" for i in ia], "b_workload": [f"w{i}" for i in ib],
           "sharing": rng.choice(["timeslice", "mps"], n)}
    for f in FEATS:
        out[f"a_{f}"], out[f"b_{f}"] = w[f].to_numpy()[ia], w[f].to_numpy()[ib]
    sa, sb = out["a_sm_active"], out["b_sm_active"]
    for me, sm_me, sm_o in (("a", sa, sb), ("b", sb, sa)):
        out[f"{me}_speed"] = np.clip(1 / np.maximum(sm_me + sm_o, 1) + rng.normal(0, .02, n),
                                     .02, 1)
    return pd.DataFrame(out)


def _times(fn, runs: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `fn()` over `runs` calls (after one warm-up)."""
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return 1000 * statistics.median(wall), 1000 * statistics.median(cpu)


def _reference_predict(m: InterferenceModel, pairs: pd.DataFrame) -> np.ndarray:
    """The pre-fast-path feature building (DataFrames: validate, directed, _matrix) and the
    point booster, for comparison."""
    X = m._matrix(directed(validate_pairs(pairs, require_targets=False)), m.encoder_)
    for c in m.feature_names_:
        if c not in X:
            X[c] = np.nan
    X = X[m.feature_names_].to_numpy(dtype=np.float64)
    return m.point_.predict(X, num_threads=m.n_threads)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--predict-runs", type=int, default=30)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "interference_speed.md"))
    args = ap.parse_args()
    load0 = os.getloadavg()
    train, test = synthetic_pairs(10_000), synthetic_pairs(1_000, seed=1).drop(
        columns=["a_speed", "b_speed"])
    one = test.head(1)
    ids = ["a_workload", "b_workload", "sharing"]
    rows, detail = [], []
    for threads in args.threads:
        fits, fit_cpu, model = [], [], None
        for _ in range(args.runs):
            t0, c0 = time.perf_counter(), time.process_time()
            model = InterferenceModel(n_threads=threads).fit(train)
            fits.append(time.perf_counter() - t0)
            fit_cpu.append(time.process_time() - c0)
        pred_ms, pred_cpu = _times(lambda: model.predict(test), args.predict_runs)
        fit_s = statistics.median(fits)
        rows.append(f"| {threads} | {fit_s:.2f} s | {statistics.median(fit_cpu):.2f} s | "
                    f"{'PASS' if fit_s < 10 else 'FAIL'} | {pred_ms:.1f} ms | {pred_cpu:.1f} ms | "
                    f"{'PASS' if pred_ms < 50 else 'FAIL'} | {', '.join(f'{v:.2f}' for v in fits)} |")
        print(rows[-1], flush=True)
        # where the predict time goes (wall / CPU medians), and the identity-only model
        X = model.predict_matrix(test)
        ident = InterferenceModel(n_threads=threads).fit(train[ids + ["a_speed", "b_speed"]])
        for what, fn in [
            ("predict, 1 pair", lambda: model.predict(one)),
            ("feature matrix, 1,000 pairs (numpy fast path)", lambda: model.predict_matrix(test)),
            ("the point booster on that matrix (LightGBM; the p10 is a margin on it)",
             lambda: model.point_.predict(X, num_threads=threads)),
            ("previous DataFrame path, 1,000 pairs (for comparison)",
             lambda: _reference_predict(model, test)),
            ("previous DataFrame path, 1 pair", lambda: _reference_predict(model, one)),
            ("identity-only model, predict 1,000 pairs", lambda: ident.predict(test[ids])),
            ("identity-only model, predict 1 pair", lambda: ident.predict(one[ids])),
        ]:
            w, c = _times(fn, args.predict_runs)
            detail.append(f"| {threads} | {what} | {w:.2f} ms | {c:.2f} ms |")
            print(detail[-1], flush=True)
    load = os.getloadavg()
    text = "\n".join([
        "# Interference model speed", "",
        f"Command: `nice .venv/bin/python bench/interference_speed.py --runs {args.runs} "
        f"--predict-runs {args.predict_runs} --threads {' '.join(map(str, args.threads))}`  ",
        f"Machine: {machine()}; load average at the start {load0[0]:.1f} / {load0[1]:.1f} / "
        f"{load0[2]:.1f}, at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (the 2 cores "
        "are shared with other engineers' jobs)  ",
        f"Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  ",
        "Data: 10,000 training pairs / 1,000 scored pairs, 200 workloads, 10 solo features per "
        "side, workload names (identity encodings on). Fit = the whole `fit` (directed rows, "
        "out-of-fold identity encodings, point model, cross-conformal p10 margin with its "
        "inner point fits); predict = the whole "
        f"`predict` on a DataFrame. Medians over {args.runs} fits and {args.predict_runs} "
        "predicts.", "",
        "PASS/FAIL judge the wall-clock medians; CPU time (process time, all threads) is shown "
        "because on a shared, oversubscribed machine wall time mostly measures the other jobs.",
        "", "| LightGBM threads | fit 10k pairs, wall | fit, CPU | < 10 s | predict 1k pairs, "
        "wall | predict, CPU | < 50 ms | fit runs (wall s) |", "|---|---|---|---|---|---|---|---|",
        *rows, "", "## Where predict time goes", "",
        "| threads | what | wall (median) | CPU (median) |", "|---|---|---|---|", *detail])
    Path(args.out).write_text(text + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
