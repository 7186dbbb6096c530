"""After the first co-location: how much one or two observed pairs of a new workload teach the
interference model, and its co-location gate, about the rest of that workload's pairs.

Leave one workload out says what the model knows of a workload it never saw co-located. A
cluster sees each new workload co-located sooner or later, and the retraining job then has that
pair (features.pair_build); the model's identity part (forecaster/interference/identity.py)
is what should learn from it. Here, for each held-out workload, K of its pairs per sharing mode
(the "first" co-locations, a seeded draw) join the training set and its other pairs are scored,
for K = 0 (plain leave one workload out), 1, 2, in one run. A window in which a side completed
no step is in training at half the speed its solo rate allows (features.h200.load_h200_pairs;
before, dropped) and in the safety lines as an unsafe placement (bench/interference_h200.py).

Usage: nice .venv/bin/python bench/interference_seen.py [--data DIR | --pool] [--seen 0,1,2]
Writes bench/results/interference_seen_<name>.md (or --out).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import READ_ERRORS, fail, machine  # noqa: E402

from features.h200 import load_h200_pairs, zero_step_bounds  # noqa: E402
from interference_h200 import MIN_SPEED, committed, fmt, lowo, pool, safety, scores  # noqa: E402


def summary(r: pd.DataFrame, k: int) -> list[dict]:
    """One row per mode (and both): the bars' quantities on the rows still held out."""
    out = []
    for mode, g in [("both", r)] + list(r.groupby("sharing")):
        s, safe = scores(g), safety(g)
        gate = safe[(safe["mode"] == "both") & (safe["policy"] == "model (admission bound)")]
        z = g[g["y_upper"].notna()] if "y_upper" in g else g.iloc[:0]
        out.append({"seen": k, "mode": mode, "rows": len(g), "mae": s["mae_model"],
                    "ratio": s["ratio"], "below_p10": s["below_p10"],
                    "admitted_unsafe": gate["admitted_unsafe"].iloc[0],
                    "refused_safe": gate["refused_safe"].iloc[0],
                    "zero_step": len(z), "zero_step_admitted": int((z["admit"] >= MIN_SPEED).sum())})
    return out


def table(rows: list[dict]) -> list[str]:
    head = ("| pairs seen per mode | mode | held-out rows | model MAE | / better rule | below p10 "
            f"| admitted unsafe at {MIN_SPEED} | refused safe | zero-step windows (admitted) |")
    lines = [head, "|" + "---|" * 9]
    for x in rows:
        lines.append(f"| {x['seen']} | {x['mode']} | {x['rows']} | {x['mae']:.3f} | "
                     f"{x['ratio']:.2f}x | {fmt(x['below_p10'], True)} | "
                     f"{fmt(x['admitted_unsafe'], True)} | {fmt(x['refused_safe'], True)} | "
                     f"{x['zero_step']} ({x['zero_step_admitted']}) |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT.parent / "shared" / "gpu-h200"
    ap.add_argument("--data", default=str(default if default.is_dir() else ROOT / "data" / "h200"))
    ap.add_argument("--pool", action="store_true",
                    help="every fold of every dev set (bench/interference_h200.py --part pool)")
    ap.add_argument("--seen", default="0,1,2", help="pairs seen per mode, comma-separated")
    ap.add_argument("--starved", choices=["midpoint", "drop"], default="midpoint",
                    help="how training reads a window with no step (load_h200_pairs; drop: "
                         "as before 2026-11-28)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rows", default=None, help="also write every K's held-out rows to this CSV")
    a = ap.parse_args()
    try:
        ks = sorted({int(x) for x in a.seen.split(",")})
    except ValueError:
        raise SystemExit(f"interference_seen.py: --seen takes whole numbers, not {a.seen!r}")
    if a.pool and a.starved != "midpoint":
        raise SystemExit("interference_seen.py: --starved drop is for --data (no dev set has "
                         "a window with no step)")
    if any(k < 0 for k in ks):
        raise SystemExit("interference_seen.py: --seen must be 0 or more")
    try:
        pairs = None if a.pool else load_h200_pairs(a.data, starved=a.starved)
        extras = [] if a.pool else committed(a.data)
        loaded = [load_h200_pairs(x, starved=a.starved) for x in extras]
        extra = pd.concat(loaded, ignore_index=True) if loaded else None
    except READ_ERRORS as e:
        fail("interference_seen.py", a.data, e)
    params: dict = {}
    runs, t = {}, time.time()
    for k in ks:
        if a.pool:
            runs[k], _ = pool(a.data, params, False, seen=k)
        else:
            folds = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
            runs[k] = lowo(pairs, folds, params, extra, zero_step_bounds(a.data), seen=k)
    # every K scored on the same rows: those no K put in training
    # (a workload name may recur in several sets of the pool: the set is part of the key)
    keys = ["fold", "sharing", "self", "partner"] + (["set"] if a.pool else [])
    common = runs[ks[-1]][keys].drop_duplicates()
    if a.rows:
        pd.concat([r.assign(seen=k) for k, r in runs.items()]).to_csv(a.rows, index=False)
    rows = [x for k in ks for x in summary(runs[k].merge(common, on=keys), k)]
    name = "pool" if a.pool else Path(a.data).name
    cmd = "nice .venv/bin/python bench/interference_seen.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        f"# After the first co-location ({name})", "",
        f"Command: `{cmd.strip()}`  ", f"Machine: {machine()}  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.time() - t:.0f} s  ",
        f"Data: {'every fold of every dev set, the others in training' if a.pool else a.data}"
        f"{'' if a.pool else ' (every fold; the committed sets in training: ' + ', '.join(Path(x).name for x in extras) + ')'}.",
        "", f"Every K is scored on the same rows: the held-out workloads' pairs that none of "
        f"K = {', '.join(map(str, ks))} put in training (the largest K's draw contains the "
        "smaller ones'). The better rule is recomputed on those rows.", "", *table(rows), ""])
    print(text)
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"interference_seen_{name}.md"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
