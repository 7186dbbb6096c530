"""Three pods on one GPU: does the rule the co-location gate composes pairs with hold?

Reads a measurement directory of `bench/gpu/colocate_more.py ... --triples N` (its pairs.csv
and triples.csv: the same workloads, the same windows) and, for every pod of every measured
triple, predicts its speed beside the other two from the *measured* pairwise speeds with:
- `delays add` (the gate's and the simulator's rule, scheduler_hook/scores/colocation_gpu.py):
  1 / speed = 1 + (1 / s_ab - 1) + (1 / s_ac - 1);
- `product`: s_ab x s_ac (slowdowns multiply);
- `pairwise min`: min(s_ab, s_ac), what the gate used before it composed (optimistic by
  construction: a third pod can only add delay).
Scores MAE and bias (predicted - measured) per sharing mode, and at `foresight.io/min-speed`
0.8 the pods each rule would call safe that ran under 0.8. The pairs come from the same run,
so this checks the rule, not the model.

Usage: nice .venv/bin/python bench/interference_triples.py --data DIR [--data DIR ...]
Writes bench/results/interference_triples.md. Measured triples: data/h200i (12 triples of its
eight workloads, both modes).
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
from scheduler_hook.scores.colocation_gpu import combined, delay  # noqa: E402

FLOOR = 0.8
RULES = {
    "delays add": lambda s1, s2: combined(delay(s1) + delay(s2)),
    "product": lambda s1, s2: np.clip(s1, 0.01, 1.0) * np.clip(s2, 0.01, 1.0),
    "pairwise min": lambda s1, s2: np.minimum(s1, s2),
}


def pair_speeds(pairs: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """(mode, self, partner) -> measured speed of self beside partner (colocate's pairs.csv)."""
    out = {}
    for r in pairs.itertuples(index=False):
        out[(r.mode, r.a, r.b)] = float(r.speed_a)
        out[(r.mode, r.b, r.a)] = float(r.speed_b)
    return out


def members(triples: pd.DataFrame, speeds: dict) -> pd.DataFrame:
    """One row per pod of each triple: its measured speed and its two measured pairwise
    speeds (NaN where a pair was not measured)."""
    rows = []
    for t in triples.itertuples(index=False):
        pods = (t.a, t.b, t.c)
        for k, me in zip("abc", pods):
            o1, o2 = [p for p in pods if p != me] if len(set(pods)) == 3 else pods[:2]
            rows.append({"mode": t.mode, "pod": me, "y": float(getattr(t, f"speed_{k}")),
                         "s1": speeds.get((t.mode, me, o1), np.nan),
                         "s2": speeds.get((t.mode, me, o2), np.nan)})
    m = pd.DataFrame(rows)
    return m[np.isfinite(m[["y", "s1", "s2"]]).all(axis=1) & (m["y"] > 0)]


def score(m: pd.DataFrame) -> pd.DataFrame:
    """MAE, bias and unsafe-called-safe per mode and rule."""
    out = []
    for mode, g in [("both", m), *m.groupby("mode")]:
        for name, rule in RULES.items():
            pred = rule(g["s1"].to_numpy(), g["s2"].to_numpy())
            err = pred - g["y"].to_numpy()
            unsafe = g["y"].to_numpy() < FLOOR
            out.append({"mode": mode, "rule": name, "pods": len(g),
                        "MAE": float(np.mean(np.abs(err))), "bias": float(np.mean(err)),
                        "unsafe": int(unsafe.sum()),
                        "called_safe": int((unsafe & (pred >= FLOOR)).sum())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/interference_triples.md")
    a = ap.parse_args()
    parts = []
    for d in a.data:
        if not (Path(d) / "triples.csv").is_file():
            raise SystemExit(f"error: {d}/triples.csv not found (run colocate_more.py with "
                             "--triples N)")
        parts.append(members(pd.read_csv(Path(d) / "triples.csv"),
                             pair_speeds(pd.read_csv(Path(d) / "pairs.csv"))))
    m = pd.concat(parts, ignore_index=True)
    t = score(m)
    lines = ["# Three pods on one GPU: composing measured pair speeds", "",
             f"- command: `nice .venv/bin/python bench/interference_triples.py "
             + " ".join(f"--data {d}" for d in a.data) + "`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- {len(m)} pods of measured triples; 'unsafe called safe': measured under "
             f"{FLOOR}, the rule at or above it", "",
             "| mode | rule | pods | MAE | bias | unsafe | unsafe called safe |",
             "|---|---|---|---|---|---|---|"]
    for r in t.itertuples(index=False):
        lines.append(f"| {r.mode} | {r.rule} | {r.pods} | {r.MAE:.3f} | {r.bias:+.3f} | "
                     f"{r.unsafe} | {r.called_safe} |")
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
