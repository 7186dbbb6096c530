"""Checks behind issue 27's closing notes: would anything rank co-locations better for the gate
than the model's point? Read from held-out rows of `bench/interference_h200.py --part pool
--rows`, leave one workload out, nothing chosen from it (no model default changed).

1. Novelty: admitted-unsafe / refused-safe of the gate per quartile of the held-out workload's
   distance to its nearest other workload (standardized solo fingerprint, same sharing mode).
2. Mixes: the point mixed with the summed-util rule or the p10, ranked at exactly `--risk`
   admitted (bench/admission_margin_rank.py's measure), per set.
3. Simple boosters: LightGBM on the raw solo fields plus the structure's speed (the mechanism
   fit per fold), L2 and lower quantiles, and the average of the model's point with the L2
   one; MAE and the same ranking measure. Refits per fold: about 3 min on 2 cores.

Usage: nice .venv/bin/python bench/interference_h200.py --part pool --rows /tmp/pool_rows.csv
       nice .venv/bin/python bench/interference_rank_checks.py --rows /tmp/pool_rows.csv
Writes bench/results/interference_rank_checks.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from admission_margin_rank import refused_at  # noqa: E402
from benchenv import machine  # noqa: E402
from interference_h200 import committed  # noqa: E402

from features.h200 import load_h200_pairs  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from forecaster.interference.mechanism import SharingMechanism  # noqa: E402

FLOOR = 0.8
FIELDS = ["gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
          "mem_copy_util", "power_w", "step_s"]
BOOSTERS = {"L2": {"objective": "regression"},
            "quantile 0.3": {"objective": "quantile", "alpha": 0.3},
            "quantile 0.15": {"objective": "quantile", "alpha": 0.15}}


def dev_sets() -> dict[str, pd.DataFrame]:
    """The pool's sets by name, as bench/interference_h200.py --part pool reads them."""
    shared = ROOT.parent / "shared" / "gpu-h200"
    first = shared if (shared / "pairs.csv").is_file() else ROOT / "data" / "h200"
    names = [str(first)] + committed(str(first))
    return {Path(x).name: load_h200_pairs(x) for x in names}


def novelty(rows: pd.DataFrame, sets: dict[str, pd.DataFrame]) -> np.ndarray:
    """Each row's held-out workload: distance to the nearest other workload's fingerprint."""
    fp = []
    for s, p in sets.items():
        d = directed(p).drop_duplicates(["sharing", "self_workload"])
        fp.append(d[["sharing", "self_workload"] + [f"self_{f}" for f in FIELDS[:5] + ["step_s"]]]
                  .assign(set=s))
    fp = pd.concat(fp, ignore_index=True)
    z = fp.iloc[:, 2:-1].to_numpy(float)
    z[:, 0] /= 100.0
    z[:, -1] = np.log10(np.maximum(z[:, -1], 1e-5))
    z = np.nan_to_num((z - np.nanmean(z, 0)) / np.nanstd(z, 0))
    near = {}
    for i, r in fp.iterrows():
        other = ((fp["sharing"] == r["sharing"]) & (fp["self_workload"] != r["self_workload"]))
        near[(r["set"], r["sharing"], r["self_workload"])] = \
            np.sqrt(((z[other.to_numpy()] - z[i]) ** 2).sum(1)).min()
    return np.array([near[k] for k in zip(rows["set"], rows["sharing"], rows["fold"])])


def _matrix(d: pd.DataFrame, mech: SharingMechanism) -> np.ndarray:
    cols = [d[f"{r}_{f}"].to_numpy(float) for r in ("self", "partner") for f in FIELDS]
    for i in (len(FIELDS) - 1, 2 * len(FIELDS) - 1):  # step: log10
        cols[i] = np.log10(cols[i])
    return np.column_stack(cols + [(d["sharing"] == "mps").to_numpy(float), mech.predict(d)])


