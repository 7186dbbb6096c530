"""One H200 set measured twice: how far any co-location gate can go when the label it is scored
against is one 3 s window.

The safety lines of bench/interference_h200.py score a gate's decision against one measured
speed per directed pair. A second run of the same pairs on the same GPU, minutes later, is the
best prediction anyone can have of that speed; scored against the first run it gives the floor
under admitted-unsafe and refused-safe that the measurement itself sets. The model's held-out
rows (leave one workload out, the other committed sets in training, as `--part all`) are scored
against each run and against their mean.

Usage: nice .venv/bin/python bench/interference_repeat.py [--data data/h200k]
       [--repeat data/h200k/repeat]
Writes bench/results/interference_repeat_<name>.md (or --out).
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

from features.h200 import load_h200_pairs, zero_step_bounds  # noqa: E402
from forecaster.interference.evaluate import gate  # noqa: E402
from interference_h200 import MIN_SPEED, committed, fmt, lowo  # noqa: E402
from interference_noise import KEY, directed_speeds  # noqa: E402

PARAMS = {"mechanism": True, "mps_form": "conserve", "ts_form": "conserve", "margin": "scaled"}


def label_table(r: pd.DataFrame) -> list[str]:
    """Each policy's safety lines against run 1, run 2 and their mean."""
    other = "the other run's measured speed"
    policies = {"model (admission bound)": lambda lab: r["admit"],
                "model point (no margin)": lambda lab: r["model"],
                "util_rule": lambda lab: r["util_rule"],
                # the repeat as the prediction of a run: the other run's speed
                other: lambda lab: r["y2"] if lab == "run 1" else r["y1"]}
    labels = {"run 1": r["y1"], "run 2": r["y2"], "mean of both": (r["y1"] + r["y2"]) / 2}
    lines = [f"| policy | scored against | unsafe | admitted unsafe at {MIN_SPEED} | safe "
             "| refused safe |", "|---|---|---|---|---|---|"]
    for name, speed in policies.items():
        for lab, y in labels.items():
            if name == other and lab == "mean of both":
                continue
            au, rs, nu, ns = gate(y.to_numpy(), (speed(lab) >= MIN_SPEED).to_numpy(), MIN_SPEED)
            lines.append(f"| {name} | {lab} | {nu} | {fmt(au, True)} | {ns} | {fmt(rs, True)} |")
    return lines


def workload_table(r: pd.DataFrame, solo1: pd.DataFrame, solo2: pd.DataFrame) -> list[str]:
    """Per workload: how far its speeds and its solo rate move between the runs."""
    d = r.drop_duplicates(KEY)
    lines = ["| workload | directed speeds | median / p90 |run 1 - run 2| "
             "| solo rate time-slicing, run 1 / run 2 | solo rate MPS, run 1 / run 2 |",
             "|---|---|---|---|---|"]
    rate = [s.set_index(["mode", "workload"])["rate"] for s in (solo1, solo2)]
    for w, g in d.groupby("self"):
        dif = (g["y1"] - g["y2"]).abs()
        cells = [" / ".join(f"{r.get((m, w), np.nan):.1f}" for r in rate)
                 for m in ("timeslice", "mps")]
        lines.append(f"| {w} | {len(g)} | {dif.median():.3f} / {dif.quantile(0.9):.3f} | "
                     f"{cells[0]} | {cells[1]} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "data" / "h200k"))
    ap.add_argument("--repeat", default=None, help="the second run (default: DATA/repeat)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rep = a.repeat or str(Path(a.data) / "repeat")
    t = time.time()
    try:
        pairs = load_h200_pairs(a.data)
        extras = committed(a.data)
        extra = pd.concat([load_h200_pairs(x) for x in extras], ignore_index=True)
        y1, y2 = directed_speeds(a.data), directed_speeds(rep)
        solo1, solo2 = (pd.read_csv(Path(x) / "solo.csv") for x in (a.data, rep))
    except READ_ERRORS as e:  # a measurement directory that is missing or incomplete
        fail("interference_repeat.py", a.data, e)
    names = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    r = lowo(pairs, names, PARAMS, extra, zero_step_bounds(a.data))
    r = r.join(pd.concat([y1.rename("y1"), y2.rename("y2")], axis=1), on=KEY)
    r = r.dropna(subset=["y1", "y2"]).reset_index(drop=True)
    both = r.drop_duplicates(KEY)
    dif = (both["y1"] - both["y2"]).abs()
    flip = float(np.mean((both["y1"] < MIN_SPEED) != (both["y2"] < MIN_SPEED)))
    cmd = "nice .venv/bin/python bench/interference_repeat.py " + " ".join(sys.argv[1:])
    lines = [f"# One H200 set measured twice: the floor the measurement sets under the safety "
             f"lines ({Path(a.data).name})", "",
             f"Command: `{cmd.strip()}`  ", f"Machine: {machine()}  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
             f"Data: `{a.data}` (run 1) and `{rep}` (run 2, the same pairs, same GPU, after run "
             f"1); the model's folds train on run 1 less the held-out workload and on "
             f"{', '.join(f'`{Path(x).name}`' for x in extras)}; {time.time() - t:.0f} s.", "",
             f"Directed speeds in both runs: {len(both)}; |run 1 - run 2| median "
             f"{dif.median():.3f}, mean {dif.mean():.3f}, p90 {dif.quantile(0.9):.3f}, max "
             f"{dif.max():.3f}. On the other side of min-speed {MIN_SPEED} in the two runs: "
             f"{fmt(flip, True)}.", "",
             "## Safety lines against each run (model rows: leave one workload out, both "
             "folds of each pair)", "", *label_table(r), "",
             "## Per workload (as the pending pod)", "", *workload_table(both, solo1, solo2), "",
             "## How to read it", "",
             "- `the other run's measured speed` is a gate that knew each pair's speed as well as "
             "a second measurement knows it: what no model of the solo fingerprints can beat on "
             "average. Its admitted-unsafe against a run is the share of that run's unsafe "
             "placements that the other run measured at or above the floor.",
             "- Scoring against the mean of both runs halves the variance of the label; the "
             "change from run 1 to the mean is how much of a policy's error is the label's.",
             "- The model is fit on run 1's pairs (less the held-out workload) and the solo "
             "fingerprints of run 1; run 2 never enters training."]
    text = "\n".join(lines)
    print(text)
    out = Path(a.out or ROOT / "bench" / "results" / f"interference_repeat_{Path(a.data).name}.md")
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
