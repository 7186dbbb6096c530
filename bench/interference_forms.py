"""The structured part's forms alone (forecaster/interference/mechanism.py), no trees: leave one
workload out over the dev pool's workloads (the shared set and every committed data/h200*
set but the one set aside, interference_h200.SET_ASIDE), MAE per sharing mode of each form on
both directions of every held-out pair (as bench/interference_h200.py scores them).
Also the measured pair totals the `conserve` forms rest on: u_a v_a + u_b v_b per bin of
summed GPU util (u: solo GPU util 0-1, v: co-located speed).

Usage: nice .venv/bin/python bench/interference_forms.py [--out PATH]
Writes bench/results/interference_forms.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from features.h200 import load_h200_pairs  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from forecaster.interference.mechanism import SharingMechanism  # noqa: E402
from interference_h200 import SET_ASIDE, committed  # noqa: E402

FORMS = {"timeslice": ["busy", "ready", "conserve"], "mps": ["hogging", "priority", "conserve"]}
BINS = [0.5, 1.0, 1.25, 1.5, 1.75, 2.01]


def dev_pool() -> pd.DataFrame:
    shared = ROOT.parent / "shared" / "gpu-h200"
    first = shared if (shared / "pairs.csv").is_file() else ROOT / "data" / "h200"
    sets = [str(first)] + committed(str(first))  # committed() leaves out SET_ASIDE
    return pd.concat([load_h200_pairs(x) for x in sets], ignore_index=True)


def lowo_mae(d: pd.DataFrame, mode: str, form: str) -> float:
    """Mean |error| of the form on the held-out pairs' rows of `mode`, both directions."""
    errs = []
    kw = {"ts_form": form} if mode == "timeslice" else {"mps_form": form}
    for w in sorted(set(d["self_workload"])):
        test = ((d["self_workload"] == w) | (d["partner_workload"] == w)).to_numpy()
        m = SharingMechanism(**kw).fit(d[~test].reset_index(drop=True), d["y"][~test].to_numpy())
        held = d[test].reset_index(drop=True)
        own = (held["sharing"] == mode).to_numpy()
        errs.append(np.abs(m.predict(held)[own] - held["y"].to_numpy()[own]))
    return float(np.mean(np.concatenate(errs)))


def totals(pairs: pd.DataFrame) -> list[str]:
    rows = ["| mode | summed util | pairs | u_a v_a + u_b v_b: mean | sd |", "|---|---|---|---|---|"]
    for mode in ("timeslice", "mps"):
        p = pairs[pairs["sharing"] == mode]
        ua, ub = p["a_gpu_util"] / 100, p["b_gpu_util"] / 100
        tot, s = ua * p["a_speed"] + ub * p["b_speed"], ua + ub
        for lo, hi in zip(BINS[:-1], BINS[1:]):
            t = tot[(s > lo) & (s <= hi)].dropna()
            if len(t):
                rows.append(f"| {mode} | {lo:g}-{min(hi, 2):g} | {len(t)} | {t.mean():.2f} | "
                            f"{t.std():.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "interference_forms.md"))
    a = ap.parse_args()
    t0 = time.time()
    pairs = dev_pool()
    d = directed(pairs)
    d = d[d["y"].notna()].reset_index(drop=True)
    rows = ["| mode | form | held-out MAE |", "|---|---|---|"]
    for mode, forms in FORMS.items():
        for form in forms:
            rows.append(f"| {mode} | {form} | {lowo_mae(d, mode, form):.4f} |")
    lines = ["# The structured forms alone, leave one workload out (dev pool)", "",
             "- command: `nice .venv/bin/python bench/interference_forms.py`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.time() - t0:.0f} s",
             f"- data: {d['self_workload'].nunique()} workloads, {len(d)} directed rows "
             f"({', '.join('data/' + x for x in SET_ASIDE)} set aside); each form fit on the "
             "other workloads' rows of both modes", "",
             *rows, "",
             "Measured pair totals (both modes' `conserve` forms scale the pair to min(summed "
             "util, a fitted total)):", "", *totals(pairs), ""]
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
