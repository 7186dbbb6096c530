"""What the extender's co-location gate knows of a workload that has never shared a GPU.

The extender asks the interference model by workload key. A key the model was trained on
reads its median solo features from the model (forecaster/interference/solo.py); before
2026-11-28 a key seen only in solo windows read none, because the lookup was built from the
pair table alone. The retraining job now hands the model every workload that ran alone
(features.pair_build.workload_solo). This bench measures the difference, leave one workload
out on the real H200 measurements, each held-out workload asked three ways by one fitted
model per fold:

- `given`: both sides' solo features in the request (the API with fields; the bench path of
  interference_h200.py);
- `by name, never seen`: the held-out key and its partner's key only, the held-out workload
  unknown to the model (refused: nothing is calibrated for it), and the same without the
  support check (the extender before 2026-11-28);
- `by name, seen alone`: the same request, the model having learned the held-out workload's
  solo fingerprint (its median over the measurement's windows) as the retraining job now does.

Training of a fold: the scored set's pairs without the held-out workload plus the other
committed measurements (less every pair of a workload of that name), as
interference_h200.py's `committed` rule.

Usage: nice .venv/bin/python bench/interference_cold_start.py [--data DIR ...]
Writes bench/results/interference_cold_start.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from benchenv import READ_ERRORS, fail, machine  # noqa: E402
from features.h200 import load_h200_pairs  # noqa: E402
from features.pairs import SIDE_FEATURES  # noqa: E402
from forecaster.interference.evaluate import admit_at, gate  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from forecaster.interference.model import InterferenceModel  # noqa: E402
from forecaster.interference.solo import with_solo_only  # noqa: E402
from interference_h200 import MIN_SPEED, committed  # noqa: E402

NAMES = ["a_workload", "b_workload", "gpu_model", "sharing"]
WAYS = ("given", "by name, never seen", "by name, never seen, no support check",
        "by name, seen alone")


def solo_row(held: pd.DataFrame, w: str) -> pd.DataFrame:
    """The held-out workload's solo fingerprint: the median of its sides' features over its
    pairs (every pair of a set reads the same solo window per mode)."""
    sides = [held.loc[held[f"{s}_workload"] == w, [f"{s}_{f}" for f in SIDE_FEATURES
                                                   if f"{s}_{f}" in held]]
             .set_axis([f for f in SIDE_FEATURES if f"{s}_{f}" in held], axis=1)
             for s in "ab"]
    return pd.concat(sides).median().to_frame().T.assign(workload=w)


def score_set(data: str) -> pd.DataFrame:
    pairs = load_h200_pairs(data)
    extra = pd.concat([load_h200_pairs(x) for x in committed(data)], ignore_index=True)
    folds = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    out = []
    for w in folds:
        test = (pairs["a_workload"] == w) | (pairs["b_workload"] == w)
        keep = (extra["a_workload"] != w) & (extra["b_workload"] != w)
        train = pd.concat([pairs[~test], extra[keep]], ignore_index=True)
        held = pairs[test].reset_index(drop=True)
        m = InterferenceModel().fit(train)
        asked = held[[c for c in NAMES if c in held]]
        preds = {WAYS[0]: m.predict(held, admit=True), WAYS[1]: m.predict(asked, admit=True)}
        fam, m.familiar_ = m.familiar_, None  # the gate before the support check
        preds[WAYS[2]] = m.predict(asked, admit=True)
        m.familiar_ = fam
        m.solo_ = with_solo_only(m.solo_, solo_row(held, w))  # as fit(train, solo=...) does
        preds[WAYS[3]] = m.predict(asked, admit=True)
        d = directed(held)
        for way, p in preds.items():
            out.append(pd.DataFrame({
                "set": Path(data).name, "fold": w, "way": way, "sharing": d["sharing"],
                "y": d["y"], "model": np.r_[p["a_speed_pred"], p["b_speed_pred"]],
                "admit": admit_at(m, p, held["sharing"].to_numpy(), MIN_SPEED),
                "unfamiliar": np.isinf(np.r_[p["a_speed_unit"], p["b_speed_unit"]])}))
    r = pd.concat(out, ignore_index=True)
    return r[r["y"].notna()].reset_index(drop=True)


def table(r: pd.DataFrame) -> list[str]:
    lines = ["| set | asked | rows | MAE | admitted unsafe | refused safe | refused as unfamiliar |",
             "|---|---|---|---|---|---|---|"]
    for (s, way), g in sorted(r.groupby(["set", "way"]), key=lambda x: (x[0][0],
                                                                          WAYS.index(x[0][1]))):
        y = g["y"].to_numpy()
        au, rs, _, _ = gate(y, g["admit"].to_numpy() >= MIN_SPEED, MIN_SPEED)
        lines.append(f"| {s} | {way} | {len(g)} | {np.mean(np.abs(g['model'] - y)):.3f} | "
                     f"{au:.1%} | {rs:.1%} | {int(g['unfamiliar'].sum())} |")
    return lines


def main() -> None:
    shared = ROOT.parent / "shared" / "gpu-h200"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", default=None,
                    help="colocate.py output directories (default: the shared set, "
                         "data/h200j and data/h200k)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                         "interference_cold_start.md"))
    a = ap.parse_args()
    sets = a.data or [str(shared if shared.is_dir() else ROOT / "data" / "h200"),
                      str(ROOT / "data" / "h200j"), str(ROOT / "data" / "h200k")]
    t = time.time()
    try:
        r = pd.concat([score_set(s) for s in sets], ignore_index=True)
    except READ_ERRORS as e:
        fail("interference_cold_start.py", ", ".join(sets), e)
    cmd = "nice .venv/bin/python bench/interference_cold_start.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# The gate for a workload that has never shared a GPU (asked by workload key)", "",
        f"- command: `{cmd.strip()}`", f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.time() - t:.0f} s",
        f"- data: {', '.join(sets)}; leave one workload out, the other committed measurements "
        "in every fold's training (module docstring); gate at min-speed "
        f"{MIN_SPEED}, all held-out directed rows (zero-step windows at half their bound)", "",
        *table(r), "",
        "`by name, never seen` is what the extender answers for a key it has never seen run: "
        "no solo field to compare, so no calibrated bound, refused whatever its floor "
        "(forecaster/interference/familiar.py); `no support check` is the same model without "
        "that rule, the gate before 2026-11-28, which predicted such a side from missing "
        "features. `by name, seen alone` is what it answers once the retraining job has seen "
        "the workload run alone (features.pair_build.workload_solo). `given` is the request "
        "with both sides' fields.", ""])
    print(text)
    Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
