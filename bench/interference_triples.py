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

With `--rows CSV` (the held-out rows `bench/interference_h200.py --rows` wrote when the set was
first scored as unseen workloads), it also scores the gate itself on the triples: each pod of a
triple is a pending pod of a workload the model never saw, annotated `foresight.io/min-speed:
"0.8"`, joining a GPU whose two residents the model knows (the fold of the pod's own workload);
the gate composes the model's pairwise speeds, p10s or admission bounds by the same rule and
admits when the composed value clears 0.8. Beside it: the summed-util rule over three (speed =
min(1, 1 / the three solo GPU utils summed)) and memaware (three ~15 GB pods fit 141 GB: it
admits all).

Usage: nice .venv/bin/python bench/interference_triples.py --data DIR [--data DIR ...] [--rows CSV]
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


GATE = {"model (admission bound)": "admit", "model (p10)": "p10",
        "model point (no margin)": "model"}


def gate(triples: pd.DataFrame, rows: pd.DataFrame, solo: pd.DataFrame) -> pd.DataFrame:
    """Per pod of each triple: the measured speed and the gate's composed values (see the
    module docstring), from the held-out rows of the pod's own workload's fold."""
    held = rows[rows["fold"] == rows["self"]].set_index(["sharing", "self", "partner"])
    util = solo.set_index(["mode", "workload"])["util_gpu"]
    out = []
    for t in triples.itertuples(index=False):
        pods = (t.a, t.b, t.c)
        for k, me in zip("abc", pods):
            o1, o2 = [p for p in pods if p != me]
            try:
                r1, r2 = held.loc[(t.mode, me, o1)], held.loc[(t.mode, me, o2)]
            except KeyError:
                continue
            row = {"mode": t.mode, "pod": me, "y": float(getattr(t, f"speed_{k}"))}
            for name, col in GATE.items():
                v1, v2 = (r[col] if np.isfinite(r[col]) else r["p10"] for r in (r1, r2))
                row[name] = float(combined(delay(v1) + delay(v2)))
            row["util_rule"] = min(1.0, 100.0 / sum(util[(t.mode, w)] for w in pods))
            row["memaware"] = 1.0
            out.append(row)
    g = pd.DataFrame(out)
    return g[np.isfinite(g["y"]) & (g["y"] > 0)]


def gate_table(g: pd.DataFrame) -> list[str]:
    lines = ["| mode | policy | pods | composed MAE | unsafe | admitted unsafe | safe | "
             "refused safe |", "|---|---|---|---|---|---|---|---|"]
    for mode, d in [("both", g), *g.groupby("mode")]:
        y = d["y"].to_numpy()
        unsafe = y < FLOOR
        for name in [*GATE, "util_rule", "memaware"]:
            v = d[name].to_numpy()
            mae = f"{np.mean(np.abs(v - y)):.3f}" if name != "memaware" else "-"
            lines.append(f"| {mode} | {name} | {len(d)} | {mae} | {int(unsafe.sum())} | "
                         f"{int((unsafe & (v >= FLOOR)).sum())} | {int((~unsafe).sum())} | "
                         f"{int((~unsafe & (v < FLOOR)).sum())} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--rows", type=Path, default=None,
                    help="held-out rows of the first score of the (one) --data set")
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
    if a.rows is not None:
        if len(a.data) != 1:
            raise SystemExit("error: --rows goes with one --data set (the one it scored)")
        g = gate(pd.read_csv(Path(a.data[0]) / "triples.csv"), pd.read_csv(a.rows),
                 pd.read_csv(Path(a.data[0]) / "solo.csv"))
        lines[2] = lines[2][:-1] + f" --rows {a.rows}`"
        lines += ["", "## The co-location gate on three pods (a pending pod of an unseen workload, "
                  f"two known residents, `foresight.io/min-speed: \"{FLOOR}\"`)", "",
                  f"Rows: `{a.rows}` (the model's held-out predictions from the set's first "
                  "score as unseen workloads); counts are pods.", "", *gate_table(g)]
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
