"""Would other strata make the gate's calibration carry from one set of workloads to another?
Leave one set out on held-out rows of `bench/interference_h200.py --part pool --rows`: q per
stratum from the other sets' rows (conformal risk control at `--risk`, floors 0.75 / 0.8 / 0.85
pooled, as forecaster/interference/admission.py does per mode), scored at min-speed 0.8 on the
set left out. Strata: sharing mode (what the gate uses), and mode crossed with partner util,
self util or the point's band. Also, per mode, risk controlled per workload instead of per row
(`workload_q`: a new workload, not a new row, is the exchangeable unit when the gate meets a
set it never saw).

Usage: nice .venv/bin/python bench/interference_h200.py --part pool --rows /tmp/pool_rows.csv
       .venv/bin/python bench/admission_calibration_sets.py --rows /tmp/pool_rows.csv
Writes bench/results/admission_calibration_sets.md.
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
from benchenv import machine  # noqa: E402

from features.h200 import load_h200_pairs  # noqa: E402
from forecaster.interference.admission import admission_q  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402

FLOOR = 0.8
FLOORS = (FLOOR - 0.05, FLOOR, FLOOR + 0.05)
RISKS = (0.02, 0.03, 0.04, 0.045, 0.05, 0.06)  # the sweep under the strata table
WORKLOAD_RISKS = (0.05, 0.06, 0.07, 0.08)  # per workload the +1 weighs ~1/50: higher risks
SCHEMES = {
    "mode (the gate's)": lambda x: x.sharing,
    "mode x partner util < 60 %": lambda x: x.sharing + np.where(x.partner_gpu_util < 60,
                                                                  "-lo", "-hi"),
    "mode x self util < 60 %": lambda x: x.sharing + np.where(x.self_gpu_util < 60,
                                                               "-lo", "-hi"),
    "mode x point < 0.9": lambda x: x.sharing + np.where(x.model < 0.9, "-lo", "-hi"),
}


def with_util(r: pd.DataFrame) -> pd.DataFrame:
    """The rows with both sides' solo GPU util, read from each set's measurement."""
    shared = ROOT.parent / "shared" / "gpu-h200"
    feats = []
    for s in r["set"].unique():
        src = shared if s == "gpu-h200" else ROOT / "data" / s
        d = directed(load_h200_pairs(src))
        feats.append(d[["sharing", "self_workload", "partner_workload", "self_gpu_util",
                        "partner_gpu_util"]].assign(set=s))
    f = pd.concat(feats).drop_duplicates(["set", "sharing", "self_workload", "partner_workload"])
    return r.merge(f, left_on=["set", "sharing", "self", "partner"],
                   right_on=["set", "sharing", "self_workload", "partner_workload"], how="left")


def workload_q(c: pd.DataFrame, risk: float) -> float:
    """Conformal risk control with one loss per held-out workload (the share of its unsafe
    placements admitted, in [0, 1]): the smallest q with (sum of losses + 1) / (workloads + 1)
    <= risk, floors pooled as admission_q pools them."""
    t = []
    for _, g in c.groupby(["set", "fold"]):
        x = np.concatenate([g["model"].to_numpy()[g["y"].to_numpy() < m] - m for m in FLOORS])
        if len(x):
            t.append(x)
    if not t:
        return 0.0
    qs = np.unique(np.concatenate(t))
    for q in np.r_[0.0, qs[qs >= 0] + 1e-9]:
        if (sum(float((x >= q).mean()) for x in t) + 1) / (len(t) + 1) <= risk:
            return float(q)
    return float(qs.max()) + 1e-9


def leave_set_out(r: pd.DataFrame, risk: float, per_workload: bool = False
                  ) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(set, admitted, unsafe) per set, q per stratum from the other sets' rows."""
    out = []
    for s in r["set"].unique():
        cal, test = r[r["set"] != s], r[r["set"] == s]
        adm = np.zeros(len(test), bool)
        for st in test["st"].unique():
            c = cal[cal["st"] == st]
            q = workload_q(c, risk) if per_workload else admission_q(
                c["model"].values, c["y"].values, np.ones(len(c)), risk, FLOORS)
            t = (test["st"] == st).to_numpy()
            adm[t] = test["model"].to_numpy()[t] - (q or 0.0) >= FLOOR
        out.append((s, adm, test["y"].to_numpy() < FLOOR))
    return out


def row(name: str, res: list[tuple[str, np.ndarray, np.ndarray]]) -> str:
    """One table row: pooled admitted unsafe / refused safe, sets passing, each set's pair."""
    adm = np.concatenate([x[1] for x in res])
    uns = np.concatenate([x[2] for x in res])
    per = [(s, 100 * (ad & un).sum() / un.sum(), 100 * (~ad & ~un).sum() / (~un).sum())
           for s, ad, un in res]
    ok = sum(1 for _, au, rs in per if au <= 5 and rs <= 30)
    return (f"| {name} | {100 * (adm & uns).sum() / uns.sum():.1f} % / "
            f"{100 * (~adm & ~uns).sum() / (~uns).sum():.1f} % | {ok} of {len(per)} | "
            + ", ".join(f"{s} {au:.1f}/{rs:.1f}" for s, au, rs in per) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--risk", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"
                                         / "admission_calibration_sets.md"))
    a = ap.parse_args()
    r = with_util(pd.read_csv(a.rows))
    lines = ["# Admission calibration across sets of workloads: which strata carry?", "",
             f"- command: `.venv/bin/python bench/admission_calibration_sets.py --rows {a.rows}`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- each set's q from the other sets' held-out rows, risk {a.risk:.0%}; admitted "
             f"unsafe / refused safe at min-speed {FLOOR}; a set passes at <= 5 % / <= 30 %", "",
             "| strata | pooled | sets passing | per set |", "|---|---|---|---|"]
    for name, fn in SCHEMES.items():
        lines.append(row(name, leave_set_out(r.assign(st=fn(r)), a.risk)))
    lines += ["", "The gate's strata (sharing mode) at other risks:", "",
              "| risk | pooled | sets passing | per set |", "|---|---|---|---|"]
    for risk in RISKS:
        lines.append(row(f"{risk:.1%}", leave_set_out(r.assign(st=r["sharing"]), risk)))
    lines += ["", "Per mode, the risk controlled per held-out workload (`workload_q`) instead of "
              "per row:", "", "| risk | pooled | sets passing | per set |", "|---|---|---|---|"]
    for risk in WORKLOAD_RISKS:
        lines.append(row(f"{risk:.1%}", leave_set_out(r.assign(st=r["sharing"]), risk, True)))
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
