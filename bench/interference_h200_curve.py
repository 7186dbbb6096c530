"""How much do more measured workloads help? A learning curve of the H200 interference model.

One dev set is scored leave one workload out (as `interference_h200.py --part all` does) with
k of the other dev sets in training (besides the scored set's other workloads), k = 0, 2, 4
and all, each k drawn `--draws` times at random (seeded). `data/h200j`, the set aside, is
never used while a committed set is scored (for another measurement it is a dev set, as
`committed()` says). It says whether another device session measuring more workloads is worth its time:
if the safety numbers still move from k = 4 to all, more sets should move them further.

Usage: nice .venv/bin/python bench/interference_h200_curve.py [--data data/h200g] [--draws 2]
Writes bench/results/interference_h200_curve.md (or --out).
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
from benchenv import READ_ERRORS, fail, machine  # noqa: E402
from interference_h200 import committed, lowo, safety, scores  # noqa: E402

from features.h200 import load_h200_pairs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "data" / "h200g"))
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "interference_h200_curve.md"))
    a = ap.parse_args()
    shared = ROOT.parent / "shared" / "gpu-h200"
    others = committed(a.data)
    if shared.is_dir():  # the shared set is a dev set too (data/h200 is its copy)
        others = [x for x in others if Path(x).name != "h200"] + [str(shared)]
    try:
        pairs = load_h200_pairs(a.data)
        loaded = {x: load_h200_pairs(x) for x in others}
    except READ_ERRORS as e:  # a measurement directory that is missing or incomplete
        fail("interference_h200_curve.py", a.data, e)
    names = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    rng = np.random.default_rng(a.seed)
    rows, t0 = [], time.time()
    for k in sorted({0, 2, 4, len(others)}):
        for d in range(1 if k in (0, len(others)) else a.draws):
            pick = sorted(rng.choice(others, k, replace=False)) if k else []
            extra = pd.concat([loaded[x] for x in pick], ignore_index=True) if pick else None
            r = lowo(pairs, names, {}, extra)  # the model's defaults, as the bench's
            s, saf = scores(r), safety(r)
            bound = saf[(saf["mode"] == "both") & (saf["policy"] == "model (admission bound)")]
            workloads = len(set(names).union(*(set(loaded[x]["a_workload"])
                                               | set(loaded[x]["b_workload"]) for x in pick)))
            rows.append({"k": k, "draw": d, "sets": ", ".join(Path(x).name for x in pick) or "-",
                         "workloads": workloads, "ratio": s["ratio"], "below": s["below_p10"],
                         "au": float(bound["admitted_unsafe"].iloc[0]),
                         "rs": float(bound["refused_safe"].iloc[0])})
            print(rows[-1], flush=True)
    lines = ["# Interference on a real H200: does more measured data help? (learning curve)", "",
             "- command: `" + " ".join(["nice .venv/bin/python bench/interference_h200_curve.py",
                                        *sys.argv[1:]]) + "`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"{time.time() - t0:.0f} s",
             f"- scored: `{a.data}`, leave one workload out, its other workloads always in "
             "training; k of the other dev sets added (drawn at random, seeded); workloads = "
             "distinct names in training + the scored set's; "
             + ("`data/h200j` (set aside) never used" if not any(
                 Path(x).name == "h200j" for x in others)
                else "`data/h200j`, set aside for the committed sets, is a dev set here"),
             "- columns: MAE / the better rule; below p10; the admission bound at min-speed "
             "0.8: admitted unsafe / refused safe", "",
             "| k sets | draw | sets in training | workloads | MAE / better rule | below p10 "
             "| admitted unsafe | refused safe |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['draw']} | {r['sets']} | {r['workloads']} | {r['ratio']:.2f}x "
              f"| {100 * r['below']:.1f} % | {100 * r['au']:.1f} % | {100 * r['rs']:.1f} % |"
              for r in rows]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
