"""Gavel single-GPU co-locations, identity only: leave one workload out, per GPU type.

Run: nice .venv/bin/python bench/interference_gavel.py [--seeds 0 1 2] [--gpus k80 p100 v100]
Writes bench/results/interference_gavel.md. The model and every baseline are computed on the
same folds in the same run; metrics are medians over the seeds (the model's calibration split
and fold assignment depend on the seed; baselines do not).
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from features.pairs import load_gavel_pairs  # noqa: E402
from forecaster.interference.evaluate import METHODS, lowo_predictions, markdown_table, score  # noqa: E402
from benchenv import READ_ERRORS, fail, machine, shown  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "gavel-colocation"
NOTES = {"util_rule": "n/a: Gavel has no utilization",
         "util_linreg": "no utilization: degrades to intercept = training mean"}




def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gpus", nargs="+", default=["k80", "p100", "v100"])
    ap.add_argument("--source", default="physical")
    ap.add_argument("--trace", type=Path, default=TRACES,
                    help="directory holding a gavel_pairs_flat.csv-format table (default: "
                    "the shared one)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "interference_gavel.md"))
    args = ap.parse_args()
    sections, summary = [], []
    for gpu in args.gpus:
        try:
            pairs = load_gavel_pairs(args.trace, gpu, args.source)
        except READ_ERRORS as e:
            fail("interference_gavel.py", args.trace, e)
        runs, t0 = [], time.perf_counter()
        for seed in args.seeds:
            runs.append(score(lowo_predictions(pairs, {"seed": seed})).assign(seed=seed))
        secs = (time.perf_counter() - t0) / len(args.seeds)
        allr = pd.concat(runs)
        med = allr.groupby("method", sort=False)[["mae", "spearman", "false_safe",
                                                  "p10_coverage"]].median().reset_index()
        med = med.set_index("method").loc[METHODS].reset_index()
        mae = med.set_index("method")["mae"]
        best_base = mae.drop("model").min()
        wins = bool(mae["model"] < best_base)
        summary.append(f"| {gpu} | {len(pairs)} | {mae['model']:.4f} | {best_base:.4f} | "
                       f"{100 * (1 - mae['model'] / best_base):.1f}% | {'yes' if wins else 'NO'} |")
        spread = allr[allr.method == "model"]["mae"]
        sections.append(
            f"## {gpu} ({args.source}, {len(pairs)} unordered pairs, "
            f"{int(allr['n_rows'].iloc[0])} held-out directed rows per run, "
            f"{secs:.0f} s per LOWO run)\n\n{markdown_table(med, NOTES)}\n\n"
            f"model MAE per seed: {', '.join(f'{v:.4f}' for v in spread)}\n")
        print(gpu, "model", round(mae["model"], 4), "best baseline", round(best_base, 4),
              flush=True)
    text = "\n".join([
        "# Interference on Gavel (identity only), leave one workload out",
        "",
        f"Command: `nice .venv/bin/python bench/interference_gavel.py --seeds "
        f"{' '.join(map(str, args.seeds))} --gpus {' '.join(args.gpus)}"
        + (f" --trace {args.trace}" if args.trace != TRACES else "") + "`  ",
        f"Machine: {machine()} (shared with other jobs)  ",
        f"Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  ",
        f"Data: `{shown(args.trace / 'gavel_pairs_flat.csv')}`, source={args.source},"
        " scale_a = scale_b = 1, zero throughputs dropped, one row per unordered pair.",
        "",
        "Protocol: for each workload w, every pair involving w (either side) is held out; the",
        "model and baselines are fit on the rest; both directions of each held-out pair are",
        "scored (so each pair is scored in two folds). Metrics are medians over seeds "
        f"{args.seeds}. False-safe = share of truly unsafe (speed < 0.85) held-out rows",
        "predicted >= 0.85. p10 coverage = share of true speeds below the model's p10 (target 10%).",
        "The held-out workload's identity is unknown to the model: it predicts from the known",
        "partner's encodings (sensitivity, aggressiveness, factorization bias) and the priors.",
        "",
        "| GPU | pairs | model MAE | best baseline MAE | reduction | model beats every baseline |",
        "|---|---|---|---|---|---|",
        *summary, "", *sections])
    Path(args.out).write_text(text + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