def boosters(sets: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Held-out rows of every fold (rows in bench/interference_h200.py's order) with each
    booster's speed: trees on the residual of the structure, fit on the fold's training."""
    params = {"num_leaves": 15, "min_data_in_leaf": 10, "learning_rate": 0.05,
              "verbosity": -1, "num_threads": 2, "seed": 0}
    out = []
    for name, pairs in sets.items():
        for w in sorted(set(pairs["a_workload"]) | set(pairs["b_workload"])):
            test = (pairs["a_workload"] == w) | (pairs["b_workload"] == w)
            tr = [pairs[~test]] + [q[(q["a_workload"] != w) & (q["b_workload"] != w)]
                                   for k, q in sets.items() if k != name]
            tr = directed(pd.concat(tr, ignore_index=True)).dropna(subset=["y"])
            te = directed(pairs[test].reset_index(drop=True)).dropna(subset=["y"])
            mech = SharingMechanism(mps_form="conserve", ts_form="conserve").fit(
                tr, tr["y"].to_numpy())
            xtr, xte = _matrix(tr, mech), _matrix(te, mech)
            row = {"set": name, "fold": w, "y": te["y"].to_numpy()}
            for b, obj in BOOSTERS.items():
                fit = lgb.train({**params, **obj}, lgb.Dataset(xtr, tr["y"] - xtr[:, -1]), 300)
                row[b] = xte[:, -1] + fit.predict(xte)
            out.append(pd.DataFrame(row))
    return pd.concat(out, ignore_index=True)


def ranking(r: pd.DataFrame, scores: dict[str, np.ndarray], risk: float) -> list[str]:
    sets = sorted(r["set"].unique())
    lines = [f"| score | MAE | pool | mean over sets | {' | '.join(sets)} |",
             "|---|---|---|---|" + "---|" * len(sets)]
    y = r["y"].to_numpy()
    for name, sc in scores.items():
        per = [100 * refused_at(sc[(r["set"] == s).to_numpy()], y[(r["set"] == s).to_numpy()],
                                FLOOR, risk) for s in sets]
        lines.append(f"| {name} | {np.mean(np.abs(sc - y)):.4f} | "
                     f"{100 * refused_at(sc, y, FLOOR, risk):.1f} % | {np.mean(per):.1f} % | "
                     + " | ".join(f"{x:.1f}" for x in per) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", required=True)
    ap.add_argument("--risk", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"
                                         / "interference_rank_checks.md"))
    a = ap.parse_args()
    t0 = time.time()
    r = pd.read_csv(a.rows)
    sets = dev_sets()
    r["novelty"] = novelty(r, sets)
    unsafe, adm = r["y"] < FLOOR, r["admit"] >= FLOOR
    lines = ["# Would anything rank co-locations better than the point? (issue 27)", "",
             f"- command: `nice .venv/bin/python bench/interference_rank_checks.py --rows "
             f"{a.rows}`", f"- machine: {machine()}", "",
             "## 1. Novelty of the held-out workload (gate at min-speed 0.8)", "",
             "| quartile of distance | rows | admitted unsafe | refused safe | point MAE |",
             "|---|---|---|---|---|"]
    for q, g in r.groupby(pd.qcut(r["novelty"], 4), observed=True):
        u, ad = unsafe[g.index], adm[g.index]
        lines.append(f"| {q} | {len(g)} | {100 * (u & ad).sum() / u.sum():.1f} % | "
                     f"{100 * (~u & ~ad).sum() / (~u).sum():.1f} % | "
                     f"{np.mean(np.abs(g['model'] - g['y'])):.3f} |")
    m, rule, p10 = (r[c].to_numpy() for c in ("model", "util_rule", "p10"))
    mixes = {"point (the gate's ranking)": m, "p10": p10,
             "point - 0.5 (point - p10)": m - 0.5 * (m - p10)}
    for b in (0.1, 0.2, 0.3):
        mixes[f"point - {b} max(point - rule, 0)"] = m - b * np.maximum(m - rule, 0)
        mixes[f"min(point, rule + {b})"] = np.minimum(m, rule + b)
    lines += ["", f"## 2. Mixes: safe placements refused at exactly {a.risk:.0%} of unsafe "
              "admitted (threshold read off the rows)", "", *ranking(r, mixes, a.risk)]
    b = boosters(sets)
    if not np.allclose(b["y"].to_numpy(), r["y"].to_numpy()):
        sys.exit("the rows are not bench/interference_h200.py --part pool's (order differs)")
    scores = {"point (the model)": m, **{k: b[k].to_numpy() for k in BOOSTERS},
              "average of the point and L2": (m + b["L2"].to_numpy()) / 2}
    lines += ["", "## 3. Simple boosters on the raw solo fields and the structure's speed", "",
              *ranking(r, scores, a.risk), "",
              f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{time.time() - t0:.0f} s"]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
