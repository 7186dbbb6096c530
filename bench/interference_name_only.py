"""The interference model as the extender's gate asks it: by workload name only.

The co-location gate (scheduler_hook/scores/colocation.py) and `InterferenceAdapter` know a
pod by its workload key and send the model pairs of names. The retraining job's backtest scores
pairs with their own solo features. This bench runs the retraining job's interference kind on
synthetic cluster histories (the demo's generator; seed 7 is `make demo`'s), splits by time as
the job does, and scores the backtest pairs three ways: with the pairs' features (what the
backtest reports), by name with the model's table of known workloads' solo features (what the
gate gets now), and by name without that table (what the gate got from a model whose trees
serve without the structured part, blend "plain", before the table was kept for every blend).

Usage: nice .venv/bin/python bench/interference_name_only.py [--seeds 7,1,2,3]
Writes bench/results/interference_name_only.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from training.kinds import interference as kind  # noqa: E402
from training.pipeline import TrainConfig  # noqa: E402
from training.sources import synthetic  # noqa: E402


def run(seed: int, days: float, nodes: int) -> dict:
    h = synthetic(seed=seed, days=days, nodes=nodes)
    cfg = TrainConfig()
    train, test = kind.split(kind.prepare(h, cfg), h.end - cfg.holdout)
    m = kind.fit(train, cfg)
    pairs = test["pairs"]
    y = np.r_[pairs["a_speed"].to_numpy(), pairs["b_speed"].to_numpy()]
    ok = np.isfinite(y)

    def mae(df) -> float:
        p = m.predict(df)
        pred = np.r_[p["a_speed_pred"].to_numpy(), p["b_speed_pred"].to_numpy()]
        return float(np.mean(np.abs(pred[ok] - y[ok])))

    names = pairs[["a_workload", "b_workload", "sharing"]]
    table = m.solo_
    out = {"seed": seed, "blend": m.blend_, "sides": int(ok.sum()),
           "features": mae(pairs.drop(columns=["a_speed", "b_speed"])),
           "names + solo table": mae(names)}
    m.solo_ = {}
    out["names, no table"] = mae(names)
    m.solo_ = table
    med = float(np.median(kind._speeds(train["pairs"])))
    out["training median"] = float(np.mean(np.abs(med - y[ok])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="7,1,2,3")
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/interference_name_only.md")
    a = ap.parse_args()
    rows = [run(int(s), a.days, a.nodes) for s in a.seeds.split(",")]
    cols = ["features", "names + solo table", "names, no table", "training median"]
    lines = ["# The interference model asked by workload name, as the extender asks it", "",
             f"- command: `nice .venv/bin/python bench/interference_name_only.py --seeds "
             f"{a.seeds} --days {a.days:g} --nodes {a.nodes}`",
             f"- machine: {machine()}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "- synthetic histories (training.sources.synthetic), the retraining job's time "
             "split (TrainConfig defaults); backtest MAE over both sides of every backtest pair",
             "", "| seed | blend | backtest sides | " + " | ".join(cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['blend']} | {r['sides']} | "
                     + " | ".join(f"{r[c]:.4f}" for c in cols) + " |")
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
