"""Which admission margin ranks placements better: a constant (point - q) or the p10's learned
scale (point - q x scale)? Read from held-out rows of bench/interference_h200.py (`--rows`).

For k in 0 (constant) .. 1 (the p10's own scale, point - p10 being q10 x scale), placements are
ranked by point - k x (point - p10), and the threshold is read off the rows themselves so that
at most `--risk` of the unsafe ones (speed < floor) are admitted; the table gives the share of
safe placements refused there, per set and sharing mode. It compares rankings only: the gate's
own q comes from the training folds (forecaster/interference/admission.py).

Usage: nice .venv/bin/python bench/interference_h200.py --part pool --rows /tmp/pool_rows.csv
       .venv/bin/python bench/admission_margin_rank.py --rows /tmp/pool_rows.csv
Writes bench/results/admission_margin_rank.md.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import machine  # noqa: E402

KS = (0.0, 0.25, 0.5, 1.0)


def refused_safe(d: pd.DataFrame, k: float, floor: float, risk: float) -> float:
    """Share of safe rows refused at the threshold admitting at most `risk` of unsafe rows,
    ranked by point - k x (point - p10)."""
    return refused_at((d["model"] - k * (d["model"] - d["p10"])).to_numpy(), d["y"].to_numpy(),
                      floor, risk)


def refused_at(score: np.ndarray, y: np.ndarray, floor: float, risk: float) -> float:
    """Share of safe rows (y >= floor) refused when admitting by `score` at the threshold that
    admits at most `risk` of the unsafe ones."""
    unsafe, safe = y < floor, y >= floor
    if not unsafe.any() or not safe.any():
        return float("nan")
    top = np.sort(score[unsafe])[::-1]
    n_ok = int(np.floor(risk * unsafe.sum()))
    thr = top[n_ok] if n_ok < len(top) else -np.inf  # admitted: score > thr
    return float((score[safe] <= thr).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", required=True)
    ap.add_argument("--floor", type=float, default=0.8)
    ap.add_argument("--risk", type=float, default=0.05)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "admission_margin_rank.md"))
    a = ap.parse_args()
    r = pd.read_csv(a.rows)
    if "set" not in r:
        r["set"] = "all rows"
    lines = ["| set | mode | rows | " + " | ".join(f"k={k:g}" for k in KS) + " |",
             "|---|---|---|" + "---|" * len(KS)]
    groups = [("pool", "both", r)] if r["set"].nunique() > 1 else []
    groups += [(s, "both", g) for s, g in r.groupby("set")]
    groups += [(s, m, g) for (s, m), g in r.groupby(["set", "sharing"])]
    for s, m, g in groups:
        vals = [refused_safe(g, k, a.floor, a.risk) for k in KS]
        lines.append(f"| {s} | {m} | {len(g)} | " + " | ".join(
            "-" if np.isnan(v) else f"{100 * v:.1f} %" for v in vals) + " |")
    text = "\n".join([
        "# Admission margin: constant vs the p10's learned scale (ranking only)", "",
        f"- command: `.venv/bin/python bench/admission_margin_rank.py --rows {a.rows}`",
        f"- machine: {machine()}",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        f"Refused-safe share at the threshold admitting <= {100 * a.risk:g} % of unsafe "
        f"placements at min-speed {a.floor:g}, ranking by point - k x (point - p10) "
        "(k = 0: a constant margin; k = 1: the p10's learned scale):", "", *lines, ""])
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
