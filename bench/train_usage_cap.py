"""What the usage kind loses by training on a random subset of its series (usage_max_rows).

Run: nice .venv/bin/python bench/train_usage_cap.py [--gpus 128] [--caps 300000 150000]
         [--seeds 0 1]
Writes bench/results/train_usage_cap.md.

A 7-day, 30 s synthetic history of `--gpus` GPUs is written into partitions, its usage series
built by the out-of-core pass, and the usage kind fitted on the first 6 days (uncapped, then
capped at each size with each seed: the seed draws the series and seeds LightGBM) and
backtested on the last day, every series scored. The training job's default cap is 1M bins;
this size has fewer, so the smaller caps stand for the share of series a larger cluster keeps.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchenv import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from fingerprint_common import table

    from simulator.config import SimConfig
    from simulator.partitioned import write_partitioned
    from training import sources
    from training.kinds import usage
    from training.pipeline import TrainConfig
    from training.streaming import streamed_features

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--caps", type=int, nargs="+", default=[300_000, 150_000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        write_partitioned(SimConfig(seed=0, days=7, nodes=a.gpus // 4, step_s=30, load=1.0,
                                    mps_node_fraction=0.5, metrics=sources.TRAINING_METRICS), tmp)
        h = sources.from_partitions(tmp)
        builds, _, _ = streamed_features(h, TrainConfig(), ("usage",))
        s = builds["usage"]()["series"]
    cut = h.end - TrainConfig().holdout
    train, test = usage.split({"series": s}, cut)
    rows = []
    for cap, seed in [(None, 0)] + [(c, sd) for c in a.caps for sd in a.seeds]:
        cfg = TrainConfig(usage_max_rows=cap, seed=seed)
        c0 = time.process_time()
        model = usage.fit(train, cfg)
        c1 = time.process_time()
        m, _ = usage.score(model, test, train)
        n = len(usage.capped(train["series"], cap, seed))
        rows.append({"cap": f"{cap:,}" if cap else "none", "seed": seed,
                     "training bins": f"{n:,}", "share": f"{n / len(train['series']):.0%}",
                     "MAE": f"{m['mae']:.5f}", "best baseline MAE":
                     f"{min(v for k, v in m.items() if k.startswith('baseline_')):.5f}",
                     "fit CPU s": f"{c1 - c0:.1f}"})
        print(rows[-1], flush=True)
    cmd = "nice .venv/bin/python bench/train_usage_cap.py " + " ".join(sys.argv[1:])
    out = ROOT / "bench" / "results" / "train_usage_cap.md"
    out.write_text("\n".join([
        f"# Usage kind trained on a subset of its series: 7 d x {a.gpus} GPUs at 30 s", "",
        f"- command: `{cmd}`", f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
        f"- usage series: {len(s):,} bins of 2 min, {s['unique_id'].nunique():,} (pod, GPU) "
        f"series; training: before {cut}, backtest: every origin after it (one model per row, "
        "all series scored)", "", *table(rows), ""]) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
