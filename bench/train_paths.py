"""The retraining job in memory vs from partitions, on one history: time, memory, accuracy.

Run: nice .venv/bin/python bench/train_paths.py [--days 30] [--gpus 256] [--step 300]
         [--holdout 3D] [--group-gpus 16]
Writes bench/results/train_paths.md.

The history is train_bench.py's configuration (the issue's "today": 30 d x 256 GPUs at 300 s,
1,509 s and 12.8 GB on 2026-11-22), written once as `foresight ingest` partitions. Two child
processes then run the same job (every kind, same TrainConfig) on it, each timed with os.wait4:
1. in memory: the partitions read into one sample table (training.sources as before);
2. partitioned: node group by node group (training.streaming), as `foresight train --data` does.
Each kind's backtest metrics are written by the child; the table puts them side by side.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchenv import machine  # noqa: E402
from train_scale import timed_child  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def child(path: str, data: str, out: str, a) -> None:
    import copy

    import pandas as pd

    from features.ingest import read_tables
    from training import sources
    from training.pipeline import TrainConfig, run

    h = sources.from_partitions(data)
    if path == "memory":
        h = copy.copy(h)
        h.samples, h.store = read_tables(data)["samples"], None
    cfg = TrainConfig(holdout=pd.Timedelta(a.holdout), n_estimators=200, threads=1,
                      group_gpus=a.group_gpus)
    with tempfile.TemporaryDirectory() as reg:
        res = run(h, reg, cfg)
    Path(out).write_text(json.dumps({
        "stages": res.stages,
        "kinds": {k.kind: {"status": k.status, "metrics": {m: v for m, v in k.metrics.items()
                                                          if isinstance(v, (int, float))}}
                  for k in res.kinds}}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--step", type=float, default=300)
    ap.add_argument("--holdout", default="3D")
    ap.add_argument("--group-gpus", type=int, default=16)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.data, a.out, a)
        return
    command = "nice .venv/bin/python bench/train_paths.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="foresight-train-paths-") as tmp:
        work, data = Path(tmp), str(Path(tmp) / "data")
        gen = timed_child([sys.executable, str(ROOT / "bench" / "train_scale.py"),
                           "--child-generate", str(a.gpus), "--days", str(a.days), "--step",
                           str(a.step), "--dir", data], work / "gen.log")
        res = {}
        for path in ("memory", "partitioned"):
            t = timed_child([sys.executable, __file__, "--child", path, "--data", data,
                             "--out", str(work / f"{path}.json"), "--days", str(a.days),
                             "--holdout", a.holdout, "--group-gpus", str(a.group_gpus)],
                            work / f"{path}.log")
            res[path] = {**t, **json.loads((work / f"{path}.json").read_text())}
            print(path, t, flush=True)
    out = [f"# Retraining in memory vs from partitions ({a.days:g} d x {a.gpus} GPUs at "
           f"{a.step:g} s, holdout {a.holdout})", "",
           f"- command: `{command}`", f"- machine: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           f"- generate (partitions, one child): {gen['wall_s']:.0f} s wall, "
           f"peak {gen['peak_mb'] / 1024:.1f} GB", "",
           "| path | wall s | CPU s | peak RSS GB | load before -> after |", "|---|---|---|---|---|"]
    for p, r in res.items():
        out.append(f"| {p} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_mb'] / 1024:.2f} | "
                   f"{r['load_before']:.1f} -> {r['load_after']:.1f} |")
    out += ["", "Backtest metrics per kind (same window, same TrainConfig):", "",
            "| kind | metric | in memory | partitioned | equal |", "|---|---|---|---|---|"]
    for k, v in res["memory"]["kinds"].items():
        w = res["partitioned"]["kinds"].get(k, {"metrics": {}, "status": "-"})
        out.append(f"| {k} | status | {v['status']} | {w['status']} | "
                   f"{'yes' if v['status'] == w['status'] else 'NO'} |")
        for m, x in sorted(v["metrics"].items()):
            y = w["metrics"].get(m)
            same = y is not None and (abs(x - y) <= 1e-9 * max(1.0, abs(x)) or x != x and y != y)
            out.append(f"| {k} | {m} | {x:.6g} | {'' if y is None else f'{y:.6g}'} | "
                       f"{'yes' if same else 'NO'} |")
    (RESULTS / "train_paths.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
