"""Interference from telemetry: simulator -> pair table with solo fingerprints -> LOWO.

Run: nice .venv/bin/python bench/interference_synthetic.py [--seeds 0 1 2 3] [--days 3]
Writes bench/results/interference_synthetic.md.

Each seed generates a synthetic cluster (simulator.generate_cluster). features.pairs.
build_pair_table turns its GPU samples and pods into a pair table: co-location episodes, solo
fingerprints from each pod's steps alone on its GPU, speeds from the progress counter. Only
the node -> sharing-mode map (device-plugin configuration, which a real cluster knows) is taken
from the simulator; targets and features come from telemetry. The truth
(`truth["interference"]`) scores (1) the builder's speed estimates and (2) the model's
held-out predictions. Leave one workload (class) out; baselines on the same folds.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from features.pairs import (PROGRESS_METRIC, TELEMETRY_FEATURES, build_pair_table,  # noqa: E402
                            match_truth)
from forecaster.interference_eval import METHODS, lowo_predictions, markdown_table, score  # noqa: E402
from interference_gavel import machine  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402


def cluster_pairs(seed: int, days: float, nodes: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    cfg = SimConfig(seed=seed, days=days, nodes=nodes, gpus_per_node=4, load=1.0,
                    mps_node_fraction=0.5, metrics=tuple(TELEMETRY_FEATURES) + (PROGRESS_METRIC,))
    c = generate_cluster(cfg)
    truth = c.truth["interference"]
    node_of = (c.pods.assign(k=c.pods["namespace"] + "/" + c.pods["pod"])
               .set_index("k")["node"].to_dict())
    gpu_shared = truth[truth["sharing"] != "node"]
    sharing = {node_of.get(f"{r.namespace}/{r.pod}"): r.sharing for r in gpu_shared.itertuples()}
    pairs, eps = build_pair_table(c.samples, c.pods, gpu_sharing=sharing,
                                  gpu_model=cfg.gpu_model)
    tr = match_truth(eps, truth)
    est = {}
    for side in ("a", "b"):
        ok = pairs[f"{side}_speed"].notna() & tr[f"{side}_speed_true"].notna()
        est[side] = (pairs.loc[ok, f"{side}_speed"] - tr.loc[ok, f"{side}_speed_true"]).to_numpy()
    return pairs, tr, {"errors": np.concatenate(list(est.values())),
                       "episodes_true": len(truth), "samples": len(c.samples)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--model-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "interference_synthetic.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    parts, truths, errs, n_true = [], [], [], 0
    for s in args.seeds:
        p, tr, info = cluster_pairs(s, args.days, args.nodes)
        parts.append(p), truths.append(tr), errs.append(info["errors"])
        n_true += info["episodes_true"]
        print(f"seed {s}: {len(p)} episodes, {info['samples']} samples", flush=True)
    pairs = pd.concat(parts, ignore_index=True)
    truth = pd.concat(truths, ignore_index=True)
    keep = pairs[["a_speed", "b_speed"]].notna().any(axis=1).to_numpy()
    pairs, truth = pairs[keep].reset_index(drop=True), truth[keep].reset_index(drop=True)
    build_s = time.perf_counter() - t0
    err = np.concatenate(errs)
    runs = []
    for ms in args.model_seeds:
        preds = lowo_predictions(pairs, {"seed": ms}, truth=truth)
        for target in ("y_true", "y"):
            runs.append(score(preds, target).assign(target=target, seed=ms))
        print(f"model seed {ms} done", flush=True)
    allr = pd.concat(runs)
    cols = ["mae", "spearman", "false_safe", "p10_coverage", "n_rows", "n_unsafe"]
    med = {t: allr[allr.target == t].groupby("method")[cols].median().loc[METHODS].reset_index()
           for t in ("y_true", "y")}
    m = med["y_true"].set_index("method")
    best = m["mae"].drop("model").min()
    red = 1 - m.loc["model", "mae"] / best
    mix = pairs["sharing"].value_counts().to_dict()
    lines = [
        "# Interference from synthetic telemetry (solo fingerprints), leave one workload out",
        "",
        f"Command: `nice .venv/bin/python bench/interference_synthetic.py --seeds "
        f"{' '.join(map(str, args.seeds))} --days {args.days:g} --nodes {args.nodes} "
        f"--model-seeds {' '.join(map(str, args.model_seeds))}`  ",
        f"Machine: {machine()} (shared with other jobs)  ",
        f"Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  ",
        f"Data: {len(args.seeds)} simulated clusters ({args.nodes} nodes x 4 GPUs, "
        f"{args.days:g} days, load 1.0, half the nodes MPS), {len(pairs)} co-location episodes "
        f"with at least one measured side (sharing: {mix}); generation + pair building "
        f"{build_s:.0f} s.",
        "",
        "## Done-when check (scored against the simulator's true speeds)",
        "",
        f"- model MAE {m.loc['model', 'mae']:.4f} vs best baseline {best:.4f}: "
        f"{100 * red:.1f}% lower (target >= 25%): {'PASS' if red >= 0.25 else 'FAIL'}",
        f"- false-safe rate {100 * m.loc['model', 'false_safe']:.1f}% (target < 5%): "
        f"{'PASS' if m.loc['model', 'false_safe'] < 0.05 else 'FAIL'}",
        f"- p10 coverage {100 * m.loc['model', 'p10_coverage']:.1f}% (target 7-13%): "
        f"{'PASS' if 0.07 <= m.loc['model', 'p10_coverage'] <= 0.13 else 'FAIL'}",
        "",
        "## Pair-table builder vs truth",
        "",
        f"Estimated speed (progress counter) minus true speed over {len(err)} measured sides: "
        f"median |error| {np.median(np.abs(err)):.4f}, mean error {np.mean(err):+.4f}, "
        f"p90 |error| {np.quantile(np.abs(err), 0.9):.4f}. Pods without a progress counter "
        "(notebooks, serving) have no measured speed: their sides are not scored.",
        "",
        "## Held-out scores against the true speeds (medians over model seeds)",
        "",
        markdown_table(med["y_true"]),
        "",
        "## Held-out scores against the estimated speeds (what a real cluster can check)",
        "",
        markdown_table(med["y"]),
        "",
        "Protocol: for each workload class w, every episode involving w is held out; model and",
        "baselines are fit on the rest (estimated speeds as targets). False-safe = share of",
        "truly unsafe (speed < 0.85) held-out sides predicted >= 0.85. util_rule = min(1, 100 /",
        "summed GPU utilization) on a shared GPU, 1.0 across GPUs of a node.",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[10:16]))


if __name__ == "__main__":
    main()
